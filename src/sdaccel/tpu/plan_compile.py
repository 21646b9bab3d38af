"""Compile the cases of the TPU plan: the real SDXL programs for Cloud TPU slices, here, with no
TPU and no weights, and read off whether they fit, what they cost and how they communicate.

For each :class:`Case` (topology, mesh, attention, batch) :func:`compile_case` builds the pipeline
from the model configs (``src/sdaccel/reference_configs/sdxl-base-1.0`` by default, or any diffusers
checkpoint folder) with abstract weights, lays it on a mesh of compile-only TPU devices with the real
sharding rules (:mod:`sdaccel.tpu.sharding`), compiles
:meth:`sdaccel.tpu.pipeline.JaxPipeline.denoise_and_decode` (the whole denoising loop and the VAE
decode: one program) and reports per chip:

* HBM: arguments (weights and inputs), temporaries, generated code and their peak, against the
  chip's capacity, with ``fits`` and the room left;
* FLOPs per image: XLA's count of the compiled program, corrected for what it cannot see. XLA
  counts the body of the sampling loop once, so ``steps - 1`` UNet calls are added (one UNet call
  counted on its CPU lowering with XLA attention); it sees a Pallas kernel as an opaque call, so
  the splash-attention FLOPs are added analytically (:func:`sdaccel.tpu.models.attention.splash_flops`);
* the time floor at the chip's peak and the utilisation each anchor would need;
* the collectives by kind and the Pallas kernel calls in the optimised HLO, and compile time;
* with :func:`search_batch`, the largest batch per chip that fits, by compiling (doubling, then
  bisection).

Batches are per ``"data"`` shard (per chip on a data-only mesh). Real-size programs take minutes
each to compile (about 12 on one core). The notebooks' plan is :mod:`sdaccel.tpu.plan`; the command
line that compiles many cases and writes the committed plan files is
:mod:`sdaccel.tools.measure.tpu_plan`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from importlib import resources
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.core.checkpoint import read_config
from sdaccel.tpu import topology as tpu_topology
from sdaccel.tpu.topology import GiB

#: Seconds per image per chip to beat, and where each figure comes from.
ANCHORS = {
    "hf_blog_v5e4": (2.33, "HF blog: v5e-4, 4 images 1024x1024, 20 steps in 2.33 s"),
    "mlperf_v41_v5e4": (4 / 1.75, "MLPerf Inference v4.1: v5e-4 offline, 1.75 images/s"),
    "goal": (2.05, "this tutorial's goal"),
}

#: HBM a program should leave free on its chip (the runtime, the text encoders, fragmentation).
SPARE_BYTES = 2 * GiB

DEFAULT_CONFIG = "sdxl-base-1.0"


def _tiny_configs() -> dict[str, dict]:
    """``--config tiny``: SDXL's layout shrunk until its TPU program compiles in about a minute, yet
    with what the checks need: head_dim 64 self-attention over 128 tokens in the UNet (latents
    16x8) and the VAE (splash applies), 77-token cross-attention (stays XLA), a second UNet level
    whose 32-token attention stays XLA too, and kernels of at least 128x128 (padding does not
    distort per-chip bytes; pass ``min_shard_size`` for the ``"model"`` rules to split them)."""
    clip = dict(
        hidden_size=64, intermediate_size=128, num_attention_heads=1, num_hidden_layers=1, vocab_size=1000
    )
    with resources.as_file(resources.files("sdaccel") / "reference_configs" / DEFAULT_CONFIG) as ref:
        scheduler = json.loads((Path(ref) / "scheduler.json").read_text())
    return {
        "unet": dict(
            sample_size=16,
            block_out_channels=[128, 256],
            layers_per_block=1,
            down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"],
            up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"],
            attention_head_dim=[2, 4],
            transformer_layers_per_block=1,
            cross_attention_dim=128,
            use_linear_projection=True,
            addition_embed_type="text_time",
            addition_time_embed_dim=8,
            projection_class_embeddings_input_dim=6 * 8 + 64,
            norm_num_groups=32,
        ),
        "vae": dict(
            block_out_channels=[128, 128],
            down_block_types=["DownEncoderBlock2D"] * 2,
            up_block_types=["UpDecoderBlock2D"] * 2,
            layers_per_block=1,
            latent_channels=4,
            norm_num_groups=32,
            sample_size=32,
            force_upcast=True,
        ),
        "text_encoder": dict(clip, architectures=["CLIPTextModel"]),
        "text_encoder_2": dict(clip, architectures=["CLIPTextModelWithProjection"], projection_dim=64),
        "scheduler": scheduler,
    }


# ----------------------------------------------------------------------------------------------
# An abstract pipeline
# ----------------------------------------------------------------------------------------------


def read_configs(source: str | os.PathLike) -> dict[str, dict]:
    """The component configs of a reference config name (``sdxl-base-1.0``, a folder of
    ``<component>.json`` under ``sdaccel/reference_configs``) or of a diffusers checkpoint folder."""

    if str(source) == "tiny":
        return _tiny_configs()
    folder = Path(source)
    if (folder / "model_index.json").is_file():
        components = ["unet", "vae", "scheduler", "text_encoder", "text_encoder_2"]
        return {c: read_config(folder, c) for c in components if (folder / c).is_dir()}
    references = resources.files("sdaccel") / "reference_configs"
    names = sorted(p.name for p in references.iterdir())
    if str(source) not in names:
        raise ValueError(
            f"{source!r} is neither a reference config ({names}) nor a diffusers checkpoint folder."
        )
    return {
        p.name[:-5]: json.loads(p.read_text())
        for p in (references / str(source)).iterdir()
        if p.name.endswith(".json") and p.name != "tokenizers.json"
    }


def _abstract(cls, config, dtype):
    """``cls(config)`` with shapes only, every floating weight as ``dtype``."""
    from flax import nnx

    from sdaccel.tpu.models.weights import abstract_model

    graphdef, state = nnx.split(abstract_model(cls, config))
    state = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, state
    )
    return nnx.merge(graphdef, state)


def abstract_pipeline(
    source: str | os.PathLike = DEFAULT_CONFIG,
    dtype=jnp.bfloat16,
    attention: str = "xla",
    mesh=None,
    vae_images_per_step: int | None = None,
):
    """A :class:`sdaccel.tpu.pipeline.JaxPipeline` whose weights are ``jax.ShapeDtypeStruct`` (nothing is
    allocated or downloaded), with attention ``attention`` in the UNet and the VAE (see
    :func:`sdaccel.tpu.models.attention.use`). The VAE is float32 when its config says ``force_upcast``.
    The prompt encoder has no tokenizers: only the denoise-and-decode program can be compiled."""
    from sdaccel.tpu import schedulers, text
    from sdaccel.tpu.models import attention as attn
    from sdaccel.tpu.models.clip import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection
    from sdaccel.tpu.models.unet import UNet2DConditionModel, UNetConfig
    from sdaccel.tpu.models.vae import AutoencoderKL, VAEConfig
    from sdaccel.tpu.pipeline import JaxPipeline

    configs = read_configs(source)
    unet = _abstract(UNet2DConditionModel, UNetConfig.from_dict(configs["unet"]), dtype)
    vae_dtype = jnp.float32 if configs["vae"].get("force_upcast", True) else dtype
    vae = _abstract(AutoencoderKL, VAEConfig.from_dict(configs["vae"]), vae_dtype)
    encoders = []
    for name in ("text_encoder", "text_encoder_2"):
        if name in configs:
            cfg = CLIPTextConfig.from_dict(configs[name])
            encoders.append(
                _abstract(CLIPTextModelWithProjection if cfg.with_projection else CLIPTextModel, cfg, dtype)
            )
    for model in (unet, vae):
        attn.use(model, attention, mesh=mesh)
    vae.decode_images_per_step = vae_images_per_step
    prompt_encoder = text.PromptEncoder([None] * len(encoders), encoders)
    return JaxPipeline(prompt_encoder, unet, vae, schedulers.from_config(configs["scheduler"]))


def _sds(x, sharding=None):
    return jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x), sharding=sharding)


def program_args(
    pipe, mesh, batch: int, height: int, width: int, steps: int, guidance: bool = True, min_shard_size=None
) -> tuple:
    """Abstract global arguments of ``pipe.denoise_and_decode`` on ``mesh``, each carrying its
    ``NamedSharding`` from the rules (weights under ``unet/`` and ``vae/``, inputs batch-first
    over ``"data"``, the scheduler state and guidance scale replicated). ``min_shard_size``
    overrides the rules' smallest weight that the ``"model"`` axis splits."""
    from sdaccel.tpu import sharding
    from sdaccel.tpu.pipeline import Conditioning

    replicated = NamedSharding(mesh, P())

    def placed(tree, prefix):
        extra = {} if min_shard_size is None else {"min_shard_size": min_shard_size}
        return jax.tree.map(_sds, tree, sharding.tree_shardings(tree, mesh, prefix, **extra))

    params = {name: placed(state, name) for name, state in pipe.params.items()}
    state = jax.tree.map(lambda x: _sds(x, replicated), pipe.scheduler.set_timesteps(steps))
    cfg, groups, dtype = pipe.unet_config, 2 if guidance else 1, pipe.dtypes["text"]
    cond = Conditioning(jax.ShapeDtypeStruct((batch, groups, 77, cfg.cross_attention_dim), dtype))
    if pipe.is_sdxl:
        pooled = cfg.projection_class_embeddings_input_dim - 6 * cfg.addition_time_embed_dim
        cond = dataclasses.replace(
            cond,
            text_embeds=jax.ShapeDtypeStruct((batch, groups, pooled), dtype),
            time_ids=jax.ShapeDtypeStruct((batch, groups, 6), jnp.float32),
        )
    cond = placed(cond, "inputs/cond")
    latents = placed(
        jax.ShapeDtypeStruct((batch, *pipe.latent_shape(height, width)), jnp.float32), "inputs/latents"
    )
    return params, state, cond, latents, _sds(np.float32(5.0), replicated)


def unet_call_flops(source, dtype, batch: int, height: int, width: int, guidance: bool = True) -> float:
    """FLOPs of one UNet call at the guidance batch, all chips together, from its CPU lowering with
    XLA attention (nothing is compiled): the math of one sampling step."""
    from flax import nnx

    pipe = abstract_pipeline(source, dtype, "xla")
    _, state, cond, latents, _ = program_args(pipe, _cpu_mesh(), batch, height, width, 1, guidance)
    rows = batch * (2 if guidance else 1)

    def folded(x):
        return None if x is None else jax.ShapeDtypeStruct((rows, *x.shape[2:]), x.dtype)

    def call(params, x, t, context, text_embeds, time_ids):
        return nnx.merge(pipe._unet_graphdef, params)(x, t, context, text_embeds, time_ids)

    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), pipe.params["unet"])
    x = jax.ShapeDtypeStruct((rows, *latents.shape[1:]), jnp.float32)
    t = jax.ShapeDtypeStruct((), state.timesteps.dtype)
    lowered = (
        jax.jit(call)
        .trace(params, x, t, folded(cond.prompt_embeds), folded(cond.text_embeds), folded(cond.time_ids))
        .lower(lowering_platforms=("cpu",))
    )
    return float(lowered.cost_analysis()["flops"])


def _cpu_mesh():
    from sdaccel.tpu import sharding

    return sharding.make_mesh(1, devices=jax.devices("cpu")[:1])


# ----------------------------------------------------------------------------------------------
# One program
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One program to compile: ``batch`` images per ``"data"`` shard."""

    topology: str
    mesh: str  # "auto" (every chip on "data") or "DATAxMODEL"
    attention: str
    batch: int
    height: int
    width: int
    steps: int
    dtype: str = "bfloat16"
    guidance: bool = True
    min_shard_size: int | None = None  # None: the rules' own (sdaccel.tpu.sharding)
    vae_images_per_chip: int | None = None  # None: the VAE decodes the whole batch at once


def mesh_for(topology: str, spec: str):
    """The mesh ``spec`` (``"auto"`` or ``"DATAxMODEL"``) of :func:`sdaccel.tpu.sharding.make_mesh`,
    on the compile-only devices of ``topology``."""
    from sdaccel.tpu import sharding

    devices = tpu_topology.tpu_devices(topology)
    return sharding.make_mesh(*sharding.parse_mesh(spec, len(devices)), devices=devices)


def compile_case(case: Case, source=DEFAULT_CONFIG, unet_flops: dict | None = None) -> tuple[dict, object]:
    """Compile ``case`` and return ``(row, compiled)``: the row is what the table and JSON show.
    ``unet_flops``: a dict that keeps :func:`unet_call_flops` across calls (by source and shape)."""
    from sdaccel.tpu import sharding
    from sdaccel.tpu.models import attention as attn

    # 1. The mesh of compile-only devices, and the abstract pipeline's arguments on it
    topo = tpu_topology.topology(case.topology)
    mesh = mesh_for(case.topology, case.mesh)
    data = sharding.axis_size(mesh, sharding.DATA)
    global_batch = case.batch * data
    dtype = jnp.dtype(case.dtype)
    start = time.perf_counter()
    per_step = None if case.vae_images_per_chip is None else case.vae_images_per_chip * data
    pipe = abstract_pipeline(source, dtype, case.attention, mesh=mesh, vae_images_per_step=per_step)
    args = program_args(
        pipe, mesh, global_batch, case.height, case.width, case.steps, case.guidance, case.min_shard_size
    )
    # 2. Trace. keep_unused: weights the program does not read (the VAE encoder) are on the chip all the same.
    jitted = jax.jit(
        pipe.denoise_and_decode, out_shardings=NamedSharding(mesh, P(sharding.DATA)), keep_unused=True
    )
    with jax.set_mesh(mesh):
        traced = jitted.trace(*args)
    # 3. The FLOPs XLA does not see (splash kernels, the loop's other UNet calls). Everything that
    #    needs no compiled program comes first, so that a mistake costs seconds.
    splash = attn.splash_flops(traced.jaxpr)
    unet_step = _cached_unet_call_flops(case, source, global_batch, {} if unet_flops is None else unet_flops)
    # 4. Lower and compile (or be refused for lack of memory)
    with jax.set_mesh(mesh):
        lowered = traced.lower()
        lowered_at = time.perf_counter()
        compiled, error = _compile_or_refusal(lowered)
    done = time.perf_counter()
    # 5. The row: the case, then the program read (memory beside the text encoders, FLOPs, communication)
    text = "" if compiled is None else compiled.as_text()
    row = {
        **dataclasses.asdict(case),
        "config": str(source),
        "chips": mesh.size,
        "mesh_shape": dict(mesh.shape),
        "global_batch": global_batch,
        "vae_images_per_step": pipe.vae.decode_images_per_step,
        **_memory_fields(topo, pipe, args, compiled, error),
        **_flops_fields(topo, compiled, mesh.size, splash, unet_step, case.steps, global_batch),
        "collectives": tpu_topology.collectives(text),
        "pallas_calls": tpu_topology.pallas_calls(text),
        "attention_in_models": sorted(attn.implementations(pipe.unet) | attn.implementations(pipe.vae)),
        "trace_and_lower_s": lowered_at - start,
        "load_average": os.getloadavg()[0],
        "compile_s": done - lowered_at,
    }
    row["batch_estimate"] = estimate_batch(row)
    return row, compiled


def _cached_unet_call_flops(case: Case, source, global_batch: int, cache: dict) -> float:
    """:func:`unet_call_flops` of ``case`` at ``global_batch``, kept in ``cache`` by source and shape."""
    key = (str(source), case.dtype, global_batch, case.height, case.width, case.guidance)
    if key not in cache:
        dtype = jnp.dtype(case.dtype)
        cache[key] = unet_call_flops(source, dtype, global_batch, case.height, case.width, case.guidance)
    return cache[key]


def _memory_fields(topo, pipe, args, compiled, error: str | None) -> dict:
    """The row's memory per chip: the program's (or, refused, what the arguments and XLA's message
    give) and the text encoders, which live beside it on the first chip (they run before it)."""
    mem = tpu_topology.memory(compiled) if compiled is not None else _refused_memory(args, error)
    text_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(pipe.prompt_encoder.params))
    resident = mem["peak"] + text_bytes
    return {
        "compile_error": error,
        "hbm_bytes": mem,
        "text_encoders_bytes": text_bytes,
        "resident_peak_bytes": resident,
        "hbm_capacity_bytes": topo.hbm_bytes,
        "fits": error is None and resident <= topo.hbm_bytes,
        "spare_bytes": topo.hbm_bytes - resident,
        "fits_with_spare": error is None and topo.hbm_bytes - resident >= SPARE_BYTES,
    }


def _flops_fields(
    topo, compiled, chips: int, splash: float, unet_step: float, steps: int, global_batch: int
) -> dict:
    """The row's FLOPs: XLA's count on every chip plus what it cannot see, per image, and the time
    floor per image on one chip at its peak, with the utilisation each anchor needs."""
    as_counted = None if compiled is None else tpu_topology.flops(compiled)
    total = None if as_counted is None else as_counted * chips + splash + (steps - 1) * unet_step
    per_image = None if total is None else total / global_batch
    floor_s = None if per_image is None else per_image / topo.peak_flops  # per image on one chip
    return {
        "flops": {
            "program_as_counted_per_chip": as_counted,
            "splash_attention_in_program": splash,
            "unet_call": unet_step,
            "total": total,
            "per_image": per_image,
        },
        "peak_flops_per_chip": topo.peak_flops,
        "floor_s_per_image_per_chip": floor_s,
        "utilisation_needed": {
            name: (None if floor_s is None else floor_s / seconds) for name, (seconds, _) in ANCHORS.items()
        },
    }


def _compile_or_refusal(lowered) -> tuple[object | None, str | None]:
    """``(compiled, None)``, or ``(None, the first line of XLA's error)`` when XLA refuses a program
    that cannot fit (``RESOURCE_EXHAUSTED``); any other error is raised."""
    try:
        return lowered.compile(), None
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        return None, str(e).strip().splitlines()[0]


_GB = re.compile(r"temporaries \(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)")


def _refused_memory(args, error: str) -> dict:
    """Per-chip bytes of a program XLA refused to compile for lack of HBM: the arguments from their
    shardings, the temporaries from the compiler's message (code and outputs unknown)."""
    argument = sum(
        math.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(args)
    )
    found = _GB.search(error)
    temp = int(float(found.group(1)) * GiB) if found else 0
    return {
        "argument": argument,
        "output": None,
        "alias": None,
        "temp": temp,
        "code": None,
        "peak": argument + temp,
    }


def estimate_batch(row: dict) -> int:
    """Largest batch per chip that fits with :data:`SPARE_BYTES` free, if the temporaries grow in
    proportion to the batch and everything else stays (a lower bound: part of the temporaries
    does not grow). Exact answers come from ``--search``."""
    mem, batch = row["hbm_bytes"], row["batch"]
    fixed = row["resident_peak_bytes"] - mem["temp"]
    per_image = max(mem["temp"] / batch, 1)
    return max(int((row["hbm_capacity_bytes"] - SPARE_BYTES - fixed) // per_image), 0)


def search_batch(case: Case, source=DEFAULT_CONFIG, limit: int = 64, log=print) -> tuple[int, list[dict]]:
    """Largest batch per ``"data"`` shard whose program fits its chip with :data:`SPARE_BYTES`
    free, by compiling: double from ``case.batch`` while it fits, then bisect. Returns
    ``(batch or 0, rows compiled)``."""
    rows, flops_cache = [], {}

    def fits(batch: int) -> bool:
        row, _ = compile_case(dataclasses.replace(case, batch=batch), source, flops_cache)
        rows.append(row)
        peak = row["resident_peak_bytes"] / GiB
        log(
            f"  search: batch {batch}: resident peak {peak:.2f} GiB, fits with spare: {row['fits_with_spare']}"
        )
        return row["fits_with_spare"]

    return largest_fitting(fits, case.batch, limit), rows


def largest_fitting(fits, start: int, limit: int) -> int:
    """The largest ``b <= limit`` with ``fits(b)`` (0 if none), for a ``fits`` that holds up to some
    batch and not beyond: double from ``start`` while it fits, then bisect. Each batch is asked once."""
    seen: dict[int, bool] = {}

    def ask(b: int) -> bool:
        if b not in seen:
            seen[b] = bool(fits(b))
        return seen[b]

    low, high = 0, max(start, 1)
    while high <= limit and ask(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if ask(mid) else (low, mid)
    return low
