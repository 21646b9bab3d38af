"""Quantizing the UNet in one piece against in parts: peak memory, time, step time, output error.

    python benchmarks/bench_quantize_parts.py --models sd15 --parts 1 auto --max-memory-gb 6
    python benchmarks/bench_quantize_parts.py --models sdxl --variants full_int8 hybrid --parts 1 4
    python benchmarks/bench_quantize_parts.py --models tiny-sd15 --parts 1 3 --latent 8   # a checkpoint

For each model (``sd15`` / ``sdxl``: the real architecture with random weights, as in
``bench_openvino.py``; or a checkpoint), the UNet is exported once with f32 weights, synthetic
calibration inputs spread over the timesteps are written once, and then for each recipe
(``--variants``) and each number of parts (``--parts``; ``1`` is one-shot ``nncf`` on the whole
model, ``auto`` lets ``quantize_ir(..., max_memory_gb=--max-memory-gb)`` choose):

* the quantization runs, and its peak RSS and anonymous RSS are measured: one-shot in one child
  process, in parts as the largest of the children that ``quantize_in_parts`` starts (cut, each
  part, stitch); a child above ``--quant-memory-limit-gb`` is stopped. ``auto`` is resolved
  first by ``quantize_parts.parts_for_budget`` (and skipped when it repeats another entry);
* the quantized UNet is timed per call (``time_unet``: static shapes, median of ``--iters``), and
  its output error against the f32 UNet is measured on held-out inputs (other seeds and timesteps
  than the calibration): relative RMS error ``|q - f| / |f|``, mean over the inputs.

All in one run, one after the other, so the ratios compare like with like. Results: a table on
stdout and JSON at ``--out`` (written atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from sdaccel.core.tables import markdown_table
from sdaccel.cpu.machine import machine_info
from sdaccel.cpu.random_unet import MODELS, export_ir, unet_inputs
from sdaccel.tools.measure.children import run_child, summarize_run
from sdaccel.tools.measure.models import label, synthetic_calibration
from sdaccel.tools.toys.random_checkpoints import BUILDERS, ensure_tiny

#: Held-out inputs: (seed, timestep), none of them used for calibration.
HELD_OUT = ((900, 850), (901, 450), (902, 120))


def reference_outputs(xml: str, model: str, batch: int, latent: int, out: str) -> dict:
    """Child: the f32 UNet's outputs on the held-out inputs, saved to ``out`` (npz)."""
    import openvino as ov

    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    outputs = {
        f"out_{i}": compiled(unet_inputs(model, batch, latent, timestep=t, seed=seed))[0]
        for i, (seed, t) in enumerate(HELD_OUT)
    }
    np.savez(out, **outputs)
    return {"inputs": len(outputs)}


def evaluate(xml: str, model: str, batch: int, latent: int, reference: str, iters: int) -> dict:
    """Child: step time of the IR at ``xml`` (``time_unet``, static shapes, the plugin's default
    float precision) and its relative RMS error against the f32 outputs in ``reference``."""
    import openvino as ov

    from sdaccel.cpu.quantize import time_unet

    first = unet_inputs(model, batch, latent, timestep=HELD_OUT[0][1], seed=HELD_OUT[0][0])
    timing = time_unet(xml, first, iters=iters, warmup=1)
    compiled = ov.Core().compile_model(xml, "CPU")
    errors = []
    with np.load(reference) as ref:
        for i, (seed, t) in enumerate(HELD_OUT):
            out = compiled(unet_inputs(model, batch, latent, timestep=t, seed=seed))[0]
            f = ref[f"out_{i}"]
            errors.append(float(np.linalg.norm(out - f) / np.linalg.norm(f)))
    return {
        "s_per_step": timing["median_s"],
        "times": timing["times"],
        "cpu_times": timing["cpu_times"],
        "precision": timing["precision"],
        "relative_error": statistics.mean(errors),
        "relative_errors": errors,
    }


def quantize_one_shot(src: str, dst: str, variant: str, calibration: str | None, subset: int) -> dict:
    """Child: one-shot ``quantize_ir``."""
    from sdaccel.cpu.quantize_parts import quantize_ir

    return quantize_ir(src, dst, variant, calibration, subset)


def run_parts(src: Path, dst: Path, variant: str, calibration: str | None, args, parts) -> dict:
    """In parts, from this process: ``quantize_ir`` starts one child per stage and reports each
    stage's peak."""
    from sdaccel.cpu.quantize_parts import quantize_ir

    print(f"  quantize {variant}, parts={parts} ...", end="", flush=True)
    start, load = time.perf_counter(), os.getloadavg()[0]
    try:
        result = quantize_ir(
            str(src),
            str(dst),
            variant,
            calibration,
            args.calib_samples,
            parts=parts,
            max_memory_gb=args.quant_memory_limit_gb,
        )
    except (RuntimeError, ValueError) as error:
        print(f" failed: {error}", flush=True)
        return {"ok": False, "error": str(error), "wall_s": round(time.perf_counter() - start, 1)}
    out = {
        "ok": True,
        "peak_rss_gb": round(result.pop("peak_rss_bytes") / 2**30, 2),
        "peak_anon_gb": round(result.pop("peak_anon_bytes") / 2**30, 2),
        "wall_s": round(time.perf_counter() - start, 1),
        "load_avg": [round(load, 1), round(os.getloadavg()[0], 1)],
        **result,
    }
    for stage in out["stages"]:
        for key in ("peak_rss_bytes", "peak_anon_bytes"):
            stage[key.replace("_bytes", "_gb")] = round(stage.pop(key) / 2**30, 2)
    print(
        f" {out['wall_s']:.0f} s, {out['parts']} parts, peak RSS {out['peak_rss_gb']:.1f} GiB "
        f"(anonymous {out['peak_anon_gb']:.1f})",
        flush=True,
    )
    return out


def bench_model(model: str, args) -> dict:
    name = label(model)
    work = Path(args.workdir) / name.replace("/", "--")
    work.mkdir(parents=True, exist_ok=True)
    limit, free = args.memory_limit_gb, args.min_free_gb
    print(f"[{name}] {MODELS.get(model, 'checkpoint')} UNet", flush=True)
    src = work / "unet_f32.xml"
    result: dict = {"runs": {}}
    if not src.is_file():
        run = run_child(
            "export (f32 weights)", export_ir, model, str(src), fp16=False, limit_gb=limit, min_free_gb=free
        )
        result["export"] = summarize_run(run)
        if not run.ok:
            return result
    result["unet_f32_ir_bytes"] = src.stat().st_size + src.with_suffix(".bin").stat().st_size
    calibration = work / "calibration"
    synthetic_calibration(str(calibration), model, args.batch, args.latent, args.calib_samples)
    reference = work / "reference.npz"
    if args.reuse and reference.is_file():  # an earlier run's f32 outputs and step, same settings
        print("  f32 reference outputs: reused", flush=True)
        return _quantize_all(model, args, work, src, calibration, reference, result)
    run = run_child(
        "f32 reference outputs",
        reference_outputs,
        str(src),
        model,
        args.batch,
        args.latent,
        str(reference),
        limit_gb=limit,
        min_free_gb=free,
    )
    if not run.ok:
        result["reference"] = summarize_run(run)
        return result
    run = run_child(
        "f32 step",
        evaluate,
        str(src),
        model,
        args.batch,
        args.latent,
        str(reference),
        args.iters,
        limit_gb=limit,
        min_free_gb=free,
    )
    result["runs"]["f32"] = summarize_run(run)
    return _quantize_all(model, args, work, src, calibration, reference, result)


def _quantize_all(
    model, args, work: Path, src: Path, calibration: Path, reference: Path, result: dict
) -> dict:
    limit, free = args.memory_limit_gb, args.min_free_gb
    for variant in args.variants:
        calib = None if variant == "int8_weights" else str(calibration)
        for parts in args.parts:
            if parts == "auto":
                from sdaccel.cpu.quantize_parts import parts_for_budget

                budget = args.max_memory_gb[variant]
                parts = parts_for_budget(src, variant, budget)
                print(f"  {variant}: {parts} part(s) for a budget of {budget} GiB", flush=True)
            key = f"{variant} / parts={parts}"
            if key in result["runs"]:
                continue
            dst = work / f"unet_{variant}_parts{parts}.xml"
            if parts == 1:
                run = run_child(
                    f"quantize {variant}, one-shot",
                    quantize_one_shot,
                    str(src),
                    str(dst),
                    variant,
                    calib,
                    args.calib_samples,
                    limit_gb=args.quant_memory_limit_gb,
                    min_free_gb=free,
                )
                entry = summarize_run(run)
            else:
                entry = run_parts(src, dst, variant, calib, args, parts)
            if entry.get("ok"):
                run = run_child(
                    f"evaluate {key}",
                    evaluate,
                    str(dst),
                    model,
                    args.batch,
                    args.latent,
                    str(reference),
                    args.iters,
                    limit_gb=limit,
                    min_free_gb=free,
                )
                entry["evaluation"] = summarize_run(run)
                for path in (dst, dst.with_suffix(".bin")):
                    path.unlink(missing_ok=True)
            result["runs"][key] = entry
    return result


def format_table(results: dict) -> str:
    header = ["model", "recipe", "parts", "peak RSS GiB", "anonymous GiB", "wall s", "× one-shot time"]
    header += ["s/step", "rel. error"]
    rows = []
    for model, result in results["models"].items():
        runs = result.get("runs", {})
        for key, entry in runs.items():
            variant = key.split(" / ")[0]
            one = runs.get(f"{variant} / parts=1", {})
            ev = entry.get("evaluation", entry)
            ratio = (
                f"{entry['wall_s'] / one['wall_s']:.2f}"
                if entry.get("ok") and one.get("ok") and key != f"{variant} / parts=1" and variant != "f32"
                else ""
            )
            parts = entry.get("parts", "") if variant != "f32" else ""
            err = ev.get("relative_error")
            step = ev.get("s_per_step")
            status = "" if entry.get("ok", True) else f" ({entry.get('error', 'failed')[:60]})"
            memory = [
                entry.get(k, "") if variant != "f32" else ""
                for k in ("peak_rss_gb", "peak_anon_gb", "wall_s")
            ]
            rows.append(
                [
                    model,
                    f"{variant}{status}",
                    parts,
                    *memory,
                    ratio,
                    "" if step is None else f"{step:.3f}",
                    "" if err is None else f"{err:.4f}",
                ]
            )
    return markdown_table(header, rows, align="llrrrrrrr")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["sd15"], help="sd15 / sdxl, or checkpoints")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["full_int8", "hybrid"],
        choices=["int8_weights", "hybrid", "full_int8"],
    )
    parser.add_argument("--parts", nargs="+", default=["1", "auto"], help="numbers of parts, or auto")
    parser.add_argument(
        "--max-memory-gb",
        nargs="+",
        default=None,
        help="the budget of --parts auto: GiB, or one per recipe (full_int8=14 hybrid=12)",
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--latent", type=int, default=64, help="latent size (64 -> 512x512 images)")
    parser.add_argument("--calib-samples", type=int, default=8)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--memory-limit-gb", type=float, default=20.0)
    parser.add_argument("--quant-memory-limit-gb", type=float, default=20.0)
    parser.add_argument("--min-free-gb", type=float, default=0.0)
    parser.add_argument("--workdir", default="build/bench/parts")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="reuse the f32 reference outputs of an earlier run (same settings)",
    )
    parser.add_argument("--out", default=None, help="JSON (default build/bench/quantize_parts.json)")
    args = parser.parse_args(argv)
    args.parts = [p if p == "auto" else int(p) for p in args.parts]
    if "auto" in args.parts and args.max_memory_gb is None:
        parser.error("--parts auto needs --max-memory-gb")
    budgets = args.max_memory_gb or []
    if len(budgets) == 1 and "=" not in budgets[0]:
        args.max_memory_gb = dict.fromkeys(args.variants, float(budgets[0]))
    else:
        args.max_memory_gb = {k: float(v) for k, v in (b.split("=", 1) for b in budgets)}
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    results = {"machine": machine_info(), "settings": vars(args), "models": {}}
    for model in args.models:  # a tiny checkpoint's name: its folder (built when missing)
        folder = str(ensure_tiny("build/checkpoints", model)) if model in BUILDERS else model
        results["models"][label(model)] = bench_model(folder, args)
    results["table"] = format_table(results)
    out = Path(args.out or "build/bench/quantize_parts.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str))
    os.replace(tmp, out)
    print(results["table"])
    return results


if __name__ == "__main__":
    main()
