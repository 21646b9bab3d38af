"""The rows of a ``bench_whole_image.py`` run: each chosen row's title, child function and arguments
(:func:`plan`), then each timed in its child in turn (:func:`measure`), the rows ``--resume`` kept
left out."""

from __future__ import annotations

from bench_whole_image_results import Bench
from bench_whole_image_settings import REPLAYED, replayed_file
from bench_whole_image_timing import jax_row, ov_row, stack_row, torch_row

from sdaccel.course.whole_image_rows import (
    JAX_FP32_20,
    JAX_LCM4_LORA_TAESD,
    LCM_ROWS,
    OV_FLOAT_20,
    OV_STACK_20,
    OV_STACK_LAYER_20,
    TORCH_FP32_20,
    decodes_tiny,
    is_static_few_step,
    lcm_row_key,
    ov_row_variant,
)
from sdaccel.cpu.deepcache import lever_name
from sdaccel.toy import replayed_recipes
from sdaccel.toy.int8_unets import FLOAT_GROUP_RECIPES


def measure(bench: Bench, args, paths: dict) -> None:
    """Every row of :func:`plan` that ``--out`` does not hold yet, each in its child."""
    from tqdm.auto import tqdm

    todo = [p for p in plan(args, paths) if p[0] not in bench.results["rows"]]  # --resume: measured already
    for key, title, fn, fn_args, row_composed in tqdm(todo, desc="rows", unit="row"):
        bench.row(key, title, fn, *fn_args, **({"composed": row_composed} if row_composed else {}))


def plan(args, paths: dict) -> list[tuple]:
    """``(key, title, child function, its arguments, composed)`` of each row, in ``--rows`` order
    (each few-step INT8 row once per ``--lcm-variant``)."""
    from sdaccel.course.whole_image import composed_label

    size, runs, wsteps = args.size, args.runs, args.warmup_steps
    steps, few = args.steps, args.few_steps
    # --compose: the rows of `steps` steps are composed from calls of a and b steps; few-step rows run whole
    compose = args.compose
    composed = {"from_steps": list(compose)} if compose else None
    long = composed_label(composed)
    tiny_vae_name = "TAESDXL" if args.model == "sdxl" else "TAESD"
    rows = []
    for key in args.rows:
        if key == TORCH_FP32_20:
            fn_args = (paths["src"], steps, None, size, runs, wsteps, compose)
            rows.append((key, f"PyTorch fp32, {steps} steps, CFG{long}", torch_row, fn_args, composed))
        elif key == OV_FLOAT_20:
            fn_args = (paths["export"], None, steps, None, size, runs, wsteps, None, None, compose)
            rows.append((key, f"OpenVINO best float, {steps} steps{long}", ov_row, fn_args, composed))
        elif key in (OV_STACK_20, OV_STACK_LAYER_20):
            rows.append(_stack_plan(key, args, paths))
        elif (variant := ov_row_variant(key)) is not None:
            xml = paths.get(f"unet_{variant}")
            fn_args = (paths["export"], xml, steps, None, size, runs, wsteps, None, None, compose)
            name = unet_title(variant)
            if variant in REPLAYED:
                found = replayed_file(variant, args)
                name = replayed_recipes.title(variant, replayed_recipes.knobs(variant, found))
            rows.append((key, f"OpenVINO {name}, {steps} steps{long}", ov_row, fn_args, composed))
        elif key in LCM_ROWS:
            vae = paths["taesd"] if decodes_tiny(key) else None
            static = is_static_few_step(key)
            for i, variant in enumerate(args.lcm_variant):
                title = (
                    f"{few} steps LCM + LoRA fused + {'static + ' if static else ''}{unet_title(variant)}"
                    + (f" + {tiny_vae_name}" if vae else "")
                )
                xml = paths["unet_lcm"][variant]
                fn_args = (paths["export_lcm"], xml, few, 1.0, size, runs, few, "lcm", vae, None, static)
                rows.append((lcm_row_key(key, i, variant), title, ov_row, fn_args, None))
        elif key == JAX_FP32_20:
            fn_args = (paths["src"], steps, None, size, runs, "euler", None, None, compose)
            rows.append((key, f"JAX fp32 on CPU, {steps} steps Euler, CFG{long}", jax_row, fn_args, composed))
        elif key == JAX_LCM4_LORA_TAESD:
            title = f"JAX fp32 on CPU, {few} steps LCM + LoRA fused + {tiny_vae_name}"
            fn_args = (paths["src"], few, 1.0, size, runs, "lcm", paths["taesd"], paths["lora"])
            rows.append((key, title, jax_row, fn_args, None))
    return rows


def _stack_plan(key: str, args, paths: dict) -> tuple:
    """The plan of a stack row: DeepCache cut at the block (``ov_stack_20``) or at the last layer
    (``ov_stack_layer_20``), always run whole."""
    steps, size, runs, wsteps = args.steps, args.size, args.runs, args.warmup_steps
    title = "OpenVINO static + full INT8 (ResNets in float) + "
    if key == OV_STACK_20:
        title += f"{lever_name(args.stack_interval)}, {steps} steps"
        fn_args = (paths["export"], paths["stack"], args.stack_interval, steps, size, runs, wsteps)
    else:
        interval = args.stack_layer_interval
        title += f"{lever_name(interval, 'layer')}, {steps} steps"
        fn_args = (paths["export"], paths["stack_layer"], interval, steps, size, runs, wsteps, "layer")
    return key, title, stack_row, fn_args, None


def unet_title(variant: str) -> str:
    """How a row's title names its INT8 UNet: ``full_int8 UNet``, ``full_int8 UNet, ResNets in float``."""
    if variant in FLOAT_GROUP_RECIPES:
        return "full_int8 UNet, ResNets in float"
    return f"{variant} UNet"
