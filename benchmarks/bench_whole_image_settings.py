"""The settings every part of ``bench_whole_image.py`` shares: the UNet's INT8 recipes, each model's
image side, tiny checkpoint and default rows, what ``--reuse`` takes, and the file a replayed recipe
reads."""

from __future__ import annotations

from pathlib import Path

from sdaccel.course.whole_image_rows import (
    OV_ACCURACY_CONTROL_20,
    OV_HYBRID_20,
    OV_INT8_WEIGHTS_20,
    OV_SENSITIVE_4_20,
    OV_STACK_20,
    OV_STACK_LAYER_20,
    ROWS,
)
from sdaccel.toy import replayed_recipes
from sdaccel.toy.int8_unets import FLOAT_GROUP_RECIPES

#: The INT8 recipes of the UNet (``ov_<variant>_20`` rows and ``--lcm-variant``): NNCF's three, and
#: full INT8 with the ResNets in float (the recipe that kept the SD 1.5-layout toy's picture at 4 LCM
#: steps; ``sdaccel.toy.int8_unets.float_group_ignored``).
QUANT_VARIANTS = ("int8_weights", "hybrid", "full_int8", *FLOAT_GROUP_RECIPES)
#: The toy's recipes replayed on the UNet (SD 1.5 only), quantized from the same calibration.
REPLAYED = replayed_recipes.NAMES
RESULTS = Path(__file__).resolve().parent / "results"
#: What ``--reuse`` takes, and the command that made it.
REUSE = {
    "sd15": {
        "root": "build/bench/memory/sd15",
        "command": "python benchmarks/bench_memory.py sd15 --calib-samples 2 --out benchmarks/results/memory_sd15.json",
    }
}
#: Per model: the image side, the tiny checkpoint of ``--quick``, the rows run by default.
SIZE = {"sd15": 512, "sdxl": 1024}
QUICK_CHECKPOINT = {"sd15": "checkpoints/tiny-shapes-sd15", "sdxl": "checkpoints/tiny-shapes-sdxl"}
DEFAULT_ROWS = {
    "sd15": ROWS,
    # SDXL: the fastest INT8 recipe of SD 1.5 (full INT8) stands for "the best INT8" at 20 steps,
    # beside full INT8 with the ResNets in float (the toys' picture);
    # the stack, measured per UNet step on SD 1.5 only, on SD 1.5 only; the toy's recipes replayed,
    # found on an SD 1.5-layout toy, on SD 1.5 only
    "sdxl": tuple(
        r
        for r in ROWS
        if r
        not in (
            OV_INT8_WEIGHTS_20,
            OV_HYBRID_20,
            OV_STACK_20,
            OV_STACK_LAYER_20,
            OV_ACCURACY_CONTROL_20,
            OV_SENSITIVE_4_20,
        )
    ),
}
#: How the random checkpoint's weights are stored (the loaders upcast: timing does not change).
WEIGHT_DTYPE = {"sd15": "fp32", "sdxl": "fp16"}
#: The default watchdog of each child (GiB of RSS): SDXL's f32 weights alone are 14 GB.
MEMORY_LIMIT_GB = {"sd15": 18.0, "sdxl": 22.0}
#: ``--quick``'s image side: SDXL's composed rows need a step that stands above the timer's noise,
#: which the tiny SDXL's step at 32x32 does not (JAX: a fraction of a millisecond).
QUICK_SIZE = {"sd15": 32, "sdxl": 128}
#: ``--compose`` given without numbers: the calls of 1 and 2 steps (``--quick``: 1 and 3).
COMPOSE = [1, 2]


def replayed_file(name: str, args) -> Path:
    """The result a replayed recipe reads: ``--accuracy-control-json`` for the accuracy control,
    the committed one in ``benchmarks/results`` otherwise."""
    if name == replayed_recipes.ACCURACY_CONTROL and args.accuracy_control_json:
        return Path(args.accuracy_control_json)
    return replayed_recipes.found_file(name, RESULTS)
