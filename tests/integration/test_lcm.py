"""Few-step sampling: Euler ancestral and LCM in the pipelines, and LCM-distilled UNets.

The stochastic samplers add fresh noise at every step. The pipelines draw it per image index and
step (``sdaccel.tpu.pipeline.step_noise``); for the comparisons with diffusers, diffusers' scheduler
is handed exactly that noise (its ``randn_tensor`` is replaced), so both runs see the same
numbers. The LCM UNet is the tiny random SDXL checkpoint with ``time_cond_proj_dim`` added to
its config and a random ``time_embedding.cond_proj.weight``.
"""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from sdaccel.tpu import aot
from sdaccel.tpu.pipeline import JaxPipeline, image_keys, initial_noise, step_noise

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

PROMPTS = ["a red circle", "a blue square on a green background", "a yellow triangle"]
SIZE = 64
LATENT = (SIZE // 8, SIZE // 8, 4)
COND_DIM = 16


def make_lcm_checkpoint(source, folder, cond_dim: int = COND_DIM, seed: int = 0):
    """A copy of the diffusers checkpoint ``source`` whose UNet takes a guidance embedding of
    ``cond_dim`` (``time_cond_proj_dim``), with a random bias-free ``cond_proj`` large enough to
    change the prediction."""
    shutil.copytree(source, folder)
    config_path = folder / "unet" / "config.json"
    config = json.loads(config_path.read_text())
    config["time_cond_proj_dim"] = cond_dim
    config_path.write_text(json.dumps(config, indent=2))
    weights_path = folder / "unet" / "diffusion_pytorch_model.safetensors"
    tensors = load_file(weights_path)
    in_features = config["block_out_channels"][0]
    rng = np.random.default_rng(seed)
    tensors["time_embedding.cond_proj.weight"] = (0.5 * rng.standard_normal((in_features, cond_dim))).astype(
        np.float32
    )
    save_file(tensors, weights_path)
    return folder


@pytest.fixture(scope="module")
def tiny_lcm(tiny_sdxl, tmp_path_factory):
    return make_lcm_checkpoint(tiny_sdxl, tmp_path_factory.mktemp("lcm") / "tiny-lcm-sdxl")


@pytest.fixture(scope="module")
def euler_a(tiny_sdxl):
    return JaxPipeline.from_pretrained(tiny_sdxl, dtype=jnp.float32, scheduler="euler_a", progress=False)


def _noise_as_diffusers(monkeypatch, module, seed, batch, steps):
    """Make diffusers' scheduler ``module`` draw our per-step noise (NCHW), step after step."""
    keys = image_keys(seed, jnp.arange(batch))
    per_step = [np.asarray(step_noise(keys, i, LATENT)).transpose(0, 3, 1, 2).copy() for i in range(steps)]
    drawn = []

    def randn_tensor(shape, generator=None, device=None, dtype=None, **_):
        assert tuple(shape) == per_step[0].shape
        drawn.append(len(drawn))
        return torch.from_numpy(per_step[drawn[-1]]).to(dtype)

    monkeypatch.setattr(f"{module}.randn_tensor", randn_tensor)
    return drawn


def _diffusers_images(pipe, batch, seed, **kwargs):
    latents = np.asarray(initial_noise(seed, jnp.arange(batch), LATENT)).transpose(0, 3, 1, 2).copy()
    with torch.no_grad():
        out = pipe(height=SIZE, width=SIZE, latents=torch.from_numpy(latents), output_type="np", **kwargs)
    return out.images


def test_step_noise_per_image_and_step():
    keys = image_keys(3, jnp.arange(4))
    split = np.concatenate([np.asarray(image_keys(3, jnp.arange(a, b))) for a, b in [(0, 1), (1, 4)]])
    np.testing.assert_array_equal(np.asarray(keys), split)
    a, b = np.asarray(step_noise(keys, 0, (4, 4, 2))), np.asarray(step_noise(keys, 1, (4, 4, 2)))
    assert a.shape == (4, 4, 4, 2) and a.dtype == np.float32
    assert 0.5 < a.std() < 1.5 and not np.allclose(a, b) and not np.allclose(a[0], a[1])
    np.testing.assert_array_equal(np.asarray(step_noise(keys[2:3], 1, (4, 4, 2)))[0], b[2])
    initial = np.asarray(initial_noise(3, jnp.arange(4), (4, 4, 2)))  # keyed apart from the initial noise
    assert not np.allclose(initial, a) and not np.allclose(initial, b)


def test_euler_ancestral_matches_diffusers(euler_a, tiny_sdxl, monkeypatch):
    ref = diffusers.StableDiffusionXLPipeline.from_pretrained(tiny_sdxl, dtype=torch.float32)
    ref.scheduler = diffusers.EulerAncestralDiscreteScheduler.from_config(ref.scheduler.config)
    steps = 4
    drawn = _noise_as_diffusers(
        monkeypatch, "diffusers.schedulers.scheduling_euler_ancestral_discrete", 5, 2, steps
    )
    expected = _diffusers_images(ref, 2, 5, prompt=PROMPTS[:2], num_inference_steps=steps, guidance_scale=5.0)
    assert len(drawn) == steps
    ours = euler_a.generate(PROMPTS[:2], steps=steps, guidance_scale=5.0, height=SIZE, width=SIZE, seed=5)
    err = np.abs(ours.array - expected).max()
    assert err < 1e-4, f"float max abs err {err:.2e}"


def test_euler_ancestral_same_image_alone_or_in_a_batch(euler_a):
    kwargs = dict(steps=3, guidance_scale=5.0, height=SIZE, width=SIZE, seed=11)
    batch = euler_a.generate(PROMPTS, **kwargs).array
    alone = [euler_a.generate(PROMPTS[k], first_index=k, **kwargs).array[0] for k in range(3)]
    np.testing.assert_allclose(np.stack(alone), batch, rtol=0, atol=1e-5)
    # the step noise matters: same prompt and initial noise, another seed's step noise differs
    again = euler_a.generate(PROMPTS[0], **kwargs).array[0]
    np.testing.assert_array_equal(again, alone[0])
    latents = initial_noise(11, jnp.arange(1), LATENT)
    other_seed = euler_a.generate(PROMPTS[0], **{**kwargs, "seed": 12}, latents=latents).array[0]
    assert np.abs(other_seed - batch[0]).max() > 1e-2


def test_sharded_euler_ancestral_matches_one_device(euler_a, tiny_sdxl):
    from sdaccel.tpu import sharding
    from sdaccel.tpu.sharded_pipeline import ShardedPipeline

    pipe = ShardedPipeline.from_pretrained(
        tiny_sdxl, sharding.make_mesh(4), dtype=jnp.float32, scheduler="euler_a", progress=False
    )
    kwargs = dict(steps=3, guidance_scale=5.0, height=SIZE, width=SIZE, seed=2)
    sharded = pipe.generate(PROMPTS, **kwargs)  # 3 images on 4 devices: one padding row
    assert sharded.timings["padded"] == 1
    np.testing.assert_allclose(sharded.array, euler_a.generate(PROMPTS, **kwargs).array, rtol=0, atol=1e-5)


def test_sharded_flops_count_the_guidance_embedding(tiny_lcm):
    """An LCM UNet's step also projects the guidance embedding (``cond_proj``, in_features x
    cond_dim): the sharded FLOPs count holds that matmul, and a single batch (no CFG)."""
    from sdaccel.tpu import sharding
    from sdaccel.tpu.sharded_pipeline import ShardedPipeline

    pipe = ShardedPipeline.from_pretrained(tiny_lcm, sharding.make_mesh(2), dtype=jnp.float32, progress=False)
    args = pipe.inputs(PROMPTS[:2], None, 2, 1.5, SIZE, SIZE, 0)
    assert args[2].prompt_embeds.shape[1] == 1  # guidance as an embedding: G = 1
    flops = pipe.flops(args)
    with_cond = flops["unet_step"]
    params, state, cond, noise, _ = args
    x = jax.ShapeDtypeStruct((2, *noise.shape[1:]), noise.dtype)

    def spec(a):
        return None if a is None else jax.ShapeDtypeStruct((2, *a.shape[2:]), a.dtype)

    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params["unet"])
    t = jax.ShapeDtypeStruct((), state.timesteps.dtype)
    inputs = (abstract, x, t, spec(cond.prompt_embeds), spec(cond.text_embeds), spec(cond.time_ids))
    without = aot.aot_compile(pipe._unet_call, *inputs).flops
    in_features = pipe.pipeline.unet_config.block_out_channels[0]
    assert with_cond - without >= 2 * in_features * COND_DIM
    assert with_cond - without < 0.01 * without


def test_lcm_pipeline_matches_diffusers(tiny_lcm, monkeypatch):
    """An LCM UNet: guidance as an embedding (no negative batch), LCMScheduler, 4 steps."""
    ours = JaxPipeline.from_pretrained(tiny_lcm, dtype=jnp.float32, scheduler="lcm", progress=False)
    assert ours.guidance_embedded and type(ours.scheduler).__name__ == "LCMScheduler"
    ref = diffusers.StableDiffusionXLPipeline.from_pretrained(tiny_lcm, dtype=torch.float32)
    ref.scheduler = diffusers.LCMScheduler.from_config(ref.scheduler.config)
    assert ref.unet.config.time_cond_proj_dim == COND_DIM
    steps, batch = 4, 2
    drawn = _noise_as_diffusers(monkeypatch, "diffusers.schedulers.scheduling_lcm", 7, batch, steps)
    expected = _diffusers_images(
        ref, batch, 7, prompt=PROMPTS[:batch], num_inference_steps=steps, guidance_scale=8.0
    )
    assert len(drawn) == steps - 1  # the last LCM step adds no noise
    result = ours.generate(PROMPTS[:batch], steps=steps, guidance_scale=8.0, height=SIZE, width=SIZE, seed=7)
    err = np.abs(result.array - expected).max()
    assert err < 1e-4, f"float max abs err {err:.2e}"
    # the guidance scale reaches the UNet through the embedding
    other = ours.generate(PROMPTS[:batch], steps=steps, guidance_scale=2.0, height=SIZE, width=SIZE, seed=7)
    assert np.abs(other.array - result.array).max() > 1e-3
    cond = ours.conditioning(PROMPTS[:batch], None, 8.0, SIZE, SIZE)
    assert cond.prompt_embeds.shape[:2] == (batch, 1)  # no classifier-free guidance batch


def test_lcm_same_image_alone_or_in_a_batch(tiny_lcm):
    pipe = JaxPipeline.from_pretrained(tiny_lcm, dtype=jnp.float32, scheduler="lcm", progress=False)
    kwargs = dict(steps=2, guidance_scale=4.0, height=SIZE, width=SIZE, seed=1)
    batch = pipe.generate(PROMPTS, **kwargs).array
    assert np.isfinite(batch).all() and batch.std() > 1e-3
    alone = pipe.generate(PROMPTS[2], first_index=2, **kwargs).array[0]
    np.testing.assert_allclose(alone, batch[2], rtol=0, atol=1e-5)


def test_stochastic_scheduler_needs_noise_keys(euler_a):
    state = euler_a.scheduler.set_timesteps(2)
    cond = euler_a.conditioning(PROMPTS[:1], None, 5.0, SIZE, SIZE)
    latents = initial_noise(0, jnp.arange(1), LATENT)
    with pytest.raises(ValueError, match="noise_keys"):
        euler_a.denoise_and_decode(euler_a.params, state, cond, latents, jnp.float32(5.0))


# ----------------------------------------------------------------------------------------------
# The OpenVINO track: export with timestep_cond, the same scheduler names, the same images
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lcm_export(tiny_lcm, tmp_path_factory):
    pytest.importorskip("openvino")
    from sdaccel.cpu.export import export_pipeline, text_to_image_components

    folder = tmp_path_factory.mktemp("lcm-ov") / "tiny-lcm-sdxl"
    return export_pipeline(tiny_lcm, folder, components=text_to_image_components(tiny_lcm), progress=False)


def test_lcm_unet_exports_timestep_cond(lcm_export):
    import openvino as ov

    from sdaccel.cpu.export import MODEL_XML

    model = ov.Core().read_model(lcm_export / "unet" / MODEL_XML)
    inputs = {port.get_any_name(): port.get_partial_shape() for port in model.inputs}
    assert list(inputs) == [
        "sample",
        "timestep",
        "encoder_hidden_states",
        "text_embeds",
        "time_ids",
        "timestep_cond",
    ]
    assert inputs["timestep_cond"][1].get_length() == COND_DIM and inputs["timestep_cond"][0].is_dynamic


def test_static_lcm_pipeline_takes_the_unguided_shape(lcm_export):
    """A static LCM pipeline is compiled for batch x 1 (no negative half), whatever ``guidance``
    the StaticShape said, and runs with a guidance scale above 1 (told as an embedding)."""
    from sdaccel.cpu.pipeline import OVPipeline

    pipe = OVPipeline.from_pretrained(lcm_export, precision="f32", static=(2, SIZE, SIZE), scheduler="lcm")
    assert pipe.static.guidance is False and pipe.static.model_batch == 2
    out = pipe(PROMPTS[:2], steps=2, guidance_scale=6.0, seed=1)
    assert out.array.shape == (2, SIZE, SIZE, 3) and out.array.std() > 0.02


@pytest.mark.parametrize("scheduler", ["lcm", "euler_a"])
def test_ov_pipeline_matches_diffusers_with_the_same_seed(tiny_lcm, lcm_export, scheduler):
    """The OpenVINO loop with ``scheduler=`` (the JAX pipeline's names), fed ``timestep_cond`` and
    no negative batch, against diffusers on the same seed: one torch generator draws the initial
    latents and then each step's noise, in both."""
    from sdaccel.cpu.pipeline import OVPipeline

    pipe = OVPipeline.from_pretrained(lcm_export, precision="f32", scheduler=scheduler)
    cls = {"lcm": "LCMScheduler", "euler_a": "EulerAncestralDiscreteScheduler"}[scheduler]
    assert pipe.scheduler_class.__name__ == cls and pipe.guidance_embedded
    ref = diffusers.StableDiffusionXLPipeline.from_pretrained(tiny_lcm, dtype=torch.float32)
    ref.scheduler = getattr(diffusers, cls).from_config(ref.scheduler.config)
    ref.set_progress_bar_config(disable=True)
    with torch.no_grad():
        expected = ref(
            PROMPTS[:2],
            num_inference_steps=3,
            guidance_scale=6.0,
            height=SIZE,
            width=SIZE,
            generator=torch.Generator().manual_seed(9),
            output_type="np",
        ).images
    ours = pipe(PROMPTS[:2], steps=3, guidance_scale=6.0, height=SIZE, width=SIZE, seed=9)
    assert expected.std() > 0.02
    err = np.abs(ours.array - expected).max()
    assert err < 1e-4, f"float max abs err {err:.2e}"
    # and the step noise comes from the seed: another seed with the same initial latents differs
    latents = pipe.prepare_latents(2, SIZE, SIZE, seed=9)
    other = pipe(PROMPTS[:2], steps=3, guidance_scale=6.0, height=SIZE, width=SIZE, seed=10, latents=latents)
    assert np.abs(other.array - ours.array).max() > 1e-3


def test_scheduler_names_are_checked_before_loading(tmp_path):
    from sdaccel.cpu.genai import GenAIPipeline
    from sdaccel.cpu.pipeline import OVPipeline

    with pytest.raises(ValueError, match="Unknown scheduler kind 'heun'.*'euler_a'.*'lcm'"):
        OVPipeline.from_pretrained(tmp_path, scheduler="heun")  # no export there: the name fails first
    with pytest.raises(ValueError, match="Unknown scheduler kind 'UniPCMultistepScheduler'.*'lcm'"):
        GenAIPipeline(tmp_path, scheduler="UniPCMultistepScheduler")


@pytest.mark.parametrize("scheduler", ["lcm", "euler_a"])
def test_genai_runs_the_same_scheduler(lcm_export, scheduler):
    """GenAI's C++ LCM / Euler ancestral, given the LCM UNet (it computes timestep_cond itself) and
    one TorchGenerator for latents and step noise, gives OVPipeline's images to within its 8-bit
    truncation (OVPipeline rounds): at most 2 levels."""
    from sdaccel.cpu.genai import GenAIPipeline
    from sdaccel.cpu.pipeline import OVPipeline

    kwargs = dict(steps=3, guidance_scale=6.0, height=SIZE, width=SIZE, seed=4)
    genai = GenAIPipeline(lcm_export, precision="f32", scheduler=scheduler)(PROMPTS[0], **kwargs)
    ours = OVPipeline.from_pretrained(lcm_export, precision="f32", scheduler=scheduler)(PROMPTS[0], **kwargs)
    levels = np.abs(np.asarray(genai.images[0], np.int16) - np.asarray(ours.images[0], np.int16))
    assert levels.max() <= 2 and np.asarray(ours.images[0]).std() > 5
