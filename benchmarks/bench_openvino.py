"""Seconds per UNet step on CPU: PyTorch fp32, OpenVINO f32 / bf16 / INT8 recipes, and the runtime levers.

    python benchmarks/bench_openvino.py                               # SD 1.5 and SDXL, every variant
    python benchmarks/bench_openvino.py --models sd15 --iters 5
    python benchmarks/bench_openvino.py --models sdxl --variants ov_bf16 full_int8 --quant-memory-limit-gb 16
    python benchmarks/bench_openvino.py --models sd15 --levers deepcache quant_memory
    python benchmarks/bench_openvino.py --models sd15 --variants torch_fp32 ov_f32 --levers stack --lever-rounds 2
    python benchmarks/bench_openvino.py --models sd15 --reuse --update --variants full_int8   # add to a run
    python benchmarks/bench_openvino.py --models build/checkpoints/tiny-sd15 --latent 8     # a checkpoint

What is measured, for the *real* SD 1.5 and SDXL UNet architectures (configs in
``sdaccel/reference_configs``) with random weights (seeded; no download), batch 2 (a prompt and
its negative, as with classifier-free guidance) and 64x64 latents (512x512 images):

``torch_fp32``    diffusers' ``UNet2DConditionModel`` in PyTorch, float32, ``inference_mode``.
``ov_f32``        the same UNet exported to OpenVINO IR (``sdaccel.cpu.export.convert_unet``, weights
                  stored fp16 and decompressed at compile time), static shapes,
                  ``INFERENCE_PRECISION_HINT=f32``.
``ov_bf16``       the same IR with the CPU plugin's default precision (bf16 on a CPU with
                  AVX-512 BF16 or AMX; the script records what the plugin really used).
``int8_weights``, ``hybrid``, ``full_int8``
                  the recipes of ``sdaccel.cpu.quantize``: INT8 where quantized, and the layers
                  left in float compiled in the UNet's *best float* on this CPU (``--int8-float``
                  auto: ``choose_precision``'s rule: the only float precision the plugin offers,
                  else the faster of ``ov_f32`` / ``ov_bf16`` in this run, else measured);
                  ``--int8-float both`` also times each INT8 variant in the other precision
                  (rows ``<variant>@<precision>``). Every row records the precision that ran.
``full_int8_float_resnets``
                  full INT8 with every ResNet kept in float as well (the pattern of
                  ``sdaccel.toy.adherence.FLOAT_GROUP_VARIANTS``, added to the sensitive layers),
                  the recipe that held prompt adherence on the tiny trained models.
``full_int8_accuracy_control``, ``full_int8_sensitive_4`` (asked for by name; SD 1.5 only)
                  full INT8 with the layers that the SD 1.5-layout toy's accuracy control gave
                  back to float (SmoothQuant off, as its search ran), or the 4 costliest groups of
                  its sensitivity ranking, kept in float: the toy's recipes replayed at real size
                  (``sdaccel.toy.replayed_recipes``), read from ``--accuracy-control-json``
                  (default ``benchmarks/results/accuracy_control_31_tiny-shapes-sd15_xeon_amx.json``)
                  and ``benchmarks/results/sensitivity_tiny-shapes-sd15.json``. Their quality is
                  the toy's, in those files.

Every measurement runs in its own child process (``run_with_memory_limit``), one after the
other, so the variants do not share caches or memory, nothing stays resident between them, and
the peak memory of each (export, quantization, inference) is recorded: peak RSS and its anonymous
part (without the memory-mapped IR file). A child whose anonymous RSS passes its limit
(``--quant-memory-limit-gb`` for quantization, ``--memory-limit-gb`` otherwise) is stopped and
reported as such, and a child waits until ``psutil`` reports enough available memory
(``--min-free-gb``; the machine may be shared). NNCF quantizes an f32 IR by default
(``--quant-source``): it was measured to need less memory than from the fp16 IR used for timing.

Per variant: the median of ``--iters`` timed UNet calls after ``--warmup`` untimed ones, in
wall-clock seconds and in CPU seconds of the process (all its threads: on a machine shared with
other jobs the wall clock inflates with their load, the CPU time much less; the 1-minute load
average before and after each child is recorded too), compile time, model size on disk, and the
speed-ups over ``torch_fp32`` and ``ov_bf16`` by both clocks.

The calibration data for ``hybrid`` / ``full_int8`` here are *synthetic* UNet inputs (unit
Gaussian latents over the whole timestep range, Gaussian text embeddings): with random weights a
real pipeline's inputs carry no more information, and this script measures speed and memory,
not quality (``notebooks/05_int8_quantization.ipynb`` measures quality on an exported pipeline).

Lever ``deepcache`` (DeepCache, Ma et al., CVPR 2024): the deep part of the UNet changes little
between adjacent denoising steps, so every ``N``-th step runs the full UNet and keeps the input of
its last up block; the steps in between run only the *shallow* UNet (``conv_in``, the first down
block without its downsampler, the last up block fed with the cached feature, ``conv_out``).
The script exports that shallow UNet with ``sdaccel.cpu.deepcache`` (where DeepCache lives: both
IRs, the pipeline hook, INT8), times it in the best float and full INT8, and reports the average seconds per
step ``(t_full + (N - 1) t_shallow) / N``. Its quality cost needs trained weights to measure
(random weights have no step-to-step redundancy to exploit): ``python -m sdaccel.toy.deepcache_quality``
measures it on the tiny trained checkpoints; the paper reports 2.3x on SD 1.5 for a 0.05 drop in
CLIP score.

Lever ``quant_memory``: peak memory of the quantization under the levers of
:data:`MEMORY_STUDY` (SmoothQuant off, bias correction off, f32 vs fp16 source IR).

Levers ``static``, ``guidance_split``, ``runtime`` (``sdaccel.cpu.levers``; each in one child, on
the fp16-weight IR in the best float): static against dynamic shapes of the same IR; guidance as
one UNet call at batch 2 against two calls at batch 1; ``PERFORMANCE_HINT`` THROUGHPUT,
``INFERENCE_NUM_THREADS``, ``NUM_STREAMS`` and ``ENABLE_CPU_PINNING`` each against the default
(LATENCY; ``--runtime-arms`` picks some). The arms are timed interleaved over ``--lever-rounds``
rounds, each warmed up first (``--lever-recompile``: compiled afresh every round, so that only one
SD 1.5 UNet is in memory at a time); each row has the properties the plugin reports and the max
abs difference of its output from the reference arm's.

Lever ``tome`` (token merging, Bolya and Hoffman 2023, with ``tomesd``; ``sdaccel.cpu.tome``): the
UNet exported with ``--tome-ratios`` of its full-resolution tokens merged before self-attention
(traced at ``--latent``, the only size such an IR runs at; weights stored fp16), timed in the best
float against the unmerged UNet IR, interleaved over ``--lever-rounds`` rounds (each IR compiled,
warmed up and timed in turn every round, one model in memory at a time). Its quality cost is the
``tome`` part of ``--quality`` (``sdaccel.toy.tome_quality.measure``).

Lever ``stack``: the float levers stacked, per UNet step in the best float: static shapes; token
merging at ``--stack-ratio``; DeepCache at each of ``--deepcache-intervals``; and merging with
DeepCache (the merged UNet on full steps, DeepCache's shallow UNet merged alike between them:
``sdaccel.cpu.tome.convert_tome_deepcache``). Four UNets (the UNet, its shallow part, both merged;
weights stored fp16, traced at ``--latent``) are timed side by side, interleaved over
``--lever-rounds`` rounds, and each stack's step composed from them
(``sdaccel.cpu.benchmark.compose_stack``; a DeepCache step averages ``(t_full + (N - 1) t_shallow) / N``).
``--stack-int8 VARIANT`` adds INT8 alone and with DeepCache: the UNet quantized by that variant's
recipe and DeepCache's shallow UNet quantized alike, timed beside the four (not merged: merging on
top of INT8 cost the trained toy its adherence). ``--deepcache-layer-cut`` adds DeepCache cut at
the last up block's last layer (``sdaccel.cpu.deepcache``'s ``cut="layer"``, the paper's default
branch): its shallow UNet, timed beside the others in float, which it stays in after the INT8 UNet
too (``sdaccel.cpu.deepcache.QUANTIZED_PARTS``). Its quality cost: ``python -m
sdaccel.toy.stack_quality checkpoints/tiny-shapes-sd15 --levers static tome deepcache`` (and
``--levers static int8 deepcache`` for the INT8 rows, with ``--deepcache-cut layer`` for the layer
cut's).

Lever ``vae_int8``: the VAE decoder (batch 1, ``8 x --latent`` pixels square) in PyTorch fp32 (when
the run has a ``torch_fp32`` row), as an IR in the best float, and quantized by each recipe of
``sdaccel.cpu.quantize_vae`` (synthetic latents for calibration). With it, the table also composes
seconds per *image*: ``--steps-per-image`` UNet steps plus one decode.

Option ``--quality CHECKPOINT`` (a trained ``sdaccel.toy.dataset`` checkpoint such as
``checkpoints/tiny-shapes-sd15``; ``--quality-prompts`` held-out prompts): what the levers that change
numbers cost, each in a child: the INT8 UNets (``sdaccel.toy.adherence``: adherence, PSNR/SSIM
against OpenVINO f32), DeepCache at ``--deepcache-intervals`` (``sdaccel.toy.deepcache_quality.measure``),
the INT8 VAE decoders (``sdaccel.toy.adherence.vae_decoder_quality``), the max abs difference of
the runtime levers' UNet outputs, and token merging at ``--tome-ratios`` (``sdaccel.toy.tome_quality.measure``:
adherence, PSNR/SSIM against the unmerged f32 images). ``--quality-parts`` runs some of them (with
``--update``, the others' earlier results are kept). ``--models`` with no entry measures only that:

    python benchmarks/bench_openvino.py --models --variants --quality checkpoints/tiny-shapes-sd15
    python benchmarks/bench_openvino.py --models sd15 --variants torch_fp32 ov_f32 full_int8 \
        full_int8_float_resnets --quant-max-memory-gb 6 --levers static guidance_split runtime vae_int8

Option ``--choose-precision``: the float precision of each component by measurement
(``sdaccel.cpu.precision.choose_precision``). For a random-weight architecture the script exports
a whole text-to-image pipeline folder (text encoder(s), UNet, VAE decoder; weights stored fp16) with
the export's converters, then times every component in each of ``--precision-candidates`` at the
export's default size (512x512 for SD 1.5: text encoder and UNet at batch 2, VAE decoder at batch
1), records what the plugin reports it ran, and which precision is chosen and why. A checkpoint
(``--models build/checkpoints/tiny-sd15``) is exported with ``export_pipeline``. Without
``--variants`` only the choice is measured:

    python benchmarks/bench_openvino.py --models sd15 --variants --choose-precision --iters 3

Results: a table on stdout and JSON at ``--out`` (default ``build/bench/openvino.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np

from sdaccel.cpu.benchmark import (
    FLOAT_VARIANTS,
    MODELS,
    PIPELINE_PARTS,
    VAE_VARIANTS,
    add_speedups,
    add_whole_image,
    checkpoint_folder,
    choose_precision_child,
    choose_unet_precision,
    compose_stack,
    describe_machine,
    export_deepcache_shallow,
    export_ir,
    export_random_component,
    export_tome_ir,
    export_vae_decoder,
    ir_parameters,
    label,
    machine_info,
    quality_levers,
    quantize_vae_child,
    results_table,
    run_child,
    stack_lines,
    summarize_run,
    synthetic_calibration,
    time_lever,
    time_openvino,
    time_tome,
    time_torch,
    time_torch_vae,
    time_vae,
    unet_config,
    vae_latents,
    wait_for_memory,
)
from sdaccel.cpu.deepcache import cached_shape
from sdaccel.cpu.precision import CANDIDATES
from sdaccel.cpu.quantize import quantize_ir
from sdaccel.cpu.tome import check_ratio
from sdaccel.tools.toys.random_checkpoints import BUILDERS, ensure_tiny
from sdaccel.toy import replayed_recipes
from sdaccel.toy.adherence import FLOAT_GROUP_RECIPES, FLOAT_GROUP_VARIANTS, float_group_ignored

VARIANTS = (
    "torch_fp32",
    "ov_f32",
    "ov_bf16",
    "int8_weights",
    "hybrid",
    "full_int8",
    "full_int8_float_resnets",
    "full_int8_accuracy_control",
    "full_int8_sensitive_4",
)
#: Recipes found on the trained SD 1.5-layout toy and replayed on the real SD 1.5 UNet, whose own
#: search or ranking would take hours (sdaccel.toy.replayed_recipes). The same export code names the
#: layers of both alike; a UNet without those layers is refused.
TOY_RECIPES = replayed_recipes.NAMES
RESULTS = Path(__file__).resolve().parent / "results"
INT8 = ("int8_weights", "hybrid", "full_int8", "full_int8_float_resnets", *TOY_RECIPES)
LEVERS = ("deepcache", "quant_memory", "runtime", "static", "guidance_split", "vae_int8", "tome", "stack")
#: The parts of ``--quality`` (``--quality-parts``): the INT8 UNets, DeepCache, the INT8 VAE
#: decoders, the runtime levers' output differences, token merging.
QUALITY_PARTS = ("int8_unet", "deepcache", "vae_int8", "levers_max_abs_diff", "tome")

#: The quantization-memory study (lever ``quant_memory``): recipe, source IR and knobs of each run.
MEMORY_STUDY = {
    "full_int8 fp16-IR SQ-off": ("full_int8", "fp16", {"smooth_quant_alpha": None}),
    "full_int8 fp16-IR SQ-off no-BC": (
        "full_int8",
        "fp16",
        {"smooth_quant_alpha": None, "bias_correction": False},
    ),
    "full_int8 f32-IR SQ-off": ("full_int8", "f32", {"smooth_quant_alpha": None}),
    "hybrid f32-IR": ("hybrid", "f32", {}),
}


# ----------------------------------------------------------------------------------------------
# Models: the measuring pieces are in sdaccel.cpu.benchmark (each runs in a child process)
# ----------------------------------------------------------------------------------------------


def resolve_model(model: str) -> str:
    """A ``--models`` entry as ``sdaccel.cpu.benchmark`` takes it: the folder of a tiny checkpoint
    of ``sdaccel.tools.toys.random_checkpoints`` (built when missing), anything else as it is."""
    return str(ensure_tiny("build/checkpoints", model)) if model in BUILDERS else model


# ----------------------------------------------------------------------------------------------
# Quality on a trained tiny checkpoint (--quality; children; sdaccel.toy scores them)
# ----------------------------------------------------------------------------------------------


def quality_int8(checkpoint: str, work: str, prompts: int) -> dict:
    """Adherence and PSNR/SSIM of every INT8 UNet recipe (``sdaccel.toy.adherence``)."""
    from sdaccel.toy.adherence import evaluate

    out = evaluate(
        checkpoint,
        work,
        prompts,
        pipelines=("torch_fp32", "ov_f32"),
        variants=("int8_weights", "hybrid", "full_int8", *FLOAT_GROUP_VARIANTS),
    )
    return {"config": out["config"], "rows": out["rows"]}


def quality_deepcache(checkpoint: str, work: str, prompts: int, intervals: list[int]) -> dict:
    """DeepCache's cost (``sdaccel.toy.deepcache_quality.measure``), f32 and full INT8 at the first interval."""
    from sdaccel.toy.deepcache_quality import measure

    out = measure(
        checkpoint,
        work,
        num_prompts=prompts,
        intervals=intervals,
        int8_intervals=intervals[:1],
        progress=False,
    )
    return {"settings": out["settings"], "rows": out["rows"]}


def quality_vae(checkpoint: str, work: str, prompts: int) -> dict:
    from sdaccel.toy.adherence import vae_decoder_quality

    return vae_decoder_quality(checkpoint, work, VAE_VARIANTS, num_prompts=prompts)


def quality_tome(checkpoint: str, work: str, prompts: int, ratios: list[float]) -> dict:
    """Token merging's cost (``sdaccel.toy.tome_quality.measure``): adherence, PSNR/SSIM against the
    unmerged f32 images, at each ratio."""
    from sdaccel.toy.tome_quality import measure

    out = measure(checkpoint, work, ratios=ratios, num_prompts=prompts, progress=False)
    return {"settings": out["settings"], "rows": out["rows"]}


# ----------------------------------------------------------------------------------------------
# Precision by measurement: a whole pipeline folder
# ----------------------------------------------------------------------------------------------


def bench_precision(model: str, args, work: Path) -> dict:
    """Export a text-to-image pipeline folder (or reuse it with ``--reuse``) and choose the
    precision of each component by measurement, in a child process."""
    from sdaccel.cpu.export import MODEL_XML, export_pipeline, text_to_image_components

    limit, free = args.memory_limit_gb, args.min_free_gb
    folder = work / "pipeline"
    out = {"folder": str(folder), "export": {}}
    print(f"[{label(model)}] precision by measurement: {' vs '.join(args.precision_candidates)}", flush=True)
    if model in MODELS:
        folder.mkdir(parents=True, exist_ok=True)
        configs = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}")
        kind = "StableDiffusionXLPipeline" if model == "sdxl" else "StableDiffusionPipeline"
        index = {"_class_name": kind} | {c: ["sdaccel", "random"] for c in PIPELINE_PARTS[model]}
        (folder / "model_index.json").write_text(json.dumps(index, indent=2))
        (folder / "scheduler").mkdir(exist_ok=True)
        (folder / "scheduler" / "scheduler_config.json").write_text(
            configs.joinpath("scheduler.json").read_text()
        )
        for component in PIPELINE_PARTS[model]:
            if args.reuse and (folder / component / MODEL_XML).is_file():
                out["export"][component] = {"ok": True, "reused": True}
                continue
            run = run_child(
                f"export {component} (random weights)",
                export_random_component,
                model,
                str(folder),
                component,
                limit_gb=limit,
                min_free_gb=free,
            )
            out["export"][component] = summarize_run(run)
            if not run.ok:
                return out
    else:
        src = checkpoint_folder(model)
        export_pipeline(src, folder, components=text_to_image_components(src), progress=False)
    run = run_child(
        "choose the precision of each component",
        choose_precision_child,
        str(folder),
        list(args.precision_candidates),
        args.iters,
        args.warmup,
        limit_gb=limit,
        min_free_gb=free,
    )
    out["choose"] = summarize_run(run)
    if run.ok:
        print(run.result["table"], flush=True)
    return out


# ----------------------------------------------------------------------------------------------
# The driver (parent process)
# ----------------------------------------------------------------------------------------------


def bench_model(model: str, args, previous: dict | None = None) -> dict:
    from sdaccel.cpu.quantize import ir_size_bytes

    name = label(model)
    work = Path(args.workdir) / name.replace("/", "--")
    work.mkdir(parents=True, exist_ok=True)
    source = work / "unet_fp16.xml"
    spec = {"model": model, "batch": args.batch, "latent": args.latent}
    sdxl_like = unet_config(model).get("addition_embed_type") == "text_time"
    smooth_quant = {"on": True, "off": False, "auto": not sdxl_like}[args.smooth_quant]
    weights = "random" if model in MODELS else "checkpoint"
    result = previous or {"variants": {}, "quantization": {}, "export": {}}  # --update adds to a run
    result.update(weights=weights, smooth_quant=smooth_quant)
    limit = args.memory_limit_gb
    free = args.min_free_gb

    print(f"[{name}] {MODELS.get(model, 'checkpoint')} UNet, {weights} weights", flush=True)
    if args.reuse and source.is_file():
        result["export"] = {"ok": True, "reused": str(source.resolve()), "params": ir_parameters(source)}
    else:
        run = run_child(
            "export to OpenVINO IR (fp16 weights)",
            export_ir,
            model,
            str(source),
            limit_gb=limit,
            min_free_gb=free,
        )
        result["export"] = summarize_run(run)
        if not run.ok:
            return result
    result["export"]["size_bytes"] = ir_size_bytes(source)
    params = result["export"].get("params")

    calibration = work / "calibration"
    calibrated = [v for v in args.variants if v in INT8 and v != "int8_weights"]
    if calibrated or "quant_memory" in args.levers:
        synthetic_calibration(str(calibration), model, args.batch, args.latent, args.calib_samples)

    for variant in args.variants:
        if variant == "torch_fp32":
            run = run_child(
                variant,
                time_torch,
                model,
                args.batch,
                args.latent,
                args.iters,
                args.warmup,
                limit_gb=limit,
                min_free_gb=free,
            )
            size = {"size_bytes": 4 * params} if params else {}
            result["variants"][variant] = summarize_run(run, size)
            continue
        xml = source
        if variant in INT8:
            xml = work / f"unet_{variant}.xml"
            if not _quantize_unet(model, variant, xml, source, calibration, smooth_quant, args, work, result):
                continue
            for precision in int8_floats(model, args, work, spec, result):
                row = variant if precision == result["int8_float"]["chosen"] else f"{variant}@{precision}"
                run = run_child(
                    f"{row} (float layers: {precision})",
                    time_openvino,
                    str(xml),
                    spec,
                    precision,
                    args.iters,
                    args.warmup,
                    limit_gb=limit,
                    min_free_gb=free,
                )
                extra = {"size_bytes": ir_size_bytes(xml), "float_precision_asked": precision}
                result["variants"][row] = summarize_run(run, extra)
            continue
        precision = "f32" if variant == "ov_f32" else None
        run = run_child(
            variant,
            time_openvino,
            str(xml),
            spec,
            precision,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        result["variants"][variant] = summarize_run(run, {"size_bytes": ir_size_bytes(xml)})

    if "deepcache" in args.levers:
        result["deepcache"] = bench_deepcache(model, args, work, spec, result)
    if "quant_memory" in args.levers:
        result.setdefault("memory_study", {}).update(bench_quant_memory(model, args, work))
    for lever in ("static", "guidance_split", "runtime"):
        if lever in args.levers:
            result.setdefault("levers", {})[lever] = bench_lever(
                model, args, work, spec, result, lever, source
            )
    if "vae_int8" in args.levers:
        result.setdefault("levers", {})["vae_int8"] = bench_vae_int8(model, args, work, result)
    if "tome" in args.levers:
        result.setdefault("levers", {})["tome"] = bench_tome(model, args, work, spec, result, source)
    if "stack" in args.levers:
        result.setdefault("levers", {})["stack"] = bench_stack(model, args, work, spec, result, source)
    add_speedups(result)
    add_whole_image(result, args.steps_per_image)
    return result


def recipe_knobs(variant: str, smooth_quant: bool, args) -> tuple[str, dict]:
    """The recipe of ``sdaccel.cpu.quantize`` that ``variant`` runs and its keyword arguments
    (SmoothQuant, bias correction and the layers kept in float): one rule for the UNet and for
    DeepCache's shallow UNet in lever ``stack``. A variant of ``FLOAT_GROUP_RECIPES`` is full INT8
    with one more layer group in float (``float_group_ignored``), as the toy's rows quantize."""
    if variant in TOY_RECIPES:
        return "full_int8", toy_recipe_knobs(variant, args)
    recipe = "full_int8" if variant in FLOAT_GROUP_RECIPES else variant
    knobs = {}
    if recipe == "full_int8" and not smooth_quant:
        knobs["smooth_quant_alpha"] = None
    if recipe == "full_int8" and args.no_bias_correction:
        knobs["bias_correction"] = False
    if variant in FLOAT_GROUP_RECIPES:
        knobs["ignored"] = float_group_ignored(variant)
    return recipe, knobs


def toy_recipe_knobs(variant: str, args) -> dict:
    """The knobs of a :data:`TOY_RECIPES` variant, read from the result it replays
    (:func:`toy_recipe_file`): full INT8 with the toy's float layers added to the sensitive ones
    (accuracy control's with SmoothQuant off, as its search ran)."""
    knobs = replayed_recipes.knobs(variant, toy_recipe_file(variant, args))
    if args.no_bias_correction:
        knobs["bias_correction"] = False
    return knobs


def toy_recipe_file(variant: str, args) -> Path:
    """The result a :data:`TOY_RECIPES` variant replays: ``--accuracy-control-json`` for the
    accuracy control, the committed ranking for the others."""
    if variant == replayed_recipes.ACCURACY_CONTROL and args.accuracy_control_json:
        return Path(args.accuracy_control_json)
    return replayed_recipes.found_file(variant, RESULTS)


def _quantize_unet(model, variant, xml, source, calibration, smooth_quant, args, work, result) -> bool:
    """Quantize (or, with ``--reuse``, reuse) the INT8 UNet of ``variant`` at ``xml``; whether it is there."""
    recipe, knobs = recipe_knobs(variant, smooth_quant, args)
    if args.reuse and xml.is_file():  # keep what an earlier run measured
        result["quantization"].setdefault(variant, {"ok": True})["reused"] = str(xml.resolve())
        return True
    quant_source = source if args.quant_source == "fp16" else _f32_ir(model, work, args)
    if quant_source is None:
        return False
    data = str(calibration) if recipe != "int8_weights" else None
    extra = {"source_ir": args.quant_source, "recipe": recipe}
    if recipe == "full_int8":
        extra["smooth_quant"] = knobs.get("smooth_quant_alpha", 0.95) is not None
        extra["bias_correction"] = knobs.get("bias_correction", True)
    if "ignored" in knobs:
        extra["kept_in_float"] = knobs["ignored"]
    if variant in TOY_RECIPES:
        extra["found_on"] = toy_recipe_file(variant, args).name
        try:
            replayed_recipes.check(quant_source, variant, knobs)
        except ValueError as error:
            print(f"  quantize {variant}: refused: {error}", flush=True)
            result["quantization"][variant] = {"ok": False, "error": str(error), **extra}
            return False
    budget = args.quant_max_memory_gb
    if budget is None:
        run = run_child(
            f"quantize {variant} (from the {args.quant_source} IR)",
            quantize_ir,
            str(quant_source),
            str(xml),
            recipe,
            data,
            args.calib_samples,
            limit_gb=args.quant_memory_limit_gb,
            min_free_gb=max(args.min_free_gb, args.quant_memory_limit_gb),
            **knobs,
        )
        result["quantization"][variant] = summarize_run(run, extra)
        return run.ok
    # in parts within the budget: quantize_ir runs every part in its own watched child
    wait_for_memory(max(args.min_free_gb, budget + 2), f"quantize {variant}")
    print(f"  quantize {variant} in parts within {budget} GiB ...", end="", flush=True)
    load, tick = os.getloadavg()[0], time.perf_counter()
    try:
        report = quantize_ir(
            str(quant_source), str(xml), recipe, data, args.calib_samples, max_memory_gb=budget, **knobs
        )
    except Exception as error:  # reported in the results, as a failed child would be
        print(f" failed: {error}", flush=True)
        result["quantization"][variant] = {"ok": False, "error": f"{type(error).__name__}: {error}", **extra}
        return False
    seconds = time.perf_counter() - tick
    print(f" {seconds:.0f} s in {report['parts']} parts, peak RSS {report['peak_rss_bytes'] / 2**30:.1f} GiB")
    result["quantization"][variant] = {
        "ok": True,
        "peak_rss_gb": round(report["peak_rss_bytes"] / 2**30, 2),
        "peak_anon_gb": round(report["peak_anon_bytes"] / 2**30, 2),
        "wall_s": round(seconds, 1),
        "load_avg": [round(load, 1), round(os.getloadavg()[0], 1)],
        "max_memory_gb": budget,
        **{k: report[k] for k in ("parts", "size_bytes", "fake_quantize", "int8_weights") if k in report},
        "stages": report.get("stages"),
        **extra,
    }
    return True


def best_float(model: str, args, work: Path, spec: dict, result: dict) -> dict:
    """The float precision of the UNet on this CPU, by ``choose_precision``'s rule: the only one the
    plugin offers; else the faster of ``ov_f32`` / ``ov_bf16`` where both ran as asked in this run;
    else measured now (``choose_unet_precision``). Cached in ``result["best_float"]``."""
    import openvino as ov

    from sdaccel.cpu.precision import offered_precisions

    if "best_float" in result and result["best_float"].get("offered"):
        return result["best_float"]
    offered = [p for p in offered_precisions(ov.Core()) if p in FLOAT_VARIANTS.values()]
    rows = {p: result["variants"].get(name, {}) for name, p in FLOAT_VARIANTS.items() if p in offered}
    if len(offered) == 1:
        choice = {
            "chosen": offered[0],
            "why": f"the only float precision the CPU plugin offers ({offered[0]})",
        }
    elif all(r.get("ok") and r.get("precision") == p for p, r in rows.items()):
        chosen = min(offered, key=lambda p: rows[p]["s_per_step"])
        choice = {
            "chosen": chosen,
            "why": "the faster of " + " / ".join(f"ov_{p}" for p in offered) + " in this run",
        }
    else:
        run = run_child(
            "choose the UNet's float precision",
            choose_unet_precision,
            str(work / "unet_fp16.xml"),
            spec,
            offered,
            args.iters,
            args.warmup,
            limit_gb=args.memory_limit_gb,
            min_free_gb=args.min_free_gb,
        )
        if not run.ok:
            choice = {"chosen": "f32", "why": f"measuring failed ({run.error}); f32"}
        else:
            choice = {
                "chosen": run.result["chosen"],
                "why": "measured",
                "measured": run.result["measurements"],
            }
    result["best_float"] = {**choice, "offered": offered, "variant": f"ov_{choice['chosen']}"}
    return result["best_float"]


def int8_floats(model: str, args, work: Path, spec: dict, result: dict) -> list[str]:
    """The float precisions each INT8 variant is timed with (``--int8-float``), the chosen one first."""
    best = best_float(model, args, work, spec, result)
    chosen = best["chosen"] if args.int8_float in ("auto", "both") else args.int8_float
    floats = [chosen]
    if args.int8_float == "both":
        floats += [p for p in best["offered"] if p != chosen]
    result["int8_float"] = {
        "mode": args.int8_float,
        "chosen": chosen,
        "timed": floats,
        "why": best["why"] if args.int8_float != chosen else "asked with --int8-float",
        "not_timed": [p for p in ("f32", "bf16") if p not in floats] if args.int8_float == "both" else [],
    }
    return floats


def bench_lever(model: str, args, work: Path, spec: dict, result: dict, lever: str, source: Path) -> dict:
    """One runtime lever (``sdaccel.cpu.levers``) on the UNet IR in the best float, in a child."""
    precision = best_float(model, args, work, spec, result)["chosen"]
    run = run_child(
        f"lever {lever} ({precision}, {args.lever_rounds} rounds"
        + (", compiled afresh each round)" if args.lever_recompile else ")"),
        time_lever,
        str(source),
        spec,
        lever,
        args.lever_rounds,
        args.warmup,
        precision,
        not args.lever_recompile,
        os.cpu_count() or 1,
        args.runtime_arms if lever == "runtime" else None,
        limit_gb=args.memory_limit_gb,
        min_free_gb=args.min_free_gb,
    )
    out = summarize_run(run, {"precision_asked": precision, "source_ir": str(source.resolve())})
    for name, arm in out.get("arms", {}).items():
        print(
            f"    {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:.2f}  "
            f"cpu {arm['cpu_s_per_call']:8.3f} s  max |diff| {arm['max_abs_diff']:.2e}",
            flush=True,
        )
    return out


def bench_tome(model: str, args, work: Path, spec: dict, result: dict, source: Path) -> dict:
    """Lever ``tome``: export the UNet merged at each of ``--tome-ratios`` (or, with ``--reuse``,
    reuse it), then time the unmerged IR ``source`` and the merged ones in the best float,
    interleaved (:func:`time_tome`), in a child."""
    limit, free = args.memory_limit_gb, args.min_free_gb
    precision = best_float(model, args, work, spec, result)["chosen"]
    out = {"ratios": args.tome_ratios, "latent": args.latent, "export": {}, "merged": {}}
    irs = {"unmerged": str(source)}
    for ratio in args.tome_ratios:
        key = f"{ratio:g}"
        xml = work / f"unet_tome_{key}_{args.latent}x{args.latent}_fp16.xml"
        report = xml.with_suffix(".json")
        if args.reuse and xml.is_file() and report.is_file():
            out["export"][key] = {"ok": True, "reused": str(xml.resolve())}
        else:
            run = run_child(
                f"tome: export the UNet merged at {key} ({args.latent}x{args.latent} latents)",
                export_tome_ir,
                model,
                str(xml),
                ratio,
                args.latent,
                limit_gb=limit,
                min_free_gb=free,
            )
            out["export"][key] = summarize_run(run)
            if not run.ok:
                continue
        out["merged"][key] = json.loads(report.read_text())
        irs[f"tome {key}"] = str(xml)
    out.update(time_side_by_side("tome", irs, spec, precision, args))
    for name, arm in out.get("arms", {}).items():
        print(
            f"    {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:.2f}  "
            f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:.2f}",
            flush=True,
        )
    return out


def bench_vae_int8(model: str, args, work: Path, result: dict) -> dict:
    """The VAE decoder (batch 1, the image size of ``--latent``): PyTorch fp32 (when the run has a
    ``torch_fp32`` row), the IR in the best float, and each INT8 recipe of
    ``sdaccel.cpu.quantize_vae`` calibrated on ``--calib-samples`` synthetic latents."""
    from sdaccel.cpu.quantize import ir_size_bytes

    limit, free = args.memory_limit_gb, args.min_free_gb
    spec = {"model": model, "batch": args.batch, "latent": args.latent}
    best = best_float(model, args, work, spec, result)["chosen"]
    int8 = result.get("int8_float", {}).get("chosen", best)
    source = work / "vae_decoder_fp16.xml"
    out = {"image_size": args.latent * 8, "rows": {}, "quantization": {}}
    if not (args.reuse and source.is_file()):
        run = run_child(
            "vae: export the decoder",
            export_vae_decoder,
            model,
            str(source),
            limit_gb=limit,
            min_free_gb=free,
        )
        out["export"] = summarize_run(run)
        if not run.ok:
            return out
    latents = work / "vae_calibration.npy"
    np.save(latents, vae_latents(model, args.latent, args.calib_samples))
    if "torch_fp32" in args.variants or "torch_fp32" in result["variants"]:
        run = run_child(
            "vae: torch_fp32",
            time_torch_vae,
            model,
            args.latent,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        out["rows"]["torch_fp32"] = summarize_run(run)
    run = run_child(
        f"vae: {best}",
        time_vae,
        str(source),
        model,
        args.latent,
        best,
        args.iters,
        args.warmup,
        limit_gb=limit,
        min_free_gb=free,
    )
    out["rows"][best] = summarize_run(run, {"size_bytes": ir_size_bytes(source)})
    for variant in VAE_VARIANTS:
        xml = work / f"vae_decoder_{variant}.xml"
        if not (args.reuse and xml.is_file()):
            run = run_child(
                f"vae: quantize {variant}",
                quantize_vae_child,
                str(source),
                str(xml),
                variant,
                None if variant == "int8_weights" else str(latents),
                args.calib_samples,
                limit_gb=args.quant_memory_limit_gb,
                min_free_gb=free,
            )
            out["quantization"][variant] = summarize_run(run)
            if not run.ok:
                continue
        run = run_child(
            f"vae: {variant} (float layers: {int8})",
            time_vae,
            str(xml),
            model,
            args.latent,
            int8,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        out["rows"][variant] = summarize_run(run, {"size_bytes": ir_size_bytes(xml)})
    reference = out["rows"].get(best, {})
    for row in out["rows"].values():
        if row.get("ok") and reference.get("ok"):
            row["vs_float"] = reference["s_per_step"] / row["s_per_step"]
            row["cpu_vs_float"] = reference["cpu_s_per_step"] / row["cpu_s_per_step"]
    return out


def bench_quality(args) -> dict:
    """The quality cost of the levers that change numbers, on a trained tiny checkpoint, each part
    of ``--quality-parts`` in a child: the INT8 UNets (adherence, PSNR/SSIM vs f32), DeepCache at
    each interval, the INT8 VAE decoders, token merging at each ratio; and the max abs difference
    of the levers that should not change them."""
    checkpoint, prompts = args.quality, args.quality_prompts
    work = Path(args.workdir) / "quality" / label(checkpoint).replace("/", "--")
    limit, free = args.memory_limit_gb, args.min_free_gb
    print(f"[quality] {checkpoint}, {prompts} held-out prompts", flush=True)
    jobs = {
        "int8_unet": (quality_int8, checkpoint, str(work / "int8"), prompts),
        "deepcache": (
            quality_deepcache,
            checkpoint,
            str(work / "deepcache"),
            prompts,
            args.deepcache_intervals,
        ),
        "vae_int8": (quality_vae, checkpoint, str(work / "vae"), prompts),
        "levers_max_abs_diff": (quality_levers, checkpoint, str(work / "levers"), 2),
        "tome": (quality_tome, checkpoint, str(work / "tome"), prompts, args.tome_ratios),
    }
    out = {"checkpoint": checkpoint, "prompts": prompts}
    for name, (fn, *fn_args) in jobs.items():
        if name not in args.quality_parts:
            continue
        run = run_child(f"quality: {name}", fn, *fn_args, limit_gb=limit, min_free_gb=free)
        out[name] = summarize_run(run)
    return out


def _f32_ir(model: str, work: Path, args) -> Path | None:
    """The UNet exported with f32 weights (exported once; NNCF needs less memory from it)."""
    xml = work / "unet_f32.xml"
    if not xml.is_file():
        run = run_child(
            "export to OpenVINO IR (f32 weights)",
            export_ir,
            model,
            str(xml),
            fp16=False,
            limit_gb=args.memory_limit_gb,
            min_free_gb=args.min_free_gb,
        )
        if not run.ok:
            return None
    return xml


def bench_quant_memory(model: str, args, work: Path) -> dict:
    """Peak RSS of quantization under the memory levers (:data:`MEMORY_STUDY`), each in a child
    stopped at ``--quant-memory-limit-gb``. The quantized IRs are deleted afterwards."""
    study = {}
    sources = {"fp16": work / "unet_fp16.xml", "f32": _f32_ir(model, work, args)}
    if sources["f32"] is None:
        return {}
    calibration = work / "calibration"
    for name, (variant, source, knobs) in MEMORY_STUDY.items():
        target = work / "memory_study.xml"
        run = run_child(
            f"memory study: {name}",
            quantize_ir,
            str(sources[source]),
            str(target),
            variant,
            str(calibration),
            args.calib_samples,
            limit_gb=args.quant_memory_limit_gb,
            min_free_gb=max(args.min_free_gb, args.quant_memory_limit_gb),
            **knobs,
        )
        study[name] = summarize_run(run)
        for path in (target, target.with_suffix(".bin")):
            path.unlink(missing_ok=True)
    return study


def bench_stack(model: str, args, work: Path, spec: dict, result: dict, source: Path) -> dict:
    """Lever ``stack``: the float levers stacked (static shapes, token merging at ``--stack-ratio``,
    DeepCache at ``--deepcache-intervals``). Export (or, with ``--reuse``, reuse) the shallow UNet,
    the merged UNet and the merged shallow UNet, time them and the UNet ``source`` side by side in
    the best float, interleaved over ``--lever-rounds`` rounds (one model in memory at a time), in a
    child, and compose each stack's seconds per step (``compose_stack``)."""
    limit, free = args.memory_limit_gb, args.min_free_gb
    precision = best_float(model, args, work, spec, result)["chosen"]
    ratio, size = args.stack_ratio, f"{args.latent}x{args.latent}"
    key = f"{ratio:g}"
    irs = {
        "full": source,
        "shallow": work / "unet_shallow_fp16.xml",
        "merged": work / f"unet_tome_{key}_{size}_fp16.xml",
        "merged shallow": work / f"unet_tome_{key}_{size}_shallow_fp16.xml",
    }
    out = {"ratio": ratio, "intervals": args.deepcache_intervals, "latent": args.latent, "export": {}}
    exports = {
        "shallow": ("the shallow UNet", export_deepcache_shallow, (model, str(irs["shallow"]))),
        "merged": (
            f"the UNet merged at {key}",
            export_tome_ir,
            (model, str(irs["merged"]), ratio, args.latent),
        ),
        "merged shallow": (
            f"the shallow UNet merged at {key}",
            export_tome_ir,
            (model, str(irs["merged shallow"]), ratio, args.latent, 0, "shallow"),
        ),
    }
    if args.deepcache_layer_cut:  # the layer cut's shallow UNet, one more arm
        irs["layer shallow"] = work / "unet_shallow_layer_fp16.xml"
        shallow_args = (model, str(irs["layer shallow"]), 0, "layer")
        exports["layer shallow"] = (
            "the shallow UNet of the layer cut",
            export_deepcache_shallow,
            shallow_args,
        )
    for role, (what, export, export_args) in exports.items():
        # a merged IR's export is finished when its report (.json, written last) is there
        finished = irs[role].is_file() and (
            role in ("shallow", "layer shallow") or irs[role].with_suffix(".json").is_file()
        )
        if args.reuse and finished:
            out["export"][role] = {"ok": True, "reused": str(irs[role].resolve())}
            continue
        run = run_child(
            f"stack: export {what} ({size} latents)", export, *export_args, limit_gb=limit, min_free_gb=free
        )
        out["export"][role] = summarize_run(run)
        if not run.ok:
            return {**out, "ok": False, "error": f"export of {what} failed: {run.error}"}
    cached = {"cached": cached_shape(unet_config(model), args.batch, args.latent, args.latent)}
    if args.stack_int8:
        int8 = stack_int8_irs(model, args, work, result, source, irs["shallow"], cached)
        if "error" in int8:
            return {**out, "ok": False, "error": int8["error"]}
        out["int8"] = {"recipe": args.stack_int8, **int8["record"]}
        irs |= int8["irs"]
    irs = {role: str(xml) for role, xml in irs.items()}
    by_arm = {}  # the layer cut caches another feature: the input of the last layer
    if "layer shallow" in irs:
        shape = cached_shape(unet_config(model), args.batch, args.latent, args.latent, "layer")
        by_arm["layer shallow"] = {"cached": shape}
    spec = {**spec, "extra": cached, "extra_by_arm": by_arm}
    out.update(time_side_by_side("stack", irs, spec, precision, args))
    if out["ok"]:
        torch_row = result["variants"].get("torch_fp32", {})
        out["rows"] = compose_stack(
            out["arms"], ratio, args.deepcache_intervals, torch_row if torch_row.get("ok") else None
        )
        print("\n".join(stack_lines(label(model), out)[1:]), flush=True)
    return out


def stack_int8_irs(
    model: str, args, work: Path, result: dict, source: Path, shallow: Path, cached: dict
) -> dict:
    """Lever ``stack`` with ``--stack-int8 VARIANT``: the UNet quantized by that variant's recipe
    (the variant's own IR, quantized here unless a run made it) and DeepCache's shallow UNet
    quantized by the same recipe, on synthetic inputs with the cached feature. ``{"irs": {"int8":
    ..., "int8 shallow": ...}, "record": ...}``, or ``{"error": ...}``."""
    variant = args.stack_int8
    smooth = result.get("smooth_quant", True)
    recipe, knobs = recipe_knobs(variant, smooth, args)
    full = work / f"unet_{variant}.xml"
    if not full.is_file():
        calibration = work / "calibration"
        synthetic_calibration(str(calibration), model, args.batch, args.latent, args.calib_samples)
        if not _quantize_unet(model, variant, full, source, calibration, smooth, args, work, result):
            return {"error": f"quantizing the UNet ({variant}) failed: {result['quantization'][variant]}"}
    quantized = work / f"unet_shallow_{variant}.xml"
    record = {"kept_in_float": knobs.get("ignored")}
    if not (args.reuse and quantized.is_file()):
        run = quantize_shallow(
            f"stack: quantize the shallow UNet ({variant})",
            model,
            args,
            work,
            shallow,
            quantized,
            recipe,
            cached,
            **knobs,
        )
        record["quantize_shallow"] = summarize_run(run)
        if not run.ok:
            return {"error": f"quantizing the shallow UNet ({variant}) failed: {run.error}"}
    return {"irs": {"int8": full, "int8 shallow": quantized}, "record": record}


def quantize_shallow(
    label: str,
    model: str,
    args,
    work: Path,
    shallow: Path,
    quantized: Path,
    recipe: str,
    cached: dict,
    **knobs,
):
    """DeepCache's shallow UNet ``shallow`` quantized by ``recipe`` (with ``knobs``) into
    ``quantized`` in a watched child, calibrated on ``--calib-samples`` synthetic inputs that carry
    the cached feature ``cached`` (written to ``work``/calibration_shallow): ``run_child``'s record.
    Levers ``deepcache`` and ``stack`` both quantize the shallow UNet through it."""
    calibration = work / "calibration_shallow"
    synthetic_calibration(str(calibration), model, args.batch, args.latent, args.calib_samples, extra=cached)
    return run_child(
        label,
        quantize_ir,
        str(shallow),
        str(quantized),
        recipe,
        str(calibration),
        args.calib_samples,
        limit_gb=args.quant_memory_limit_gb,
        min_free_gb=args.min_free_gb,
        **knobs,
    )


def time_side_by_side(lever: str, irs: dict[str, str], spec: dict, precision: str, args) -> dict:
    """Time the IRs of ``irs`` (name -> path) side by side in a child (``time_tome``: interleaved
    over ``--lever-rounds`` rounds, each compiled afresh, one model in memory at a time), in
    ``precision``; ``summarize_run``'s record of it."""
    run = run_child(
        f"lever {lever} ({precision}, {args.lever_rounds} rounds, compiled afresh each round)",
        time_tome,
        irs,
        spec,
        args.lever_rounds,
        args.warmup,
        precision,
        limit_gb=args.memory_limit_gb,
        min_free_gb=args.min_free_gb,
    )
    return summarize_run(run, {"precision_asked": precision})


def bench_deepcache(model: str, args, work: Path, spec: dict, result: dict) -> dict:
    """The shallow UNet in the best float (and full INT8), and the average step time for each interval."""
    limit, free = args.memory_limit_gb, args.min_free_gb
    shallow = work / "unet_shallow_fp16.xml"
    out = {"intervals": args.deepcache_intervals}
    if not (args.reuse and shallow.is_file()):
        run = run_child(
            "deepcache: export the shallow UNet",
            export_deepcache_shallow,
            model,
            str(shallow),
            limit_gb=limit,
            min_free_gb=free,
        )
        if not run.ok:
            return summarize_run(run)
    cached = {"cached": cached_shape(unet_config(model), args.batch, args.latent, args.latent)}
    shallow_spec = {**spec, "extra": cached}
    best = best_float(model, args, work, spec, result)
    out["float"] = best["chosen"]
    # around the best float: the shallow UNet in the precision that the full float UNet ran best in
    targets = {best["variant"]: shallow}
    precisions = {best["variant"]: best["chosen"]}
    # the file lever stack reuses with --stack-int8 full_int8: quantized by the same rule (recipe_knobs)
    quantized = work / "unet_shallow_full_int8.xml"
    if args.no_deepcache_int8:
        pass
    elif args.reuse and quantized.is_file():
        targets["full_int8"] = quantized
    elif "full_int8" in result["variants"] and result["variants"]["full_int8"].get("ok"):
        recipe, knobs = recipe_knobs("full_int8", result.get("smooth_quant", True), args)
        q = quantize_shallow(
            "deepcache: quantize the shallow UNet (full_int8)",
            model,
            args,
            work,
            shallow,
            quantized,
            recipe,
            cached,
            **knobs,
        )
        if q.ok:
            targets["full_int8"] = quantized
    for base, xml in targets.items():
        precision = precisions.get(base, result.get("int8_float", {}).get("chosen", best["chosen"]))
        run = run_child(
            f"deepcache shallow step ({base}, float layers: {precision})",
            time_openvino,
            str(xml),
            shallow_spec,
            precision,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        entry = summarize_run(run)
        full = result["variants"].get(base, {})
        if run.ok and full.get("s_per_step"):
            entry["shallow_fraction"] = entry["s_per_step"] / full["s_per_step"]
            for key in ("s_per_step", "cpu_s_per_step"):
                entry[f"avg_{key}"] = {
                    str(n): (full[key] + (n - 1) * entry[key]) / n for n in args.deepcache_intervals
                }
        out[base] = entry
    return out


def print_table(results: dict) -> str:
    table = results_table(results)
    print(table)
    return table


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=["sd15", "sdxl"],
        help="sd15 / sdxl (real architecture, random weights), or checkpoints: a diffusers folder, "
        "a hub id, tiny-sd15 / tiny-sdxl",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        choices=VARIANTS,
        default=[v for v in VARIANTS if v not in TOY_RECIPES],
        help="UNet variants to time (none: only --choose-precision); the default leaves out the toy's "
        f"recipes replayed at real size ({', '.join(TOY_RECIPES)}: SD 1.5 only)",
    )
    parser.add_argument(
        "--accuracy-control-json",
        default=None,
        help="the accuracy-control search that full_int8_accuracy_control replays (default: "
        f"{replayed_recipes.found_file(replayed_recipes.ACCURACY_CONTROL, 'benchmarks/results')})",
    )
    parser.add_argument("--levers", nargs="*", choices=LEVERS, default=[])
    parser.add_argument("--iters", type=int, default=3, help="timed UNet calls per variant (median reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    parser.add_argument("--batch", type=int, default=2, help="UNet batch (2 = one image with CFG)")
    parser.add_argument("--latent", type=int, default=64, help="latent size (64 -> 512x512 images)")
    parser.add_argument(
        "--calib-samples", type=int, default=8, help="synthetic calibration inputs (= subset_size)"
    )
    parser.add_argument(
        "--smooth-quant",
        choices=["auto", "on", "off"],
        default="auto",
        help="SmoothQuant in full_int8; auto: off for SDXL-like UNets (the memory lever), on otherwise",
    )
    parser.add_argument(
        "--quant-source",
        choices=["f32", "fp16"],
        default="f32",
        help="IR that NNCF quantizes (f32: measured to need less memory than an fp16 one)",
    )
    parser.add_argument(
        "--no-bias-correction",
        action="store_true",
        help="full_int8 without fast bias correction (memory lever)",
    )
    parser.add_argument(
        "--choose-precision",
        action="store_true",
        help="choose each component's float precision by measurement (a whole pipeline folder)",
    )
    parser.add_argument(
        "--precision-candidates",
        nargs="+",
        choices=CANDIDATES,
        default=["f32", "bf16"],
        help="precisions timed by --choose-precision (each is timed, even one the CPU cannot run)",
    )
    parser.add_argument(
        "--int8-float",
        choices=["auto", "f32", "bf16", "both"],
        default="auto",
        help="float precision of the layers the INT8 variants leave in float: auto (the UNet's best "
        "float on this CPU, by choose_precision's rule), f32, bf16, or both (each INT8 variant timed "
        "in every float precision the plugin offers; extra rows <variant>@<precision>)",
    )
    parser.add_argument(
        "--quant-max-memory-gb",
        type=float,
        default=None,
        help="quantize the UNet in parts within this budget (quantize_ir(max_memory_gb=...)); "
        "default: in one piece, in one child watched at --quant-memory-limit-gb",
    )
    parser.add_argument("--deepcache-intervals", nargs="+", type=int, default=[2, 3, 5])
    parser.add_argument(
        "--stack-ratio", type=float, default=0.5, help="lever stack: the token-merging ratio of its stacks"
    )
    parser.add_argument(
        "--stack-int8",
        choices=[v for v in INT8 if v != "int8_weights" and v not in TOY_RECIPES],
        default=None,
        help="lever stack: also time INT8 by this recipe, alone and with DeepCache (its shallow UNet "
        "quantized alike); INT8 and token merging are not stacked (merging on INT8 cost the toy picture)",
    )
    parser.add_argument(
        "--no-deepcache-int8", action="store_true", help="time DeepCache's shallow UNet in float only"
    )
    parser.add_argument(
        "--deepcache-layer-cut",
        action="store_true",
        help="lever stack: also time DeepCache cut at the last up block's last layer (the DeepCache "
        "paper's default branch; its shallow UNet, one layer, in float, with --stack-int8 after the INT8 UNet too)",
    )
    parser.add_argument(
        "--lever-rounds", type=int, default=3, help="rounds of the runtime/static/guidance_split levers"
    )
    parser.add_argument(
        "--lever-recompile",
        action="store_true",
        help="compile each lever arm afresh every round (one model in memory at a time) instead of "
        "holding every arm compiled",
    )
    parser.add_argument(
        "--runtime-arms",
        nargs="*",
        default=None,
        help="arms of lever runtime to time (default: all of sdaccel.cpu.levers.runtime_arms); the "
        "default arm always runs, first",
    )
    parser.add_argument(
        "--tome-ratios",
        nargs="+",
        type=float,
        default=[0.3, 0.5],
        help="lever tome and --quality's tome part: fractions of the full-resolution tokens merged "
        "before self-attention (0 < ratio <= 0.75)",
    )
    parser.add_argument(
        "--steps-per-image", type=int, default=20, help="UNet steps of the composed per-image time"
    )
    parser.add_argument(
        "--quality",
        default=None,
        metavar="CHECKPOINT",
        help="also measure the quality cost of each lever on a trained sdaccel.toy.dataset checkpoint "
        "(checkpoints/tiny-shapes-sd15): INT8 UNets, DeepCache, VAE INT8 (adherence, PSNR/SSIM), and "
        "the max abs difference of the runtime levers",
    )
    parser.add_argument("--quality-prompts", type=int, default=96, help="held-out prompts of --quality")
    parser.add_argument(
        "--quality-parts",
        nargs="+",
        choices=QUALITY_PARTS,
        default=list(QUALITY_PARTS),
        help="the parts of --quality to measure (default: all); with --update the others keep their "
        "earlier results",
    )
    parser.add_argument(
        "--memory-limit-gb", type=float, default=20.0, help="watchdog for export/timing children"
    )
    parser.add_argument("--quant-memory-limit-gb", type=float, default=16.0, help="watchdog for quantization")
    parser.add_argument(
        "--min-free-gb", type=float, default=12.0, help="start a child only with this much available"
    )
    parser.add_argument("--workdir", default="build/bench/openvino_ir", help="IRs and calibration data")
    parser.add_argument("--reuse", action="store_true", help="reuse IRs already in --workdir")
    parser.add_argument("--out", default="build/bench/openvino.json")
    parser.add_argument("--update", action="store_true", help="add to the results already in --out")
    args = parser.parse_args(argv)
    for flag, ratios in (("--tome-ratios", args.tome_ratios), ("--stack-ratio", [args.stack_ratio])):
        for ratio in ratios:  # refused before anything is measured or written
            try:
                check_ratio(ratio)
            except ValueError as error:
                parser.error(f"{flag}: {error}")
    for variant in (v for v in args.variants if v in TOY_RECIPES):  # the result it replays, readable
        try:
            toy_recipe_knobs(variant, args)
        except (OSError, ValueError) as error:
            parser.error(f"{variant}: {error}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    settings = dict(vars(args))
    results = {"machine": machine_info(), "settings": settings, "runs": [settings], "models": {}}
    if args.update and out.is_file():
        previous = json.loads(out.read_text())
        results["models"] = previous["models"]
        for key in ("quality", "notes"):  # the notes are written by hand: kept as they are
            if key in previous:
                results[key] = previous[key]
        results["runs"] = [*previous.get("runs", [previous["settings"]]), settings]
    print("machine:", describe_machine(results["machine"]), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.quality:
        quality = results.setdefault("quality", {})
        quality[label(args.quality)] = quality.get(label(args.quality), {}) | bench_quality(args)
        out.write_text(json.dumps(results, indent=2, default=str))
    for model in args.models:
        name = label(model)
        entry = results["models"].get(name) or {"variants": {}, "quantization": {}, "export": {}}
        if args.variants or args.levers:
            entry = bench_model(resolve_model(model), args, entry)
        if args.choose_precision:
            work = Path(args.workdir) / name.replace("/", "--")
            work.mkdir(parents=True, exist_ok=True)
            entry["precision_choice"] = bench_precision(resolve_model(model), args, work)
        results["models"][name] = entry
        out.write_text(json.dumps(results, indent=2, default=str))  # partial results survive a crash
    results["table"] = print_table(results)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
