"""Quantizing a UNet IR to a file, in one shot or in parts under a memory budget: the parts find
the same ranges and weights as one shot, requests are checked before any work, a budget chooses the
parts, and the children's progress bars show only where they are drawn live."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import quantize as Q  # noqa: E402
from sdaccel.cpu import quantize_parts  # noqa: E402
from sdaccel.cpu.calibration import CalibrationSet  # noqa: E402
from sdaccel.cpu.quality import unet_relative_error  # noqa: E402


def _calibration_folder(inputs, folder):
    return str(CalibrationSet.save(inputs, folder).folder)


def _fake_quantize_ranges(xml) -> dict:
    """Input range of every FakeQuantize, keyed by the names of the operations it feeds."""
    ranges = {}
    for op in Q.read_model(str(xml)).get_ops():
        if op.get_type_name() == "FakeQuantize":
            consumers = tuple(
                sorted(i.get_node().get_friendly_name() for i in op.output(0).get_target_inputs())
            )
            low, high = (op.input_value(i).get_node().get_data().ravel() for i in (1, 2))
            ranges[consumers] = np.concatenate([low, high])
    return ranges


@pytest.mark.parametrize(
    ("name", "variant"), [("tiny-sd15", "full_int8"), ("tiny-sdxl", "full_int8"), ("tiny-sdxl", "hybrid")]
)
def test_parts_quantize_like_one_shot(convert, name, variant, tmp_path):
    """Forced into 3 parts, the same recipe (SmoothQuant on for full INT8) finds the same
    activation ranges as one-shot and stays as close to f32; nothing is left beside the result.
    (Hybrid's ranges differ slightly: one-shot collects them behind MatMuls whose weights are
    already INT8, the parts' inputs come from the float parts before them.)"""
    _, xml, inputs = convert(name)
    calibration = _calibration_folder(inputs, tmp_path / "calibration")
    one = quantize_parts.quantize_ir(
        xml, tmp_path / "out" / "one.xml", variant, calibration, subset_size=len(inputs)
    )
    three = quantize_parts.quantize_in_parts(
        xml,
        tmp_path / "out" / "three.xml",
        variant,
        calibration,
        parts=3,
        subset_size=len(inputs),
        isolate=False,
    )
    assert one["parts"] == 1 and three["parts"] == 3
    assert [s["stage"] for s in three["stages"]] == ["cut", "part 0", "part 1", "part 2", "stitch"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "one.bin",
        "one.xml",
        "three.bin",
        "three.xml",
    ]
    assert three["int8_weight_elements"] == one["int8_weight_elements"]
    # A tensor read on both sides of a cut gets a quantizer in each part: at most a few more.
    assert one["fake_quantize"] <= three["fake_quantize"] <= one["fake_quantize"] + 8
    a, b = (
        _fake_quantize_ranges(one_xml := tmp_path / "out" / "one.xml"),
        _fake_quantize_ranges(tmp_path / "out" / "three.xml"),
    )
    shared = set(a) & set(b)
    assert len(shared) >= 0.9 * len(a)
    for key in shared:
        np.testing.assert_allclose(
            b[key], a[key], rtol=1e-2 if variant == "hybrid" else 1e-4, atol=1e-6, err_msg=str(key)
        )
    err_one = np.mean(unet_relative_error(xml, one_xml, inputs))
    err_three = np.mean(unet_relative_error(xml, tmp_path / "out" / "three.xml", inputs))
    assert 0 < err_three < 0.2 and abs(err_three - err_one) <= 0.25 * err_one, (err_one, err_three)


def test_weight_only_parts_give_the_same_weights(convert, tmp_path):
    _, xml, inputs = convert("tiny-sd15")
    one = quantize_parts.quantize_ir(xml, tmp_path / "one.xml", "int8_weights")
    two = quantize_parts.quantize_in_parts(xml, tmp_path / "two.xml", "int8_weights", parts=2, isolate=False)
    assert two["int8_weight_elements"] == one["int8_weight_elements"] and two["fake_quantize"] == 0
    errors = unet_relative_error(tmp_path / "one.xml", tmp_path / "two.xml", inputs)
    assert max(errors) < 1e-5, errors


def test_parts_are_checked_before_any_work(convert, tmp_path):
    _, xml, inputs = convert("tiny-sd15")
    calibration = _calibration_folder(inputs, tmp_path / "calibration")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="parts must be a whole number"):
        quantize_parts.quantize_in_parts(xml, out / "q.xml", "full_int8", calibration, parts=0)
    with pytest.raises(TypeError, match="reads the calibration inputs from disk"):
        quantize_parts.quantize_in_parts(xml, out / "q.xml", "full_int8", inputs, parts=2)
    with pytest.raises(ValueError, match="needs calibration data"):
        quantize_parts.quantize_ir(xml, out / "q.xml", "hybrid", None, parts=2)
    with pytest.raises(ValueError, match="Cannot split"):  # more parts than blocks: cleaned up
        quantize_parts.quantize_in_parts(xml, out / "q.xml", "int8_weights", parts=1000, isolate=False)
    assert not out.exists() or list(out.iterdir()) == []


def test_a_memory_budget_chooses_the_parts(convert):
    from sdaccel.cpu import ir_parts

    _, xml, _ = convert("tiny-sd15")
    model = Q.read_model(xml)
    total = sum(ir_parts.unit_weight_bytes(model).values())
    whole = quantize_parts.estimate_peak_gb("full_int8", total)
    assert quantize_parts.parts_for_budget(xml, "full_int8", whole + 0.001) == 1
    # a budget that only the per-byte part of a half-size model fits needs at least two parts
    half = quantize_parts.PEAK_FIXED_GB + (whole - quantize_parts.PEAK_FIXED_GB) * 0.55
    parts = quantize_parts.parts_for_budget(xml, "full_int8", half)
    assert parts >= 2
    assert (
        quantize_parts.estimate_peak_gb("full_int8", max(ir_parts.plan_parts(model, parts).weight_bytes))
        <= half
    )
    with pytest.raises(ValueError, match="raise the budget"):
        quantize_parts.parts_for_budget(xml, "full_int8", quantize_parts.PEAK_FIXED_GB)


def test_parts_show_progress_bars_only_where_they_are_drawn_live(convert, tmp_path, capfd):
    """Off a terminal (here: pytest's captured output, as a notebook's kernel collects a child's
    output), the children of quantize_in_parts print no finished NNCF bars unless asked for them;
    asked not to, a stage run here prints none either."""
    _, xml, _ = convert("tiny-sd15")
    assert Q.live_bars(True) and not Q.live_bars(False)
    # one watched child each (the whole UNet as one part): a child decides as every part's child does
    quantize_parts.quantize_in_parts(xml, tmp_path / "quiet.xml", "int8_weights", parts=1)
    assert "Applying Weight Compression" not in capfd.readouterr().out
    quantize_parts.quantize_in_parts(xml, tmp_path / "asked.xml", "int8_weights", parts=1, progress=True)
    assert "Applying Weight Compression" in capfd.readouterr().out
    quantize_parts.quantize_in_parts(
        xml, tmp_path / "here.xml", "int8_weights", parts=2, isolate=False, progress=False
    )
    assert "Applying Weight Compression" not in capfd.readouterr().out
