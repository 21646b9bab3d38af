"""The tiny autoencoder TAESD / TAESDXL (diffusers' ``AutoencoderTiny``) in Flax NNX, channels-last.

Once a sampler needs only a few steps, the VAE decoder takes a large share of an image's time:
Stable Diffusion's ``AutoencoderKL`` decoder has about 50 M parameters and runs convolutions of
128 to 512 channels at full resolution. TAESD (``madebyollin/taesd`` for SD 1.x/2.x,
``madebyollin/taesdxl`` for SDXL) is a decoder of 1.2 M parameters, distilled to map the *same*
latents to nearly the same images, with 64 channels everywhere and no normalisation or attention::

    decoder: tanh(z / 3) * 3                               # soft clamp of the latents to (-3, 3)
             conv3x3 -> act
             for each level: num_decoder_blocks[i] x Block
                             (then nearest 2x upsampling, except at the last level)
                             conv3x3 (no bias; the last one with bias, to out_channels)
             x * 2 - 1                                     # [0, 1] -> [-1, 1], like AutoencoderKL

    Block:   relu(conv3x3 -> act -> conv3x3 -> act -> conv3x3  +  x)

    encoder: (x + 1) / 2 -> conv3x3 -> Blocks -> [stride-2 conv3x3 (no bias) -> Blocks] ... -> conv3x3

Scaling. TAESD's config says ``scaling_factor: 1.0``, and diffusers' SD and SDXL pipelines divide
the latents by ``pipe.vae.config.scaling_factor`` before decoding: with ``pipe.vae =
AutoencoderTiny(...)`` they divide by 1.0, i.e. TAESD decodes the *diffusion* latents (the base
VAE's latents times its scaling factor) directly; it was trained on them. Our pipelines do the
same as long as they read the scaling from the VAE they decode with (``Pipeline.vae_config``), so
:meth:`AutoencoderTiny.decode` has the signature and the output range of
:meth:`sdaccel.tpu.models.vae.AutoencoderKL.decode` and swapping one for the other is the whole change.
``scale_latents`` / ``unscale_latents`` (diffusers' 8-bit storage of latents, ``latent_magnitude``
and ``latent_shift``) play no part in generation.

Module names follow diffusers' ``nn.Sequential`` indices (``decoder.layers.3.conv.0``), with
parameter-free modules standing in for its activation and upsampling layers, so a parameter's NNX
path is its PyTorch key and the checkpoint loads with :func:`sdaccel.tpu.models.weights.load_weights`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from sdaccel.core.checkpoint import CheckpointError, open_weights, read_config, torch_key
from sdaccel.core.staging import replace_json, staged_folder
from sdaccel.tpu.models.vae import ACTIVATIONS
from sdaccel.tpu.models.weights import abstract_model, load_weights


@dataclasses.dataclass(frozen=True)
class TinyVAEConfig:
    """The fields of an ``AutoencoderTiny`` ``config.json`` (defaults are diffusers', i.e. TAESD's)."""

    in_channels: int = 3
    out_channels: int = 3
    encoder_block_out_channels: tuple[int, ...] = (64, 64, 64, 64)
    decoder_block_out_channels: tuple[int, ...] = (64, 64, 64, 64)
    act_fn: str = "relu"
    upsample_fn: str = "nearest"
    latent_channels: int = 4
    upsampling_scaling_factor: int = 2
    num_encoder_blocks: tuple[int, ...] = (1, 3, 3, 3)
    num_decoder_blocks: tuple[int, ...] = (3, 3, 3, 1)
    latent_magnitude: float = 3.0
    latent_shift: float = 0.5
    force_upcast: bool = False
    scaling_factor: float = 1.0
    shift_factor: float = 0.0

    # What the pipelines read from any VAE config (sdaccel.tpu.pipeline, as diffusers' pipelines do):
    # the levels of the decoder, and no per-channel latent statistics.
    @property
    def block_out_channels(self) -> tuple[int, ...]:
        """diffusers registers the decoder's channels under this name for the pipelines'
        ``vae_scale_factor = 2 ** (len(block_out_channels) - 1)``."""
        return self.decoder_block_out_channels

    @property
    def latents_mean(self) -> None:
        return None

    @property
    def latents_std(self) -> None:
        return None

    @classmethod
    def from_dict(cls, d: dict) -> TinyVAEConfig:
        if d.get("_class_name", "AutoencoderTiny") != "AutoencoderTiny":
            raise CheckpointError(
                f"This config describes a {d['_class_name']!r}, not an AutoencoderTiny (TAESD). Pass the "
                "folder of a tiny autoencoder (config.json + diffusion_pytorch_model.safetensors)."
            )
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
        config = cls(**kwargs)
        if len(config.encoder_block_out_channels) != len(config.num_encoder_blocks) or len(
            config.decoder_block_out_channels
        ) != len(config.num_decoder_blocks):
            raise ValueError(
                "encoder/decoder_block_out_channels must have one entry per level of "
                f"num_encoder/decoder_blocks; got {config}."
            )
        for name in ("encoder_block_out_channels", "decoder_block_out_channels"):
            if len(set(getattr(config, name))) != 1:
                # diffusers builds every conv of a level as (width, width): other widths fail there too
                raise ValueError(
                    f"{name}={getattr(config, name)}: diffusers' AutoencoderTiny runs only with one width "
                    "for all levels (TAESD: 64 everywhere)."
                )
        if config.act_fn.lower() not in ACTIVATIONS:
            raise ValueError(f"Unsupported act_fn {config.act_fn!r}; known: {sorted(ACTIVATIONS)}.")
        if config.upsample_fn != "nearest" or config.upsampling_scaling_factor != 2:
            raise ValueError(
                "Only nearest 2x upsampling (every TAESD) is supported, got upsample_fn="
                f"{config.upsample_fn!r}, upsampling_scaling_factor={config.upsampling_scaling_factor}."
            )
        return config

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, subfolder: str | None = None) -> TinyVAEConfig:
        return cls.from_dict(read_config(folder, subfolder))

    @property
    def scale_factor(self) -> int:
        """Image pixels per latent pixel along each side: 8 for TAESD (three 2x upsamplings)."""
        return self.upsampling_scaling_factor ** (len(self.num_decoder_blocks) - 1)


def conv(cin: int, cout: int, rngs: nnx.Rngs, *, kernel: int = 3, stride: int = 1, bias: bool = True):
    """A conv padded by ``kernel // 2`` on every side, as all of TAESD's (``padding=1`` in PyTorch)."""
    k = kernel // 2
    return nnx.Conv(
        cin, cout, (kernel, kernel), strides=stride, padding=((k, k), (k, k)), use_bias=bias, rngs=rngs
    )


class Activation(nnx.Module):
    """A parameter-free stand-in for the activation layer of diffusers' ``nn.Sequential``, so that
    the indices of the layers after it (and so their checkpoint keys) are the same as there."""

    def __init__(self, name: str):
        self.name = name.lower()

    def __call__(self, x):
        return ACTIVATIONS[self.name](x)


class Upsample(nnx.Module):
    """Nearest-neighbour 2x upsampling (``nn.Upsample(scale_factor=2, mode="nearest")``)."""

    def __call__(self, x):
        return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


class Block(nnx.Module):
    """diffusers' ``AutoencoderTinyBlock``: ``relu(conv(act(conv(act(conv(x))))) + x)``.

    The final ReLU (``fuse``) is a ReLU whatever ``act_fn`` says. diffusers also defines a 1x1
    ``skip`` conv for blocks that change the width, which no AutoencoderTiny builds (its blocks keep
    their level's width: :meth:`TinyVAEConfig.from_dict`).
    """

    def __init__(self, channels: int, act_fn: str, *, rngs: nnx.Rngs):
        self.conv = nnx.List(
            [
                conv(channels, channels, rngs),
                Activation(act_fn),
                conv(channels, channels, rngs),
                Activation(act_fn),
                conv(channels, channels, rngs),
            ]
        )

    def __call__(self, x):
        h = x
        for layer in self.conv:
            h = layer(h)
        return jax.nn.relu(h + x)


class EncoderTiny(nnx.Module):
    """Image (B, H, W, in_channels) in [-1, 1] -> latents (B, H/8, W/8, latent_channels)."""

    def __init__(self, config: TinyVAEConfig, *, rngs: nnx.Rngs):
        channels = config.encoder_block_out_channels
        layers: list = []
        for i, blocks in enumerate(config.num_encoder_blocks):
            if i == 0:
                layers.append(conv(config.in_channels, channels[0], rngs))
            else:
                layers.append(conv(channels[i], channels[i], rngs, stride=2, bias=False))
            layers += [Block(channels[i], config.act_fn, rngs=rngs) for _ in range(blocks)]
        layers.append(conv(channels[-1], config.latent_channels, rngs))
        self.layers = nnx.List(layers)

    def __call__(self, x):
        x = (x + 1) / 2  # TAESD works on images in [0, 1]
        for i, layer in enumerate(self.layers):
            with jax.named_scope(f"layer_{i}"):
                x = layer(x)
        return x


class DecoderTiny(nnx.Module):
    """Latents (B, h, w, latent_channels) -> image (B, 8h, 8w, out_channels) in about [-1, 1]."""

    def __init__(self, config: TinyVAEConfig, *, rngs: nnx.Rngs):
        channels = config.decoder_block_out_channels
        levels = len(channels)
        layers: list = [conv(config.latent_channels, channels[0], rngs), Activation(config.act_fn)]
        for i, blocks in enumerate(config.num_decoder_blocks):
            last = i == levels - 1
            layers += [Block(channels[i], config.act_fn, rngs=rngs) for _ in range(blocks)]
            if not last:
                layers.append(Upsample())
            cout = config.out_channels if last else channels[i]
            layers.append(conv(channels[i], cout, rngs, bias=last))
        self.layers = nnx.List(layers)

    def __call__(self, z):
        x = jnp.tanh(z / 3) * 3  # diffusers' fixed soft clamp (the 3 is not latent_magnitude)
        for i, layer in enumerate(self.layers):
            with jax.named_scope(f"layer_{i}"):
                x = layer(x)
        return x * 2 - 1  # [0, 1] -> [-1, 1], the range of AutoencoderKL's images


class AutoencoderTiny(nnx.Module):
    """TAESD. Images are NHWC in [-1, 1]; latents are NHWC and are the diffusion latents as they
    are (``scaling_factor`` 1.0)."""

    def __init__(self, config: TinyVAEConfig, *, rngs: nnx.Rngs):
        self.config = config
        #: Static, as :attr:`sdaccel.tpu.models.vae.AutoencoderKL.decode_images_per_step`.
        self.decode_images_per_step: int | None = None
        self.encoder = EncoderTiny(config, rngs=rngs)
        self.decoder = DecoderTiny(config, rngs=rngs)

    @property
    def dtype(self):
        """The dtype of the weights, which the inputs are cast to."""
        return self.decoder.layers[0].kernel.dtype

    def encode(self, images):
        """(B, H, W, in_channels) in [-1, 1] -> (B, H/8, W/8, latent_channels) latents.

        diffusers' ``AutoencoderTiny.encode(x).latents``: one deterministic latent per image, not
        the ``(mean, logvar)`` of ``AutoencoderKL.encode``.
        """
        with jax.named_scope("vae_encoder"):
            return self.encoder(images.astype(self.dtype))

    def decode(self, latents, images_per_step: int | None = None):
        """(B, h, w, latent_channels) latents -> (B, 8h, 8w, out_channels) images, about [-1, 1].

        Called exactly as :meth:`sdaccel.tpu.models.vae.AutoencoderKL.decode`, on the latents divided
        by this config's ``scaling_factor`` (1.0). ``images_per_step``: decode that many images at a
        time in a ``jax.lax.map`` loop (``None``: ``decode_images_per_step``, None: all at once).
        """
        if images_per_step is None:
            images_per_step = self.decode_images_per_step
        batch = latents.shape[0]
        if images_per_step is not None and images_per_step != batch:
            if images_per_step < 1 or batch % images_per_step:
                raise ValueError(
                    f"images_per_step={images_per_step} must divide the batch of {batch} "
                    "(use the data axis size, or None for the whole batch at once)."
                )
            # the same split as AutoencoderKL.decode: step l decodes row l of each of the n blocks
            steps = latents.reshape(images_per_step, batch // images_per_step, *latents.shape[1:])
            images = jax.lax.map(lambda z: self.decode(z, images_per_step=z.shape[0]), steps.swapaxes(0, 1))
            return images.swapaxes(0, 1).reshape(batch, *images.shape[2:])
        with jax.named_scope("vae_decoder"):
            return self.decoder(latents.astype(self.dtype))


def load_tiny_vae(
    folder: str | os.PathLike,
    subfolder: str | None = None,
    dtype=jnp.float32,
    sharding=None,
    progress: bool = True,
) -> AutoencoderTiny:
    """Build the ``AutoencoderTiny`` of ``folder[/subfolder]`` abstractly and fill it from its
    safetensors, tensor by tensor (:func:`sdaccel.tpu.models.weights.load_weights`).

    TAESD's config says ``force_upcast: false``: ``dtype`` is used as given (bfloat16 suits it).
    ``sharding`` maps a parameter path to a ``jax.sharding.Sharding``.
    """
    config = TinyVAEConfig.from_pretrained(folder, subfolder)
    model = abstract_model(AutoencoderTiny, config)
    return load_weights(
        model,
        open_weights(folder, subfolder or ""),
        dtype=dtype,
        sharding=sharding,
        progress="vae (tiny)" if progress else None,
    )


# ----------------------------------------------------------------------------------------------
# Random weights for tests
# ----------------------------------------------------------------------------------------------


def save_random_tiny_vae(folder: str | os.PathLike, seed: int = 0, scale: float = 0.1, **config) -> Path:
    """Write a random-weight ``AutoencoderTiny`` in diffusers' format (``config.json`` and
    ``diffusion_pytorch_model.safetensors``, PyTorch layout) to ``folder``, atomically, and return
    it. ``config`` overrides :class:`TinyVAEConfig`'s defaults; weights are normal(0, ``scale``)."""

    tiny = TinyVAEConfig.from_dict(config)
    model = abstract_model(AutoencoderTiny, tiny)
    rng = np.random.default_rng(seed)
    tensors = {}
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        shape = tuple(variable.get_value().shape)
        if len(shape) == 4:  # HWIO -> OIHW
            shape = (shape[3], shape[2], shape[0], shape[1])
        tensors[torch_key(path)] = (rng.standard_normal(shape) * scale).astype(np.float32)
    fields = {f.name: getattr(tiny, f.name) for f in dataclasses.fields(tiny)}
    fields = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
    with staged_folder(folder) as stage:
        save_file(tensors, str(stage / "diffusion_pytorch_model.safetensors"))
        replace_json(
            stage / "config.json",
            {"_class_name": "AutoencoderTiny", **fields, "block_out_channels": list(tiny.block_out_channels)},
        )
    return Path(folder)
