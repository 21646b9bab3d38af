"""Peak memory and disk of each heavy step of notebooks 04 and 05, for one checkpoint.

    python benchmarks/bench_memory.py sd15 --out benchmarks/results/memory_sd15.json   # real SD 1.5, random weights
    python benchmarks/bench_memory.py checkpoints/tiny-shapes-sd15                      # the smoke checkpoint
    python benchmarks/bench_memory.py path/to/diffusers-checkpoint --steps 2 --calib-samples 4

Every step runs in its own child process (``sdaccel.core.processes.run_with_memory_limit``,
through ``sdaccel.tools.measure.children.run_child``), one after the other, so each peak is that step's
alone, measured as the notebooks run it:

=================== ======== =============================================================================
step                notebook what the child does
=================== ======== =============================================================================
``export_fp32``     04, 05   ``export_pipeline(..., weight_dtype="fp32")``: every component to OpenVINO IR
``export_fp16``     04       the same with the weights stored in fp16
``load_compile``    04       ``OVPipeline.from_pretrained`` of the f32-weight export (the plugin's default
                             precision): read and compile every model
``generate``        04       load, compile and generate one image at the model's native size (``--steps``;
                             the peak does not depend on the number of steps)
``calibrate``       05       the f32 pipeline collects ``--calib-samples`` UNet inputs
                             (``collect_unet_inputs``, written to disk as they come)
``quantize_*``      05       ``quantize_parts.quantize_ir`` of the f32-weight UNet: INT8 weights only, hybrid, full
                             (SmoothQuant 0.95 and fast bias correction, notebook 05's defaults)
=================== ======== =============================================================================

For each: peak RSS and its anonymous part (without memory-mapped files, which the kernel can drop
and re-read), wall time, and the bytes on disk of what it wrote. The checkpoint's own size stands
for the download.

The checkpoint is a diffusers folder (or a hub id), or ``sd15`` / ``sdxl``: the *real* SD 1.5 /
SDXL base architecture with random weights (:func:`build_random_checkpoint`, from the configs in
``sdaccel/reference_configs``), written once to ``build/checkpoints/random-<name>``. Memory and
disk depend on the architecture and the image size, not on the values of the weights.

Results: a table on stdout and JSON at ``--out`` (written atomically).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

from sdaccel.core.staging import disk_bytes
from sdaccel.cpu.machine import machine_info
from sdaccel.tools.measure.children import run_child, summarize_run
from sdaccel.tools.toys.random_checkpoints import REFERENCE_ARCHITECTURES, build_random_checkpoint

#: Real architectures with random weights: ``--checkpoint`` key -> ``sdaccel/reference_configs`` folder.
#: What ``--workdir`` holds after a run: only a folder with this file is emptied by the next run.
MARKER = ".bench_memory"
QUANT_VARIANTS = ("int8_weights", "hybrid", "full_int8")
#: The steps, in order, with the notebook each belongs to.
NOTEBOOK = {
    "export_fp32": "04, 05",
    "export_fp16": "04",
    "load_compile": "04",
    "generate": "04",
    "calibrate": "05",
    **{f"quantize_{v}": "05" for v in QUANT_VARIANTS},
}


# ----------------------------------------------------------------------------------------------
# The units of work (each runs in a child process)
# ----------------------------------------------------------------------------------------------


def export(src: str, dst: str, weight_dtype: str) -> dict:
    from sdaccel.cpu.export import export_pipeline

    export_pipeline(src, dst, weight_dtype=weight_dtype, progress=False)
    return {}


def load_compile(folder: str) -> dict:
    from sdaccel.cpu.pipeline import OVPipeline

    return {"precisions": OVPipeline.from_pretrained(folder).precisions}


def generate(folder: str, steps: int) -> dict:
    from sdaccel.cpu.pipeline import OVPipeline

    pipe = OVPipeline.from_pretrained(folder)
    out = pipe.generate(["a photo of an astronaut riding a horse on mars"], steps=steps, seed=0)
    return {"precisions": pipe.precisions, "run_s": out.timings["run_s"], "image": list(out.array.shape[1:3])}


def calibrate(folder: str, out_dir: str, samples: int, steps: int) -> dict:
    from sdaccel.cpu.calibration import collect_unet_inputs, read_prompts
    from sdaccel.cpu.pipeline import OVPipeline

    pipe = OVPipeline.from_pretrained(folder, precision="f32")  # as notebook 05 collects them
    prompts = read_prompts()[: math.ceil(samples / steps)]
    kept = collect_unet_inputs(
        pipe, prompts, steps=steps, num_samples=samples, out_dir=out_dir, progress=False
    )
    return {"samples": len(kept), "unet_calls": len(prompts) * steps}


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


def ir_files_bytes(xml: Path) -> int:
    return disk_bytes(xml) + disk_bytes(xml.with_suffix(".bin"))


def prepare_workdir(workdir: Path) -> None:
    """An empty ``workdir``: one this script made is emptied; anything else non-empty is refused."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / MARKER).is_file():
            raise SystemExit(
                f"{workdir} is not empty and was not made by bench_memory.py: pass another --workdir."
            )
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("made by benchmarks/bench_memory.py; emptied by its next run\n")


def resolve(checkpoint: str, args) -> tuple[Path, str, str]:
    """The checkpoint folder (building the random one when needed), its label and kind of weights."""
    if checkpoint in REFERENCE_ARCHITECTURES:
        folder = Path(args.random_root) / f"random-{checkpoint}"
        if not (folder / "model_index.json").is_file():
            run = run_child(
                f"build {checkpoint} with random weights",
                build_random_checkpoint,
                checkpoint,
                str(folder),
                limit_gb=args.memory_limit_gb,
                min_free_gb=args.min_free_gb,
            )
            if not run.ok:
                raise SystemExit(f"could not build {folder}: {run.error}")
        return folder, checkpoint, "random"
    from sdaccel.core.checkpoint import resolve_checkpoint

    folder = resolve_checkpoint(checkpoint)
    return folder, folder.name, "checkpoint"


def measure(args) -> dict:
    """Run every step; after each one the results so far are written to ``--out`` (``"complete"``
    says whether all steps ran), so a run stopped half-way keeps what it measured."""
    from sdaccel.core.staging import replace_json
    from sdaccel.cpu.export import MODEL_XML, checkpoint_defaults
    from sdaccel.cpu.quantize_parts import quantize_ir

    src, name, weights = resolve(args.checkpoint, args)
    defaults = checkpoint_defaults(src)
    work = Path(args.workdir or f"build/bench/memory/{name}")
    out = Path(args.out or f"build/bench/memory_{name}.json")
    prepare_workdir(work)
    limit, free, qlimit = args.memory_limit_gb, args.min_free_gb, args.quant_memory_limit_gb
    steps: dict[str, dict] = {}
    results = {
        "machine": machine_info(),
        "settings": dict(vars(args)),
        "checkpoint": {"name": name, "path": str(src), "weights": weights, "disk_bytes": disk_bytes(src)},
        "image": [defaults.height, defaults.width],
        "complete": False,
        "steps": steps,
        "out": str(out),
    }

    def step(key: str, title: str, fn, *fn_args, output: Path | None = None, limit_gb=limit, **kwargs):
        run = run_child(title, fn, *fn_args, limit_gb=limit_gb, min_free_gb=free, **kwargs)
        entry = {"notebook": NOTEBOOK[key], **summarize_run(run)}
        entry.pop("rss_timeline_gb", None)
        if output is not None and run.ok:
            entry["output"] = str(output)
            entry["disk_bytes"] = ir_files_bytes(output) if output.suffix == ".xml" else disk_bytes(output)
        steps[key] = entry
        out.parent.mkdir(parents=True, exist_ok=True)
        replace_json(out, results)
        return run.ok

    exports = {dtype: work / f"export-{dtype}" for dtype in ("fp32", "fp16")}
    for dtype, folder in exports.items():
        title = f"export to OpenVINO IR ({dtype} weights)"
        step(f"export_{dtype}", title, export, str(src), str(folder), dtype, output=folder)
    f32 = exports["fp32"]
    if steps["export_fp32"]["ok"]:
        step("load_compile", "load and compile the pipeline", load_compile, str(f32))
        step("generate", f"generate one image, {args.steps} steps", generate, str(f32), args.steps)
        calibration = work / "calibration"
        calibrated = step(
            "calibrate",
            f"collect {args.calib_samples} calibration samples",
            calibrate,
            str(f32),
            str(calibration),
            args.calib_samples,
            args.calib_steps,
            output=calibration,
        )
        for variant in QUANT_VARIANTS:
            if variant != "int8_weights" and not calibrated:
                continue
            xml = work / f"unet_{variant}.xml"
            step(
                f"quantize_{variant}",
                f"quantize the UNet: {variant}",
                quantize_ir,
                str(f32 / "unet" / MODEL_XML),
                str(xml),
                variant,
                None if variant == "int8_weights" else str(calibration),
                args.calib_samples,
                output=xml,
                limit_gb=qlimit,
            )
    unet_ir = f32 / "unet" / MODEL_XML
    results["unet_f32_ir_bytes"] = ir_files_bytes(unet_ir) if unet_ir.is_file() else None
    results["complete"] = len(steps) == len(NOTEBOOK)
    return results


def format_table(results: dict) -> str:
    h, w = results["image"]
    ckpt = results["checkpoint"]
    lines = [
        f"{ckpt['name']} ({ckpt['weights']} weights, {ckpt['disk_bytes'] / 2**30:.2f} GiB on disk), {h}x{w}",
        f"{'step':24s} {'notebook':8s} {'peak RSS GiB':>12s} {'anon GiB':>9s} {'wall s':>8s} {'disk MB':>9s}  status",
    ]
    for key, entry in results["steps"].items():
        disk = entry.get("disk_bytes")
        lines.append(
            f"{key:24s} {entry['notebook']:8s} {entry['peak_rss_gb']:12.2f} {entry['peak_anon_gb']:9.2f} "
            f"{entry['wall_s']:8.0f} {'-' if disk is None else format(disk / 1e6, '9.1f'):>9s}  "
            + ("ok" if entry["ok"] else entry.get("error", "failed")[:80])
        )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checkpoint",
        help=f"a diffusers folder or hub id, or {sorted(REFERENCE_ARCHITECTURES)} (real architecture, random weights)",
    )
    parser.add_argument("--steps", type=int, default=2, help="denoising steps of the generated image")
    parser.add_argument(
        "--calib-samples", type=int, default=4, help="calibration samples (NNCF's subset_size)"
    )
    parser.add_argument("--calib-steps", type=int, default=2, help="denoising steps per calibration prompt")
    parser.add_argument("--memory-limit-gb", type=float, default=20.0, help="watchdog of the other steps")
    parser.add_argument("--quant-memory-limit-gb", type=float, default=16.0, help="watchdog of quantization")
    parser.add_argument(
        "--min-free-gb", type=float, default=0.0, help="start a step only with this much free"
    )
    parser.add_argument(
        "--random-root", default="build/checkpoints", help="where random checkpoints are built"
    )
    parser.add_argument("--workdir", default=None, help="exports and IRs (default build/bench/memory/<name>)")
    parser.add_argument("--out", default=None, help="JSON (default build/bench/memory_<name>.json)")
    args = parser.parse_args(argv)
    for flag in ("steps", "calib_samples", "calib_steps"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def main(argv=None) -> dict:
    from sdaccel.core.staging import check_writable, replace_json

    args = parse_args(argv)
    if args.out:
        check_writable(Path(args.out).parent)
    results = measure(args)
    results["table"] = format_table(results)
    print(results["table"])
    out = Path(results["out"])
    replace_json(out, results)
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
