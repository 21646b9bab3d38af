"""The sensitivity ranking (:mod:`sdaccel.cpu.sensitivity`) on a trained shapes checkpoint, and
what the recipe "full INT8, the k most sensitive groups in float" keeps of the picture.

1. Export the checkpoint in f32, calibrate on training captions (as :mod:`sdaccel.toy.adherence`).
2. Rank the layer groups: each group alone in INT8, scored by the adherence of the images it
   generates on ``rank_prompts`` held-out prompts, and by the error of the UNet's output.
3. For each ``k``, quantize full INT8 with the ``k`` costliest groups in float, and score it,
   beside f32 and plain full INT8, on *other* held-out prompts (another seed: the prompts and
   noise that chose the groups are not the ones that judge them), with its PSNR against f32 and
   the time of one UNet call at the plugin's default precision.

    python -m sdaccel.toy.sensitivity_quality checkpoints/tiny-shapes-sd15 --prompts 96

The toy's seconds are a toy's: they show the direction, not the size, of a real UNet's change.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial
from pathlib import Path

from sdaccel.core.checkpoint import read_config, resolve_checkpoint
from sdaccel.cpu import quantize, quantize_parts, sensitivity
from sdaccel.cpu.calibration import collect_unet_inputs
from sdaccel.cpu.export import export_pipeline, text_to_image_components, vae_scale_factor_of
from sdaccel.cpu.pipeline import OVPipeline
from sdaccel.toy import dataset, runner
from sdaccel.toy.calibration import calibrate_on_training_captions
from sdaccel.toy.comparison import paired_latents
from sdaccel.toy.report import finish
from sdaccel.toy.runner import UNET_COLUMNS, Column, number


def measure(
    checkpoint: str | os.PathLike,
    work_dir: str | os.PathLike,
    num_prompts: int = 96,
    rank_prompts: int = 24,
    ks: tuple[int, ...] = (1, 2, 4),
    steps: int = 20,
    guidance_scale: float = 6.0,
    seed: int = 0,
    groups: tuple[str, ...] | None = None,
    progress: bool = False,
) -> dict:
    """Rank the groups (``groups``: only those, e.g. the ResNets; default every group), then score
    f32, full INT8 and each ``k``. Returns ``{"ranking": rows,
    "rows": {name: {"adherence", "psnr_mean", "float_groups", "fake_quantize", "unet_s",
    "precision"}}, "settings": ...}``."""

    # 1. The f32 export, its pipeline and the calibration set
    folder = resolve_checkpoint(checkpoint)
    size = read_config(folder, "unet")["sample_size"] * vae_scale_factor_of(folder, "vae")
    work = Path(work_dir)
    export_dir = work / "openvino"
    export_pipeline(folder, export_dir, components=text_to_image_components(folder), weight_dtype="fp32")
    unet_xml = export_dir / "unet" / "openvino_model.xml"
    pipe = OVPipeline.from_pretrained(export_dir, precision="f32")
    call = dict(steps=steps, guidance_scale=guidance_scale, size=size)
    calibration = calibrate_on_training_captions(
        pipe, work / "calibration", steps, guidance_scale, size, seed=seed
    )

    # 2. The ranking, on the first held-out set: adherence of each group alone, and output error
    ranking, rank_s = rank(pipe, unet_xml, calibration, folder, rank_prompts, call, seed, groups, progress)

    # 3. The recipes, judged on other prompts and noise
    judge = dataset.heldout_prompts(num_prompts, seed=seed + 1)
    judge_latents = paired_latents(folder, num_prompts, size, seed + 1000)
    recipes = {"f32": (None, []), "full_int8": ([*quantize.SENSITIVE_LAYER_PATTERNS], [])}
    for k in ks:
        kept = [r["group"] for r in ranking if r["group"] != sensitivity.OTHER][:k]
        ignored = [*quantize.SENSITIVE_LAYER_PATTERNS, *sensitivity.float_group_patterns(ranking, k)]
        recipes[f"full_int8, {k} most sensitive in float"] = (ignored, kept)
    sample = next(iter(calibration))
    table = {
        name: partial(run_recipe, pipe, unet_xml, work, calibration, sample, name, ignored, kept, judge,
                      judge_latents, call)
        for name, (ignored, kept) in recipes.items()
    }  # fmt: skip
    rows, _ = runner.score(table, judge, runner.adherence_row, references=("f32",))
    for row in rows.values():
        row["x_f32"] = rows["f32"]["unet_s"] / row["unet_s"]
    settings = {
        "checkpoint": str(checkpoint),
        "rank_prompts": rank_prompts,
        "judge_prompts": num_prompts,
        "steps": steps,
        "guidance_scale": guidance_scale,
        "size": size,
        "seed": seed,
        "groups": "all" if groups is None else list(groups),
        "rank_s": round(rank_s, 1),
    }
    return {"settings": settings, "ranking": ranking, "rows": rows}


def rank(pipe, unet_xml: Path, calibration, folder: Path, n: int, call: dict, seed: int, groups, progress):
    """The groups ranked (:func:`sdaccel.cpu.sensitivity.rank_groups`) on ``n`` held-out prompts:
    the adherence of the images with each group alone in INT8, and the error of the UNet's output;
    and the seconds the ranking took."""

    rank_set = dataset.heldout_prompts(n, seed=seed)
    rank_latents = paired_latents(folder, n, call["size"], seed)
    held_out_inputs = collect_unet_inputs(
        pipe, rank_set[:4], call["steps"], num_samples=8, guidance_scale=call["guidance_scale"],
        height=call["size"], width=call["size"], seed=seed, progress=False,
    )  # fmt: skip
    start = time.perf_counter()
    quantized = sensitivity.quantize_for_ranking(unet_xml, calibration, subset_size=64)

    def adherence_of(compiled) -> float:
        pipe.replace_unet(compiled)
        images = runner.paired_images(pipe, rank_set, rank_latents, **call)
        return dataset.adherence(images, rank_set)["score"]

    ranking = sensitivity.rank_groups(
        unet_xml, quantized, held_out_inputs, score=adherence_of, groups=groups, progress=progress
    )
    return ranking, time.perf_counter() - start


def run_recipe(pipe, unet_xml, work, calibration, sample, name, ignored, kept, prompts, latents, call):
    """One recipe's images of the judging prompts (its UNet quantized first, full INT8 with
    ``ignored`` in float; the f32 UNet when ``ignored`` is None), and what it measured: the groups
    kept in float, the FakeQuantize count and one UNet call's seconds."""

    xml = unet_xml
    if ignored is not None:
        xml = work / f"unet_{name.replace(', ', '_').replace(' ', '_')}.xml"
        quantize_parts.quantize_ir(
            unet_xml, xml, "full_int8", calibration.folder, subset_size=64, ignored=ignored
        )
    pipe.replace_unet(xml)
    images = runner.paired_images(pipe, prompts, latents, **call)
    timed = quantize.time_unet(xml, sample, iters=20)
    measured = {"float_groups": kept, "fake_quantize": quantize.describe_ir(xml)["fake_quantize"]}
    return images, {**measured, "unet_s": timed["median_s"], "precision": timed["precision"]}


def format_tables(result: dict) -> str:
    """The ranking, then the recipes (adherence, PSNR against f32, UNet time, speed-up)."""

    s = result["settings"]
    columns = [
        Column("UNet", runner.name_cell, "l"),
        Column(f"adherence ({s['judge_prompts']} other prompts)", number("adherence", ".3f")),
        *UNET_COLUMNS,
        Column("x f32", lambda name, row: f"{row['x_f32']:.2f}x"),
    ]
    recipes = runner.format_table(result["rows"], columns)
    ranking = sensitivity.format_table(
        result["ranking"], score_name=f"adherence ({s['rank_prompts']} prompts)"
    )
    return f"{ranking}\n\n{recipes}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description="Rank the UNet's layer groups by what full INT8 costs each, and score the recipe that "
        "keeps the k most sensitive in float (a trained shapes checkpoint; its seconds are a toy's)."
    )
    parser.add_argument("checkpoint", help="e.g. checkpoints/tiny-shapes-sd15")
    parser.add_argument("--prompts", type=int, default=96, help="held-out prompts that judge the recipes")
    parser.add_argument(
        "--rank-prompts", type=int, default=24, help="other held-out prompts that rank the groups"
    )
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4], help="groups kept in float")
    parser.add_argument("--groups", nargs="+", default=None, help="rank only these groups (default: all)")
    parser.add_argument("--work-dir", default=None, help="default build/sensitivity/<checkpoint name>")
    parser.add_argument("--out", default=None, help="JSON (default: sensitivity.json in the work folder)")
    args = parser.parse_args(argv)
    if min(args.prompts, args.rank_prompts) < 1 or min(args.k) < 0:
        parser.error("--prompts and --rank-prompts must be at least 1, and --k 0 or more")

    work = Path(args.work_dir or Path("build") / "sensitivity" / Path(args.checkpoint).name)
    groups = None if args.groups is None else tuple(args.groups)
    result = measure(
        args.checkpoint, work, args.prompts, args.rank_prompts, tuple(args.k), groups=groups, progress=True
    )
    out = Path(args.out or work / "sensitivity.json")
    return finish(result, out, format_tables(result), "sdaccel.toy.sensitivity_quality", argv)


if __name__ == "__main__":
    main()
