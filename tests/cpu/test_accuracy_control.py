"""sdaccel.cpu.accuracy_control on a small convolutional IR (three 3x3 convolutions) and a metric
of output closeness to f32: bad requests and bad validation functions are refused before any
quantization, an impossible bound is an error, and neither writes anything."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import accuracy_control, quantize  # noqa: E402


def conv_model() -> ov.Model:
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8, 16, 16], np.float32, name="x")
    h = x
    for i in range(3):
        weights = ops.constant(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.3)
        h = ops.convolution(h, weights, [1, 1], [1, 1], [1, 1], [1, 1])
        h.set_friendly_name(f"conv{i}")
        h = ops.relu(h) if i < 2 else h
    return ov.Model([h], [x], "convs")


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    """(f32 IR path, calibration inputs, validation items: inputs with the f32 outputs)."""
    xml = tmp_path_factory.mktemp("ir") / "convs.xml"
    model = conv_model()
    ov.save_model(model, str(xml), compress_to_fp16=False)
    rng = np.random.default_rng(1)
    calibration = [{"x": rng.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(8)]
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    inputs = [rng.standard_normal((1, 8, 16, 16)).astype(np.float32) for _ in range(4)]
    items = [(x, compiled({"x": x})[0]) for x in inputs]
    return xml, calibration, items


def closeness(compiled, items):
    """1 - relative error of the outputs against f32's, per item (higher is better)."""
    values = [
        1.0 - float(np.abs(compiled({"x": x})[0] - ref).mean() / np.abs(ref).mean()) for x, ref in items
    ]
    return float(np.mean(values)), values


def exactly_f32(compiled, items):
    """1 when the outputs are f32's to 1e-6, else 0: a bound no INT8 layer can meet."""
    return float(all(np.allclose(compiled({"x": x})[0], ref, atol=1e-6) for x, ref in items))


def nothing_written(folder) -> bool:
    return sorted(p.name for p in folder.iterdir()) == []


@pytest.mark.parametrize("variant", ["full_int8", "hybrid"])
def test_a_reachable_bound_is_met_by_reverting_some_layers(ir, tmp_path, variant):
    xml, calibration, items = ir
    dst = tmp_path / "out" / "convs_int8.xml"
    report = accuracy_control.quantize_with_accuracy_control(
        xml, dst, variant, calibration, items, closeness, max_drop=0.012, subset_size=8, ignored=()
    )
    if variant == "hybrid":  # no MatMul to compress: the convolutions get the whole bound
        assert report["metric_weights_only"] == report["metric_f32"] and report["search_max_drop"] == 0.012
    assert dst.is_file() and dst.with_suffix(".bin").is_file()
    assert report["metric_f32"] == pytest.approx(1.0)
    # plain INT8 of the three convolutions drops about 0.023: one or two go back to float
    assert report["metric_f32"] - report["metric_plain"] > 0.012
    assert report["drop"] == pytest.approx(report["metric_f32"] - report["metric"])
    assert report["drop"] <= 0.012 and report["quantized_operations"] == 3
    assert 1 <= len(report["reverted"]) <= 2 and set(report["reverted"]) <= {"conv0", "conv1", "conv2"}
    assert report["fake_quantize_plain"] == 3
    assert report["fake_quantize"] == 3 - len(report["reverted"])
    assert report["search_s"] > 0 and report["max_drop"] == 0.012
    assert sorted(p.name for p in dst.parent.iterdir()) == ["convs_int8.bin", "convs_int8.xml"]


def test_a_search_replayed_as_an_ignored_scope_keeps_the_same_operations_in_float(ir, tmp_path):
    """What the real-size benchmark does with the toy's search: plain INT8 with the reverted
    operations ignored has them unquantized, and every other quantizer of plain INT8."""
    xml, calibration, items = ir
    report = accuracy_control.quantize_with_accuracy_control(
        xml, tmp_path / "ac.xml", "full_int8", calibration, items, closeness, max_drop=0.012, subset_size=8
    )
    assert report["reverted"]
    accuracy_control.check_replay(xml, report["reverted"])
    ignored = accuracy_control.replay_ignored(report["reverted"])
    assert ignored[: len(quantize.SENSITIVE_LAYER_PATTERNS)] == list(quantize.SENSITIVE_LAYER_PATTERNS)
    assert sorted(quantize.matching_layers(xml, ignored)) == sorted(report["reverted"])
    # each name matches itself only (NNCF matches from the start): "conv1" does not keep "conv10" in float
    assert not re.match(accuracy_control.replay_ignored(["conv1"])[-1], "conv10")
    replayed = quantize.quantize_full(xml, calibration, 8, ignored=ignored, smooth_quant_alpha=None)
    assert accuracy_control.activation_quantizers(replayed) == report["fake_quantize"]
    quantized = {
        op.input_value(0).get_node().get_friendly_name()
        for op in replayed.get_ops()
        if op.get_type_name() == "Convolution"
        and op.input_value(0).get_node().get_type_name() == "FakeQuantize"
    }
    assert not quantized & set(report["reverted"])


def test_a_replay_of_operations_the_unet_lacks_is_refused(ir):
    xml, _, _ = ir
    with pytest.raises(
        ValueError, match=r"1 of the 2 operations to keep in float are not in this UNet, e.g. 'conv7'"
    ):
        accuracy_control.check_replay(xml, ["conv1", "conv7"])
    with pytest.raises(ValueError, match=r"1 of the 1 operations .* e.g. 'conv'"):
        accuracy_control.check_replay(xml, ["conv"])  # a name, not a prefix: "conv1" is not "conv"
    # the patterns as NNCF matches them, from the start of the name: "conv" matches conv1
    assert quantize.unmatched_patterns(xml, ["conv1$", "conv", "conv7", "x|conv7"]) == ["conv7"]


@pytest.mark.parametrize("max_drop", [0, 1, -0.1, 1.5, "0.02", True, float("nan")])
def test_max_drop_outside_0_1_is_refused_before_any_work(ir, tmp_path, max_drop):
    xml, calibration, items = ir
    with pytest.raises(ValueError, match=r"max_drop must be a number in \(0, 1\)"):
        accuracy_control.quantize_with_accuracy_control(
            xml, tmp_path / "q.xml", "full_int8", calibration, items, closeness, max_drop=max_drop
        )
    assert nothing_written(tmp_path)


def test_an_unknown_variant_is_refused(ir, tmp_path):
    xml, calibration, items = ir
    with pytest.raises(ValueError, match="unknown accuracy-control variant 'int8_weights'"):
        accuracy_control.quantize_with_accuracy_control(
            xml, tmp_path / "q.xml", "int8_weights", calibration, items, closeness
        )
    assert nothing_written(tmp_path)


def returns_none(compiled, items):
    compiled({"x": items[0][0]})


def returns_nan(compiled, items):
    return float("nan")


def returns_text(compiled, items):
    return "good"


def returns_short_list(compiled, items):
    return 1.0, [1.0]


@pytest.mark.parametrize("bad", [returns_none, returns_nan, returns_text, returns_short_list])
def test_a_bad_validation_function_is_named_before_quantizing(ir, tmp_path, bad, monkeypatch):
    import nncf

    def no_quantizing(*args, **kwargs):
        raise AssertionError("nncf ran before the validation function was checked")

    monkeypatch.setattr(nncf, "quantize_with_accuracy_control", no_quantizing)
    xml, calibration, items = ir
    with pytest.raises(ValueError, match=f"validation function {bad.__name__} returned"):
        accuracy_control.quantize_with_accuracy_control(
            xml, tmp_path / "q.xml", "full_int8", calibration, items, bad
        )
    assert nothing_written(tmp_path)


@pytest.mark.parametrize(
    "validate, max_drop, iterations, message",
    [
        (closeness, 0.006, 1, r"max_drop=0.006 could not be met: 1 of 3 quantized operations reverted to "
         r"float, the search stopped after 1 iteration\(s\) \(max_num_iterations=1\), and the drop is still"),
        (exactly_f32, 0.0001, 10, r"max_drop=0.0001 is met only with every group of quantizers reverted "
         r"\(3 of 3 quantized operations back in float\)"),
    ],
)  # fmt: skip
def test_an_impossible_bound_is_an_error_and_writes_nothing(
    ir, tmp_path, validate, max_drop, iterations, message
):
    xml, calibration, items = ir
    with pytest.raises(ValueError, match=message):
        accuracy_control.quantize_with_accuracy_control(
            xml, tmp_path / "q.xml", "full_int8", calibration, items, validate, max_drop,
            subset_size=8, ignored=(), max_num_iterations=iterations,
        )  # fmt: skip
    assert nothing_written(tmp_path)


def test_hybrid_refuses_a_bound_that_weight_compression_alone_breaks(tmp_path):
    from openvino import opset13 as ops

    rng = np.random.default_rng(2)
    x = ops.parameter([1, 4, 16], np.float32, name="x")
    h = ops.matmul(x, ops.constant(rng.standard_normal((16, 16)).astype(np.float32)), False, False)
    xml = tmp_path / "src" / "matmul.xml"
    xml.parent.mkdir()
    ov.save_model(ov.Model([h], [x], "matmul"), str(xml), compress_to_fp16=False)
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    inputs = [rng.standard_normal((1, 4, 16)).astype(np.float32) for _ in range(2)]
    items = [(v, compiled({"x": v})[0]) for v in inputs]
    calibration = [{"x": v} for v in inputs]
    with pytest.raises(
        ValueError, match=r"max_drop=0.01 cannot be met by hybrid: compressing the MatMul weights"
    ):
        accuracy_control.quantize_with_accuracy_control(
            xml, tmp_path / "out" / "q.xml", "hybrid", calibration, items, exactly_f32, 0.01, ignored=()
        )
    assert not (tmp_path / "out").exists() or nothing_written(tmp_path / "out")


def test_checked_result_accepts_numbers_and_per_item_values():
    assert accuracy_control.checked_result(np.float32(0.5), closeness, 2) == (0.5, None)
    assert accuracy_control.checked_result((0.5, np.array([0.25, 0.75])), closeness, 2) == (0.5, [0.25, 0.75])
    with pytest.raises(ValueError, match="per-item values"):
        accuracy_control.checked_result((0.5, [0.5, float("nan")]), closeness, 2)


# ----------------------------------------------------------------------------------------------
# Notebook 05b writes the search out as NNCF's own call: run as it stands, it makes the helper's model
# ----------------------------------------------------------------------------------------------

NB05 = Path(__file__).resolve().parents[2] / "notebooks" / "05b_int8_under_constraints.ipynb"
SEARCH_CELL = "nncf.quantize_with_accuracy_control("


def notebook_namespace(ir, **knobs) -> dict:
    """What the cells before the search give it, on the three convolutions: the calibration
    dataset, the layers kept in float and the validation function as notebook 05b defines them."""
    import time

    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    from sdaccel.cpu import quantize

    xml, calibration, items = ir
    return {
        "accuracy_control": accuracy_control,
        "quantize": quantize,
        "nncf": nncf,
        "time": time,
        "AdvancedQuantizationParameters": AdvancedQuantizationParameters,
        "AdvancedSmoothQuantParameters": AdvancedSmoothQuantParameters,
        "core": ov.Core(),
        "unet_xml": xml,
        "calibration_dataset": nncf.Dataset(calibration),
        "keep_in_float": nncf.IgnoredScope(patterns=list(quantize.SENSITIVE_LAYER_PATTERNS), validate=False),
        "validate": closeness,
        "all_items": items,
        "validate_s": 0.01,
        "compile_s": 0.01,
        "one_piece": True,
        "budget": 4.0,
        "CALIBRATION_SAMPLES": len(calibration),
        "BIAS_CORRECTION": True,
        "ACCURACY_MAX_DROP": 0.012,
        "ACCURACY_RANKING_PROMPTS": len(items),
        "ACCURACY_ITERATIONS": 10,
        "ACCURACY_MAX_MINUTES": 30,
    } | knobs


def test_notebook_05s_call_reverts_what_the_helper_reverts(ir, tmp_path):
    from sdaccel.course.exercises import code_cell
    from sdaccel.cpu import quantize

    xml, calibration, items = ir
    ns = notebook_namespace(ir)
    exec(compile(code_cell(NB05, SEARCH_CELL), "05 accuracy control", "exec"), ns)
    found = accuracy_control.reverted(ns["search"])
    dst = tmp_path / "helper.xml"
    report = accuracy_control.quantize_with_accuracy_control(
        xml, dst, "full_int8", calibration, items, closeness, 0.012,
        subset_size=len(calibration), ranking_subset_size=len(items), max_num_iterations=10,
    )  # fmt: skip
    assert 1 <= len(found["reverted"]) and found["reverted"] == report["reverted"]
    assert quantize.describe_ir(ns["accurate"]) == quantize.describe_ir(dst)
    mine = accuracy_control.compile_f32(ns["accurate"])
    theirs = accuracy_control.compile_f32(ov.Core().read_model(dst))
    for x, _ in items:
        np.testing.assert_allclose(mine({"x": x})[0], theirs({"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("knobs", "said"),
    [
        ({"one_piece": False}, "do not fit 4.0 GiB in one piece"),
        ({"validate_s": 30.0}, "raise it to run the search here"),  # 3 groups x 30 s + 12 x 30 s > 1 min
    ],
)
def test_notebook_05_says_why_it_does_not_search(ir, knobs, said, capsys):
    from sdaccel.course.exercises import code_cell

    ns = notebook_namespace(ir, ACCURACY_MAX_MINUTES=1, **knobs)
    exec(compile(code_cell(NB05, SEARCH_CELL), "05 accuracy control", "exec"), ns)
    assert ns["accurate"] is None and said in capsys.readouterr().out


def test_the_search_estimate_counts_ranking_and_iterations():
    # 10 groups on 2 of 4 items (0.5 s of a 1 s validation, + 0.25 s compile), then 3 + 2 full validations
    assert accuracy_control.estimate_search_s(10, 1.0, 0.25, 4, 2, 3) == pytest.approx(10 * 0.75 + 5 * 1.25)
    assert accuracy_control.estimate_search_s(1, 1.0, 0.0, 4, None, 1) == pytest.approx(1.0 + 3.0)
    with pytest.raises(ValueError, match="at least 1"):
        accuracy_control.estimate_search_s(0, 1.0, 0.0, 4, None, 1)


def test_quantizable_operations_counts_convolutions_and_matmuls(ir):
    assert accuracy_control.quantizable_operations(ir[0]) == 3
