"""The denoising UNet of Stable Diffusion 1.x / 2.x and SDXL, in Flax NNX.

A port of diffusers' ``UNet2DConditionModel`` restricted to the parts those checkpoints use.
Given a noisy latent ``sample``, the diffusion ``timestep`` and the text encoder's
``encoder_hidden_states``, it predicts the noise (or ``v``) in the latent::

    timestep ─ sinusoidal embedding ─ time_embedding (MLP) ─┐
    (SDXL) pooled text + size/crop ids ─ add_embedding ─────┴─ temb (added inside every ResNet)
    (LCM) guidance scale ─ sinusoidal embedding ─ cond_proj ─ added before time_embedding's MLP

    sample ─ conv_in ─ down_blocks ─ mid_block ─ up_blocks ─ norm, SiLU, conv_out ─ noise
                            │                       ▲
                            └── skip connections ───┘

* A **down block** is ``layers_per_block`` ResNets, each followed by a Transformer2DModel in a
  ``CrossAttnDownBlock2D`` (none in a ``DownBlock2D``), then a stride-2 conv (except the last block).
  Every ResNet/Transformer output is kept as a skip connection.
* The **mid block** is ResNet, Transformer, ResNet at the lowest resolution.
* An **up block** has ``layers_per_block + 1`` ResNets; each first concatenates one skip connection
  (channels-last, so along the last axis), then an upsampler doubles the resolution.
* A **Transformer2DModel** flattens the feature map into ``H*W`` tokens and runs
  ``BasicTransformerBlock``\\ s: self-attention, cross-attention to the text, GEGLU feed-forward.

Activations are channels-last (NHWC) everywhere, and every sub-module is named as in diffusers,
so ``down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight`` in the checkpoint is the
parameter ``down_blocks[1].attentions[0].transformer_blocks[0].attn2.to_k.kernel`` here.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from sdaccel.core.checkpoint import open_weights, read_config
from sdaccel.tpu.models.attention import XLA, attention
from sdaccel.tpu.models.weights import abstract_model, load_weights

# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class UNetConfig:
    """The fields of diffusers' ``unet/config.json``, with diffusers' defaults.

    Per-block settings (``attention_head_dim``, ``cross_attention_dim``, ``layers_per_block``,
    ``transformer_layers_per_block``, ``only_cross_attention``) may be one value for all blocks or
    a list with one value per down block; ``per_block`` expands them.

    A few fields only configure block types that SD/SDXL do not use (``resnet_skip_time_act``,
    ``resnet_out_scale_factor``, ``cross_attention_norm``, ``mid_block_only_cross_attention``,
    ``addition_embed_type_num_heads``) and are read but have no effect, exactly as in diffusers.
    Values that would change the network in a way this port does not implement raise
    ``NotImplementedError`` naming the key.
    """

    sample_size: int | tuple[int, int] | None = None
    in_channels: int = 4
    out_channels: int = 4
    center_input_sample: bool = False
    flip_sin_to_cos: bool = True
    freq_shift: float = 0
    down_block_types: tuple[str, ...] = (
        "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D",
        "DownBlock2D",
    )
    mid_block_type: str | None = "UNetMidBlock2DCrossAttn"
    up_block_types: tuple[str, ...] = (
        "UpBlock2D",
        "CrossAttnUpBlock2D",
        "CrossAttnUpBlock2D",
        "CrossAttnUpBlock2D",
    )
    only_cross_attention: bool | tuple[bool, ...] = False
    block_out_channels: tuple[int, ...] = (320, 640, 1280, 1280)
    layers_per_block: int | tuple[int, ...] = 2
    downsample_padding: int = 1
    mid_block_scale_factor: float = 1
    dropout: float = 0.0
    act_fn: str = "silu"
    norm_num_groups: int | None = 32
    norm_eps: float = 1e-5
    cross_attention_dim: int | tuple[int, ...] = 1280
    transformer_layers_per_block: int | tuple[int, ...] = 1
    reverse_transformer_layers_per_block: tuple | None = None
    encoder_hid_dim: int | None = None
    encoder_hid_dim_type: str | None = None
    attention_head_dim: int | tuple[int, ...] = 8
    num_attention_heads: int | tuple[int, ...] | None = None
    dual_cross_attention: bool = False
    use_linear_projection: bool = False
    class_embed_type: str | None = None
    addition_embed_type: str | None = None
    addition_time_embed_dim: int | None = None
    num_class_embeds: int | None = None
    upcast_attention: bool | None = False
    resnet_time_scale_shift: str = "default"
    resnet_skip_time_act: bool = False
    resnet_out_scale_factor: float = 1.0
    time_embedding_type: str = "positional"
    time_embedding_dim: int | None = None
    time_embedding_act_fn: str | None = None
    timestep_post_act: str | None = None
    time_cond_proj_dim: int | None = None
    conv_in_kernel: int = 3
    conv_out_kernel: int = 3
    projection_class_embeddings_input_dim: int | None = None
    attention_type: str = "default"
    class_embeddings_concat: bool = False
    mid_block_only_cross_attention: bool | None = None
    cross_attention_norm: str | None = None
    addition_embed_type_num_heads: int = 64

    def __post_init__(self):
        unsupported = {
            # key: (the value(s) this port implements, what the other values are used by)
            "mid_block_type": (("UNetMidBlock2DCrossAttn",), "other UNet families"),
            "class_embed_type": ((None,), "class-conditional UNets (e.g. upscalers)"),
            "num_class_embeds": ((None,), "class-conditional UNets"),
            "addition_embed_type": ((None, "text_time"), "Kandinsky"),
            "encoder_hid_dim_type": ((None,), "Kandinsky / IP-Adapter"),
            "encoder_hid_dim": ((None,), "Kandinsky / IP-Adapter"),
            "resnet_time_scale_shift": (("default",), "UNets with FiLM-style 'scale_shift' ResNets"),
            "time_embedding_type": (("positional",), "score-SDE style Fourier timestep embeddings"),
            "time_embedding_act_fn": ((None,), "UnCLIP"),
            "timestep_post_act": ((None,), "other UNet families"),
            "dual_cross_attention": ((False,), "Versatile Diffusion"),
            "attention_type": (("default",), "GLIGEN"),
            "class_embeddings_concat": ((False,), "class-conditional UNets"),
            "reverse_transformer_layers_per_block": ((None,), "asymmetric distilled UNets (SSD-1B)"),
            "act_fn": (("silu", "swish"), "other UNet families"),
        }
        for key, (supported, used_by) in unsupported.items():
            if getattr(self, key) not in supported:
                raise NotImplementedError(
                    f"UNet config {key}={getattr(self, key)!r} is not supported (only {list(supported)}); "
                    f"it is used by {used_by}, not by SD 1.x/2.x or SDXL."
                )
        if self.norm_num_groups is None:
            raise NotImplementedError("UNet config norm_num_groups=None (no GroupNorm) is not supported.")
        for key, known in (("down_block_types", _DOWN_BLOCKS), ("up_block_types", _UP_BLOCKS)):
            for name in getattr(self, key):
                if name not in known:
                    raise NotImplementedError(
                        f"UNet config {key}: block type {name!r} is not supported (only {list(known)})."
                    )
        if self.addition_embed_type == "text_time" and None in (
            self.addition_time_embed_dim,
            self.projection_class_embeddings_input_dim,
        ):
            raise ValueError(
                "addition_embed_type='text_time' needs addition_time_embed_dim and "
                "projection_class_embeddings_input_dim in the UNet config."
            )
        if any(isinstance(n, (list, tuple)) for n in self.per_block(self.transformer_layers_per_block)):
            raise NotImplementedError(
                "UNet config transformer_layers_per_block with one list per block is not supported."
            )
        n = len(self.down_block_types)
        if len(self.up_block_types) != n or len(self.block_out_channels) != n:
            raise ValueError(
                "down_block_types, up_block_types and block_out_channels must have the same length."
            )

    @classmethod
    def from_dict(cls, d: dict) -> UNetConfig:
        """Build from a parsed ``config.json``; unknown keys (``_class_name``, ...) are ignored and
        JSON lists become tuples, so the config is hashable (it is static under ``jax.jit``)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: _freeze(v) for k, v in d.items() if k in names})

    @classmethod
    def from_pretrained(cls, folder: str | Path, subfolder: str | None = "unet") -> UNetConfig:
        return cls.from_dict(read_config(folder, subfolder))

    def per_block(self, value) -> list:
        """One value per down block: a list is kept, a single value is repeated."""
        return list(value) if isinstance(value, (list, tuple)) else [value] * len(self.down_block_types)

    @property
    def heads_per_block(self) -> list[int]:
        """Attention heads of each block.

        diffusers' historical quirk: ``attention_head_dim`` in SD configs holds the *number of
        heads* (SD 1.5: 8 heads of 40, 80, 160, 160 channels). diffusers reads it that way whenever
        ``num_attention_heads`` is None, which is every released checkpoint; the head size is then
        ``channels // heads`` (SDXL: ``[5, 10, 20]`` heads, all of size 64).
        """
        return self.per_block(self.num_attention_heads or self.attention_head_dim)

    @property
    def time_embed_dim(self) -> int:
        return self.time_embedding_dim or 4 * self.block_out_channels[0]


def _freeze(value):
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


# ----------------------------------------------------------------------------------------------
# Small layers
# ----------------------------------------------------------------------------------------------


def conv(cin: int, cout: int, kernel: int, rngs: nnx.Rngs, stride: int = 1, padding=None) -> nnx.Conv:
    """A PyTorch-style ``Conv2d`` on NHWC: explicit symmetric padding ``(kernel - 1) // 2`` by default."""
    p = (kernel - 1) // 2 if padding is None else padding
    pad = ((p, p), (p, p)) if isinstance(p, int) else p
    return nnx.Conv(cin, cout, (kernel, kernel), strides=stride, padding=pad, rngs=rngs)


def group_norm(channels: int, groups: int, eps: float, rngs: nnx.Rngs) -> nnx.GroupNorm:
    """``torch.nn.GroupNorm`` over the last (channel) axis. The two-pass variance
    (``use_fast_variance=False``) matches PyTorch when activations have a large mean."""
    return nnx.GroupNorm(channels, num_groups=groups, epsilon=eps, use_fast_variance=False, rngs=rngs)


def timestep_embedding(
    timesteps, dim: int, flip_sin_to_cos: bool, freq_shift: float, max_period: int = 10000
):
    """diffusers' ``get_timestep_embedding``: (N,) numbers -> (N, dim) sinusoids in float32.

    Frequency ``i`` is ``max_period ** (-i / (dim // 2 - freq_shift))``; the first half of the
    output is ``sin(t * freq)`` and the second ``cos(t * freq)``, swapped by ``flip_sin_to_cos``.
    """
    half = dim // 2
    exponent = -math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / (half - freq_shift)
    angles = timesteps.astype(jnp.float32)[:, None] * jnp.exp(exponent)[None, :]
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    emb = jnp.concatenate([cos, sin] if flip_sin_to_cos else [sin, cos], axis=-1)
    return jnp.pad(emb, ((0, 0), (0, dim % 2)))


def guidance_scale_embedding(w, dim: int):
    """diffusers' ``get_guidance_scale_embedding`` (from VDM): (N,) guidance weights -> (N, dim)
    sinusoids of ``1000 w``, in float32: the ``timestep_cond`` of a guidance-distilled (LCM) UNet.

    Frequency ``i`` is ``10000 ** (-i / (dim // 2 - 1))``; the first half is ``sin``, the second
    ``cos`` (zero-padded when ``dim`` is odd). The pipelines pass ``w = guidance_scale - 1``.
    """
    half = dim // 2
    # float32 in diffusers' order: the angles reach ~1e4 rad, where a different rounding of the
    # frequencies would show in the sines
    step = jnp.log(jnp.float32(10000.0)) / (half - 1)
    angles = (jnp.asarray(w, jnp.float32) * 1000.0)[:, None] * jnp.exp(
        jnp.arange(half, dtype=jnp.float32) * -step
    )
    emb = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
    return jnp.pad(emb, ((0, 0), (0, dim % 2)))


class TimestepEmbedding(nnx.Module):
    """Linear -> SiLU -> Linear, used for the timestep (``time_embedding``) and for SDXL's
    pooled-text + size conditioning (``add_embedding``).

    With ``cond_proj_dim`` (LCM UNets' ``time_cond_proj_dim``), a bias-free ``cond_proj`` maps a
    condition (the guidance-scale embedding) to ``in_features``, added to the input first.
    """

    def __init__(self, in_features: int, features: int, *, cond_proj_dim: int | None = None, rngs: nnx.Rngs):
        self.linear_1 = nnx.Linear(in_features, features, rngs=rngs)
        self.linear_2 = nnx.Linear(features, features, rngs=rngs)
        self.cond_proj = (
            nnx.Linear(cond_proj_dim, in_features, use_bias=False, rngs=rngs) if cond_proj_dim else None
        )

    def __call__(self, x, condition=None):
        if condition is not None:
            x = x + self.cond_proj(condition)
        return self.linear_2(jax.nn.silu(self.linear_1(x)))


class ResnetBlock2D(nnx.Module):
    """GroupNorm, SiLU, conv, + projected time embedding, GroupNorm, SiLU, conv, + shortcut.

    The time embedding ``temb`` (B, time_embed_dim) becomes one bias per channel, broadcast over
    H and W: that is how every layer learns which noise level it is denoising.
    """

    def __init__(self, cin: int, cout: int, temb_dim: int, groups: int, eps: float, scale: float, *, rngs):
        self.norm1 = group_norm(cin, groups, eps, rngs)
        self.conv1 = conv(cin, cout, 3, rngs)
        self.time_emb_proj = nnx.Linear(temb_dim, cout, rngs=rngs)
        self.norm2 = group_norm(cout, groups, eps, rngs)
        self.conv2 = conv(cout, cout, 3, rngs)
        # A 1x1 conv matches the channel count of the shortcut when it changes.
        self.conv_shortcut = conv(cin, cout, 1, rngs) if cin != cout else None
        self.output_scale_factor = scale

    def __call__(self, x, temb):
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = h + self.time_emb_proj(jax.nn.silu(temb))[:, None, None, :]
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        shortcut = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        return (shortcut + h) / self.output_scale_factor


class Downsample2D(nnx.Module):
    """A stride-2 3x3 conv. ``padding=0`` pads one row/column at the bottom/right only, as diffusers does."""

    def __init__(self, channels: int, padding: int, *, rngs: nnx.Rngs):
        pad = ((0, 1), (0, 1)) if padding == 0 else padding
        self.conv = conv(channels, channels, 3, rngs, stride=2, padding=pad)

    def __call__(self, x):
        return self.conv(x)


def upsample_nearest(x, size: tuple[int, int]):
    """Nearest-neighbour resize of NHWC ``x`` to spatial ``size`` (PyTorch's ``mode="nearest"``).

    The usual case is an exact 2x (a cheap repeat). When the latent size is not divisible by
    ``2 ** num_upsamplers`` (say a 1000-pixel image, 125 latents), the skip connection fixes the
    size and output pixel ``i`` copies input pixel ``floor(i * in / out)``, in float32 as PyTorch.
    """
    (h, w), (out_h, out_w) = x.shape[1:3], size
    if (out_h, out_w) == (2 * h, 2 * w):
        return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)

    def source(n_in, n_out):
        return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * np.float32(n_in / n_out)), n_in - 1)

    return x[:, source(h, out_h).astype(np.int32)][:, :, source(w, out_w).astype(np.int32)]


class Upsample2D(nnx.Module):
    """Nearest-neighbour upsampling to the size of the next skip connection, then a 3x3 conv."""

    def __init__(self, channels: int, *, rngs: nnx.Rngs):
        self.conv = conv(channels, channels, 3, rngs)

    def __call__(self, x, size: tuple[int, int]):
        return self.conv(upsample_nearest(x, size))


# ----------------------------------------------------------------------------------------------
# Transformer
# ----------------------------------------------------------------------------------------------


class Attention(nnx.Module):
    """Multi-head attention from ``x`` (B, N, dim) to ``context`` (B, M, context_dim).

    With ``context = x`` it is self-attention (``attn1``); with the text embeddings it is
    cross-attention (``attn2``), the only place where the prompt enters the UNet. As in diffusers
    the q/k/v projections have no bias; ``to_out`` is a list because diffusers' is
    ``[Linear, Dropout]``.
    """

    def __init__(self, dim: int, context_dim: int, heads: int, head_dim: int, upcast: bool, *, rngs):
        inner = heads * head_dim
        self.to_q = nnx.Linear(dim, inner, use_bias=False, rngs=rngs)
        self.to_k = nnx.Linear(context_dim, inner, use_bias=False, rngs=rngs)
        self.to_v = nnx.Linear(context_dim, inner, use_bias=False, rngs=rngs)
        self.to_out = nnx.List([nnx.Linear(inner, dim, rngs=rngs)])
        self.heads, self.head_dim, self.upcast = heads, head_dim, upcast
        self.attention_impl = XLA  # static; sdaccel.tpu.models.attention.use changes it

    def __call__(self, x, context):
        def split_heads(t):  # (B, N, heads * head_dim) -> (B, N, heads, head_dim)
            return t.reshape(*t.shape[:-1], self.heads, self.head_dim)

        q, k, v = split_heads(self.to_q(x)), split_heads(self.to_k(context)), split_heads(self.to_v(context))
        # softmax(q k^T / sqrt(head_dim)) v
        out = attention(q, k, v, impl=self.attention_impl, upcast=self.upcast)
        return self.to_out[0](out.reshape(*x.shape[:-1], self.heads * self.head_dim))


class GEGLU(nnx.Module):
    """``proj`` to twice the width, then ``value * gelu(gate)`` (exact erf GELU, as PyTorch)."""

    def __init__(self, dim: int, inner: int, *, rngs: nnx.Rngs):
        self.proj = nnx.Linear(dim, 2 * inner, rngs=rngs)

    def __call__(self, x):
        value, gate = jnp.split(self.proj(x), 2, axis=-1)
        return value * jax.nn.gelu(gate, approximate=False)


class FeedForward(nnx.Module):
    """GEGLU to 4x the width, then back. ``net`` mirrors diffusers' ``[GEGLU, Dropout, Linear]``;
    the dropout (index 1) has no weights and does nothing at inference, so it is ``None``."""

    def __init__(self, dim: int, *, rngs: nnx.Rngs):
        self.net = nnx.List([GEGLU(dim, 4 * dim, rngs=rngs), None, nnx.Linear(4 * dim, dim, rngs=rngs)])

    def __call__(self, x):
        return self.net[2](self.net[0](x))


class BasicTransformerBlock(nnx.Module):
    """Pre-norm transformer layer: ``x += attn1(norm1(x))``, ``x += attn2(norm2(x), text)``,
    ``x += ff(norm3(x))``. With ``only_cross_attention`` attn1 also attends to the text."""

    def __init__(self, dim, heads, head_dim, context_dim, upcast, only_cross_attention, *, rngs):
        self.only_cross_attention = only_cross_attention
        self.norm1 = nnx.LayerNorm(dim, epsilon=1e-5, use_fast_variance=False, rngs=rngs)
        attn1_context = context_dim if only_cross_attention else dim
        self.attn1 = Attention(dim, attn1_context, heads, head_dim, upcast, rngs=rngs)
        self.norm2 = nnx.LayerNorm(dim, epsilon=1e-5, use_fast_variance=False, rngs=rngs)
        self.attn2 = Attention(dim, context_dim, heads, head_dim, upcast, rngs=rngs)
        self.norm3 = nnx.LayerNorm(dim, epsilon=1e-5, use_fast_variance=False, rngs=rngs)
        self.ff = FeedForward(dim, rngs=rngs)

    def __call__(self, x, context):
        with jax.named_scope("attn1"):
            h = self.norm1(x)
            x = x + self.attn1(h, context if self.only_cross_attention else h)
        with jax.named_scope("attn2"):
            x = x + self.attn2(self.norm2(x), context)
        with jax.named_scope("ff"):
            x = x + self.ff(self.norm3(x))
        return x


class Transformer2DModel(nnx.Module):
    """Runs transformer layers over the pixels of a feature map, as a residual branch.

    GroupNorm, ``proj_in`` to ``heads * head_dim`` channels, reshape (B, H, W, C) -> (B, H*W, C)
    tokens, ``num_layers`` BasicTransformerBlocks, ``proj_out``, reshape back, add the input.
    ``proj_in``/``proj_out`` are Linear layers (``use_linear_projection``: SD 2.x, SDXL) or 1x1
    convs (SD 1.x); on channels-last data both are the same matmul, but the checkpoint shapes differ.
    """

    def __init__(self, channels, heads, num_layers, context_dim, groups, linear, upcast, only_cross, *, rngs):
        head_dim = channels // heads
        inner = heads * head_dim
        self.norm = group_norm(channels, groups, 1e-6, rngs)
        self.proj_in = nnx.Linear(channels, inner, rngs=rngs) if linear else conv(channels, inner, 1, rngs)
        self.transformer_blocks = nnx.List(
            [
                BasicTransformerBlock(inner, heads, head_dim, context_dim, upcast, only_cross, rngs=rngs)
                for _ in range(num_layers)
            ]
        )
        self.proj_out = nnx.Linear(inner, channels, rngs=rngs) if linear else conv(inner, channels, 1, rngs)

    def __call__(self, x, context):
        b, h, w, _ = x.shape
        tokens = self.proj_in(self.norm(x))
        tokens = tokens.reshape(b, h * w, tokens.shape[-1])
        for i, block in enumerate(self.transformer_blocks):
            with jax.named_scope(f"transformer_blocks.{i}"):
                tokens = block(tokens, context)
        return self.proj_out(tokens.reshape(b, h, w, -1)) + x


# ----------------------------------------------------------------------------------------------
# UNet blocks
# ----------------------------------------------------------------------------------------------


class DownBlock2D(nnx.Module):
    """``DownBlock2D`` (ResNets only) or ``CrossAttnDownBlock2D`` (each ResNet followed by a
    Transformer2DModel), then an optional stride-2 ``Downsample2D``.

    Returns the output and the skip connections: one per ResNet(+Transformer) and one after the
    downsampler.
    """

    def __init__(
        self, cin, cout, num_layers, temb_dim, cfg: UNetConfig, transformer: dict | None, downsample, *, rngs
    ):
        groups, eps = cfg.norm_num_groups, cfg.norm_eps
        self.resnets = nnx.List(
            [
                ResnetBlock2D(cin if i == 0 else cout, cout, temb_dim, groups, eps, 1.0, rngs=rngs)
                for i in range(num_layers)
            ]
        )
        self.attentions = nnx.List(
            [Transformer2DModel(cout, **transformer, rngs=rngs) for _ in range(num_layers)]
            if transformer
            else []
        )
        self.downsamplers = (
            nnx.List([Downsample2D(cout, cfg.downsample_padding, rngs=rngs)]) if downsample else None
        )

    def __call__(self, x, temb, context):
        skips = []
        for i, resnet in enumerate(self.resnets):
            with jax.named_scope(f"resnets.{i}"):
                x = resnet(x, temb)
            if self.attentions:
                with jax.named_scope(f"attentions.{i}"):
                    x = self.attentions[i](x, context)
            skips.append(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
            skips.append(x)
        return x, skips


class UNetMidBlock2DCrossAttn(nnx.Module):
    """ResNet, then (Transformer2DModel, ResNet), at the lowest resolution. The ResNets divide
    their output by ``mid_block_scale_factor``."""

    def __init__(self, channels, temb_dim, cfg: UNetConfig, transformer: dict, *, rngs):
        args = (channels, channels, temb_dim, cfg.norm_num_groups, cfg.norm_eps, cfg.mid_block_scale_factor)
        self.resnets = nnx.List([ResnetBlock2D(*args, rngs=rngs), ResnetBlock2D(*args, rngs=rngs)])
        self.attentions = nnx.List([Transformer2DModel(channels, **transformer, rngs=rngs)])

    def __call__(self, x, temb, context):
        with jax.named_scope("resnets.0"):
            x = self.resnets[0](x, temb)
        with jax.named_scope("attentions.0"):
            x = self.attentions[0](x, context)
        with jax.named_scope("resnets.1"):
            return self.resnets[1](x, temb)


class UpBlock2D(nnx.Module):
    """``UpBlock2D`` or ``CrossAttnUpBlock2D``: ``num_layers`` ResNets, each on the concatenation
    of the running features and one skip connection (the most recent first), each optionally
    followed by a Transformer2DModel; then an optional ``Upsample2D``.

    The last ResNet consumes the skip from the previous (higher-resolution) down block, which has
    ``skip_last`` channels; the others get skips with ``cout`` channels.
    """

    def __init__(
        self, cin, cout, skip_last, num_layers, temb_dim, cfg, transformer: dict | None, upsample, *, rngs
    ):
        groups, eps = cfg.norm_num_groups, cfg.norm_eps
        resnets = []
        for i in range(num_layers):
            skip = skip_last if i == num_layers - 1 else cout
            resnets.append(
                ResnetBlock2D((cin if i == 0 else cout) + skip, cout, temb_dim, groups, eps, 1.0, rngs=rngs)
            )
        self.resnets = nnx.List(resnets)
        self.attentions = nnx.List(
            [Transformer2DModel(cout, **transformer, rngs=rngs) for _ in range(num_layers)]
            if transformer
            else []
        )
        self.upsamplers = nnx.List([Upsample2D(cout, rngs=rngs)]) if upsample else None

    def __call__(self, x, temb, skips, context, upsample_size):
        for i, resnet in enumerate(self.resnets):
            x = jnp.concatenate([x, skips[-1 - i]], axis=-1)
            with jax.named_scope(f"resnets.{i}"):
                x = resnet(x, temb)
            if self.attentions:
                with jax.named_scope(f"attentions.{i}"):
                    x = self.attentions[i](x, context)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x, upsample_size)
        return x


_DOWN_BLOCKS = {"DownBlock2D": False, "CrossAttnDownBlock2D": True}  # name -> has transformers
_UP_BLOCKS = {"UpBlock2D": False, "CrossAttnUpBlock2D": True}


# ----------------------------------------------------------------------------------------------
# The UNet
# ----------------------------------------------------------------------------------------------


class UNet2DConditionModel(nnx.Module):
    """diffusers' ``UNet2DConditionModel`` for SD 1.x / 2.x / SDXL, channels-last.

    Call it as ``model(sample, timestep, encoder_hidden_states, text_embeds=None, time_ids=None)``:

    * ``sample``: (B, H, W, in_channels) noisy latents.
    * ``timestep``: a scalar or (B,) array, integer or float.
    * ``encoder_hidden_states``: (B, L, cross_attention_dim) text encoder output.
    * SDXL (``addition_embed_type == "text_time"``) also needs ``text_embeds`` (B, pooled_dim), the
      pooled output of the second text encoder, and ``time_ids`` (B, 6): original size, crop
      top-left and target size, each (height, width).
    * A guidance-distilled (LCM) UNet, whose config has ``time_cond_proj_dim``, takes
      ``timestep_cond`` (B or 1, time_cond_proj_dim), the :func:`guidance_scale_embedding` of
      ``guidance_scale - 1``, projected and added to the timestep embedding (as in diffusers, it
      may be left out: then the UNet runs as if it had no projection).

    The network computes in the dtype of its weights (load with ``dtype=jnp.bfloat16`` for bf16)
    and returns (B, H, W, out_channels) in the dtype of ``sample``.
    """

    def __init__(self, config: UNetConfig, *, rngs: nnx.Rngs):
        self.config = cfg = config
        channels = list(cfg.block_out_channels)
        n = len(channels)
        temb_dim = cfg.time_embed_dim
        heads = cfg.heads_per_block
        layers = cfg.per_block(cfg.layers_per_block)
        depth = cfg.per_block(cfg.transformer_layers_per_block)
        context_dim = cfg.per_block(cfg.cross_attention_dim)
        only_cross = cfg.per_block(cfg.only_cross_attention)

        def transformer(i: int, only_cross_attention: bool = False) -> dict:
            """Arguments of the Transformer2DModels at the resolution of down block ``i``."""
            return dict(
                heads=heads[i],
                num_layers=depth[i],
                context_dim=context_dim[i],
                groups=cfg.norm_num_groups,
                linear=cfg.use_linear_projection,
                upcast=bool(cfg.upcast_attention),
                only_cross=only_cross_attention,
            )

        self.conv_in = conv(cfg.in_channels, channels[0], cfg.conv_in_kernel, rngs)
        self.time_embedding = TimestepEmbedding(
            channels[0], temb_dim, cond_proj_dim=cfg.time_cond_proj_dim, rngs=rngs
        )
        if cfg.addition_embed_type == "text_time":
            self.add_embedding = TimestepEmbedding(
                cfg.projection_class_embeddings_input_dim, temb_dim, rngs=rngs
            )

        down = []
        for i, kind in enumerate(cfg.down_block_types):
            cin = channels[max(i - 1, 0)]
            attn = transformer(i, only_cross[i]) if _DOWN_BLOCKS[kind] else None
            down.append(DownBlock2D(cin, channels[i], layers[i], temb_dim, cfg, attn, i < n - 1, rngs=rngs))
        self.down_blocks = nnx.List(down)

        self.mid_block = UNetMidBlock2DCrossAttn(channels[-1], temb_dim, cfg, transformer(n - 1), rngs=rngs)

        up = []
        for i, kind in enumerate(cfg.up_block_types):
            j = n - 1 - i  # the down block at the same resolution
            cin = channels[min(j + 1, n - 1)]  # output of the previous up block (or the mid block)
            skip_last = channels[max(j - 1, 0)]
            attn = transformer(j, only_cross[j]) if _UP_BLOCKS[kind] else None
            up.append(
                UpBlock2D(
                    cin, channels[j], skip_last, layers[j] + 1, temb_dim, cfg, attn, i < n - 1, rngs=rngs
                )
            )
        self.up_blocks = nnx.List(up)

        self.conv_norm_out = group_norm(channels[0], cfg.norm_num_groups, cfg.norm_eps, rngs)
        self.conv_out = conv(channels[0], cfg.out_channels, cfg.conv_out_kernel, rngs)

    @property
    def dtype(self):
        """The dtype the network computes in: that of its weights."""
        return self.conv_in.kernel.get_value().dtype

    def time_embed(self, timestep, batch: int, text_embeds=None, time_ids=None, timestep_cond=None):
        """The (B, time_embed_dim) conditioning vector that every ResNet receives."""
        cfg = self.config
        t = jnp.broadcast_to(jnp.asarray(timestep), (batch,))
        t_emb = timestep_embedding(t, cfg.block_out_channels[0], cfg.flip_sin_to_cos, cfg.freq_shift)
        if timestep_cond is not None:
            if cfg.time_cond_proj_dim is None:
                raise ValueError(
                    "timestep_cond was given, but this UNet's config has no time_cond_proj_dim "
                    "(only guidance-distilled LCM UNets take it): leave it out."
                )
            timestep_cond = jnp.broadcast_to(jnp.asarray(timestep_cond), (batch, cfg.time_cond_proj_dim))
            timestep_cond = timestep_cond.astype(self.dtype)
        emb = self.time_embedding(t_emb.astype(self.dtype), timestep_cond)
        if cfg.addition_embed_type == "text_time":
            if text_embeds is None or time_ids is None:
                raise ValueError(
                    "This UNet has addition_embed_type='text_time' (SDXL): pass text_embeds (B, pooled_dim), "
                    "the pooled output of the second text encoder, and time_ids (B, 6), the original size, "
                    "crop top-left and target size as (height, width) pairs."
                )
            # Each of the 6 numbers gets its own sinusoidal embedding, like a timestep.
            time_ids = jnp.asarray(time_ids)
            time_ids = jnp.broadcast_to(time_ids, (batch, time_ids.shape[-1]))
            ids_emb = timestep_embedding(
                time_ids.reshape(-1), cfg.addition_time_embed_dim, cfg.flip_sin_to_cos, cfg.freq_shift
            )
            add = jnp.concatenate(
                [jnp.asarray(text_embeds, jnp.float32), ids_emb.reshape(batch, -1)], axis=-1
            )
            emb = emb + self.add_embedding(add.astype(self.dtype))
        return emb

    def __call__(
        self, sample, timestep, encoder_hidden_states, text_embeds=None, time_ids=None, timestep_cond=None
    ):
        cfg = self.config
        if sample.ndim != 4 or sample.shape[-1] != cfg.in_channels:
            raise ValueError(f"sample must be NHWC (B, H, W, {cfg.in_channels}), got shape {sample.shape}.")
        out_dtype, dtype = sample.dtype, self.dtype
        x = sample.astype(dtype)
        context = jnp.asarray(encoder_hidden_states).astype(dtype)
        if cfg.center_input_sample:
            x = 2 * x - 1.0

        with jax.named_scope("time_embedding"):
            temb = self.time_embed(timestep, x.shape[0], text_embeds, time_ids, timestep_cond)

        x = self.conv_in(x)
        skips = [x]
        for i, block in enumerate(self.down_blocks):
            with jax.named_scope(f"down_blocks.{i}"):
                x, block_skips = block(x, temb, context)
            skips += block_skips

        with jax.named_scope("mid_block"):
            x = self.mid_block(x, temb, context)

        for i, block in enumerate(self.up_blocks):
            n = len(block.resnets)
            block_skips, skips = skips[-n:], skips[:-n]
            # Upsample to the size of the next skip connection (2x unless the size was odd).
            size = skips[-1].shape[1:3] if skips else None
            with jax.named_scope(f"up_blocks.{i}"):
                x = block(x, temb, block_skips, context, size)

        x = self.conv_out(jax.nn.silu(self.conv_norm_out(x)))
        return x.astype(out_dtype)


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------


def abstract_unet(config: UNetConfig) -> UNet2DConditionModel:
    """The UNet with shapes and dtypes only: no weights are allocated."""
    return abstract_model(UNet2DConditionModel, config)


def load_unet(
    folder: str | Path,
    subfolder: str | None = "unet",
    dtype=jnp.float32,
    sharding=None,
    progress: bool = True,
    variant: str | None = None,
) -> UNet2DConditionModel:
    """Build the UNet of the checkpoint in ``folder/subfolder`` and load its weights.

    The model is built abstractly (``nnx.eval_shape``: shapes only, no random weights) and each
    tensor goes straight from the memory-mapped safetensors to the device, cast to ``dtype``.
    ``sharding`` maps a parameter path to a ``jax.sharding.Sharding``; ``variant="fp16"`` reads
    ``diffusion_pytorch_model.fp16.safetensors`` when present.
    """
    model = abstract_unet(UNetConfig.from_pretrained(folder, subfolder))
    reader = open_weights(folder, subfolder or "", variant)
    return load_weights(model, reader, dtype=dtype, sharding=sharding, progress="unet" if progress else None)
