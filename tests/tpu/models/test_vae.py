"""Parity of sdaccel.tpu.models.vae with diffusers' AutoencoderKL (encoder and decoder, NHWC vs NCHW)."""

import json
import warnings
from importlib import resources

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from safetensors.numpy import load_file, save_file

diffusers = pytest.importorskip("diffusers")

from sdaccel.tpu.models.vae import VAEConfig, load_vae  # noqa: E402

# SDXL's VAE shrunk to two levels: same block types, groups, act, latent channels and upcast flag.
SDXL_LIKE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 2,
    up_block_types=["UpDecoderBlock2D"] * 2,
    block_out_channels=[32, 64],
    layers_per_block=2,
    act_fn="silu",
    latent_channels=4,
    norm_num_groups=32,
    sample_size=32,
    scaling_factor=0.13025,
    force_upcast=True,
)
# Differs in every field: channels in/out/latent, three levels, groups, layers, activation, no
# mid-block attention, no quant convs, and the scaling fields.
OTHER = dict(
    in_channels=4,
    out_channels=2,
    down_block_types=["DownEncoderBlock2D"] * 3,
    up_block_types=["UpDecoderBlock2D"] * 3,
    block_out_channels=[16, 24, 40],
    layers_per_block=1,
    act_fn="mish",
    latent_channels=3,
    norm_num_groups=8,
    sample_size=40,
    scaling_factor=0.5,
    shift_factor=0.1,
    force_upcast=False,
    use_quant_conv=False,
    use_post_quant_conv=False,
    mid_block_add_attention=False,
)
# name -> (config, image batch, height, width); OTHER uses a non-square image.
CASES = {"sdxl_like": (SDXL_LIKE, 2, 32, 32), "other": (OTHER, 1, 24, 40)}


def build_torch(config: dict):
    torch.manual_seed(0)
    model = diffusers.AutoencoderKL(**config).eval()
    with torch.no_grad():  # GroupNorms start as identity and some biases at zero: perturb everything
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def nchw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def nhwc(t: torch.Tensor) -> np.ndarray:
    return t.numpy().transpose(0, 2, 3, 1)


def torch_outputs(model, images: np.ndarray, latents: np.ndarray) -> dict:
    with torch.no_grad():
        dist = model.encode(nchw(images)).latent_dist
        decoded = model.decode(nchw(latents)).sample
    return {"mean": nhwc(dist.mean), "logvar": nhwc(dist.logvar), "decoded": nhwc(decoded)}


@nnx.jit
def run(model, images, latents):
    mean, logvar = model.encode(images)
    return {"mean": mean, "logvar": logvar, "decoded": model.decode(latents)}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    config, batch, height, width = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    model = build_torch(config)
    model.save_pretrained(folder / "vae")
    rng = np.random.default_rng(0)
    factor = 2 ** (len(config["block_out_channels"]) - 1)
    images = rng.uniform(-1, 1, (batch, height, width, config["in_channels"])).astype(np.float32)
    latents = rng.standard_normal((batch, height // factor, width // factor, config["latent_channels"]))
    latents = latents.astype(np.float32)
    return config, folder, images, latents, torch_outputs(model, images, latents)


def max_errors(ours: dict, ref: dict) -> dict:
    out = {}
    for name, expected in ref.items():
        got = np.asarray(ours[name], np.float32)
        assert got.shape == expected.shape, name
        out[name] = float(np.abs(got - expected).max())
    return out


def test_config(case):
    config, folder, *_ = case
    ours = VAEConfig.from_pretrained(folder)
    for key, value in config.items():
        assert getattr(ours, key) == (tuple(value) if isinstance(value, list) else value), key


def test_reference_sdxl_config():
    text = resources.files("sdaccel").joinpath("reference_configs/sdxl-base-1.0/vae.json").read_text()
    config = VAEConfig.from_dict(json.loads(text))
    assert config.block_out_channels == (128, 256, 512, 512)
    assert (config.scaling_factor, config.shift_factor, config.force_upcast) == (0.13025, None, True)
    assert config.mid_block_add_attention and config.use_quant_conv


def test_parity_fp32(case):
    _, folder, images, latents, ref = case
    model = load_vae(folder, progress=False)
    errors = max_errors(run(model, jnp.asarray(images), jnp.asarray(latents)), ref)
    assert all(e < 1e-4 for e in errors.values()), errors


def test_parity_bf16(case):
    # bf16 keeps 8 bits of mantissa: one rounding step is 1.6e-2 for values in [2, 4), the size of
    # these outputs. After ~20 convs and norms we measured max errors of 3e-2 to 7.6e-2, the same as
    # diffusers' own bf16 run of these models (2.6e-2 to 8.3e-2 against its float32 run), so 0.2
    # bounds both with margin; bugs show up at 1e-4 in the float32 test.
    _, folder, images, latents, ref = case
    model = load_vae(folder, dtype=jnp.bfloat16, force_upcast=False, progress=False)
    assert model.dtype == jnp.bfloat16
    out = run(model, jnp.asarray(images), jnp.asarray(latents))
    assert out["decoded"].dtype == jnp.bfloat16
    errors = max_errors(out, ref)
    assert all(e < 0.2 for e in errors.values()), errors


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_force_upcast(case, dtype):
    config, folder, *_ = case
    if config["force_upcast"]:
        with pytest.warns(UserWarning, match="force_upcast"):
            model = load_vae(folder, dtype=dtype, progress=False)
        assert model.dtype == jnp.float32
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = load_vae(folder, dtype=dtype, progress=False)
        assert model.dtype == dtype
    assert load_vae(folder, dtype=dtype, force_upcast=False, progress=False).dtype == dtype


def test_old_attention_names(tmp_path):
    """Checkpoints saved before diffusers 0.14 (SD 1.5 on the hub) name the mid-block attention
    query/key/value/proj_attn. Rewrite a modern file that way: diffusers itself still loads it, and
    our loader must give diffusers' outputs from it."""
    config, batch, height, width = CASES["sdxl_like"]
    model = build_torch(config)
    model.save_pretrained(tmp_path / "vae")
    file = tmp_path / "vae" / "diffusion_pytorch_model.safetensors"
    renames = {".to_q.": ".query.", ".to_k.": ".key.", ".to_v.": ".value.", ".to_out.0.": ".proj_attn."}
    tensors = {}
    for key, value in load_file(file).items():
        if ".attentions." in key:
            for new, old in renames.items():
                key = key.replace(new, old)
        tensors[key] = value
    assert sum(".proj_attn." in k for k in tensors) == 4  # weight and bias, encoder and decoder
    save_file(tensors, file)

    rng = np.random.default_rng(1)
    images = rng.uniform(-1, 1, (1, height, width, 3)).astype(np.float32)
    latents = rng.standard_normal((1, height // 2, width // 2, 4)).astype(np.float32)
    reloaded = diffusers.AutoencoderKL.from_pretrained(tmp_path / "vae").eval()
    ref = torch_outputs(reloaded, images, latents)
    assert max_errors(ref, torch_outputs(model, images, latents))["decoded"] == 0.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unused tensor would warn
        ours = load_vae(tmp_path, progress=False)
    errors = max_errors(run(ours, jnp.asarray(images), jnp.asarray(latents)), ref)
    assert all(e < 1e-4 for e in errors.values()), errors
