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
captured while a floating-point pipeline generates images
(:func:`sdaccel.cpu.calibration.collect_unet_inputs`): the activation ranges depend on the
timestep, the latents and the prompts, so they must be sampled over all three.

What quantizing costs in memory, and quantizing within a budget (in parts, each step in a child
process): :mod:`sdaccel.cpu.quantize_parts`, whose :func:`~sdaccel.cpu.quantize_parts.quantize_ir`
reads an IR, applies a recipe and saves the result. The calibration data:
:mod:`sdaccel.cpu.calibration`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence, Sized
from pathlib import Path

import numpy as np

from sdaccel.core.timing import time_calls
from sdaccel.cpu.calibration import CalibrationSet
from sdaccel.cpu.ir_files import read_ir

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
    (:func:`sdaccel.cpu.ir_files.read_ir`): an IR left by an interrupted save is refused.
    """
    import openvino as ov

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
    decides, in the process that runs it: how each stage of
    :func:`sdaccel.cpu.quantize_parts.quantize_in_parts` runs in its child process. Errors,
    warnings and NNCF's log messages are no bars: they show either way."""
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


def check_calibration(calibration, variant: str):
    """Refuse, before any quantization step, calibration data that ``variant`` cannot use:
    ``None``, an empty list, a missing folder or one without samples. ``int8_weights`` needs
    none. Returns ``calibration`` (a folder as a :class:`CalibrationSet`)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown INT8 variant {variant!r}; expected one of {VARIANTS}")
    if variant == "int8_weights":
        return calibration
    fix = (
        "collect UNet inputs first with sdaccel.cpu.calibration.collect_unet_inputs(pipe, prompts, ...) "
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
