"""The toy's INT8 UNets: each recipe of the adherence rows, quantized from the f32 export of a
trained shapes checkpoint and calibrated on *training* captions (never the evaluated ones).

The recipes are :data:`sdaccel.cpu.quantize.VARIANTS`, full INT8 with one more layer group kept in
float (:data:`FLOAT_GROUP_VARIANTS`, under their one-word names in :data:`FLOAT_GROUP_RECIPES`;
:func:`float_group_ignored` is their ignored scope, which the real-size benchmarks quantize with
too) and the same recipes quantized in parts (:data:`PARTS_VARIANTS`). :func:`quantize_unet` makes
them; :mod:`sdaccel.toy.adherence`, :mod:`sdaccel.toy.adherence_steps` and
:mod:`sdaccel.toy.whole_image_quality` score them.
"""

from __future__ import annotations

from pathlib import Path

from sdaccel.cpu import quantize_parts
from sdaccel.cpu.quantize import SENSITIVE_LAYER_PATTERNS
from sdaccel.toy.calibration import calibrate_on_training_captions

#: Full INT8 with one more layer group kept in float (a regular expression over OpenVINO node
#: names, added to :data:`sdaccel.cpu.quantize.SENSITIVE_LAYER_PATTERNS`). On these small models
#: the ResNets' activation quantizers are where full INT8 loses its colours (notebook 05).
FLOAT_GROUP_VARIANTS = {"full_int8, float resnets": r".*resnets.*"}
#: The same recipes under the one-word names that row keys and command-line flags use
#: (``benchmarks/bench_whole_image.py --lcm-variant``, :mod:`sdaccel.toy.whole_image_quality`).
FLOAT_GROUP_RECIPES = {"full_int8_float_resnets": "full_int8, float resnets"}
#: The same recipes quantized in parts (:func:`sdaccel.cpu.quantize_parts.quantize_in_parts`): their
#: rows should match the one-shot ones within the noise.
PARTS_VARIANTS = {"full_int8 in 3 parts": ("full_int8", 3), "hybrid in 3 parts": ("hybrid", 3)}


def float_group_ignored(variant: str) -> list[str]:
    """The ignored scope of full INT8 for a recipe of :data:`FLOAT_GROUP_VARIANTS` (or its name in
    :data:`FLOAT_GROUP_RECIPES`): the layers every recipe keeps in float, then the recipe's group.
    The toy's rows and the real-size benchmarks quantize with this one list."""

    name = FLOAT_GROUP_RECIPES.get(variant, variant)
    if name not in FLOAT_GROUP_VARIANTS:
        known = [*FLOAT_GROUP_VARIANTS, *FLOAT_GROUP_RECIPES]
        raise ValueError(f"{variant!r} keeps no layer group in float; choose from {known}.")
    return [*SENSITIVE_LAYER_PATTERNS, FLOAT_GROUP_VARIANTS[name]]


def quantize_unet(
    pipe,
    unet_xml: Path,
    work: Path,
    variants,
    steps: int,
    guidance_scale: float,
    size: int,
    seed: int = 0,
    recipes: dict[str, dict] | None = None,
) -> dict[str, Path]:
    """Each INT8 variant of ``unet_xml``, calibrated by
    :func:`sdaccel.toy.calibration.calibrate_on_training_captions` (16 training captions, 64 samples).
    ``recipes``: more full INT8 recipes, name -> the knobs of ``quantize_ir`` (the replayed ones
    of :mod:`sdaccel.toy.replayed_recipes`), quantized after ``variants``."""

    recipes = dict(recipes or {})
    calibration = None
    if recipes or any(v != "int8_weights" for v in variants):
        calibration = calibrate_on_training_captions(
            pipe, work / "calibration", steps, guidance_scale, size, seed=seed
        )
    out = {}
    for variant in variants:
        out[variant] = work / f"unet_{variant.replace(', ', '_').replace(' ', '_')}.xml"
        data = None if variant == "int8_weights" else calibration.folder
        if variant in PARTS_VARIANTS:
            recipe, parts = PARTS_VARIANTS[variant]
            quantize_parts.quantize_ir(unet_xml, out[variant], recipe, data, subset_size=64, parts=parts)
        elif variant in FLOAT_GROUP_VARIANTS:
            ignored = float_group_ignored(variant)
            quantize_parts.quantize_ir(
                unet_xml, out[variant], "full_int8", data, subset_size=64, ignored=ignored
            )
        else:
            quantize_parts.quantize_ir(unet_xml, out[variant], variant, data, subset_size=64)
    for name, knobs in recipes.items():
        out[name] = work / f"unet_{name}.xml"
        quantize_parts.quantize_ir(
            unet_xml, out[name], "full_int8", calibration.folder, subset_size=64, **knobs
        )
    return out
