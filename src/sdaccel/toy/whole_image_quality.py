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
from pathlib import Path

from sdaccel.core.tables import markdown_table
from sdaccel.toy import replayed_recipes

#: The INT8 recipes of the UNet measured by default (those of the benchmark's rows; full INT8 with
#: the ResNets in float under its one-word name, :data:`sdaccel.toy.adherence.FLOAT_GROUP_RECIPES`).
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
    from sdaccel.core.checkpoint import resolve_checkpoint
    from sdaccel.cpu import quality
    from sdaccel.cpu.export import StaticShape, export_pipeline, text_to_image_components
    from sdaccel.toy import adherence, adherence_steps, dataset
    from sdaccel.toy.comparison import paired_latents

    # 1. Every input checked before anything runs
    if taesd is not None and lora is None:
        raise ValueError("The tiny autoencoder is measured on the few-step rows: pass lora= with taesd=.")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"Unknown INT8 recipes {unknown}; choose from {list(VARIANTS)}.")
    if num_prompts < 1 or min(steps, few_steps) < 1:
        raise ValueError(f"prompts and steps must be at least 1, got {num_prompts}, {steps}, {few_steps}.")
    stacks = {"block": stack_interval, "layer": stack_layer_interval}
    stacks = {cut: interval for cut, interval in stacks.items() if interval is not None}
    if stacks and (min(stacks.values()) < 1 or seed != 0):
        raise ValueError(
            f"The stack's rows need stack_interval and stack_layer_interval >= 1 and seed 0 "
            f"(sdaccel.toy.stack_quality seeds image i with i), got {stacks} and {seed}."
        )
    recipes = {name: replayed_recipes.knobs(name, path) for name, path in (replayed or {}).items()}
    lora_path = None if lora is None else adherence_steps.lora_file(lora)
    folder = resolve_checkpoint(checkpoint)
    work = Path(work_dir)
    if recipes:  # the toy's export has the layers each replayed recipe keeps in float
        export_dir = export_pipeline(
            folder,
            work / "usual_steps" / "openvino",
            components=text_to_image_components(folder),
            weight_dtype="fp32",
        )
        for name, knobs in recipes.items():
            replayed_recipes.check(Path(export_dir) / "unet" / "openvino_model.xml", name, knobs)

    # 2. The usual steps, with guidance: every front-end and INT8 recipe (under the toy's names)
    toy_names = {adherence.FLOAT_GROUP_RECIPES.get(v, v): v for v in variants}
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
    reference = usual["images"][REFERENCE]
    rows = {}

    def add(key, title, adherence_score, psnr, precision, n, seconds):
        rows[key] = {
            "title": title,
            "adherence": adherence_score,
            "psnr_vs_f32": psnr,
            "precision": precision,
            "steps": n,
            "seconds": round(seconds, 2),
        }

    def add_images(key, title, images, precision, n, seconds):  # a few-step row: scored here
        score = dataset.adherence(images, usual["prompts"])["score"]
        add(key, title, score, quality.compare_images(reference, images)["psnr_mean"], precision, n, seconds)

    titles = {
        "torch_fp32": "PyTorch fp32",
        "ov_default": "OpenVINO, the plugin's default precision",
        "jax_fp32": "JAX fp32",
    }
    titles.update(
        {name: f"OpenVINO {replayed_recipes.title(name, knobs)}" for name, knobs in recipes.items()}
    )
    for toy_name, row in usual["rows"].items():  # evaluate() scored these against OpenVINO f32 already
        name = toy_names.get(toy_name, toy_name)
        recipe = name in variants or name in recipes
        key = USUAL_STEPS_ROWS.get(name) or (usual_steps_key(name) if recipe else None)
        if key is not None:
            title = f"{titles.get(name, f'OpenVINO {name} UNet')}, {steps} steps"
            score, psnr = row["adherence"]["score"], row[f"vs_{REFERENCE}"]["psnr_mean"]
            add(key, title, score, psnr, row["precision"], steps, row["seconds"])

    # 3. Few LCM steps with the adapter fused: each INT8 recipe, with the VAE and the tiny autoencoder
    if lora_path is not None:
        size = usual["config"]["size"]
        prompts = usual["prompts"]
        latents = paired_latents(folder, num_prompts, size, seed)
        few = work / "few_steps"
        shape = StaticShape(num_prompts, size, size, guidance=False)  # one call: every prompt, no CFG
        pipes = {}  # (tiny, static) -> (pipeline, UNet IR)
        for tiny in (False, True) if taesd is not None else (False,):
            for static in (False, True):
                pipes[tiny, static] = adherence_steps.openvino_pipe(
                    folder,
                    "lcm",
                    lora_path,
                    few,
                    vae=taesd if tiny else None,
                    static=shape if static else None,
                )
        first, unet_xml = pipes[False, False]
        quantized = adherence.quantize_unet(
            first,
            unet_xml,
            few / "int8",
            list(toy_names),
            steps=adherence_steps.CALIBRATION_STEPS["lcm"],
            guidance_scale=1.0,
            size=size,
            seed=seed,
        )
        for toy_name, xml in quantized.items():
            variant = toy_names[toy_name]
            for (tiny, static), (pipe, _) in pipes.items():
                pipe.replace_unet(xml)
                start = time.perf_counter()
                images = adherence_steps.openvino_runner(pipe)(prompts, latents, few_steps, 1.0, size)
                decoder = " + tiny autoencoder" if tiny else ""
                compiled = " + static" if static else ""
                title = f"OpenVINO {variant} UNet, {few_steps} steps LCM + LoRA fused{compiled}{decoder}"
                add_images(
                    few_steps_key(variant, tiny, static),
                    title,
                    images,
                    f"int8+{pipe.precision}",
                    few_steps,
                    time.perf_counter() - start,
                )
        if taesd is not None:
            start = time.perf_counter()
            run = adherence_steps.jax_runner(folder, "lcm", lora_path, vae=taesd)
            images = run(prompts, latents, few_steps, 1.0, size)
            title = f"JAX fp32, {few_steps} steps LCM + LoRA fused + tiny autoencoder"
            add_images(JAX_FEW_STEPS_ROW, title, images, "f32", few_steps, time.perf_counter() - start)

    # 4. The stacks: each one's last row, DeepCache (cut at the block or at the last layer) on top
    #    of static shapes and INT8
    from sdaccel.cpu.deepcache import lever_name
    from sdaccel.toy import stack_quality

    for cut, interval in stacks.items():
        stack = stack_quality.measure(
            folder, work / "stack", export_dir=work / "stack" / "export", num_prompts=num_prompts,
            steps=steps, guidance_scale=guidance_scale, levers=STACK_LEVERS, interval=interval, cut=cut,
        )  # fmt: skip
        row = stack["rows"][stack_quality.stack_names(0.5, interval, STACK_LEVERS, cut)[-1]]
        title = f"OpenVINO static + full INT8 (ResNets in float) + {lever_name(interval, cut)}, {steps} steps"
        seconds = row["s_per_image"] * num_prompts  # the median image's, times the images
        score, psnr = row["adherence"]["score"], row["psnr_mean"]
        add(STACK_ROWS[cut], title, score, psnr, "int8+f32", steps, seconds)

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


def format_table(result: dict) -> str:
    """The rows as a Markdown table: adherence and PSNR against OpenVINO f32."""
    rows = [
        [row["title"], f"{row['adherence']:.3f}", f"{row['psnr_vs_f32']:.1f}", row["precision"]]
        for row in result["rows"].values()
    ]
    prompts = result["config"]["prompts"]
    return markdown_table(
        ["recipe", f"adherence ({prompts} held-out prompts)", "PSNR dB vs OpenVINO f32", "precision"],
        rows,
        align="lrrl",
    )


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
    from sdaccel.toy.report import finish

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
