"""The UNet's INT8 variants and float precision for ``benchmarks/bench_openvino.py``: quantize a
variant (:func:`quantize_unet`, in one watched child or in parts within a budget), the UNet's best
float on this CPU (:func:`best_float`) and the floats each INT8 variant runs in
(:func:`int8_floats`), DeepCache's shallow UNet quantized (:func:`quantize_shallow`), the
quantization-memory study (lever ``quant_memory``), and the precision of a whole pipeline folder
chosen by measurement (``--choose-precision``)."""

from __future__ import annotations

import json
import os
import time
from importlib import resources
from pathlib import Path

from bench_openvino_args import TOY_RECIPES, recipe_knobs, toy_recipe_file

from sdaccel.cpu.export import MODEL_XML, export_pipeline, text_to_image_components
from sdaccel.cpu.precision import offered_precisions
from sdaccel.cpu.quantize_parts import quantize_ir
from sdaccel.cpu.random_unet import MODELS, checkpoint_folder, export_ir
from sdaccel.tools.measure.children import (
    choose_precision_child,
    run_child,
    summarize_run,
    wait_for_memory,
)
from sdaccel.tools.measure.exports import export_random_component
from sdaccel.tools.measure.models import FLOAT_VARIANTS, PIPELINE_PARTS, label, synthetic_calibration
from sdaccel.tools.measure.timing import choose_unet_precision
from sdaccel.toy import replayed_recipes

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


def quantize_unet(model, variant, xml, source, calibration, smooth_quant, args, work, result) -> bool:
    """Quantize (or, with ``--reuse``, reuse) the INT8 UNet of ``variant`` at ``xml``; whether it is there."""
    recipe, knobs = recipe_knobs(variant, smooth_quant, args)
    if args.reuse and xml.is_file():  # keep what an earlier run measured
        result["quantization"].setdefault(variant, {"ok": True})["reused"] = str(xml.resolve())
        return True
    quant_source = source if args.quant_source == "fp16" else f32_ir(model, work, args)
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


def f32_ir(model: str, work: Path, args) -> Path | None:
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
    sources = {"fp16": work / "unet_fp16.xml", "f32": f32_ir(model, work, args)}
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


def bench_precision(model: str, args, work: Path) -> dict:
    """Export a text-to-image pipeline folder (or reuse it with ``--reuse``) and choose the
    precision of each component by measurement, in a child process."""
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
