"""Whole-image time, prompt to PIL image, of every CPU configuration beside PyTorch fp32, in one run.

    python benchmarks/bench_whole_image.py sd15 --reuse --out benchmarks/results/whole_image_sd15.json
    python benchmarks/bench_whole_image.py sd15 --quick          # a short self-check on a tiny model
    python benchmarks/bench_whole_image.py sd15 --rows torch_fp32_20 ov_float_20 --runs 3
    python benchmarks/bench_whole_image.py sdxl --quick --compose   # the SDXL paths on a tiny SDXL
    python benchmarks/bench_whole_image.py sdxl --compose --tpu --runs 1 --warmup-steps 1 \\
        --out benchmarks/results/whole_image_sdxl.json

The model is a *real architecture with random weights* (``sd15``: SD 1.5 at 512x512; ``sdxl``:
SDXL base at 1024x1024, both text encoders, weights stored fp16 on disk and upcast on load; built
by ``sdaccel.tools.toys.random_checkpoints.build_random_checkpoint``): time depends on the shapes, not on the values. One
image (one prompt) per call. Each row is one configuration, loaded and run in its own child
process (``sdaccel.core.processes``), one after the other; in it, one untimed warm-up call, then
``--runs`` timed calls (:func:`sdaccel.course.whole_image.time_calls`); the row keeps the median:

====================== ============================================================================
row                    what runs
====================== ============================================================================
``torch_fp32_20``      diffusers' own pipeline in PyTorch f32, 20 steps, default guidance (CFG: the
                       UNet sees a batch of 2); the baseline of every ratio
``ov_float_20``        ``OVPipeline`` in the precision ``sdaccel.cpu.precision`` measures fastest
``ov_<variant>_20``    the same with the UNet quantized: ``int8_weights``, ``hybrid``, ``full_int8``,
                       ``full_int8_float_resnets`` (full INT8, the ResNets kept in float);
                       ``full_int8_accuracy_control`` and ``full_int8_sensitive_4`` (SD 1.5 only):
                       full INT8 with the layers the SD 1.5-layout toy's accuracy control gave back
                       to float, or its 4 most sensitive groups, in float (the toy's recipes
                       replayed, ``sdaccel.toy.replayed_recipes``; ``--accuracy-control-json``
                       names the search; their picture is the toy's)
``ov_stack_20``        the levers stacked that keep the toy's picture (``sdaccel.toy.stack_quality``,
                       whose recipe it imports): the pipeline compiled static, and every step run by
                       DeepCache at ``--stack-interval`` (3) from its two UNets, both quantized full
                       INT8 with the ResNets in float; always run whole, never composed
``ov_stack_layer_20``  the same with DeepCache cut at the last up block's last layer (the DeepCache
                       paper's default branch, ``cut="layer"``), at ``--stack-layer-interval`` (2);
                       only its full UNet is quantized (the shallow one is one layer, kept in float)
``lcm4_lora_int8``     4 steps, LCM scheduler, an LCM-LoRA-shaped adapter (random, rank 64, every
                       UNet layer LCM-LoRA adapts) fused at export, guidance off (UNet batch 1), the
                       fused f32 UNet quantized with ``--lcm-variant``; the export's VAE decoder.
                       Each further ``--lcm-variant`` adds the rows ``lcm4_lora_<variant>`` and
                       ``lcm4_lora_<variant>_taesd`` (``--lcm-variant int8_weights full_int8``)
`` lcm4_lora_int8_taesd`` the same with a tiny autoencoder (TAESD layout, random; TAESDXL for SDXL:
                       the same layout) as decoder
``lcm4_lora_int8_static`` the two rows above with the pipeline compiled static for one image
``..._static_taesd``   without guidance (``OVPipeline.from_pretrained(..., static=...)``: the same
                       IRs, reshaped to their one shape, UNet batch 1), as the stack compiles its own
``jax_fp32_20``        our JAX ``JaxPipeline`` on the CPU, f32, 20 steps Euler with CFG
``jax_lcm4_lora_taesd`` the same with LCM, the LoRA fused, TAESD, 4 steps, no CFG
====================== ============================================================================

``sdxl`` runs by default every row but ``ov_int8_weights_20`` and ``ov_hybrid_20`` (full INT8 was
the fastest INT8 recipe of SD 1.5; ``--rows`` names any), the stack and the replayed recipes
(found on an SD 1.5-layout toy: SDXL's UNet lacks their layers, and ``--rows`` refuses them). SDXL's VAE config says ``force_upcast``
(its activations overflow float16): no row here runs it in float16 (PyTorch and JAX in f32,
OpenVINO in f32 or bf16, which has f32's range). ``--reuse`` is for ``sd15`` only.

Composed rows (``--compose [A B]``, default 1 2): a 20-step SDXL image with CFG takes about an hour
in PyTorch on two cores, so the rows of ``--steps`` steps (PyTorch, OpenVINO, JAX) time, after the
warm-up, ``--runs`` calls of A steps and ``--runs`` calls of B steps instead; one step costs their
difference over B - A, and the whole image is the call of A steps plus ``--steps`` - A such steps
(:func:`sdaccel.course.whole_image.compose`, in wall time and in CPU seconds). Such a row says so: its
title ends in "(composed from calls of A and B steps)", its JSON holds ``composed: {"from_steps":
[A, B]}`` beside the calls themselves, and the findings never present it as run end to end. The
few-step rows always run whole. A row whose call of B steps was not slower than its call of A fails
with that error (the step is below the timer's noise): ``sdxl --quick`` runs at 128x128 and
composes from 1 and 3 steps, where the tiny SDXL's step is above it.

The SDXL run (the second command above) needs, by estimate, not measured: about 45 GB of disk
in ``--workdir`` and ``build/checkpoints`` (the random checkpoint 6.9 GB in fp16, two f32 exports of
about 14 GB each, the full INT8 UNet and the fused LoRA UNet in INT8 about 2.7 GB each, the LoRA
about 0.8 GB), about 20 GiB of RAM at the peak (the export, the PyTorch row, the JAX rows: the f32
weights are 14 GB; hence ``--memory-limit-gb`` 22 by default for ``sdxl``), and on two cores at
about 150 CPU seconds per UNet call of one latent at 1024x1024 about 8 to 10 hours: building and
exporting 1 hour, calibration and the two quantizations 1 hour, PyTorch composed about 20 minutes,
OpenVINO INT8 composed 15 minutes, the two 4-step OpenVINO rows 30 minutes, and most of the rest
the JAX rows (JAX on the CPU took 2 to 4 times OpenVINO's time on SD 1.5: composed with CFG about 2
hours with its two compilations, 4 steps LCM about 1.5 hours). ``--resume`` goes on after a stop.

Each timed call records its wall time and the CPU seconds of the row's process during it (every
thread: ``time.process_time``); where other work shares the cores, the wall time grows with it and
the CPU seconds much less, so the table gives the ratio to PyTorch fp32 in both.

Split: encode / denoise / decode where the front-end reports it (diffusers: timed around its
``encode_prompt`` and ``vae.decode``; OpenVINO: ``result.timings``; JAX: encode and the one
denoise-and-decode program). JAX's compile time (first call) is reported apart and excluded.

Artifacts (exports, INT8 UNets, the LoRA file, the tiny VAE) go to ``--workdir`` (default
``benchmarks/build/whole_image/<model>``, git-ignored); ``--reuse`` takes the export and INT8
UNets that ``bench_memory.py sd15`` left in ``build/bench/memory/sd15`` instead (the JSON names
what was reused and the command that made it).

TPU (``--tpu``): the FLOPs and the time floor at the v5e's bf16 peak of the 4-step SDXL program
(LCM: no CFG, one image at 1024x1024): the UNet's FLOPs per call from XLA's cost analysis recorded
in ``benchmarks/results/tpu_plan_*.json``, the VAE decode's from the cost analysis of its CPU
lowering (abstract weights; nothing is compiled).

Results: a markdown table on stdout and JSON at ``--out`` (written atomically after every row).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from pathlib import Path

from sdaccel.course.whole_image import ROWS, format_table
from sdaccel.course.whole_image_rows import (
    BASELINE,
    JAX_FP32_20,
    JAX_LCM4_LORA_TAESD,
    LCM_ROWS,
    OV_ACCURACY_CONTROL_20,
    OV_FLOAT_20,
    OV_HYBRID_20,
    OV_INT8_WEIGHTS_20,
    OV_SENSITIVE_4_20,
    OV_STACK_20,
    OV_STACK_LAYER_20,
    TORCH_FP32_20,
    decodes_tiny,
    is_openvino,
    is_static_few_step,
    lcm_row_key,
    ov_row_key,
    ov_row_variant,
)
from sdaccel.cpu.benchmark import machine_info, run_child, summarize_run
from sdaccel.cpu.deepcache import QUANTIZED_PARTS, folder_name, lever_name
from sdaccel.tools.toys.distill_config import TARGET_MODULES
from sdaccel.tools.toys.random_checkpoints import build_random_checkpoint
from sdaccel.toy import replayed_recipes
from sdaccel.toy.adherence import FLOAT_GROUP_RECIPES, float_group_ignored

PROMPT = "a photo of an astronaut riding a horse on mars"
#: The INT8 recipes of the UNet (``ov_<variant>_20`` rows and ``--lcm-variant``): NNCF's three, and
#: full INT8 with the ResNets in float (the recipe that kept the SD 1.5-layout toy's picture at 4 LCM
#: steps; ``sdaccel.toy.adherence.float_group_ignored``).
QUANT_VARIANTS = ("int8_weights", "hybrid", "full_int8", *FLOAT_GROUP_RECIPES)
#: The toy's recipes replayed on the UNet (SD 1.5 only), quantized from the same calibration.
REPLAYED = replayed_recipes.NAMES
RESULTS = Path(__file__).resolve().parent / "results"
#: What ``--reuse`` takes, and the command that made it.
REUSE = {
    "sd15": {
        "root": "build/bench/memory/sd15",
        "command": "python benchmarks/bench_memory.py sd15 --calib-samples 2 --out benchmarks/results/memory_sd15.json",
    }
}
V5E_PEAK_BF16 = 197e12
#: Per model: the image side, the tiny checkpoint of ``--quick``, the rows run by default.
SIZE = {"sd15": 512, "sdxl": 1024}
QUICK_CHECKPOINT = {"sd15": "checkpoints/tiny-shapes-sd15", "sdxl": "checkpoints/tiny-shapes-sdxl"}
DEFAULT_ROWS = {
    "sd15": ROWS,
    # SDXL: the fastest INT8 recipe of SD 1.5 (full INT8) stands for "the best INT8" at 20 steps,
    # beside full INT8 with the ResNets in float (the toys' picture);
    # the stack, measured per UNet step on SD 1.5 only, on SD 1.5 only; the toy's recipes replayed,
    # found on an SD 1.5-layout toy, on SD 1.5 only
    "sdxl": tuple(
        r
        for r in ROWS
        if r
        not in (
            OV_INT8_WEIGHTS_20,
            OV_HYBRID_20,
            OV_STACK_20,
            OV_STACK_LAYER_20,
            OV_ACCURACY_CONTROL_20,
            OV_SENSITIVE_4_20,
        )
    ),
}
#: How the random checkpoint's weights are stored (the loaders upcast: timing does not change).
WEIGHT_DTYPE = {"sd15": "fp32", "sdxl": "fp16"}
#: The default watchdog of each child (GiB of RSS): SDXL's f32 weights alone are 14 GB.
MEMORY_LIMIT_GB = {"sd15": 18.0, "sdxl": 22.0}
#: ``--quick``'s image side: SDXL's composed rows need a step that stands above the timer's noise,
#: which the tiny SDXL's step at 32x32 does not (JAX: a fraction of a millisecond).
QUICK_SIZE = {"sd15": 32, "sdxl": 128}
#: ``--compose`` given without numbers: the calls of 1 and 2 steps (``--quick``: 1 and 3).
COMPOSE = [1, 2]


# ----------------------------------------------------------------------------------------------
# Artifacts (each made in a child process)
# ----------------------------------------------------------------------------------------------


def make_lora(src: str, path: str, rank: int = 64, seed: int = 0) -> dict:
    """A random LoRA in the diffusers layout (``unet.<module>.lora_A/B.weight``) on every UNet
    module that LCM-LoRA adapts, rank ``rank``, alpha = rank. Small updates (B ~ 0.01)."""
    import numpy as np
    from safetensors.numpy import save_file

    from sdaccel.cpu.lora_export import checkpoint_targets

    rng = np.random.default_rng(seed)
    tensors = {}
    for module, shape in checkpoint_targets(src)["unet"].items():
        if not module.endswith(TARGET_MODULES):  # the layers an LCM-LoRA adapts
            continue
        out, fan_in = shape[0], shape[1]
        kernel = tuple(shape[2:])
        down = rng.standard_normal((rank, fan_in, *kernel)).astype(np.float32) / np.sqrt(
            fan_in * max(1, np.prod(kernel))
        )
        up = (rng.standard_normal((out, rank, *([1] * len(kernel)))) * 0.01).astype(np.float32)
        tensors[f"unet.{module}.lora_A.weight"] = down
        tensors[f"unet.{module}.lora_B.weight"] = up
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
    params = sum(t.size for t in tensors.values())
    return {"modules": len(tensors) // 2, "rank": rank, "parameters": int(params)}


def export(src: str, dst: str, lora: list | None = None) -> dict:
    from sdaccel.cpu.export import export_pipeline

    export_pipeline(src, dst, weight_dtype="fp32", progress=False, lora=[tuple(x) for x in lora or ()])
    return {}


def tiny_vae(src: str, folder: str) -> dict:
    """A random tiny autoencoder in TAESD's layout (64 channels, 1-3-3-3 / 3-3-3-1 blocks) with one
    level per level of ``src``'s VAE. Its ``config.json`` keeps the ``block_out_channels`` that
    ``save_random_tiny_vae`` writes, which the OpenVINO pipeline reads for the latent scale."""
    from sdaccel.core.checkpoint import read_config
    from sdaccel.tpu.models.taesd import save_random_tiny_vae

    vae = read_config(Path(src), "vae")
    levels = len(vae["block_out_channels"])
    save_random_tiny_vae(
        folder,
        latent_channels=vae.get("latent_channels", 4),
        num_encoder_blocks=(1, *[3] * (levels - 1)),
        num_decoder_blocks=(*[3] * (levels - 1), 1),
        encoder_block_out_channels=(64,) * levels,
        decoder_block_out_channels=(64,) * levels,
    )
    return {"levels": levels}


# ----------------------------------------------------------------------------------------------
# The rows (each runs in a child process)
# ----------------------------------------------------------------------------------------------


def torch_row(
    src: str,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    warmup_steps: int,
    compose: list[int] | None = None,
) -> dict:
    """diffusers' pipeline in f32 (``DiffusionPipeline``: SD 1.5 or SDXL, with both of SDXL's text
    encoders); encode and decode timed around its own methods."""
    import time

    import torch
    from diffusers import DiffusionPipeline

    from sdaccel.core.checkpoint import read_json

    index = read_json(Path(src) / "model_index.json")
    skipped = {n: None for n in ("safety_checker", "feature_extractor", "image_encoder") if n in index}
    if index.get("_class_name") == "StableDiffusionPipeline":
        skipped["requires_safety_checker"] = False
    start = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(src, dtype=torch.float32, **skipped)
    load_s = time.perf_counter() - start
    pipe.set_progress_bar_config(disable=True)
    spans: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            tick = time.perf_counter()
            out = fn(*args, **kwargs)
            spans[name] = spans.get(name, 0.0) + time.perf_counter() - tick
            return out

        return wrapper

    pipe.encode_prompt = timed("encode_s", pipe.encode_prompt)
    pipe.vae.decode = timed("vae_decoder_s", pipe.vae.decode)
    kwargs = {"height": size, "width": size}
    if guidance is not None:
        kwargs["guidance_scale"] = guidance

    class Result:
        def __init__(self, image, timings):
            self.image, self.timings = image, timings

    def call(n=steps):
        spans.clear()
        tick = time.perf_counter()
        with torch.no_grad():
            image = pipe(
                PROMPT, num_inference_steps=n, generator=torch.Generator().manual_seed(0), **kwargs
            ).images[0]
        wall = time.perf_counter() - tick
        enc, dec = spans.get("encode_s", 0.0), spans.get("vae_decoder_s", 0.0)
        return Result(image, {"encode_s": enc, "vae_decoder_s": dec, "denoise_decode_s": wall - enc})

    timed = _timed(call, steps, runs, lambda: call(warmup_steps), compose)
    return {
        **timed,
        "load_s": load_s,
        "precision": {"unet": "f32", "vae_decoder": "f32", "text_encoder": "f32"},
        "guidance_scale": pipe.guidance_scale,
        "unet_batch": 2 if pipe.do_classifier_free_guidance else 1,
        "torch_threads": torch.get_num_threads(),
    }


def ov_row(
    folder: str,
    unet_xml: str | None,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    warmup_steps: int,
    scheduler: str | None = None,
    vae: str | None = None,
    compose: list[int] | None = None,
    static: bool = False,
) -> dict:
    """One OpenVINO row: the export ``folder`` (its UNet replaced by ``unet_xml`` when given), in the
    precision ``sdaccel.cpu.precision`` measures fastest; ``static``: compiled for its one shape, one
    image of ``size`` with guidance above 1 or without it."""
    import time

    from sdaccel.cpu.export import StaticShape
    from sdaccel.cpu.pipeline import OVPipeline

    start = time.perf_counter()
    shape = StaticShape(1, size, size, guidance is None or guidance > 1) if static else None
    pipe = OVPipeline.from_pretrained(folder, precision="auto", scheduler=scheduler, vae=vae, static=shape)
    if unet_xml:
        pipe.replace_unet(Path(unet_xml))
    load_s = time.perf_counter() - start

    def call(n=steps):
        return pipe.generate(PROMPT, steps=n, guidance_scale=guidance, height=size, width=size, seed=0)

    timed = _timed(call, steps, runs, lambda: call(warmup_steps), compose)
    return {**timed, **ov_record(pipe, pipe.unet, guidance, load_s)}


def ov_record(pipe, unet, guidance: float | None, load_s: float) -> dict:
    """What every OpenVINO row records beside its timings, one rule for ov_row and stack_row: the
    load time, the precision hint as the plugin reports it, the output precision of ``unet``'s heavy
    layers as it ran, the UNet's batch per image, the scheduler, and whether ``unet`` was compiled
    static (every input of one shape). The batch is 2 (the prompt and its negative) when the
    guidance asked for (``None``: the pipeline's default) is above 1 and the model does not embed
    guidance, else 1."""
    from sdaccel.cpu.precision import runtime_precisions

    scale = guidance if guidance is not None else pipe.defaults.guidance_scale
    return {
        "load_s": load_s,
        "precision": pipe.precisions,  # INFERENCE_PRECISION_HINT as the plugin reports it
        "unet_layers": runtime_precisions(unet),  # output precision of the heavy layers
        "unet_batch": 2 if scale > 1 and not pipe.guidance_embedded else 1,
        "scheduler": pipe.scheduler_class.__name__,
        "unet_static": all(port.get_partial_shape().is_static for port in unet.inputs),
    }


def jax_row(
    src: str,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    scheduler: str | None = None,
    vae: str | None = None,
    lora: str | None = None,
    compose: list[int] | None = None,
) -> dict:
    """Our JAX pipeline on this CPU. It compiles once per number of steps: every length timed is
    warmed up (compiled) first, and the compile time of the first is reported apart."""
    import time

    import jax
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import JaxPipeline

    start = time.perf_counter()
    pipe = JaxPipeline.from_pretrained(src, dtype=jnp.float32, scheduler=scheduler, vae=vae, progress=False)
    if lora:
        pipe.fuse_lora([(lora, 1.0)])
    load_s = time.perf_counter() - start
    first = {}

    def call(n=steps):
        return pipe.generate(PROMPT, steps=n, guidance_scale=guidance, height=size, width=size, seed=0)

    def warmup(n=None):  # the first call of each length compiles: its compile time is reported apart
        result = call(compose[0] if compose else steps) if n is None else call(n)
        first.setdefault("compile_s", result.timings.get("compile_s"))

    timed = _timed(call, steps, runs, warmup, compose, warm_each=True)
    return {
        **timed,
        "load_s": load_s,
        "compile_s": first.get("compile_s"),
        "precision": {"all": "f32"},
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
    }


def _timed(call, steps: int, runs: int, warmup, compose: list[int] | None, warm_each: bool = False) -> dict:
    """``{"timed": ...}``: :func:`sdaccel.course.whole_image.time_calls` of ``call(steps)``; or, with
    ``compose = [a, b]``, of ``call(a)`` and of ``call(b)`` in turns (``warm_each``: ``warmup(b)`` before
    the calls of ``b``, for a front-end that compiles per length), composed into one image of
    ``steps`` steps by :func:`sdaccel.course.whole_image.compose`, with the calls kept under ``"calls"``."""
    from sdaccel.course.whole_image import compose as compose_calls
    from sdaccel.course.whole_image import time_calls, time_in_turns

    if not compose:
        return {"timed": time_calls(lambda: call(steps), runs, warmup=warmup)}
    a, b = compose
    # in turns (a, b, a, b, ...): a load that comes and goes while it measures moves both alike
    calls = {a: lambda: call(a), b: lambda: call(b)}
    times = time_in_turns(calls, runs, {a: warmup, b: (lambda: warmup(b)) if warm_each else None})
    short, long = times[a], times[b]
    return {
        "timed": compose_calls(short, long, a, b, steps),
        "calls": {str(a): short, str(b): long},
        "composed": {"from_steps": [a, b]},
    }


def vae_decode_flops(height: int, width: int) -> dict:
    """XLA's cost analysis of SDXL's VAE decode of one image, from its CPU lowering with abstract
    weights (float32: SDXL's config says force_upcast), XLA attention. Nothing is compiled."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from sdaccel.tpu.plan import DEFAULT_CONFIG, abstract_pipeline

    pipe = abstract_pipeline(DEFAULT_CONFIG, jnp.bfloat16, "xla")
    graphdef, params = nnx.split(pipe.vae)
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    latents = jax.ShapeDtypeStruct((1, *pipe.latent_shape(height, width)), jnp.float32)

    def decode(params, z):
        return nnx.merge(graphdef, params).decode(z)

    lowered = jax.jit(decode).trace(params, latents).lower(lowering_platforms=("cpu",))
    return {"flops": float(lowered.cost_analysis()["flops"]), "config": str(DEFAULT_CONFIG)}


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args):
        from sdaccel.core.staging import replace_json

        self.args, self.replace_json = args, replace_json
        self.out = Path(args.out)
        self.results = {
            "machine": machine_info(),
            "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
            "settings": dict(vars(args)),
            "artifacts": {},
            "rows": {},
            "complete": False,
        }
        if args.resume and self.out.is_file():
            self.resume(json.loads(self.out.read_text()))

    def resume(self, previous: dict) -> None:
        """Keep the rows an earlier run of the same settings measured (``--resume``): a run stopped
        half-way goes on where it stopped, and its ratios stay against its own PyTorch row."""
        same = (
            "model",
            "size",
            "steps",
            "few_steps",
            "quick",
            "runs",
            "warmup_steps",
            "lcm_variant",
            "compose",
            "stack_interval",
            "stack_layer_interval",
        )
        # a setting a file predates (stack_interval, stack_layer_interval) cannot disagree with rows
        # it has none of
        now = self.args.__dict__
        changed = {k: (previous["settings"].get(k, now[k]), now[k]) for k in same}
        before = changed["lcm_variant"][0]
        before = [before] if isinstance(before, str) else before or []
        if before and self.args.lcm_variant[: len(before)] == before:
            changed.pop("lcm_variant")  # more INT8 recipes after the same ones: their rows are added
        changed = {k: v for k, v in changed.items() if v[0] != v[1]}
        if changed:
            raise SystemExit(
                f"--resume: {self.out} was measured with other settings {changed} (before, now): "
                "pass another --out, or the same settings."
            )
        kept = {k: row for k, row in previous["rows"].items() if row.get("ok")}
        self.results["rows"] = kept
        self.results["artifacts"] = previous.get("artifacts", {})
        self.results["commands"] = [*previous.get("commands", [previous["command"]]), self.results["command"]]
        print(f"--resume: kept {sorted(kept)} from {self.out}")

    def save(self):
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.replace_json(self.out, self.results)

    def child(self, title, fn, *fn_args, limit_gb=None, **kwargs):
        run = run_child(
            title,
            fn,
            *fn_args,
            limit_gb=limit_gb or self.args.memory_limit_gb,
            min_free_gb=self.args.min_free_gb,
            **kwargs,
        )
        return run

    def artifact(self, key, title, fn, *fn_args, path=None, reused_from=None, **kwargs):
        entry = {"path": str(path) if path else None}
        if reused_from is None and path is not None and _made(Path(path)):
            reused_from = "an earlier run of this script (same --workdir)"
        if reused_from:
            earlier = self.results["artifacts"].get(key, {})
            if earlier.get("path") == entry["path"] and (earlier.get("ok") or earlier.get("reused")):
                return True  # --resume: the run that made (or reused) it is on record; keep that record
            entry.update(reused=True, made_by=reused_from)
            self.results["artifacts"][key] = entry
            self.save()
            return True
        run = self.child(title, fn, *fn_args, **kwargs)
        entry.update(reused=False, **summarize_run(run))
        entry.pop("rss_timeline_gb", None)
        self.results["artifacts"][key] = entry
        self.save()
        return run.ok

    def row(self, key, title, fn, *fn_args, **extra):
        run = self.child(title, fn, *fn_args)
        entry = {"key": key, "title": title, **extra, **summarize_run(run), "finished": _now()}
        entry.pop("rss_timeline_gb", None)
        if run.ok:
            from sdaccel.course.whole_image import summarize

            base = self.results["rows"].get(BASELINE, {}).get("median", {})
            entry["median"] = summarize(entry["timed"], base.get("image_s"), base.get("cpu_s"))
        self.results["rows"][key] = entry
        self.save()
        return run.ok


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _made(path: Path) -> bool:
    """Whether an artifact of an earlier run is there whole (every one is written atomically)."""
    if path.suffix == ".xml":
        return path.is_file() and path.with_suffix(".bin").is_file()
    if path.is_dir():
        return any(path.glob("*.json")) or any(path.glob("*.npz"))
    return path.is_file()


def prepare(bench: Bench, args) -> dict:
    """Every artifact the chosen rows need; returns their paths."""
    from sdaccel.cpu.export import is_complete

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = set(args.rows)
    paths = {}
    if args.quick:
        src = Path(args.quick_checkpoint)
        bench.results["artifacts"]["checkpoint"] = {
            "path": str(src),
            "reused": True,
            "made_by": "the repository",
        }
    else:
        src = Path(args.random_root) / f"random-{args.model}"
        made = (src / "model_index.json").is_file()
        weights = WEIGHT_DTYPE[args.model]
        ok = bench.artifact(
            "checkpoint",
            f"build {args.model} with random weights ({weights} on disk)",
            build_random_checkpoint,
            args.model,
            str(src),
            0,
            weights,
            path=src,
            reused_from="sdaccel.tools.toys.random_checkpoints.build_random_checkpoint (seed 0)"
            if made
            else None,
        )
        if not ok:
            raise SystemExit(
                f"could not build {src}: {bench.results['artifacts']['checkpoint'].get('error')}"
            )
    paths["src"] = str(src)
    reuse = REUSE.get(args.model) if args.reuse and not args.quick else None
    f32 = Path(reuse["root"]) / "export-fp32" if reuse else work / "export-fp32"
    needs_ov = any(is_openvino(r) for r in rows)
    if needs_ov:
        ok_reuse = reuse and is_complete(f32)
        bench.artifact(
            "export_fp32",
            "export to OpenVINO IR (f32)",
            export,
            str(src),
            str(f32),
            path=f32,
            reused_from=reuse["command"] if ok_reuse else None,
        )
    paths["export"] = str(f32)
    calib = work / "calibration"
    for variant in QUANT_VARIANTS:
        if ov_row_key(variant) not in rows:
            continue
        xml = (Path(reuse["root"]) if reuse else work) / f"unet_{variant}.xml"
        if variant != "int8_weights" and not (reuse and xml.is_file()) and not _made(calib):
            _calibrate(bench, args, str(f32), calib, None, None)
        _quantize_unet(
            bench,
            args,
            f"unet_{variant}",
            f"quantize the UNet: {variant}",
            f32,
            xml,
            variant,
            calib,
            reused_from=reuse["command"] if reuse and xml.is_file() else None,
        )
        paths[f"unet_{variant}"] = str(xml)
    for name in REPLAYED:
        if ov_row_key(name) not in rows:
            continue
        if not _made(calib):
            _calibrate(bench, args, str(f32), calib, None, None)
        xml = work / f"unet_{name}.xml"
        found = replayed_file(name, args)
        bench.artifact(
            f"unet_{name}", f"quantize the UNet: {name} (replayed from {found.name})", _quantize_replayed,
            str(f32 / "unet" / "openvino_model.xml"), str(xml), name, str(found), str(calib),
            args.calib_samples, path=xml, limit_gb=args.quant_memory_gb + 4,
        )  # fmt: skip
        paths[f"unet_{name}"] = str(xml)
    for key, cut in ((OV_STACK_20, "block"), (OV_STACK_LAYER_20, "layer")):
        if key not in rows:
            continue
        # DeepCache's two UNets from the checkpoint, cut at the block or at the last layer, and
        # quantized by the stack's INT8 recipe (the layer cut's full UNet alone: QUANTIZED_PARTS)
        if not _made(calib):
            _calibrate(bench, args, str(f32), calib, None, None)
        name = "" if cut == "block" else f"_{cut}"
        deepcache = work / "deepcache-f32" / folder_name(cut)
        bench.artifact(
            f"deepcache{name}", f"export DeepCache's full and shallow UNets, {cut} cut (f32)", deepcache_irs,
            str(src), str(deepcache.parent), cut, path=deepcache,
        )  # fmt: skip
        stack = work / f"deepcache-stack{name.replace('_', '-')}-int8"
        bench.artifact(
            f"deepcache{name}_int8",
            f"quantize {' and '.join(QUANTIZED_PARTS[cut])} ({cut} cut): full INT8, the ResNets in float",
            quantize_stack, str(deepcache), str(stack), str(calib), args.calib_samples, cut, path=stack,
            limit_gb=args.quant_memory_gb + 4,
        )  # fmt: skip
        paths[f"stack{name}"] = str(stack)
    if rows & {*LCM_ROWS, JAX_LCM4_LORA_TAESD}:
        lora = work / "lcm-lora-r64" / "pytorch_lora_weights.safetensors"
        bench.artifact(
            "lora", "random LCM-LoRA-shaped adapter, rank 64", make_lora, str(src), str(lora), path=lora
        )
        taesd = work / "taesd-random"
        layout = "TAESDXL" if args.model == "sdxl" else "TAESD"
        bench.artifact(
            "tiny_vae",
            f"random tiny autoencoder ({layout} layout)",
            tiny_vae,
            str(src),
            str(taesd),
            path=taesd,
        )
        paths.update(lora=str(lora), taesd=str(taesd))
    if rows & set(LCM_ROWS):
        fused = work / "export-lcm-lora"
        bench.artifact(
            "export_lcm_lora",
            "export with the LoRA fused (f32)",
            export,
            str(src),
            str(fused),
            [[str(lora), 1.0]],
            path=fused,
        )
        lcm_calib = work / "calibration-lcm"
        paths.update(export_lcm=str(fused), unet_lcm={})
        for i, variant in enumerate(args.lcm_variant):
            xml = work / f"unet_lcm_lora_{variant}.xml"
            if variant != "int8_weights" and not _made(lcm_calib):
                _calibrate(bench, args, str(fused), lcm_calib, "lcm", 1.0)
            _quantize_unet(
                bench,
                args,
                "unet_lcm_lora" if i == 0 else f"unet_lcm_lora_{variant}",
                f"quantize the fused UNet: {variant}",
                fused,
                xml,
                variant,
                lcm_calib,
            )
            paths["unet_lcm"][variant] = str(xml)
    return paths


def unet_title(variant: str) -> str:
    """How a row's title names its INT8 UNet: ``full_int8 UNet``, ``full_int8 UNet, ResNets in float``."""
    if variant in FLOAT_GROUP_RECIPES:
        return "full_int8 UNet, ResNets in float"
    return f"{variant} UNet"


def row_keys(args) -> list[str]:
    """Every row key the run measures, in order: ``--rows``, each ``lcm4_lora_int8*`` row once per
    ``--lcm-variant`` (:func:`sdaccel.course.whole_image_rows.lcm_row_key`)."""
    keys = []
    for key in args.rows:
        if key in LCM_ROWS:
            keys += [lcm_row_key(key, i, v) for i, v in enumerate(args.lcm_variant)]
        else:
            keys.append(key)
    return keys


def _calibrate(bench, args, folder, out_dir, scheduler, guidance):
    bench.artifact(
        f"calibration_{Path(out_dir).name}",
        f"collect {args.calib_samples} calibration samples",
        calibrate_child,
        folder,
        str(out_dir),
        args.calib_samples,
        2,
        scheduler,
        guidance,
        path=out_dir,
    )


def calibrate_child(folder, out_dir, samples, steps, scheduler, guidance):
    import math

    from sdaccel.cpu import quantize
    from sdaccel.cpu.pipeline import OVPipeline

    pipe = OVPipeline.from_pretrained(folder, precision="f32", scheduler=scheduler)
    prompts = quantize.read_prompts()[: math.ceil(samples / steps)]
    # the inputs of the benchmarked call: its guidance (1.0: no CFG, UNet batch 1) and scheduler
    knobs = {} if guidance is None else {"guidance_scale": guidance}
    kept = quantize.collect_unet_inputs(
        pipe, prompts, steps=steps, num_samples=samples, out_dir=out_dir, progress=False, **knobs
    )
    return {"samples": len(kept)}


def _quantize_unet(bench, args, key, title, export, xml, variant, calibration, reused_from=None):
    """The artifact ``key``: the UNet of the exported folder ``export`` quantized with ``variant``
    into ``xml`` (``calibration``: the samples of hybrid and full INT8), in a child watched at
    ``--quant-memory-gb`` + 4 GiB."""
    from sdaccel.cpu.export import MODEL_XML

    bench.artifact(
        key,
        title,
        _quantize,
        str(Path(export) / "unet" / MODEL_XML),
        str(xml),
        variant,
        None if variant == "int8_weights" else str(calibration),
        args.calib_samples,
        args.quant_memory_gb,
        args.quant_parts,
        path=xml,
        reused_from=reused_from,
        limit_gb=args.quant_memory_gb + 4,
    )


def _quantize(src_xml, dst_xml, variant, calibration, samples, max_memory_gb, parts=None):
    """``quantize_ir`` of one recipe; hybrid and full INT8 in parts, each part's process watched at
    ``max_memory_gb``: ``parts`` of them, or as many as ``max_memory_gb`` needs by
    ``sdaccel.cpu.quantize.parts_for_budget``'s estimate (fitted at 64x64 latents: calibration
    samples of SDXL at 1024x1024, 128x128 latents, need more parts than it chooses)."""
    from sdaccel.cpu.quantize import quantize_ir

    if variant == "int8_weights":
        return quantize_ir(src_xml, dst_xml, variant, calibration, samples)
    if variant in FLOAT_GROUP_RECIPES:  # full INT8 with one more group of layers kept in float
        ignored = float_group_ignored(variant)
        made = quantize_ir(
            src_xml, dst_xml, "full_int8", calibration, samples, max_memory_gb=max_memory_gb, parts=parts,
            ignored=ignored,
        )  # fmt: skip
        return {**made, "recipe": variant, "kept_in_float": ignored}
    return quantize_ir(
        src_xml, dst_xml, variant, calibration, samples, max_memory_gb=max_memory_gb, parts=parts
    )


def replayed_file(name: str, args) -> Path:
    """The result a replayed recipe reads: ``--accuracy-control-json`` for the accuracy control,
    the committed one in ``benchmarks/results`` otherwise."""
    if name == replayed_recipes.ACCURACY_CONTROL and args.accuracy_control_json:
        return Path(args.accuracy_control_json)
    return replayed_recipes.found_file(name, RESULTS)


def _quantize_replayed(src_xml, dst_xml, name, found, calibration, samples) -> dict:
    """Child: full INT8 of ``src_xml`` with what the toy's ``name`` keeps in float (read from
    ``found``), refused before any work on a UNet that lacks those layers; in one piece (SD 1.5's
    UNet fits: the stack's quantization of two UNets does)."""
    from sdaccel.cpu.quantize import quantize_ir

    knobs = replayed_recipes.knobs(name, found)
    replayed_recipes.check(src_xml, name, knobs)
    quantize_ir(src_xml, dst_xml, replayed_recipes.RECIPE, calibration, samples, **knobs)
    return {
        "recipe": replayed_recipes.RECIPE,
        "found_on": Path(found).name,
        "kept_in_float": replayed_recipes.kept_in_float(knobs),
        "smooth_quant": knobs.get("smooth_quant_alpha", 0.95) is not None,
    }


def deepcache_irs(src: str, export_dir: str, cut: str = "block") -> dict:
    """Child: DeepCache's full and shallow IRs of ``src`` cut at ``cut``, into
    ``<export_dir>/unet_deepcache`` (``unet_deepcache_layer`` for the layer cut)."""
    from sdaccel.cpu.deepcache import export_deepcache

    return {"folder": str(export_deepcache(src, export_dir, cut=cut)), "cut": cut}


def quantize_stack(deepcache: str, dst: str, calibration: str, samples: int, cut: str = "block") -> dict:
    """Child: DeepCache's IRs quantized by the stack's recipe, the one the toy's stack measures
    (:func:`sdaccel.toy.stack_quality.recipe_patterns` of its ``FLOAT_GROUPS``): both for the block
    cut, the full IR alone for the layer cut (``QUANTIZED_PARTS``)."""
    from sdaccel.cpu.deepcache import quantize_deepcache
    from sdaccel.toy.stack_quality import FLOAT_GROUPS, recipe_patterns

    ignored = recipe_patterns(FLOAT_GROUPS)
    parts = QUANTIZED_PARTS[cut]
    quantize_deepcache(
        deepcache, dst, calibration, "full_int8", subset_size=samples, parts=parts, ignored=ignored
    )
    return {"recipe": "full_int8", "float_groups": list(FLOAT_GROUPS), "ignored": ignored, "quantized": parts}


def stack_row(
    folder: str,
    deepcache: str,
    interval: int,
    steps: int,
    size: int,
    runs: int,
    warmup_steps: int,
    cut: str = "block",
) -> dict:
    """The stack: the pipeline compiled static for one image of ``size`` with CFG, and each UNet
    step run by DeepCache at ``interval`` from the INT8 IRs in ``deepcache`` (cut at ``cut``). The
    warm-up call runs at least 2 steps, so that both IRs have run once before the timed calls."""
    import time

    from sdaccel.cpu.deepcache import DeepCache
    from sdaccel.cpu.pipeline import OVPipeline

    start = time.perf_counter()
    pipe = OVPipeline.from_pretrained(folder, precision="auto", static=(1, size, size))
    cache = DeepCache.load(deepcache, pipe, interval=interval)
    load_s = time.perf_counter() - start

    def call(n=steps):
        return pipe.generate(PROMPT, steps=n, height=size, width=size, seed=0, deepcache=cache)

    def warmup():
        call(max(warmup_steps, 2))
        cache.calls = {part: 0 for part in cache.calls}  # count the timed calls' UNet runs only

    timed = _timed(call, steps, runs, warmup, None)
    return {
        **timed,
        # DeepCache's full UNet, as it ran; the pipeline's own guidance, as call() runs it
        **ov_record(pipe, cache.models["full"], None, load_s),
        "deepcache": {
            "interval": interval,
            "cut": cut,
            "unet_calls_per_image": {k: v / runs for k, v in cache.calls.items()},
        },
    }


def measure(bench: Bench, args, paths: dict) -> None:
    from tqdm.auto import tqdm

    from sdaccel.course.whole_image import composed_label

    size, runs, wsteps = args.size, args.runs, args.warmup_steps
    steps, few = args.steps, args.few_steps
    # --compose: the rows of `steps` steps are composed from calls of a and b steps; few-step rows run whole
    compose = args.compose
    composed = {"from_steps": list(compose)} if compose else None
    long = composed_label(composed)
    tiny_vae_name = "TAESDXL" if args.model == "sdxl" else "TAESD"
    plan = []
    for key in args.rows:
        if key == TORCH_FP32_20:
            fn_args = (paths["src"], steps, None, size, runs, wsteps, compose)
            plan.append((key, f"PyTorch fp32, {steps} steps, CFG{long}", torch_row, fn_args, composed))
        elif key == OV_FLOAT_20:
            fn_args = (paths["export"], None, steps, None, size, runs, wsteps, None, None, compose)
            plan.append((key, f"OpenVINO best float, {steps} steps{long}", ov_row, fn_args, composed))
        elif key == OV_STACK_20:
            title = (
                "OpenVINO static + full INT8 (ResNets in float) + "
                f"{lever_name(args.stack_interval)}, {steps} steps"
            )
            fn_args = (paths["export"], paths["stack"], args.stack_interval, steps, size, runs, wsteps)
            plan.append((key, title, stack_row, fn_args, None))
        elif key == OV_STACK_LAYER_20:
            interval = args.stack_layer_interval
            title = (
                "OpenVINO static + full INT8 (ResNets in float) + "
                f"{lever_name(interval, 'layer')}, {steps} steps"
            )
            fn_args = (paths["export"], paths["stack_layer"], interval, steps, size, runs, wsteps, "layer")
            plan.append((key, title, stack_row, fn_args, None))
        elif (variant := ov_row_variant(key)) is not None:
            xml = paths.get(f"unet_{variant}")
            fn_args = (paths["export"], xml, steps, None, size, runs, wsteps, None, None, compose)
            name = unet_title(variant)
            if variant in REPLAYED:
                found = replayed_file(variant, args)
                name = replayed_recipes.title(variant, replayed_recipes.knobs(variant, found))
            plan.append((key, f"OpenVINO {name}, {steps} steps{long}", ov_row, fn_args, composed))
        elif key in LCM_ROWS:
            vae = paths["taesd"] if decodes_tiny(key) else None
            static = is_static_few_step(key)
            for i, variant in enumerate(args.lcm_variant):
                title = (
                    f"{few} steps LCM + LoRA fused + {'static + ' if static else ''}{unet_title(variant)}"
                    + (f" + {tiny_vae_name}" if vae else "")
                )
                xml = paths["unet_lcm"][variant]
                fn_args = (paths["export_lcm"], xml, few, 1.0, size, runs, few, "lcm", vae, None, static)
                plan.append((lcm_row_key(key, i, variant), title, ov_row, fn_args, None))
        elif key == JAX_FP32_20:
            fn_args = (paths["src"], steps, None, size, runs, "euler", None, None, compose)
            plan.append((key, f"JAX fp32 on CPU, {steps} steps Euler, CFG{long}", jax_row, fn_args, composed))
        elif key == JAX_LCM4_LORA_TAESD:
            title = f"JAX fp32 on CPU, {few} steps LCM + LoRA fused + {tiny_vae_name}"
            fn_args = (paths["src"], few, 1.0, size, runs, "lcm", paths["taesd"], paths["lora"])
            plan.append((key, title, jax_row, fn_args, None))
    plan = [p for p in plan if p[0] not in bench.results["rows"]]  # --resume: measured already
    for key, title, fn, fn_args, row_composed in tqdm(plan, desc="rows", unit="row"):
        bench.row(key, title, fn, *fn_args, **({"composed": row_composed} if row_composed else {}))


def tpu_section(bench: Bench, args) -> None:
    from sdaccel.tpu.plan import tpu_floor, unet_row_flops

    files = sorted(glob.glob(str(Path(args.tpu_plans) / "tpu_plan_*.json")))
    unet = unet_row_flops(files)
    run = bench.child(
        "VAE decode FLOPs (CPU lowering, abstract weights)", vae_decode_flops, unet["height"], unet["width"]
    )
    decode = run.result["flops"] if run.ok else None
    floor = tpu_floor(unet["flops"], args.tpu_steps, False, decode, V5E_PEAK_BF16)
    bench.results["tpu"] = {
        "program": f"SDXL, {args.tpu_steps} steps LCM, no CFG, batch 1, {unet['height']}x{unet['width']}, bf16 UNet, f32 VAE",
        "unet_flops_per_call": unet,
        "decode": {"flops": decode, **({"error": run.error} if not run.ok else {})},
        "text_encoders": "not counted (CLIP-L + bigG on 77 tokens: about 0.13 TFLOP, 2 x parameters x tokens)",
        **floor,
        "derivation": (
            "UNet: flops.unet_call of every row of the tpu_plan JSONs (XLA cost analysis of one UNet call "
            "lowered for CPU with XLA attention) divided by its latents (global_batch x 2 with CFG); "
            "decode: XLA cost analysis of the VAE decode of one latent, lowered for CPU; "
            "floor = (steps x UNet + decode) / 197 TFLOP/s."
        ),
    }
    bench.save()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", choices=sorted(SIZE), help="the real architecture, random weights")
    parser.add_argument(
        "--rows", nargs="+", default=None, choices=ROWS, help="the rows, in order (default: the model's)"
    )
    parser.add_argument(
        "--compose",
        nargs="*",
        type=int,
        default=None,
        metavar="N",
        help="compose the rows of --steps steps from calls of A and B steps (default 1 2; --quick 1 3); "
        "few-step rows still run whole",
    )
    parser.add_argument("--runs", type=int, default=2, help="timed calls per row, after one warm-up call")
    parser.add_argument(
        "--warmup-steps", type=int, default=2, help="steps of the warm-up call (OpenVINO, PyTorch)"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--stack-interval", type=int, default=3, help="DeepCache's interval N in the ov_stack_20 row"
    )
    parser.add_argument(
        "--stack-layer-interval",
        type=int,
        default=2,
        help="DeepCache's interval N in the ov_stack_layer_20 row (cut at the last layer)",
    )
    parser.add_argument("--few-steps", type=int, default=4)
    parser.add_argument(
        "--size", type=int, default=None, help=f"image side (default: {SIZE}; --quick: {QUICK_SIZE})"
    )
    parser.add_argument(
        "--lcm-variant",
        nargs="+",
        default=["int8_weights"],
        choices=QUANT_VARIANTS,
        help="INT8 recipe(s) of the fused UNet: the lcm4 rows run once per recipe",
    )
    parser.add_argument(
        "--calib-samples", type=int, default=2, help="calibration samples (hybrid, full INT8)"
    )
    parser.add_argument(
        "--accuracy-control-json",
        default=None,
        help="the accuracy-control search that ov_full_int8_accuracy_control_20 replays (default: "
        f"{replayed_recipes.found_file(replayed_recipes.ACCURACY_CONTROL, 'benchmarks/results')})",
    )
    parser.add_argument("--quant-memory-gb", type=float, default=8.0, help="max_memory_gb of quantize_ir")
    parser.add_argument(
        "--quant-parts",
        type=int,
        default=None,
        help="parts of hybrid / full INT8 (default: as many as --quant-memory-gb needs by estimate)",
    )
    parser.add_argument(
        "--memory-limit-gb",
        type=float,
        default=None,
        help=f"watchdog of each child (default {MEMORY_LIMIT_GB})",
    )
    parser.add_argument("--min-free-gb", type=float, default=0.0)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help=f"sd15: reuse what bench_memory.py left in {REUSE['sd15']['root']}",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows --out already holds (same settings; --lcm-variant may add recipes after "
        "the ones it had); run the rest",
    )
    parser.add_argument("--quick", action="store_true", help="a short self-check on a tiny checkpoint")
    parser.add_argument(
        "--quick-checkpoint", default=None, help=f"the checkpoint of --quick (default: {QUICK_CHECKPOINT})"
    )
    parser.add_argument(
        "--tpu", action="store_true", help="add the TPU FLOPs and floor of the 4-step SDXL program"
    )
    parser.add_argument("--tpu-steps", type=int, default=4, help="steps of the TPU program")
    parser.add_argument("--tpu-plans", default="benchmarks/results", help="folder of the tpu_plan_*.json")
    parser.add_argument(
        "--quality",
        default=None,
        help="each recipe's adherence on the trained toy, as two columns of the table: a "
        "`python -m sdaccel.toy.whole_image_quality` JSON or a folder of them (default: benchmarks/results "
        "beside this script; 'none': leave them out)",
    )
    parser.add_argument("--random-root", default="build/checkpoints")
    parser.add_argument(
        "--workdir", default=None, help="default benchmarks/build/whole_image/<model>[-quick]"
    )
    parser.add_argument(
        "--out", default=None, help="JSON (default benchmarks/build/whole_image_<model>[-quick].json)"
    )
    args = parser.parse_args(argv)
    if args.quant_parts is not None and args.quant_parts < 1:
        parser.error("--quant-parts must be at least 1")
    if args.quality is not None and args.quality.lower() == "none":
        args.quality = "none"
    elif args.quality is not None and not Path(args.quality).exists():
        parser.error(f"--quality: no file or folder {args.quality} (or 'none' to leave the columns out)")
    for flag in (
        "runs",
        "warmup_steps",
        "steps",
        "few_steps",
        "calib_samples",
        "stack_interval",
        "stack_layer_interval",
    ):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if len(set(args.lcm_variant)) != len(args.lcm_variant):
        parser.error(f"--lcm-variant names a recipe twice: {args.lcm_variant}")
    if args.size is not None and (args.size < 8 or args.size % 8):
        parser.error(f"--size must be a positive multiple of 8 (the VAE's factor), got {args.size}")
    tag = args.model + ("-quick" if args.quick else "")
    if args.quick:
        args.steps, args.few_steps, args.warmup_steps = min(args.steps, 3), min(args.few_steps, 2), 1
        if args.size is None:
            args.size = QUICK_SIZE[args.model]
    args.size = args.size or SIZE[args.model]
    args.rows = args.rows or list(DEFAULT_ROWS[args.model])
    for name in REPLAYED:  # refused before anything is built: the layers, then the file they come from
        if ov_row_key(name) not in args.rows:
            continue
        if args.model != "sd15":
            parser.error(
                f"{ov_row_key(name)} replays layers found on the SD 1.5-layout toy; {args.model}'s UNet "
                "has other layers: leave the row out"
            )
        try:
            replayed_recipes.knobs(name, replayed_file(name, args))
        except (OSError, ValueError) as error:
            parser.error(f"{ov_row_key(name)}: {error}")
    args.memory_limit_gb = args.memory_limit_gb or MEMORY_LIMIT_GB[args.model]
    args.quick_checkpoint = args.quick_checkpoint or QUICK_CHECKPOINT[args.model]
    args.workdir = args.workdir or f"benchmarks/build/whole_image/{tag}"
    args.out = args.out or f"benchmarks/build/whole_image_{tag}.json"
    if args.quick and args.reuse:
        parser.error("--quick builds its own small artifacts: leave out --reuse")
    if args.reuse and args.model not in REUSE:
        parser.error(
            f"--reuse takes what `{REUSE['sd15']['command']}` left; nothing of the kind is made for "
            f"{args.model}: leave out --reuse (the run makes its own artifacts in --workdir)"
        )
    if args.compose is not None:
        if args.compose == []:
            args.compose = [1, args.steps] if args.quick else list(COMPOSE)
        if len(args.compose) != 2:
            parser.error(f"--compose takes two step counts A B (or none: {COMPOSE}), got {args.compose}")
        a, b = args.compose
        if not 1 <= a < b <= args.steps:
            parser.error(
                f"--compose {a} {b}: need 1 <= A < B <= --steps ({args.steps}): the step time is the "
                "difference of the calls of A and B steps over B - A"
            )
    return args


def main(argv=None) -> dict:
    from sdaccel.core.staging import check_writable

    args = parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the JAX rows run on this CPU; children inherit it
    check_writable(Path(args.out).parent)
    bench = Bench(args)
    bench.save()
    try:
        paths = prepare(bench, args)
        if args.tpu:  # first: it takes a minute, the rows take hours
            tpu_section(bench, args)
        measure(bench, args, paths)
    except KeyboardInterrupt:  # the running child was killed on the way out (sdaccel.core.processes)
        print(
            f"\nInterrupted: the step that was running stopped, and its child process with it. {args.out} "
            "holds what was measured before (written whole after every row): run the same command with "
            "--resume to go on from there.",
            file=sys.stderr,
            flush=True,
        )
        raise
    rows = bench.results["rows"]
    bench.results["missing_rows"] = [k for k in row_keys(args) if not rows.get(k, {}).get("ok")]
    bench.results["complete"] = not bench.results["missing_rows"]
    quality = args.quality or Path(__file__).resolve().parent / "results"  # the toy's committed results
    bench.results["table"] = format_table(bench.results, quality=None if quality == "none" else quality)
    bench.save()
    print(bench.results["table"])
    md = Path(args.out).with_suffix(".md")
    tmp = md.with_name(md.name + ".partial")
    commands = bench.results.get("commands") or [bench.results["command"]]  # --resume: every run of it
    made = " then ".join(f"`{c}`" for c in commands)
    tmp.write_text(f"# Whole-image time\n\nMade with {made}.\n\n{bench.results['table']}\n")
    os.replace(tmp, md)
    print(f"wrote {args.out} and {md}")
    return bench.results


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(130)
