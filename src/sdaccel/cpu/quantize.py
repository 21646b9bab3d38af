"""INT8 for the Stable Diffusion UNet on CPU with NNCF: three recipes, their calibration data,
and what they cost in memory.

The UNet runs once (or twice, with classifier-free guidance folded into a batch of two) per
denoising step and is more than 90% of the time of an image, so it is the one component worth
quantizing. Three recipes, from safest to fastest:

``compress_weights_int8``  (weight-only INT8)
    Weights are stored as INT8 with one scale and zero point per output channel and turned back
    into floating point inside the kernel. No calibration data. The model is ~4x smaller than
    f32 (2x smaller than f16) and the error is tiny, but the matrix products still run in
    f32/bf16, so the gain in speed is only what reading fewer bytes buys. SD 1.x/2.x's
    transformer ``proj_out`` convolutions keep float weights, which OpenVINO's CPU plugin
    miscompiles in INT8 at a static 1x1 feature map (:func:`reshaped_pointwise_convolutions`).
``quantize_hybrid``  (INT8 weights for MatMul/Gather, full INT8 for Convolution)
    The public recipe that optimum-intel uses for diffusion models: the attention and
    feed-forward MatMuls keep weight-only INT8 (their activations have outliers that are hard to
    quantize), the convolutions of the ResNet blocks get INT8 weights *and* INT8 activations
    (``FakeQuantize`` on their inputs, which the CPU plugin turns into real INT8 kernels).
``quantize_full``  (post-training INT8 of weights and activations everywhere)
    ``nncf.quantize`` with ``ModelType.TRANSFORMER`` (INT8 attention MatMuls, SmoothQuant to
    tame activation outliers, mixed preset), minus a few sensitive layers. Fastest, and the
    largest quality cost.

INT8 activations only pay off where the CPU has INT8 dot-product instructions: AVX-512 VNNI
(``vpdpbusd``: 4 INT8 products accumulated into an INT32 per lane, 4x the f32 rate) or AMX
(tile matrix units on Sapphire Rapids and later, another several-fold). Without them (AVX2) the
CPU plugin runs oneDNN's AVX2 INT8 kernels, three instructions where VNNI takes one, and INT8
can even be slower than bf16.

The calibration data of ``quantize_full`` / ``quantize_hybrid`` are the UNet's own inputs
captured while a floating-point pipeline generates images (:func:`collect_unet_inputs`): the
activation ranges depend on the timestep, the latents and the prompts, so they must be sampled
over all three.

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
* a smaller ``subset_size``, and calibration samples streamed from disk (:class:`CalibrationSet`)
  instead of held in memory;
* each quantization in a child process (:func:`sdaccel.core.processes.run_with_memory_limit`), so nothing stays resident
  between recipes, the peak is measured per recipe, and a run that would exhaust the machine is
  stopped at a limit instead.

For the SDXL UNet (f32 IR, same calibration), hybrid peaked at 18.8 GiB RSS of which 10.5 GiB
anonymous (the rest is the memory-mapped IR, which the kernel can drop), and full INT8 with
SmoothQuant and bias correction off at 20.4 GiB RSS, 15.5 GiB anonymous; with bias correction on
it passed 16 GiB anonymous.

Faults from outside a call (a kill, Ctrl-C, a full disk, a second quantization of the same file)
never leave a half-written result: a quantized IR is written in a hidden working folder beside its
destination and moved into place at the end (:func:`ir_workspace`, :func:`publish_ir`), by one
writer at a time; what a killed writer left is removed, or put back, by the next one. A calibration
set replaces its folder whole (:meth:`CalibrationSet.save`, :func:`collect_unet_inputs`). Each long
write checks the room on its disk first, and a full disk is reported as such, with what to do.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence, Sized
from importlib import resources
from pathlib import Path

import numpy as np

from sdaccel.core.faults import fault_point
from sdaccel.core.staging import (
    check_writable,
    clear_leftovers,
    disk_bytes,
    require_free_space,
    staged_folder,
    writer_lock,
)
from sdaccel.core.timing import time_calls

#: The three INT8 recipes, by the names used in results, benchmarks and folders.
VARIANTS = ("int8_weights", "hybrid", "full_int8")

#: Layers kept in floating point by :func:`quantize_full` and :func:`quantize_hybrid` (regular
#: expressions matched from the start of OpenVINO node names such as
#: ``__module.conv_in/aten::_convolution/Convolution``).
#:
#: * ``conv_in`` reads the latents: 4 channels of different ranges under one per-tensor INT8 scale
#:   for its input, so the narrow channels get few levels, and its error enters every later layer.
#:   First and last layers are the known sensitive ones of INT8 networks, and this one costs
#:   almost no FLOPs (4 input channels).
#: * ``conv_out`` writes the noise prediction itself, which the scheduler subtracts from the
#:   latents: its error goes straight into the image, with nothing after it to average it out.
#: * ``time_embedding``, ``add_embedding`` (SDXL's size/crop conditioning) and every ResNet's
#:   ``time_emb_proj`` work on one vector per image. The timestep signal they carry modulates every
#:   pixel of every ResNet block, and being matrix-vector products they gain nothing from INT8.
#:
#: All of them together are well under 1% of the UNet's FLOPs, so keeping them in floating
#: point costs no measurable speed.
SENSITIVE_LAYER_PATTERNS = (
    r".*\bconv_in\b.*",
    r".*\bconv_out\b.*",
    r".*\btime_embedding\b.*",
    r".*\badd_embedding\b.*",
    r".*\btime_emb_proj\b.*",
)


def read_model(model_or_path):
    """An ``ov.Model`` from a model or an IR path (``.xml``, read memory-mapped by OpenVINO).

    Every recipe below transforms the model it is given in place (NNCF does); pass
    ``model.clone()`` to keep the original. A path is checked first
    (:func:`sdaccel.cpu.export.read_ir`): an IR left by an interrupted save is refused.
    """
    import openvino as ov

    from sdaccel.cpu.export import read_ir

    if isinstance(model_or_path, ov.Model):
        return model_or_path
    return read_ir(model_or_path)


def sensitive_layers_scope(
    patterns: Sequence[str] = SENSITIVE_LAYER_PATTERNS, extra_names: Sequence[str] = ()
):
    """An ``nncf.IgnoredScope`` for the layers listed in :data:`SENSITIVE_LAYER_PATTERNS`.

    ``validate=False`` because not every UNet has every layer (SD 1.5 has no ``add_embedding``).
    """
    import nncf

    return nncf.IgnoredScope(names=list(extra_names), patterns=list(patterns), validate=False)


def matching_layers(
    model,
    patterns: Sequence[str] = SENSITIVE_LAYER_PATTERNS,
    types: Sequence[str] = ("Convolution", "MatMul"),
) -> list[str]:
    """Names of the ``types`` operations of ``model`` that ``patterns`` match (as NNCF matches
    them: ``re.match`` from the start of the name): what an ignored scope will keep in float."""
    compiled = [re.compile(p) for p in patterns]
    return [
        op.get_friendly_name()
        for op in read_model(model).get_ops()
        if op.get_type_name() in types and any(p.match(op.get_friendly_name()) for p in compiled)
    ]


def unmatched_patterns(model, patterns: Sequence[str]) -> list[str]:
    """The patterns of ``patterns`` that match no operation of ``model`` (an ``ov.Model`` or an IR
    path) as NNCF matches them (``re.match`` from the start of the name). An ignored scope passes
    over such a pattern (``validate=False``), so a recipe made on another UNet would quietly keep
    nothing in float: check its patterns first."""
    names = [op.get_friendly_name() for op in read_model(model).get_ops()]
    return [p for p in patterns if not any(re.match(p, name) for name in names)]


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """NNCF's progress bars hidden while the block runs, in this process (a notebook's kernel
    shows each pass of ``nncf.quantize`` as a bar of its own). NNCF draws them with rich's global
    console, which writes to ``os.devnull`` here and is put back as it was after."""
    import rich

    console = rich.get_console()
    saved = dict(console.__dict__)
    with open(os.devnull, "w") as devnull:
        rich.reconfigure(file=devnull, force_jupyter=False)
        try:
            yield
        finally:
            console.__dict__ = saved


def live_bars(progress: bool | None = None) -> bool:
    """Whether NNCF's progress bars are shown: ``progress`` when it is given; by default
    (``None``) only where rich draws them live, on a terminal or in a notebook. Elsewhere (a pipe,
    a log file, the child process of a notebook's kernel, whose output the kernel collects) each
    bar would be printed once it is finished, a line of noise per pass."""
    if progress is not None:
        return progress
    import rich

    console = rich.get_console()
    return console.is_interactive or console.is_jupyter


def with_progress(progress: bool | None, fn, /, *args, **kwargs):
    """``fn(*args, **kwargs)`` with NNCF's progress bars shown or hidden as :func:`live_bars`
    decides, in the process that runs it: how each stage of :func:`quantize_in_parts` runs in its
    child process. Errors, warnings and NNCF's log messages are no bars: they show either way."""
    with contextlib.nullcontext() if live_bars(progress) else no_progress_bars():
        return fn(*args, **kwargs)


def ignored_layers(model, ignored_scope, types: Sequence[str] = ("Convolution", "MatMul")) -> list[str]:
    """Names of the ``types`` operations of ``model`` that ``ignored_scope`` (an
    ``nncf.IgnoredScope``) keeps in floating point, as NNCF itself resolves the scope
    (names, patterns, types and subgraphs) on the model's graph: what ``nncf.quantize`` will leave
    alone, read without quantizing. A rule that matches nothing is an error when the scope's
    ``validate`` is true (NNCF's default), as in ``nncf.quantize``."""
    import nncf
    from nncf.common.logging.logger import nncf_logger
    from nncf.openvino.graph.nncf_graph_builder import GraphConverter
    from nncf.scopes import get_ignored_node_names_from_ignored_scope

    if not isinstance(ignored_scope, nncf.IgnoredScope):
        raise TypeError(f"expected an nncf.IgnoredScope, got {type(ignored_scope).__name__}")
    model = read_model(model)
    graph = GraphConverter.create_nncf_graph(model)
    level = nncf_logger.level
    nncf_logger.setLevel(logging.WARNING)  # NNCF logs each matched rule at INFO
    try:
        names = get_ignored_node_names_from_ignored_scope(ignored_scope, graph, strict=ignored_scope.validate)
    finally:
        nncf_logger.setLevel(level)
    return [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() in types and op.get_friendly_name() in names
    ]


def ignored_scope_of(ignored):
    """``None`` -> the sensitive layers; ``()``/``[]`` -> nothing; patterns -> a scope of them;
    an ``nncf.IgnoredScope`` as is."""
    import nncf

    if ignored is None:
        return sensitive_layers_scope()
    if isinstance(ignored, nncf.IgnoredScope):
        return ignored
    return sensitive_layers_scope(patterns=tuple(ignored))


def reshaped_pointwise_convolutions(model) -> list[str]:
    """Names of the 1x1 Convolutions whose input comes straight from a ``Transpose`` or a
    ``Reshape``: in a UNet of SD 1.x/2.x, the ``proj_out`` of every transformer, which turns the
    tokens ``[B, H*W, C]`` back into a feature map (``reshape`` to ``[B, H, W, C]``, ``permute``
    to ``[B, C, H, W]``) and mixes its channels. SDXL's transformers project with a MatMul
    (``use_linear_projection``), so its UNet has none.

    :func:`compress_weights_int8` keeps their weights in floating point, because OpenVINO's CPU
    plugin (2026.4) miscompiles them with compressed weights at a 1x1 feature map. Its
    ``ConvertWeightCompressedConv1x1ToMatmul`` rewrites a 1x1 Convolution with INT8 weights into
    a MatMul. With a static 1x1 feature map the ``permute`` only moves size-1 axes, so the plugin
    turns it into a ``Reshape`` and merges it with the one before: the Convolution then reads
    ``Reshape([B, 1, C] -> [B, C, 1, 1])``, and the rewrite multiplies the ``[B, 1, C]`` tensor
    and lays the result out as ``[1, C, B, 1]``: the batch lands on the spatial axes. With a
    batch of 1 the two layouts agree; with more (classifier-free guidance runs 2), the next layer
    fails its shape check when the model is compiled (``Requested output shape [16,8,1,1] is
    incompatible with input shape [2,64,2,1]``). This happens when a UNet is reshaped to static
    shapes (:func:`time_unet`, a static export or pipeline) for an image whose latents shrink to
    1x1 at the mid block: 64x64 pixels for SD 1.5's three downsamplings. Dynamic shapes compile
    fine, and so do Convolutions with float weights or INT8 inputs (the hybrid and full INT8
    recipes put a ``FakeQuantize`` between the ``permute`` and the Convolution).
    """
    names = []
    for op in read_model(model).get_ops():
        if op.get_type_name() != "Convolution":
            continue
        kernel = op.get_input_partial_shape(1)
        pointwise = (
            kernel.rank.is_static and kernel.rank.get_length() == 4 and kernel[2] == 1 and kernel[3] == 1
        )
        if pointwise and op.input_value(0).get_node().get_type_name() in ("Transpose", "Reshape"):
            names.append(op.get_friendly_name())
    return names


def compress_weights_int8(model, *, symmetric: bool = False, ignored=()):
    """Weight-only INT8: every Convolution, MatMul and embedding Gather weight becomes INT8, but
    the 1x1 Convolutions behind a reshape (:func:`reshaped_pointwise_convolutions`: SD 1.x/2.x's
    transformer ``proj_out``, about 1.4% of SD 1.5's UNet weights), which stay in floating point
    so that the model compiles at every static shape.

    Args:
        model: an ``ov.Model`` or an IR path; an ``ov.Model`` is changed in place.
        symmetric: ``False`` (NNCF's default, ``INT8_ASYM``) stores a scale and a zero point per
            output channel, which fits weights whose range is not centred on zero; ``True``
            (``INT8_SYM``) drops the zero point (slightly faster decompression, a little less
            precise).
        ignored: layers to keep in floating point, as for :func:`quantize_full`; by default none
            but the ones above, since per-channel weight-only INT8 is accurate enough everywhere
            in the UNet.

    Returns the model whose weight constants are ``u8``/``i8`` followed by a
    ``Convert -> (Subtract) -> Multiply`` decompression that the CPU plugin fuses into its kernels.
    No calibration data is needed: weight ranges are known from the weights.
    """
    import nncf

    model = read_model(model)
    scope = ignored_scope_of(ignored)
    scope = nncf.IgnoredScope(
        names=[*scope.names, *reshaped_pointwise_convolutions(model)],
        patterns=list(scope.patterns),
        types=list(scope.types),
        subgraphs=list(scope.subgraphs),
        validate=scope.validate,
    )
    mode = nncf.CompressWeightsMode.INT8_SYM if symmetric else nncf.CompressWeightsMode.INT8_ASYM
    return nncf.compress_weights(model, mode=mode, ignored_scope=scope)


def smooth_quant_parameters(smooth_quant_alpha: float | None, **advanced):
    """NNCF's advanced parameters with SmoothQuant's MatMul alpha (``None``: SmoothQuant off) and
    any other ``advanced`` field (``disable_bias_correction=True``...)."""
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    alpha = -1.0 if smooth_quant_alpha is None else smooth_quant_alpha
    return AdvancedQuantizationParameters(
        smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha), **advanced
    )


def quantize_full(
    model,
    calibration_data,
    subset_size: int = 200,
    *,
    ignored=None,
    smooth_quant_alpha: float | None = 0.95,
    bias_correction: bool = True,
    fold_weights: bool = True,
):
    """Post-training INT8 of weights and activations of the whole UNet (``nncf.quantize``).

    NNCF runs the model on ``subset_size`` calibration inputs, records the range of the input of
    every quantizable operation, and inserts ``FakeQuantize`` operations with those ranges; the
    weights are stored as INT8 constants. The CPU plugin then runs the Convolutions and MatMuls
    between two ``FakeQuantize`` as INT8 kernels.

    Args:
        model: an ``ov.Model`` (changed in place) or an IR path.
        calibration_data: UNet input dicts (name -> array): a list, a :class:`CalibrationSet`
            (streamed from disk), any re-iterable, or an ``nncf.Dataset``.
        subset_size: how many calibration inputs NNCF uses (it iterates the data up to that
            many). More samples give steadier ranges; time and statistics memory grow linearly.
            A few hundred (e.g. 200 = 10 prompts x 20 steps) is what the public SD recipes use.
        ignored: layers kept in floating point. ``None`` (default) keeps
            :data:`SENSITIVE_LAYER_PATTERNS` (see there why); ``()`` quantizes everything;
            a list of regular expressions or an ``nncf.IgnoredScope`` replaces them.
        smooth_quant_alpha: SmoothQuant migrates activation outliers of each MatMul into its
            weights (per-channel ``x / s``, ``W * s`` with ``s = max|x|^a / max|W|^(1-a)``).
            0.95 is NNCF's transformer default; ``None`` switches it off, which saves the memory
            and time of its extra statistics pass (the memory lever for SDXL) at some accuracy.
        bias_correction: NNCF's fast bias correction shifts each layer's bias so that the mean of
            its quantized output matches the float one (one more statistics pass). ``False``
            skips it to save time and memory.
        fold_weights: ``True`` stores the quantized weights as INT8 constants (what runs fast);
            ``False`` keeps a ``FakeQuantize`` on each f32 weight instead, so that each quantizer
            can be taken out again (:mod:`sdaccel.cpu.sensitivity`).

    ``model_type=TRANSFORMER`` makes NNCF quantize the attention MatMuls (both activation
    inputs), apply SmoothQuant, and use the *mixed* preset: symmetric INT8 weights, asymmetric
    INT8 activations (the SiLU/GELU outputs of the UNet are far from symmetric).
    """
    import nncf

    dataset = _as_dataset(calibration_data, "full_int8")
    return nncf.quantize(
        read_model(model),
        dataset,
        subset_size=subset_size,
        model_type=nncf.ModelType.TRANSFORMER,
        ignored_scope=ignored_scope_of(ignored),
        advanced_parameters=smooth_quant_parameters(
            smooth_quant_alpha,
            disable_bias_correction=not bias_correction,
            backend_params={"compress_weights": fold_weights},
        ),
    )


def weighted_matmul_and_gather_names(model) -> list[str]:
    """Names of the MatMuls with a constant weight and of the embedding Gathers (constant f16/f32
    table): the operations the hybrid recipe leaves to weight-only INT8.

    A weight reaches its MatMul directly or through a ``Convert`` (f16 IR) or a
    ``Convert -> Subtract -> Multiply -> Convert`` decompression (already compressed weights).
    """

    def constant_behind(node) -> bool:
        for _ in range(6):
            if node.get_type_name() == "Constant":
                return True
            if node.get_type_name() not in ("Convert", "Subtract", "Multiply", "Reshape"):
                return False
            node = node.input_value(0).get_node()
        return False

    names = []
    for op in read_model(model).get_ops():
        kind = op.get_type_name()
        if kind == "MatMul" and any(constant_behind(op.input_value(i).get_node()) for i in range(2)):
            names.append(op.get_friendly_name())
        elif kind == "Gather":
            table = op.input_value(0)
            if table.get_element_type().get_type_name() in ("f16", "f32") and constant_behind(
                table.get_node()
            ):
                names.append(op.get_friendly_name())
    return names


def quantize_hybrid(
    model,
    calibration_data,
    subset_size: int = 200,
    *,
    ignored=None,
    symmetric_weights: bool = False,
):
    """Hybrid INT8: weight-only INT8 for MatMul/Gather, full INT8 (weights and activations) for
    the Convolutions. This is optimum-intel's recipe for diffusion models, in two NNCF calls:

    1. ``nncf.compress_weights`` with ``IgnoredScope(types=["Convolution"])``: the attention and
       feed-forward weights become INT8, the convolutions stay as they are;
    2. ``nncf.quantize`` with the MatMuls and Gathers found in step 0 ignored and SmoothQuant
       off (there are no quantized MatMuls left to smooth): ``FakeQuantize`` on the inputs and
       INT8 weights for the Convolutions, which are most of the UNet's FLOPs at 64x64 latents.

    Args:
        model, calibration_data, subset_size, ignored: as for :func:`quantize_full`; the
            ``ignored`` layers are left out of step 2 (they still get weight-only INT8 in step 1
            if they are MatMuls).
        symmetric_weights: as ``symmetric`` of :func:`compress_weights_int8`, for step 1.

    Compressing first is also a memory lever: the f32 statistics model of step 2 is compiled
    from a graph whose MatMul weights are already INT8.
    """
    import nncf

    dataset = _as_dataset(calibration_data, "hybrid")  # checked before the weights are compressed
    model = read_model(model)
    weighted = weighted_matmul_and_gather_names(model)
    mode = nncf.CompressWeightsMode.INT8_SYM if symmetric_weights else nncf.CompressWeightsMode.INT8_ASYM
    model = nncf.compress_weights(model, mode=mode, ignored_scope=nncf.IgnoredScope(types=["Convolution"]))
    scope = ignored_scope_of(ignored)
    scope = nncf.IgnoredScope(
        names=[*scope.names, *weighted],
        patterns=list(scope.patterns),
        types=list(scope.types),
        validate=False,
    )
    return nncf.quantize(
        model,
        dataset,
        subset_size=subset_size,
        model_type=nncf.ModelType.TRANSFORMER,
        ignored_scope=scope,
        advanced_parameters=smooth_quant_parameters(None),
    )


def quantize_variant(model, variant: str, calibration_data=None, subset_size: int = 200, **knobs):
    """Dispatch on a name of :data:`VARIANTS` (the knobs go to the recipe's function)."""
    if variant == "int8_weights":
        return compress_weights_int8(model, **knobs)
    if variant == "hybrid":
        return quantize_hybrid(model, calibration_data, subset_size, **knobs)
    if variant == "full_int8":
        return quantize_full(model, calibration_data, subset_size, **knobs)
    raise ValueError(f"unknown INT8 variant {variant!r}; expected one of {VARIANTS}")


# ----------------------------------------------------------------------------------------------
# Calibration data
# ----------------------------------------------------------------------------------------------


def read_prompts(path: str | os.PathLike | None = None) -> list[str]:
    """The calibration prompts: one per line, ``#`` comments and blank lines skipped. Without a
    path, the file shipped with the package (``sdaccel/data/calibration_prompts.txt``).

    A missing file or one without a prompt is an error that names it (never an empty list, which
    would only fail later, after the weights were compressed)."""
    if path is None:
        text = resources.files("sdaccel").joinpath("data/calibration_prompts.txt").read_text()
    else:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"Calibration prompt file {path} does not exist: fix the path, or pass None for the "
                "prompts shipped with sdaccel (sdaccel/data/calibration_prompts.txt)."
            )
        text = path.read_text()
    prompts = [
        line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    if not prompts:
        raise ValueError(
            f"Calibration prompt file {path} holds no prompt: write one prompt per line (lines "
            "starting with # and blank lines are skipped), or pass None for the shipped prompts."
        )
    return prompts


def check_calibration(calibration, variant: str):
    """Refuse, before any quantization step, calibration data that ``variant`` cannot use:
    ``None``, an empty list, a missing folder or one without samples. ``int8_weights`` needs
    none. Returns ``calibration`` (a folder as a :class:`CalibrationSet`)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown INT8 variant {variant!r}; expected one of {VARIANTS}")
    if variant == "int8_weights":
        return calibration
    fix = (
        "collect UNet inputs first with sdaccel.cpu.quantize.collect_unet_inputs(pipe, prompts, ...) "
        "and pass them (or their out_dir); int8_weights needs no calibration data."
    )
    if calibration is None:
        raise ValueError(f"{variant} needs calibration data, got None: {fix}")
    if isinstance(calibration, str | os.PathLike):
        if not Path(calibration).is_dir():
            raise FileNotFoundError(f"Calibration folder {calibration} does not exist: {fix}")
        calibration = CalibrationSet(calibration)
    if isinstance(calibration, CalibrationSet) and len(calibration) == 0:
        raise ValueError(f"Calibration folder {calibration.folder} holds no sample_*.npz: {fix}")
    if isinstance(calibration, Sized) and len(calibration) == 0:
        raise ValueError(f"The calibration data of {variant} is empty: {fix}")
    return calibration


class CalibrationSet:
    """Calibration inputs stored one ``.npz`` per sample in a folder, read back lazily.

    Iterating it loads one sample at a time, so NNCF's several passes over the data never hold
    more than one sample in memory, and the set can be handed to a child process by its path.
    ``names`` keeps only those arrays of each sample (one part's inputs, when quantizing in parts),
    ``limit`` only the first samples.
    """

    def __init__(
        self, folder: str | os.PathLike, names: Sequence[str] | None = None, limit: int | None = None
    ):
        self.folder = Path(folder)
        self.names = None if names is None else list(names)
        self.limit = limit

    @property
    def files(self) -> list[Path]:
        return sorted(self.folder.glob("sample_*.npz"))[: self.limit]

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for path in self.files:
            with np.load(path) as npz:
                yield {name: npz[name] for name in (npz.files if self.names is None else self.names)}

    def write(self, index: int, sample: dict[str, np.ndarray]) -> None:
        """Write ``sample`` as the ``index``-th file (replacing one of that index)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        np.savez(self.folder / f"sample_{index:05d}.npz", **sample)
        fault_point("quantize.calibration-sample-saved")

    def require_room_for(self, more: int, what: str = "the calibration set", fewer: str = "") -> None:
        """Raise ``OSError(ENOSPC)``, naming the fix (and ``fewer``, how to ask for fewer samples),
        unless ``more`` samples of the size of the first one fit on the disk: called once the first
        sample is written, before the others."""
        files = self.files
        if not files or more <= 0:
            return
        size = disk_bytes(files[0])
        fewer = f"; or {fewer}" if fewer else ""
        require_free_space(
            self.folder, size * more, f"{what} ({more} more samples of {size / 2**20:.1f} MiB{fewer})"
        )

    @classmethod
    def save(cls, samples: Iterable[dict[str, np.ndarray]], folder: str | os.PathLike) -> CalibrationSet:
        """Write ``samples`` (any iterable: they are streamed) one file each into ``folder``, which is
        replaced whole at the end (:func:`sdaccel.core.staging.staged_folder`): a save that fails or
        is killed half-way leaves the previous set as it was. When ``samples`` has a length, the
        room for all of them is checked once the first is written."""
        count = len(samples) if isinstance(samples, Sized) else None
        with reporting_full_disk(f"Writing the calibration set {folder}"):
            with staged_folder(folder) as stage:
                store = cls(stage)
                for index, sample in enumerate(samples):
                    store.write(index, sample)
                    if index == 0 and count is not None:
                        store.require_room_for(count - 1)
        return cls(folder)


#: What to do when a disk is full: the end of every such message here.
FREE_SPACE_FIX = (
    "Free some space (old exports and build/ folders are safe to delete) or choose an output folder "
    "on another disk."
)


def full_disk_error(exc: OSError, what: str, after: str = "") -> OSError | None:
    """The error to raise for ``exc``, met during ``what``: ``None`` (raise ``exc`` as it is) unless
    it is a full disk (``ENOSPC``) that does not name the fix yet; else an ``OSError(ENOSPC)`` that
    says the disk is full, during what, and what to do (then ``after``: what was kept)."""
    if exc.errno != errno.ENOSPC or "Not enough free disk" in str(exc):
        return None
    detail = (exc.strerror or str(exc)).strip().rstrip(".")
    fix = "" if "Free some space" in detail else " " + FREE_SPACE_FIX
    return OSError(errno.ENOSPC, f"{what} stopped: the disk is full ({detail}).{fix}{after}")


@contextlib.contextmanager
def reporting_full_disk(what: str) -> Iterator[None]:
    """``with reporting_full_disk(what):`` re-raise a full disk met inside as :func:`full_disk_error`
    says (what stopped, and the fix); any other error as it is."""
    try:
        yield
    except OSError as exc:
        error = full_disk_error(exc, what)
        if error is None:
            raise
        raise error from exc


def size_text(nbytes: float) -> str:
    """``nbytes`` for a message: in GiB from 1 GiB up, else in MiB."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"


class Reservoir:
    """A uniform random subsample of at most ``capacity`` items of a stream of unknown length
    (Vitter's algorithm R): item ``n`` (0-based) replaces a random slot with probability
    ``capacity / (n + 1)``. With ``store`` (a :class:`CalibrationSet`), kept items are written to
    disk at their slot instead of kept in memory.
    """

    def __init__(self, capacity: int, seed: int = 0, store: CalibrationSet | None = None):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.seen = 0
        self.items: list = []
        self.store = store
        self._kept = 0
        self._rng = random.Random(seed)

    def add(self, item) -> None:
        slot = self.seen if self.seen < self.capacity else self._rng.randrange(self.seen + 1)
        self.seen += 1
        if slot >= self.capacity:
            return
        if self.store is not None:
            self.store.write(slot, item)
            self._kept = min(self._kept + 1, self.capacity)
        elif slot == len(self.items):
            self.items.append(item)
        else:
            self.items[slot] = item

    def __len__(self) -> int:
        return self._kept if self.store is not None else len(self.items)


def collect_unet_inputs(
    pipeline,
    prompts: Sequence[str],
    steps: int,
    num_samples: int,
    *,
    stride: int = 1,
    negative_prompt: str | None = None,
    guidance_scale: float = 7.5,
    height: int | None = None,
    width: int | None = None,
    seed: int = 0,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> list[dict[str, np.ndarray]] | CalibrationSet:
    """Run the floating-point pipeline over ``prompts`` and keep a subsample of the UNet inputs.

    ``len(prompts) * steps`` UNet calls are made (one per step, CFG's two halves in one batch);
    every ``stride``-th call is offered to a :class:`Reservoir` of ``num_samples``, so the kept
    samples are spread uniformly over prompts *and* timesteps however many there are, and memory
    stays bounded by ``num_samples`` (or by one sample, with ``out_dir``: the kept samples are
    written there as they come and a :class:`CalibrationSet` is returned).

    ``pipeline`` is an ``OVPipeline`` (``sdaccel.cpu.pipeline``): its ``generate`` calls
    ``unet_input_callback(inputs)`` with the dict of arrays it is about to give the UNet. The
    arrays are copied, since a pipeline may reuse its buffers.

    An empty ``prompts`` or an ``out_dir`` that cannot be written is refused before the first
    image. ``out_dir`` is replaced whole, and only at the end (:func:`sdaccel.core.staging.staged_folder`):
    a run that fails half-way (or is killed) leaves the previous calibration set as it was. Once the
    first sample is on disk, the room for the others is checked (samples x bytes per sample), so a
    disk too small is refused after one image, not after all of them.
    """
    from tqdm.auto import tqdm

    prompts = list(prompts)
    if not prompts:
        raise ValueError(
            "No calibration prompts: pass at least one (sdaccel.cpu.quantize.read_prompts() reads "
            "the shipped ones, or a file with one prompt per line)."
        )
    size = {} if height is None else {"height": height, "width": width}
    kept = min(num_samples, math.ceil(len(prompts) * steps / stride))  # one UNet call per step

    def run(store: CalibrationSet | None) -> Reservoir:
        reservoir = Reservoir(num_samples, seed=seed, store=store)
        calls = 0

        def keep(inputs: dict) -> None:
            nonlocal calls
            if calls % stride == 0:
                reservoir.add({name: np.array(value, copy=True) for name, value in inputs.items()})
                if store is not None and reservoir.seen == 1:
                    store.require_room_for(kept - 1, fewer="keep fewer samples (num_samples)")
            calls += 1

        for index, prompt in enumerate(tqdm(prompts, desc="calibration", disable=not progress)):
            pipeline.generate(
                [prompt],
                negative_prompts=None if negative_prompt is None else [negative_prompt],
                steps=steps,
                guidance_scale=guidance_scale,
                seed=seed + index,
                unet_input_callback=keep,
                **size,
            )
        return reservoir

    if out_dir is None:
        return run(None).items
    with reporting_full_disk(f"Collecting the calibration set into {out_dir}"):
        with staged_folder(out_dir) as stage:
            run(CalibrationSet(stage))
    return CalibrationSet(out_dir)


def _as_dataset(data, variant: str):
    import nncf

    if isinstance(data, nncf.Dataset):
        return data
    return nncf.Dataset(check_calibration(data, variant))


# ----------------------------------------------------------------------------------------------
# Inspecting a quantized IR
# ----------------------------------------------------------------------------------------------


def ir_size_bytes(xml_path: str | os.PathLike) -> int:
    """Size on disk of an IR: the ``.xml`` graph plus the ``.bin`` weights."""
    xml = Path(xml_path)
    return xml.stat().st_size + xml.with_suffix(".bin").stat().st_size


def describe_ir(model) -> dict[str, int]:
    """Counts that tell the recipes apart: ``fake_quantize`` (activation quantizers),
    ``int8_weights`` (``i8``/``u8`` constants, i.e. compressed weights, with their element count
    in ``int8_weight_elements``), and float weight elements left in ``f32``/``f16`` constants."""
    counts: Counter = Counter()
    for op in read_model(model).get_ops():
        kind = op.get_type_name()
        if kind == "FakeQuantize":
            counts["fake_quantize"] += 1
        elif kind == "Constant":
            dtype = op.get_output_element_type(0).get_type_name()
            size = int(np.prod(op.get_output_shape(0)))
            if dtype in ("i8", "u8"):
                counts["int8_weights"] += 1
                counts["int8_weight_elements"] += size
            elif dtype in ("f32", "f16", "bf16") and size >= 1024:
                counts["float_weight_elements"] += size
    return {
        key: counts.get(key, 0)
        for key in ("fake_quantize", "int8_weights", "int8_weight_elements", "float_weight_elements")
    }


# ----------------------------------------------------------------------------------------------
# Writing a quantized IR
# ----------------------------------------------------------------------------------------------

#: The result's name in a working folder, and what :func:`publish_ir` leaves there while it
#: replaces the destination: a note that it began, and a hard link to the old ``.bin``.
RESULT_XML = "result.xml"
PUBLISHING = "publishing"
PREVIOUS_BIN = "previous.bin"


def working_folder_pattern(dst_xml: str | os.PathLike) -> str:
    """The glob, in ``dst_xml``'s folder, of the hidden working folders of its quantizations."""
    return f".{Path(dst_xml).stem}-parts-*"


def pending_xml(dst_xml: str | os.PathLike) -> Path:
    """Where :func:`publish_ir` puts the new ``.xml`` between its renames: ``<stem>.tmp.xml``, the
    name of an unfinished save (:func:`sdaccel.cpu.export.save_ir`), so that a reader's
    :func:`sdaccel.cpu.export.check_ir` refuses the pair meanwhile."""
    dst = Path(dst_xml)
    return dst.with_name(dst.stem + ".tmp.xml")


@contextlib.contextmanager
def ir_workspace(dst_xml: str | os.PathLike) -> Iterator[Path]:
    """``with ir_workspace(dst_xml) as work:`` be the only writer of the IR ``dst_xml``, working in
    ``work``: a new hidden folder beside it (``.<stem>-parts-*``, on the same file system), deleted
    when the block ends, however it ends.

    1. Take :func:`sdaccel.core.staging.writer_lock` on ``dst_xml``: a second writer says that it
       waits, and waits. The kernel releases the lock of a killed writer.
    2. Undo a :func:`publish_ir` that a killed writer left between its renames (:func:`put_back_ir`).
    3. Remove the working folders that killed writers left beside ``dst_xml``, saying how much it
       freed (:func:`sdaccel.core.staging.clear_leftovers`).
    4. Make the working folder.
    """
    dst = Path(dst_xml)
    check_writable(dst.parent)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(dst):
        pattern = working_folder_pattern(dst)
        for old in sorted(dst.parent.glob(pattern)):
            if put_back_ir(dst, old):
                print(
                    f"Put back {dst.with_suffix('.bin').name}, which an interrupted quantization had "
                    f"replaced: {dst.name} is the IR it was before.",
                    file=sys.stderr,
                )
        clear_leftovers(dst, [pattern])
        work = Path(tempfile.mkdtemp(prefix=pattern[:-1], dir=dst.parent))
        try:
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)


def publish_ir(result_xml: str | os.PathLike, dst_xml: str | os.PathLike) -> Path:
    """Move the finished IR ``result_xml`` (an ``.xml`` and its ``.bin`` in an
    :func:`ir_workspace`) to ``dst_xml``, replacing the IR there. No rename moves two files at
    once, so:

    1. the old ``.bin`` (if any) is kept by a hard link in the working folder, beside a note that
       publishing began;
    2. the new ``.xml`` goes beside ``dst_xml`` as :func:`pending_xml`;
    3. the new ``.bin`` replaces the old one;
    4. the new ``.xml`` replaces the old one.

    A failure between 2 and 4 puts the old ``.bin`` back at once (:func:`put_back_ir`); a process
    killed there leaves the note, and the next writer of ``dst_xml`` puts it back. Returns ``dst_xml``.
    """
    result, dst = Path(result_xml), Path(dst_xml)
    work, old_bin, pending = result.parent, dst.with_suffix(".bin"), pending_xml(dst)
    if old_bin.exists():
        try:
            os.link(old_bin, work / PREVIOUS_BIN)
        except OSError:  # no hard links on this file system
            shutil.copy2(old_bin, work / PREVIOUS_BIN)
    (work / PUBLISHING).write_text(str(dst))
    try:
        os.replace(result, pending)
        os.replace(result.with_suffix(".bin"), old_bin)
        fault_point("quantize.between-renames")
        os.replace(pending, dst)
    except BaseException:
        put_back_ir(dst, work)
        raise
    return dst


def put_back_ir(dst_xml: str | os.PathLike, work: str | os.PathLike) -> bool:
    """Undo a :func:`publish_ir` from the working folder ``work`` that stopped between its renames:
    the old ``.bin`` back (or the new one removed, where there was none), the new ``.xml`` removed,
    so that ``dst_xml`` is the IR it was. Returns whether there was one to undo."""
    dst, work = Path(dst_xml), Path(work)
    pending = pending_xml(dst)
    if not (work / PUBLISHING).is_file() or not pending.exists():
        return False
    if (work / PREVIOUS_BIN).exists():
        os.replace(work / PREVIOUS_BIN, dst.with_suffix(".bin"))
    else:
        dst.with_suffix(".bin").unlink(missing_ok=True)
    pending.unlink()
    return True


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
    """Read an IR, apply one of :data:`VARIANTS`, save the result: the unit of work that
    :func:`sdaccel.core.processes.run_with_memory_limit` runs in a child process (everything is passed
    by path).

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
    where they are drawn live (:func:`live_bars`): a child process of a notebook's kernel, or one
    whose output goes to a pipe or a file, would print each bar once finished, as a line of noise.
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

    from sdaccel.cpu.export import save_ir

    nncf.set_log_level(log_level)
    data = check_calibration(calibration, variant)
    model = quantize_variant(read_model(src_xml), variant, data, subset_size, **knobs)
    save_ir(model, Path(out_xml), compress_to_fp16=False)
    return {"variant": variant, "parts": 1, **describe_ir(model)}


# ----------------------------------------------------------------------------------------------
# Quantizing in parts
# ----------------------------------------------------------------------------------------------

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
    import psutil

    return round(fraction * psutil.virtual_memory().available / 2**30, 1)


def estimate_peak_gb(variant: str, weight_bytes: int) -> float:
    """The peak RSS (GiB) that quantizing ``weight_bytes`` of f32 weights with ``variant`` is
    expected to reach (:data:`PEAK_PER_WEIGHT_BYTE`)."""
    return PEAK_PER_WEIGHT_BYTE[variant] * weight_bytes / 2**30 + PEAK_FIXED_GB


def parts_for_budget(src_xml: str | os.PathLike, variant: str, max_memory_gb: float) -> int:
    """The fewest parts whose largest one is expected to quantize within ``max_memory_gb``
    (:func:`estimate_peak_gb`); an error naming the smallest budget that can work when even one
    block per part would not fit."""
    from sdaccel.cpu import ir_parts

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
    from sdaccel.cpu import ir_parts
    from sdaccel.cpu.export import save_ir

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
    import gc

    import nncf
    import openvino as ov

    from sdaccel.cpu import ir_parts
    from sdaccel.cpu.export import save_ir

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
    from sdaccel.cpu import ir_parts
    from sdaccel.cpu.export import save_ir

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
    only when its output is a terminal (:func:`live_bars`, decided in the child): a notebook's
    kernel collects a child's output, where each bar would be printed once finished.

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
    dst = Path(dst_xml)
    run = StageRunner(
        f"Quantizing {src_xml} in {parts} part(s)",
        isolate,
        memory_limit_gb,
        dst=dst,
        parts=parts,
        progress=progress,
    )

    # 2. As the only writer of dst_xml, in a working folder beside it, with room for the work
    with ir_workspace(dst) as work:
        start = time.perf_counter()
        need = ir_size_bytes(src_xml) * (1 if parts == 1 else 2)
        require_free_space(dst.parent, need, f"quantizing {Path(src_xml).name} in {parts} part(s)")
        result = work / RESULT_XML

        # 3. One part: the whole UNet in one watched child
        if parts == 1:
            report = run(
                "whole",
                quantize_to_file,
                str(src_xml),
                str(result),
                variant,
                state,
                subset_size,
                log_level,
                **knobs,
            )

        # 4. Cut, quantize part after part, stitch
        else:
            plan = run("cut", cut_ir, str(src_xml), str(work), parts)
            quantize_parts_in_turn(run, plan, work, variant, state, subset_size, log_level, knobs)
            fault_point("quantize.before-stitch")
            counts = run("stitch", stitch_ir, str(work), plan["parts"], plan["model_inputs"], str(result))
            report = {"variant": variant, "parts": plan["parts"], **counts, "plan": plan}

        # 5. The result into place
        publish_ir(result, dst)

    # 6. quantize_ir's report, plus the plan and each stage's peaks
    return {
        **report,
        "seconds": time.perf_counter() - start,
        "size_bytes": ir_size_bytes(dst),
        **run.report(),
    }


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
    ``progress`` says (by default only where they are drawn live, :func:`live_bars`)."""

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
        from sdaccel.core.processes import run_with_memory_limit

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


def time_unet(
    model_or_path,
    inputs: dict[str, np.ndarray],
    iters: int = 5,
    warmup: int = 1,
    precision: str | None = None,
    static: bool = True,
    core=None,
) -> dict:
    """Seconds per UNet call of an IR on CPU: the median of ``iters`` calls after ``warmup``.

    Args:
        inputs: one UNet call's inputs (e.g. a captured calibration sample).
        precision: ``INFERENCE_PRECISION_HINT`` for the floating-point layers: ``None`` keeps the
            plugin's default (bf16 on CPUs with AVX-512 BF16 or AMX, f32 elsewhere), ``"f32"``
            forces full precision. Quantized layers run in INT8 either way.
        static: reshape to the shapes of ``inputs`` before compiling, so the CPU plugin picks its
            kernels for that one shape (what a server with a fixed resolution does).

    Returns ``median_s``, all ``times`` (wall clock), ``cpu_times`` (CPU seconds of this process,
    all threads: on a machine shared with other jobs they inflate much less than wall time),
    ``compile_s`` and the ``precision`` the plugin used.
    """
    import openvino as ov

    core = core or ov.Core()
    model = read_model(model_or_path).clone() if static else read_model(model_or_path)
    if static:
        model.reshape({name: list(np.shape(value)) for name, value in inputs.items()})
    config = {"PERFORMANCE_HINT": "LATENCY"}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    tick = time.perf_counter()
    compiled = core.compile_model(model, "CPU", config)
    compile_s = time.perf_counter() - tick
    request = compiled.create_infer_request()
    timing = time_calls(
        request.infer, inputs, repeats=iters, warmup=lambda: [request.infer(inputs) for _ in range(warmup)]
    )
    times, cpu_times = timing.runs_s, timing.cpu_s
    return {
        "median_s": float(np.median(times)),
        "times": times,
        "cpu_times": cpu_times,
        "compile_s": compile_s,
        "precision": compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name(),
    }
