"""Text-to-image with SDXL and SD 1.x / 2.x in JAX: the whole sampling loop is one compiled program.

diffusers' pipelines drive the UNet from Python, one step at a time. Here everything from the
initial noise to the decoded image is one ``jax.jit`` function, :meth:`JaxPipeline.denoise_and_decode`,
whose sampling loop is :func:`denoising_loop` (guidance: :func:`classifier_free_guidance`)::

    latents * init_noise_sigma
    fori_loop over the n steps:                      # one XLA while loop, compiled once
        x = scheduler.scale_model_input(latents, i)
        eps = unet([x, x], t_i, [negative, positive] text conditioning)   # guidance batch
        eps = eps_neg + guidance_scale * (eps_pos - eps_neg)
        latents = scheduler.step(eps, i, latents)    # + noise=step_noise(...) when stochastic
    images = vae.decode(latents / scaling_factor) / 2 + 0.5, clipped to [0, 1]

XLA sees the entire loop, so it fuses, plans memory once and launches nothing from Python between
steps; it is compiled once per input *shape* (batch, resolution, number of steps) and cached.
Prompt encoding is a second, small jitted function (:mod:`sdaccel.tpu.text`).

The same code runs SDXL (two text encoders, ``text_time`` micro-conditioning) and SD 1.x / 2.x
(one encoder): ``model_index.json`` and the component configs decide.

Reproducible noise: :func:`initial_noise` draws image ``k`` of the global batch from
``fold_in(key(seed), k)``, so an image depends only on ``(seed, k)``, never on how the batch is
split across calls or devices. The samplers that add noise at every step (Euler ancestral, LCM:
``scheduler.stochastic``) draw step ``i``'s from ``fold_in(fold_in(key(seed), k), i)``
(:func:`step_noise`), so the same holds for them.

A guidance-distilled (LCM) UNet, whose config has ``time_cond_proj_dim``, is told the guidance
scale through an embedding (:func:`sdaccel.tpu.models.unet.guidance_scale_embedding` of
``guidance_scale - 1``) instead of running classifier-free guidance: no negative batch, one UNet
pass per step, as diffusers' pipelines do for such a UNet.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from sdaccel.core.checkpoint import (
    COMPONENT_PATTERNS,
    CheckpointError,
    read_config,
    read_json,
    resolve_checkpoint,
    resolve_tiny_vae,
)
from sdaccel.core.contract import (
    SEED_LIMIT,
    Defaults,
    GenerationResult,
    Request,
    check_inputs,
    make_timings,
    to_pil,
    unscale_latents,
    vae_scale_factor,
)
from sdaccel.tpu import lora, schedulers, text
from sdaccel.tpu.aot import AOTCache
from sdaccel.tpu.models import attention
from sdaccel.tpu.models.taesd import load_tiny_vae
from sdaccel.tpu.models.unet import guidance_scale_embedding, load_unet
from sdaccel.tpu.models.vae import load_vae

SDXL_CLASS, SD_CLASS = "StableDiffusionXLPipeline", "StableDiffusionPipeline"

#: The dtypes the models may run in. The VAE stays float32 when its config says ``force_upcast``.
SUPPORTED_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Conditioning:
    """Everything the UNet is conditioned on, per image, batch first.

    ``G`` is the guidance axis: 2 with classifier-free guidance (index 0 = negative prompt,
    1 = prompt), 1 without. Keeping it as its own axis (rather than stacking negatives after the
    positives as diffusers does) means a batch sharded over devices on axis 0 stays local: the
    (B, G) -> (B * G) reshape inside the loop moves no data between devices.

    prompt_embeds: (B, G, 77, D) text sequence for cross-attention.
    text_embeds: (B, G, P) SDXL's pooled text embedding, None for SD 1.x / 2.x.
    time_ids: (B, G, 6) SDXL's (original_size, crops_coords_top_left, target_size), None otherwise.
    noise_keys: (B, K) uint32, each image's random key (:func:`image_keys`) for the noise that a
      stochastic scheduler adds at every step; None for the others.
    """

    prompt_embeds: jax.Array
    text_embeds: jax.Array | None = None
    time_ids: jax.Array | None = None
    noise_keys: jax.Array | None = None


@functools.partial(jax.jit, static_argnums=(2,))
def initial_noise(seed: int | jax.Array, indices: jax.Array, shape: tuple[int, int, int]) -> jax.Array:
    """Standard normal latents (len(indices), h, w, c) in float32, image ``k`` drawn from
    ``fold_in(key(seed), k)``. Pass the *global* batch indices of the images a call (or a
    device) makes, e.g. ``jnp.arange(start, start + n)``, and the images do not depend on the split."""
    key = jax.random.key(seed)
    return jax.vmap(lambda k: jax.random.normal(jax.random.fold_in(key, k), shape, jnp.float32))(indices)


@jax.jit
def image_keys(seed: int | jax.Array, indices: jax.Array) -> jax.Array:
    """The raw key data (len(indices), K) uint32 of images ``indices``: ``fold_in(key(seed), k)``,
    the key that :func:`initial_noise` draws image ``k``'s initial latents from. Raw data rather
    than typed keys, so that it is an ordinary batch-first array to shard and gather."""
    key = jax.random.key(seed)
    return jax.vmap(lambda k: jax.random.key_data(jax.random.fold_in(key, k)))(indices)


def step_noise(keys: jax.Array, step: int | jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard normal noise ``(B, *shape)`` in float32 for sampling step ``step`` (a traced integer
    is fine): image ``b`` draws from ``fold_in(keys[b], step)``, with ``keys`` from
    :func:`image_keys`. It depends only on (seed, image index, step), not on the batch split."""
    return jax.vmap(
        lambda k: jax.random.normal(jax.random.fold_in(jax.random.wrap_key_data(k), step), shape, jnp.float32)
    )(keys)


def classifier_free_guidance(noise_pred: jax.Array, guidance_scale: float | jax.Array) -> jax.Array:
    """The guided noise prediction (B, ...) from the UNet's (B, G, ...): with G == 2 (index 0 the
    negative prompt, 1 the prompt) ``uncond + guidance_scale * (text - uncond)``, diffusers'
    formula; with G == 1 (no guidance) the prediction itself."""
    if noise_pred.shape[1] == 1:
        return noise_pred[:, 0]
    noise_pred_uncond, noise_pred_text = noise_pred[:, 0], noise_pred[:, 1]
    return noise_pred_uncond + guidance_scale * (noise_pred_text - noise_pred_uncond)


def denoising_loop(
    unet: Callable[[jax.Array, jax.Array], jax.Array],
    scheduler: schedulers.Scheduler,
    state,
    latents: jax.Array,
    guidance_scale: float | jax.Array,
    groups: int = 2,
    noise_keys: jax.Array | None = None,
) -> jax.Array:
    """Noise -> denoised latents: every step in one ``jax.lax.fori_loop`` (call it inside ``jax.jit``).

    unet: ``(x, t) -> noise prediction`` on the guidance batch (B * G, h, w, C), its text
    conditioning bound (:meth:`JaxPipeline.denoise_and_decode` passes it). state: the scheduler's
    ``set_timesteps(steps)``. latents: (B, h, w, C) standard-normal noise. groups: G, 2 with
    classifier-free guidance. noise_keys: each image's key (:func:`image_keys`), for a
    stochastic scheduler's per-step noise.
    """
    batch = latents.shape[0]

    def step(i, latents):
        with jax.named_scope("scale_model_input"):
            x = scheduler.scale_model_input(state, latents, i)
            x = jnp.broadcast_to(x[:, None], (batch, groups, *x.shape[1:]))  # each image once per group
            x = x.reshape(batch * groups, *x.shape[2:])
        with jax.named_scope("unet"):
            noise_pred = unet(x, state.timesteps[i])
        with jax.named_scope("guidance"):
            noise_pred = noise_pred.reshape(batch, groups, *noise_pred.shape[1:]).astype(jnp.float32)
            noise_pred = classifier_free_guidance(noise_pred, guidance_scale)
        with jax.named_scope("scheduler_step"):
            if scheduler.stochastic:  # Euler ancestral, LCM: fresh noise keyed by (image, step)
                noise = step_noise(noise_keys, i, latents.shape[1:])
                return scheduler.step(state, noise_pred, i, latents, noise=noise)
            return scheduler.step(state, noise_pred, i, latents)

    latents = latents.astype(jnp.float32) * state.init_noise_sigma
    return jax.lax.fori_loop(0, state.timesteps.shape[0], step, latents)


def _check_dtype(dtype):
    if jnp.dtype(dtype) not in [jnp.dtype(d) for d in SUPPORTED_DTYPES]:
        names = [jnp.dtype(d).name for d in SUPPORTED_DTYPES]
        raise ValueError(f"Unsupported dtype {dtype!r}: use one of {names} (bfloat16 on TPU).")
    return jnp.dtype(dtype)


def _text_to_image_checkpoint(path_or_id: str | os.PathLike, variant: str | None) -> tuple[Path, dict, list]:
    """``(folder, model_index, components)`` of a diffusers checkpoint (a folder or a hub id; only
    the components ``model_index.json`` lists are downloaded), or :class:`CheckpointError` when it
    lacks what text-to-image needs."""
    index = read_json(resolve_checkpoint(path_or_id, components=[]) / "model_index.json")
    components = [
        name
        for name, value in index.items()
        if name in COMPONENT_PATTERNS and isinstance(value, list) and value[0] is not None
    ]
    folder = resolve_checkpoint(path_or_id, components=components, variant=variant)
    missing = {"unet", "vae", "text_encoder", "tokenizer", "scheduler"} - set(components)
    if missing:
        raise CheckpointError(
            f"{path_or_id}: model_index.json lists no {sorted(missing)}; not a text-to-image SD checkpoint."
        )
    return folder, index, components


def _load_decoder(folder: Path, tiny_vae, dtype, sharding, progress: bool, variant: str | None):
    """The pipeline's VAE: the tiny autoencoder ``tiny_vae`` in ``dtype`` when given, else the
    checkpoint's own, float32 when its config says ``force_upcast``."""
    if tiny_vae is not None:
        return load_tiny_vae(tiny_vae, dtype=dtype, sharding=sharding, progress=progress)
    vae_config = read_config(folder, "vae")
    vae_dtype = jnp.float32 if vae_config.get("force_upcast", True) else dtype
    return load_vae(
        folder,
        "vae",
        dtype=vae_dtype,
        sharding=sharding,
        progress=progress,
        force_upcast=False,
        variant=variant,
    )


class JaxPipeline:
    """SDXL / SD text-to-image. Build it with :meth:`from_pretrained`, run it with :meth:`generate`.

    The models live here as ``nnx`` graph definitions (static structure) plus ``params`` (the
    weights, a dict of ``nnx.State`` pytrees), so that the compiled function takes the weights as
    an argument and can be given shardings for them.
    """

    def __init__(
        self,
        prompt_encoder: text.PromptEncoder,
        unet,
        vae,
        scheduler: schedulers.Scheduler,
        folder=None,
        model_index: dict | None = None,
    ):
        self.folder = folder
        self.prompt_encoder = prompt_encoder
        self.scheduler = scheduler
        self.unet_config, self.vae_config = unet.config, vae.config
        self.is_sdxl = unet.config.addition_embed_type == "text_time"
        #: An LCM-distilled UNet (``time_cond_proj_dim``) is told the guidance scale as an
        #: embedding, and runs without classifier-free guidance.
        self.guidance_embedded = unet.config.time_cond_proj_dim is not None
        if self.is_sdxl != prompt_encoder.is_sdxl:
            raise CheckpointError("The UNet's addition_embed_type and the number of text encoders disagree.")
        self.vae_scale_factor = vae_scale_factor(vae.config.block_out_channels)
        if model_index is None:
            model_index = {"_class_name": SDXL_CLASS if self.is_sdxl else SD_CLASS}
        #: What a call leaves out, and the limits of its inputs (:mod:`sdaccel.core.contract`).
        self.defaults = Defaults.from_checkpoint(
            model_index,
            unet.config.sample_size,
            len(unet.config.block_out_channels),
            self.vae_scale_factor,
            scheduler.config.num_train_timesteps,
        )
        self.dtypes = {"text": prompt_encoder.dtype, "unet": unet.dtype, "vae": vae.dtype}
        self._unet_graphdef, unet_params = nnx.split(unet)
        self._vae_graphdef, vae_params = nnx.split(vae)
        self.params = {"unet": unet_params, "vae": vae_params}
        self.set_jit_options()

    @property
    def unet(self):
        """The UNet as an ``nnx`` module (sharing ``params["unet"]``)."""
        return nnx.merge(self._unet_graphdef, self.params["unet"])

    @property
    def vae(self):
        return nnx.merge(self._vae_graphdef, self.params["vae"])

    def components(self) -> dict:
        """Every model by its checkpoint folder name: text_encoder(_2), unet, vae."""
        names = ["text_encoder", "text_encoder_2"][: len(self.prompt_encoder.params)]
        return {
            **dict(zip(names, self.prompt_encoder.text_encoders, strict=True)),
            "unet": self.unet,
            "vae": self.vae,
        }

    def fuse_lora(self, adapters) -> list:
        """Fuse LoRA adapters, ``[(.safetensors file or LoraAdapter, scale), ...]`` in the diffusers or
        kohya layout, into the UNet and text encoders in place (:func:`sdaccel.tpu.lora.fuse_lora`:
        all checked first, then one tensor at a time); :meth:`unfuse_lora` takes them out again."""
        return lora.fuse_lora(self, adapters)

    def unfuse_lora(self) -> int:
        """Subtract every fused adapter again; return how many there were."""
        return lora.unfuse_lora(self)

    # ------------------------------------------------------------------------------------------
    # Loading
    # ------------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | os.PathLike,
        dtype=jnp.bfloat16,
        variant: str | None = None,
        scheduler: str | None = None,
        sharding: Callable[[str, tuple], jax.sharding.Sharding] | None = None,
        progress: bool = True,
        vae: str | os.PathLike | None = None,
    ) -> JaxPipeline:
        """Load a diffusers-format SDXL or SD 1.x / 2.x checkpoint (a folder or a hub id).

        Args:
          dtype: float32, bfloat16 or float16 for the UNet and text encoders; the VAE stays float32
            when its config says ``force_upcast`` (SDXL's does).
          variant: ``"fp16"`` to read (and download only) the ``*.fp16.safetensors`` weights.
          scheduler: ``"euler"``, ``"ddim"``, ``"euler_a"`` (``"euler_ancestral"``), ``"lcm"`` or one
            of those diffusers class names, to override the checkpoint's scheduler class (see
            :func:`sdaccel.tpu.schedulers.from_config`; unimplemented classes fall back to Euler). The
            OpenVINO pipeline takes the same names.
          sharding: maps ``(component, parameter path)`` to a ``jax.sharding.Sharding``, used as
            each weight is placed on the devices (component: ``unet``, ``vae``, ``text_encoder``...).
          vae: ``None`` (the checkpoint's own VAE), ``"tiny"`` (TAESD for SD 1.x/2.x, TAESDXL for
            SDXL, from the hub) or the folder of an ``AutoencoderTiny``: decode with that tiny
            autoencoder instead, in ``dtype`` (:mod:`sdaccel.tpu.models.taesd`).
        """
        # 1. Check inputs: the dtype, the components model_index.json lists, the tiny VAE
        dtype = _check_dtype(dtype)
        folder, index, components = _text_to_image_checkpoint(path_or_id, variant)
        tiny_vae = resolve_tiny_vae(folder, vae)  # checked before any weight is read

        # 2. Load the text encoders, the UNet and the VAE, each weight placed as it is read
        def place(component):
            return None if sharding is None else (lambda path: sharding(component, path))

        is_sdxl = "text_encoder_2" in components
        prompt_encoder = text.load_prompt_encoder(
            folder,
            dtype=dtype,
            sharding=sharding,
            progress=progress,
            variant=variant,
            force_zeros_for_empty_prompt=is_sdxl and index.get("force_zeros_for_empty_prompt", True),
        )
        unet = load_unet(
            folder, "unet", dtype=dtype, sharding=place("unet"), progress=progress, variant=variant
        )
        vae = _load_decoder(folder, tiny_vae, dtype, place("vae"), progress, variant)
        # 3. The scheduler and the pipeline
        sched = schedulers.from_config(read_config(folder, "scheduler"), kind=scheduler)
        pipe = cls(prompt_encoder, unet, vae, sched, folder=folder, model_index=index)
        # 4. Programs are compiled for the platform they run on: splash attention on a TPU, XLA's on a
        # CPU. One image at a time through the VAE, so that a batch's full-resolution activations
        # (0.5 GB per image at 1024x1024 in float32) never sit in memory together: without it
        # 4 SDXL images need 19.4 GiB of temporaries, more than a v5e chip's 16 GB
        # (benchmarks/results/tpu_plan_notes.md). ShardedPipeline sets both again for its mesh.
        pipe.use_attention(attention.default_for(jax.default_backend()))
        pipe.set_vae_images_per_step(1)
        return pipe

    def set_jit_options(self, *, denoise: dict | None = None, encode: dict | None = None) -> None:
        """(Re)build the two compiled functions with these ``jax.jit`` keyword arguments
        (``in_shardings``, ``out_shardings``, ``donate_argnums``...) and drop what was compiled.
        This is the hook for running the pipeline sharded over a device mesh."""
        self._denoise = AOTCache(self.denoise_and_decode, **(denoise or {}))
        self._encode = AOTCache(self.prompt_encoder.encode_ids, **(encode or {}))

    def use_attention(self, name: str, *, mesh=None, interpret: bool | None = None) -> None:
        """Compute every attention of the UNet and the VAE with ``name`` (``"xla"``, ``"cudnn"``,
        ``"splash"``: see :func:`sdaccel.tpu.models.attention.use`) from the next call on, and drop the
        compiled denoise-and-decode programs (the choice is part of the models' structure)."""
        for key in ("unet", "vae"):
            graphdef = getattr(self, f"_{key}_graphdef")
            model = attention.use(nnx.merge(graphdef, self.params[key]), name, mesh=mesh, interpret=interpret)
            graphdef, self.params[key] = nnx.split(model)
            setattr(self, f"_{key}_graphdef", graphdef)
        self._denoise.clear()

    def set_vae_images_per_step(self, n: int | None) -> None:
        """Decode ``n`` images at a time through the VAE (``None``: the whole batch at once) from
        the next call on, and drop the compiled programs (the choice is part of the VAE's structure).
        The images are the same; only the peak memory and the schedule change."""
        if n is not None and (not isinstance(n, int) or n < 1):
            raise ValueError(f"images per VAE step must be a positive integer or None, got {n!r}.")
        vae = nnx.merge(self._vae_graphdef, self.params["vae"])
        vae.decode_images_per_step = n
        self._vae_graphdef, self.params["vae"] = nnx.split(vae)
        self._denoise.clear()

    def attention_implementations(self) -> set[str]:
        """The attention implementations the UNet and the VAE use now."""
        return attention.implementations(self.unet) | attention.implementations(self.vae)

    # ------------------------------------------------------------------------------------------
    # The compiled program
    # ------------------------------------------------------------------------------------------

    def denoise_and_decode(
        self,
        params: dict,
        state,
        cond: Conditioning,
        latents: jax.Array,
        guidance_scale: jax.Array,
    ) -> jax.Array:
        """Initial noise -> images, as one pure function (jit it, shard it).

        Args:
          params: ``{"unet": nnx.State, "vae": nnx.State}``, i.e. ``pipeline.params``.
          state: the scheduler state, ``pipeline.scheduler.set_timesteps(steps)``; its arrays
            have the number of steps as their (static) length.
          cond: :class:`Conditioning`, every field batch-first (B, G, ...); with a stochastic
            scheduler its ``noise_keys`` must be set.
          latents: (B, h, w, C) standard-normal noise in float32 (NHWC, h = height / 8); it is
            scaled by the scheduler's ``init_noise_sigma`` here, as diffusers' ``prepare_latents``.
          guidance_scale: () float32; used when G == 2, and by a guidance-embedded (LCM) UNet.

        Returns:
          (B, H, W, 3) float32 images in [0, 1]. Every input and the output have the batch on axis
          0 and no operation mixes images, so the batch can be sharded over devices freely.

        The latents are float32 throughout the loop; the UNet computes in its weights' dtype and
        the VAE in its own (float32 when ``force_upcast``).
        """
        # 1. The models, and the conditioning folded to (B * G, ...)
        unet = nnx.merge(self._unet_graphdef, params["unet"])
        vae = nnx.merge(self._vae_graphdef, params["vae"])
        batch, groups = cond.prompt_embeds.shape[:2]

        def fold(x):  # (B, G, ...) -> (B * G, ...)
            return None if x is None else x.reshape(batch * groups, *x.shape[2:])

        context, text_embeds, time_ids = fold(cond.prompt_embeds), fold(cond.text_embeds), fold(cond.time_ids)
        # 2. Check what the scheduler and the UNet need
        if self.scheduler.stochastic and cond.noise_keys is None:
            raise ValueError(
                f"{type(self.scheduler).__name__} adds noise at every step: set cond.noise_keys to "
                "image_keys(seed, image indices) (generate() does)."
            )
        timestep_cond = None
        if self.guidance_embedded:
            if groups != 1:
                raise ValueError(
                    "This UNet takes the guidance scale as an embedding (time_cond_proj_dim): build the "
                    "conditioning without a negative batch (G = 1), as JaxPipeline.conditioning does."
                )
            w = jnp.reshape(jnp.asarray(guidance_scale, jnp.float32) - 1, (1,))
            timestep_cond = guidance_scale_embedding(w, self.unet_config.time_cond_proj_dim)

        # 3. The UNet on the guidance batch (B * G), its conditioning bound; then the loop and the decode
        def unet_on_guidance_batch(x, t):
            return unet(x, t, context, text_embeds, time_ids, timestep_cond)

        latents = denoising_loop(
            unet_on_guidance_batch, self.scheduler, state, latents, guidance_scale, groups, cond.noise_keys
        )
        with jax.named_scope("vae_decode"):
            images = vae.decode(self.unscale_latents(latents))
        return jnp.clip(images.astype(jnp.float32) / 2 + 0.5, 0.0, 1.0)

    def unscale_latents(self, latents: jax.Array) -> jax.Array:
        """Diffusion latents -> VAE latents (:func:`sdaccel.core.contract.unscale_latents`, NHWC)."""
        cfg = self.vae_config
        return unscale_latents(
            latents, cfg.scaling_factor, cfg.latents_mean, cfg.latents_std, channel_axis=-1
        )

    # ------------------------------------------------------------------------------------------
    # Inputs
    # ------------------------------------------------------------------------------------------

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int]:
        """(h, w, C) of the latents of a ``height`` x ``width`` image (a size that
        :func:`~sdaccel.core.contract.check_inputs` accepted)."""
        f = self.vae_scale_factor
        return height // f, width // f, self.unet_config.in_channels

    def check_inputs(
        self,
        prompts,
        negative_prompts=None,
        steps=None,
        guidance_scale=None,
        height=None,
        width=None,
        seed=0,
        *,
        first_index: int = 0,
    ) -> Request:
        """The contract's :func:`~sdaccel.core.contract.check_inputs` against this checkpoint's
        defaults, plus the JAX front-ends' ``first_index``: every image's noise index
        ``first_index + k`` must be a 32-bit ``fold_in`` index. Nothing is compiled or run."""
        request = check_inputs(
            prompts, negative_prompts, steps, guidance_scale, height, width, seed, defaults=self.defaults
        )
        if (
            not isinstance(first_index, int | np.integer)
            or isinstance(first_index, bool)
            or not 0 <= first_index <= SEED_LIMIT - request.batch
        ):
            raise ValueError(
                f"first_index must be an integer from 0 to 2**32 - {request.batch} (the batch), so that "
                f"every image's noise index first_index + k fits 32 bits; got {first_index!r}."
            )
        return request

    def conditioning(
        self,
        prompts: Sequence[str],
        negative_prompts: str | Sequence[str] | None,
        guidance_scale: float,
        height: int,
        width: int,
        original_size: tuple[int, int] | None = None,
        crops_coords_top_left: tuple[int, int] = (0, 0),
        target_size: tuple[int, int] | None = None,
    ) -> Conditioning:
        """Encode the prompts into a :class:`Conditioning` (guidance axis included: G = 2 with
        classifier-free guidance, which needs ``guidance_scale > 1`` and a UNet that does not take
        the guidance scale as an embedding). ``noise_keys`` is left unset (see :meth:`generate`)."""
        guided = guidance_scale > 1.0 and not self.guidance_embedded
        emb = self.prompt_encoder(prompts, negative_prompts, guided, encode=self._encode)
        pairs = [emb.negative_prompt_embeds, emb.prompt_embeds] if guided else [emb.prompt_embeds]
        cond = Conditioning(jnp.stack(pairs, axis=1))
        if not self.is_sdxl:
            return cond
        pooled = jnp.stack([emb.negative_pooled, emb.pooled] if guided else [emb.pooled], axis=1)
        ids = [*(original_size or (height, width)), *crops_coords_top_left, *(target_size or (height, width))]
        time_ids = jnp.broadcast_to(jnp.asarray(ids, jnp.float32), (len(prompts), len(pairs), 6))
        return dataclasses.replace(cond, text_embeds=pooled, time_ids=time_ids)

    def _starting_latents(self, request, first_index: int, latents) -> jax.Array | np.ndarray:
        """The noise :meth:`generate` starts from: ``latents`` when given (their shape checked), else
        :func:`initial_noise` of the request's images (global indices from ``first_index``)."""
        shape = self.latent_shape(request.height, request.width)
        if latents is None:
            return initial_noise(request.seed, jnp.arange(first_index, first_index + request.batch), shape)
        if tuple(latents.shape) != (request.batch, *shape):
            raise ValueError(
                f"latents have shape {tuple(latents.shape)}, expected {(request.batch, *shape)} "
                f"(batch, height/{self.vae_scale_factor}, width/{self.vae_scale_factor}, channels), channels-last."
            )
        return latents

    def _request_conditioning(
        self, request, first_index: int, original_size, crops_coords_top_left, target_size
    ) -> Conditioning:
        """:meth:`conditioning` of a checked request, with the per-image noise keys of a stochastic
        scheduler (global indices from ``first_index``)."""
        cond = self.conditioning(
            request.prompts,
            request.negative_prompts,
            request.guidance_scale,
            request.height,
            request.width,
            original_size,
            crops_coords_top_left,
            target_size,
        )
        if self.scheduler.stochastic:
            keys = image_keys(request.seed, jnp.arange(first_index, first_index + request.batch))
            cond = dataclasses.replace(cond, noise_keys=keys)
        return cond

    # ------------------------------------------------------------------------------------------
    # The user-facing call
    # ------------------------------------------------------------------------------------------

    def generate(
        self,
        prompts: str | Sequence[str],
        negative_prompts: str | Sequence[str] | None = None,
        steps: int | None = None,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int = 0,
        *,
        first_index: int = 0,
        latents: jax.Array | np.ndarray | None = None,
        original_size: tuple[int, int] | None = None,
        crops_coords_top_left: tuple[int, int] = (0, 0),
        target_size: tuple[int, int] | None = None,
    ) -> GenerationResult:
        """One image per prompt, on the contract of :mod:`sdaccel.core.contract` (the inputs are checked
        before anything is compiled; what is left out comes from :attr:`defaults`).

        Args:
          prompts: a string (one image) or a non-empty list of strings.
          negative_prompts: None, one string for all, or a list of B strings. For SDXL, None
            means zero embeddings (``force_zeros_for_empty_prompt``) and ``""`` the encoded empty text.
          steps: sampling steps. guidance_scale: classifier-free guidance; <= 1 turns it off. An
            LCM UNet (``time_cond_proj_dim``) is given it as an embedding instead (no negative
            batch; negative prompts are then unused).
          height, width: multiples of ``defaults.size_multiple``; default: the UNet's training
            size (1024 for SDXL).
          seed, first_index: image k of this call starts from the noise of global index
            ``first_index + k``, ``fold_in(key(seed), first_index + k)`` (see :func:`initial_noise`),
            and a stochastic scheduler's noise at each step follows from the same key
            (:func:`step_noise`): a batch split over several calls gives the same images as one call.
          latents: (B, h, w, C) NHWC standard-normal noise to start from instead (not yet scaled
            by ``init_noise_sigma``: pass the same array as diffusers' ``latents``, transposed).
          original_size, crops_coords_top_left, target_size: SDXL's size conditioning, (height,
            width) pairs; the defaults (the output size, no crop) are diffusers'.

        Returns:
          :class:`~sdaccel.core.contract.GenerationResult`: ``images``, ``array`` (B, H, W, 3) and
          ``timings`` (the contract's keys; ``compile_s`` is 0 when every program was compiled).
        """
        # 1. Check inputs (nothing is compiled before they pass)
        request = self.check_inputs(
            prompts, negative_prompts, steps, guidance_scale, height, width, seed, first_index=first_index
        )
        # 2. Prepare the starting noise and the timesteps
        latents = self._starting_latents(request, first_index, latents)
        state = self.scheduler.set_timesteps(request.steps)

        # 3. Encode the prompts (and the per-image noise keys of a stochastic scheduler)
        encode_compile, denoise_compile = self._encode.compile_s, self._denoise.compile_s
        start = time.perf_counter()
        cond = self._request_conditioning(
            request, first_index, original_size, crops_coords_top_left, target_size
        )
        jax.block_until_ready(cond)
        encoded = time.perf_counter()
        # 4. Denoise and decode: one compiled program
        images = self._denoise(
            self.params, state, cond, jnp.asarray(latents, jnp.float32), jnp.float32(request.guidance_scale)
        )
        array = np.asarray(jax.block_until_ready(images))
        end = time.perf_counter()

        # 5. Timings, without what was spent compiling
        encode_compile = self._encode.compile_s - encode_compile
        denoise_compile = self._denoise.compile_s - denoise_compile
        timings = make_timings(
            compile_s=encode_compile + denoise_compile,
            run_s=end - start - encode_compile - denoise_compile,
            encode_s=encoded - start - encode_compile,
            denoise_decode_s=end - encoded - denoise_compile,
            images=request.batch,
            steps=request.steps,
            height=request.height,
            width=request.width,
        )
        return GenerationResult(to_pil(array), array, timings)

    __call__ = generate


def describe_unet(config, latent_height: int, latent_width: int) -> list[dict]:
    """One row per UNet block (down, mid, up): resolution, channels, ResNets and transformer layers.

    Each transformer layer (``BasicTransformerBlock``) holds one self-attention over the pixels
    of that level and one cross-attention to the text; at the top level of SDXL (128x128 latents)
    a self-attention would see 16,384 tokens, which is why SDXL has none there.
    """
    channels = list(config.block_out_channels)
    layers = config.per_block(config.layers_per_block)
    depth = config.per_block(config.transformer_layers_per_block)
    heads = config.heads_per_block
    n = len(channels)

    def row(part, level, kind, resnets, with_attention, transformers=None):
        attn = transformers if transformers is not None else (resnets if with_attention else 0)
        return {
            "block": part,
            "type": kind,
            "resolution": f"{latent_height >> level}x{latent_width >> level}",
            "channels": channels[level],
            "resnets": resnets,
            "transformer_layers": attn * depth[level],
            "heads": heads[level] if attn else 0,
            "head_dim": channels[level] // heads[level] if attn else 0,
        }

    rows = [
        row(f"down_blocks.{i}", i, kind, layers[i], kind.startswith("CrossAttn"))
        for i, kind in enumerate(config.down_block_types)
    ]
    rows.append(row("mid_block", n - 1, config.mid_block_type, 2, True, transformers=1))
    rows += [
        row(f"up_blocks.{i}", n - 1 - i, kind, layers[n - 1 - i] + 1, kind.startswith("CrossAttn"))
        for i, kind in enumerate(config.up_block_types)
    ]
    return rows
