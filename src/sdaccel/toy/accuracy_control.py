"""Accuracy-controlled INT8 (:mod:`sdaccel.cpu.accuracy_control`) on a trained shapes checkpoint:
NNCF keeps the UNet's prompt adherence within ``max_drop`` of f32, and the result is judged on
held-out prompts that the search never saw.

    python -m sdaccel.toy.accuracy_control --checkpoint checkpoints/tiny-shapes-sd15 --out build/accuracy_control.json
    python -m sdaccel.toy.accuracy_control --checkpoint checkpoints/tiny-shapes-sd15 \
        --replay benchmarks/results/accuracy_control_tiny-shapes-sd15.json   # that search's result, judged here

1. Export the checkpoint in f32 and calibrate on training captions (as :mod:`sdaccel.toy.adherence`).
2. Split ``heldout_prompts(2n)`` in two halves, each with its own noise: the first ``n`` validate
   the search (:class:`AdherenceValidation`), the other ``n`` judge its result.
3. The search (:func:`sdaccel.cpu.accuracy_control.quantize_with_accuracy_control`).
4. The result replayed: plain INT8 of the same recipe with the operations the search reverted
   ignored (:func:`sdaccel.cpu.accuracy_control.replay_ignored`), the recipe that
   ``benchmarks/bench_openvino.py``'s ``full_int8_accuracy_control`` gives the real-size UNet
   of this layout, whose search would take hours.
5. On the judging half: the adherence of f32, plain INT8 of the same recipe, the
   accuracy-controlled UNet and its replay, their PSNR against f32, and seconds per UNet call of
   each (the plugin's default precision; :func:`sdaccel.cpu.quantize.time_unet`), with "best
   float" the faster of f32 and that default.

The toy's seconds are a toy's: they show the direction, not the size, of a real UNet's change.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import read_config, resolve_checkpoint
from sdaccel.cpu import accuracy_control, quantize, quantize_parts
from sdaccel.cpu.export import export_pipeline, text_to_image_components, vae_scale_factor_of
from sdaccel.cpu.pipeline import OVPipeline
from sdaccel.cpu.quantize import time_unet
from sdaccel.toy import dataset, runner
from sdaccel.toy.calibration import calibrate_on_training_captions
from sdaccel.toy.comparison import paired_latents, uint8_images
from sdaccel.toy.report import finish
from sdaccel.toy.runner import UNET_COLUMNS, Column, item_score, number

#: How every search is validated (recorded in each result's settings).
HOW = {
    "metric": "adherence + 0.002 x min(PSNR vs f32, 60 dB) / 60 dB (AdherenceValidation)",
    "validation_precision": "f32 hint, INT8 layers in INT8 (as NNCF compiles the candidates)",
    "smooth_quant": "off (a reverted MatMul would keep its smoothed input)",
}


class AdherenceValidation:
    """The validation function of the search: ``validate(compiled_unet, items)`` generates the
    images of ``items`` (indices into ``prompts``) with the candidate UNet in ``pipe`` and returns
    ``(metric, per-item values)``.

    Per item (:func:`sdaccel.toy.runner.item_score`): ``hit + PSNR_WEIGHT * min(PSNR, PSNR_CAP_DB) /
    PSNR_CAP_DB``, where ``hit`` is 1 when the image's colour and shape match its prompt
    (:func:`sdaccel.toy.dataset.adherence`) and PSNR is against the f32 UNet's image from the same
    noise (``inf``, so full, for f32 itself). The metric is their mean: adherence plus at most 0.002.
    Adherence alone is too coarse to rank NNCF's groups on a few items (steps of 1/n, most groups
    tie); the PSNR term breaks the ties and never outweighs one image's hit. It can only add to a drop
    (f32 has the full term), so a result within ``max_drop`` of this metric is within ``max_drop`` in
    adherence.
    """

    def __init__(self, pipe, prompts: Sequence[str], latents, steps: int, guidance_scale: float, size: int):
        self.pipe, self.prompts, self.latents = pipe, list(prompts), np.asarray(latents)
        self.call = dict(steps=steps, guidance_scale=guidance_scale, height=size, width=size)
        self.items = list(range(len(self.prompts)))
        self.reference = self.images(pipe.unet, self.items)

    def images(self, unet, items: Sequence[int]) -> list[np.ndarray]:
        """The images of ``items`` with ``unet`` (compiled, or a path) in the pipeline."""
        self.pipe.replace_unet(unet)
        prompts = [self.prompts[i] for i in items]
        return uint8_images(self.pipe.generate(prompts, latents=self.latents[list(items)], **self.call).array)

    def __call__(self, compiled, items) -> tuple[float, list[float]]:
        items = list(items)
        images = self.images(compiled, items)
        values = [
            item_score(image, self.prompts[i], self.reference[i])
            for i, image in zip(items, images, strict=True)
        ]
        return float(np.mean(values)), values


def split_heldout(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``heldout_prompts(2n)`` in two halves: the search's and the judge's, which share no
    prompt (so ``2n`` is at most the number of held-out combinations, 63)."""
    most = len(dataset.heldout_combinations()) // 2
    if not 1 <= n <= most:
        raise ValueError(
            f"{n} prompts per half: use 1 to {most}, so that the prompts that judge the search are "
            "not among those it validated on (the held-out split has 63 combinations)."
        )
    prompts = dataset.heldout_prompts(2 * n, seed=seed)
    return prompts[:n], prompts[n:]


def replay_row(variant: str) -> str:
    """The row of the search's result replayed as an ignored scope (step 4)."""
    return f"{variant}, accuracy control replayed"


def judge(pipe, unets: dict, prompts, latents, steps: int, guidance_scale: float, size: int) -> dict:
    """Adherence of each UNet on the judging prompts, and PSNR against the first (f32)."""
    call = dict(steps=steps, guidance_scale=guidance_scale, size=size)
    table = {name: partial(judged_images, pipe, xml, prompts, latents, call) for name, xml in unets.items()}
    rows, _ = runner.score(table, prompts, runner.adherence_row, references=list(unets)[:1])
    return rows


def judged_images(pipe, unet, prompts, latents, call: dict) -> tuple[list, dict]:
    """The images of ``prompts`` with ``unet`` in ``pipe``, from ``latents``; nothing else measured."""
    pipe.replace_unet(unet)
    return runner.paired_images(pipe, prompts, latents, **call), {}


def speeds(rows: dict, unets: dict, sample: dict, iters: int) -> None:
    """Seconds per UNet call of each row (plugin default precision), f32 also at the f32 hint;
    ``x_best_float`` against the faster float."""

    for name, xml in unets.items():
        timed = time_unet(xml, sample, iters=iters)
        rows[name].update(unet_s=timed["median_s"], precision=timed["precision"])
    f32 = time_unet(unets["f32"], sample, iters=iters, precision="f32")["median_s"]
    best = min(f32, rows["f32"]["unet_s"])
    for row in rows.values():
        row["x_best_float"] = best / row["unet_s"]


def measure(
    checkpoint: str | os.PathLike,
    work_dir: str | os.PathLike,
    variant: str = "full_int8",
    max_drop: float = 0.02,
    num_prompts: int = 24,
    steps: int = 20,
    guidance_scale: float = 6.0,
    seed: int = 0,
    ranking_subset_size: int | None = 8,
    max_num_iterations: int = 10,
    timing_iters: int = 20,
    replay: Mapping | None = None,
) -> dict:
    """Steps 1-5 of the module docstring; returns ``{"search": report, "rows": {"f32",
    "<variant>", "<variant>, accuracy control", "<variant>, accuracy control replayed"}, "settings":
    ...}`` (no replayed row when plain INT8 met the bound).

    ``replay``, the ``search`` of an earlier result (from another CPU, say), skips step 3's search
    and replays its reverted operations instead: ``"search"`` is then ``None``, ``"replayed"`` is
    ``replay``, and there is no accuracy-control row."""

    # 1. The f32 export, its pipeline and the calibration set (checks first: nothing runs for a bad bound)
    accuracy_control.check_request(variant, max_drop, [None], lambda *_: 0.0)
    check_replay_of(replay, variant)
    search_prompts, judge_prompts = split_heldout(num_prompts, seed)
    folder = resolve_checkpoint(checkpoint)
    size = read_config(folder, "unet")["sample_size"] * vae_scale_factor_of(folder, "vae")
    work = Path(work_dir)
    export_dir = work / "openvino"
    export_pipeline(
        folder, export_dir, components=text_to_image_components(folder), weight_dtype="fp32", progress=False
    )
    unet_xml = export_dir / "unet" / "openvino_model.xml"
    if replay is not None:  # a search of another layout: refused before calibration and quantization
        accuracy_control.check_replay(unet_xml, replay["reverted"])
    pipe = OVPipeline.from_pretrained(export_dir, precision="f32")
    common = dict(steps=steps, guidance_scale=guidance_scale, size=size)
    calibration = calibrate_on_training_captions(pipe, work / "calibration", **common, seed=seed)

    # 2. Two halves of the held-out prompts, each with its own noise
    noise = paired_latents(folder, 2 * num_prompts, size, seed)

    # 3. The search (unless one is replayed), and plain INT8 of the same recipe beside it
    plain = work / f"unet_{variant}.xml"  # the same knobs: SmoothQuant off (the search needs it off)
    knobs = {"smooth_quant_alpha": None} if variant == "full_int8" else {}  # hybrid has SmoothQuant off
    unets = {"f32": unet_xml, variant: plain}
    search = None
    if replay is None:
        validate = AdherenceValidation(pipe, search_prompts, noise[:num_prompts], **common)
        controlled = work / f"unet_{variant}_accuracy_control.xml"
        limits = (ranking_subset_size, max_num_iterations)
        search = run_search(unet_xml, controlled, variant, calibration, validate, max_drop, limits)
        unets[f"{variant}, accuracy control"] = controlled
    quantize_parts.quantize_ir(unet_xml, plain, variant, calibration.folder, subset_size=64, **knobs)

    # 4. The search's result replayed as plain INT8 with its reverted operations ignored: the
    #    recipe a real-size UNet of this layout gets (benchmarks/bench_openvino.py), judged here too
    reverted = (replay or search)["reverted"]
    if reverted:
        unets[replay_row(variant)] = quantize_replayed(unet_xml, work, variant, calibration, reverted, knobs)

    # 5. Judged on the other half, and timed
    rows = judge(pipe, unets, judge_prompts, noise[num_prompts:], **common)
    speeds(rows, unets, next(iter(calibration)), timing_iters)
    for name, xml in unets.items():  # after the speeds, as the rows have always read
        rows[name]["fake_quantize"] = quantize.describe_ir(xml)["fake_quantize"]
    settings = {
        **{"checkpoint": str(checkpoint), "variant": variant, "max_drop": max_drop},
        "search_prompts": search_prompts,
        "judge_prompts": num_prompts,
        **{**common, "seed": seed},  # steps, guidance_scale, size, seed
        **HOW,
    }
    return {"settings": settings, "search": search, "replayed": replay, "rows": rows}


def check_replay_of(replay: Mapping | None, variant: str) -> None:
    """Refuse a replayed search of another recipe, or one that reverted nothing."""
    if replay is not None and (replay.get("variant") != variant or not replay.get("reverted")):
        raise ValueError(
            f"Nothing to replay for {variant}: the result's search ran {replay.get('variant')!r} and "
            f"reverted {len(replay.get('reverted') or [])} operations; replay a {variant} search that reverted some."
        )


def quantize_replayed(unet_xml: Path, work: Path, variant: str, calibration, reverted, knobs: dict) -> Path:
    """Step 4: plain INT8 of ``variant`` with the ``reverted`` operations ignored (and the plain
    row's ``knobs``); returns the IR's path."""

    replayed = work / f"unet_{variant}_replayed.xml"
    ignored = accuracy_control.replay_ignored(reverted)
    quantize_parts.quantize_ir(
        unet_xml, replayed, variant, calibration.folder, subset_size=64, ignored=ignored, **knobs
    )
    return replayed


def run_search(unet_xml, controlled, variant: str, calibration, validate, max_drop: float, limits) -> dict:
    """Step 3's search (:func:`sdaccel.cpu.accuracy_control.quantize_with_accuracy_control`) of
    ``unet_xml`` into ``controlled``, SmoothQuant off; ``limits``: the ranking subset size and the
    most iterations."""

    ranking_subset_size, max_num_iterations = limits
    return accuracy_control.quantize_with_accuracy_control(
        unet_xml,
        controlled,
        variant,
        calibration.folder,
        validate.items,
        validate,
        max_drop,
        subset_size=64,
        ranking_subset_size=ranking_subset_size,
        max_num_iterations=max_num_iterations,
        smooth_quant_alpha=None,
    )


def format_table(result: dict) -> str:
    """The rows (adherence on the judging prompts, PSNR, FakeQuantize, UNet call, x best float),
    then what the search reverted."""
    s, search, replayed = result["settings"], result["search"], result.get("replayed")
    columns = [
        Column("UNet", runner.name_cell, "l"),
        Column(f"adherence ({s['judge_prompts']} other held-out prompts)", number("adherence", ".3f")),
        *UNET_COLUMNS,
        Column("x best float", lambda name, row: f"{row['x_best_float']:.2f}x"),
    ]
    table = runner.format_table(result["rows"], columns)
    if replayed is not None:
        found_on = replayed.get("found_on", "an earlier run")
        return (
            f"{table}\n\nNo search: the {len(replayed['reverted'])} operations that a search on {found_on} "
            f"reverted to float were replayed: {', '.join(replayed['reverted'])}"
        )
    if search["quantized_operations"] is None:
        reverted = "plain INT8 met the bound: no quantized operations reverted to float"
    else:
        reverted = (
            f"{len(search['reverted'])} of {search['quantized_operations']} quantized operations "
            f"reverted to float: {', '.join(search['reverted'])}"
        )
    return (
        f"{table}\n\nSearch ({len(s['search_prompts'])} other held-out prompts): metric f32 "
        f"{search['metric_f32']:.3f}, plain {search['metric_plain']:.3f}, result {search['metric']:.3f} "
        f"(max_drop {search['max_drop']}), {search['search_s']:.0f} s; {reverted}"
    )


def replayed_search(path: str | os.PathLike) -> dict | str:
    """The ``search`` of a JSON this module wrote, with the CPU it was found on (``found_on``), or
    what is wrong with the file."""

    try:
        found = json.loads(Path(path).read_text())
        search, machine = found["search"], found["machine"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{path} is not a result of python -m sdaccel.toy.accuracy_control ({error})"
    if search is None:
        return f"{path} replayed a search itself: replay the file that search was written to"
    return {**search, "found_on": f"{machine['cpu']} ({machine['isa']})", "file": Path(path).name}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description="Accuracy-controlled INT8 of a trained shapes checkpoint's UNet, judged on held-out "
        "prompts the search never saw (its seconds are a toy's)."
    )
    parser.add_argument("--checkpoint", required=True, help="e.g. checkpoints/tiny-shapes-sd15")
    parser.add_argument("--variant", default="full_int8", choices=["full_int8", "hybrid"])
    parser.add_argument("--max-drop", type=float, default=0.02, help="adherence drop allowed (default 0.02)")
    parser.add_argument(
        "--prompts", type=int, default=24, help="held-out prompts to search, as many to judge"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ranking-subset", type=int, default=8, help="prompts that rank each group")
    parser.add_argument("--max-iterations", type=int, default=10, help="groups reverted at most")
    parser.add_argument(
        "--replay",
        default=None,
        help="a JSON this command wrote: replay its search's reverted operations instead of searching "
        "(the recipe found on another CPU, judged on this one)",
    )
    parser.add_argument("--work-dir", default=None, help="default build/accuracy_control/<checkpoint name>")
    parser.add_argument(
        "--out", default=None, help="JSON (default: accuracy_control.json in the work folder)"
    )
    args = parser.parse_args(argv)
    if (
        not 0 < args.max_drop < 1
        or min(args.prompts, args.steps, args.ranking_subset, args.max_iterations) < 1
    ):
        parser.error(
            "--max-drop must be in (0, 1); --prompts, --steps, --ranking-subset, --max-iterations >= 1"
        )
    replay = None
    if args.replay is not None:
        replay = replayed_search(args.replay)
        if isinstance(replay, str):
            parser.error(f"--replay: {replay}")

    work = Path(args.work_dir or Path("build") / "accuracy_control" / Path(args.checkpoint).name)
    result = measure(
        args.checkpoint,
        work,
        args.variant,
        args.max_drop,
        args.prompts,
        args.steps,
        ranking_subset_size=args.ranking_subset,
        max_num_iterations=args.max_iterations,
        replay=replay,
    )
    out = Path(args.out or work / "accuracy_control.json")
    return finish(result, out, format_table(result), "sdaccel.toy.accuracy_control", argv)


if __name__ == "__main__":
    main()
