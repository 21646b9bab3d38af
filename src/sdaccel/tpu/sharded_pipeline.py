"""The text-to-image pipeline on a device mesh: one compiled program over every device (and host).

:class:`ShardedPipeline` takes the one pure function of :class:`sdaccel.tpu.pipeline.JaxPipeline`,
``denoise_and_decode``, and jits it from the outside with the shardings that the rules of
:mod:`sdaccel.tpu.sharding` give: weights as placed by the rules, scheduler state and guidance scale
replicated, conditioning and noise split over ``"data"``, images split over ``"data"``. Each
device then runs the whole UNet on its share of the batch.

It is called like every front-end (:mod:`sdaccel.core.contract`)::

    pipe = ShardedPipeline.from_pretrained("stabilityai/stable-diffusion-xl-base-1.0")
    result = pipe.generate(["a red fox", "a lighthouse"], seed=0)   # GenerationResult

A batch that the ``"data"`` axis does not divide is padded by repeating the last prompt; only the
requested images come back, and ``timings`` counts only them (``padded`` says how many rows were
extra). Below :meth:`ShardedPipeline.generate`, :meth:`ShardedPipeline.generate_array` returns the
global, still sharded ``jax.Array`` (for multi-host callers that gather it themselves), and
:meth:`~ShardedPipeline.inputs` / :meth:`~ShardedPipeline.compile` expose the compiled program and
its arguments for measuring it.

Across several processes, every process passes the *global* list of prompts; each encodes and
draws noise only for its own rows (:mod:`sdaccel.tpu.distributed`). A stochastic scheduler (Euler
ancestral, LCM) draws its per-step noise from each image's key (``Conditioning.noise_keys``), so
its images too are the same on any number of devices.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.core.checkpoint import open_weights, resolve_checkpoint, torch_key
from sdaccel.core.contract import GenerationResult, Request, make_timings, to_pil
from sdaccel.tpu import distributed
from sdaccel.tpu.aot import AOTCache, Compiled
from sdaccel.tpu.models import attention
from sdaccel.tpu.pipeline import JaxPipeline, image_keys, initial_noise
from sdaccel.tpu.sharding import (
    DATA,
    LARGEST,
    MIN_SHARD_SIZE,
    MODEL,
    RULES,
    Rule,
    axis_size,
    batch_sharding,
    check_batch,
    make_mesh,
    match_rule,
    path_string,
    replicated,
    spec_for,
    tree_shardings,
)

#: Components whose weights stay on this process's first device: the text encoders are small and
#: run per process on its own prompts (so that, across hosts, each encodes only its share).
LOCAL_COMPONENTS = ("text_encoder", "text_encoder_2")


def _checkpoint_shape(reader, path: tuple) -> tuple[int, ...] | None:
    """Shape of parameter ``path`` in our layout, read from the safetensors header (no data)."""
    key = torch_key(path)
    if key not in reader:
        return None
    shape = tuple(reader.shape(key))
    if str(path[-1]) == "kernel" and len(shape) == 4:  # conv OIHW -> HWIO
        return shape[2], shape[3], shape[1], shape[0]
    if str(path[-1]) == "kernel" and len(shape) == 2:  # linear (out, in) -> (in, out)
        return shape[::-1]
    return shape


def pipeline_sharding_fn(
    folder, mesh: Mesh, rules: Sequence[Rule] = RULES, min_shard_size: int = MIN_SHARD_SIZE
):
    """The ``sharding`` argument of ``JaxPipeline.from_pretrained``: ``(component, path) -> Sharding``.

    UNet and VAE weights follow the rules under the prefix ``unet/`` or ``vae/``; the text encoders
    stay on this process's first device. The ``"model"`` rules need each weight's shape, which is
    read from the checkpoint's safetensors header (a weight not found there, under a renamed key,
    stays replicated).
    """
    readers: dict[str, Any] = {}
    local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def sharding(component: str, path: tuple):
        if component in LOCAL_COMPONENTS:
            return local
        name = f"{component}/{path_string(path)}"
        shape: tuple[int, ...] | None = ()  # only the "model" rules look at the shape
        if match_rule(name, rules).spec == LARGEST and axis_size(mesh, MODEL) > 1:
            if component not in readers:
                readers[component] = open_weights(folder, component, "fp16")
            shape = _checkpoint_shape(readers[component], path)
        if shape is None:
            return NamedSharding(mesh, P())
        return NamedSharding(mesh, spec_for(name, shape, mesh, rules, min_shard_size))

    return sharding


def _on_mesh(tree, mesh: Mesh) -> bool:
    """Whether every array of ``tree`` is already placed on ``mesh`` (host arrays are not)."""
    leaves = jax.tree.leaves(tree)
    return bool(leaves) and all(
        isinstance(getattr(x, "sharding", None), NamedSharding)
        and x.sharding.mesh.devices.tolist() == mesh.devices.tolist()
        for x in leaves
    )


class ShardedPipeline:
    """A :class:`sdaccel.tpu.pipeline.JaxPipeline` whose denoise-and-decode runs over a mesh, compiled
    ahead of time once per (batch, height, width, steps, guidance on/off) in one
    :class:`sdaccel.tpu.aot.AOTCache` (:attr:`cache`).

    ``defaults`` and the input checks are the pipeline's (:mod:`sdaccel.core.contract`).
    """

    def __init__(
        self,
        pipeline: JaxPipeline,
        mesh: Mesh,
        rules: Sequence[Rule] = RULES,
        min_shard_size: int = MIN_SHARD_SIZE,
    ):
        self.pipeline = pipeline
        self.mesh = mesh
        self.rules, self.min_shard_size = tuple(rules), min_shard_size
        # compiled for the mesh's platform (splash under shard_map on TPU), and one image per chip
        # at a time through the VAE: each step of the decode loop takes one row per device
        pipeline.use_attention(attention.default_for(attention.mesh_platform(mesh)), mesh=mesh)
        pipeline.set_vae_images_per_step(axis_size(mesh, DATA))
        if not _on_mesh(pipeline.params, mesh):  # loaded without shardings: place the weights now
            pipeline.params = {
                name: jax.device_put(state, tree_shardings(state, mesh, name, rules, min_shard_size))
                for name, state in pipeline.params.items()
            }
        self.param_shardings = jax.tree.map(lambda x: x.sharding, pipeline.params)
        self.cache = AOTCache(
            pipeline.denoise_and_decode,
            mesh=mesh,
            in_shardings=(
                self.param_shardings,
                replicated(mesh),
                batch_sharding(mesh),
                batch_sharding(mesh),
                replicated(mesh),
            ),
            out_shardings=batch_sharding(mesh),
        )
        self._unet_cache = AOTCache(self._unet_call, mesh=mesh)

    @property
    def defaults(self):
        return self.pipeline.defaults

    @classmethod
    def from_pretrained(
        cls,
        path_or_id,
        mesh: Mesh | None = None,
        dtype=jnp.bfloat16,
        rules: Sequence[Rule] = RULES,
        min_shard_size: int = MIN_SHARD_SIZE,
        progress: bool = True,
        **kwargs,
    ) -> ShardedPipeline:
        """Load a checkpoint with every weight going straight to its place on ``mesh`` (default:
        all devices on ``"data"``). ``kwargs`` go to ``JaxPipeline.from_pretrained``."""
        mesh = make_mesh() if mesh is None else mesh
        folder = resolve_checkpoint(path_or_id, variant=kwargs.get("variant"))
        place = pipeline_sharding_fn(folder, mesh, rules, min_shard_size)
        pipeline = JaxPipeline.from_pretrained(
            folder, dtype=dtype, sharding=place, progress=progress, **kwargs
        )
        return cls(pipeline, mesh, rules, min_shard_size)

    def to_mesh(self, mesh: Mesh, rules: Sequence[Rule] | None = None, min_shard_size: int | None = None):
        """The same pipeline on another mesh (fewer devices, or a ``"model"`` axis).

        The weights go through host memory, so no chip ever holds the old and the new copy at
        once (SDXL's 7 GB twice would not fit a 16 GB v5e chip). This object must not be used
        afterwards: it shares the underlying pipeline, whose weights have moved.
        """
        host = jax.device_get(self.pipeline.params)
        self.pipeline.params = host  # the device copies are freed here
        self.cache.clear()
        self._unet_cache.clear()
        rules = self.rules if rules is None else rules
        return ShardedPipeline(
            self.pipeline, mesh, rules, self.min_shard_size if min_shard_size is None else min_shard_size
        )

    def use_attention(self, name: str) -> None:
        """Compute every attention of the UNet and the VAE with ``name`` (``"xla"``, ``"cudnn"``,
        ``"splash"``, which runs under ``shard_map`` on this mesh), and drop what was compiled."""
        self.pipeline.use_attention(name, mesh=self.mesh)
        self.cache.clear()
        self._unet_cache.clear()

    def bytes_per_device(self) -> dict[str, int]:
        """Bytes of UNet and VAE weights that each device holds (the text encoders live apart)."""
        out: dict[str, int] = {}
        for x in jax.tree.leaves(self.pipeline.params):
            for shard in x.addressable_shards:
                out[str(shard.device)] = out.get(str(shard.device), 0) + shard.data.nbytes
        return out

    # ------------------------------------------------------------------------------------------
    # The compiled program and its arguments
    # ------------------------------------------------------------------------------------------

    def _arguments(self, request: Request, indices: np.ndarray) -> tuple:
        """The global arguments of the denoise-and-decode function for a checked request whose
        batch the ``"data"`` axis divides; image ``k`` uses noise index ``indices[k]``. This process
        encodes and draws noise only for its own rows."""
        pipe, batch = self.pipeline, request.batch
        check_batch(batch, self.mesh)
        rows = distributed.process_rows(batch_sharding(self.mesh), batch)
        local_prompts = [request.prompts[i] for i in rows]
        negatives = request.negative_prompts
        local_negatives = None if negatives is None else [negatives[i] for i in rows]
        cond = pipe.conditioning(
            local_prompts, local_negatives, request.guidance_scale, request.height, request.width
        )
        shape = pipe.latent_shape(request.height, request.width)
        local_indices = jnp.asarray(np.asarray(indices)[rows])
        noise = initial_noise(request.seed, local_indices, shape)
        if pipe.scheduler.stochastic:  # per-step noise keyed by image index, as the initial noise
            cond = dataclasses.replace(cond, noise_keys=image_keys(request.seed, local_indices))
        cond, noise = distributed.global_batch((cond, noise), self.mesh, batch)
        state, guidance = distributed.replicated_global(
            (pipe.scheduler.set_timesteps(request.steps), np.float32(request.guidance_scale)), self.mesh
        )
        return pipe.params, state, cond, noise, guidance

    def inputs(
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
    ) -> tuple:
        """The global arguments ``(params, state, cond, noise, guidance)`` of the compiled program,
        for measuring it (:meth:`compile`, ``bench.time_calls``). The inputs are checked as in
        :meth:`generate`, and the ``"data"`` axis must divide the batch (nothing is padded here).
        Image ``k`` uses noise index ``first_index + k``."""
        request = self.pipeline.check_inputs(
            prompts, negative_prompts, steps, guidance_scale, height, width, seed, first_index=first_index
        )
        check_batch(request.batch, self.mesh)
        return self._arguments(request, np.arange(first_index, first_index + request.batch))

    def compile(self, args: tuple) -> Compiled:
        """The AOT-compiled executable (a :class:`sdaccel.tpu.aot.Compiled`) for these arguments'
        shapes, from :attr:`cache` (compiled under ``jax.set_mesh`` on first use)."""
        return self.cache.compile(*args)

    def warm(
        self,
        batch: int,
        height: int | None = None,
        width: int | None = None,
        steps: int | None = None,
        guidance_scale: float | None = None,
    ) -> Compiled:
        """Compile the program for one shape (a resolution bucket) before the first request; what
        is left out is the checkpoint's default."""
        return self.compile(self.inputs([""] * batch, None, steps, guidance_scale, height, width, 0))

    def _unet_call(self, unet_params, x, t, context, text_embeds, time_ids, timestep_cond=None):
        unet = nnx.merge(self.pipeline._unet_graphdef, unet_params)
        return unet(x, t, context, text_embeds, time_ids, timestep_cond)

    def flops(self, args: tuple) -> dict:
        """FLOPs of one call as XLA counts them, all devices together.

        XLA's cost model counts the body of the sampling loop once, so the compiled program's
        count holds one UNet pass; ``steps - 1`` more come from the compiled cost of one UNet call
        at the guidance batch (B * G), with the same shardings. Compiled, not lowered: a lowered
        program's ``cost_analysis()`` is ``None`` on TPU. That program is compiled once per shape.
        XLA sees a splash-attention kernel as an opaque call, so its FLOPs are added from the traced
        programs (:func:`sdaccel.tpu.models.attention.splash_flops`) when the models use it.
        """
        params, state, cond, noise, _ = args
        steps = int(state.timesteps.shape[0])
        program = self.compile(args).flops
        batch, groups = cond.prompt_embeds.shape[:2]
        data = batch_sharding(self.mesh)

        def folded(x):
            return (
                None
                if x is None
                else jax.ShapeDtypeStruct((batch * groups, *x.shape[2:]), x.dtype, sharding=data)
            )

        x = jax.ShapeDtypeStruct((batch * groups, *noise.shape[1:]), noise.dtype, sharding=data)
        t = jax.ShapeDtypeStruct((), state.timesteps.dtype, sharding=replicated(self.mesh))
        unet_args = (
            params["unet"],
            x,
            t,
            folded(cond.prompt_embeds),
            folded(cond.text_embeds),
            folded(cond.time_ids),
        )
        if self.pipeline.guidance_embedded:  # an LCM UNet is also told the guidance scale
            dim = self.pipeline.unet_config.time_cond_proj_dim
            unet_args += (jax.ShapeDtypeStruct((1, dim), jnp.float32, sharding=replicated(self.mesh)),)
        unet = self._unet_cache.compile(*unet_args).flops
        if program is None or unet is None:
            return {"total": None, "unet_step": None, "program_as_counted": None}
        program_total = program * self.mesh.size  # the compiled counts are one device's share
        unet_step = unet * self.mesh.size
        if "splash" in self.pipeline.attention_implementations():  # global shapes: all devices
            with jax.set_mesh(self.mesh):
                program_total += attention.splash_flops(self.cache.jitted.trace(*args).jaxpr)
                unet_step += attention.splash_flops(self._unet_cache.jitted.trace(*unet_args).jaxpr)
        return {
            "total": program_total + (steps - 1) * unet_step,
            "unet_step": unet_step,
            "program_as_counted": program_total,
        }

    # ------------------------------------------------------------------------------------------
    # The user-facing calls
    # ------------------------------------------------------------------------------------------

    def generate_array(
        self, request: Request, *, indices: Sequence[int] | None = None, pad_to: int | None = None
    ) -> tuple[jax.Array, dict]:
        """Run a checked request (``pipe.pipeline.check_inputs(...)``) and return ``(images,
        timings)`` without gathering: ``images`` is the global (B', H, W, 3) float32 array split over
        ``"data"``. B' is the batch padded (by repeating the last prompt) to ``pad_to`` or to the
        next multiple of the ``"data"`` axis; the rows past ``request.batch`` are padding. Every
        process of a multi-host run must call it.

        ``indices``: the noise index of each image (default ``0..B-1``); padding rows continue
        after the last. ``timings`` has the contract's keys, counting only the B real images, and
        ``padded``, the number of padding rows.
        """
        batch = request.batch
        indices = np.arange(batch) if indices is None else np.asarray(indices, np.int64)
        if indices.shape != (batch,):
            raise ValueError(
                f"Got {indices.shape[0] if indices.ndim else 0} noise indices for {batch} prompts."
            )
        extra = max((pad_to or batch) - batch, (-batch) % axis_size(self.mesh, DATA))
        if extra:
            negatives = request.negative_prompts
            request = Request(
                request.prompts + [request.prompts[-1]] * extra,
                None if negatives is None else negatives + [negatives[-1]] * extra,
                request.steps,
                request.guidance_scale,
                request.height,
                request.width,
                request.seed,
            )
            indices = np.concatenate([indices, indices[-1] + 1 + np.arange(extra)]) % 2**32

        encode_compile, program_compile = self.pipeline._encode.compile_s, self.cache.compile_s
        start = time.perf_counter()
        args = self._arguments(request, indices)
        jax.block_until_ready(args[2:4])
        encoded = time.perf_counter()
        compiled = self.compile(args)
        compiled_at = time.perf_counter()
        images = jax.block_until_ready(compiled(*args))
        end = time.perf_counter()
        encode_compile = self.pipeline._encode.compile_s - encode_compile
        compile_s = encode_compile + self.cache.compile_s - program_compile
        encode_s = encoded - start - encode_compile
        timings = make_timings(
            compile_s=compile_s,
            run_s=end - start - compile_s,
            encode_s=encode_s,
            denoise_decode_s=end - compiled_at,
            images=batch,
            steps=request.steps,
            height=request.height,
            width=request.width,
            padded=extra,
            devices=self.mesh.size,
            processes=jax.process_count(),
        )
        return images, timings

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
    ) -> GenerationResult:
        """One image per prompt, on the contract of :mod:`sdaccel.core.contract` (arguments as
        ``JaxPipeline.generate``; image ``k`` uses noise index ``first_index + k``, the same image
        on any number of devices). The images are gathered to every process's host."""
        request = self.pipeline.check_inputs(
            prompts, negative_prompts, steps, guidance_scale, height, width, seed, first_index=first_index
        )
        images, timings = self.generate_array(
            request, indices=np.arange(first_index, first_index + request.batch)
        )
        array = distributed.gather(images, to="all")[: request.batch]
        return GenerationResult(to_pil(array), array, timings)

    __call__ = generate
