"""The Python OpenVINO pipeline against diffusers (same latents, same scheduler), GenAI on the same
folder, static shapes, precision reporting, the quantization hooks and clear errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")

from sdaccel.core.checkpoint import CheckpointError  # noqa: E402
from sdaccel.core.contract import TIMING_KEYS  # noqa: E402
from sdaccel.cpu.export import (  # noqa: E402
    MODEL_XML,
    export_pipeline,
    text_to_image_components,
)
from sdaccel.cpu.pipeline import OVPipeline, run_diffusers  # noqa: E402

PROMPTS = ["a photo of a cat", "a red circle on a blue background"]
NEGATIVES = ["a dog", "green"]
SIZE = {"height": 64, "width": 64}


@pytest.fixture(scope="session")
def exports(ov_exports, tiny_sd15, tiny_sdxl):
    """The same session folder as test_cpu_export.py: after that file's full export, this call is
    a no-op (the folder is complete); run alone, it exports what text-to-image needs."""
    return {
        name: (
            src,
            export_pipeline(src, ov_exports / name, components=text_to_image_components(src), progress=False),
        )
        for name, src in (("tiny-sd15", tiny_sd15), ("tiny-sdxl", tiny_sdxl))
    }


@pytest.fixture(scope="module")
def pipes(exports):
    return {name: OVPipeline.from_pretrained(out, precision="f32") for name, (_, out) in exports.items()}


def _diffusers(src):
    from diffusers import DiffusionPipeline

    ref = DiffusionPipeline.from_pretrained(src)
    ref.set_progress_bar_config(disable=True)
    return ref


def _uint8(arrays: np.ndarray) -> np.ndarray:
    return (arrays * 255).round().astype(np.int16)


@pytest.mark.parametrize("negatives", [None, NEGATIVES], ids=["no-negative", "negative"])
@pytest.mark.parametrize("name", ["tiny-sd15", "tiny-sdxl"])
def test_parity_with_diffusers_on_the_same_latents(exports, pipes, name, negatives):
    """f32 OpenVINO vs PyTorch: only kernel-level rounding differs (measured ~3e-6 on [0, 1]
    images), so the float images agree to 1e-4 and the 8-bit images to 2/255 (rounding at .5
    boundaries can flip one level)."""
    src, _ = exports[name]
    pipe = pipes[name]
    latents = pipe.prepare_latents(2, 64, 64, seed=3)
    ours = pipe(PROMPTS, negatives, steps=4, guidance_scale=7.5, latents=latents, **SIZE)
    ref = run_diffusers(src, PROMPTS, negatives, latents=latents, steps=4, guidance_scale=7.5, **SIZE)
    assert ours.array.shape == ref.shape == (2, 64, 64, 3)
    assert ref.std() > 0.05, "reference images are flat: the comparison would prove nothing"
    assert np.abs(ours.array - ref).max() < 1e-4
    assert np.abs(_uint8(ours.array) - _uint8(ref)).max() <= 2
    assert [im.size for im in ours.images] == [(64, 64)] * 2


def test_seed_draws_the_same_noise_as_diffusers(exports, pipes):
    src, _ = exports["tiny-sd15"]
    ours = pipes["tiny-sd15"](PROMPTS[:1], steps=3, seed=11, **SIZE)
    ref = _diffusers(src)(
        PROMPTS[:1],
        num_inference_steps=3,
        generator=torch.Generator().manual_seed(11),
        output_type="np",
        **SIZE,
    ).images
    assert np.abs(ours.array - ref).max() < 1e-4
    other = pipes["tiny-sd15"](PROMPTS[:1], steps=3, seed=12, **SIZE)
    assert np.abs(other.array - ours.array).max() > 1e-2


def test_no_guidance_and_non_square(exports, pipes):
    src, _ = exports["tiny-sdxl"]
    latents = pipes["tiny-sdxl"].prepare_latents(1, 64, 96, seed=5)
    ours = pipes["tiny-sdxl"](PROMPTS[:1], steps=3, guidance_scale=1.0, latents=latents, height=64, width=96)
    ref = _diffusers(src)(
        PROMPTS[:1], num_inference_steps=3, guidance_scale=1.0, latents=latents.clone(), output_type="np",
        height=64, width=96,
    ).images  # fmt: skip
    assert ours.images[0].size == (96, 64)
    assert np.abs(ours.array - ref).max() < 1e-4


def test_sd2_style_ddim_v_prediction(exports, tmp_path):
    """SD 2.1 is an SD pipeline with DDIM and v-prediction: swap the real SD 2.1 scheduler config
    into copies of the tiny SD 1.5 checkpoint and of its export; diffusers, our loop and GenAI must
    still agree (the scheduler class and prediction type come from the folder's config)."""
    from importlib.resources import files

    src, out = exports["tiny-sd15"]
    config = (files("sdaccel") / "reference_configs" / "sd-2.1" / "scheduler.json").read_text()
    assert json.loads(config)["prediction_type"] == "v_prediction"
    folders = [shutil.copytree(src, tmp_path / "src"), shutil.copytree(out, tmp_path / "ov")]
    for folder in folders:
        (folder / "scheduler" / "scheduler_config.json").write_text(config)
        index = json.loads((folder / "model_index.json").read_text())  # diffusers reads the class here
        index["scheduler"] = ["diffusers", "DDIMScheduler"]
        (folder / "model_index.json").write_text(json.dumps(index))
    pipe = OVPipeline.from_pretrained(folders[1], precision="f32")
    assert type(pipe.scheduler_class.from_config(pipe.scheduler_config)).__name__ == "DDIMScheduler"
    latents = pipe.prepare_latents(1, 64, 64, seed=9)
    ours = pipe(PROMPTS[:1], steps=3, latents=latents, **SIZE)
    ref = run_diffusers(folders[0], PROMPTS[:1], latents=latents, steps=3, guidance_scale=7.5, **SIZE)
    assert np.abs(ours.array - ref).max() < 1e-4
    pytest.importorskip("openvino_genai")
    from sdaccel.cpu.genai import GenAIPipeline

    theirs = GenAIPipeline(folders[1], precision="f32")(PROMPTS[0], steps=3, seed=9, **SIZE).images[0]
    assert np.abs(np.asarray(theirs, np.int16) - np.asarray(ours.images[0], np.int16)).max() <= 2


# ----------------------------------------------------------------------------------------------
# GenAI on the same folder
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-sd15", "tiny-sdxl"])
def test_genai_loads_our_folder_and_matches_the_python_loop(exports, pipes, name):
    """GenAI's TorchGenerator draws torch.randn's noise, so the C++ pipeline (its own tokenizer,
    scheduler and loop) reproduces ours; its 8-bit conversion truncates where we round: <= 1 level,
    plus f32 rounding, so 2/255. Square images: GenAI builds SDXL's time_ids as (width, height)
    where diffusers uses (height, width), which only agree when the two are equal."""
    pytest.importorskip("openvino_genai")
    from sdaccel.cpu.genai import GenAIPipeline

    _, out = exports[name]
    genai = GenAIPipeline(out, precision="f32")
    # a list of prompts: one GenAI call each, all from one TorchGenerator(seed), which draws the
    # same noise as OVPipeline's batch: the same seed gives the same images
    result = genai(PROMPTS, steps=4, guidance_scale=7.5, seed=7, **SIZE)
    assert [im.size for im in result.images] == [(64, 64)] * 2 and result.array.shape == (2, 64, 64, 3)
    assert set(TIMING_KEYS) <= set(result.timings) and result.timings["images"] == 2
    assert len(result.timings["unet_steps"]) >= 8 and result.timings["run_s"] > 0
    ours = pipes[name](PROMPTS, steps=4, guidance_scale=7.5, seed=7, **SIZE)
    for k in range(2):
        theirs = np.asarray(result.images[k], dtype=np.int16)
        assert np.abs(theirs - np.asarray(ours.images[k], dtype=np.int16)).max() <= 2, k
        assert theirs.std() > 10
    np.testing.assert_array_equal(np.asarray(result.images[1]), (result.array[1] * 255).round())
    wide = genai(PROMPTS, steps=2, seed=7, height=64, width=96)
    assert [im.size for im in wide.images] == [(96, 64)] * 2


def test_genai_static_reshape(exports):
    pytest.importorskip("openvino_genai")
    from sdaccel.cpu.genai import GenAIPipeline

    _, out = exports["tiny-sdxl"]
    result = GenAIPipeline(out, static=(1, 64, 64))("a cat", steps=2, height=64, width=64)
    assert result.images[0].size == (64, 64)


# ----------------------------------------------------------------------------------------------
# Static shapes, precision, hooks
# ----------------------------------------------------------------------------------------------


def test_static_pipeline_matches_dynamic_and_refuses_other_shapes(exports, pipes):
    _, out = exports["tiny-sd15"]
    static = OVPipeline.from_pretrained(out, precision="f32", static=(2, 64, 64))
    for compiled in [static.unet, static.vae_decoder, *static.text_encoders]:
        assert all(port.get_partial_shape().is_static for port in compiled.inputs)
    a = static(PROMPTS, NEGATIVES, steps=3, seed=1, **SIZE)
    b = pipes["tiny-sd15"](PROMPTS, NEGATIVES, steps=3, seed=1, **SIZE)
    assert np.abs(a.array - b.array).max() < 1e-5
    with pytest.raises(ValueError, match="compiled static for .* got \\(1, 64, 64, True\\)"):
        static(PROMPTS[:1], steps=2, **SIZE)


def test_precision_is_what_the_plugin_compiled(exports, pipes):
    _, out = exports["tiny-sd15"]
    assert set(pipes["tiny-sd15"].precisions.values()) == {"f32"}
    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    bf16 = OVPipeline.from_pretrained(out, precision="bf16")
    default = OVPipeline.from_pretrained(out, precision=None)  # not "auto": the plugin's own choice
    assert bf16.precision == ("bf16" if has_bf16 else "f32")
    assert default.precision == ("bf16" if has_bf16 else "f32")  # the CPU plugin's default
    a = bf16(PROMPTS[:1], steps=3, seed=2, **SIZE).array
    b = pipes["tiny-sd15"](PROMPTS[:1], steps=3, seed=2, **SIZE).array
    # bf16 keeps 8 significant bits (~0.4% per value); over a few steps and the VAE the images stay
    # within a few 1/100 of f32, and are not identical when bf16 really ran
    assert np.abs(a - b).max() < 0.1
    assert (np.abs(a - b).max() > 0) == has_bf16
    with pytest.raises(ValueError, match="precision"):
        OVPipeline.from_pretrained(out, precision="int8")


def test_unet_input_callback_and_step_callback(pipes):
    pipe = pipes["tiny-sdxl"]
    seen, steps = [], []
    out = pipe(
        PROMPTS, steps=3, seed=0, unet_input_callback=lambda d: seen.append({k: v.copy() for k, v in d.items()}),
        callback=lambda step, t, latents: steps.append((step, t, latents.shape)), **SIZE,
    )  # fmt: skip
    assert len(seen) == len(steps) == len(out.timings["unet_steps"]) == 3
    first = seen[0]
    assert set(first) == {"sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids"}
    assert first["sample"].shape == (4, 4, 8, 8) and first["timestep"].dtype == np.int64
    assert first["time_ids"].tolist()[0] == [64, 64, 0, 0, 64, 64]
    # no negative prompt: SDXL's force_zeros_for_empty_prompt zeroes the negative half
    assert not first["encoder_hidden_states"][:2].any() and first["encoder_hidden_states"][2:].any()
    assert steps[-1][2] == (2, 4, 8, 8) and steps[0][1] > steps[-1][1]


def test_replace_unet(exports, pipes):
    _, out = exports["tiny-sd15"]
    pipe = OVPipeline.from_pretrained(out, precision="f32")
    before = pipe(PROMPTS[:1], steps=2, seed=4, **SIZE).array
    model = ov.Core().read_model(out / "unet" / MODEL_XML)
    pipe.replace_unet(model)
    np.testing.assert_allclose(pipe(PROMPTS[:1], steps=2, seed=4, **SIZE).array, before, atol=1e-6)
    # a UNet that predicts half the noise must change the image: the swap is really used
    noise = model.get_results()[0].input_value(0)
    half = ov.opset13.multiply(noise, np.float32(0.5))
    noise.get_tensor().set_names(set())
    half.output(0).get_tensor().set_names({"out_sample"})
    halved = ov.Model([half], model.get_parameters(), "halved")
    pipe.replace_unet(halved)
    assert np.abs(pipe(PROMPTS[:1], steps=2, seed=4, **SIZE).array - before).max() > 1e-3
    pipe.replace_unet(out / "unet" / MODEL_XML)  # a path works too
    np.testing.assert_allclose(pipe(PROMPTS[:1], steps=2, seed=4, **SIZE).array, before, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


def test_clear_errors(tmp_path, tiny_sd15):
    with pytest.raises(CheckpointError, match="No OpenVINO export"):
        OVPipeline.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="not a complete OpenVINO export"):
        OVPipeline.from_pretrained(tiny_sd15)  # a diffusers folder, not an export
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    with pytest.raises(CheckpointError, match="'FluxPipeline'"):
        OVPipeline.from_pretrained(tmp_path)


def test_an_activation_quantized_unet_runs_where_f16_was_chosen(exports, pipes, tmp_path):
    """OpenVINO 2026.4 cannot compile or run a model with FakeQuantize under the f16 hint on an x86
    CPU that offers f16 (AVX512-FP16): the pipeline runs such a UNet's float layers in bf16 there,
    says so in ``precisions``, and keeps f16 for a weight-only INT8 UNet. A folder whose UNet is
    that model runs too: GenAI, which takes one hint for every model, runs them all in bf16, and
    ``precision="auto"`` does not time f16 for that UNet (compiling it would fail) and says why."""
    from sdaccel.cpu import quantize
    from sdaccel.cpu.genai import GenAIPipeline
    from sdaccel.cpu.precision import PrecisionChoice, choose_precision, device_capabilities

    capabilities = set(device_capabilities(ov.Core()))
    if not {"FP16", "BF16"} <= capabilities:
        pytest.skip(f"this CPU's plugin offers {sorted(capabilities)}: not both f16 and bf16")
    _, out = exports["tiny-sd15"]
    seen = []
    pipes["tiny-sd15"](PROMPTS, steps=2, seed=1, unet_input_callback=lambda d: seen.append(dict(d)), **SIZE)
    int8 = quantize.quantize_full(out / "unet" / MODEL_XML, seen, subset_size=len(seen))
    pipe = OVPipeline.from_pretrained(out, precision={"unet": "f16"})
    assert pipe.precision == "f16"
    pipe.replace_unet(int8)
    assert pipe.precision == "bf16"
    image = pipe(PROMPTS[:1], steps=2, seed=4, **SIZE).array
    assert image.shape == (1, 64, 64, 3) and np.isfinite(image).all()
    pipe.replace_unet(
        quantize.compress_weights_int8(ov.Core().read_model(out / "unet" / MODEL_XML))
    )  # no FakeQuantize
    assert pipe.precision == "f16"

    folder = tmp_path / "int8-export"  # the export with the INT8 UNet in its place
    shutil.copytree(out, folder)
    ov.save_model(int8, folder / "unet" / MODEL_XML)
    genai = GenAIPipeline(folder, precision="f16")
    assert genai.precision == "bf16"
    assert np.isfinite(genai(PROMPTS[0], steps=2, seed=4, **SIZE).array).all()
    choice = choose_precision(folder, **SIZE, batch=1, guidance=True, iters=1, warmup=0)
    unet = choice.components["unet"]
    assert (
        set(unet.measurements) == {"f32", "bf16"} and "f16" in choice.components["vae_decoder"].measurements
    )
    assert "f16 not timed" in choice.summary("unet") and "FakeQuantize" in choice.summary("unet")
    assert PrecisionChoice.from_json(json.loads(json.dumps(choice.to_json()))) == choice
    auto = OVPipeline.from_pretrained(folder, precision="auto")
    assert (
        auto.precision in ("f32", "bf16")
        and np.isfinite(auto(PROMPTS[0], steps=2, seed=4, **SIZE).array).all()
    )
