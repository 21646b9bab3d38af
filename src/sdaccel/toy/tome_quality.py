"""Token merging's quality cost on a trained shapes checkpoint: prompt adherence and PSNR/SSIM against the unmerged UNet, per merge ratio.

python -m sdaccel.toy.tome_quality --checkpoint CHECKPOINT --ratios 0.3 0.5 --out out.json
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from sdaccel.core.checkpoint import read_json, resolve_checkpoint
from sdaccel.cpu.export import MODEL_XML, checkpoint_defaults, export_pipeline, text_to_image_components
from sdaccel.cpu.pipeline import OVPipeline
from sdaccel.cpu.tome import MANIFEST, check_ratio, export_tome
from sdaccel.toy import dataset, runner
from sdaccel.toy.report import finish
from sdaccel.toy.runner import Column, number


def measure(
    checkpoint: str | os.PathLike,
    workdir: str | os.PathLike | None = None,
    *,
    ratios: Sequence[float] = (0.3, 0.5),
    num_prompts: int = 48,
    steps: int = 20,
    guidance_scale: float = 6.0,
    size: int | None = None,
    progress: bool = True,
) -> dict:
    """What token merging costs on a trained ``sdaccel.toy.dataset`` checkpoint, in f32.

    ``num_prompts`` held-out prompts (image ``i`` seeded with ``i``, as in
    :func:`sdaccel.toy.deepcache_quality.measure`) are generated with the plain UNet and with the UNet
    merged at each of ``ratios``, every pipeline compiled with ``INFERENCE_PRECISION_HINT=f32``.
    Per configuration: the prompt adherence (:func:`sdaccel.toy.dataset.adherence`), PSNR/SSIM of its
    images against the plain ones, the median seconds per image and, for the merged ones, how many
    tokens each merged block kept. ``size``: image height and width (default: the checkpoint's).
    Exports go to ``workdir`` (default ``build/tome/<name>``).
    """

    # 1. Check the inputs, before anything is exported
    ratios = [check_ratio(r) for r in ratios]
    if not ratios:
        raise ValueError("ratios is empty: give at least one, e.g. (0.3, 0.5).")
    if num_prompts < 1 or steps < 1:
        raise ValueError(f"num_prompts and steps must be >= 1, got {num_prompts} and {steps}.")

    # 2. The f32 export, and a merged UNet per ratio
    src = resolve_checkpoint(checkpoint)
    size = size or checkpoint_defaults(src).height
    work = Path(workdir) if workdir else Path("build/tome") / src.name
    export = export_pipeline(
        src, work / "export", components=text_to_image_components(src), progress=progress
    )
    folders = {r: export_tome(src, export, r, size, size) for r in ratios}
    call = {"steps": steps, "guidance_scale": guidance_scale, "height": size, "width": size}

    # 3. The held-out prompts through the plain UNet, then through each merged one
    pipe = OVPipeline.from_pretrained(export, precision="f32")
    prompts = dataset.heldout_prompts(num_prompts)
    unets = {"f32": export / "unet" / MODEL_XML} | {
        f"f32+tome({r:g})": folder / MODEL_XML for r, folder in folders.items()
    }
    table = {
        name: partial(run_configuration, name, pipe, xml, prompts, call, progress)
        for name, xml in unets.items()
    }
    rows, _ = runner.score(table, prompts, runner.seeded_row, references=("f32",))

    # 4. The result
    return {
        "checkpoint": str(src),
        "settings": {
            "num_prompts": num_prompts,
            "prompts": "sdaccel.toy.dataset.heldout_prompts(num_prompts), image i seeded with i",
            **call,
            "precision": "f32 (INFERENCE_PRECISION_HINT) everywhere",
            "ratios": ratios,
        },
        "rows": rows,
    }


def run_configuration(name: str, pipe, xml: Path, prompts: list[str], call: dict, progress: bool):
    """The images of ``prompts`` (image ``i`` seeded with ``i``) from ``pipe`` with the UNet ``xml``
    swapped in, and what they measured (:func:`sdaccel.toy.runner.seeded_images`); for a merged UNet,
    its ratio and merged blocks too."""
    pipe.replace_unet(xml)
    images, measured = runner.seeded_images(pipe, prompts, call, name, progress=progress)
    if name != "f32":
        manifest = read_json(xml.parent / MANIFEST)
        measured.update(ratio=manifest["ratio"], merged_blocks=manifest["merged_blocks"])
    return images, measured


def format_table(result: dict) -> str:
    """The rows of :func:`measure` as a text table."""
    columns = [*runner.seeded_columns(18), Column("s/image", number("s_per_image", ".4f"), width=8)]
    return runner.format_table(result["rows"], columns, text=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description="Token merging's quality cost on a trained sdaccel.toy.dataset checkpoint (f32). "
        "Tiny-model timings do not transfer to real model sizes: benchmarks/bench_openvino.py "
        "--levers tome times the real SD 1.5 UNet."
    )
    parser.add_argument("--checkpoint", required=True, help="e.g. checkpoints/tiny-shapes-sd15")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.3, 0.5])
    parser.add_argument("--out", default="build/tome.json", help="JSON, one entry per checkpoint")
    parser.add_argument("--workdir", default=None, help="default build/tome/<checkpoint name>")
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--guidance", type=float, default=6.0)
    args = parser.parse_args(argv)
    result = measure(
        args.checkpoint,
        args.workdir,
        ratios=args.ratios,
        num_prompts=args.prompts,
        steps=args.steps,
        guidance_scale=args.guidance,
    )

    return finish(
        result, args.out, format_table(result), "sdaccel.toy.tome_quality", argv, per_checkpoint=True
    )


if __name__ == "__main__":
    main(sys.argv[1:])
