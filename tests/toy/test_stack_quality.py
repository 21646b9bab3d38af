"""The levers stacked on the trained SD 1.5-layout toy (sdaccel.toy.stack_quality): each row adds
one lever to the row before, every row is judged against f32 on the same prompts and noise, the
fastest stack is picked within the quality bound, and a bad request is refused before anything
is written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("openvino")
pytest.importorskip("tomesd")

from sdaccel.toy import stack_quality  # noqa: E402

CHECKPOINT = Path(__file__).resolve().parents[2] / "checkpoints" / "tiny-shapes-sd15"
STEPS, PROMPTS, INTERVAL = 8, 6, 2


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="module")
def result(work):
    return stack_quality.measure(
        CHECKPOINT, work / "all", export_dir=work / "export", num_prompts=PROMPTS, steps=STEPS,
        interval=INTERVAL, calibration_prompts=4, calibration_samples=16,
    )  # fmt: skip


def test_each_row_adds_one_lever_to_the_one_before(result):
    rows = result["rows"]
    names = stack_quality.stack_names(0.5, INTERVAL)
    assert list(rows) == names
    assert [row["levers"] for row in rows.values()] == [
        [],
        ["static shapes"],
        ["static shapes", "INT8"],
        ["static shapes", "INT8", "token merging 0.5"],
        ["static shapes", "INT8", "token merging 0.5", f"DeepCache N={INTERVAL}"],
    ]
    assert [row["shapes"] for row in rows.values()] == ["dynamic", "static", "static", "static", "static"]
    assert result["settings"]["int8"]["float_groups"] == ["resnets"]
    assert rows["+ INT8"]["fake_quantize"] > 0


def test_every_stack_is_judged_against_f32_on_the_same_prompts(result):
    rows = result["rows"]
    assert all(row["adherence"]["n"] == PROMPTS for row in rows.values())
    assert "psnr_mean" not in rows["f32"] and rows["f32"]["x_f32"] == 1.0
    # static shapes change no arithmetic: the same pixels, within float rounding (psnr_mean None:
    # every pair identical, as on CPUs whose kernels run both shapes alike, e.g. a Xeon with AMX)
    static = rows["+ static shapes"]["psnr_mean"]
    assert static is None or static > 60, rows["+ static shapes"]
    # INT8 and token merging change the pixels, but not into noise
    for name in list(rows)[2:]:
        assert 15 < rows[name]["psnr_mean"] < 60 and rows[name]["ssim_mean"] > 0.3, (name, rows[name])


def test_deepcache_runs_the_full_unet_every_nth_step_only(result):
    calls = {name: row["unet_calls_per_image"] for name, row in result["rows"].items()}
    for name in list(calls)[:-1]:
        assert calls[name] == {"full": STEPS, "shallow": 0}, name
    full = math.ceil(STEPS / INTERVAL)
    assert calls[f"+ DeepCache N={INTERVAL}"] == {"full": full, "shallow": STEPS - full}


def test_the_fastest_stack_is_chosen_within_the_bound(result):
    rows, bound = result["rows"], result["settings"]["max_drop"]
    floor = rows["f32"]["adherence"]["score"] - bound
    assert all(row["within"] == (row["adherence"]["score"] >= floor) for row in rows.values())
    fastest = result["fastest"]
    assert rows[fastest]["within"]
    assert all(
        rows[fastest]["unet_s_per_image"] <= r["unet_s_per_image"] for r in rows.values() if r["within"]
    )
    table = stack_quality.format_table(result)
    assert f"fastest within 2 adherence points of f32: {fastest}" in table
    assert table.count("\n| ") == len(rows)  # a row per stack (and the header's separator)


def _row(score: float, unet_s: float) -> dict:
    return {"adherence": {"score": score}, "unet_s_per_image": unet_s}


def test_fastest_within_keeps_to_the_bound():
    rows = {"f32": _row(0.9, 1.0), "a": _row(0.89, 0.5), "b": _row(0.8, 0.1)}
    assert stack_quality.fastest_within(rows, 0.02) == "a"
    assert stack_quality.fastest_within(rows, 0.2) == "b"
    assert stack_quality.fastest_within(rows, 0.0) == "f32"
    with pytest.raises(KeyError, match="no 'f32' row"):
        stack_quality.fastest_within({"a": _row(1, 1)}, 0.02)


@pytest.mark.parametrize(
    "knobs, message",
    [
        ({"ratio": 0.9}, "ratio must be"),
        ({"interval": 1}, "interval must be an integer of at least 2"),
        ({"interval": 2.0}, "interval must be an integer"),
        ({"max_drop": -0.01}, "max_drop is a drop in adherence"),
        ({"max_drop": 2}, "max_drop is a drop in adherence"),
        ({"float_groups": "resnets"}, "float_groups must be a list"),
        ({"num_prompts": 0}, "num_prompts and steps"),
        ({"levers": ("tome", "int8")}, "levers must be some of"),
        ({"levers": ("static", "fp8")}, "levers must be some of"),
        ({"levers": ()}, "levers must be some of"),
        ({"levers": "static"}, "levers must be some of"),
        ({"cut": "branch"}, "cut must be one of"),
        ({"cut": "layer"}, "token merging's DeepCache IRs are cut at the block"),
    ],
)
def test_a_bad_request_is_refused_before_anything_is_written(knobs, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        stack_quality.measure(CHECKPOINT, tmp_path / "work", **knobs)
    assert not (tmp_path / "work").exists()


def test_the_command_writes_the_json_and_prints_the_table(result, tmp_path, monkeypatch, capsys):
    """main() as a user runs it, with the measurement above standing in for a new one."""
    monkeypatch.setattr(stack_quality, "measure", lambda *args, **kwargs: json.loads(json.dumps(result)))
    out = tmp_path / "stack.json"
    stack_quality.main([str(CHECKPOINT), "--work-dir", str(tmp_path / "work"), "--out", str(out)])
    written = json.loads(out.read_text())
    assert written["rows"].keys() == result["rows"].keys() and written["machine"]["isa"]
    assert written["command"].startswith("python -m sdaccel.toy.stack_quality ")
    assert "fastest within 2 adherence points" in capsys.readouterr().out


def test_any_levers_stack_in_their_order(result, work):
    """DeepCache alone: its plain IRs (no merge, no INT8), with dynamic shapes (no static lever),
    against the same f32 images as the whole stack's (the export is shared)."""
    alone = stack_quality.measure(
        CHECKPOINT, work / "deepcache", export_dir=work / "export", num_prompts=PROMPTS, steps=STEPS,
        levers=("deepcache",), interval=INTERVAL,
    )  # fmt: skip
    assert list(alone["rows"]) == ["f32", f"+ DeepCache N={INTERVAL}"]
    assert alone["rows"]["f32"]["adherence"] == result["rows"]["f32"]["adherence"]
    row = alone["rows"][f"+ DeepCache N={INTERVAL}"]
    assert row["levers"] == [f"DeepCache N={INTERVAL}"] and row["shapes"] == "dynamic"
    assert alone["settings"]["int8"] is None and "fake_quantize" not in row
    assert (work / "export" / "unet_deepcache" / "full" / "openvino_model.xml").is_file()
    assert not (work / "deepcache" / "calibration").exists()  # no INT8, no calibration
    full = math.ceil(STEPS / INTERVAL)
    assert row["unet_calls_per_image"] == {"full": full, "shallow": STEPS - full}
    assert 10 < row["psnr_mean"] < 60  # stale deep features move the pixels, not into noise


def test_deepcache_cut_at_the_last_layer_stacks_on_int8(result, work, capfd):
    """The layer cut (the DeepCache paper's default): its own IRs next to the block cut's, quantized
    by the same recipe, named as the benchmark names its rows; on the same f32 images, and a staler
    cached feature than the block cut's (lower PSNR), not noise. Its quantization prints no NNCF
    bar (``progress`` is off, as in notebook 06, where each pass would leave a bar in the copy)."""
    import rich

    capfd.readouterr()  # what the fixtures printed
    console = rich.get_console()
    saved = dict(console.__dict__)
    rich.reconfigure(force_terminal=True)  # NNCF's bars drawn as on a terminal, where capfd reads them
    try:
        layer = stack_quality.measure(
            CHECKPOINT, work / "layer", export_dir=work / "export", num_prompts=PROMPTS, steps=STEPS,
            levers=("int8", "deepcache"), interval=INTERVAL, cut="layer", calibration_prompts=4,
            calibration_samples=16,
        )  # fmt: skip
    finally:
        console.__dict__ = saved
    printed = "".join(capfd.readouterr())
    assert "Statistics collection" not in printed and "Applying" not in printed
    name = f"+ DeepCache N={INTERVAL} (layer cut)"
    assert list(layer["rows"]) == ["f32", "+ INT8", name]
    assert layer["rows"][name]["levers"] == ["INT8", f"DeepCache N={INTERVAL} (layer cut)"]
    assert layer["settings"]["cut"] == "layer" and result["settings"]["cut"] == "block"
    assert layer["rows"]["f32"]["adherence"] == result["rows"]["f32"]["adherence"]
    assert (work / "export" / "unet_deepcache_layer" / "shallow" / "openvino_model.xml").is_file()
    # INT8 quantized the layer cut's full IR, and kept its one-layer shallow IR in float
    from sdaccel.cpu.quantize import describe_ir

    int8 = work / "layer" / "deepcache_layer_int8"
    assert describe_ir(int8 / "full" / "openvino_model.xml")["fake_quantize"] > 0
    assert describe_ir(int8 / "shallow" / "openvino_model.xml")["fake_quantize"] == 0
    full = math.ceil(STEPS / INTERVAL)
    assert layer["rows"][name]["unet_calls_per_image"] == {"full": full, "shallow": STEPS - full}
    assert 10 < layer["rows"][name]["psnr_mean"] < layer["rows"]["+ INT8"]["psnr_mean"]
