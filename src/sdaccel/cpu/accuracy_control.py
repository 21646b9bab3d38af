"""Accuracy-controlled INT8: NNCF's ``quantize_with_accuracy_control`` on a UNet IR, IR in, IR out.

Plain post-training INT8 (:func:`sdaccel.cpu.quantize.quantize_full`) quantizes every layer it
can and lets the picture pay. ``nncf.quantize_with_accuracy_control`` takes a bound instead: it
quantizes as :func:`~sdaccel.cpu.quantize.quantize_full` does, measures a metric of the f32 model
and of the INT8 one with *your* validation function, and while the drop is above ``max_drop`` it
ranks the groups of quantizers (each group reverted alone, scored by the metric) and reverts the
worst to float, one group at a time, re-ranking when a step makes things worse.

What NNCF calls (``nncf`` 3.4, ``nncf/quantization/algorithms/accuracy_control``):

* ``validate(compiled, items)``: ``compiled`` is an ``ov.CompiledModel`` of the candidate UNet
  (compiled by NNCF for the CPU with ``INFERENCE_PRECISION_HINT=f32``, so that INT8 is the only
  difference from f32); ``items`` iterates the validation items you passed (any Python objects:
  prompts, indices...), all of them or the ranking subset. It returns a float (higher is
  better) or ``(float, per-item floats)``. With per-item values NNCF picks the ranking subset
  (the items where the INT8 model loses most) from them; without, it calls ``validate`` once per
  item to get them. (A function that returns model outputs instead switches NNCF to ranking by
  output error, which needs items that are model inputs: not supported here.)
* The ranking score of a group is ``validate`` on the ranking subset with that group reverted.

Two recipes, with the knobs of :mod:`sdaccel.cpu.quantize`:

``full_int8``
    :func:`~sdaccel.cpu.quantize.quantize_full`'s call (``ModelType.TRANSFORMER``, bias
    correction, :data:`~sdaccel.cpu.quantize.SENSITIVE_LAYER_PATTERNS` in float) with SmoothQuant
    off unless asked for (a reverted MatMul would keep its smoothed input): every activation
    quantizer can be reverted.
``hybrid``
    :func:`~sdaccel.cpu.quantize.quantize_hybrid`: the MatMul/Gather weights are compressed to
    INT8 first (``nncf.compress_weights``), then the convolutions are quantized *with accuracy
    control*. NNCF's restorer reverts ``FakeQuantize`` groups only: it cannot give the MatMuls
    their float weights back (weight compression leaves no quantizer to remove). So the search
    starts from the weight-compressed model, and the bound is kept against f32 by giving the
    search what is left of ``max_drop`` after weight compression's own drop; when that is
    already more than ``max_drop`` the recipe cannot meet the bound and says so.

In one piece only: the restorer works on one graph and the validation runs the whole UNet, so
:func:`~sdaccel.cpu.quantize_parts.quantize_in_parts` does not combine with it. ``max_memory_gb``
refuses, before any work, a UNet whose quantization is expected to need more.

The result is written like :func:`sdaccel.cpu.quantize_parts.quantize_ir`'s (a working folder beside
``dst_xml``, moved into place at the end): a refused request, a bound that cannot be met or a
failure leaves ``dst_xml`` as it was.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from unittest import mock

from sdaccel.core.staging import check_writable, require_free_space
from sdaccel.cpu.ir_files import RESULT_XML, ir_workspace, publish_ir, reporting_full_disk, save_ir
from sdaccel.cpu.quantize import (
    SENSITIVE_LAYER_PATTERNS,
    check_calibration,
    describe_ir,
    ignored_scope_of,
    ir_size_bytes,
    read_model,
    smooth_quant_parameters,
    unmatched_patterns,
    weighted_matmul_and_gather_names,
)
from sdaccel.cpu.quantize_parts import estimate_peak_gb

#: The recipes the search can run (:data:`sdaccel.cpu.quantize.VARIANTS` less weight-only INT8,
#: which has no activation quantizer to revert).
VARIANTS = ("full_int8", "hybrid")


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------


def check_request(variant: str, max_drop: float, validation_items, validate) -> list:
    """Refuse, before any work, an unknown ``variant``, a ``max_drop`` outside (0, 1), no
    validation items or a ``validate`` that cannot be called. Returns the items as a list."""
    if variant not in VARIANTS:
        raise ValueError(
            f"unknown accuracy-control variant {variant!r}; expected one of {VARIANTS} "
            "(int8_weights has no activation quantizer to revert: use sdaccel.cpu.quantize_parts.quantize_ir)"
        )
    if isinstance(max_drop, bool) or not isinstance(max_drop, int | float) or not 0 < max_drop < 1:
        raise ValueError(
            f"max_drop must be a number in (0, 1), the absolute drop of the metric allowed "
            f"(0.02 = 2 points of adherence); got {max_drop!r}"
        )
    if not callable(validate):
        raise TypeError(f"validate must be a function (compiled_model, items) -> float; got {validate!r}")
    items = list(validation_items)
    if not items:
        raise ValueError("validation_items is empty: pass the items validate scores (e.g. held-out prompts)")
    return items


def function_name(fn) -> str:
    """A function's qualified name, for the errors that blame it."""
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def checked_result(result, validate, n_items: int) -> tuple[float, list[float] | None]:
    """``validate``'s return value as ``(metric, per-item values or None)``, or a ValueError that
    names the function: nothing, a non-number, NaN or infinity, or per-item values of the wrong
    length or kind."""
    name = function_name(validate)
    fix = "it must return a finite float (higher is better), or (float, one float per item)"
    metric, per_item = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
    if metric is None or isinstance(metric, bool | str | bytes):
        raise ValueError(f"validation function {name} returned {result!r}: {fix}")
    try:
        metric = float(metric)  # a float, a numpy scalar or a one-element array
    except (TypeError, ValueError):
        raise ValueError(f"validation function {name} returned {result!r}: {fix}") from None
    if not math.isfinite(metric):
        raise ValueError(f"validation function {name} returned {metric!r}: {fix}")
    if per_item is not None:
        try:
            per_item = [float(v) for v in per_item]
        except (TypeError, ValueError):
            raise ValueError(
                f"validation function {name} returned per-item values that are not numbers: {fix}"
            ) from None
        if len(per_item) != n_items or not all(math.isfinite(v) for v in per_item):
            raise ValueError(
                f"validation function {name} returned {len(per_item)} per-item values for {n_items} "
                f"items (or a NaN among them): {fix}"
            )
    return float(metric), per_item


def checking(validate) -> Callable:
    """``validate`` wrapped so that every value it returns inside NNCF is checked
    (:func:`checked_result`)."""

    def wrapper(compiled, items):
        items = list(items)
        return checked_result(validate(compiled, items), validate, len(items))

    wrapper.__qualname__ = function_name(validate)
    return wrapper


def compile_f32(model):
    """``model`` compiled for the CPU as NNCF compiles the candidates: ``INFERENCE_PRECISION_HINT=f32``."""
    import openvino as ov

    return ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def metric_of(model, validate, items) -> tuple[float, list[float] | None]:
    """``validate`` on ``model`` (f32 hint) over ``items``, checked (:func:`checked_result`)."""
    return checked_result(validate(compile_f32(model), list(items)), validate, len(items))


def check_memory(src_xml, variant: str, max_memory_gb: float | None) -> None:
    """Refuse a UNet whose quantization is expected to need more than ``max_memory_gb``: the
    search cannot quantize in parts."""
    if max_memory_gb is None:
        return
    weights = Path(src_xml).with_suffix(".bin").stat().st_size
    need = estimate_peak_gb(variant, weights)
    if need > max_memory_gb:
        raise MemoryError(
            f"Quantizing {src_xml} ({variant}) is expected to peak at {need:.1f} GiB, above "
            f"max_memory_gb={max_memory_gb}; accuracy control cannot quantize in parts (the "
            "restorer works on one graph and validates the whole UNet). Use a machine with more "
            "memory, or plain INT8 in parts (sdaccel.cpu.quantize_parts.quantize_ir(parts=...))."
        )


def quantizable_operations(model) -> int:
    """The Convolutions and MatMuls of ``model`` (an ``ov.Model`` or an IR path): an upper bound
    on the groups of quantizers that NNCF's search ranks, one validation each."""
    return sum(op.get_type_name() in ("Convolution", "MatMul") for op in read_model(model).get_ops())


def estimate_search_s(
    groups: int,
    validate_s: float,
    compile_s: float,
    items: int,
    ranking_items: int | None,
    max_num_iterations: int,
) -> float:
    """Seconds the search is expected to take beside its one quantization, from the seconds of one
    ``validate`` over all ``items`` and of one compile of the UNet: NNCF validates the f32 and the
    plain INT8 model on every item, then every group of quantizers on ``ranking_items`` (all
    items when ``None``), and at most ``max_num_iterations`` candidates on every item again, each
    candidate compiled once. A revert that makes the metric worse is undone and every group ranked
    again: each such step adds the ranking's share again, which no estimate made beforehand knows."""
    if min(groups, items, max_num_iterations) < 1 or min(validate_s, compile_s) < 0:
        raise ValueError(
            "groups, items and max_num_iterations must be at least 1, and the seconds not negative; "
            f"got groups={groups}, items={items}, max_num_iterations={max_num_iterations}, "
            f"validate_s={validate_s}, compile_s={compile_s}"
        )
    share = min(ranking_items or items, items) / items
    return groups * (compile_s + share * validate_s) + (max_num_iterations + 2) * (compile_s + validate_s)


# ----------------------------------------------------------------------------------------------
# What NNCF found
# ----------------------------------------------------------------------------------------------


def activation_quantizers(model) -> int:
    """``FakeQuantize`` operations on activations (not on a constant weight): the quantizers that
    the search can revert, counted the same way before and after weight folding."""
    count = 0
    for op in read_model(model).get_ops():
        if op.get_type_name() == "FakeQuantize":
            source = op.input_value(0).get_node()
            while source.get_type_name() == "Convert":
                source = source.input_value(0).get_node()
            count += source.get_type_name() != "Constant"
    return count


@contextlib.contextmanager
def recording_search() -> Iterator[dict]:
    """While the block runs, record what NNCF's accuracy control measures and decides:
    ``metrics`` (``initial``, ``quantized``, ``tuned``: ``Evaluator.collect_metric_results``),
    ``plain_quantizers`` (activation quantizers of the plain INT8 model) and ``report`` (the
    ``QuantizationAccuracyRestorerReport``, which NNCF only logs; absent when plain INT8 already
    met the bound)."""

    from nncf.quantization.algorithms.accuracy_control.algorithm import QuantizationAccuracyRestorer
    from nncf.quantization.algorithms.accuracy_control.evaluator import Evaluator

    record: dict = {"metrics": {}}
    collect, print_report = Evaluator.collect_metric_results, QuantizationAccuracyRestorer._print_report

    def collect_metric_results(self, model, dataset, model_name=""):
        results = collect(self, model, dataset, model_name)
        record["metrics"][model_name] = results.metric_value
        if model_name == "quantized":
            record["plain_quantizers"] = activation_quantizers(model)
        return results

    def keep_report(report, max_num_iterations):
        record["report"] = report
        return print_report(report, max_num_iterations)

    with (
        mock.patch.object(Evaluator, "collect_metric_results", collect_metric_results),
        mock.patch.object(QuantizationAccuracyRestorer, "_print_report", staticmethod(keep_report)),
    ):
        yield record


def reverted(record: dict) -> dict:
    """The operations NNCF reverted to float, and how many it had quantized, from the record of
    :func:`recording_search`."""
    report = record.get("report")
    if report is None:
        return {"reverted": [], "quantized_operations": None, "iterations": 0, "removed_all": False}
    return {
        "reverted": sorted(node.node_name for node in report.reverted_operations),
        "quantized_operations": report.num_quantized_operations,
        "iterations": (report.num_iterations or 0) + 1,
        "removed_all": bool(report.removed_all),
    }


def impossible_bound(max_drop: float, drop: float, found: dict, search: dict) -> ValueError:
    """The error of a bound the search could not meet, or met only by reverting everything."""
    total, count = found["quantized_operations"], len(found["reverted"])
    fix = (
        "Raise max_drop, allow more iterations (max_num_iterations), or validate on more items; "
        "nothing was written."
    )
    if found["removed_all"] and drop <= max_drop:
        return ValueError(
            f"max_drop={max_drop} is met only with every group of quantizers reverted ({count} of "
            f"{total} quantized operations back in float): the result would be the float model. {fix}"
        )
    how = (
        "every group of quantizers was reverted"
        if found["removed_all"]
        else f"the search stopped after {found['iterations']} iteration(s) "
        f"(max_num_iterations={search['max_num_iterations']})"
    )
    return ValueError(
        f"max_drop={max_drop} could not be met: {count} of {total} quantized operations reverted to "
        f"float, {how}, and the drop is still {drop:.4f}. {fix}"
    )


# ----------------------------------------------------------------------------------------------
# Replaying a search's result on another UNet of the same layout
# ----------------------------------------------------------------------------------------------


def replay_ignored(reverted: Sequence[str]) -> list[str]:
    """The ``ignored`` patterns that replay a search's result as plain post-training INT8: the
    sensitive layers, as the search kept them, and each operation it reverted (``reverted``, the
    names :func:`reverted` gives), one pattern per name, matching that name only.

    ``quantize_full(model, data, ignored=replay_ignored(found), smooth_quant_alpha=None)``, with
    SmoothQuant off as the search ran, quantizes another UNet of the same layout and export (a
    real-size one, whose search would take hours) with those operations in float. Check the names
    first (:func:`check_replay`): an ignored scope passes over a name it does not find."""
    return [*SENSITIVE_LAYER_PATTERNS, *(re.escape(name) + "$" for name in reverted)]


def check_replay(model, reverted: Sequence[str]) -> None:
    """Refuse a replay whose operations ``model`` (an ``ov.Model`` or an IR path) does not have:
    a search of another layout, or of an IR exported by other code, names other operations."""
    patterns = replay_ignored(reverted)[len(SENSITIVE_LAYER_PATTERNS) :]  # one per name, as replayed
    unmatched = set(unmatched_patterns(model, patterns))
    missing = [name for name, pattern in zip(reverted, patterns, strict=True) if pattern in unmatched]
    if missing:
        raise ValueError(
            f"{len(missing)} of the {len(reverted)} operations to keep in float are not in this UNet, "
            f"e.g. {missing[0]!r}: replay a search made on a UNet of the same layout, exported by "
            "sdaccel.cpu.export."
        )


# ----------------------------------------------------------------------------------------------
# The search
# ----------------------------------------------------------------------------------------------


def prepare(model, variant: str, ignored):
    """The model the search starts from and its ignored scope: the f32 model for ``full_int8``;
    for ``hybrid``, the model with its MatMul/Gather weights compressed to INT8 and those layers
    ignored (as :func:`sdaccel.cpu.quantize.quantize_hybrid`)."""
    import nncf

    scope = ignored_scope_of(ignored)
    if variant == "full_int8":
        return model, scope
    weighted = weighted_matmul_and_gather_names(model)
    model = nncf.compress_weights(
        model.clone(),
        mode=nncf.CompressWeightsMode.INT8_ASYM,
        ignored_scope=nncf.IgnoredScope(types=["Convolution"], validate=False),
    )
    scope = nncf.IgnoredScope(
        names=[*scope.names, *weighted],
        patterns=list(scope.patterns),
        types=list(scope.types),
        validate=False,
    )
    return model, scope


def run_search(model, calibration, items, validate, max_drop: float, variant: str, scope, search: dict):
    """``nncf.quantize_with_accuracy_control`` with the knobs of ``variant``; returns the model
    and :func:`recording_search`'s record."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    advanced = smooth_quant_parameters(
        search["smooth_quant_alpha"] if variant == "full_int8" else None,
        disable_bias_correction=not search["bias_correction"],
    )
    restorer = AdvancedAccuracyRestorerParameters(
        max_num_iterations=search["max_num_iterations"],
        ranking_subset_size=search["ranking_subset_size"],
        num_ranking_workers=1,  # candidates one at a time: the validation already uses every core
    )
    with recording_search() as record:
        result = nncf.quantize_with_accuracy_control(
            model,
            nncf.Dataset(calibration),
            nncf.Dataset(items),
            checking(validate),
            max_drop=max_drop,
            drop_type=nncf.DropType.ABSOLUTE,
            subset_size=search["subset_size"],
            model_type=nncf.ModelType.TRANSFORMER,
            ignored_scope=scope,
            advanced_quantization_parameters=advanced,
            advanced_accuracy_restorer_parameters=restorer,
        )
    return result, record


def quantize_with_accuracy_control(
    src_xml: str | os.PathLike,
    dst_xml: str | os.PathLike,
    variant: str,
    calibration,
    validation_items: Sequence,
    validate: Callable,
    max_drop: float = 0.02,
    *,
    subset_size: int = 200,
    ranking_subset_size: int | None = None,
    max_num_iterations: int = 10,
    ignored=None,
    smooth_quant_alpha: float | None = None,
    bias_correction: bool = True,
    max_memory_gb: float | None = None,
    log_level: int = logging.WARNING,
) -> dict:
    """INT8 of the IR ``src_xml`` whose metric stays within ``max_drop`` of f32, saved at ``dst_xml``.

    Args:
        variant: ``"full_int8"`` or ``"hybrid"`` (module docstring: what hybrid can restore).
        calibration: UNet inputs, as for :func:`sdaccel.cpu.quantize_parts.quantize_ir` (a
            :class:`~sdaccel.cpu.calibration.CalibrationSet` or its folder, or a list of input dicts).
        validation_items, validate: ``validate(compiled_model, items)`` scores a compiled UNet on
            some of ``validation_items``, higher is better: a float, or ``(float, per-item
            floats)`` (module docstring). It is run on the f32 model first: a function that returns
            nothing, NaN or a non-number is a ValueError that names it, before any quantization.
        max_drop: the absolute drop of the metric allowed, in (0, 1).
        subset_size, ignored, bias_correction: as for :func:`sdaccel.cpu.quantize.quantize_full`.
        smooth_quant_alpha: SmoothQuant's MatMul alpha, off by default (``None``): NNCF's restorer
            gives a reverted MatMul its original weights back but leaves the input that SmoothQuant
            divided by its per-channel scale, so with SmoothQuant on a reverted MatMul computes a
            wrong product (:mod:`sdaccel.cpu.sensitivity`); off, a reverted layer is the float layer.
        ranking_subset_size: items that rank each group (NNCF's default: all of them).
        max_num_iterations: groups reverted at most.
        max_memory_gb: refuse, before any work, a UNet expected to need more (no parts here).

    Returns ``metric_f32``, ``metric_plain`` (plain INT8, before any revert), ``metric`` (the
    result, measured again on the saved model), ``drop``, ``max_drop``, ``reverted`` (the
    operations back in float) of ``quantized_operations``, ``iterations``, ``search_s``,
    ``fake_quantize_plain`` / ``fake_quantize`` (activation quantizers before and after), and for
    hybrid ``metric_weights_only`` and the ``search_max_drop`` left to the convolutions. A bound
    that cannot be met is a ValueError (:func:`impossible_bound`) and nothing is written.
    """
    import nncf

    # 1. Check the request, then the validation function on the f32 model
    items, data = check_inputs(src_xml, dst_xml, variant, calibration, max_drop, validation_items, validate)
    check_memory(src_xml, variant, max_memory_gb)
    nncf.set_log_level(log_level)
    model = read_model(src_xml)
    metric_f32, _ = metric_of(model, validate, items)
    report = {"variant": variant, "max_drop": max_drop, "drop_type": "absolute", "metric_f32": metric_f32}

    # 2. The starting model: hybrid compresses the MatMul weights, and leaves the rest of the bound
    start, scope = prepare(model, variant, ignored)
    budget = search_budget(start, report, validate, items)

    # 3. The search, then the result checked against the bound, saved and moved into place
    search = dict(
        subset_size=subset_size,
        ranking_subset_size=ranking_subset_size,
        max_num_iterations=max_num_iterations,
        smooth_quant_alpha=smooth_quant_alpha,
        bias_correction=bias_correction,
    )
    with reporting_full_disk(f"Quantizing {src_xml} ({variant}, accuracy control)"):
        with ir_workspace(dst_xml) as work:
            require_free_space(work.parent, ir_size_bytes(src_xml), f"the {variant} IR of {src_xml}")
            result, measured = checked_search(start, data, items, validate, budget, scope, search, report)
            save_ir(result, work / RESULT_XML, compress_to_fp16=False)
            publish_ir(work / RESULT_XML, dst_xml)

    # 4. The report: the metrics, what was reverted, the saved model's quantizers and size
    saved = {**describe_ir(dst_xml), "size_bytes": ir_size_bytes(dst_xml)}
    return {**report, **measured, **saved, "settings": search}


def check_inputs(src_xml, dst_xml, variant: str, calibration, max_drop: float, validation_items, validate):
    """The validation items and calibration data of :func:`quantize_with_accuracy_control`, after
    checking the request, the source IR and that ``dst_xml``'s folder is writable."""
    items = check_request(variant, max_drop, validation_items, validate)
    data = check_calibration(calibration, variant)
    if not Path(src_xml).is_file():
        raise FileNotFoundError(f"No IR at {src_xml}: export the UNet first (sdaccel.cpu.export).")
    check_writable(Path(dst_xml).parent)
    return items, data


def search_budget(start, report: dict, validate, items) -> float:
    """The drop left to the search: ``max_drop``, less, for hybrid, what compressing the MatMul
    weights of ``start`` already cost (recorded in ``report``); a ValueError where nothing is left."""
    max_drop, metric_f32 = report["max_drop"], report["metric_f32"]
    if report["variant"] != "hybrid":
        return max_drop
    report["metric_weights_only"] = metric_of(start, validate, items)[0]
    budget = max_drop - (metric_f32 - report["metric_weights_only"])
    if budget <= 0:
        raise ValueError(
            f"max_drop={max_drop} cannot be met by hybrid: compressing the MatMul weights alone "
            f"drops the metric by {metric_f32 - report['metric_weights_only']:.4f}, and the search "
            "can only revert activation quantizers. Use variant='full_int8' or a larger max_drop."
        )
    report["search_max_drop"] = budget
    return budget


def checked_search(start, data, items, validate, budget: float, scope, search: dict, report: dict):
    """Run the search (:func:`run_search`) from ``start`` and measure its result again: the model
    and what it measured, or :func:`impossible_bound`'s ValueError where the bound is not met."""
    max_drop, metric_f32 = report["max_drop"], report["metric_f32"]
    tick = time.perf_counter()
    result, record = run_search(start, data, items, validate, budget, report["variant"], scope, search)
    search_s = time.perf_counter() - tick
    found = reverted(record)
    metric = metric_of(result, validate, items)[0]
    if metric_f32 - metric > max_drop or found["removed_all"]:
        raise impossible_bound(max_drop, metric_f32 - metric, found, search)
    return result, {
        "metric_plain": record["metrics"].get("quantized"),
        "metric": metric,
        "drop": metric_f32 - metric,
        **found,
        "search_s": search_s,
        "fake_quantize_plain": record.get("plain_quantizers"),
    }
