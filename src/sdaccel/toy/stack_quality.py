"""The speed-ups stacked on a trained shapes checkpoint: each lever added to the ones before it,
and every stack judged by prompt adherence and by PSNR/SSIM against f32, all in one run.

The levers, in the order they are stacked (each one alone keeps the picture: notebooks 05 and 06):

1. **static shapes**: the UNet compiled for the one batch and size it runs at
   (``OVPipeline.from_pretrained(..., static=...)``);
2. **INT8**: full INT8 with the named layer groups kept in float (the recipe of
   :mod:`sdaccel.toy.sensitivity_quality`, with the groups given by name; by default the ResNets);
3. **token merging** at ``ratio`` (:mod:`sdaccel.cpu.tome`): the merged UNet, quantized with the
   same recipe and calibration data;
4. **DeepCache** at ``interval`` (:mod:`sdaccel.cpu.deepcache`): its two IRs traced with the same
   token merging (:func:`sdaccel.cpu.tome.export_tome` with ``deepcache=True``) and quantized the
   same way, and compiled static like the UNet before it. ``cut="layer"`` cuts the UNet at its last
   layer, as the DeepCache paper does by default, instead of at its last up block: a much cheaper
   shallow step for a staler cached feature (not with token merging, whose DeepCache IRs are cut
   at the block). INT8 quantizes the layer cut's full IR only
   (:data:`sdaccel.cpu.deepcache.QUANTIZED_PARTS`): its shallow IR, one layer, stays in float.

:func:`fastest_within` picks the fastest stack whose adherence is at most ``max_drop`` below f32:
"fastest" always within a stated quality bound. Image ``i`` is seeded with ``i`` in every row, so
rows differ only by their levers. Every pipeline is compiled with ``INFERENCE_PRECISION_HINT=f32``:
the INT8 layers run in INT8, the rest in f32.

    python -m sdaccel.toy.stack_quality checkpoints/tiny-shapes-sd15 --prompts 48

The toy's seconds are a toy's (a 1 M-parameter UNet's call is mostly fixed cost): they show the
direction, not the size, of a real UNet's change. ``benchmarks/bench_openvino.py`` times the
levers on the real SD 1.5 UNet.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

from sdaccel.core.checkpoint import resolve_checkpoint
from sdaccel.cpu.deepcache import (
    CUTS,
    QUANTIZED_PARTS,
    DeepCache,
    check_cut,
    export_deepcache,
    lever_name,
    quantize_deepcache,
)
from sdaccel.cpu.export import MODEL_XML, checkpoint_defaults, export_pipeline, text_to_image_components
from sdaccel.cpu.pipeline import OVPipeline
from sdaccel.cpu.quantize import SENSITIVE_LAYER_PATTERNS, describe_ir
from sdaccel.cpu.quantize_parts import quantize_ir
from sdaccel.cpu.sensitivity import float_group_patterns
from sdaccel.cpu.tome import check_ratio, export_tome
from sdaccel.toy import dataset, runner
from sdaccel.toy.calibration import calibrate_on_training_captions
from sdaccel.toy.report import finish
from sdaccel.toy.runner import Column, number

#: The float layer groups of the default INT8 recipe: every ResNet (on the toys, full INT8 with
#: the ResNets in float keeps the adherence of f32: ``python -m sdaccel.toy.adherence``).
FLOAT_GROUPS = ("resnets",)
#: The levers, in the order they are stacked (:func:`measure` takes any of them, in this order).
LEVERS = ("static", "int8", "tome", "deepcache")
#: The first row: no lever.
BASE = "f32"


def stack_names(ratio: float, interval: int, levers: Sequence[str] = LEVERS, cut: str = "block") -> list[str]:
    """The rows of :func:`measure`, in stacking order: each adds one lever to the row before."""

    label = {
        "static": "+ static shapes",
        "int8": "+ INT8",
        "tome": f"+ token merging {ratio:g}",
        "deepcache": f"+ {lever_name(interval, cut)}",
    }
    return [BASE, *(label[lever] for lever in levers)]


def recipe_patterns(float_groups: Sequence[str]) -> list[str]:
    """The ignored-scope patterns of the INT8 recipe: the layers every recipe keeps in float
    (:data:`sdaccel.cpu.quantize.SENSITIVE_LAYER_PATTERNS`), then the ``float_groups`` by name, as
    :func:`sdaccel.cpu.sensitivity.float_group_patterns` writes a ranking's groups."""

    groups = [{"group": g} for g in float_groups]
    return [*SENSITIVE_LAYER_PATTERNS, *float_group_patterns(groups, len(groups))]


def check_request(
    ratio: float,
    interval: int,
    num_prompts: int,
    steps: int,
    max_drop: float,
    float_groups,
    levers,
    cut: str = "block",
) -> float:
    """Refuse a bad request before anything is exported or written; returns the checked ratio."""

    if isinstance(levers, str) or not levers or list(levers) != [x for x in LEVERS if x in levers]:
        raise ValueError(f"levers must be some of {list(LEVERS)}, in that order, got {levers!r}.")
    if check_cut(cut) != "block" and "tome" in levers and "deepcache" in levers:
        raise ValueError(
            f"token merging's DeepCache IRs are cut at the block; cut={cut!r} stacks without 'tome'."
        )
    ratio = check_ratio(ratio)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 2:
        raise ValueError(
            f"interval must be an integer of at least 2 (1 runs no cached step), got {interval!r}."
        )
    if num_prompts < 1 or steps < 1:
        raise ValueError(f"num_prompts and steps must be >= 1, got {num_prompts} and {steps}.")
    if not 0 <= max_drop < 1:
        raise ValueError(
            f"max_drop is a drop in adherence, between 0 and 1 (0.02: 2 points), got {max_drop!r}."
        )
    if isinstance(float_groups, str) or not all(isinstance(g, str) and g for g in float_groups):
        raise ValueError(
            f"float_groups must be a list of layer-group names, e.g. ['resnets'], got {float_groups!r}."
        )
    return ratio


def measure(
    checkpoint: str | os.PathLike,
    work_dir: str | os.PathLike,
    *,
    export_dir: str | os.PathLike | None = None,
    num_prompts: int = 48,
    steps: int = 20,
    guidance_scale: float = 6.0,
    levers: Sequence[str] = LEVERS,
    ratio: float = 0.5,
    interval: int = 2,
    cut: str = "block",
    float_groups: Sequence[str] = FLOAT_GROUPS,
    max_drop: float = 0.02,
    calibration_prompts: int = 16,
    calibration_samples: int = 100,
    progress: bool = False,
) -> dict:
    """Stack ``levers`` one by one on ``checkpoint`` (any of :data:`LEVERS`, in that order; see
    the module doc) and judge each stack on ``num_prompts`` held-out prompts. Returns
    ``{"rows": {name: row}, "fastest": name, "settings": ...}``; each row has the adherence
    (:func:`sdaccel.toy.dataset.adherence`), PSNR/SSIM against the f32 images, UNet calls per image
    (full / shallow), the median seconds per image (whole pipeline and UNet alone), ``x_f32`` (the
    UNet's speed-up over f32) and ``within`` (adherence at most ``max_drop`` below f32).

    The f32 export goes to ``export_dir`` (default ``<work_dir>/export``; an export of the same
    checkpoint is reused, and the merged UNets go into it), calibration data and INT8 IRs to
    ``work_dir``. Calibration uses ``calibration_prompts`` *training* captions, never held-out ones.
    """

    # 1. Check the request, before anything is exported or written
    ratio = check_request(ratio, interval, num_prompts, steps, max_drop, float_groups, levers, cut)
    src = resolve_checkpoint(checkpoint)
    size, work = square_size(src), Path(work_dir)

    # 2. The f32 export, and the UNets the levers ask for
    export = export_pipeline(
        src, Path(export_dir) if export_dir else work / "export", components=text_to_image_components(src),
        progress=progress,
    )  # fmt: skip
    unets = export_unets(src, export, levers, ratio, size, cut)
    dynamic = OVPipeline.from_pretrained(export, precision="f32")

    # 3. INT8: one recipe, applied alike to every UNet, on the same calibration data
    call = {"steps": steps, "guidance_scale": guidance_scale, "height": size, "width": size}
    ignored = recipe_patterns(float_groups) if "int8" in levers else None
    if ignored is not None:
        samples = (calibration_prompts, calibration_samples)
        quantize_unets(unets, dynamic, work, call, samples, ignored, cut, progress)

    # 4. The stack, lever by lever, and the held-out prompts through each, scored against the
    #    prompts and the f32 images
    names = stack_names(ratio, interval, levers, cut)
    stack, static = stack_table(names, levers, unets, dynamic, export, size, interval)
    int8_unet = None if ignored is None else unets["plain"]
    rows = run_stacks(stack, names, static, dataset.heldout_prompts(num_prompts), call, progress, int8_unet)

    # 5. Speed against f32, the quality bound, and the fastest stack within it
    judge_speed(rows, max_drop)
    settings = {
        "num_prompts": num_prompts,
        "prompts": "sdaccel.toy.dataset.heldout_prompts(num_prompts), image i seeded with i",
        **call,
        **{"ratio": ratio, "interval": interval, "cut": cut, "levers": list(levers)},
        "int8": None
        if ignored is None
        else {"variant": "full_int8", "float_groups": list(float_groups), "ignored": ignored},
        "precision": "f32 (INFERENCE_PRECISION_HINT) everywhere; INT8 layers run in INT8",
        "max_drop": max_drop,
        "calibration_prompts": calibration_prompts,
        "calibration_samples": calibration_samples,
    }
    fastest = fastest_within(rows, max_drop)
    return {"checkpoint": str(src), "settings": settings, "rows": rows, "fastest": fastest}


def square_size(src: Path) -> int:
    """The checkpoint's image side; the stack takes square images only."""

    defaults = checkpoint_defaults(src)
    if defaults.height != defaults.width:
        raise ValueError(
            f"the stack takes square images; {src.name} makes {defaults.height}x{defaults.width}."
        )
    return defaults.height


def export_unets(src: Path, export: Path, levers: Sequence[str], ratio: float, size: int, cut: str) -> dict:
    """The UNets the levers ask for, by role: ``"plain"`` (the export's), ``"merged"`` (token
    merging), ``"deepcache"`` (DeepCache's two IRs; merged too with token merging)."""

    merge = "tome" in levers
    unets = {"plain": export / "unet" / MODEL_XML}
    if merge:
        unets["merged"] = export_tome(src, export, ratio, size, size) / MODEL_XML
    if "deepcache" in levers:
        unets["deepcache"] = (
            export_tome(src, export, ratio, size, size, deepcache=True)
            if merge
            else export_deepcache(src, export, cut=cut)
        )
    return unets


def quantize_unets(unets: dict, pipe, work: Path, call: dict, samples, ignored, cut: str, progress: bool):
    """Calibrate ``pipe`` on training captions (``samples``: prompts and UNet inputs), then quantize
    each of ``unets`` to full INT8 with ``ignored`` in float, replacing each entry by its INT8 IR.
    NNCF's bars only where asked for (quantize_ir's progress): in a notebook each pass would print
    a bar of its own."""

    prompts, subset = samples
    calibration = calibrate_on_training_captions(
        pipe, work / "calibration", call["steps"], call["guidance_scale"], call["height"],
        prompts=prompts, samples=subset, progress=progress,
    )  # fmt: skip
    for name, source in list(unets.items()):
        if name == "deepcache":
            unets[name] = work / ("deepcache_int8" if cut == "block" else f"deepcache_{cut}_int8")
            quantize_deepcache(
                source, unets[name], calibration, subset_size=subset,
                parts=QUANTIZED_PARTS[cut], ignored=ignored, progress=progress,
            )  # fmt: skip
        else:
            unets[name] = work / f"unet_{name}_int8" / MODEL_XML
            quantize_ir(
                source, unets[name], "full_int8", calibration.folder, subset,
                ignored=ignored, progress=progress,
            )  # fmt: skip


def stack_table(names, levers, unets: dict, dynamic, export: Path, size: int, interval: int):
    """The stack, lever by lever: name -> (pipeline, the UNet it runs or None, DeepCache or None),
    and the static pipeline (None without static shapes)."""

    static = None
    if "static" in levers:
        static = OVPipeline.from_pretrained(export, precision="f32", static=(1, size, size))
    stack = {BASE: (dynamic, None, None)}
    pipe, unet = dynamic, export / "unet" / MODEL_XML
    for name, lever in zip(names[1:], levers, strict=True):
        if lever == "deepcache":  # its own two IRs, compiled as the pipeline compiles its UNet
            stack[name] = (pipe, None, DeepCache.load(unets["deepcache"], pipe, interval=interval))
            continue
        pipe = static if lever == "static" else pipe
        unet = {"int8": unets["plain"], "tome": unets.get("merged")}.get(lever, unet)
        stack[name] = (pipe, unet, None)
    return stack, static


def run_stacks(stack: dict, names: list[str], static, prompts: list[str], call, progress, int8_unet) -> dict:
    """The held-out prompts through each stack (:func:`stack_table`), scored against the prompts
    and the f32 images; each row names its levers and its shapes, and the INT8 row its
    FakeQuantize count (``int8_unet``: the INT8 UNet, or None)."""

    table = {
        name: partial(run_stack, name, pipe, unet, cache, prompts, call, progress)
        for name, (pipe, unet, cache) in stack.items()
    }
    rows, _ = runner.score(table, prompts, runner.seeded_row, references=(BASE,))
    for name, row in rows.items():
        row["levers"] = [label.removeprefix("+ ") for label in names[1 : names.index(name) + 1]]
        row["shapes"] = "static" if stack[name][0] is static else "dynamic"
    if int8_unet is not None:
        rows["+ INT8"]["fake_quantize"] = describe_ir(int8_unet)["fake_quantize"]
    return rows


def judge_speed(rows: dict, max_drop: float) -> None:
    """Each row's UNet speed-up over f32 (``x_f32``) and whether its adherence is within
    ``max_drop`` of f32's (``within``)."""
    base = rows[BASE]
    for row in rows.values():
        row["x_f32"] = base["unet_s_per_image"] / row["unet_s_per_image"]
        row["within"] = row["adherence"]["score"] >= base["adherence"]["score"] - max_drop


def run_stack(name: str, pipe, unet, cache, prompts: list[str], call: dict, progress: bool):
    """One stack's images (its UNet swapped in, when it names one) and what they measured."""
    if unet is not None:
        pipe.replace_unet(unet)
    return runner.seeded_images(pipe, prompts, call, name, cache, progress, calls=True)


def fastest_within(rows: Mapping[str, Mapping], max_drop: float, base: str = BASE) -> str:
    """The row with the shortest UNet time per image among those whose adherence is at most
    ``max_drop`` below ``base``'s (``base`` itself always is)."""
    if base not in rows:
        raise KeyError(f"no {base!r} row to measure the drop from; rows: {list(rows)}")
    floor = rows[base]["adherence"]["score"] - max_drop
    kept = [name for name, row in rows.items() if row["adherence"]["score"] >= floor]
    return min(kept, key=lambda name: rows[name]["unet_s_per_image"])


def format_table(result: dict) -> str:
    """The stack as a Markdown table, then the fastest stack within the bound."""
    s = result["settings"]
    bound = f"{100 * s['max_drop']:g}"
    columns = [
        Column("stack", runner.name_cell, "l"),
        Column(f"adherence ({s['num_prompts']} prompts)", number("adherence.score", ".3f")),
        Column("PSNR vs f32 dB", number("psnr_mean", ".1f")),
        Column("SSIM", number("ssim_mean", ".3f")),
        Column("UNet calls full / shallow", calls_cell),
        Column("UNet ms/image", number("unet_s_per_image", ".1f", scale=1000)),
        Column("x f32", lambda name, row: f"{row['x_f32']:.2f}x"),
        Column(f"within {bound} points", lambda name, row: "yes" if row["within"] else "no", "c"),
    ]
    table = runner.format_table(result["rows"], columns)
    return (
        f"{table}\n\nfastest within {bound} adherence points of f32: {result['fastest']}\n"
        "(the milliseconds of a tiny trained model of 1 M parameters, mostly fixed cost per call: "
        "benchmarks/bench_openvino.py --levers stack times the real UNet)"
    )


def calls_cell(name: str, row: dict) -> str:
    """A cell: the UNet calls per image, full / shallow."""
    calls = row["unet_calls_per_image"]
    return f"{calls['full']:g} / {calls['shallow']:g}"


def main(argv: list[str] | None = None) -> dict:

    parser = argparse.ArgumentParser(
        description="Stack static shapes, INT8, token merging and DeepCache on a trained shapes checkpoint, "
        "and judge each stack's adherence (its seconds are a toy's)."
    )
    parser.add_argument("checkpoint", help="e.g. checkpoints/tiny-shapes-sd15")
    parser.add_argument("--prompts", type=int, default=48, help="held-out prompts that judge each stack")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ratio", type=float, default=0.5, help="token-merging ratio")
    parser.add_argument("--interval", type=int, default=2, help="DeepCache interval N")
    parser.add_argument(
        "--deepcache-cut", choices=CUTS, default="block",
        help="where DeepCache cuts the UNet: at its last up block, or at that block's last layer",
    )  # fmt: skip
    parser.add_argument(
        "--float-groups", nargs="+", default=list(FLOAT_GROUPS),
        help="layer groups the INT8 recipe keeps in float (the sensitivity ranking's names)",
    )  # fmt: skip
    parser.add_argument(
        "--levers", nargs="+", choices=LEVERS, default=list(LEVERS), help="the levers to stack, in this order"
    )
    parser.add_argument("--max-drop", type=float, default=0.02, help="the quality bound (0.02: 2 points)")
    parser.add_argument("--work-dir", default=None, help="default build/stack/<checkpoint name>")
    parser.add_argument("--out", default=None, help="JSON (default: stack.json in the work folder)")
    args = parser.parse_args(argv)

    work = Path(args.work_dir or Path("build") / "stack" / Path(args.checkpoint).name)
    result = measure(
        args.checkpoint, work, num_prompts=args.prompts, steps=args.steps, ratio=args.ratio,
        interval=args.interval, cut=args.deepcache_cut, float_groups=args.float_groups, levers=args.levers,
        max_drop=args.max_drop,
        progress=True,
    )  # fmt: skip
    return finish(
        result, Path(args.out or work / "stack.json"), format_table(result), "sdaccel.toy.stack_quality", argv
    )


if __name__ == "__main__":
    main()
