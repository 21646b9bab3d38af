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
from pathlib import Path

from sdaccel.core.tables import markdown_table

#: The float layer groups of the default INT8 recipe: every ResNet (on the toys, full INT8 with
#: the ResNets in float keeps the adherence of f32: ``python -m sdaccel.toy.adherence``).
FLOAT_GROUPS = ("resnets",)
#: The levers, in the order they are stacked (:func:`measure` takes any of them, in this order).
LEVERS = ("static", "int8", "tome", "deepcache")
#: The first row: no lever.
BASE = "f32"


def stack_names(ratio: float, interval: int, levers: Sequence[str] = LEVERS, cut: str = "block") -> list[str]:
    """The rows of :func:`measure`, in stacking order: each adds one lever to the row before."""
    from sdaccel.cpu.deepcache import lever_name

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
    from sdaccel.cpu.quantize import SENSITIVE_LAYER_PATTERNS
    from sdaccel.cpu.sensitivity import float_group_patterns

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
    from sdaccel.cpu.deepcache import check_cut
    from sdaccel.cpu.tome import check_ratio

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
    from sdaccel.core.checkpoint import resolve_checkpoint
    from sdaccel.cpu.deepcache import QUANTIZED_PARTS, DeepCache, export_deepcache, quantize_deepcache
    from sdaccel.cpu.export import MODEL_XML, checkpoint_defaults, export_pipeline, text_to_image_components
    from sdaccel.cpu.pipeline import OVPipeline
    from sdaccel.cpu.quantize import describe_ir, quantize_ir
    from sdaccel.cpu.tome import export_tome
    from sdaccel.toy import dataset
    from sdaccel.toy.calibration import calibrate_on_training_captions
    from sdaccel.toy.deepcache_quality import run_configuration

    # 1. Check the request, before anything is exported or written
    ratio = check_request(ratio, interval, num_prompts, steps, max_drop, float_groups, levers, cut)
    src = resolve_checkpoint(checkpoint)
    defaults = checkpoint_defaults(src)
    if defaults.height != defaults.width:
        raise ValueError(
            f"the stack takes square images; {src.name} makes {defaults.height}x{defaults.width}."
        )
    size, work = defaults.height, Path(work_dir)

    # 2. The f32 export, and the UNets the levers ask for: token merging merges the UNet and,
    #    with DeepCache, DeepCache's two IRs
    export = export_pipeline(
        src, Path(export_dir) if export_dir else work / "export", components=text_to_image_components(src),
        progress=progress,
    )  # fmt: skip
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
    dynamic = OVPipeline.from_pretrained(export, precision="f32")

    # 3. INT8: one recipe, applied alike to every UNet, on the same calibration data
    ignored = recipe_patterns(float_groups) if "int8" in levers else None
    if ignored is not None:
        calibration = calibrate_on_training_captions(
            dynamic, work / "calibration", steps, guidance_scale, size,
            prompts=calibration_prompts, samples=calibration_samples, progress=progress,
        )  # fmt: skip
        # NNCF's bars only where asked for (quantize_ir's progress): in a notebook each pass
        # would print a bar of its own
        for name, source in list(unets.items()):
            if name == "deepcache":
                unets[name] = work / ("deepcache_int8" if cut == "block" else f"deepcache_{cut}_int8")
                quantize_deepcache(
                    source, unets[name], calibration, subset_size=calibration_samples,
                    parts=QUANTIZED_PARTS[cut], ignored=ignored, progress=progress,
                )  # fmt: skip
            else:
                unets[name] = work / f"unet_{name}_int8" / MODEL_XML
                quantize_ir(
                    source, unets[name], "full_int8", calibration.folder, calibration_samples,
                    ignored=ignored, progress=progress,
                )  # fmt: skip

    # 4. The stack, lever by lever: (pipeline, the UNet it runs, DeepCache)
    static = None
    if "static" in levers:
        static = OVPipeline.from_pretrained(export, precision="f32", static=(1, size, size))
    names = stack_names(ratio, interval, levers, cut)
    stack = {BASE: (dynamic, None, None)}
    pipe, unet = dynamic, export / "unet" / MODEL_XML
    for name, lever in zip(names[1:], levers, strict=True):
        if lever == "deepcache":  # its own two IRs, compiled as the pipeline compiles its UNet
            stack[name] = (pipe, None, DeepCache.load(unets["deepcache"], pipe, interval=interval))
            continue
        pipe = static if lever == "static" else pipe
        unet = {"int8": unets["plain"], "tome": unets.get("merged")}.get(lever, unet)
        stack[name] = (pipe, unet, None)

    # 5. The held-out prompts through each stack, scored against the prompts and the f32 images
    prompts = dataset.heldout_prompts(num_prompts)
    call = {"steps": steps, "guidance_scale": guidance_scale, "height": size, "width": size}
    rows, images = {}, {}
    for name, (pipe, unet, cache) in stack.items():
        if unet is not None:
            pipe.replace_unet(unet)
        reference = None if name == BASE else images[BASE]
        images[name], row = run_configuration(name, pipe, cache, prompts, call, reference, progress)
        row["levers"] = [label.removeprefix("+ ") for label in names[1 : names.index(name) + 1]]
        row["shapes"] = "static" if pipe is static else "dynamic"
        rows[name] = row
    if ignored is not None:
        rows["+ INT8"]["fake_quantize"] = describe_ir(unets["plain"])["fake_quantize"]

    # 6. Speed against f32, the quality bound, and the fastest stack within it
    base = rows[BASE]
    for row in rows.values():
        row["x_f32"] = base["unet_s_per_image"] / row["unet_s_per_image"]
        row["within"] = row["adherence"]["score"] >= base["adherence"]["score"] - max_drop
    return {
        "checkpoint": str(src),
        "settings": {
            "num_prompts": num_prompts,
            "prompts": "sdaccel.toy.dataset.heldout_prompts(num_prompts), image i seeded with i",
            **call,
            "ratio": ratio,
            "interval": interval,
            "cut": cut,
            "levers": list(levers),
            "int8": None
            if ignored is None
            else {"variant": "full_int8", "float_groups": list(float_groups), "ignored": ignored},
            "precision": "f32 (INFERENCE_PRECISION_HINT) everywhere; INT8 layers run in INT8",
            "max_drop": max_drop,
            "calibration_prompts": calibration_prompts,
            "calibration_samples": calibration_samples,
        },
        "rows": rows,
        "fastest": fastest_within(rows, max_drop),
    }


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
    rows = [
        [
            name,
            f"{row['adherence']['score']:.3f}",
            "-" if row.get("psnr_mean") is None else f"{row['psnr_mean']:.1f}",
            "-" if "ssim_mean" not in row else f"{row['ssim_mean']:.3f}",
            f"{row['unet_calls_per_image']['full']:g} / {row['unet_calls_per_image']['shallow']:g}",
            f"{1000 * row['unet_s_per_image']:.1f}",
            f"{row['x_f32']:.2f}x",
            "yes" if row["within"] else "no",
        ]
        for name, row in result["rows"].items()
    ]
    table = markdown_table(
        [
            "stack",
            f"adherence ({s['num_prompts']} prompts)",
            "PSNR vs f32 dB",
            "SSIM",
            "UNet calls full / shallow",
            "UNet ms/image",
            "x f32",
            f"within {100 * s['max_drop']:g} points",
        ],
        rows,
        align="lrrrrrrc",
    )
    return (
        f"{table}\n\nfastest within {100 * s['max_drop']:g} adherence points of f32: {result['fastest']}\n"
        "(a 1 M-parameter toy's milliseconds, mostly fixed cost per call: "
        "benchmarks/bench_openvino.py --levers stack times the real UNet)"
    )


def main(argv: list[str] | None = None) -> dict:
    from sdaccel.cpu.deepcache import CUTS

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
    from sdaccel.toy.report import finish

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
