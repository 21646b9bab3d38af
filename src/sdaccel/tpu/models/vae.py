"""The Stable Diffusion VAE (diffusers' ``AutoencoderKL``) in Flax NNX, channels-last.

Diffusion runs on latents 8x smaller than the image in each direction (for the real checkpoints,
four levels: 1024x1024x3 -> 128x128x4 for SDXL). The VAE maps between the two:

- ``encode(images)`` returns the mean and log-variance of a diagonal Gaussian over latents
  (img2img samples from it, or takes the mean).
- ``decode(latents)`` turns latents back into an image. The pipelines keep their latents scaled to
  unit variance (``z * scaling_factor``, 0.18215 for SD 1.x/2.x, 0.13025 for SDXL) and divide by
  ``scaling_factor`` before decoding, exactly as with diffusers' ``vae.decode``: this method takes
  the *unscaled* latents.

Both halves are plain convolutional stacks::

    encoder: conv_in -> down_blocks[i] (resnets, then a stride-2 conv except at the last level)
             -> mid_block (resnet, self-attention, resnet) -> GroupNorm, SiLU -> conv_out (2 x latent)
    quant_conv (1x1) -> split into mean, logvar

    post_quant_conv (1x1) -> decoder: conv_in -> mid_block -> up_blocks[i] (layers_per_block + 1
             resnets, then nearest 2x upsampling and a conv except at the last level)
             -> GroupNorm, SiLU -> conv_out

The only attention is one single-head self-attention over all pixels in each mid block, at the
coarsest resolution (128x128 = 16384 tokens for a 1024px SDXL image).

Module names follow diffusers, so a parameter's NNX path is its PyTorch key. Old checkpoints (SD 1.5
on the hub, for example) name the mid-block attention ``query/key/value/proj_attn`` instead of
``to_q/to_k/to_v/to_out.0``; the loader accepts both, as diffusers'
``ModelMixin._fix_state_dict_keys_on_load`` does.

Precision: SDXL's VAE config says ``force_upcast: true`` because its activations overflow float16.
``load_vae`` follows it and keeps float32 when a half dtype is asked for, unless the caller passes
``force_upcast=False`` (bfloat16 has float32's range, so it does not overflow, at some cost in
accuracy; the ``madebyollin/sdxl-vae-fp16-fix`` VAE is fine-tuned to work in float16).
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import jax
import jax.numpy as jnp
from flax import nnx

from sdaccel.core.checkpoint import open_weights, read_config
from sdaccel.tpu.models.attention import XLA, attention
from sdaccel.tpu.models.weights import abstract_model, load_weights

#: diffusers' ``get_activation`` names -> JAX functions (used inside the resnets).
ACTIVATIONS = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "mish": jax.nn.mish,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "relu": jax.nn.relu,
}

#: Every VAE norm, resnet and attention uses this epsilon (hard-coded in diffusers' Encoder/Decoder).
EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class VAEConfig:
    """The fields of ``vae/config.json`` (defaults are diffusers' ``AutoencoderKL`` defaults)."""

    in_channels: int = 3
    out_channels: int = 3
    down_block_types: tuple[str, ...] = ("DownEncoderBlock2D",)
    up_block_types: tuple[str, ...] = ("UpDecoderBlock2D",)
    block_out_channels: tuple[int, ...] = (64,)
    layers_per_block: int = 1
    act_fn: str = "silu"
    latent_channels: int = 4
    norm_num_groups: int = 32
    sample_size: int | tuple[int, ...] = 32
    scaling_factor: float = 0.18215
    shift_factor: float | None = None
    latents_mean: tuple[float, ...] | None = None
    latents_std: tuple[float, ...] | None = None
    force_upcast: bool = True
    use_quant_conv: bool = True
    use_post_quant_conv: bool = True
    mid_block_add_attention: bool = True

    @classmethod
    def from_dict(cls, d: dict) -> VAEConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
        config = cls(**kwargs)
        n = len(config.block_out_channels)
        if (
            config.down_block_types != ("DownEncoderBlock2D",) * n
            or config.up_block_types != ("UpDecoderBlock2D",) * n
        ):
            raise ValueError(
                "Only DownEncoderBlock2D / UpDecoderBlock2D VAEs (every Stable Diffusion VAE) are supported, "
                f"one per entry of block_out_channels; got {config.down_block_types} / {config.up_block_types}."
            )
        if config.act_fn not in ACTIVATIONS:
            raise ValueError(f"Unsupported act_fn {config.act_fn!r}; known: {sorted(ACTIVATIONS)}.")
        return config

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, subfolder: str | None = "vae") -> VAEConfig:
        return cls.from_dict(read_config(folder, subfolder))


def group_norm(channels: int, groups: int, rngs: nnx.Rngs) -> nnx.GroupNorm:
    # Two-pass variance: the VAE's activations reach large magnitudes, where E[x^2] - E[x]^2 loses digits.
    return nnx.GroupNorm(channels, num_groups=groups, epsilon=EPS, use_fast_variance=False, rngs=rngs)


def conv(cin: int, cout: int, kernel: int, rngs: nnx.Rngs, stride: int = 1, padding=None) -> nnx.Conv:
    """A conv padded by ``kernel // 2`` on every side (diffusers' choice for all but the downsamplers)."""
    padding = kernel // 2 if padding is None else padding
    return nnx.Conv(cin, cout, (kernel, kernel), strides=stride, padding=padding, rngs=rngs)


class ResnetBlock2D(nnx.Module):
    """GroupNorm -> act -> conv3x3, twice, plus the input (through a 1x1 conv if channels change).

    diffusers' ``ResnetBlock2D`` with ``temb_channels=None``: the VAE has no timestep.
    """

    def __init__(self, cin: int, cout: int, config: VAEConfig, *, rngs: nnx.Rngs):
        groups = config.norm_num_groups
        self.act = ACTIVATIONS[config.act_fn]
        self.norm1 = group_norm(cin, groups, rngs)
        self.conv1 = conv(cin, cout, 3, rngs)
        self.norm2 = group_norm(cout, groups, rngs)
        self.conv2 = conv(cout, cout, 3, rngs)
        self.conv_shortcut = conv(cin, cout, 1, rngs) if cin != cout else None

    def __call__(self, x):
        h = self.conv1(self.act(self.norm1(x)))
        h = self.conv2(self.act(self.norm2(h)))
        shortcut = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        return shortcut + h


class Attention(nnx.Module):
    """Single-head self-attention over all H*W positions, with a GroupNorm in front and a residual.

    diffusers builds it with ``heads = channels // attention_head_dim`` and
    ``attention_head_dim = channels``, so there is exactly one head as wide as the channels.
    """

    def __init__(self, channels: int, config: VAEConfig, *, rngs: nnx.Rngs):
        self.group_norm = group_norm(channels, config.norm_num_groups, rngs)
        self.to_q = nnx.Linear(channels, channels, rngs=rngs)
        self.to_k = nnx.Linear(channels, channels, rngs=rngs)
        self.to_v = nnx.Linear(channels, channels, rngs=rngs)
        self.to_out = nnx.List([nnx.Linear(channels, channels, rngs=rngs)])
        self.attention_impl = XLA  # static; sdaccel.tpu.models.attention.use changes it

    def __call__(self, x):
        batch, height, width, channels = x.shape
        h = self.group_norm(x).reshape(batch, height * width, 1, channels)  # (batch, tokens, heads=1, dim)
        out = attention(self.to_q(h), self.to_k(h), self.to_v(h), impl=self.attention_impl)
        return x + self.to_out[0](out.reshape(batch, height, width, channels))


class MidBlock(nnx.Module):
    """diffusers' ``UNetMidBlock2D`` without timestep: resnet, (attention,) resnet."""

    def __init__(self, channels: int, config: VAEConfig, *, rngs: nnx.Rngs):
        self.resnets = nnx.List([ResnetBlock2D(channels, channels, config, rngs=rngs) for _ in range(2)])
        with_attention = config.mid_block_add_attention
        self.attentions = nnx.List([Attention(channels, config, rngs=rngs)] if with_attention else [])

    def __call__(self, x):
        x = self.resnets[0](x)
        if self.attentions:
            with jax.named_scope("attention"):
                x = self.attentions[0](x)
        return self.resnets[1](x)


class Downsample2D(nnx.Module):
    """Stride-2 3x3 conv. diffusers pads the VAE's by (0, 1) on each spatial axis, right and bottom
    only, instead of 1 on both sides, so the output is aligned with the top-left corner."""

    def __init__(self, channels: int, *, rngs: nnx.Rngs):
        self.conv = conv(channels, channels, 3, rngs, stride=2, padding=((0, 1), (0, 1)))

    def __call__(self, x):
        return self.conv(x)


class Upsample2D(nnx.Module):
    """Nearest-neighbour 2x upsampling (each pixel repeated into a 2x2 square), then a 3x3 conv."""

    def __init__(self, channels: int, *, rngs: nnx.Rngs):
        self.conv = conv(channels, channels, 3, rngs)

    def __call__(self, x):
        x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
        return self.conv(x)


class DownEncoderBlock2D(nnx.Module):
    def __init__(self, cin: int, cout: int, num_layers: int, downsample: bool, config: VAEConfig, *, rngs):
        self.resnets = nnx.List(
            [ResnetBlock2D(cin if i == 0 else cout, cout, config, rngs=rngs) for i in range(num_layers)]
        )
        self.downsamplers = nnx.List([Downsample2D(cout, rngs=rngs)]) if downsample else None

    def __call__(self, x):
        for resnet in self.resnets:
            x = resnet(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
        return x


class UpDecoderBlock2D(nnx.Module):
    def __init__(self, cin: int, cout: int, num_layers: int, upsample: bool, config: VAEConfig, *, rngs):
        self.resnets = nnx.List(
            [ResnetBlock2D(cin if i == 0 else cout, cout, config, rngs=rngs) for i in range(num_layers)]
        )
        self.upsamplers = nnx.List([Upsample2D(cout, rngs=rngs)]) if upsample else None

    def __call__(self, x):
        for resnet in self.resnets:
            x = resnet(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class Encoder(nnx.Module):
    """Image (B, H, W, in_channels) -> (B, H/f, W/f, 2 * latent_channels), f = 2^(levels - 1)."""

    def __init__(self, config: VAEConfig, *, rngs: nnx.Rngs):
        channels = config.block_out_channels
        levels = len(channels)
        self.conv_in = conv(config.in_channels, channels[0], 3, rngs)
        self.down_blocks = nnx.List(
            [
                DownEncoderBlock2D(
                    channels[max(i - 1, 0)],
                    channels[i],
                    config.layers_per_block,
                    downsample=i < levels - 1,
                    config=config,
                    rngs=rngs,
                )
                for i in range(levels)
            ]
        )
        self.mid_block = MidBlock(channels[-1], config, rngs=rngs)
        self.conv_norm_out = group_norm(channels[-1], config.norm_num_groups, rngs)
        self.conv_out = conv(channels[-1], 2 * config.latent_channels, 3, rngs)

    def __call__(self, x):
        x = self.conv_in(x)
        for i, block in enumerate(self.down_blocks):
            with jax.named_scope(f"down_block_{i}"):
                x = block(x)
        with jax.named_scope("mid_block"):
            x = self.mid_block(x)
        return self.conv_out(jax.nn.silu(self.conv_norm_out(x)))  # SiLU here whatever act_fn says


class Decoder(nnx.Module):
    """Latents (B, h, w, latent_channels) -> image (B, h*f, w*f, out_channels)."""

    def __init__(self, config: VAEConfig, *, rngs: nnx.Rngs):
        channels = tuple(reversed(config.block_out_channels))
        levels = len(channels)
        self.conv_in = conv(config.latent_channels, channels[0], 3, rngs)
        self.mid_block = MidBlock(channels[0], config, rngs=rngs)
        self.up_blocks = nnx.List(
            [
                UpDecoderBlock2D(
                    channels[max(i - 1, 0)],
                    channels[i],
                    config.layers_per_block + 1,
                    upsample=i < levels - 1,
                    config=config,
                    rngs=rngs,
                )
                for i in range(levels)
            ]
        )
        self.conv_norm_out = group_norm(channels[-1], config.norm_num_groups, rngs)
        self.conv_out = conv(channels[-1], config.out_channels, 3, rngs)

    def __call__(self, z):
        x = self.conv_in(z)
        with jax.named_scope("mid_block"):
            x = self.mid_block(x)
        for i, block in enumerate(self.up_blocks):
            with jax.named_scope(f"up_block_{i}"):
                x = block(x)
        return self.conv_out(jax.nn.silu(self.conv_norm_out(x)))


class AutoencoderKL(nnx.Module):
    """Stable Diffusion's VAE. Images are NHWC in [-1, 1]; latents are NHWC and unscaled."""

    def __init__(self, config: VAEConfig, *, rngs: nnx.Rngs):
        self.config = config
        #: Static: how many images :meth:`decode` decodes at a time when its call does not say
        #: (None: the whole batch). Part of the graph definition, so it keys compiled programs.
        self.decode_images_per_step: int | None = None
        moments = 2 * config.latent_channels
        self.encoder = Encoder(config, rngs=rngs)
        self.decoder = Decoder(config, rngs=rngs)
        self.quant_conv = conv(moments, moments, 1, rngs) if config.use_quant_conv else None
        self.post_quant_conv = (
            conv(config.latent_channels, config.latent_channels, 1, rngs)
            if config.use_post_quant_conv
            else None
        )

    @property
    def dtype(self):
        """The dtype of the weights, which the inputs are cast to."""
        return self.encoder.conv_in.kernel.dtype

    def encode(self, images):
        """(B, H, W, in_channels) -> ``(mean, logvar)``, each (B, H/f, W/f, latent_channels).

        The log-variance is clipped to [-30, 20] as in diffusers' ``DiagonalGaussianDistribution``.
        A sample is ``mean + exp(logvar / 2) * noise``; ``mean`` is diffusers' ``latent_dist.mode()``.
        """
        with jax.named_scope("vae_encoder"):
            moments = self.encoder(images.astype(self.dtype))
            if self.quant_conv is not None:
                moments = self.quant_conv(moments)
        mean, logvar = jnp.split(moments, 2, axis=-1)
        return mean, jnp.clip(logvar, -30.0, 20.0)

    def decode(self, latents, images_per_step: int | None = None):
        """(B, h, w, latent_channels) unscaled latents -> (B, h*f, w*f, out_channels) images, about [-1, 1].

        ``images_per_step``: decode that many images at a time, in a loop (``jax.lax.map``), so that
        the temporaries are those of ``images_per_step`` images instead of the whole batch's (at
        1024x1024 in float32 each image's full-resolution activations take 0.5 GB apiece). Pass
        the size of the mesh's ``"data"`` axis (1 on one chip): image ``i`` of every step then lies
        on its own chip, so the loop moves no data between chips. ``None``: the module's
        ``decode_images_per_step`` (None: the whole batch at once).
        """
        if images_per_step is None:
            images_per_step = self.decode_images_per_step
        if images_per_step is not None and images_per_step != latents.shape[0]:
            batch = latents.shape[0]
            if images_per_step < 1 or batch % images_per_step:
                raise ValueError(
                    f"images_per_step={images_per_step} must divide the batch of {batch} "
                    "(use the data axis size, or None for the whole batch at once)."
                )
            # rows d * (B / n) + l -> [l, d]: step l decodes row l of each of the n blocks (chips)
            steps = latents.reshape(images_per_step, batch // images_per_step, *latents.shape[1:]).swapaxes(
                0, 1
            )
            images = jax.lax.map(lambda z: self.decode(z, images_per_step=z.shape[0]), steps)
            return images.swapaxes(0, 1).reshape(batch, *images.shape[2:])
        with jax.named_scope("vae_decoder"):
            z = latents.astype(self.dtype)
            if self.post_quant_conv is not None:
                z = self.post_quant_conv(z)
            return self.decoder(z)


#: Modern name -> the name in checkpoints saved before diffusers 0.14 (only inside ``attentions.N``).
_OLD_ATTENTION_NAMES = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}


def checkpoint_keys(key: str) -> list[str]:
    """Our key, then its pre-0.14 spelling for mid-block attention weights
    (``...attentions.0.to_q.weight`` -> ``...attentions.0.query.weight``; ``group_norm`` kept)."""
    for new, old in _OLD_ATTENTION_NAMES.items():
        marker = f".{new}."
        if ".attentions." in key and marker in key:
            return [key, key.replace(marker, f".{old}.")]
    return [key]


def load_vae(
    folder: str | os.PathLike,
    subfolder: str = "vae",
    dtype=jnp.float32,
    sharding=None,
    progress: bool = True,
    force_upcast: bool | None = None,
    variant: str | None = None,
) -> AutoencoderKL:
    """Build the VAE of ``folder/subfolder`` abstractly and fill it from its safetensors.

    ``force_upcast``: ``None`` follows the config: when it says ``force_upcast: true`` (SDXL) and
    ``dtype`` is float16 or bfloat16, the weights stay float32 and a warning says so. ``False``
    uses ``dtype`` regardless; ``True`` always upcasts half dtypes. ``sharding`` maps a parameter
    path to a ``jax.sharding.Sharding``; ``variant="fp16"`` reads the ``.fp16.safetensors`` file.
    """
    config = VAEConfig.from_pretrained(folder, subfolder)
    upcast = config.force_upcast if force_upcast is None else force_upcast
    if upcast and jnp.dtype(dtype) in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
        warnings.warn(
            f"The VAE config of {folder} sets force_upcast (its activations overflow float16), so the "
            f"VAE runs in float32 instead of {jnp.dtype(dtype).name}. Pass force_upcast=False to override.",
            stacklevel=2,
        )
        dtype = jnp.float32
    model = abstract_model(AutoencoderKL, config)
    return load_weights(
        model,
        open_weights(folder, subfolder, variant),
        dtype=dtype,
        candidates=checkpoint_keys,
        sharding=sharding,
        progress=subfolder if progress else None,
    )
