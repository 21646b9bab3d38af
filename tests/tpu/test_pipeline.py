"""The JAX pipeline against diffusers' StableDiffusionXLPipeline / StableDiffusionPipeline.

Both start from the same initial latents (ours, passed to diffusers transposed to NCHW), on the
tiny random-weight checkpoints, at 64x64 (8x8 latents) and a few steps.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdaccel.core.checkpoint import read_defaults
from sdaccel.core.contract import GenerationResult, image_grid
from sdaccel.tpu.models.weights import count_params
from sdaccel.tpu.pipeline import JaxPipeline, describe_unet, initial_noise

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

PROMPTS = ["a photo of an astronaut riding a horse", "a red cat on a blue mountain"]
SIZE = 64


@pytest.fixture(scope="module")
def sdxl(tiny_sdxl):
    return JaxPipeline.from_pretrained(tiny_sdxl, dtype=jnp.float32, progress=False)


@pytest.fixture(scope="module")
def sdxl_torch(tiny_sdxl):
    return diffusers.StableDiffusionXLPipeline.from_pretrained(tiny_sdxl, dtype=torch.float32)


def _noise(batch, seed=0):
    return np.asarray(initial_noise(seed, jnp.arange(batch), (SIZE // 8, SIZE // 8, 4)))


def _reference(pipe, latents, **kwargs):
    with torch.no_grad():
        out = pipe(
            height=SIZE,
            width=SIZE,
            latents=torch.from_numpy(latents.transpose(0, 3, 1, 2).copy()),
            output_type="np",
            **kwargs,
        )
    return out.images  # (B, H, W, 3) float32 in [0, 1]


def _compare(ours, ref):
    """float images within 1e-4 and the 8-bit images within 2/255.

    In float32 the two implementations differ only in the order of floating-point operations
    (XLA vs PyTorch kernels), ~1e-6 per step here. Rounding to 8 bits turns a difference that
    straddles a .5 boundary into 1/255; 2/255 leaves room for that plus drift over the steps,
    while any real bug (a wrong sigma, a swapped guidance half, a missing scale) moves pixels by
    tens of levels.
    """
    assert ours.array.shape == ref.shape
    float_err = np.abs(ours.array - ref).max()
    ours_u8 = np.stack([np.asarray(img, np.int16) for img in ours.images])
    ref_u8 = (ref * 255).round().astype(np.int16)
    assert float_err < 1e-4, f"float max abs err {float_err:.2e}"
    assert np.abs(ours_u8 - ref_u8).max() <= 2
    return float_err


def test_sdxl_fp32_matches_diffusers(sdxl, sdxl_torch):
    latents = _noise(2)
    ours = sdxl.generate(PROMPTS, steps=4, guidance_scale=5.0, height=SIZE, width=SIZE, seed=0)
    ref = _reference(sdxl_torch, latents, prompt=PROMPTS, num_inference_steps=4, guidance_scale=5.0)
    _compare(ours, ref)
    assert isinstance(ours, GenerationResult) and ours.latents is None
    assert len(ours.images) == 2 and ours.images[0].size == (SIZE, SIZE)
    assert ours.timings["compile_s"] > 0 and ours.timings["images"] == 2
    assert ours.timings["images_per_s"] == pytest.approx(2 / ours.timings["run_s"])
    again = sdxl.generate(PROMPTS, steps=4, guidance_scale=5.0, height=SIZE, width=SIZE, latents=latents)
    assert again.timings["compile_s"] == 0  # same shapes: the cached executables run
    np.testing.assert_array_equal(again.array, ours.array)


def test_sdxl_negative_prompts_and_size_conditioning(sdxl, sdxl_torch):
    latents = _noise(2, seed=3)
    kwargs = dict(guidance_scale=7.0, original_size=(512, 256), crops_coords_top_left=(16, 8))
    ours = sdxl.generate(PROMPTS, ["blurry", ""], steps=3, height=SIZE, width=SIZE, latents=latents, **kwargs)
    ref = _reference(
        sdxl_torch, latents, prompt=PROMPTS, negative_prompt=["blurry", ""], num_inference_steps=3, **kwargs
    )
    _compare(ours, ref)


def test_sdxl_without_guidance(sdxl, sdxl_torch):
    latents = _noise(1, seed=5)
    ours = sdxl.generate(PROMPTS[:1], steps=2, guidance_scale=1.0, height=SIZE, width=SIZE, latents=latents)
    ref = _reference(sdxl_torch, latents, prompt=PROMPTS[:1], num_inference_steps=2, guidance_scale=1.0)
    _compare(ours, ref)


def test_sdxl_bf16_close(tiny_sdxl, sdxl):
    """bfloat16 UNet and text encoders (8-bit mantissa, relative rounding 2**-8 ~ 0.4%); the VAE
    stays float32 (force_upcast). Errors of ~1% in the noise prediction over 4 steps move pixels
    by a few hundredths here, so: max abs < 0.1 and mean abs < 0.02 on [0, 1] images, where a
    broken pipeline is off by ~0.3 (random weights give images of ~uniform noise)."""
    bf16 = JaxPipeline.from_pretrained(tiny_sdxl, dtype=jnp.bfloat16, progress=False)
    assert bf16.dtypes["unet"] == jnp.bfloat16 and bf16.dtypes["text"] == jnp.bfloat16
    assert bf16.dtypes["vae"] == jnp.float32
    kwargs = dict(steps=4, guidance_scale=5.0, height=SIZE, width=SIZE, seed=0)
    a, b = sdxl.generate(PROMPTS, **kwargs).array, bf16.generate(PROMPTS, **kwargs).array
    assert np.isfinite(b).all()
    err = np.abs(a - b)
    assert err.max() < 0.1 and err.mean() < 0.02, (err.max(), err.mean())
    if jax.default_backend() == "cpu":  # XLA computes the bf16 dots in float32 here: one weight at a time
        (compiled,) = bf16._denoise.executables.values()  # (sdaccel.tpu.aot.CPU_COMPILER_OPTIONS)
        unet_bf16_bytes = count_params(bf16.unet)[1]
        assert compiled.executable.memory_analysis().temp_size_in_bytes < unet_bf16_bytes


def test_sd15_ddim_matches_diffusers(tiny_sd15):
    """SD 1.5 layout (one encoder, last_hidden_state, no size conditioning) with DDIM on both sides
    (the checkpoint's PNDM is not implemented; SDXL's tests cover Euler)."""
    ours = JaxPipeline.from_pretrained(tiny_sd15, dtype=jnp.float32, scheduler="ddim", progress=False)
    ref = diffusers.StableDiffusionPipeline.from_pretrained(
        tiny_sd15, dtype=torch.float32, safety_checker=None, requires_safety_checker=False
    )
    ref.scheduler = diffusers.DDIMScheduler.from_config(ref.scheduler.config)
    assert not ours.is_sdxl and (ours.defaults.height, ours.defaults.width) == (128, 128)
    assert ours.defaults == read_defaults(tiny_sd15) and ours.defaults.guidance_scale == 7.5
    latents = _noise(2, seed=1)
    result = ours.generate(PROMPTS, steps=3, guidance_scale=7.5, height=SIZE, width=SIZE, latents=latents)
    expected = _reference(ref, latents, prompt=PROMPTS, num_inference_steps=3, guidance_scale=7.5)
    _compare(result, expected)


def test_sd15_pndm_falls_back_with_warning(tiny_sd15):
    with pytest.warns(UserWarning, match="PNDMScheduler is not implemented.*running EulerDiscreteScheduler"):
        pipe = JaxPipeline.from_pretrained(tiny_sd15, dtype=jnp.float32, progress=False)
    assert type(pipe.scheduler).__name__ == "EulerDiscreteScheduler"


def test_noise_does_not_depend_on_the_split():
    shape = (4, 4, 4)
    whole = np.asarray(initial_noise(7, jnp.arange(5), shape))
    parts = [np.asarray(initial_noise(7, jnp.arange(a, b), shape)) for a, b in [(0, 2), (2, 3), (3, 5)]]
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    assert not np.allclose(whole[0], whole[1])  # each image has its own noise
    assert not np.allclose(np.asarray(initial_noise(8, jnp.arange(1), shape))[0], whole[0])


def test_errors(sdxl, tiny_sdxl):
    with pytest.raises(ValueError, match="multiples of 16"):
        sdxl.generate("a cat", height=60, width=64)
    with pytest.raises(ValueError, match="2 negative prompts for 1 prompts"):
        sdxl.generate(["a cat"], ["a", "b"], height=SIZE, width=SIZE)
    with pytest.raises(ValueError, match="latents have shape"):
        sdxl.generate(["a cat"], height=SIZE, width=SIZE, latents=np.zeros((1, 4, 8, 8), np.float32))
    with pytest.raises(ValueError, match="pass one prompt"):
        sdxl.generate([])
    with pytest.raises(ValueError, match="Unsupported dtype"):
        JaxPipeline.from_pretrained(tiny_sdxl, dtype=jnp.int8)


def test_describe_unet_counts_sdxl_layers():
    """SDXL base: 70 transformer layers (2x2 + 2x10 down, 10 mid, 3x10 + 3x2 up), none at the top."""
    import json
    from importlib import resources

    from sdaccel.tpu.models.unet import UNetConfig

    path = resources.files("sdaccel").joinpath("reference_configs/sdxl-base-1.0/unet.json")
    rows = describe_unet(UNetConfig.from_dict(json.loads(path.read_text())), 128, 128)
    assert [r["block"] for r in rows][:4] == ["down_blocks.0", "down_blocks.1", "down_blocks.2", "mid_block"]
    assert sum(r["transformer_layers"] for r in rows) == 70
    assert rows[0]["transformer_layers"] == 0 and rows[0]["resolution"] == "128x128"
    assert rows[3] == {
        **rows[3],
        "resolution": "32x32",
        "channels": 1280,
        "transformer_layers": 10,
        "head_dim": 64,
    }


def test_image_grid(sdxl):
    images = sdxl.generate(PROMPTS, steps=4, height=SIZE, width=SIZE).images
    grid = image_grid(images + images[:1], cols=2)
    assert grid.size == (2 * SIZE, 2 * SIZE)
    np.testing.assert_array_equal(np.asarray(grid)[SIZE:, :SIZE], np.asarray(images[0]))
