"""Faults from outside a quantization of the UNet (``sdaccel.cpu.quantize``): the process killed or
interrupted in the middle of a quantization in parts (with a part's child process running, between
two parts, before the stitch, between the two renames that publish the result), a disk that fills
up (while quantizing, while the calibration set or the tensors that cross between parts are
streamed to disk), two quantizations of one destination at once, and the memory watchdog stopping
a part.

Every quantization here is of the tiny SD 1.5 UNet (a 4.4 MB f32 IR, converted once for the module
in a child process), weight-only INT8 in two parts where the case allows (the fastest recipe),
full INT8 on one calibration sample where the tensors crossing between parts are needed. A case
that kills or interrupts runs the quantization in a child Python; the others run here."""

from __future__ import annotations

import errno
import re
import shutil
import signal
import subprocess
import sys
import time
from hashlib import sha256
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.core.faults import FAULT_ENV  # noqa: E402
from sdaccel.cpu import ir_files, quantize_parts  # noqa: E402
from sdaccel.cpu.calibration import CalibrationSet, collect_unet_inputs  # noqa: E402

#: What full INT8 in parts is asked to do where the crossing tensors matter: the cheapest recipe
#: that still writes them (one sample, no SmoothQuant, no bias correction).
CHEAP_FULL = {"subset_size": 1, "smooth_quant_alpha": None, "bias_correction": False}

CONVERT = """
import sys
from pathlib import Path
import numpy as np
import openvino as ov
from diffusers import UNet2DConditionModel
from sdaccel.cpu.convert import convert_unet
from sdaccel.cpu.calibration import CalibrationSet
checkpoint, folder = Path(sys.argv[1]), Path(sys.argv[2])
unet = UNet2DConditionModel.from_pretrained(checkpoint / "unet").eval()
ov.save_model(convert_unet(unet, example_size=8), str(folder / "unet_f32.xml"), compress_to_fp16=False)
rng = np.random.default_rng(0)
CalibrationSet.save(
    [
        {
            "sample": rng.standard_normal((2, 4, 8, 8), dtype=np.float32),
            "timestep": np.array([500], dtype=np.int64),
            "encoder_hidden_states": rng.standard_normal(
                (2, 77, unet.config.cross_attention_dim), dtype=np.float32
            ),
        }
    ],
    folder / "calibration",
)
"""

#: A quantization in parts in a child Python. ``strike`` (a signal) is sent to itself by a thread
#: once the ``nth`` child process it spawned (1: the cut, 2: part 0, 3: part 1) has run a moment:
#: a kill or a Ctrl-C while that child works.
QUANTIZE = """
import os, signal, threading, time
import psutil
from sdaccel.cpu import quantize_parts

def strike(signum, nth):
    me = psutil.Process()
    def watch():
        seen = []
        while len(seen) < nth:
            for child in me.children():
                try:
                    if "spawn_main" in " ".join(child.cmdline()) and child.pid not in seen:
                        seen.append(child.pid)
                except psutil.Error:
                    pass
            time.sleep(0.02)
        time.sleep(0.5)
        print("STRIKE", seen[-1], flush=True)
        os.kill(os.getpid(), signum)
    threading.Thread(target=watch, daemon=True).start()

if {signum!r}:
    strike({signum!r}, {nth!r})
run = quantize_parts.quantize_in_parts({src!r}, {dst!r}, "int8_weights", parts=2, isolate={isolate!r})
print("DONE", [s["stage"] for s in run["stages"]])
"""


def quantizer(unet, dst, *, isolate=False, signum=0, nth=2) -> str:
    """The code of a child that quantizes ``unet`` (weight-only INT8, two parts) into ``dst``."""
    return QUANTIZE.format(src=str(unet["xml"]), dst=str(dst), isolate=isolate, signum=int(signum), nth=nth)


@pytest.fixture(scope="module")
def unet(tmp_path_factory, tiny_sd15):
    """The tiny SD 1.5 UNet as an f32 IR with a one-sample calibration set (converted in a child, so
    that neither PyTorch nor OpenVINO's converter loads into the test process), and the clean
    machine's result of weight-only INT8 in two parts, to compare the results of the cases with."""
    root = tmp_path_factory.mktemp("cpu-quantize-faults")
    done = subprocess.run(
        [sys.executable, "-c", CONVERT, str(tiny_sd15), str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    clean = root / "clean" / "q.xml"
    quantize_parts.quantize_in_parts(root / "unet_f32.xml", clean, "int8_weights", parts=2, isolate=False)
    return {"xml": root / "unet_f32.xml", "calibration": root / "calibration", "clean": clean}


@pytest.fixture
def old(unet, tmp_path):
    """A destination that already holds an IR (a copy of the f32 source: anything that differs
    from a new result): ``out/q.xml`` and its ``.bin``."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy2(unet["xml"], out / "q.xml")
    shutil.copy2(unet["xml"].with_suffix(".bin"), out / "q.bin")
    return out / "q.xml"


def visible(fault_kit, folder) -> dict[str, str]:
    """The digest of the files a reader of ``folder`` sees (the hidden working files left aside)."""
    return {name: sha for name, sha in fault_kit.digest(folder).items() if not name.startswith(".")}


def same_ir(a_xml, b_xml) -> bool:
    """Whether two IRs are the same model: the same weights, byte for byte, and the same graph once
    the names that OpenVINO numbers per process (``Convert_65265``) are set aside."""

    def graph(xml):
        return re.sub(r'(name="[^"]*)_\d+"', r'\1_N"', Path(xml).read_text())

    def weights(xml):
        return sha256(Path(xml).with_suffix(".bin").read_bytes()).hexdigest()

    return weights(a_xml) == weights(b_xml) and graph(a_xml) == graph(b_xml)


def spawned_children() -> list:
    """The child processes this test process spawned that are still alive (not zombies)."""
    import psutil

    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.Error:
            continue
    return alive


# ----------------------------------------------------------------------------------------------
# Killed or interrupted
# ----------------------------------------------------------------------------------------------


def test_a_parent_killed_mid_part_takes_its_child_along_and_the_next_call_cleans_up(
    unet, old, fault_kit, capfd
):
    out, before = old.parent, visible(fault_kit, old.parent)
    killed = fault_kit.run_python(quantizer(unet, old, isolate=True, signum=signal.SIGKILL, nth=2))
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert "STRIKE" in killed.stdout, "the part's child never started"
    # the part's child dies with its parent (a parent-death signal), nothing else of the group lives
    assert fault_kit.wait_for_group_to_end(killed.pgid) == []
    assert visible(fault_kit, out) == before
    assert [n for n in fault_kit.hidden_leftovers(out) if n.startswith(".q-parts-")], "no working folder left"

    # the next call removes the working folder, says so, and gives the clean machine's result
    capfd.readouterr()
    run = quantize_parts.quantize_in_parts(unet["xml"], old, "int8_weights", parts=2, isolate=False)
    assert "Removed 1 unfinished file(s) of q.xml left by an interrupted write" in capfd.readouterr().err
    assert run["parts"] == 2 and fault_kit.hidden_leftovers(out) == []
    assert same_ir(old, unet["clean"])


def test_ctrl_c_mid_part_kills_the_child_and_removes_the_working_folder_at_once(unet, old, fault_kit):
    out, before = old.parent, visible(fault_kit, old.parent)
    child = fault_kit.run_python(quantizer(unet, old, isolate=True, signum=signal.SIGINT, nth=2))
    assert "STRIKE" in child.stdout, child.stderr[-3000:]
    assert child.returncode == -signal.SIGINT and "KeyboardInterrupt" in child.stderr, child.stderr[-3000:]
    assert fault_kit.wait_for_group_to_end(child.pgid) == []
    assert fault_kit.hidden_leftovers(out) == []  # at once: no later call needed
    assert visible(fault_kit, out) == before


@pytest.mark.parametrize(
    ("fault", "returncode"),
    [
        ("quantize.part-done:kill", -9),
        ("quantize.before-stitch:interrupt", -signal.SIGINT),
        ("quantize.between-renames:kill", -9),
        ("export.ir-between-renames#5:kill", -9),  # the 5th save: the stitched result's
    ],
)
def test_a_fault_between_the_steps_leaves_the_old_result_or_puts_it_back(
    unet, old, fault_kit, capfd, fault, returncode
):
    """Between two parts, before the stitch, in the middle of saving the stitched IR, and between
    the renames that publish it: a reader finds the old IR whole, or, between the renames, the next
    writer puts its ``.bin`` back."""
    out, before = old.parent, visible(fault_kit, old.parent)
    child = fault_kit.run_python(quantizer(unet, old), fault)
    assert child.returncode == returncode, child.stderr[-3000:]
    assert "DONE" not in child.stdout
    if fault.startswith("quantize.between-renames"):  # q.bin is new until put back: refused
        from sdaccel.core.checkpoint import CheckpointError
        from sdaccel.cpu.ir_files import check_ir

        with pytest.raises(CheckpointError):
            check_ir(old)
    else:
        assert visible(fault_kit, out) == before
    if fault.endswith(":interrupt"):
        assert fault_kit.hidden_leftovers(out) == []
    else:
        assert fault_kit.hidden_leftovers(out), "the kill left nothing behind: the fault was not injected"
    capfd.readouterr()
    with ir_files.ir_workspace(old):  # what the next writer does first, holding the lock
        pass
    said = capfd.readouterr().err
    assert fault_kit.hidden_leftovers(out) == []
    assert visible(fault_kit, out) == before
    if fault.startswith("quantize.between-renames"):
        assert "Put back q.bin" in said


# ----------------------------------------------------------------------------------------------
# A full disk
# ----------------------------------------------------------------------------------------------


def test_a_quantization_that_cannot_fit_is_refused_before_it_starts(unet, small_disk, fault_kit):
    old = small_disk / "q.xml"
    old.write_text("<net/>")
    old.with_suffix(".bin").write_bytes(b"old")
    before = fault_kit.digest(small_disk)
    for parts in (2, 1):
        with pytest.raises(OSError, match=r"Not enough free disk for .*Free some space") as caught:
            quantize_parts.quantize_in_parts(unet["xml"], old, "int8_weights", parts=parts, isolate=False)
        assert caught.value.errno == errno.ENOSPC
    with pytest.raises(OSError, match=r"Not enough free disk for .*Free some space"):
        quantize_parts.quantize_ir(unet["xml"], old, "int8_weights")
    assert fault_kit.digest(small_disk) == before and fault_kit.hidden_leftovers(small_disk) == []


def test_a_disk_full_while_the_crossing_tensors_stream_stops_cleanly(unet, old, fault_kit, monkeypatch):
    """Full INT8 in parts writes the tensors crossing into part 1 from part 0's child: a full disk
    there stops the quantization with the disk named, the child gone and nothing left."""
    out, before = old.parent, visible(fault_kit, old.parent)
    monkeypatch.setenv(FAULT_ENV, "quantize.crossing-sample-saved:enospc")  # the children inherit it
    with pytest.raises(OSError) as caught:
        quantize_parts.quantize_in_parts(
            unet["xml"], old, "full_int8", unet["calibration"], parts=2, isolate=True, **CHEAP_FULL
        )
    assert caught.value.errno == errno.ENOSPC
    message = str(caught.value)
    assert "part 0" in message and "disk is full" in message and "Free some space" in message, message
    assert spawned_children() == []
    assert fault_kit.hidden_leftovers(out) == [] and visible(fault_kit, out) == before


def test_a_calibration_set_that_fills_the_disk_leaves_the_old_one(small_disk, fault_kit):
    calibration = small_disk / "calibration"
    CalibrationSet.save([{"sample": np.zeros(4, np.float32)}], calibration)
    before = fault_kit.digest(calibration)
    big = ({"sample": np.full(2**18, i, np.float32)} for i in range(8))  # 8 x 1 MiB, length unknown
    with pytest.raises(
        OSError, match="calibration set .* stopped: the disk is full.*Free some space"
    ) as caught:
        CalibrationSet.save(big, calibration)
    assert caught.value.errno == errno.ENOSPC
    assert fault_kit.digest(calibration) == before and fault_kit.hidden_leftovers(small_disk) == []
    # a list, whose length is known: refused after its first sample, before the disk is full
    with pytest.raises(OSError, match="Not enough free disk for the calibration set"):
        CalibrationSet.save([{"sample": np.full(2**18, i, np.float32)} for i in range(8)], calibration)
    assert fault_kit.digest(calibration) == before and fault_kit.hidden_leftovers(small_disk) == []


class BigPipeline:
    """Offers 1 MiB UNet inputs, once per step, as OVPipeline.generate does."""

    def generate(self, prompts, steps=20, unet_input_callback=None, **kwargs):
        for step in range(steps):
            unet_input_callback({"sample": np.full((2, 4, 128, 128), step, np.float32)})


def test_collecting_more_calibration_samples_than_fit_is_refused_after_the_first(small_disk, fault_kit):
    calibration = small_disk / "calibration"
    CalibrationSet.save([{"sample": np.zeros(4, np.float32)}], calibration)
    before = fault_kit.digest(calibration)
    with pytest.raises(OSError, match="Not enough free disk for the calibration set.*num_samples") as caught:
        collect_unet_inputs(
            BigPipeline(), ["a", "b"], steps=5, num_samples=8, out_dir=calibration, progress=False
        )
    assert caught.value.errno == errno.ENOSPC
    assert fault_kit.digest(calibration) == before and fault_kit.hidden_leftovers(small_disk) == []


def test_a_calibration_set_saved_over_a_larger_one_holds_only_the_new_samples(tmp_path):
    calibration = tmp_path / "calibration"
    CalibrationSet.save([{"sample": np.zeros(4, np.float32)} for _ in range(3)], calibration)
    saved = CalibrationSet.save([{"sample": np.ones(4, np.float32)}], calibration)
    assert len(saved) == 1 and all(s["sample"][0] == 1 for s in saved)


def test_a_calibration_set_killed_mid_save_leaves_the_old_one(tmp_path, fault_kit, capfd):
    calibration = tmp_path / "calibration"
    CalibrationSet.save([{"sample": np.zeros(4, np.float32)} for _ in range(3)], calibration)
    before = fault_kit.digest(calibration)
    code = f"""
import numpy as np
from sdaccel.cpu.calibration import CalibrationSet
CalibrationSet.save([{{"sample": np.ones(4, np.float32)}}], {str(calibration)!r})
"""
    killed = fault_kit.run_python(code, "quantize.calibration-sample-saved:kill")
    assert killed.returncode == -9, killed.stderr
    assert fault_kit.digest(calibration) == before  # not one old sample replaced by a new one
    capfd.readouterr()
    saved = CalibrationSet.save([{"sample": np.ones(4, np.float32)}], calibration)
    assert "interrupted write" in capfd.readouterr().err
    assert len(saved) == 1 and fault_kit.hidden_leftovers(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# Two writers, and the memory watchdog
# ----------------------------------------------------------------------------------------------


def test_two_quantizations_of_one_destination_take_turns(unet, old, fault_kit, capfd):
    """The second waits for the first, then does its own work (it does not reuse the first one's
    result: whether two requests are the same would take reading the source IR and the calibration
    set whole), and both publish a whole result."""
    first = subprocess.Popen(
        [sys.executable, "-c", quantizer(unet, old)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(old.parent.glob(".q-parts-*")) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.02)
    assert list(old.parent.glob(".q-parts-*")), "the first quantization never started"
    capfd.readouterr()
    second = quantize_parts.quantize_in_parts(unet["xml"], old, "int8_weights", parts=2, isolate=False)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and "DONE" in out, err[-3000:]
    assert "Waiting for another process that is writing q.xml" in capfd.readouterr().err
    assert [s["stage"] for s in second["stages"]] == ["cut", "part 0", "part 1", "stitch"]
    assert fault_kit.hidden_leftovers(old.parent) == [] and same_ir(old, unet["clean"])


def test_the_memory_watchdog_stops_a_part_and_says_what_to_do(unet, old, fault_kit):
    """A budget that the cut fits (about 40 MiB of anonymous memory) and a part does not (about
    200 MiB): the part's child is killed, and the message names the stage, the memory and the fix."""
    out, before = old.parent, visible(fault_kit, old.parent)
    with pytest.raises(MemoryError) as caught:
        quantize_parts.quantize_in_parts(unet["xml"], old, "int8_weights", parts=2, memory_limit_gb=0.1)
    message = str(caught.value)
    assert re.search(r"stopped at part 0: the memory watchdog killed its process at \d+ MiB", message), (
        message
    )
    assert "memory_limit_gb" in message and "parts=3" in message, message
    assert spawned_children() == []
    assert fault_kit.hidden_leftovers(out) == [] and visible(fault_kit, out) == before


def tiny_decoder(xml: Path) -> Path:
    """An IR with a VAE decoder's input (``latent_sample``) and one convolution: enough for
    :func:`sdaccel.cpu.quantize_vae.quantize_vae_decoder` to quantize."""
    import openvino as ov
    import openvino.opset13 as ops

    latents = ops.parameter([1, 4, 8, 8], np.float32, name="latent_sample")
    latents.output(0).get_tensor().set_names({"latent_sample"})
    kernel = ops.constant(np.random.default_rng(0).standard_normal((16, 4, 3, 3)).astype(np.float32))
    pixels = ops.convolution(latents, kernel, [1, 1], [1, 1], [1, 1], [1, 1])
    xml.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.Model([pixels], [latents], "decoder"), str(xml), compress_to_fp16=False)
    return xml


def test_a_vae_decoder_quantization_killed_mid_save_leaves_the_old_decoder(tmp_path, fault_kit):
    """Killed between the renames of the saved ``.bin`` and ``.xml``: the save happens in the
    working folder, so the decoder beside it is the old one, and the next writer removes the rest."""
    from sdaccel.cpu.quantize_vae import quantize_vae_decoder

    src = tiny_decoder(tmp_path / "src" / "decoder.xml")
    dst = tmp_path / "out" / "decoder.xml"
    dst.parent.mkdir()
    shutil.copy2(src, dst)
    shutil.copy2(src.with_suffix(".bin"), dst.with_suffix(".bin"))
    before = visible(fault_kit, dst.parent)
    code = f"""
from sdaccel.cpu.quantize_vae import quantize_vae_decoder
quantize_vae_decoder({str(src)!r}, {str(dst)!r}, "int8_weights")
"""
    killed = fault_kit.run_python(code, "export.ir-between-renames:kill")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert visible(fault_kit, dst.parent) == before
    run = quantize_vae_decoder(src, dst, "int8_weights")
    assert run["int8_weights"] > 0 and fault_kit.hidden_leftovers(dst.parent) == []
