"""DeepCache's quality cost on a trained shapes checkpoint: prompt adherence, PSNR/SSIM against f32 and a comparison grid for each cache interval, in f32 and full INT8.

python -m sdaccel.toy.deepcache_quality --checkpoint CHECKPOINT --intervals 2 3 --out out.json
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial
from pathlib import Path

from sdaccel.core.checkpoint import read_config, resolve_checkpoint
from sdaccel.cpu.deepcache import FOLDER, DeepCache, compile_parts, export_deepcache, quantize_deepcache
from sdaccel.cpu.export import MODEL_XML, export_pipeline, text_to_image_components
from sdaccel.cpu.pipeline import OVPipeline
from sdaccel.cpu.quality import comparison_grid
from sdaccel.cpu.quantize import no_progress_bars
from sdaccel.cpu.quantize_parts import quantize_ir
from sdaccel.toy import dataset, runner
from sdaccel.toy.calibration import calibrate_on_training_captions
from sdaccel.toy.report import finish
from sdaccel.toy.runner import Column, number

#: What the result records of the UNet's layout.
UNET_KEYS = ("block_out_channels", "down_block_types", "up_block_types")


def measure(
    checkpoint: str | os.PathLike,
    workdir: str | os.PathLike | None = None,
    *,
    export_dir: str | os.PathLike | None = None,
    num_prompts: int = 48,
    steps: int = 20,
    guidance_scale: float = 6.0,
    size: int = 32,
    intervals=(2, 3, 5),
    int8_intervals=(2, 3),
    calibration_prompts: int = 16,
    calibration_samples: int = 100,
    grid_columns: int = 8,
    progress: bool = True,
) -> dict:
    """What DeepCache costs on a trained ``sdaccel.toy.dataset`` checkpoint, f32 and full INT8.

    ``num_prompts`` held-out prompts (image ``i`` seeded with ``i``) are generated with: f32
    without cache; f32 with DeepCache at each of ``intervals``; full INT8 without cache; full INT8
    with DeepCache at each of ``int8_intervals`` (the plain UNet and the two DeepCache IRs are each
    quantized on the same calibration data; with no ``int8_intervals``, the DeepCache IRs are not
    quantized). Every pipeline is compiled with
    ``INFERENCE_PRECISION_HINT=f32``, so the only differences are the cache and INT8. Per
    configuration: the prompt adherence (:func:`sdaccel.toy.dataset.adherence`), PSNR/SSIM against the
    f32 uncached images, UNet calls per image (full / shallow) and the median seconds per image
    (whole pipeline, and the UNet alone).

    INT8 calibration uses ``calibration_prompts`` prompts of the *training* split (never the
    held-out ones), ``calibration_samples`` UNet inputs spread over them and the steps. Calibration
    data and quantized IRs go to ``workdir`` (default ``build/deepcache/<name>``), and so does the
    f32 export unless ``export_dir`` names one to use (an f32 export of the same checkpoint, such as
    the folder notebooks 04 and 05 share, is reused as it is; the DeepCache IRs go into it); a
    comparison grid of the first ``grid_columns`` prompts is saved in ``workdir`` as ``grid.png``.
    """

    # 1. The f32 export and its DeepCache IRs
    src = resolve_checkpoint(checkpoint)
    work = Path(workdir) if workdir else Path("build/deepcache") / src.name
    export = export_pipeline(
        src, Path(export_dir) if export_dir else work / "export", components=text_to_image_components(src),
        progress=progress,
    )  # fmt: skip
    deep = export_deepcache(src, export)
    call = {"steps": steps, "guidance_scale": guidance_scale, "height": size, "width": size}

    # 2. Full INT8: the plain UNet and the DeepCache IRs, on the same calibration data
    f32 = OVPipeline.from_pretrained(export, precision="f32")
    tick = time.perf_counter()
    plain_int8, deep_int8 = quantize_full_int8(
        f32, export, deep if int8_intervals else None, work, call, calibration_prompts, calibration_samples,
        progress,
    )  # fmt: skip
    quantize_s = time.perf_counter() - tick
    int8 = OVPipeline.from_pretrained(export, precision="f32")
    int8.replace_unet(plain_int8)

    # 3. The held-out prompts through each configuration, scored against the prompts and the f32 images
    prompts = dataset.heldout_prompts(num_prompts)
    table = configurations(f32, deep, intervals, int8, deep_int8, int8_intervals, prompts, call, progress)
    rows, images = runner.score(table, prompts, runner.seeded_row, references=("f32",))
    rows = {name: {**row, "int8": name.startswith("full_int8")} for name, row in rows.items()}

    # 4. The comparison grid, and the result
    grid = save_grid(work / "grid.png", images, rows, grid_columns)
    unet = {k: read_config(src, "unet")[k] for k in UNET_KEYS}
    settings = {
        "num_prompts": num_prompts,
        "prompts": "sdaccel.toy.dataset.heldout_prompts(num_prompts), image i seeded with i",
        **call,
        "precision": "f32 (INFERENCE_PRECISION_HINT) everywhere; INT8 layers run in INT8",
        "calibration_prompts": calibration_prompts,
        "calibration_samples": calibration_samples,
    }
    result = {"checkpoint": str(src), "unet": unet, "settings": settings, "quantize_s": quantize_s}
    return {**result, "grid": str(grid), "rows": rows}


def configurations(f32, deep, intervals, int8, deep_int8, int8_intervals, prompts, call, progress) -> dict:
    """The table of :func:`measure`: each precision without cache, then at each of its intervals
    (name -> the images of ``prompts``, one seeded call each, :func:`sdaccel.toy.runner.seeded_images`)."""
    caches = {"f32": (f32, None)}
    parts = compile_parts(deep, f32)
    caches |= {f"f32+deepcache(N={n})": (f32, DeepCache(*parts, interval=n)) for n in intervals}
    caches["full_int8"] = (int8, None)
    if int8_intervals:
        parts = compile_parts(deep_int8, int8)
        caches |= {
            f"full_int8+deepcache(N={n})": (int8, DeepCache(*parts, interval=n)) for n in int8_intervals
        }
    return {
        name: partial(runner.seeded_images, pipe, prompts, call, name, cache, progress, calls=True)
        for name, (pipe, cache) in caches.items()
    }


def quantize_full_int8(
    f32, export: Path, deep: Path | None, work: Path, call: dict, prompts: int, samples: int, progress: bool
) -> tuple[Path, Path | None]:
    """Calibrate on training captions with the f32 pipeline (``samples`` UNet inputs over
    ``prompts`` captions), then quantize the plain UNet and the DeepCache IRs (unless ``deep`` is
    None) to full INT8 on that data; returns the INT8 UNet's XML and the INT8 DeepCache folder
    (None when ``deep`` is)."""

    calibration = calibrate_on_training_captions(
        f32,
        work / "calibration",
        call["steps"],
        call["guidance_scale"],
        call["height"],
        prompts=prompts,
        samples=samples,
        progress=progress,
    )
    plain_int8 = work / "unet_full_int8" / MODEL_XML
    deep_int8 = None if deep is None else work / f"{FOLDER}_full_int8"
    with no_progress_bars():  # NNCF's: one display per pass in a notebook; the loops above show progress
        quantize_ir(export / "unet" / MODEL_XML, plain_int8, "full_int8", calibration.folder, samples)
        if deep is not None:
            quantize_deepcache(deep, deep_int8, calibration, subset_size=samples)
    return plain_int8, deep_int8


def save_grid(path: Path, images: dict, rows: dict, columns: int) -> Path:
    """The first ``columns`` images of each configuration, captioned with its score (and SSIM)."""

    captions = {
        name: f"score {row['adherence']['score']:.2f}"
        + (f"\nSSIM {row['ssim_mean']:.3f}" if "ssim_mean" in row else "")
        for name, row in rows.items()
    }
    grid = comparison_grid({k: v[:columns] for k, v in images.items()}, captions, cell=96, label_width=190)
    grid.save(path)
    return path


def format_table(result: dict) -> str:
    """The rows of :func:`measure` as a text table."""
    columns = [
        *runner.seeded_columns(26),
        Column("full", number("unet_calls_per_image.full", ".1f"), width=5),
        Column("shallow", number("unet_calls_per_image.shallow", ".1f"), width=7),
        Column("s/image", number("s_per_image", ".4f"), width=8),
        Column("UNet s", number("unet_s_per_image", ".4f"), width=7),
    ]
    return runner.format_table(result["rows"], columns, text=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description="DeepCache's quality cost on a trained sdaccel.toy.dataset checkpoint (f32 and full INT8). "
        "Tiny-model timings do not transfer to real model sizes."
    )
    parser.add_argument("--checkpoint", required=True, help="e.g. checkpoints/tiny-shapes-sd15")
    parser.add_argument("--out", default="build/deepcache.json", help="JSON, one entry per checkpoint")
    parser.add_argument("--workdir", default=None, help="default build/deepcache/<checkpoint name>")
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--guidance", type=float, default=6.0)
    parser.add_argument("--size", type=int, default=32, help="image height and width in pixels")
    parser.add_argument("--intervals", type=int, nargs="+", default=[2, 3, 5])
    parser.add_argument("--int8-intervals", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--calibration-prompts", type=int, default=16)
    parser.add_argument("--calibration-samples", type=int, default=100)
    args = parser.parse_args(argv)

    result = measure(
        args.checkpoint,
        args.workdir,
        num_prompts=args.prompts,
        steps=args.steps,
        guidance_scale=args.guidance,
        size=args.size,
        intervals=args.intervals,
        int8_intervals=args.int8_intervals,
        calibration_prompts=args.calibration_prompts,
        calibration_samples=args.calibration_samples,
    )
    finish(result, args.out, format_table(result), "sdaccel.toy.deepcache_quality", argv, per_checkpoint=True)
    print(f"wrote {result['grid']}")
    return result


if __name__ == "__main__":
    main()
