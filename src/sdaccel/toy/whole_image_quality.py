"""What each recipe of the whole-image tables costs in picture, measured on a trained toy of its layout.

    python -m sdaccel.toy.whole_image_quality checkpoints/tiny-shapes-sdxl \\
        --lora checkpoints/tiny-shapes-sdxl-lcm-lora --taesd checkpoints/tiny-shapes-sdxl-taesd \\
        --prompts 96 --out benchmarks/results/whole_image_quality_tiny-shapes-sdxl.json

``benchmarks/bench_whole_image.py`` times SD 1.5 and SDXL at their real size, with random weights
(no machine here reaches the hub): its images show nothing, so its table cannot say what a
recipe costs. Here the same recipes run on a trained shapes toy of the same layout
(:mod:`sdaccel.toy.dataset`), on held-out prompts, every row from the same noise
(:func:`sdaccel.toy.comparison.paired_latents`):

1. **The usual steps, with guidance** (:func:`sdaccel.toy.adherence.evaluate`): PyTorch fp32,
   OpenVINO at the plugin's default precision (the benchmark's "best float": bf16 on a CPU with
   AVX-512 BF16 or AMX, f32 elsewhere; the row says which ran), each INT8 recipe of the UNet, and
   JAX fp32; and each recipe of :mod:`sdaccel.toy.replayed_recipes` given (``replayed``: what an
   accuracy-controlled search or a sensitivity ranking of this layout kept in float, replayed as
   the benchmark replays it at real size).
2. **Few LCM steps, the LCM-LoRA fused, no guidance** (when ``lora`` is given): each INT8 recipe
   of the fused UNet, calibrated with the LCM sampler, decoded by the VAE and, when ``taesd`` is
   given, by the tiny autoencoder, each with the pipeline compiled dynamic and static (for the
   batch of held-out prompts, without guidance: the benchmark's ``..._static`` rows compile it
   for one image); and JAX fp32 with the tiny autoencoder.
3. **The stack** (when ``stack_interval`` is given): static shapes, full INT8 with the ResNets in
   float and DeepCache at that interval, the usual steps with guidance, as
   :func:`sdaccel.toy.stack_quality.measure` stacks them (its last row; its images are seeded as
   these, image ``i`` with ``i``, so its PSNR is against the same OpenVINO f32 images). With
   ``stack_layer_interval``, the same stack with DeepCache cut at the last layer at that interval.

Each row: the prompt adherence (:func:`sdaccel.toy.dataset.adherence`) and the PSNR of its images
against OpenVINO f32's at the usual steps (the float reference, not a row of the table). INT8 rows
run their float layers with the f32 hint, so that INT8 is what they add to the float row.

Rows are keyed as :func:`sdaccel.course.whole_image_rows.recipe_key` names the benchmark's rows
(``ov_full_int8_20``, ``lcm4_lora_full_int8_taesd``), which is how notebook 06 and the
benchmark's tables put each recipe's quality beside its seconds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from sdaccel.core.checkpoint import resolve_checkpoint
from sdaccel.cpu import quality
from sdaccel.cpu.deepcache import lever_name
from sdaccel.cpu.export import StaticShape, export_pipeline, text_to_image_components
from sdaccel.toy import (
    adherence,
    adherence_steps,
    dataset,
    int8_unets,
    replayed_recipes,
    runner,
    stack_quality,
)
from sdaccel.toy.comparison import paired_latents
from sdaccel.toy.report import finish
from sdaccel.toy.runner import Column, number

#: The INT8 recipes of the UNet measured by default (those of the benchmark's rows; full INT8 with
#: the ResNets in float under its one-word name, :data:`sdaccel.toy.int8_unets.FLOAT_GROUP_RECIPES`).
VARIANTS = ("int8_weights", "hybrid", "full_int8", "full_int8_float_resnets")
#: The float reference of every PSNR: OpenVINO, f32 hint, the usual steps.
REFERENCE = "ov_f32"
#: The rows of the usual steps: :func:`sdaccel.toy.adherence.evaluate`'s name -> the row's key.
USUAL_STEPS_ROWS = {"torch_fp32": "torch_fp32_20", "ov_default": "ov_float_20", "jax_fp32": "jax_fp32_20"}
#: The JAX row of few steps (LCM, the adapter fused, the tiny autoencoder).
JAX_FEW_STEPS_ROW = "jax_lcm4_lora_taesd"
#: The rows of the stack (the benchmark's ``ov_stack_20`` and ``ov_stack_layer_20``) by DeepCache's
#: cut, and the levers it stacks.
STACK_ROW = "ov_stack_20"
STACK_LAYER_ROW = "ov_stack_layer_20"
STACK_ROWS = {"block": STACK_ROW, "layer": STACK_LAYER_ROW}
STACK_LEVERS = ("static", "int8", "deepcache")


def usual_steps_key(variant: str) -> str:
    """The key of the OpenVINO row of the usual steps with ``variant``'s INT8 UNet."""
    return f"ov_{variant}_20"


def few_steps_key(variant: str, tiny: bool, static: bool = False) -> str:
    """The key of the few-step OpenVINO row with ``variant``'s INT8 UNet (``tiny``: decoded by the
    tiny autoencoder; ``static``: the pipeline compiled static)."""
    return f"lcm4_lora_{variant}" + ("_static" if static else "") + ("_taesd" if tiny else "")


def measure(
    checkpoint: str | Path,
    work_dir: str | Path,
    lora: str | Path | None = None,
    taesd: str | Path | None = None,
    num_prompts: int = 96,
    steps: int = 20,
    few_steps: int = 4,
    guidance_scale: float = 6.0,
    variants: Sequence[str] = VARIANTS,
    seed: int = 0,
    stack_interval: int | None = None,
    replayed: dict[str, str | Path] | None = None,
    stack_layer_interval: int | None = None,
) -> dict:
    """Every recipe's adherence and PSNR against OpenVINO f32 (see the module's docstring).
    ``replayed``: name of a replayed recipe -> the result it replays
    (:func:`sdaccel.toy.replayed_recipes.found_file`), each a row of the usual steps.

    ``work_dir`` receives the exports and the quantized UNets (reused when present). ``taesd``
    needs ``lora`` (the tiny autoencoder is measured on the few-step rows). Returns
    ``{"checkpoint", "config", "rows": {key: {"title", "adherence", "psnr_vs_f32", "precision",
    "steps", "seconds"}}}``.
    """

    # 1. Every input checked before anything runs
    stacks = check_request(lora, taesd, variants, num_prompts, (steps, few_steps), seed, stack_interval,
                           stack_layer_interval)  # fmt: skip
    recipes = {name: replayed_recipes.knobs(name, path) for name, path in (replayed or {}).items()}
    lora_path = None if lora is None else adherence_steps.lora_file(lora)
    folder = resolve_checkpoint(checkpoint)
    work = Path(work_dir)
    if recipes:  # the toy's export has the layers each replayed recipe keeps in float
        check_replayed(folder, work / "usual_steps" / "openvino", recipes)

    # 2. The usual steps, with guidance: every front-end and INT8 recipe (under the toy's names)
    toy_names = {int8_unets.FLOAT_GROUP_RECIPES.get(v, v): v for v in variants}
    usual = adherence.evaluate(
        folder,
        work / "usual_steps",
        num_prompts=num_prompts,
        steps=steps,
        guidance_scale=guidance_scale,
        seed=seed,
        pipelines=("torch_fp32", "jax_fp32", "ov_f32", "ov_default"),
        variants=tuple(toy_names),
        recipes=recipes,
    )
    rows = usual_rows(usual, toy_names, variants, recipes, steps)

    # 3. Few LCM steps with the adapter fused: each INT8 recipe, with the VAE and the tiny autoencoder
    if lora_path is not None:
        few = (work / "few_steps", lora_path, taesd, few_steps)
        rows |= few_step_rows(folder, usual, few, toy_names, num_prompts, seed)

    # 4. The stacks: each one's last row, DeepCache (cut at the block or at the last layer) on top
    #    of static shapes and INT8
    for cut, interval in stacks.items():
        rows[STACK_ROWS[cut]] = stack_row(folder, work, cut, interval, num_prompts, steps, guidance_scale)

    # 5. The result, with what ran
    config = {
        **usual["config"],
        "few_steps": few_steps,
        "lora": None if lora is None else str(lora),
        "taesd": None if taesd is None else str(taesd),
        "variants": list(variants),
        "replayed": {name: Path(path).name for name, path in (replayed or {}).items()},
        "reference": f"OpenVINO f32 hint, {steps} steps",
        "int8_float_layers": "f32 hint",
        "stack_interval": stack_interval,
        "stack_layer_interval": stack_layer_interval,
    }
    return {"checkpoint": str(checkpoint), "config": config, "rows": rows}


def check_request(lora, taesd, variants, num_prompts: int, steps, seed: int, *intervals) -> dict[str, int]:
    """Refuse what :func:`measure` cannot run (``steps``: the usual and the few; ``intervals``:
    the stack's and the layer-cut stack's); returns the stacks asked for, interval by cut."""
    if taesd is not None and lora is None:
        raise ValueError("The tiny autoencoder is measured on the few-step rows: pass lora= with taesd=.")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"Unknown INT8 recipes {unknown}; choose from {list(VARIANTS)}.")
    if num_prompts < 1 or min(steps) < 1:
        raise ValueError(f"prompts and steps must be at least 1, got {num_prompts}, {steps[0]}, {steps[1]}.")
    stacks = {
        cut: interval
        for cut, interval in zip(("block", "layer"), intervals, strict=True)
        if interval is not None
    }
    if stacks and (min(stacks.values()) < 1 or seed != 0):
        raise ValueError(
            f"The stack's rows need stack_interval and stack_layer_interval >= 1 and seed 0 "
            f"(sdaccel.toy.stack_quality seeds image i with i), got {stacks} and {seed}."
        )
    return stacks


def check_replayed(folder: Path, export_dir: Path, recipes: dict) -> None:
    """The f32 export of the usual steps, and each replayed recipe checked against its UNet."""

    export_dir = export_pipeline(
        folder, export_dir, components=text_to_image_components(folder), weight_dtype="fp32"
    )
    for name, knobs in recipes.items():
        replayed_recipes.check(Path(export_dir) / "unet" / "openvino_model.xml", name, knobs)


def row(title: str, adherence: float, psnr: float, precision: str, steps: int, seconds: float) -> dict:
    """A row of the table, keyed as the benchmark's rows."""
    return {
        "title": title,
        "adherence": adherence,
        "psnr_vs_f32": psnr,
        "precision": precision,
        "steps": steps,
        "seconds": round(seconds, 2),
    }


def usual_rows(usual: dict, toy_names: dict, variants, recipes: dict, steps: int) -> dict:
    """The rows of the usual steps, from :func:`sdaccel.toy.adherence.evaluate`'s (which scored
    them against OpenVINO f32 already), under the benchmark's keys."""
    titles = {
        "torch_fp32": "PyTorch fp32",
        "ov_default": "OpenVINO, the plugin's default precision",
        "jax_fp32": "JAX fp32",
    }
    titles.update(
        {name: f"OpenVINO {replayed_recipes.title(name, knobs)}" for name, knobs in recipes.items()}
    )
    rows = {}
    for toy_name, usual_row in usual["rows"].items():
        name = toy_names.get(toy_name, toy_name)
        recipe = name in variants or name in recipes
        key = USUAL_STEPS_ROWS.get(name) or (usual_steps_key(name) if recipe else None)
        if key is not None:
            title = f"{titles.get(name, f'OpenVINO {name} UNet')}, {steps} steps"
            score, psnr = usual_row["adherence"]["score"], usual_row[f"vs_{REFERENCE}"]["psnr_mean"]
            rows[key] = row(title, score, psnr, usual_row["precision"], steps, usual_row["seconds"])
    return rows


def few_step_rows(
    folder: Path, usual: dict, few: tuple, toy_names: dict, num_prompts: int, seed: int
) -> dict:
    """Each INT8 recipe of the UNet with the LCM-LoRA fused (``few``: the work folder, the
    adapter, the tiny autoencoder or None, the steps), run dynamic and static, decoded by the VAE
    and the tiny autoencoder; then JAX with the tiny autoencoder: scored against OpenVINO f32."""

    work, lora_path, taesd, few_steps = few
    size, prompts = usual["config"]["size"], usual["prompts"]
    latents = paired_latents(folder, num_prompts, size, seed)
    shape = StaticShape(num_prompts, size, size, guidance=False)  # one call: every prompt, no CFG
    pipes = {}  # (tiny, static) -> (pipeline, UNet IR)
    for tiny in (False, True) if taesd is not None else (False,):
        for static in (False, True):
            vae, compiled = (taesd if tiny else None), (shape if static else None)
            pipes[tiny, static] = adherence_steps.openvino_pipe(
                folder, "lcm", lora_path, work, vae=vae, static=compiled
            )
    first, unet_xml = pipes[False, False]
    quantized = int8_unets.quantize_unet(
        first, unet_xml, work / "int8", list(toy_names), steps=adherence_steps.CALIBRATION_STEPS["lcm"],
        guidance_scale=1.0, size=size, seed=seed,
    )  # fmt: skip
    call = (prompts, latents, few_steps, 1.0, size)
    table = {}
    for toy_name, xml in quantized.items():
        variant = toy_names[toy_name]
        for (tiny, static), (pipe, _) in pipes.items():
            decoder = " + tiny autoencoder" if tiny else ""
            title = f"OpenVINO {variant} UNet, {few_steps} steps LCM + LoRA fused{' + static' if static else ''}{decoder}"
            table[few_steps_key(variant, tiny, static)] = partial(openvino_images, pipe, xml, title, call)
    if taesd is not None:
        title = f"JAX fp32, {few_steps} steps LCM + LoRA fused + tiny autoencoder"
        table[JAX_FEW_STEPS_ROW] = partial(jax_images, folder, lora_path, taesd, title, call)
    reference = {REFERENCE: usual["images"][REFERENCE]}
    rows, _ = runner.score(table, prompts, few_step_row, references=reference)
    return rows


def openvino_images(pipe, xml: Path, title: str, call: tuple) -> tuple[list, dict]:
    """A few-step OpenVINO row's images, ``xml`` its UNet, and what it measured."""

    pipe.replace_unet(xml)
    start = time.perf_counter()
    images = adherence_steps.openvino_runner(pipe)(*call)
    measured = {"title": title, "precision": f"int8+{pipe.precision}", "steps": call[2]}
    return images, {**measured, "seconds": time.perf_counter() - start}


def jax_images(folder: Path, lora_path: Path, taesd, title: str, call: tuple) -> tuple[list, dict]:
    """The few-step JAX row's images (its pipeline's making timed too), and what it measured."""

    start = time.perf_counter()
    images = adherence_steps.jax_runner(folder, "lcm", lora_path, vae=taesd)(*call)
    return images, {
        "title": title,
        "precision": "f32",
        "steps": call[2],
        "seconds": time.perf_counter() - start,
    }


def few_step_row(images: list, prompts, measured: dict, against: dict) -> dict:
    """A few-step row: scored here, against OpenVINO f32's images of the usual steps."""

    psnr = quality.compare_images(against[REFERENCE], images)["psnr_mean"]
    score = dataset.adherence(images, prompts)["score"]
    return row(measured["title"], score, psnr, measured["precision"], measured["steps"], measured["seconds"])


def stack_row(
    folder: Path, work: Path, cut: str, interval: int, num_prompts: int, steps: int, guidance
) -> dict:
    """The stack's row: the last row of :func:`sdaccel.toy.stack_quality.measure`, DeepCache cut
    at ``cut`` and ``interval`` on top of static shapes and INT8 (its images seeded as these)."""

    stack = stack_quality.measure(
        folder, work / "stack", export_dir=work / "stack" / "export", num_prompts=num_prompts,
        steps=steps, guidance_scale=guidance, levers=STACK_LEVERS, interval=interval, cut=cut,
    )  # fmt: skip
    last = stack["rows"][stack_quality.stack_names(0.5, interval, STACK_LEVERS, cut)[-1]]
    title = f"OpenVINO static + full INT8 (ResNets in float) + {lever_name(interval, cut)}, {steps} steps"
    seconds = last["s_per_image"] * num_prompts  # the median image's, times the images
    return row(title, last["adherence"]["score"], last["psnr_mean"], "int8+f32", steps, seconds)


def format_table(result: dict) -> str:
    """The rows as a Markdown table: adherence and PSNR against OpenVINO f32."""
    columns = [
        Column("recipe", lambda name, row: row["title"], "l"),
        Column(f"adherence ({result['config']['prompts']} held-out prompts)", number("adherence", ".3f")),
        Column("PSNR dB vs OpenVINO f32", number("psnr_vs_f32", ".1f")),
        Column("precision", lambda name, row: row["precision"], "l"),
    ]
    return runner.format_table(result["rows"], columns)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", help="a trained shapes checkpoint (diffusers layout)")
    parser.add_argument("--lora", default=None, help="its LCM-LoRA (folder or file): the few-step rows")
    parser.add_argument("--taesd", default=None, help="its tiny autoencoder's folder (needs --lora)")
    parser.add_argument("--prompts", type=int, default=96, help="held-out prompts (default 96)")
    parser.add_argument("--steps", type=int, default=20, help="the usual steps (default 20)")
    parser.add_argument("--few-steps", type=int, default=4, help="the LCM steps (default 4)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument(
        "--replay",
        nargs="+",
        default=[],
        metavar="NAME[=FILE]",
        help="add the rows of these replayed recipes (sdaccel.toy.replayed_recipes: "
        f"{', '.join(replayed_recipes.NAMES)}), each from FILE or by default from benchmarks/results",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--stack-interval", type=int, default=None, help="add the stack's row, DeepCache at this interval"
    )
    parser.add_argument(
        "--stack-layer-interval",
        type=int,
        default=None,
        help="add the row of the stack with DeepCache cut at the last layer, at this interval",
    )
    parser.add_argument(
        "--work-dir", default=None, help="default build/whole_image_quality/<checkpoint name>"
    )
    parser.add_argument("--out", default=None, help="JSON (default: quality.json in the work folder)")
    args = parser.parse_args(argv)
    if args.taesd is not None and args.lora is None:
        parser.error("--taesd is measured on the few-step rows: give --lora too")
    replayed = {}
    for item in args.replay:
        name, _, path = item.partition("=")
        try:
            replayed[name] = Path(path) if path else replayed_recipes.found_file(name, "benchmarks/results")
            replayed_recipes.knobs(name, replayed[name])  # readable, before anything runs
        except (OSError, ValueError) as error:
            parser.error(f"--replay {item}: {error}")

    work = Path(args.work_dir or Path("build") / "whole_image_quality" / Path(args.checkpoint).name)
    result = measure(
        args.checkpoint,
        work,
        lora=args.lora,
        taesd=args.taesd,
        num_prompts=args.prompts,
        steps=args.steps,
        few_steps=args.few_steps,
        variants=tuple(args.variants),
        seed=args.seed,
        stack_interval=args.stack_interval,
        replayed=replayed,
        stack_layer_interval=args.stack_layer_interval,
    )
    out = Path(args.out or work / "quality.json")
    return finish(result, out, format_table(result), "sdaccel.toy.whole_image_quality", argv)


if __name__ == "__main__":
    main()
