"""The TPU plan: compile the real SDXL programs for Cloud TPU slices here, with no TPU and no
weights, and read off whether they fit, what they cost and how they communicate.

    python -m sdaccel.tpu.plan                                     # notebook 01's default on v5e-1
    python -m sdaccel.tpu.plan --topology v5e-4 --mesh auto 2x2 --batch 1 2
    python -m sdaccel.tpu.plan --config build/checkpoints/tiny-sdxl --height 256 --width 256  # seconds

For each (topology, mesh, attention, batch) it builds the pipeline from the model configs
(``src/sdaccel/reference_configs/sdxl-base-1.0`` by default, or any diffusers checkpoint folder)
with abstract weights, lays it on a mesh of compile-only TPU devices with the real sharding rules
(:mod:`sdaccel.tpu.sharding`), compiles :meth:`sdaccel.tpu.pipeline.JaxPipeline.denoise_and_decode` (the whole
denoising loop and the VAE decode: one program) and reports per chip:

* HBM: arguments (weights and inputs), temporaries, generated code and their peak, against the
  chip's capacity, with ``fits`` and the room left;
* FLOPs per image: XLA's count of the compiled program, corrected for what it cannot see. XLA
  counts the body of the sampling loop once, so ``steps - 1`` UNet calls are added (one UNet call
  counted on its CPU lowering with XLA attention); it sees a Pallas kernel as an opaque call, so
  the splash-attention FLOPs are added analytically (:func:`sdaccel.tpu.models.attention.splash_flops`);
* the time floor at the chip's peak and the utilisation each anchor would need;
* the collectives by kind and the Pallas kernel calls in the optimised HLO, and compile time;
* with ``--search``, the largest batch per chip that fits, by compiling (doubling, then bisection).

Batches are per ``"data"`` shard (per chip on a data-only mesh). The command prints a table and
writes JSON (and a Markdown table) atomically; nothing is written when an argument is wrong.
Real-size programs take minutes each to compile (about 12 on one core): it is a benchmark, not a test.
So no finished compile is thrown away: each row is saved beside ``--out`` as soon as it is made, a
killed or interrupted run leaves ``--out`` as it was, and the next run reuses the rows it finished
and those ``--out`` holds under the same key (:func:`plan_key`); a plan file it cannot trust
(cut short, of another layout, JAX or libtpu) is compiled again, and it says so. Two runs of one
``--out`` take turns.

From the recorded plans, :func:`unet_row_flops` reads one UNet call's FLOPs per latent and
:func:`tpu_floor` makes the time floor of a whole image (``benchmarks/bench_whole_image.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.core.faults import fault_point
from sdaccel.core.staging import clear_leftovers, writer_lock
from sdaccel.core.tables import markdown_table
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
    from sdaccel.core.checkpoint import read_config

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
    key = (str(source), case.dtype, global_batch, case.height, case.width, case.guidance)
    cache = {} if unet_flops is None else unet_flops
    if key not in cache:
        cache[key] = unet_call_flops(source, dtype, global_batch, case.height, case.width, case.guidance)
    unet_step = cache[key]
    # 4. Lower and compile (or be refused for lack of memory)
    with jax.set_mesh(mesh):
        lowered = traced.lower()
        lowered_at = time.perf_counter()
        compiled, error = _compile_or_refusal(lowered)
    done = time.perf_counter()
    # 5. Read the program: memory beside the text encoders, FLOPs, communication
    text = "" if compiled is None else compiled.as_text()
    mem = tpu_topology.memory(compiled) if compiled is not None else _refused_memory(args, error)
    # The text encoders live beside the program on the first chip (they run before it).
    text_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(pipe.prompt_encoder.params))
    resident = mem["peak"] + text_bytes
    as_counted = None if compiled is None else tpu_topology.flops(compiled)
    total = None if as_counted is None else as_counted * mesh.size + splash + (case.steps - 1) * unet_step
    per_image = None if total is None else total / global_batch
    floor_s = None if per_image is None else per_image / topo.peak_flops  # per image on one chip
    # 6. The row
    row = {
        **dataclasses.asdict(case),
        "config": str(source),
        "chips": mesh.size,
        "mesh_shape": dict(mesh.shape),
        "global_batch": global_batch,
        "vae_images_per_step": pipe.vae.decode_images_per_step,
        "compile_error": error,
        "hbm_bytes": mem,
        "text_encoders_bytes": text_bytes,
        "resident_peak_bytes": resident,
        "hbm_capacity_bytes": topo.hbm_bytes,
        "fits": error is None and resident <= topo.hbm_bytes,
        "spare_bytes": topo.hbm_bytes - resident,
        "fits_with_spare": error is None and topo.hbm_bytes - resident >= SPARE_BYTES,
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
        "collectives": tpu_topology.collectives(text),
        "pallas_calls": tpu_topology.pallas_calls(text),
        "attention_in_models": sorted(attn.implementations(pipe.unet) | attn.implementations(pipe.vae)),
        "trace_and_lower_s": lowered_at - start,
        "load_average": os.getloadavg()[0],
        "compile_s": done - lowered_at,
    }
    row["batch_estimate"] = estimate_batch(row)
    return row, compiled


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


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------

COLUMNS = (
    "topology",
    "mesh",
    "attention",
    "batch/chip",
    "VAE images/step",
    "args GiB",
    "temp GiB",
    "code GiB",
    "peak GiB",
    "resident GiB",
    "HBM GiB",
    "fits",
    "spare GiB",
    "est. max batch",
    "TFLOP/image",
    "floor s/image",
    "util. for goal",
    "util. for MLPerf",
    "collectives",
    "Pallas calls",
    "compile s",
)


def table_row(row: dict) -> list[str]:
    mem = row["hbm_bytes"]
    per_image, floor = row["flops"]["per_image"], row["floor_s_per_image_per_chip"]
    need = row["utilisation_needed"]

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}%"

    refused = bool(row["compile_error"])  # no compiled program: nothing to count in it
    coll = "-" if refused else ", ".join(f"{k} {v}" for k, v in sorted(row["collectives"].items())) or "none"
    mesh = "x".join(str(v) for v in row["mesh_shape"].values())
    return [
        row["topology"],
        mesh,
        row["attention"],
        str(row["batch"]),
        "all" if row["vae_images_per_step"] is None else str(row["vae_images_per_step"]),
        f"{mem['argument'] / GiB:.2f}",
        f"{mem['temp'] / GiB:.2f}",
        "-" if mem["code"] is None else f"{mem['code'] / GiB:.3f}",
        f"{mem['peak'] / GiB:.2f}",
        f"{row['resident_peak_bytes'] / GiB:.2f}",
        f"{row['hbm_capacity_bytes'] / GiB:.0f}",
        "yes" if row["fits"] else ("NO (refused)" if refused else "NO"),
        f"{row['spare_bytes'] / GiB:.2f}",
        str(row["batch_estimate"]),
        "-" if per_image is None else f"{per_image / 1e12:.1f}",
        "-" if floor is None else f"{floor:.2f}",
        pct(need["goal"]),
        pct(need["mlperf_v41_v5e4"]),
        coll,
        "-" if refused else str(row["pallas_calls"]),
        f"{row['compile_s']:.0f}",
    ]


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# TPU plan",
        "",
        f"Made with `{command}` (compile-only TPU devices, abstract weights). Per chip; batch per "
        "chip on the `data` axis; TFLOP per image corrected for the loop trip count and the splash "
        f"kernels; floor at the chip's peak; resident = the program's peak + the text encoders; "
        f"`fits` = resident <= HBM; spare target {SPARE_BYTES / GiB:.0f} GiB.",
        "",
        markdown_table(COLUMNS, [table_row(r) for r in rows]),
    ]
    lines += [
        "",
        "Anchors (s per image per chip): " + "; ".join(f"{v[1]}: {v[0]:.2f}" for v in ANCHORS.values()),
    ]
    return "\n".join(lines) + "\n"


def print_table(rows: list[dict], file=sys.stdout) -> None:
    cells = [list(COLUMNS)] + [table_row(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for line in cells:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)), file=file)


def environment() -> dict:
    from importlib.metadata import version

    return {"jax": jax.__version__, "jaxlib": version("jaxlib"), "libtpu": version("libtpu")}


# ----------------------------------------------------------------------------------------------
# Plan files: written whole, read back only when they can be trusted
# ----------------------------------------------------------------------------------------------

#: The layout of a plan file. A file of another layout is not reused: its cases are compiled again.
PLAN_SCHEMA = 2


class PlanFileError(ValueError):
    """A plan file that cannot be read: not whole JSON, or not a plan of this package."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(
            f"{path} {reason}: make it again with python -m sdaccel.tpu.plan (the command that made "
            f"it, with --out {path}), or leave it out."
        )


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``path`` through a hidden temporary file beside it (``.NAME.<random>.partial``) and a
    rename: a reader finds the old file or the new one, never a part. The temporary file goes when
    the write fails; one that a killed process left is removed by the next writer of ``path``
    (:func:`partial_patterns`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        fault_point("plan.partial-written")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def partial_patterns(*paths: str | os.PathLike) -> tuple[str, ...]:
    """Glob patterns of the temporary files that writes of ``paths`` leave when killed (for
    :func:`sdaccel.core.staging.clear_leftovers`), older versions' ``NAME.partial`` included."""
    names = [Path(p).name for p in paths]
    return tuple(pattern for name in names for pattern in (f".{name}.*.partial", f"{name}.partial"))


def plan_document(rows: list[dict], command: str) -> dict:
    """What a plan file holds: the rows, the command that made them, the layout and the versions."""
    return {
        "schema": PLAN_SCHEMA,
        "command": command,
        "environment": environment(),
        "anchors": ANCHORS,
        "spare_bytes": SPARE_BYTES,
        "rows": rows,
    }


def as_stored(row: dict) -> dict:
    """``row`` as a plan file gives it back (JSON types), so that a fresh row and a reused one are equal."""
    return json.loads(json.dumps(row, default=str))


def load_plan(path: str | os.PathLike) -> dict:
    """The plan file ``path``, or :class:`PlanFileError` naming it, what is wrong and the fix when
    it is not whole JSON or holds no list of rows."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise PlanFileError(
            path, f"is not whole JSON ({err.msg} at line {err.lineno}): a write of it stopped part-way"
        ) from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if isinstance(data, dict) and rows is None and "topology" in data:
        raise PlanFileError(path, "is of an earlier layout: one bare row, with no versions or key")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise PlanFileError(path, "is not a TPU plan of this package: it holds no list of rows")
    return data


def _versions(env) -> str:
    if not isinstance(env, dict):
        return "unrecorded versions of JAX and libtpu"
    return ", ".join(f"{name} {value}" for name, value in sorted(env.items()))


def reusable_rows(path: str | os.PathLike, want: str | None = None) -> dict[str, dict]:
    """The rows of the plan file ``path`` that may stand for a compile, by :func:`plan_key`.

    None when the file is missing, or when it cannot be trusted: not whole JSON, another layout
    than :data:`PLAN_SCHEMA`, made with another JAX or libtpu, or (``want``: the one key the
    caller needs) without that key. Then one line on stderr names the file and says why its cases
    are compiled again."""
    path = Path(path)
    if not path.is_file():
        return {}
    # 1. Whole, of this layout and these versions
    why, rows = None, {}
    try:
        data = load_plan(path)
    except PlanFileError as err:
        why = err.reason
    else:
        if data.get("schema") != PLAN_SCHEMA:
            why = f"is of another layout (schema {data.get('schema')}; this sdaccel reads {PLAN_SCHEMA})"
        elif data.get("environment") != environment():
            why = f"was made with {_versions(data.get('environment'))}, not {_versions(environment())}"
        else:
            rows = {r["plan_key"]: r for r in data["rows"] if isinstance(r.get("plan_key"), str)}
    # 2. Of the case asked for
    if why is None and want is not None and want not in rows:
        why = f"holds the plan of another case ({', '.join(rows) or 'no key'}), not of {want}"
    if why is not None:
        print(
            f"Not reusing {path}, which {why}; its cases are compiled again and the file is replaced.",
            file=sys.stderr,
        )
        return {}
    return rows


def journal_path(out: str | os.PathLike) -> Path:
    """Where a run of ``--out`` keeps each finished row until it publishes them: ``.NAME.rows``."""
    out = Path(out)
    return out.with_name(f".{out.name}.rows")


def save_row(journal: Path, row: dict) -> None:
    """Add ``row`` to ``journal`` (one JSON line, on disk before this returns)."""
    with open(journal, "a") as handle:
        handle.write(json.dumps(row, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def saved_rows(journal: Path) -> dict[str, dict]:
    """The rows of ``journal`` by :func:`plan_key`; a line cut short by a kill is skipped."""
    if not journal.is_file():
        return {}
    rows = {}
    for line in journal.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("plan_key"), str):
            rows[row["plan_key"]] = row
    return rows


# ----------------------------------------------------------------------------------------------
# The plan beside a measurement (notebooks 01-03)
# ----------------------------------------------------------------------------------------------

#: Hub ids whose configs ship in ``sdaccel/reference_configs``: they are planned with no download.
REFERENCE_IDS = {"stabilityai/stable-diffusion-xl-base-1.0": DEFAULT_CONFIG}

#: The utilisation the HF blog's v5e-4 run reached by the plan's own floor (1.43 s of its 2.33 s
#: per image per chip): what a well-tuned JAX SDXL gets out of a v5e.
PUBLISHED_UTILISATION = 0.61


def config_source(model: str | os.PathLike) -> str:
    """What :func:`read_configs` plans for a notebook's ``MODEL_ID``: a local diffusers folder or a
    reference config name as it is, a reference config for the hub ids in :data:`REFERENCE_IDS`,
    else the hub repository's JSON configs alone (kilobytes; no weights)."""
    if Path(model).is_dir():
        return str(model)
    if str(model) in REFERENCE_IDS:
        return REFERENCE_IDS[str(model)]
    if str(model) == "tiny" or (resources.files("sdaccel") / "reference_configs" / str(model)).is_dir():
        return str(model)  # a reference config name (or --config tiny's)
    from huggingface_hub import snapshot_download

    return snapshot_download(
        str(model), allow_patterns=["model_index.json", "*/config.json", "*/*_config.json"]
    )


def predict(
    model: str | os.PathLike,
    topology: str = "v5e-1",
    batch: int = 1,
    height: int = 1024,
    width: int = 1024,
    steps: int = 20,
    guidance: bool = True,
    dtype: str = "bfloat16",
    attention: str = "splash",
    mesh: str = "auto",
    vae_images_per_chip: int | None = 1,
    cache_dir: str | os.PathLike | None = None,
) -> dict:
    """The plan's row for ``model``'s denoise-and-decode program with ``batch`` images per chip,
    compiled for the compile-only devices of ``topology`` (no TPU needed; it needs libtpu, and
    raises :class:`sdaccel.tpu.topology.CompilerMissing` naming the install without it). The
    defaults are the pipelines' own on a TPU: splash attention, one image per VAE decode step.
    With ``cache_dir``, a plan is kept there (:func:`plan_key`) and read back, with ``"cached"``
    set, instead of compiled again; a kept plan that cannot be trusted (:func:`reusable_rows`) is
    compiled again and replaced. Two processes asking for one plan at once take turns
    (:func:`sdaccel.core.staging.writer_lock`): the second reads back the first one's."""
    if batch < 1 or steps < 1:
        raise ValueError(f"batch and steps must be positive, got batch={batch}, steps={steps}.")
    tpu_topology.topology(topology)  # raises with the choices
    vae = None if vae_images_per_chip is None else math.gcd(vae_images_per_chip, batch)
    case = Case(
        topology, mesh, attention, batch, height, width, steps, dtype, guidance, vae_images_per_chip=vae
    )
    source = config_source(model)
    if cache_dir is None:
        return as_stored(compile_case(case, source)[0])
    key = plan_key(case, source)
    path = Path(cache_dir) / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(path):
        clear_leftovers(path, partial_patterns(path))
        kept = reusable_rows(path, want=key).get(key)
        if kept is not None:
            return {**kept, "cached": True}
        row = as_stored({**compile_case(case, source)[0], "plan_key": key})
        fault_point("plan.case-compiled")
        write_atomic(path, json.dumps(plan_document([row], f"sdaccel.tpu.plan.predict: {case}"), indent=1))
    return row


#: The code a compiled plan depends on, beside the configs, the case and the compiler versions.
_PLAN_CODE = (
    "plan.py",
    "topology.py",
    "pipeline.py",
    "sharding.py",
    "schedulers.py",
    "text.py",
    "models",
)


def plan_key(case: Case, source: str | os.PathLike) -> str:
    """A name for the plan of ``case`` on ``source``: a hash of the case, the model configs, the
    JAX and libtpu versions and this package's model and pipeline code. Another of any of them
    is another key, so a cached plan is never stale."""
    import hashlib

    package = Path(__file__).parent
    files = sorted(
        f
        for name in _PLAN_CODE
        for f in ([package / name] if name.endswith(".py") else (package / name).rglob("*.py"))
    )
    digest = hashlib.sha256()
    for part in (dataclasses.asdict(case), read_configs(source), environment()):
        digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    for f in files:
        digest.update(f.read_bytes())
    return f"{case.topology}-b{case.batch}-{digest.hexdigest()[:20]}"


def measurement(
    run_s: float, images: int, chips: int, compile_s: float | None = None, flops_per_image=None
) -> dict:
    """What a notebook measured, in the plan's units: seconds per image per chip, and on a TPU the
    peak HBM the first chip has seen (``memory_stats``). ``platform`` says where it ran."""
    platform = jax.default_backend()
    stats = (jax.devices()[0].memory_stats() or {}) if platform == "tpu" else {}
    return {
        "platform": platform,
        "s_per_image_per_chip": run_s * chips / images,
        "peak_hbm_bytes": stats.get("peak_bytes_in_use"),
        "compile_s": compile_s,
        "flops_per_image": flops_per_image,
    }


def summary(row: dict) -> dict:
    """The plan's figures that a notebook keeps in its ``results.json``."""
    return {
        "topology": row["topology"],
        "batch_per_chip": row["batch"],
        "config": row["config"],
        "compile_error": row["compile_error"],
        "resident_peak_bytes": row["resident_peak_bytes"],
        "hbm_capacity_bytes": row["hbm_capacity_bytes"],
        "fits": row["fits"],
        "spare_bytes": row["spare_bytes"],
        "batch_estimate": row["batch_estimate"],
        "flops_per_image": row["flops"]["per_image"],
        "floor_s_per_image_per_chip": row["floor_s_per_image_per_chip"],
        "collectives": row["collectives"],
        "pallas_calls": row["pallas_calls"],
        "compile_s": row["compile_s"],
    }


def _bytes(n) -> str:
    return "-" if n is None else (f"{n / GiB:.2f} GiB" if n >= GiB / 10 else f"{n / 2**20:.1f} MiB")


def _flops(n) -> str:
    return "-" if not n else (f"{n / 1e12:.1f} TFLOP" if n >= 1e11 else f"{n / 1e9:.3g} GFLOP")


def _seconds(s) -> str:
    return "-" if s is None else (f"{s:.2f} s" if s >= 0.1 else f"{s * 1e3:.3g} ms")


def beside(row: dict, measured: dict | None = None) -> str:
    """A Markdown table: the plan's prediction for one program next to what was measured. Times
    and memory compare only on a TPU; elsewhere that column says so. FLOPs are the model's
    arithmetic and compare anywhere."""
    on_tpu = measured is not None and measured["platform"] == "tpu"
    topo, mem = row["topology"], row["hbm_bytes"]
    floor = row["floor_s_per_image_per_chip"]
    model = Path(str(row["config"])).name
    where = "no measurement" if measured is None else f"measured ({measured['platform']})"
    off = "" if measured is None else f"- ({measured['platform']}: not a TPU measurement)"
    if row["compile_error"]:
        fit = f"does NOT fit: XLA refused it ({row['compile_error'][:80]})"
    else:
        room = "fits" if row["fits"] else "does NOT fit"
        fit = (
            f"{_bytes(row['resident_peak_bytes'])} of {_bytes(row['hbm_capacity_bytes'])}: {room}, "
            f"{_bytes(row['spare_bytes'])} spare"
        )
    coll = ", ".join(f"{k} {v}" for k, v in sorted(row["collectives"].items())) or "none"
    measured_flops = _flops(measured.get("flops_per_image")) if measured else ""
    measured_compile = measured.get("compile_s") if on_tpu else None
    rows = [
        (f"{model}, {row['batch']} image(s) per chip", f"predicted for {topo} (compiled here)", where),
        ("HBM per chip: weights and inputs", _bytes(mem["argument"]), ""),
        ("HBM per chip: temporaries", _bytes(mem["temp"]), ""),
        (
            "HBM per chip: peak with the text encoders",
            fit,
            _bytes(measured["peak_hbm_bytes"]) if on_tpu else off,
        ),
        ("largest batch per chip (estimate)", str(row["batch_estimate"]), ""),
        (
            "FLOPs per image",
            _flops(row["flops"]["per_image"]),
            measured_flops if measured_flops != "-" else "",
        ),
        ("time per image per chip at 100% of peak", _seconds(floor), ""),
        (
            f"time per image per chip at {PUBLISHED_UTILISATION:.0%} of peak",
            _seconds(None if floor is None else floor / PUBLISHED_UTILISATION),
            _seconds(measured["s_per_image_per_chip"]) if on_tpu else off,
        ),
        ("collectives; Pallas kernel calls", f"{coll}; {row['pallas_calls']}", ""),
        (
            "compile time",
            f"{row['compile_s']:.1f} s (for {topo}, on the CPU here"
            + ("; read back from the plan cache)" if row.get("cached") else ")"),
            _seconds(measured_compile) if measured_compile is not None else "",
        ),
    ]
    return markdown_table(rows[0], rows[1:]) + "\n"


# ----------------------------------------------------------------------------------------------
# The TPU floor of one image, from the FLOPs that plans recorded
# ----------------------------------------------------------------------------------------------


def unet_row_flops(plan_files: Iterable[str | os.PathLike], rel_tol: float = 1e-6) -> dict:
    """FLOPs of one UNet call on one latent (batch 1, no guidance) at the plans' size, from the
    ``flops.unet_call`` of each row of plan JSON files (``python -m sdaccel.tpu.plan``): XLA's cost
    analysis of one UNet call at ``global_batch`` images, doubled with guidance. Every row must give the same figure
    per latent (the UNet's FLOPs grow linearly with the batch), else this raises. A file that is
    not a whole plan raises :class:`PlanFileError`, naming it and the fix. Plans of earlier
    layouts and versions count: the agreement of their figures is the check.

    Returns ``{"flops": ..., "height": ..., "width": ..., "dtype": ..., "sources": [...]}``."""
    found = []
    for path in plan_files:
        data = load_plan(path)
        for number, row in enumerate(data["rows"], 1):
            call = (row.get("flops") or {}).get("unet_call")
            if not call:
                continue
            for key in ("global_batch", "guidance", "height", "width", "dtype"):
                if key not in row:
                    raise PlanFileError(
                        path, f"is not a TPU plan of this package: row {number} lacks {key!r}"
                    )
            latents = row["global_batch"] * (2 if row["guidance"] else 1)
            found.append(
                {
                    "file": str(path),
                    "unet_call": call,
                    "latents": latents,
                    "per_latent": call / latents,
                    "size": (row["height"], row["width"]),
                    "dtype": row["dtype"],
                }
            )
    if not found:
        raise ValueError("no row of the plan files records flops.unet_call")
    first = found[0]
    for other in found[1:]:
        if other["size"] != first["size"]:
            raise ValueError(f"plans of different sizes: {first['size']} and {other['size']}")
        if abs(other["per_latent"] - first["per_latent"]) > rel_tol * first["per_latent"]:
            raise ValueError(
                f"UNet FLOPs per latent disagree: {first['per_latent']:.6g} ({first['file']}) and "
                f"{other['per_latent']:.6g} ({other['file']})"
            )
    height, width = first["size"]
    return {
        "flops": first["per_latent"],
        "height": height,
        "width": width,
        "dtype": first["dtype"],
        "sources": [{k: f[k] for k in ("file", "unet_call", "latents")} for f in found],
    }


def tpu_floor(
    unet_flops: float,
    steps: int,
    guidance: bool,
    decode_flops: float | None,
    peak_flops: float,
    encode_flops: float = 0.0,
) -> dict:
    """FLOPs of one image and its time floor at ``peak_flops``: ``steps`` UNet calls on one
    latent (two with ``guidance``), plus the VAE decode and the text encoders when known."""
    if steps < 1 or peak_flops <= 0:
        raise ValueError(f"need steps >= 1 and a positive peak, got {steps=}, {peak_flops=}.")
    unet = steps * (2 if guidance else 1) * unet_flops
    total = unet + (decode_flops or 0.0) + encode_flops
    return {
        "unet_flops": unet,
        "decode_flops": decode_flops,
        "encode_flops": encode_flops,
        "flops": total,
        "floor_s": total / peak_flops,
        "unet_floor_s": unet / peak_flops,
        "peak_flops": peak_flops,
    }


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sdaccel.tpu.plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--topology", nargs="+", default=["v5e-1"], help=f"of {sorted(tpu_topology.TOPOLOGIES)}"
    )
    parser.add_argument(
        "--mesh", nargs="+", default=["auto"], help="'auto' (all chips on data) or DATAxMODEL"
    )
    parser.add_argument("--attention", nargs="+", default=["splash", "xla"], choices=["splash", "xla"])
    parser.add_argument("--batch", nargs="+", type=int, default=[4], help="images per data shard (chip)")
    parser.add_argument("--height", type=int, default=1024)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--vae-images-per-chip",
        nargs="+",
        default=["1"],
        help="images each chip's VAE decodes at a time (default 1, as the pipelines do; 'all': the whole batch at once)",
    )
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--no-guidance", action="store_true", help="compile without classifier-free guidance")
    parser.add_argument(
        "--config", default=DEFAULT_CONFIG, help="reference config name or a diffusers checkpoint folder"
    )
    parser.add_argument(
        "--search", action="store_true", help="also find the largest batch that fits, by compiling"
    )
    parser.add_argument("--search-limit", type=int, default=64)
    parser.add_argument(
        "--recompile",
        action="store_true",
        help="compile every case, also those whose rows --out (or an interrupted run of it) already holds",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tpu_plan.json"))
    args = parser.parse_args(argv)
    for name in args.topology:
        tpu_topology.topology(name)  # raises with the choices
    if any(b < 1 for b in args.batch) or args.steps < 1:
        parser.error("--batch and --steps must be positive")
    for vae in args.vae_images_per_chip:
        if vae != "all" and not (
            vae.isdigit() and int(vae) >= 1 and all(b % int(vae) == 0 for b in args.batch)
        ):
            parser.error(
                f"--vae-images-per-chip {vae!r}: 'all' or a positive number that divides every --batch"
            )
    if args.out.suffix != ".json":
        parser.error(f"--out must end in .json (the Markdown table goes beside it), not {args.out}")
    read_configs(args.config)  # a wrong --config fails here, before anything is compiled
    return args


def cases(args) -> list[Case]:
    from sdaccel.tpu import sharding

    out = []
    for topo in args.topology:
        chips = tpu_topology.topology(topo).chips
        for spec in args.mesh:
            data, model = sharding.parse_mesh(spec, chips)
            if data * model > chips:
                raise SystemExit(f"Mesh {spec} needs {data * model} chips; {topo} has {chips}.")
            for attention in args.attention:
                for batch, vae in itertools.product(args.batch, args.vae_images_per_chip):
                    out.append(
                        Case(
                            topo,
                            spec,
                            attention,
                            batch,
                            args.height,
                            args.width,
                            args.steps,
                            args.dtype,
                            not args.no_guidance,
                            vae_images_per_chip=None if vae == "all" else int(vae),
                        )
                    )
    return out


def finished_rows(args, keys: list[str]) -> dict[str, dict]:
    """The rows of this run's cases (``keys``) that need no compile: those ``--out`` holds, and
    those an interrupted run of it saved (:func:`journal_path`); says on stderr what it reuses."""
    out, journal = args.out, journal_path(args.out)
    if args.recompile:
        journal.unlink(missing_ok=True)
        return {}
    published = {k: r for k, r in reusable_rows(out).items() if k in keys}
    saved = {k: r for k, r in saved_rows(journal).items() if k in keys}
    if args.search:  # a row made without the same search does not answer it
        published, saved = (
            {k: r for k, r in rows.items() if r.get("search_limit") == args.search_limit}
            for rows in (published, saved)
        )
    if published:
        print(
            f"Reusing {len(published)} row(s) of {out}: the same cases, configs, JAX, libtpu and code "
            "(--recompile compiles them again).",
            file=sys.stderr,
        )
    if saved:
        print(
            f"Reusing {len(saved)} finished row(s) of an interrupted run ({journal.name}): only the other "
            "cases are compiled.",
            file=sys.stderr,
        )
    return {**published, **saved}


def plan_row(case: Case, key: str, args, flops_cache: dict) -> dict:
    """Compile ``case`` (and search its largest batch with ``--search``), then save its row in the
    run's journal at once, so that an interrupted run loses at most the case it was compiling."""
    print(f"compiling {case} ...", flush=True)
    row, _ = compile_case(case, args.config, flops_cache)
    if args.search:
        row["max_batch_searched"], searched = search_batch(case, args.config, args.search_limit)
        row["search"] = [{"batch": r["batch"], "peak": r["hbm_bytes"]["peak"]} for r in searched]
        row["search_limit"] = args.search_limit
    row = as_stored({**row, "plan_key": key})
    fault_point("plan.case-compiled")
    save_row(journal_path(args.out), row)
    fault_point("plan.row-saved")
    print_table([row])
    return row


def main(argv=None) -> list[dict]:
    """``python -m sdaccel.tpu.plan``: plan every case, print the table, write ``--out`` and its
    Markdown table; return the rows.

    A case whose row ``--out`` already holds under the same :func:`plan_key` is not compiled again
    (``--recompile`` does), nor one that an interrupted run of ``--out`` finished: each row is
    saved in ``.NAME.rows`` beside it as soon as it is made, until the files are published. The
    run holds :func:`sdaccel.core.staging.writer_lock` on ``--out``: a second run of the same file
    waits, then reuses the first one's rows. Killed or interrupted at any point, ``--out`` is the
    old file or the new one, never a part."""
    if not os.environ.get("JAX_PLATFORMS"):  # compile for TPU, run nothing: the CPU stays the default
        jax.config.update("jax_platforms", "cpu")
    # 1. The arguments: nothing is written when one is wrong
    args = parse_args(argv)
    command = "python -m sdaccel.tpu.plan " + " ".join(sys.argv[1:] if argv is None else argv)
    out, table, journal = args.out, args.out.with_suffix(".md"), journal_path(args.out)
    planned = [(case, plan_key(case, args.config)) for case in cases(args)]
    out.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(out):
        try:
            # 2. What earlier runs left: unfinished files go, finished rows stay for reuse
            clear_leftovers(out, partial_patterns(out, table))
            done = finished_rows(args, [key for _, key in planned])
            # 3. Each case: its finished row, or compiled now and saved at once
            flops_cache: dict = {}
            rows = [
                done[key] if key in done else plan_row(case, key, args, flops_cache) for case, key in planned
            ]
            # 4. Publish: the table, then the plan (the run's last word); then the saved rows go
            fault_point("plan.before-publish")
            print()
            print_table(rows)
            write_atomic(table, markdown(rows, command))
            write_atomic(out, json.dumps(plan_document(rows, command), indent=1, default=str) + "\n")
        except KeyboardInterrupt:
            kept = len(saved_rows(journal))
            print(
                f"Interrupted: {out} is as it was. {kept} finished row(s) are kept in {journal}: "
                "the same command reuses them.",
                file=sys.stderr,
            )
            raise
        journal.unlink(missing_ok=True)
    print(f"wrote {out} and {table}")
    return rows


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
