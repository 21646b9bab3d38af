"""Parity of sdaccel.tpu.models.unet with diffusers' UNet2DConditionModel.

Each test builds a tiny diffusers UNet from a config dict with a fixed seed, saves it as
safetensors, loads it with ``load_unet`` and compares outputs on the same inputs (NCHW <-> NHWC).
The GroupNorm/LayerNorm weights are perturbed away from their (1, 0) initialisation so that a
swapped scale and bias could not go unnoticed.
"""

import json
import shutil
from importlib import resources

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import UNet2DConditionModel as TorchUNet
from flax import nnx
from safetensors.torch import load_file, save_file

from sdaccel.core.checkpoint import CheckpointError
from sdaccel.tpu.models.unet import (
    UNetConfig,
    abstract_unet,
    guidance_scale_embedding,
    load_unet,
    upsample_nearest,
)
from sdaccel.tpu.models.weights import count_params

POOLED_DIM = 16

# SDXL-like: DownBlock2D first, text_time conditioning, Linear projections, per-block heads and
# transformer depths.
SDXL_LIKE = dict(
    sample_size=16,
    in_channels=4,
    out_channels=4,
    block_out_channels=(32, 64),
    layers_per_block=2,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
    transformer_layers_per_block=[1, 2],
    attention_head_dim=[2, 4],
    use_linear_projection=True,
    cross_attention_dim=32,
    addition_embed_type="text_time",
    addition_time_embed_dim=8,
    projection_class_embeddings_input_dim=6 * 8 + POOLED_DIM,
    norm_num_groups=8,
)

# SD-2.x-like, and different from SDXL_LIKE in every key: three blocks, 1x1-conv projections,
# one int attention_head_dim (= 2 heads everywhere), upcast attention, no addition embedding,
# other groups/eps/kernels/padding/frequencies, a mid-block scale, centred input, a cross-attention
# only first block, and in/out channel counts that differ.
SD2_LIKE = dict(
    sample_size=12,
    in_channels=5,
    out_channels=3,
    center_input_sample=True,
    flip_sin_to_cos=False,
    freq_shift=1,
    block_out_channels=(16, 24, 32),
    layers_per_block=1,
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    transformer_layers_per_block=1,
    only_cross_attention=[True, False, False],
    attention_head_dim=2,
    use_linear_projection=False,
    upcast_attention=True,
    cross_attention_dim=20,
    norm_num_groups=4,
    norm_eps=1e-6,
    downsample_padding=0,
    mid_block_scale_factor=1.5,
    conv_in_kernel=1,
    conv_out_kernel=5,
    time_embedding_dim=40,
)


def save_torch_unet(config: dict, folder, seed: int = 0) -> TorchUNet:
    torch.manual_seed(seed)
    model = TorchUNet(**config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder / "unet")
    return model


def nhwc(x: torch.Tensor) -> jnp.ndarray:
    return jnp.asarray(x.numpy().transpose(0, 2, 3, 1))


@pytest.fixture(scope="module")
def sdxl_like(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sdxl_like")
    return save_torch_unet(SDXL_LIKE, folder), folder


def sdxl_inputs(batch: int = 2, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    sample = torch.randn(batch, 4, 16, 16, generator=g)
    context = torch.randn(batch, 7, 32, generator=g)
    text_embeds = torch.randn(batch, POOLED_DIM, generator=g)
    time_ids = torch.tensor([[1024.0, 1024, 0, 0, 1024, 1024], [768, 1344, 16, 32, 1024, 1024]])[:batch]
    return sample, context, text_embeds, time_ids


def torch_sdxl(model, timestep, sample, context, text_embeds, time_ids) -> np.ndarray:
    with torch.no_grad():
        out = model(
            sample, timestep, context, added_cond_kwargs=dict(text_embeds=text_embeds, time_ids=time_ids)
        )
    return out.sample.numpy().transpose(0, 2, 3, 1)


@pytest.mark.parametrize("timestep", [999, 0.5, [981.0, 17.5]], ids=["int", "float", "per-sample"])
def test_sdxl_like_matches_diffusers(sdxl_like, timestep):
    torch_model, folder = sdxl_like
    sample, context, text_embeds, time_ids = sdxl_inputs()
    t_torch = torch.tensor(timestep) if isinstance(timestep, list) else timestep
    expected = torch_sdxl(torch_model, t_torch, sample, context, text_embeds, time_ids)

    model = load_unet(folder, progress=False)
    out = model(
        nhwc(sample),
        jnp.asarray(timestep),
        jnp.asarray(context.numpy()),
        text_embeds.numpy(),
        time_ids.numpy(),
    )

    assert out.shape == expected.shape == (2, 16, 16, 4) and out.dtype == jnp.float32
    assert np.abs(expected).max() > 0.1  # a real signal, not a near-zero output
    np.testing.assert_allclose(np.asarray(out), expected, rtol=0, atol=1e-4)


def test_sd2_like_matches_diffusers_under_jit(tmp_path):
    torch_model = save_torch_unet(SD2_LIKE, tmp_path)
    g = torch.Generator().manual_seed(2)
    # 12 x 10 latents: 12 -> 6 -> 3 and 10 -> 5 -> 3, so the upsamplers must resize 3 -> 5 as
    # well as 3 -> 6 to meet the skip connections (diffusers' forward_upsample_size).
    sample = torch.randn(2, 5, 12, 10, generator=g)
    context = torch.randn(2, 5, 20, generator=g)
    with torch.no_grad():
        expected = torch_model(sample, 250, context).sample.numpy().transpose(0, 2, 3, 1)

    mesh = jax.make_mesh((1,), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    model = load_unet(tmp_path, progress=False, sharding=lambda path: replicated)
    assert model.mid_block.attentions[0].proj_in.kernel.get_value().sharding == replicated
    out = nnx.jit(lambda m, x, t, c: m(x, t, c))(model, nhwc(sample), 250, jnp.asarray(context.numpy()))

    assert out.shape == expected.shape == (2, 12, 10, 3)
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(np.asarray(out), expected, rtol=0, atol=1e-4)


def test_bfloat16_weights_stay_close(sdxl_like):
    """bf16 keeps 8 significant bits (relative rounding 2**-9 = 0.2 %) in every weight and
    activation, and the roundings of ~30 layers add up: measured against fp32 diffusers, our bf16
    output is off by 1.4 % of the output's RMS (diffusers itself in bf16: 1.2 %) and at most by
    1.3 % of its peak. The bounds leave 2-4x headroom; a wrong weight or a layer computed from the
    wrong input would miss them by far."""
    torch_model, folder = sdxl_like
    sample, context, text_embeds, time_ids = sdxl_inputs()
    expected = torch_sdxl(torch_model, 500, sample, context, text_embeds, time_ids)

    model = load_unet(folder, dtype=jnp.bfloat16, progress=False)
    dtypes = {v.get_value().dtype for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert dtypes == {jnp.dtype(jnp.bfloat16)}
    inputs = (
        500,
        jnp.asarray(context.numpy()),
        jnp.asarray(text_embeds.numpy()),
        jnp.asarray(time_ids.numpy()),
    )
    out = nnx.jit(lambda m, x, *rest: m(x, *rest))(model, nhwc(sample), *inputs)
    assert out.dtype == jnp.float32  # the dtype of the sample, not of the weights
    out16 = nnx.eval_shape(lambda m, x: m(x, *inputs), model, nhwc(sample).astype(jnp.bfloat16))
    assert out16.dtype == jnp.bfloat16

    error = np.asarray(out, np.float32) - expected
    rms = np.sqrt(np.mean(expected**2))
    assert np.sqrt(np.mean(error**2)) < 3e-2 * rms
    assert np.abs(error).max() < 5e-2 * np.abs(expected).max()


def test_text_time_needs_text_embeds_and_time_ids(sdxl_like):
    _, folder = sdxl_like
    model = load_unet(folder, progress=False)
    sample, context, text_embeds, _ = sdxl_inputs()
    with pytest.raises(ValueError, match="text_embeds .* time_ids"):
        model(nhwc(sample), 10, context.numpy())
    with pytest.raises(ValueError, match="time_ids"):
        model(nhwc(sample), 10, context.numpy(), text_embeds=text_embeds.numpy())


def copy_with_tensors(src, dst, edit) -> None:
    """Copy the checkpoint at ``src`` to ``dst`` with ``edit`` applied to its state dict."""
    (dst / "unet").mkdir(parents=True)
    shutil.copy(src / "unet" / "config.json", dst / "unet" / "config.json")
    tensors = load_file(src / "unet" / "diffusion_pytorch_model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "unet" / "diffusion_pytorch_model.safetensors")


def test_missing_tensor_raises_checkpoint_error(sdxl_like, tmp_path):
    _, folder = sdxl_like
    key = "mid_block.attentions.0.transformer_blocks.1.attn2.to_k.weight"
    copy_with_tensors(folder, tmp_path, lambda t: t.pop(key))
    with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
        load_unet(tmp_path, progress=False)


def test_wrong_shape_raises_checkpoint_error(sdxl_like, tmp_path):
    _, folder = sdxl_like
    key = "down_blocks.1.attentions.0.proj_in.weight"

    def shrink(tensors):
        tensors[key] = tensors[key][:-1].contiguous()

    copy_with_tensors(folder, tmp_path, shrink)
    with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
        load_unet(tmp_path, progress=False)


@pytest.mark.parametrize(
    "key, value",
    [
        ("class_embed_type", "timestep"),
        ("resnet_time_scale_shift", "scale_shift"),
        ("addition_embed_type", "text"),
        ("time_embedding_type", "fourier"),
        ("down_block_types", ("AttnDownBlock2D", "CrossAttnDownBlock2D")),
    ],
)
def test_unsupported_config_names_the_key(key, value):
    with pytest.raises(NotImplementedError, match=key):
        UNetConfig.from_dict({**SDXL_LIKE, key: value})


# A latent-consistency (LCM) UNet: SDXL_LIKE plus the guidance-scale projection of the timestep
# embedding; an odd embedding size exercises the zero padding of the guidance embedding.
LCM_LIKE = dict(SDXL_LIKE, time_cond_proj_dim=11)


@pytest.mark.parametrize("dim", [11, 256])
def test_guidance_scale_embedding_matches_diffusers(dim):
    from diffusers import LatentConsistencyModelPipeline

    w = torch.tensor([0.0, 1.0, 7.5, 3.25]) - 1
    expected = LatentConsistencyModelPipeline.get_guidance_scale_embedding(None, w, embedding_dim=dim).numpy()
    ours = np.asarray(guidance_scale_embedding(jnp.asarray(w.numpy()), dim))
    assert ours.shape == expected.shape == (4, dim)
    # sin/cos of angles up to 6500 rad in float32, whose spacing there is 4.9e-4 rad: one rounding
    # step of a frequency or of exp() moves a value by that much, so 1e-3 (a wrong frequency, order
    # or offset moves values by O(1))
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-3)
    half = dim // 2  # w = 0 (guidance scale 1): every angle is 0
    np.testing.assert_array_equal(ours[1], np.r_[np.zeros(half), np.ones(half), np.zeros(dim % 2)])


def test_lcm_unet_matches_diffusers(tmp_path):
    """``time_cond_proj_dim``: ``time_embedding.cond_proj`` (no bias) is loaded, and the projected
    guidance embedding is added to the timestep embedding as in diffusers."""
    torch_model = save_torch_unet(LCM_LIKE, tmp_path, seed=3)
    names = dict(torch_model.named_parameters())
    assert "time_embedding.cond_proj.weight" in names and "time_embedding.cond_proj.bias" not in names
    sample, context, text_embeds, time_ids = sdxl_inputs(seed=4)
    from diffusers import LatentConsistencyModelPipeline

    w = torch.tensor([8.0, 2.0]) - 1  # guidance scales of the two images, minus one
    cond = LatentConsistencyModelPipeline.get_guidance_scale_embedding(None, w, embedding_dim=11)
    with torch.no_grad():
        expected = torch_model(
            sample,
            499,
            context,
            timestep_cond=cond,
            added_cond_kwargs=dict(text_embeds=text_embeds, time_ids=time_ids),
        ).sample.numpy()
    expected = expected.transpose(0, 2, 3, 1)

    model = load_unet(tmp_path, progress=False)
    kernel = model.time_embedding.cond_proj.kernel.get_value()
    np.testing.assert_array_equal(
        np.asarray(kernel), names["time_embedding.cond_proj.weight"].detach().numpy().T
    )
    args = (
        nhwc(sample),
        jnp.asarray(499),
        jnp.asarray(context.numpy()),
        text_embeds.numpy(),
        time_ids.numpy(),
    )
    out = jax.jit(lambda m, c: m(*args, timestep_cond=c))(
        model, guidance_scale_embedding(jnp.asarray(w.numpy()), 11)
    )
    np.testing.assert_allclose(np.asarray(out), expected, rtol=0, atol=1e-4)
    # the guidance embedding changes the prediction (by far more than the tolerance)
    without = model(*args)
    assert np.abs(np.asarray(without) - expected).max() > 1e-2


def test_timestep_cond_needs_time_cond_proj_dim(sdxl_like):
    _, folder = sdxl_like
    model = load_unet(folder, progress=False)
    sample, context, text_embeds, time_ids = sdxl_inputs()
    with pytest.raises(ValueError, match="no time_cond_proj_dim"):
        model(
            nhwc(sample),
            1,
            jnp.asarray(context.numpy()),
            text_embeds.numpy(),
            time_ids.numpy(),
            jnp.zeros((2, 8)),
        )


def reference_config(name: str) -> dict:
    path = resources.files("sdaccel") / "reference_configs" / name / "unet.json"
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    "name, params, heads",
    [
        # Counted with diffusers on the meta device:
        # sum(p.numel() for p in UNet2DConditionModel.from_config(cfg).parameters())
        ("sdxl-base-1.0", 2_567_463_684, [5, 10, 20]),
        ("sd-1.5", 859_520_964, [8, 8, 8, 8]),
        ("sd-2.1", 865_910_724, [5, 10, 20, 20]),
    ],
)
def test_real_size_parameter_count(name, params, heads):
    config = UNetConfig.from_dict(reference_config(name))
    model = abstract_unet(config)
    assert count_params(model)[0] == params
    # attention_head_dim in these configs is the number of heads (diffusers' naming quirk).
    assert config.heads_per_block == heads
    first_attention_block = 1 if name == "sdxl-base-1.0" else 0
    attn = model.down_blocks[first_attention_block].attentions[0].transformer_blocks[0].attn1
    assert attn.heads == heads[first_attention_block]
    assert attn.heads * attn.head_dim == config.block_out_channels[first_attention_block]


def test_num_attention_heads_takes_precedence():
    config = UNetConfig.from_dict({**SDXL_LIKE, "num_attention_heads": [1, 8]})
    assert config.heads_per_block == [1, 8]
    assert UNetConfig.from_dict(SDXL_LIKE).heads_per_block == [2, 4]


@pytest.mark.parametrize(
    "size_in, size_out", [((3, 3), (6, 6)), ((3, 3), (5, 6)), ((5, 7), (9, 13)), ((4, 3), (8, 5))]
)
def test_upsample_nearest_matches_torch(size_in, size_out):
    x = torch.randn(1, 2, *size_in)
    expected = torch.nn.functional.interpolate(x, size=size_out, mode="nearest")
    out = upsample_nearest(nhwc(x), size_out)
    np.testing.assert_array_equal(np.asarray(out), expected.numpy().transpose(0, 2, 3, 1))


def test_config_is_hashable_for_jit():
    config = UNetConfig.from_dict(reference_config("sdxl-base-1.0"))
    assert hash(config) == hash(UNetConfig.from_dict(reference_config("sdxl-base-1.0")))
    assert config.transformer_layers_per_block == (1, 2, 10)
    assert jax.tree.leaves(config) == [config]  # static: not a pytree of arrays
