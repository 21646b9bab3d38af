"""Quantizing a UNet IR file with one of :mod:`sdaccel.cpu.quantize`'s recipes, within a memory
budget: in one piece, or one part at a time, each step in a watched child process.

:func:`quantize_ir` reads an IR, applies a recipe and saves the result; with a budget
(``max_memory_gb``) or a number of ``parts`` it hands the work to :func:`quantize_in_parts`, which
cuts the UNet at block boundaries (:mod:`sdaccel.cpu.ir_parts`), quantizes part after part and
stitches the result, so the peak follows the largest part instead of the whole model.
:func:`parts_for_budget` chooses the number of parts from :func:`estimate_peak_gb`.

Memory: NNCF compiles an f32 copy of the model to collect statistics (its engine forces
``INFERENCE_PRECISION_HINT=f32``) and runs it on the calibration inputs, so the peak is the model
as read, plus that compiled copy, plus the activations and statistics of a calibration step, plus
the copies made while the quantized weights are folded at the end. What this module offers, each
measured on the real SD 1.5 UNet architecture (``benchmarks/bench_openvino.py --levers
quant_memory``; batch 2, 64x64 latents, 8 samples, peak RSS of the quantizing process):

* quantize an **f32** IR, not an fp16 one: NNCF's statistics model and weight folding work on f32
  copies of fp16 weights, so the fp16 source costs *more* (full INT8 without SmoothQuant: 11.6 GiB
  from f32, above 16 GiB from fp16; hybrid: 9.3 vs 11.6 GiB). The IR is read memory-mapped;
* switch SmoothQuant off (``smooth_quant_alpha=None``: one statistics pass fewer) and, if needed,
  bias correction (``bias_correction=False``: its statistics are collected alongside the ranges;
  from the fp16 IR it took full INT8 from above 16 to 14.3 GiB);
* the hybrid recipe, which compresses the MatMul weights to INT8 *before* the activation pass, so
  the f32 statistics model holds INT8 MatMul weights;
* a smaller ``subset_size``, and calibration samples streamed from disk
  (:class:`~sdaccel.cpu.calibration.CalibrationSet`) instead of held in memory;
* each quantization in a child process (:func:`sdaccel.core.processes.run_with_memory_limit`), so
  nothing stays resident between recipes, the peak is measured per recipe, and a run that would
  exhaust the machine is stopped at a limit instead.

For the SDXL UNet (f32 IR, same calibration), hybrid peaked at 18.8 GiB RSS of which 10.5 GiB
anonymous (the rest is the memory-mapped IR, which the kernel can drop), and full INT8 with
SmoothQuant and bias correction off at 20.4 GiB RSS, 15.5 GiB anonymous; with bias correction on
it passed 16 GiB anonymous.


The result is written as the only writer of its file, in a working folder beside it, and moved into
place at the end (:mod:`sdaccel.cpu.ir_files`).
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import psutil

from sdaccel.core.faults import fault_point
from sdaccel.core.processes import run_with_memory_limit
from sdaccel.core.staging import check_writable, require_free_space
from sdaccel.cpu import ir_parts
from sdaccel.cpu.calibration import CalibrationSet
from sdaccel.cpu.ir_files import (
    RESULT_XML,
    full_disk_error,
    ir_workspace,
    publish_ir,
    reporting_full_disk,
    save_ir,
    size_text,
)
from sdaccel.cpu.quantize import (
    check_calibration,
    describe_ir,
    ir_size_bytes,
    quantize_variant,
    read_model,
    with_progress,
)


def quantize_ir(
    src_xml: str | os.PathLike,
    dst_xml: str | os.PathLike,
    variant: str,
    calibration: str | os.PathLike | None = None,
    subset_size: int = 200,
    log_level: int = logging.WARNING,
    *,
    parts: int | None = None,
    max_memory_gb: float | None = None,
    progress: bool | None = None,
    **knobs,
) -> dict:
    """Read an IR, apply one of :data:`~sdaccel.cpu.quantize.VARIANTS`, save the result: the unit
    of work that :func:`sdaccel.core.processes.run_with_memory_limit` runs in a child process
    (everything is passed by path).

    ``calibration`` is a :class:`CalibrationSet` folder (unused by ``int8_weights``). The result is
    saved without fp16 compression of the remaining float constants (quantizer ranges and
    scales stay exact; the weights are INT8 anyway). ``log_level`` is NNCF's (its INFO lists every
    ignored node). Returns the time and the IR's size and :func:`describe_ir` counts.

    Before any work: the variant, the source IR, the calibration data (:func:`check_calibration`)
    and that ``dst_xml``'s folder can be written are checked; then, as the only writer of
    ``dst_xml`` (:func:`ir_workspace`: a second quantization of it waits, then does its own), that
    its disk has room for the result (about the size of the source IR). The IR is saved in a hidden
    working folder and moved into place at the end (:func:`publish_ir`), so a failure, a Ctrl-C or
    a kill never leaves a half-written ``dst_xml``: it is the old IR or the new one.

    ``max_memory_gb`` chooses the number of parts (:func:`parts_for_budget`), or ``parts`` sets it.
    With either, the work goes to :func:`quantize_in_parts`: each step in a child process watched
    at ``max_memory_gb`` (the calibration must then be a folder), one part at a time, or the whole
    UNet in one child when one part fits. With neither, the UNet is quantized here, in one piece.

    ``progress`` shows NNCF's progress bars (``True``) or hides them (``False``); by default only
    where they are drawn live (:func:`~sdaccel.cpu.quantize.live_bars`): a child process of a
    notebook's kernel, or one whose output goes to a pipe or a file, would print each bar once
    finished, as a line of noise.
    """
    # 1. Check the request
    data = check_calibration(calibration, variant)
    if not Path(src_xml).is_file():
        raise FileNotFoundError(f"No IR at {src_xml}: export the UNet first (sdaccel.cpu.export).")
    check_writable(Path(dst_xml).parent)
    if max_memory_gb is not None or (parts is not None and parts != 1):
        return quantize_in_parts(
            src_xml,
            dst_xml,
            variant,
            data,
            parts_for_budget(src_xml, variant, max_memory_gb) if parts is None else parts,
            subset_size,
            memory_limit_gb=max_memory_gb,
            log_level=log_level,
            progress=progress,
            **knobs,
        )

    # 2. Quantize and save in a working folder beside dst_xml, then move the result into place
    with reporting_full_disk(f"Quantizing {src_xml} ({variant})"):
        with ir_workspace(dst_xml) as work:
            start = time.perf_counter()
            require_free_space(
                work.parent, ir_size_bytes(src_xml), f"the {variant} IR of {Path(src_xml).name}"
            )
            report = with_progress(
                progress,
                quantize_to_file,
                src_xml,
                work / RESULT_XML,
                variant,
                data,
                subset_size,
                log_level,
                **knobs,
            )
            publish_ir(work / RESULT_XML, dst_xml)
    return {**report, "seconds": time.perf_counter() - start, "size_bytes": ir_size_bytes(dst_xml)}


def quantize_to_file(
    src_xml: str | os.PathLike,
    out_xml: str | os.PathLike,
    variant: str,
    calibration=None,
    subset_size: int = 200,
    log_level: int = logging.WARNING,
    **knobs,
) -> dict:
    """Quantize the IR at ``src_xml`` with ``variant`` and save it at ``out_xml``, a file of a
    working folder (:func:`ir_workspace`; nothing is locked or published here): the core of
    :func:`quantize_ir`, and the child-process unit of :func:`quantize_in_parts`'s stage ``whole``.
    Returns the variant and :func:`describe_ir`'s counts."""
    import nncf

    nncf.set_log_level(log_level)
    data = check_calibration(calibration, variant)
    model = quantize_variant(read_model(src_xml), variant, data, subset_size, **knobs)
    save_ir(model, Path(out_xml), compress_to_fp16=False)
    return {"variant": variant, "parts": 1, **describe_ir(model)}


#: Peak resident memory of quantizing a UNet (or one part of it): GiB per GiB of its f32 weights,
#: plus a fixed part (the runtime, a calibration step's activations and statistics, the crossing
#: tensors): what :func:`parts_for_budget` uses to choose the number of parts. Fitted to the real
#: SD 1.5 and SDXL UNet architectures at 64x64 latents, batch 2, from the f32 IR
#: (``benchmarks/bench_quantize_parts.py``; ``benchmarks/results/quantize_parts_*.json``): full
#: INT8 with SmoothQuant peaked at 12.5 GiB in one piece (3.2 GiB of weights) and at 6.1 GiB for
#: its largest part (1.1 GiB, the high-resolution up blocks). Larger latents need more.
PEAK_PER_WEIGHT_BYTE = {"int8_weights": 1.0, "hybrid": 2.0, "full_int8": 3.1}


PEAK_FIXED_GB = 2.7


def default_budget_gb(fraction: float = 0.75) -> float:
    """A memory budget for quantizing: ``fraction`` of the memory available now (what the other
    programs leave), in GiB."""
    return round(fraction * psutil.virtual_memory().available / 2**30, 1)


def estimate_peak_gb(variant: str, weight_bytes: int) -> float:
    """The peak RSS (GiB) that quantizing ``weight_bytes`` of f32 weights with ``variant`` is
    expected to reach (:data:`PEAK_PER_WEIGHT_BYTE`)."""
    return PEAK_PER_WEIGHT_BYTE[variant] * weight_bytes / 2**30 + PEAK_FIXED_GB


def parts_for_budget(src_xml: str | os.PathLike, variant: str, max_memory_gb: float) -> int:
    """The fewest parts whose largest one is expected to quantize within ``max_memory_gb``
    (:func:`estimate_peak_gb`); an error naming the smallest budget that can work when even one
    block per part would not fit."""
    model = read_model(src_xml)
    blocks = len(ir_parts.units(model))
    for parts in range(1, blocks + 1):
        plan = ir_parts.plan_parts(model, parts)
        if estimate_peak_gb(variant, max(plan.weight_bytes)) <= max_memory_gb:
            return parts
    raise ValueError(
        f"{variant} of {src_xml} is expected to need {estimate_peak_gb(variant, max(plan.weight_bytes)):.1f} GiB "
        f"even with one block per part ({blocks} parts), above max_memory_gb={max_memory_gb}: "
        "raise the budget, or use int8_weights, which needs the least."
    )


def cut_ir(src_xml: str, folder: str, parts: int) -> dict:
    """Child-process unit: cut the IR at ``src_xml`` into ``parts`` (:mod:`sdaccel.cpu.ir_parts`),
    save each as ``part_<k>.xml`` (f32, as read) in ``folder``, and return the plan as a dict."""
    model = read_model(src_xml)
    inputs = [p.get_friendly_name() for p in model.get_parameters()]
    plan = ir_parts.plan_parts(model, parts)
    for k, part in enumerate(ir_parts.cut(model, plan)):
        save_ir(part, Path(folder) / f"part_{k}.xml", compress_to_fp16=False)
    return {**plan.as_dict(), "model_inputs": inputs}


def quantize_part(
    part_xml: str,
    out_xml: str,
    variant: str,
    state: str | None,
    inputs: list[str],
    subset_size: int,
    next_state: str | None,
    keep: list[str],
    log_level: int,
    knobs: dict,
) -> dict:
    """Child-process unit: quantize one part with ``variant`` on its inputs read from the sample
    files in ``state``, save it at ``out_xml``; then, with ``next_state``, run the *float* part on
    every sample and write the next state: those tensors of ``keep`` (what later parts read) that
    this state or the part's outputs hold. They are streamed to disk one sample at a time; once the
    first is written, the room for the others is checked."""
    import nncf
    import openvino as ov

    nncf.set_log_level(log_level)
    start = time.perf_counter()
    data = None if state is None else CalibrationSet(state, names=inputs, limit=subset_size)
    model = quantize_variant(read_model(part_xml), variant, data, subset_size, **knobs)
    save_ir(model, Path(out_xml), compress_to_fp16=False)
    del model
    gc.collect()
    seconds = time.perf_counter() - start
    if next_state is None:
        return {"quantize_s": seconds, "propagate_s": 0.0}
    start = time.perf_counter()
    compiled = ov.Core().compile_model(read_model(part_xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    crossing = CalibrationSet(next_state)
    samples = CalibrationSet(state, limit=subset_size).files
    crossing.folder.mkdir(parents=True, exist_ok=True)
    for index, path in enumerate(samples):
        with np.load(path) as npz:
            values = {name: npz[name] for name in npz.files}
        request.infer({name: values[name] for name in inputs})
        for output in compiled.outputs:
            values[ir_parts.tensor_name(output)] = np.array(request.get_tensor(output).data, copy=True)
        np.savez(crossing.folder / path.name, **{name: values[name] for name in keep if name in values})
        fault_point("quantize.crossing-sample-saved")
        if index == 0:
            crossing.require_room_for(
                len(samples) - 1, "the tensors crossing into the next part", "use fewer samples (subset_size)"
            )
    return {"quantize_s": seconds, "propagate_s": time.perf_counter() - start}


def stitch_ir(folder: str, parts: int, inputs: list[str], dst_xml: str) -> dict:
    """Child-process unit: join ``quant_<k>.xml`` of ``folder`` into one IR at ``dst_xml``."""
    models = [read_model(Path(folder) / f"quant_{k}.xml") for k in range(parts)]
    model = ir_parts.stitch(models, inputs)
    save_ir(model, Path(dst_xml), compress_to_fp16=False)
    return describe_ir(model)


def quantize_in_parts(
    src_xml: str | os.PathLike,
    dst_xml: str | os.PathLike,
    variant: str,
    calibration: str | os.PathLike | None = None,
    parts: int = 2,
    subset_size: int = 200,
    *,
    memory_limit_gb: float | None = None,
    isolate: bool = True,
    log_level: int = logging.WARNING,
    progress: bool | None = None,
    **knobs,
) -> dict:
    """:func:`quantize_ir`, one part of the UNet at a time: the same recipe, with a peak memory set
    by the largest part instead of the whole model.

    1. The IR is cut at block boundaries into ``parts`` parts of about equal weight bytes
       (:mod:`sdaccel.cpu.ir_parts`; skip connections, the timestep and text embeddings cross the
       cuts as extra inputs of the later parts).
    2. Part ``k`` is quantized on its own inputs: for part 0, the UNet's calibration inputs; for
       the others, the tensors crossing into them, which the *float* parts before them computed
       from the same calibration inputs (exactly what one-shot NNCF sees at those layers). They are
       streamed to disk one sample at a time and replaced part after part, never all in memory.
    3. The quantized parts are stitched back into one IR with the UNet's inputs and outputs.

    Each step runs in a child process (:func:`sdaccel.core.processes.run_with_memory_limit`, stopped
    above ``memory_limit_gb`` of anonymous RSS), so nothing stays resident between parts
    (``isolate=False`` runs them here instead, one after the other: for small models, where
    starting a process costs more than the step, and peaks are not measured). A child never
    outlives this call: Ctrl-C kills it, and it dies with this process, even with ``SIGKILL``.

    ``parts=1`` quantizes the whole UNet in one child (stage ``whole``), as :func:`quantize_ir`
    would: the one-shot result, watched like the parts.

    ``progress``: NNCF's progress bars, as for :func:`quantize_ir`. By default a child shows them
    only when its output is a terminal (:func:`~sdaccel.cpu.quantize.live_bars`, decided in the
    child): a notebook's kernel collects a child's output, where each bar would be printed once
    finished.

    ``dst_xml`` is written only at the end, whole (:func:`publish_ir`). The work runs as its only
    writer (:func:`ir_workspace`: a second quantization of it waits, then does its own) in a
    hidden working folder beside it (``.<stem>-parts-*``: the f32 parts, the quantized parts, the
    tensors crossing between them), which is removed at the end, also on failure or Ctrl-C; one
    that a killed process left is removed by the next call. Before any step, the disk must have
    room for twice the source IR (the parts and the result), and each part checks the room for the
    tensors it streams once it has written the first sample. Raises ``OSError(ENOSPC)`` naming the
    stage when the disk is full, and ``MemoryError`` naming the stage, its memory and the fix when
    the watchdog stopped a child.

    Returns what :func:`quantize_ir` returns, plus the ``plan`` (blocks, weight bytes and crossing
    tensors of each part; not for one part) and ``stages``: peak RSS, peak anonymous RSS and
    seconds of each child (``cut``, ``part <k>``, ``stitch``), with their maxima in
    ``peak_rss_bytes`` and ``peak_anon_bytes``.
    """
    # 1. Check the inputs (the calibration inputs are read from disk, part after part)
    data = check_parts_request(src_xml, variant, calibration, parts)
    state = None if data is None else str(data.folder)
    dst, what = Path(dst_xml), f"Quantizing {src_xml} in {parts} part(s)"
    run = StageRunner(what, isolate, memory_limit_gb, dst=dst, parts=parts, progress=progress)

    # 2. As the only writer of dst_xml, in a working folder beside it, with room for the work
    with ir_workspace(dst) as work:
        start = time.perf_counter()
        need = ir_size_bytes(src_xml) * (1 if parts == 1 else 2)
        require_free_space(dst.parent, need, f"quantizing {Path(src_xml).name} in {parts} part(s)")

        # 3. The whole UNet in one watched child, or cut, quantize part after part, stitch
        report = run_stages(run, src_xml, work, variant, state, parts, subset_size, log_level, knobs)

        # 4. The result into place
        publish_ir(work / RESULT_XML, dst)

    # 5. quantize_ir's report, plus the plan and each stage's peaks
    return {
        **report,
        "seconds": time.perf_counter() - start,
        "size_bytes": ir_size_bytes(dst),
        **run.report(),
    }


def run_stages(
    run: StageRunner,
    src_xml: str | os.PathLike,
    work: Path,
    variant: str,
    state: str | None,
    parts: int,
    subset_size: int,
    log_level: int,
    knobs: dict,
) -> dict:
    """The stages of :func:`quantize_in_parts` in its working folder ``work``, each run by ``run``,
    writing ``work / RESULT_XML``; their report. ``parts=1``: the whole UNet in one child (stage
    ``whole``); else cut the IR, quantize part after part, stitch the parts."""
    result = str(work / RESULT_XML)
    if parts == 1:
        return run(
            "whole", quantize_to_file, str(src_xml), result, variant, state, subset_size, log_level, **knobs
        )
    plan = run("cut", cut_ir, str(src_xml), str(work), parts)
    quantize_parts_in_turn(run, plan, work, variant, state, subset_size, log_level, knobs)
    fault_point("quantize.before-stitch")
    counts = run("stitch", stitch_ir, str(work), plan["parts"], plan["model_inputs"], result)
    return {"variant": variant, "parts": plan["parts"], **counts, "plan": plan}


def check_parts_request(src_xml, variant: str, calibration, parts) -> CalibrationSet | None:
    """The calibration set of :func:`quantize_in_parts` (``None`` for weight-only INT8, which needs
    none), after checking the IR, ``parts`` and that the calibration inputs are on disk."""
    data = check_calibration(calibration, variant)
    if not Path(src_xml).is_file():
        raise FileNotFoundError(f"No IR at {src_xml}: export the UNet first (sdaccel.cpu.export).")
    if not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts must be a whole number >= 1, got {parts!r}.")
    if variant == "int8_weights":
        return None  # no calibration: every part is compressed on its own
    if not isinstance(data, CalibrationSet):
        raise TypeError(
            "Quantizing in parts reads the calibration inputs from disk: pass the folder that "
            "collect_unet_inputs(..., out_dir=...) wrote, not samples in memory."
        )
    return data


class StageRunner:
    """Runs the stages of :func:`quantize_in_parts` and records them: each in a child process
    (:func:`sdaccel.core.processes.run_with_memory_limit`, stopped above ``memory_limit_gb`` of
    anonymous RSS) with its peak RSS, or here (``isolate=False``, peaks not measured).

    A stage that fails says which: ``OSError(ENOSPC)`` when the disk is full, ``MemoryError`` when
    the watchdog stopped it (with its memory, and what to do: a larger budget or, for a part, more
    than ``parts`` parts), ``RuntimeError`` otherwise. ``dst`` is the result it works for (named
    as left as it was). Each stage runs :func:`with_progress`: NNCF's progress bars as
    ``progress`` says (by default only where they are drawn live, :func:`~sdaccel.cpu.quantize.live_bars`)."""

    def __init__(
        self,
        what: str,
        isolate: bool = True,
        memory_limit_gb: float | None = None,
        *,
        dst: str | os.PathLike | None = None,
        parts: int | None = None,
        progress: bool | None = None,
    ):
        self.what = what
        self.progress = progress
        self.isolate = isolate
        self.memory_limit_gb = memory_limit_gb
        self.dst = None if dst is None else Path(dst)
        self.parts = parts
        self.stages: list[dict] = []

    def __call__(self, stage: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` as the stage ``stage``; its result."""
        if not self.isolate:
            tick = time.perf_counter()
            try:
                result = with_progress(self.progress, fn, *args, **kwargs)
            except OSError as exc:
                error = full_disk_error(exc, f"{self.what} ({stage})", self.kept())
                if error is None:
                    raise
                raise error from exc
            self._record(stage, 0, 0, time.perf_counter() - tick)
            return result
        run = run_with_memory_limit(
            with_progress, self.progress, fn, *args, limit_gb=self.memory_limit_gb, **kwargs
        )
        self._record(stage, run.peak_rss_bytes, run.peak_anon_bytes, run.seconds)
        if not run.ok:
            raise self.failure(stage, run)
        return run.result

    def failure(self, stage: str, run) -> Exception:
        """The error to raise for the child ``run`` (a :class:`sdaccel.core.processes.ChildRun`)
        that failed at ``stage``."""
        error = str(run.error)
        full = re.search(r"\[Errno 28\] (.*)", error, re.S)
        if full:
            exc = OSError(errno.ENOSPC, full.group(1))
            return full_disk_error(exc, f"{self.what} ({stage})", self.kept()) or exc
        if error.startswith("killed:") and "limit" in error:
            return MemoryError(
                f"{self.what} stopped at {stage}: the memory watchdog killed its process at "
                f"{size_text(run.peak_anon_bytes)} of anonymous memory, above its budget of "
                f"{size_text(self.memory_limit_gb * 2**30)} (memory_limit_gb={self.memory_limit_gb}). "
                f"{self.memory_advice(stage)}{self.kept()}"
            )
        return RuntimeError(f"{self.what} failed at {stage}: {error}.{self.kept()}")

    def kept(self) -> str:
        """The end of a failure's message: the result is as it was."""
        return "" if self.dst is None else f" {self.dst.name} is as it was; the working files are removed."

    def memory_advice(self, stage: str) -> str:
        """What to do when ``stage`` needed more memory than the budget."""
        budget = "a larger budget (memory_limit_gb, or max_memory_gb of quantize_ir)"
        if stage in ("cut", "stitch"):
            return f"The {stage} holds the whole float model once, whatever the parts: give it {budget}."
        more = 2 if self.parts is None else self.parts + 1
        return f"Give it {budget}, or cut the UNet into more parts (parts={more} or more), each then smaller."

    def _record(self, stage: str, peak_rss: int, peak_anon: int, seconds: float) -> None:
        self.stages.append(
            {"stage": stage, "peak_rss_bytes": peak_rss, "peak_anon_bytes": peak_anon, "seconds": seconds}
        )

    def report(self) -> dict:
        """The stages, and the largest peaks among them."""
        return {
            "stages": self.stages,
            "peak_rss_bytes": max(s["peak_rss_bytes"] for s in self.stages),
            "peak_anon_bytes": max(s["peak_anon_bytes"] for s in self.stages),
        }


def quantize_parts_in_turn(
    run: StageRunner,
    plan: dict,
    work: Path,
    variant: str,
    state: str | None,
    subset_size: int,
    log_level: int,
    knobs: dict,
) -> None:
    """Quantize the parts that :func:`sdaccel.cpu.ir_parts` cut into ``work``, one stage each:
    part ``k`` on its inputs in ``state`` (the calibration inputs for part 0), writing the inputs
    of the parts after it; each part's f32 IR and inputs are deleted once it is done."""
    n = plan["parts"]
    for k in range(n):
        later = {name for inputs in plan["inputs"][k + 1 :] for name in inputs}
        next_state = str(work / f"state_{k + 1}") if state is not None and k + 1 < n else None
        run(
            f"part {k}",
            quantize_part,
            str(work / f"part_{k}.xml"),
            str(work / f"quant_{k}.xml"),
            variant,
            state,
            plan["inputs"][k],
            subset_size,
            next_state,
            sorted(later),
            log_level,
            knobs,
        )
        fault_point("quantize.part-done")
        if state is not None and k > 0:
            shutil.rmtree(state)  # part k's inputs are no longer needed
        (work / f"part_{k}.xml").unlink()
        (work / f"part_{k}.bin").unlink()
        state = next_state
