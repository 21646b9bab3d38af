"""The command line of ``benchmarks/bench_openvino.py``: its variants, levers and quality parts, its
flags in groups (what to measure, quantization and precision, the levers, quality, the run), and
the recipe knobs each INT8 variant runs (:func:`recipe_knobs`), which the checks of the command line
read too."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdaccel.cpu.precision import CANDIDATES
from sdaccel.cpu.tome import check_ratio
from sdaccel.toy import replayed_recipes
from sdaccel.toy.int8_unets import FLOAT_GROUP_RECIPES, float_group_ignored

VARIANTS = (
    "torch_fp32",
    "ov_f32",
    "ov_bf16",
    "int8_weights",
    "hybrid",
    "full_int8",
    "full_int8_float_resnets",
    "full_int8_accuracy_control",
    "full_int8_sensitive_4",
)

#: Recipes found on the trained SD 1.5-layout toy and replayed on the real SD 1.5 UNet, whose own
#: search or ranking would take hours (sdaccel.toy.replayed_recipes). The same export code names the
#: layers of both alike; a UNet without those layers is refused.
TOY_RECIPES = replayed_recipes.NAMES

RESULTS = Path(__file__).resolve().parent / "results"

INT8 = ("int8_weights", "hybrid", "full_int8", "full_int8_float_resnets", *TOY_RECIPES)

LEVERS = ("deepcache", "quant_memory", "runtime", "static", "guidance_split", "vae_int8", "tome", "stack")

#: The parts of ``--quality`` (``--quality-parts``): the INT8 UNets, DeepCache, the INT8 VAE
#: decoders, the runtime levers' output differences, token merging.
QUALITY_PARTS = ("int8_unet", "deepcache", "vae_int8", "levers_max_abs_diff", "tome")


def parse_args(argv=None, description: str | None = None) -> argparse.Namespace:
    """The script's arguments (``description``: the script's docstring, its ``--help``): each group
    of flags in the order the settings are recorded, then the checks made before anything runs."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for add_flags in (
        add_model_flags,
        add_quantization_flags,
        add_lever_flags,
        add_quality_flags,
        add_run_flags,
    ):
        add_flags(parser)
    args = parser.parse_args(argv)
    check_args(parser, args)
    return args


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, before anything is measured or written, a ratio out of range and a replayed recipe
    whose result is unreadable."""
    for flag, ratios in (("--tome-ratios", args.tome_ratios), ("--stack-ratio", [args.stack_ratio])):
        for ratio in ratios:  # refused before anything is measured or written
            try:
                check_ratio(ratio)
            except ValueError as error:
                parser.error(f"{flag}: {error}")
    for variant in (v for v in args.variants if v in TOY_RECIPES):  # the result it replays, readable
        try:
            toy_recipe_knobs(variant, args)
        except (OSError, ValueError) as error:
            parser.error(f"{variant}: {error}")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """What to measure: the models, the variants, the levers, and the UNet call timed."""
    parser.add_argument(
        "--models",
        nargs="*",
        default=["sd15", "sdxl"],
        help="sd15 / sdxl (real architecture, random weights), or checkpoints: a diffusers folder, "
        "a hub id, tiny-sd15 / tiny-sdxl",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        choices=VARIANTS,
        default=[v for v in VARIANTS if v not in TOY_RECIPES],
        help="UNet variants to time (none: only --choose-precision); the default leaves out the toy's "
        f"recipes replayed at real size ({', '.join(TOY_RECIPES)}: SD 1.5 only)",
    )
    parser.add_argument(
        "--accuracy-control-json",
        default=None,
        help="the accuracy-control search that full_int8_accuracy_control replays (default: "
        f"{replayed_recipes.found_file(replayed_recipes.ACCURACY_CONTROL, 'benchmarks/results')})",
    )
    parser.add_argument("--levers", nargs="*", choices=LEVERS, default=[])
    parser.add_argument("--iters", type=int, default=3, help="timed UNet calls per variant (median reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    parser.add_argument("--batch", type=int, default=2, help="UNet batch (2 = one image with CFG)")
    parser.add_argument("--latent", type=int, default=64, help="latent size (64 -> 512x512 images)")


def add_quantization_flags(parser: argparse.ArgumentParser) -> None:
    """The INT8 recipes' calibration and knobs, and the float precisions."""
    parser.add_argument(
        "--calib-samples", type=int, default=8, help="synthetic calibration inputs (= subset_size)"
    )
    parser.add_argument(
        "--smooth-quant",
        choices=["auto", "on", "off"],
        default="auto",
        help="SmoothQuant in full_int8; auto: off for SDXL-like UNets (the memory lever), on otherwise",
    )
    parser.add_argument(
        "--quant-source",
        choices=["f32", "fp16"],
        default="f32",
        help="IR that NNCF quantizes (f32: measured to need less memory than an fp16 one)",
    )
    parser.add_argument(
        "--no-bias-correction",
        action="store_true",
        help="full_int8 without fast bias correction (memory lever)",
    )
    parser.add_argument(
        "--choose-precision",
        action="store_true",
        help="choose each component's float precision by measurement (a whole pipeline folder)",
    )
    parser.add_argument(
        "--precision-candidates",
        nargs="+",
        choices=CANDIDATES,
        default=["f32", "bf16"],
        help="precisions timed by --choose-precision (each is timed, even one the CPU cannot run)",
    )
    parser.add_argument(
        "--int8-float",
        choices=["auto", "f32", "bf16", "both"],
        default="auto",
        help="float precision of the layers the INT8 variants leave in float: auto (the UNet's best "
        "float on this CPU, by choose_precision's rule), f32, bf16, or both (each INT8 variant timed "
        "in every float precision the plugin offers; extra rows <variant>@<precision>)",
    )
    parser.add_argument(
        "--quant-max-memory-gb",
        type=float,
        default=None,
        help="quantize the UNet in parts within this budget (quantize_ir(max_memory_gb=...)); "
        "default: in one piece, in one child watched at --quant-memory-limit-gb",
    )


def add_lever_flags(parser: argparse.ArgumentParser) -> None:
    """The levers: DeepCache, the stacks, the runtime levers, token merging."""
    parser.add_argument("--deepcache-intervals", nargs="+", type=int, default=[2, 3, 5])
    parser.add_argument(
        "--stack-ratio", type=float, default=0.5, help="lever stack: the token-merging ratio of its stacks"
    )
    parser.add_argument(
        "--stack-int8",
        choices=[v for v in INT8 if v != "int8_weights" and v not in TOY_RECIPES],
        default=None,
        help="lever stack: also time INT8 by this recipe, alone and with DeepCache (its shallow UNet "
        "quantized alike); INT8 and token merging are not stacked (merging on INT8 cost the toy picture)",
    )
    parser.add_argument(
        "--no-deepcache-int8", action="store_true", help="time DeepCache's shallow UNet in float only"
    )
    parser.add_argument(
        "--deepcache-layer-cut",
        action="store_true",
        help="lever stack: also time DeepCache cut at the last up block's last layer (the DeepCache "
        "paper's default branch; its shallow UNet, one layer, in float, with --stack-int8 after the INT8 UNet too)",
    )
    parser.add_argument(
        "--lever-rounds", type=int, default=3, help="rounds of the runtime/static/guidance_split levers"
    )
    parser.add_argument(
        "--lever-recompile",
        action="store_true",
        help="compile each lever arm afresh every round (one model in memory at a time) instead of "
        "holding every arm compiled",
    )
    parser.add_argument(
        "--runtime-arms",
        nargs="*",
        default=None,
        help="arms of lever runtime to time (default: all of sdaccel.cpu.levers.runtime_arms); the "
        "default arm always runs, first",
    )
    parser.add_argument(
        "--tome-ratios",
        nargs="+",
        type=float,
        default=[0.3, 0.5],
        help="lever tome and --quality's tome part: fractions of the full-resolution tokens merged "
        "before self-attention (0 < ratio <= 0.75)",
    )


def add_quality_flags(parser: argparse.ArgumentParser) -> None:
    """The composed image and ``--quality``'s parts on a trained tiny checkpoint."""
    parser.add_argument(
        "--steps-per-image", type=int, default=20, help="UNet steps of the composed per-image time"
    )
    parser.add_argument(
        "--quality",
        default=None,
        metavar="CHECKPOINT",
        help="also measure the quality cost of each lever on a trained sdaccel.toy.dataset checkpoint "
        "(checkpoints/tiny-shapes-sd15): INT8 UNets, DeepCache, VAE INT8 (adherence, PSNR/SSIM), and "
        "the max abs difference of the runtime levers",
    )
    parser.add_argument("--quality-prompts", type=int, default=96, help="held-out prompts of --quality")
    parser.add_argument(
        "--quality-parts",
        nargs="+",
        choices=QUALITY_PARTS,
        default=list(QUALITY_PARTS),
        help="the parts of --quality to measure (default: all); with --update the others keep their "
        "earlier results",
    )


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The run: memory watchdogs, the work folder, the output and ``--update``."""
    parser.add_argument(
        "--memory-limit-gb", type=float, default=20.0, help="watchdog for export/timing children"
    )
    parser.add_argument("--quant-memory-limit-gb", type=float, default=16.0, help="watchdog for quantization")
    parser.add_argument(
        "--min-free-gb", type=float, default=12.0, help="start a child only with this much available"
    )
    parser.add_argument("--workdir", default="build/bench/openvino_ir", help="IRs and calibration data")
    parser.add_argument("--reuse", action="store_true", help="reuse IRs already in --workdir")
    parser.add_argument("--out", default="build/bench/openvino.json")
    parser.add_argument("--update", action="store_true", help="add to the results already in --out")


def recipe_knobs(variant: str, smooth_quant: bool, args) -> tuple[str, dict]:
    """The recipe of ``sdaccel.cpu.quantize`` that ``variant`` runs and its keyword arguments
    (SmoothQuant, bias correction and the layers kept in float): one rule for the UNet and for
    DeepCache's shallow UNet in lever ``stack``. A variant of ``FLOAT_GROUP_RECIPES`` is full INT8
    with one more layer group in float (``float_group_ignored``), as the toy's rows quantize."""
    if variant in TOY_RECIPES:
        return "full_int8", toy_recipe_knobs(variant, args)
    recipe = "full_int8" if variant in FLOAT_GROUP_RECIPES else variant
    knobs = {}
    if recipe == "full_int8" and not smooth_quant:
        knobs["smooth_quant_alpha"] = None
    if recipe == "full_int8" and args.no_bias_correction:
        knobs["bias_correction"] = False
    if variant in FLOAT_GROUP_RECIPES:
        knobs["ignored"] = float_group_ignored(variant)
    return recipe, knobs


def toy_recipe_knobs(variant: str, args) -> dict:
    """The knobs of a :data:`TOY_RECIPES` variant, read from the result it replays
    (:func:`toy_recipe_file`): full INT8 with the toy's float layers added to the sensitive ones
    (accuracy control's with SmoothQuant off, as its search ran)."""
    knobs = replayed_recipes.knobs(variant, toy_recipe_file(variant, args))
    if args.no_bias_correction:
        knobs["bias_correction"] = False
    return knobs


def toy_recipe_file(variant: str, args) -> Path:
    """The result a :data:`TOY_RECIPES` variant replays: ``--accuracy-control-json`` for the
    accuracy control, the committed ranking for the others."""
    if variant == replayed_recipes.ACCURACY_CONTROL and args.accuracy_control_json:
        return Path(args.accuracy_control_json)
    return replayed_recipes.found_file(variant, RESULTS)
