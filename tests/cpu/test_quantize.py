"""INT8 recipes on tiny SD 1.5 / SDXL UNets: each changes the IR as it should and stays close to
f32. (Calibration: test_calibration.py; quantizing to a file and in parts: test_quantize_parts.py.)"""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import quantize as Q  # noqa: E402
from sdaccel.cpu.quality import unet_relative_error  # noqa: E402


def _producers(model, kind: str) -> list[str]:
    """Types of the operations feeding the activation input (port 0) of every ``kind`` op."""
    return [
        op.input_value(0).get_node().get_type_name() for op in model.get_ops() if op.get_type_name() == kind
    ]


def _weight_dtype(op) -> str:
    """Element type of the constant behind the weight (port 1) of a MatMul, through its
    decompression chain ``Constant(u8) -> Convert -> Subtract -> Multiply -> Convert``."""
    node = op.input_value(1).get_node()
    while node.get_type_name() != "Constant":
        node = node.input_value(0).get_node()
    return node.get_output_element_type(0).get_type_name()


def _fed_by_fake_quantize(model, name_part: str) -> bool:
    ops = [
        op
        for op in model.get_ops()
        if name_part in op.get_friendly_name() and op.get_type_name() == "Convolution"
    ]
    assert ops, name_part
    return any(op.input_value(0).get_node().get_type_name() == "FakeQuantize" for op in ops)


def _static(model, sample: dict):
    """``model`` reshaped to the shapes of ``sample`` and compiled in f32 (a copy: ``model`` is
    left dynamic)."""
    static = Q.read_model(model).clone()
    static.reshape({name: list(value.shape) for name, value in sample.items()})
    return ov.Core().compile_model(static, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def test_weight_only_int8(unet_ir, tmp_path):
    name, xml, inputs = unet_ir
    kept = Q.reshaped_pointwise_convolutions(xml)  # SD 1.5's transformer proj_out; SDXL has none
    assert bool(kept) == (name == "tiny-sd15") and all(".proj_out/" in n for n in kept), kept
    model = Q.compress_weights_int8(xml)
    counts = Q.describe_ir(model)
    assert counts["fake_quantize"] == 0  # activations untouched
    assert counts["int8_weights"] > 0 and (kept or counts["float_weight_elements"] == 0)
    weighted = {*Q.weighted_matmul_and_gather_names(xml), *Q.matching_layers(xml, [".*"], ["Convolution"])}
    for op in model.get_ops():  # every weight is INT8 but those of the kept convolutions
        if op.get_friendly_name() in weighted and op.get_type_name() in ("Convolution", "MatMul"):
            float_weight = _weight_dtype(op) in ("f32", "f16")
            assert float_weight == (op.get_friendly_name() in kept), op.get_friendly_name()
    out = tmp_path / "int8.xml"
    ov.save_model(model, str(out), compress_to_fp16=False)
    assert Q.ir_size_bytes(out) < 0.5 * Q.ir_size_bytes(xml)
    errors = unet_relative_error(xml, model, inputs)
    assert 0 < max(errors) < 0.05, errors


def test_weight_only_int8_compiles_where_the_mid_block_is_one_pixel(convert):
    """At 2x2 latents the tiny SD 1.5 UNet's mid block works on a 1x1 feature map (64x64 pixels
    for the real SD 1.5). Reshaped to static shapes (time_unet, a static pipeline) with its
    transformers' proj_out in INT8, the CPU plugin laid the batch of 2 out on the spatial axes and
    refused to compile the model: ``Requested output shape [16,8,1,1] is incompatible with input
    shape [2,64,2,1]`` in the rehearsal of notebook 05 (Q.reshaped_pointwise_convolutions)."""
    _, xml, inputs = convert("tiny-sd15")
    sample = dict(inputs[0], sample=np.random.default_rng(1).standard_normal((2, 4, 2, 2), dtype=np.float32))
    model = Q.compress_weights_int8(xml)
    timing = Q.time_unet(model, sample, iters=1, warmup=0, precision="f32")  # static: the sample's shapes
    assert timing["median_s"] > 0
    errors = unet_relative_error(_static(xml, sample), _static(model, sample), [sample])
    assert 0 < max(errors) < 0.05, errors


def test_full_int8_quantizes_activations_but_not_the_sensitive_layers(convert, tmp_path):
    # SD 1.5 only, to keep the file's run time down (the hybrid test runs nncf.quantize on SDXL)
    _, xml, inputs = convert("tiny-sd15")
    model = Q.quantize_full(xml, inputs, subset_size=len(inputs))
    counts = Q.describe_ir(model)
    assert counts["fake_quantize"] > 0 and counts["int8_weights"] > 0
    # attention/feed-forward MatMuls and ResNet convolutions get INT8 inputs...
    assert "FakeQuantize" in _producers(model, "MatMul")
    assert _fed_by_fake_quantize(model, "resnets.0.conv1")
    # ...the layers in SENSITIVE_LAYER_PATTERNS stay in floating point
    assert not _fed_by_fake_quantize(model, "conv_in/")
    assert not _fed_by_fake_quantize(model, "conv_out/")
    out = tmp_path / "full.xml"
    ov.save_model(model, str(out), compress_to_fp16=False)
    assert Q.ir_size_bytes(out) < 0.6 * Q.ir_size_bytes(xml)
    errors = unet_relative_error(xml, model, inputs)
    assert 0 < max(errors) < 0.2, errors


def test_hybrid_quantizes_convolutions_and_compresses_matmuls(unet_ir, tmp_path):
    _, xml, inputs = unet_ir
    weighted = Q.weighted_matmul_and_gather_names(Q.read_model(xml))
    assert any("to_q" in n for n in weighted) and any("ff.net" in n for n in weighted)
    model = Q.quantize_hybrid(xml, inputs, subset_size=len(inputs))
    assert _fed_by_fake_quantize(model, "resnets.0.conv1")
    assert not _fed_by_fake_quantize(model, "conv_in/")
    by_name = {op.get_friendly_name(): op for op in model.get_ops()}
    for name in weighted:  # MatMuls with weights: INT8 weights, floating-point activations
        op = by_name[name]
        assert op.input_value(0).get_node().get_type_name() != "FakeQuantize", name
        if op.get_type_name() == "MatMul":
            assert _weight_dtype(op) in ("u8", "i8"), name
    out = tmp_path / "hybrid.xml"
    ov.save_model(model, str(out), compress_to_fp16=False)
    assert Q.ir_size_bytes(out) < 0.6 * Q.ir_size_bytes(xml)
    errors = unet_relative_error(xml, model, inputs)
    assert 0 < max(errors) < 0.2, errors


def test_ignored_scope_can_be_replaced():
    scope = Q.ignored_scope_of(["foo.*"])
    assert scope.patterns == ["foo.*"] and not scope.validate
    assert Q.ignored_scope_of(None).patterns == list(Q.SENSITIVE_LAYER_PATTERNS)
    assert Q.ignored_scope_of(()).patterns == []


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="unknown INT8 variant"):
        Q.quantize_variant(None, "int4")


def test_matching_layers_and_time_unet(convert):
    _, xml, inputs = convert("tiny-sd15")
    kept = Q.matching_layers(xml)
    assert any("conv_in/" in n for n in kept) and any("conv_out/" in n for n in kept)
    assert any("time_emb_proj" in n for n in kept) and not any("attn1" in n for n in kept)
    timing = Q.time_unet(xml, inputs[0], iters=2, warmup=1, precision="f32")
    assert timing["precision"] == "f32" and len(timing["times"]) == 2 and timing["median_s"] > 0
    assert len(timing["cpu_times"]) == 2
