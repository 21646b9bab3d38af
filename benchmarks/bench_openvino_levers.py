"""The levers of ``benchmarks/bench_openvino.py`` (``--levers``), each timed in child processes on
the UNet IR in its best float: DeepCache's shallow step, the runtime levers, token merging, the INT8
VAE decoders, and the float levers stacked (lever ``stack``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from bench_openvino_args import recipe_knobs
from bench_openvino_unet import best_float, quantize_shallow, quantize_unet

from sdaccel.cpu.deepcache import cached_shape
from sdaccel.cpu.quantize import ir_size_bytes
from sdaccel.cpu.random_unet import unet_config
from sdaccel.tools.measure.children import quantize_vae_child, run_child, summarize_run
from sdaccel.tools.measure.exports import export_deepcache_shallow, export_tome_ir, export_vae_decoder
from sdaccel.tools.measure.models import VAE_VARIANTS, label, synthetic_calibration, vae_latents
from sdaccel.tools.measure.speedups import compose_stack
from sdaccel.tools.measure.tables import stack_lines
from sdaccel.tools.measure.timing import time_lever, time_openvino, time_tome, time_torch_vae, time_vae


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


def bench_vae_int8(model: str, args, work: Path, result: dict) -> dict:
    """The VAE decoder (batch 1, the image size of ``--latent``): PyTorch fp32 (when the run has a
    ``torch_fp32`` row), the IR in the best float, and each INT8 recipe of
    ``sdaccel.cpu.quantize_vae`` calibrated on ``--calib-samples`` synthetic latents."""
    # 1. The precisions: the UNet's best float, and the float layers of the INT8 variants
    spec = {"model": model, "batch": args.batch, "latent": args.latent}
    best = best_float(model, args, work, spec, result)["chosen"]
    int8 = result.get("int8_float", {}).get("chosen", best)
    source = work / "vae_decoder_fp16.xml"
    out = {"image_size": args.latent * 8, "rows": {}, "quantization": {}}
    # 2. Export the decoder (or reuse it)
    if not export_vae(model, args, source, out):
        return out
    # 3. The calibration latents
    latents = work / "vae_calibration.npy"
    np.save(latents, vae_latents(model, args.latent, args.calib_samples))
    # 4. The float decoders: PyTorch fp32, the IR in the best float
    time_float_vaes(model, args, source, best, result, out)
    # 5. Each INT8 recipe, quantized (or reused) and timed
    for variant in VAE_VARIANTS:
        time_int8_vae(model, args, work, source, latents, variant, int8, out)
    # 6. The speed-ups over the float decoder
    reference = out["rows"].get(best, {})
    for row in out["rows"].values():
        if row.get("ok") and reference.get("ok"):
            row["vs_float"] = reference["s_per_step"] / row["s_per_step"]
            row["cpu_vs_float"] = reference["cpu_s_per_step"] / row["cpu_s_per_step"]
    return out


def export_vae(model: str, args, source: Path, out: dict) -> bool:
    """Lever ``vae_int8``: export the VAE decoder to ``source`` in a child (or, with ``--reuse``,
    reuse it); whether it is there."""
    if args.reuse and source.is_file():
        return True
    run = run_child(
        "vae: export the decoder",
        export_vae_decoder,
        model,
        str(source),
        limit_gb=args.memory_limit_gb,
        min_free_gb=args.min_free_gb,
    )
    out["export"] = summarize_run(run)
    return run.ok


def time_float_vaes(model: str, args, source: Path, best: str, result: dict, out: dict) -> None:
    """Lever ``vae_int8``'s float rows: PyTorch fp32's decoder (when the run has a ``torch_fp32``
    row) and the IR ``source`` in the best float ``best``."""
    limit, free = args.memory_limit_gb, args.min_free_gb
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


def time_int8_vae(
    model: str, args, work: Path, source: Path, latents: Path, variant: str, int8: str, out: dict
) -> None:
    """Lever ``vae_int8``'s row of one INT8 recipe: the decoder quantized by ``variant`` (or, with
    ``--reuse``, reused), then timed with its float layers in ``int8``."""
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
            min_free_gb=args.min_free_gb,
        )
        out["quantization"][variant] = summarize_run(run)
        if not run.ok:
            return
    run = run_child(
        f"vae: {variant} (float layers: {int8})",
        time_vae,
        str(xml),
        model,
        args.latent,
        int8,
        args.iters,
        args.warmup,
        limit_gb=args.memory_limit_gb,
        min_free_gb=args.min_free_gb,
    )
    out["rows"][variant] = summarize_run(run, {"size_bytes": ir_size_bytes(xml)})


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
        if not quantize_unet(model, variant, full, source, calibration, smooth, args, work, result):
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
