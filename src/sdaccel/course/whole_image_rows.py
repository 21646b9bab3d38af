"""The rows of ``benchmarks/bench_whole_image.py``: their keys, their order and the baseline, in one
place that the script (which measures them) and :mod:`sdaccel.course.whole_image` (which reads its
JSON into tables) both import.

A row key names one configuration. The few-step OpenVINO rows come once per INT8 recipe of
``--lcm-variant``: the first recipe keeps the keys :data:`LCM_ROWS` (``lcm4_lora_int8``,
``lcm4_lora_int8_taesd`` and their static twins ``lcm4_lora_int8_static``,
``lcm4_lora_int8_static_taesd``), each further one gets ``lcm4_lora_<variant>``,
``lcm4_lora_<variant>_taesd`` and so on (:func:`lcm_row_key`), listed right after the first's
(:func:`row_order`).
"""

from __future__ import annotations

#: PyTorch fp32, the usual steps with CFG: the baseline of every ratio.
TORCH_FP32_20 = "torch_fp32_20"
#: OpenVINO in its fastest float precision, the usual steps.
OV_FLOAT_20 = "ov_float_20"
#: OpenVINO with the UNet quantized by one recipe, the usual steps.
OV_INT8_WEIGHTS_20 = "ov_int8_weights_20"
OV_HYBRID_20 = "ov_hybrid_20"
OV_FULL_INT8_20 = "ov_full_int8_20"
#: Full INT8 with the ResNets kept in float: the recipe's name (``sdaccel.toy.adherence``'s
#: ``FLOAT_GROUP_RECIPES``, which the benchmark quantizes by; ``--lcm-variant`` takes it too) and its row.
FLOAT_RESNETS = "full_int8_float_resnets"
OV_FLOAT_RESNETS_20 = f"ov_{FLOAT_RESNETS}_20"
#: The same with the toy's recipes replayed (``sdaccel.toy.replayed_recipes``; SD 1.5 only): full
#: INT8 with the layers accuracy control gave back to float, or the 4 most sensitive groups, in float.
OV_ACCURACY_CONTROL_20 = "ov_full_int8_accuracy_control_20"
OV_SENSITIVE_4_20 = "ov_full_int8_sensitive_4_20"
#: OpenVINO with the levers stacked that keep the toy's picture (``benchmarks/bench_openvino.py
#: --levers stack``, ``python -m sdaccel.toy.stack_quality``): static shapes, full INT8 with the
#: ResNets in float, DeepCache; the usual steps.
OV_STACK_20 = "ov_stack_20"
#: The same stack with DeepCache cut at the last up block's last layer (``sdaccel.cpu.deepcache``'s
#: ``cut="layer"``, the DeepCache paper's default branch), at its own interval.
OV_STACK_LAYER_20 = "ov_stack_layer_20"
#: The rows that run DeepCache's two UNets.
STACK_ROWS = (OV_STACK_20, OV_STACK_LAYER_20)
#: OpenVINO, few steps LCM with an LCM-LoRA fused and an INT8 UNet; then with a tiny autoencoder.
LCM4_LORA_INT8 = "lcm4_lora_int8"
LCM4_LORA_INT8_TAESD = "lcm4_lora_int8_taesd"
#: The same two with the pipeline compiled static for one image without guidance (its one shape: a
#: UNet batch of 1), as the stack compiles its pipeline: the same IRs, reshaped, so the same
#: arithmetic; the plugin can plan every layer for that one shape.
LCM4_LORA_INT8_STATIC = "lcm4_lora_int8_static"
LCM4_LORA_INT8_STATIC_TAESD = "lcm4_lora_int8_static_taesd"
#: JAX on the CPU in f32, the usual steps; then few steps LCM, the LoRA fused, a tiny autoencoder.
JAX_FP32_20 = "jax_fp32_20"
JAX_LCM4_LORA_TAESD = "jax_lcm4_lora_taesd"

#: The rows, in the order the tables show them.
ROWS = (
    TORCH_FP32_20,
    OV_FLOAT_20,
    OV_INT8_WEIGHTS_20,
    OV_HYBRID_20,
    OV_FULL_INT8_20,
    OV_FLOAT_RESNETS_20,
    OV_ACCURACY_CONTROL_20,
    OV_SENSITIVE_4_20,
    OV_STACK_20,
    OV_STACK_LAYER_20,
    LCM4_LORA_INT8,
    LCM4_LORA_INT8_TAESD,
    LCM4_LORA_INT8_STATIC,
    LCM4_LORA_INT8_STATIC_TAESD,
    JAX_FP32_20,
    JAX_LCM4_LORA_TAESD,
)
#: The row every ratio is taken against.
BASELINE = TORCH_FP32_20
#: The few-step OpenVINO rows that come once per ``--lcm-variant`` recipe.
LCM_ROWS = (LCM4_LORA_INT8, LCM4_LORA_INT8_TAESD, LCM4_LORA_INT8_STATIC, LCM4_LORA_INT8_STATIC_TAESD)
#: The suffixes of a few-step row's key: compiled static, decoded by the tiny autoencoder.
STATIC_SUFFIX = "_static"
TAESD_SUFFIX = "_taesd"
#: What the keys of the few-step OpenVINO rows of every recipe start with.
LCM_PREFIX = "lcm4_lora_"


def lcm_row_key(key: str, index: int, variant: str) -> str:
    """The row key of an ``lcm4_lora_int8*`` row for the ``index``-th ``--lcm-variant``: the first
    keeps the key (``lcm4_lora_int8``, whatever its recipe: the title names it), the others are
    ``lcm4_lora_<variant>`` (``lcm4_lora_full_int8_taesd``), listed after it."""
    return key if index == 0 else key.replace(LCM4_LORA_INT8, f"{LCM_PREFIX}{variant}", 1)


def is_static_few_step(key: str) -> bool:
    """Whether an OpenVINO few-step row runs its pipeline compiled static (``..._static[_taesd]``)."""
    return key.startswith(LCM_PREFIX) and key.removesuffix(TAESD_SUFFIX).endswith(STATIC_SUFFIX)


def decodes_tiny(key: str) -> bool:
    """Whether a few-step row decodes with the tiny autoencoder (``..._taesd``)."""
    return is_few_step(key) and key.endswith(TAESD_SUFFIX)


def ov_row_key(variant: str) -> str:
    """The key of the OpenVINO row of the usual steps whose UNet is ``variant``: ``ov_<variant>_20``."""
    return f"ov_{variant}_20"


def ov_row_variant(key: str) -> str | None:
    """The UNet variant of an ``ov_<variant>_20`` row (``"float"`` for :data:`OV_FLOAT_20`);
    ``None`` for any other key (:data:`STACK_ROWS` too: they run more than one UNet)."""
    if key.startswith("ov_") and key.endswith("_20") and key not in STACK_ROWS:
        return key[3:-3]
    return None


def is_openvino(key: str) -> bool:
    """Whether the row runs OpenVINO (the ``ov_*`` rows and the few-step ``lcm4*`` rows)."""
    return key.startswith(("ov_", "lcm4"))


def is_few_step(key: str) -> bool:
    """Whether the row runs the few LCM steps (``settings["few_steps"]``) rather than the usual ones."""
    return "lcm" in key


def row_order(key: str) -> float:
    """Where a row key sorts: :data:`ROWS`' order; the few-step OpenVINO rows of further INT8
    recipes (``lcm4_lora_<variant>``, ``lcm4_lora_<variant>_taesd``) right after the first
    recipe's, the dynamic ones after its dynamic ones and the static after its static; any other
    key last."""
    if key in ROWS:
        return ROWS.index(key)
    if key.startswith(LCM_PREFIX):
        last = LCM4_LORA_INT8_STATIC_TAESD if is_static_few_step(key) else LCM4_LORA_INT8_TAESD
        return ROWS.index(last) + 0.5
    return len(ROWS)


def recipe_key(key: str, lcm_variants) -> str:
    """The key that names a row's recipe whatever the run's order of ``--lcm-variant``: the first
    recipe's few-step rows (``lcm4_lora_int8``, ``lcm4_lora_int8_taesd``) get the key a further
    recipe's would (``lcm4_lora_full_int8_taesd``, :func:`lcm_row_key`); every other key is its own.
    ``lcm_variants``: the run's ``settings["lcm_variant"]`` (a name or a list of names). The toy's
    quality of each recipe (:mod:`sdaccel.toy.whole_image_quality`) is keyed so."""
    if key not in LCM_ROWS:
        return key
    variants = [lcm_variants] if isinstance(lcm_variants, str) else list(lcm_variants or ())
    if not variants:
        raise ValueError(f"Row {key!r} is a few-step INT8 row, but the run names no --lcm-variant.")
    return lcm_row_key(key, 1, variants[0])
