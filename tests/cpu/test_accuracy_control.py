"""sdaccel.cpu.accuracy_control on a small convolutional IR (three 3x3 convolutions) and a metric
of output closeness to f32: bad requests and bad validation functions are refused before any
quantization, an impossible bound is an error, and neither writes anything."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import accuracy_control  # noqa: E402


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
