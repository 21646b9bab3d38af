"""INT8 recipes on tiny SD 1.5 / SDXL UNets: each changes the IR as it should, stays close to f32,
calibration subsampling is bounded, and bad calibration data or output folders are refused before
any quantization step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import quantize as Q  # noqa: E402
from sdaccel.cpu.quality import unet_relative_error  # noqa: E402
from sdaccel.tools.toys.random_checkpoints import ensure_tiny  # noqa: E402

#: The tiny checkpoints that tests/conftest.py builds (ensure_checkpoint); the UNet IRs of the
#: fixtures ``convert`` and ``unet_ir`` (tests/cpu/conftest.py) come from them.
CHECKPOINTS = Path(__file__).resolve().parents[2] / "build" / "checkpoints"


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


# -- calibration ---------------------------------------------------------------------------------


def test_shipped_prompts():
    prompts = Q.read_prompts()
    assert 100 <= len(prompts) <= 250
    assert len(set(prompts)) == len(prompts)
    assert not any(p.startswith("#") for p in prompts)


def test_reservoir_is_bounded_and_uniform():
    reservoir = Q.Reservoir(5, seed=1)
    for i in range(1000):
        reservoir.add(i)
    assert len(reservoir) == 5 and reservoir.seen == 1000
    assert len(set(reservoir.items)) == 5
    # over many seeds every position of the stream is kept with probability 5/20
    hits = np.zeros(20)
    for seed in range(2000):
        r = Q.Reservoir(5, seed=seed)
        for i in range(20):
            r.add(i)
        hits[r.items] += 1
    assert np.allclose(hits / 2000, 0.25, atol=0.04), hits / 2000


class FakePipeline:
    """Calls the UNet-input callback once per step, as OVPipeline.generate does."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, negative_prompts=None, steps=20, seed=0, unet_input_callback=None, **kwargs):
        self.calls.append((prompts, seed, kwargs))
        for step in range(steps):
            buffer = np.full((2, 4, 2, 2), step, np.float32)
            unet_input_callback({"sample": buffer, "timestep": np.array([1000 - 50 * step], np.int64)})
            buffer[:] = -1  # a pipeline may reuse its buffers: the collector must have copied


def test_collect_unet_inputs_subsamples_in_memory():
    pipe = FakePipeline()
    samples = Q.collect_unet_inputs(pipe, ["a", "b", "c"], steps=10, num_samples=7, progress=False)
    assert len(pipe.calls) == 3 and [c[1] for c in pipe.calls] == [0, 1, 2]
    assert len(samples) == 7
    assert all(s["sample"].min() >= 0 for s in samples)  # copies, not the overwritten buffers
    assert len({int(s["timestep"][0]) for s in samples}) > 1


def test_collect_unet_inputs_streams_to_disk_with_stride(tmp_path):
    pipe = FakePipeline()
    store = Q.collect_unet_inputs(
        pipe, ["a", "b"], steps=10, num_samples=50, stride=4, out_dir=tmp_path / "calib", progress=False
    )
    # 20 UNet calls, every 4th offered: 5 kept, all of them since 5 < 50
    assert isinstance(store, Q.CalibrationSet) and len(store) == 5
    timesteps = sorted(int(s["timestep"][0]) for s in store)
    assert timesteps == sorted([1000, 800, 600, 1000 - 50 * 2, 1000 - 50 * 6])
    small = Q.collect_unet_inputs(
        pipe, ["a", "b"], steps=10, num_samples=3, out_dir=tmp_path / "calib", progress=False
    )
    assert len(small) == 3  # the folder is emptied first, then holds at most num_samples files


def test_matching_layers_and_time_unet(convert):
    _, xml, inputs = convert("tiny-sd15")
    kept = Q.matching_layers(xml)
    assert any("conv_in/" in n for n in kept) and any("conv_out/" in n for n in kept)
    assert any("time_emb_proj" in n for n in kept) and not any("attn1" in n for n in kept)
    timing = Q.time_unet(xml, inputs[0], iters=2, warmup=1, precision="f32")
    assert timing["precision"] == "f32" and len(timing["times"]) == 2 and timing["median_s"] > 0
    assert len(timing["cpu_times"]) == 2


def test_calibration_from_the_sdxl_pipeline(tmp_path):
    """The real path on tiny SDXL: capture the pipeline's UNet inputs (with SDXL's text_embeds
    and time_ids), quantize with them, and swap the INT8 UNet into the pipeline."""

    from sdaccel.cpu.export import MODEL_XML, export_pipeline
    from sdaccel.cpu.pipeline import OVPipeline

    needed = ["tokenizer", "tokenizer_2", "text_encoder", "text_encoder_2", "unet", "vae_decoder"]
    # exported once into build/ and reused (the notebooks' smoke profile uses the same folder)
    folder = export_pipeline(
        ensure_tiny(CHECKPOINTS, "tiny-sdxl"),
        CHECKPOINTS.parent / "openvino" / "tiny-sdxl",
        components=needed,
        weight_dtype="fp16",
        progress=False,
    )
    pipe = OVPipeline.from_pretrained(folder, precision="f32")
    calibration = Q.collect_unet_inputs(
        pipe,
        Q.read_prompts()[:2],
        steps=3,
        num_samples=4,
        height=64,
        width=64,
        out_dir=tmp_path,
        progress=False,
    )
    samples = list(calibration)
    assert len(samples) == 4
    assert set(samples[0]) == {"sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids"}
    assert samples[0]["sample"].shape == (2, 4, 8, 8) and samples[0]["time_ids"].shape == (2, 6)
    unet_xml = folder / "unet" / MODEL_XML
    hybrid = Q.quantize_hybrid(unet_xml, calibration, subset_size=4)
    assert Q.describe_ir(hybrid)["fake_quantize"] > 0
    errors = unet_relative_error(unet_xml, hybrid, samples)
    assert 0 < max(errors) < 0.2, errors
    reference = pipe.generate(["a red circle"], steps=3, height=64, width=64, seed=0)
    pipe.replace_unet(hybrid)
    quantized = pipe.generate(["a red circle"], steps=3, height=64, width=64, seed=0)
    assert not np.array_equal(reference.array, quantized.array)
    assert np.abs(reference.array - quantized.array).mean() < 0.1


# ----------------------------------------------------------------------------------------------
# Quantizing in parts
# ----------------------------------------------------------------------------------------------


def _calibration_folder(inputs, folder):
    return str(Q.CalibrationSet.save(inputs, folder).folder)


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
    one = Q.quantize_ir(xml, tmp_path / "out" / "one.xml", variant, calibration, subset_size=len(inputs))
    three = Q.quantize_in_parts(
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
    one = Q.quantize_ir(xml, tmp_path / "one.xml", "int8_weights")
    two = Q.quantize_in_parts(xml, tmp_path / "two.xml", "int8_weights", parts=2, isolate=False)
    assert two["int8_weight_elements"] == one["int8_weight_elements"] and two["fake_quantize"] == 0
    errors = unet_relative_error(tmp_path / "one.xml", tmp_path / "two.xml", inputs)
    assert max(errors) < 1e-5, errors


def test_parts_are_checked_before_any_work(convert, tmp_path):
    _, xml, inputs = convert("tiny-sd15")
    calibration = _calibration_folder(inputs, tmp_path / "calibration")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="parts must be a whole number"):
        Q.quantize_in_parts(xml, out / "q.xml", "full_int8", calibration, parts=0)
    with pytest.raises(TypeError, match="reads the calibration inputs from disk"):
        Q.quantize_in_parts(xml, out / "q.xml", "full_int8", inputs, parts=2)
    with pytest.raises(ValueError, match="needs calibration data"):
        Q.quantize_ir(xml, out / "q.xml", "hybrid", None, parts=2)
    with pytest.raises(ValueError, match="Cannot split"):  # more parts than blocks: cleaned up
        Q.quantize_in_parts(xml, out / "q.xml", "int8_weights", parts=1000, isolate=False)
    assert not out.exists() or list(out.iterdir()) == []


def test_a_memory_budget_chooses_the_parts(convert):
    from sdaccel.cpu import ir_parts

    _, xml, _ = convert("tiny-sd15")
    model = Q.read_model(xml)
    total = sum(ir_parts.unit_weight_bytes(model).values())
    whole = Q.estimate_peak_gb("full_int8", total)
    assert Q.parts_for_budget(xml, "full_int8", whole + 0.001) == 1
    # a budget that only the per-byte part of a half-size model fits needs at least two parts
    half = Q.PEAK_FIXED_GB + (whole - Q.PEAK_FIXED_GB) * 0.55
    parts = Q.parts_for_budget(xml, "full_int8", half)
    assert parts >= 2
    assert Q.estimate_peak_gb("full_int8", max(ir_parts.plan_parts(model, parts).weight_bytes)) <= half
    with pytest.raises(ValueError, match="raise the budget"):
        Q.parts_for_budget(xml, "full_int8", Q.PEAK_FIXED_GB)


def test_parts_show_progress_bars_only_where_they_are_drawn_live(convert, tmp_path, capfd):
    """Off a terminal (here: pytest's captured output, as a notebook's kernel collects a child's
    output), the children of quantize_in_parts print no finished NNCF bars unless asked for them;
    asked not to, a stage run here prints none either."""
    _, xml, _ = convert("tiny-sd15")
    assert Q.live_bars(True) and not Q.live_bars(False)
    # one watched child each (the whole UNet as one part): a child decides as every part's child does
    Q.quantize_in_parts(xml, tmp_path / "quiet.xml", "int8_weights", parts=1)
    assert "Applying Weight Compression" not in capfd.readouterr().out
    Q.quantize_in_parts(xml, tmp_path / "asked.xml", "int8_weights", parts=1, progress=True)
    assert "Applying Weight Compression" in capfd.readouterr().out
    Q.quantize_in_parts(xml, tmp_path / "here.xml", "int8_weights", parts=2, isolate=False, progress=False)
    assert "Applying Weight Compression" not in capfd.readouterr().out
