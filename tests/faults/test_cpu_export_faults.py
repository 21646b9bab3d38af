"""Faults from outside a call, injected into the CPU room's writes: an OpenVINO export killed
after a component is saved, two exports of one folder at once, a disk that fills up during an
export, an IR killed between the renames of its ``.bin`` and ``.xml`` (and a ``.bin`` cut short
from outside), a precision cache that lies, two precision choices of one folder at once, and a
precision measurement killed half-way.

Every export here is of the tiny SD 1.5 checkpoint, and only of its text encoder and VAE decoder
(about 0.6 MB): one export in this process for the whole module, copied where a case needs an
export to start from, and one child process per case that kills."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time

import pytest

pytest.importorskip("openvino")

from sdaccel.core.checkpoint import CheckpointError  # noqa: E402
from sdaccel.core.staging import disk_bytes  # noqa: E402
from sdaccel.cpu import export as ov_export  # noqa: E402
from sdaccel.cpu import ir_files  # noqa: E402
from sdaccel.cpu.export import MANIFEST, MODEL_XML, export_pipeline  # noqa: E402
from sdaccel.cpu.precision import CHOICE_FILE, choose_precision  # noqa: E402

#: The components every export of this module holds: the two smallest that a precision choice
#: and a reader of an IR need.
COMPONENTS = ["text_encoder", "vae_decoder"]
#: Two candidates on every CPU (bf16 is timed even where the plugin runs it as f32).
BOTH = ("f32", "bf16")
SIZE = {"height": 64, "width": 64}

EXPORT = """
import sys, time
from pathlib import Path
import openvino
from sdaccel.cpu import export
src, dst, components, force = {src!r}, Path({dst!r}), {components!r}, {force!r}
if {slow!r}:  # the first writer: a slower load keeps its staging folder open a few seconds
    load = export.load_torch_component
    export.load_torch_component = lambda *a: (time.sleep({slow!r}), load(*a))[1]
if {after_staging!r}:  # the second writer: start once the first one writes
    while not list(dst.parent.glob(f".{{dst.name}}.staging-*")):
        time.sleep(0.02)
export.export_pipeline(src, dst, components, force=force, progress=False)
print("MANIFEST", (dst / "sdaccel_export.json").read_text().replace(chr(10), " "))
"""

CHOOSE = """
import time
from pathlib import Path
from sdaccel.cpu import precision
folder, marker = Path({folder!r}), Path({marker!r})
if {slow!r}:  # the first chooser: says when it measures, and measures a few seconds
    measure = precision.choose_component
    def slow(*args, **kwargs):
        marker.touch()
        time.sleep({slow!r})
        return measure(*args, **kwargs)
    precision.choose_component = slow
if {after_marker!r}:  # the second chooser: start once the first one measures
    while not marker.exists():
        time.sleep(0.02)
choice = precision.choose_precision(
    folder, components={components!r}, candidates=("f32", "bf16"), iters=1, warmup=0, height={height}, width=64
)
print("CACHED", choice.cached)
"""


def exporter(src, dst, components=COMPONENTS, force=False, slow=0.0, after_staging=False) -> str:
    return EXPORT.format(
        src=str(src), dst=str(dst), components=components, force=force, slow=slow, after_staging=after_staging
    )


def chooser(folder, marker, components=("vae_decoder",), height=64, slow=0.0, after_marker=False) -> str:
    return CHOOSE.format(
        folder=str(folder),
        marker=str(marker),
        components=tuple(components),
        height=height,
        slow=slow,
        after_marker=after_marker,
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_sd15):
    """``(checkpoint, export of COMPONENTS)``, exported once for the module."""
    root = tmp_path_factory.mktemp("cpu-export-faults")
    return tiny_sd15, export_pipeline(tiny_sd15, root / "base", COMPONENTS, progress=False)


@pytest.fixture
def old_export(base, tmp_path):
    """A private copy of the module's export at ``tmp_path/export``: the destination to keep whole."""
    return shutil.copytree(base[1], tmp_path / "export")


@pytest.fixture
def choice_folder(base, tmp_path):
    """A copy of the export with the UNet's config (the default sizes are read from it), to choose
    the precision of its text encoder and VAE decoder."""
    folder = shutil.copytree(base[1], tmp_path / "export")
    (folder / "unet").mkdir()
    shutil.copy2(base[0] / "unet" / "config.json", folder / "unet" / "config.json")
    return folder


def weights(folder) -> dict[str, str]:
    """The digest of an export's files but its manifest (which records the export's duration)."""
    from hashlib import sha256

    return {
        str(p.relative_to(folder)): sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


# ----------------------------------------------------------------------------------------------
# 1. An export killed after a component is saved
# ----------------------------------------------------------------------------------------------


def test_an_export_killed_mid_way_leaves_the_old_folder_and_the_next_call_removes_its_staging(
    base, old_export, fault_kit, capsys
):
    src, dst = base[0], old_export
    before = fault_kit.digest(dst)

    killed = fault_kit.run_python(exporter(src, dst, force=True), "export.component-saved:kill")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert fault_kit.wait_for_group_to_end(killed.pgid) == []
    assert fault_kit.digest(dst) == before  # byte for byte what was there
    assert [n.startswith(".export.staging-") for n in fault_kit.hidden_leftovers(dst.parent)] == [True]

    # the next call (here one that reuses the export) removes the hidden staging folder and says so
    assert export_pipeline(src, dst, COMPONENTS, progress=False) == dst
    said = capsys.readouterr()
    assert said.out == ""  # reused in silence (the digest below: nothing rewritten)
    assert "Removed 1 unfinished file(s) of export left by an interrupted write" in said.err
    assert fault_kit.hidden_leftovers(dst.parent) == []
    assert fault_kit.digest(dst) == before


# ----------------------------------------------------------------------------------------------
# 2. Two exports of one folder at once
# ----------------------------------------------------------------------------------------------


def test_a_second_export_of_the_same_folder_waits_and_reuses_the_first(base, tmp_path, fault_kit):
    import subprocess
    import sys

    src, dst = base[0], tmp_path / "export"
    first = subprocess.Popen(
        [sys.executable, "-c", exporter(src, dst, ["text_encoder"], slow=2.0)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    second = fault_kit.run_python(exporter(src, dst, ["text_encoder"], after_staging=True))
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]

    assert "Waiting for another process that is writing export" in second.stderr
    assert second.stdout.startswith("MANIFEST ")  # it reused the first one's export in silence
    # one export, the first one's: the manifest it wrote (with its durations) is the one there
    written = out.split("MANIFEST ", 1)[1].strip()
    assert (dst / MANIFEST).read_text().replace("\n", " ") == written
    assert second.stdout.split("MANIFEST ", 1)[1].strip() == written
    assert ov_export.is_complete(dst, ["text_encoder"])
    assert fault_kit.hidden_leftovers(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# 3. A full disk
# ----------------------------------------------------------------------------------------------


def test_a_disk_that_fills_during_an_export_leaves_the_old_folder_and_no_staging(base, small_disk, fault_kit):
    src = base[0]
    dst = shutil.copytree(base[1], small_disk / "export")
    before = fault_kit.digest(dst)
    # what another program leaves free: more than the weights of the new export (so the check
    # before the export lets it start) and less than the whole export (the graphs do not fit)
    needed = disk_bytes(base[1])
    free = shutil.disk_usage(small_disk).free
    assert ov_export.estimate_export_bytes(src, COMPONENTS) < 0.8 * needed < free
    (small_disk / "ballast").write_bytes(b"\0" * int(free - 0.8 * needed))

    with pytest.raises(OSError) as caught:
        export_pipeline(src, dst, COMPONENTS, force=True, progress=False)
    assert caught.value.errno == errno.ENOSPC
    assert fault_kit.digest(dst) == before
    assert fault_kit.hidden_leftovers(small_disk) == []

    # with the space back, the same call exports what a clean machine exports
    (small_disk / "ballast").unlink()
    export_pipeline(src, dst, COMPONENTS, force=True, progress=False)
    assert sorted(weights(dst)) == sorted(weights(base[1]))
    assert {k: v for k, v in weights(dst).items() if k.endswith(".bin")} == {
        k: v for k, v in weights(base[1]).items() if k.endswith(".bin")
    }
    assert fault_kit.hidden_leftovers(small_disk) == []


def test_an_export_that_cannot_fit_is_refused_before_anything_is_written(base, small_disk):
    src = base[0]  # its UNet alone has more weights than the 4 MiB disk holds
    assert ov_export.estimate_export_bytes(src, ["unet"]) > shutil.disk_usage(small_disk).free
    start = time.monotonic()
    with pytest.raises(
        OSError, match=r"Not enough free disk for the OpenVINO export.*Free some space"
    ) as caught:
        export_pipeline(src, small_disk / "export", ["unet"], progress=False)
    assert caught.value.errno == errno.ENOSPC
    assert time.monotonic() - start < 10  # refused before the UNet is loaded and converted
    assert list(small_disk.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# 4. An IR whose .bin no longer matches its .xml
# ----------------------------------------------------------------------------------------------

SAVE = """
import openvino as ov
from pathlib import Path
from sdaccel.cpu.ir_files import save_ir
save_ir(ov.Core().read_model({model!r}), Path({xml!r}), compress_to_fp16=False)
"""


def test_an_ir_killed_between_its_two_renames_is_refused_until_saved_again(base, tmp_path, fault_kit):
    from sdaccel.cpu.quantize import read_model

    text_encoder = base[1] / "text_encoder" / MODEL_XML
    vae_decoder = base[1] / "vae_decoder" / MODEL_XML
    folder = tmp_path / "ir"
    folder.mkdir()
    xml = folder / "model.xml"
    shutil.copy2(text_encoder, xml)
    shutil.copy2(text_encoder.with_suffix(".bin"), xml.with_suffix(".bin"))

    # save the VAE decoder over the text encoder, killed between the two renames
    killed = fault_kit.run_python(
        SAVE.format(model=str(vae_decoder), xml=str(xml)), "export.ir-between-renames:kill"
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    # the mismatch: the new .bin beside the old .xml, and the new .xml still under its temporary name
    assert xml.with_suffix(".bin").read_bytes() == vae_decoder.with_suffix(".bin").read_bytes()
    assert xml.read_bytes() == text_encoder.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["model.bin", "model.tmp.xml", "model.xml"]

    # every reader refuses it, naming what happened and the fix
    for read in (ir_files.read_ir, read_model):
        with pytest.raises(CheckpointError, match=r"model\.xml.*interrupted.*may not match.*force=True"):
            read(xml)

    # the next save of that IR removes the unfinished files and writes a whole pair
    ir_files.save_ir(read_model(text_encoder), xml, compress_to_fp16=False)
    assert sorted(p.name for p in folder.iterdir()) == ["model.bin", "model.xml"]
    assert xml.with_suffix(".bin").read_bytes() == text_encoder.with_suffix(".bin").read_bytes()
    assert [p.get_any_name() for p in ir_files.read_ir(xml).inputs] == ["input_ids"]


def test_an_interrupt_between_the_two_renames_finishes_the_save(base, tmp_path, fault_kit):
    """Ctrl-C there: both new files are whole, so the save finishes before it stops."""
    vae_decoder = base[1] / "vae_decoder" / MODEL_XML
    xml = tmp_path / "model.xml"
    shutil.copy2(base[1] / "text_encoder" / MODEL_XML, xml)
    shutil.copy2(base[1] / "text_encoder" / "openvino_model.bin", xml.with_suffix(".bin"))
    child = fault_kit.run_python(
        SAVE.format(model=str(vae_decoder), xml=str(xml)), "export.ir-between-renames:interrupt"
    )
    assert child.returncode == -2 and "KeyboardInterrupt" in child.stderr  # SIGINT, as Python exits on it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin", "model.xml"]
    assert xml.read_bytes() == vae_decoder.read_bytes()
    assert [p.get_any_name() for p in ir_files.read_ir(xml).inputs] == ["latent_sample"]


def test_a_bin_cut_short_from_outside_gets_a_clear_error(choice_folder):
    xml = choice_folder / "vae_decoder" / MODEL_XML
    data = xml.with_suffix(".bin").read_bytes()
    xml.with_suffix(".bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"vae_decoder/openvino_model\.bin.*shorter.*force=True"):
        ir_files.read_ir(xml)
    with pytest.raises(CheckpointError, match=r"openvino_model\.bin"):
        choose_precision(choice_folder, components=["vae_decoder"], candidates=BOTH, iters=1, **SIZE)


# ----------------------------------------------------------------------------------------------
# 5. A precision cache that lies, and two choosers at once
# ----------------------------------------------------------------------------------------------


def _choose(folder, **kw):
    return choose_precision(
        folder, components=["vae_decoder"], candidates=BOTH, iters=1, warmup=0, **SIZE, **kw
    )


def _truncated(text: str, key: dict) -> str:
    return text[: len(text) // 2]


def _other_schema(text: str, key: dict) -> str:
    return json.dumps(json.loads(text) | {"schema": 99})


def _other_cpu(text: str, key: dict) -> str:
    data = json.loads(text)
    data["choices"][0]["key"]["cpu"] = "Another CPU"
    return json.dumps(data)


def _other_ir(text: str, key: dict) -> str:
    data = json.loads(text)
    data["choices"][0]["key"]["models"]["vae_decoder"] = "0" * 16
    return json.dumps(data)


def _lying_entry(text: str, key: dict) -> str:
    """The right key, but a choice no candidate makes (what a hand edit or another tool leaves)."""
    data = json.loads(text)
    data["choices"][0]["components"]["vae_decoder"]["chosen"] = "int4"
    return json.dumps(data)


@pytest.mark.parametrize("lie", [_truncated, _other_schema, _other_cpu, _other_ir, _lying_entry])
def test_a_precision_cache_that_lies_is_measured_again_never_trusted(choice_folder, capsys, lie):
    first = _choose(choice_folder)
    assert capsys.readouterr().err == ""  # no file yet: nothing to say
    path = choice_folder / CHOICE_FILE
    path.write_text(lie(path.read_text(), first.key))

    again = _choose(choice_folder)
    assert not again.cached and again.key == first.key
    assert again.chosen["vae_decoder"] in BOTH
    said = capsys.readouterr().err
    if lie in (_truncated, _lying_entry):  # a file that is broken, not one that is only elsewhere
        assert len(said.strip().splitlines()) == 1 and str(path) in said and "measuring again" in said
    assert _choose(choice_folder).cached  # rewritten whole: the next call reads it
    assert not [p for p in choice_folder.iterdir() if p.name.startswith(".")]


def test_two_precision_choices_of_one_folder_at_once_measure_once(choice_folder, tmp_path, fault_kit):
    import subprocess
    import sys

    marker = tmp_path / "measuring"
    first = subprocess.Popen(
        [sys.executable, "-c", chooser(choice_folder, marker, slow=2.0)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    second = fault_kit.run_python(chooser(choice_folder, marker, after_marker=True))
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]
    assert "CACHED False" in out
    assert "Waiting for another process that is writing precision_choice.json" in second.stderr
    assert "CACHED True" in second.stdout  # it read the first one's measurement
    assert len(json.loads((choice_folder / CHOICE_FILE).read_text())["choices"]) == 1


# ----------------------------------------------------------------------------------------------
# 6. A precision measurement killed half-way
# ----------------------------------------------------------------------------------------------


def test_a_precision_measurement_killed_half_way_leaves_the_old_choice(choice_folder, tmp_path, fault_kit):
    old = _choose(choice_folder)  # a choice at 64x64 is there; now one at 32x64 is killed
    before = fault_kit.digest(choice_folder)
    code = chooser(choice_folder, tmp_path / "unused", components=COMPONENTS, height=32)
    killed = fault_kit.run_python(code, "precision.component-measured:kill")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert fault_kit.wait_for_group_to_end(killed.pgid) == []
    assert fault_kit.digest(choice_folder) == before  # the old choice file, byte for byte
    assert not [p for p in choice_folder.iterdir() if p.name.startswith(".")]

    # the next call measures and adds its choice; the old one is still read back
    new = choose_precision(
        choice_folder, components=COMPONENTS, candidates=BOTH, iters=1, warmup=0, height=32, width=64
    )
    assert not new.cached
    assert _choose(choice_folder).cached and old.key != new.key
    assert os.path.getsize(choice_folder / CHOICE_FILE) > 0
