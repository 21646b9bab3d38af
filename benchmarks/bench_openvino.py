"""Seconds per UNet step on CPU: PyTorch fp32, OpenVINO f32 / bf16 / INT8 recipes, and the runtime levers.

    python benchmarks/bench_openvino.py                               # SD 1.5 and SDXL, every variant
    python benchmarks/bench_openvino.py --models sd15 --iters 5
    python benchmarks/bench_openvino.py --models sdxl --variants ov_bf16 full_int8 --quant-memory-limit-gb 16
    python benchmarks/bench_openvino.py --models sd15 --levers deepcache quant_memory
    python benchmarks/bench_openvino.py --models sd15 --reuse --update --variants full_int8   # add to a run
    python benchmarks/bench_openvino.py --models build/checkpoints/tiny-sd15 --latent 8     # a checkpoint

What is measured, for the *real* SD 1.5 and SDXL UNet architectures (configs in
``sdaccel/reference_configs``) with random weights (seeded; no download), batch 2 (a prompt and
its negative, as with classifier-free guidance) and 64x64 latents (512x512 images):

``torch_fp32``    diffusers' ``UNet2DConditionModel`` in PyTorch, float32, ``inference_mode``.
``ov_f32``        the same UNet exported to OpenVINO IR (``sdaccel.cpu.export.convert_unet``, weights
                  stored fp16 and decompressed at compile time), static shapes,
                  ``INFERENCE_PRECISION_HINT=f32``.
``ov_bf16``       the same IR with the CPU plugin's default precision (bf16 on a CPU with
                  AVX-512 BF16 or AMX; the script records what the plugin really used).
``int8_weights``, ``hybrid``, ``full_int8``
                  the recipes of ``sdaccel.cpu.quantize``: INT8 where quantized, and the layers
                  left in float compiled in the UNet's *best float* on this CPU (``--int8-float``
                  auto: ``choose_precision``'s rule: the only float precision the plugin offers,
                  else the faster of ``ov_f32`` / ``ov_bf16`` in this run, else measured);
                  ``--int8-float both`` also times each INT8 variant in the other precision
                  (rows ``<variant>@<precision>``). Every row records the precision that ran.
``full_int8_float_resnets``
                  full INT8 with every ResNet kept in float as well (the pattern of
                  ``sdaccel.toy.adherence.FLOAT_GROUP_VARIANTS``, added to the sensitive layers),
                  the recipe that held prompt adherence on the tiny trained models.

Every measurement runs in its own child process (``run_with_memory_limit``), one after the
other, so the variants do not share caches or memory, nothing stays resident between them, and
the peak memory of each (export, quantization, inference) is recorded: peak RSS and its anonymous
part (without the memory-mapped IR file). A child whose anonymous RSS passes its limit
(``--quant-memory-limit-gb`` for quantization, ``--memory-limit-gb`` otherwise) is stopped and
reported as such, and a child waits until ``psutil`` reports enough available memory
(``--min-free-gb``; the machine may be shared). NNCF quantizes an f32 IR by default
(``--quant-source``): it was measured to need less memory than from the fp16 IR used for timing.

Per variant: the median of ``--iters`` timed UNet calls after ``--warmup`` untimed ones, in
wall-clock seconds and in CPU seconds of the process (all its threads: on a machine shared with
other jobs the wall clock inflates with their load, the CPU time much less; the 1-minute load
average before and after each child is recorded too), compile time, model size on disk, and the
speed-ups over ``torch_fp32`` and ``ov_bf16`` by both clocks.

The calibration data for ``hybrid`` / ``full_int8`` here are *synthetic* UNet inputs (unit
Gaussian latents over the whole timestep range, Gaussian text embeddings): with random weights a
real pipeline's inputs carry no more information, and this script measures speed and memory,
not quality (``notebooks/05_int8_quantization.ipynb`` measures quality on an exported pipeline).

Lever ``deepcache`` (DeepCache, Ma et al., CVPR 2024): the deep part of the UNet changes little
between adjacent denoising steps, so every ``N``-th step runs the full UNet and keeps the input of
its last up block; the steps in between run only the *shallow* UNet (``conv_in``, the first down
block without its downsampler, the last up block fed with the cached feature, ``conv_out``).
The script exports that shallow UNet with ``sdaccel.cpu.deepcache`` (where DeepCache lives: both
IRs, the pipeline hook, INT8), times it in the best float and full INT8, and reports the average seconds per
step ``(t_full + (N - 1) t_shallow) / N``. Its quality cost needs trained weights to measure
(random weights have no step-to-step redundancy to exploit): ``python -m sdaccel.toy.deepcache_quality``
measures it on the tiny trained checkpoints; the paper reports 2.3x on SD 1.5 for a 0.05 drop in
CLIP score.

Lever ``quant_memory``: peak memory of the quantization under the levers of
:data:`MEMORY_STUDY` (SmoothQuant off, bias correction off, f32 vs fp16 source IR).

Levers ``static``, ``guidance_split``, ``runtime`` (``sdaccel.cpu.levers``; each in one child, on
the fp16-weight IR in the best float): static against dynamic shapes of the same IR; guidance as
one UNet call at batch 2 against two calls at batch 1; ``PERFORMANCE_HINT`` THROUGHPUT,
``INFERENCE_NUM_THREADS``, ``NUM_STREAMS`` and ``ENABLE_CPU_PINNING`` each against the default
(LATENCY; ``--runtime-arms`` picks some). The arms are timed interleaved over ``--lever-rounds``
rounds, each warmed up first (``--lever-recompile``: compiled afresh every round, so that only one
SD 1.5 UNet is in memory at a time); each row has the properties the plugin reports and the max
abs difference of its output from the reference arm's.

Lever ``tome`` (token merging, Bolya and Hoffman 2023, with ``tomesd``; ``sdaccel.cpu.tome``): the
UNet exported with ``--tome-ratios`` of its full-resolution tokens merged before self-attention
(traced at ``--latent``, the only size such an IR runs at; weights stored fp16), timed in the best
float against the unmerged UNet IR, interleaved over ``--lever-rounds`` rounds (each IR compiled,
warmed up and timed in turn every round, one model in memory at a time). Its quality cost is the
``tome`` part of ``--quality`` (``sdaccel.toy.tome_quality.measure``).

Lever ``vae_int8``: the VAE decoder (batch 1, ``8 x --latent`` pixels square) in PyTorch fp32 (when
the run has a ``torch_fp32`` row), as an IR in the best float, and quantized by each recipe of
``sdaccel.cpu.quantize_vae`` (synthetic latents for calibration). With it, the table also composes
seconds per *image*: ``--steps-per-image`` UNet steps plus one decode.

Option ``--quality CHECKPOINT`` (a trained ``sdaccel.toy.dataset`` checkpoint such as
``checkpoints/tiny-shapes-sd15``; ``--quality-prompts`` held-out prompts): what the levers that change
numbers cost, each in a child: the INT8 UNets (``sdaccel.toy.adherence``: adherence, PSNR/SSIM
against OpenVINO f32), DeepCache at ``--deepcache-intervals`` (``sdaccel.toy.deepcache_quality.measure``),
the INT8 VAE decoders (``sdaccel.toy.adherence.vae_decoder_quality``), the max abs difference of
the runtime levers' UNet outputs, and token merging at ``--tome-ratios`` (``sdaccel.toy.tome_quality.measure``:
adherence, PSNR/SSIM against the unmerged f32 images). ``--quality-parts`` runs some of them (with
``--update``, the others' earlier results are kept). ``--models`` with no entry measures only that:

    python benchmarks/bench_openvino.py --models --variants --quality checkpoints/tiny-shapes-sd15
    python benchmarks/bench_openvino.py --models sd15 --variants torch_fp32 ov_f32 full_int8 \
        full_int8_float_resnets --quant-max-memory-gb 6 --levers static guidance_split runtime vae_int8

Option ``--choose-precision``: the float precision of each component by measurement
(``sdaccel.cpu.precision.choose_precision``). For a random-weight architecture the script exports
a whole text-to-image pipeline folder (text encoder(s), UNet, VAE decoder; weights stored fp16) with
the export's converters, then times every component in each of ``--precision-candidates`` at the
export's default size (512x512 for SD 1.5: text encoder and UNet at batch 2, VAE decoder at batch
1), records what the plugin reports it ran, and which precision is chosen and why. A checkpoint
(``--models build/checkpoints/tiny-sd15``) is exported with ``export_pipeline``. Without
``--variants`` only the choice is measured:

    python benchmarks/bench_openvino.py --models sd15 --variants --choose-precision --iters 3

Results: a table on stdout and JSON at ``--out`` (default ``build/bench/openvino.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np

from sdaccel.core.env import cpu_features
from sdaccel.cpu.deepcache import cached_shape
from sdaccel.cpu.precision import CANDIDATES
from sdaccel.cpu.quantize import SENSITIVE_LAYER_PATTERNS, quantize_ir
from sdaccel.cpu.tome import check_ratio
from sdaccel.toy.adherence import FLOAT_GROUP_VARIANTS

#: Real architectures with random weights (configs in ``sdaccel/reference_configs``). Any other
#: ``--models`` entry is a checkpoint (a diffusers folder or hub id; ``tiny-sd15`` / ``tiny-sdxl``
#: are the tiny ones of ``sdaccel.toy.random_checkpoints``) whose own UNet weights are used.
MODELS = {"sd15": "sd-1.5", "sdxl": "sdxl-base-1.0"}
VARIANTS = (
    "torch_fp32",
    "ov_f32",
    "ov_bf16",
    "int8_weights",
    "hybrid",
    "full_int8",
    "full_int8_float_resnets",
)
INT8 = ("int8_weights", "hybrid", "full_int8", "full_int8_float_resnets")
#: INT8 variants with one more layer group kept in float: name -> (recipe, the group's pattern, added
#: to ``SENSITIVE_LAYER_PATTERNS``). The ResNets' pattern is the one that held adherence on the tiny
#: trained models (``sdaccel.toy.adherence.FLOAT_GROUP_VARIANTS``).
FLOAT_GROUPS = {"full_int8_float_resnets": ("full_int8", FLOAT_GROUP_VARIANTS["full_int8, float resnets"])}
FLOAT_VARIANTS = {"ov_f32": "f32", "ov_bf16": "bf16"}
LEVERS = ("deepcache", "quant_memory", "runtime", "static", "guidance_split", "vae_int8", "tome")
#: The parts of ``--quality`` (``--quality-parts``): the INT8 UNets, DeepCache, the INT8 VAE
#: decoders, the runtime levers' output differences, token merging.
QUALITY_PARTS = ("int8_unet", "deepcache", "vae_int8", "levers_max_abs_diff", "tome")
#: The VAE decoder recipes of lever ``vae_int8`` (``sdaccel.cpu.quantize_vae``).
VAE_VARIANTS = ("int8_weights", "hybrid", "full_int8")

#: The quantization-memory study (lever ``quant_memory``): recipe, source IR and knobs of each run.
MEMORY_STUDY = {
    "full_int8 fp16-IR SQ-off": ("full_int8", "fp16", {"smooth_quant_alpha": None}),
    "full_int8 fp16-IR SQ-off no-BC": (
        "full_int8",
        "fp16",
        {"smooth_quant_alpha": None, "bias_correction": False},
    ),
    "full_int8 f32-IR SQ-off": ("full_int8", "f32", {"smooth_quant_alpha": None}),
    "hybrid f32-IR": ("hybrid", "f32", {}),
}


# ----------------------------------------------------------------------------------------------
# Models and inputs (run inside the child processes)
# ----------------------------------------------------------------------------------------------


def checkpoint_folder(model: str) -> Path | None:
    """The checkpoint behind a ``--models`` entry, or ``None`` for a random-weight architecture."""
    if model in MODELS:
        return None
    from sdaccel.toy.random_checkpoints import BUILDERS, ensure_tiny

    if model in BUILDERS:
        return ensure_tiny("build/checkpoints", model)
    from sdaccel.core.checkpoint import resolve_checkpoint

    return resolve_checkpoint(model, components=["unet"])


def label(model: str) -> str:
    """A short name for results and folders: the key, a folder's name, or the hub id."""
    if model in MODELS or not Path(model).is_dir():
        return model
    return Path(model).name


def unet_config(model: str) -> dict:
    folder = checkpoint_folder(model)
    if folder is not None:
        return json.loads((folder / "unet" / "config.json").read_text())
    path = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}/unet.json")
    return json.loads(path.read_text())


def build_torch_unet(model: str, seed: int = 0):
    """A checkpoint's UNet in float32, or the real architecture with random weights (PyTorch's
    default initialisation, seeded)."""
    import torch
    from diffusers import UNet2DConditionModel

    folder = checkpoint_folder(model)
    if folder is not None:
        return UNet2DConditionModel.from_pretrained(folder / "unet", torch_dtype=torch.float32).eval()
    torch.manual_seed(seed)
    return UNet2DConditionModel.from_config(unet_config(model)).eval()


def unet_inputs(model: str, batch: int, latent: int, timestep: int = 500, seed: int = 0) -> dict:
    """One UNet call's inputs, named as in the exported IR."""
    cfg = unet_config(model)
    rng = np.random.default_rng(seed)
    inputs = {
        "sample": rng.standard_normal((batch, cfg["in_channels"], latent, latent), dtype=np.float32),
        "timestep": np.array([timestep], dtype=np.int64),
        "encoder_hidden_states": rng.standard_normal(
            (batch, 77, cfg["cross_attention_dim"]), dtype=np.float32
        ),
    }
    if cfg.get("addition_embed_type") == "text_time":
        pooled = cfg["projection_class_embeddings_input_dim"] - 6 * cfg["addition_time_embed_dim"]
        size = latent * 8
        inputs["text_embeds"] = rng.standard_normal((batch, pooled), dtype=np.float32)
        inputs["time_ids"] = np.tile(np.array([[size, size, 0, 0, size, size]], np.float32), (batch, 1))
    return inputs


def export_ir(model: str, xml: str, seed: int = 0, fp16: bool = True) -> dict:
    """The UNet -> OpenVINO IR with the export's port names, weights stored fp16 (or f32)."""
    import gc

    import openvino as ov

    from sdaccel.cpu.export import convert_unet

    start = time.perf_counter()
    unet = build_torch_unet(model, seed)
    params = sum(p.numel() for p in unet.parameters())
    ov_model = convert_unet(unet)
    del unet
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=fp16)
    return {"seconds": time.perf_counter() - start, "params": params}


def _time_calls(call, iters: int, warmup: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (this process, all threads) of ``iters`` calls after ``warmup``."""
    for _ in range(warmup):
        call()
    times, cpu_times = [], []
    for _ in range(iters):
        tick, cpu = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - tick)
        cpu_times.append(time.process_time() - cpu)
    return times, cpu_times


def time_torch(model: str, batch: int, latent: int, iters: int, warmup: int, seed: int = 0) -> dict:
    import torch

    torch.set_flush_denormal(True)  # as OpenVINO does: denormals would slow random-weight layers
    unet = build_torch_unet(model, seed)
    inputs = {k: torch.from_numpy(v) for k, v in unet_inputs(model, batch, latent).items()}
    added = None
    if "text_embeds" in inputs:
        added = {"text_embeds": inputs["text_embeds"], "time_ids": inputs["time_ids"]}

    def call():
        with torch.inference_mode():
            unet(
                inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"], added_cond_kwargs=added
            )

    times, cpu_times = _time_calls(call, iters, warmup)
    return {"times": times, "cpu_times": cpu_times, "precision": "f32", "compile_s": 0.0}


def time_openvino(xml: str, inputs_spec: dict, precision: str | None, iters: int, warmup: int) -> dict:
    """``quantize.time_unet`` (static shapes) on the inputs described by ``inputs_spec``:
    ``unet_inputs``'s keyword arguments plus ``"extra"``, more input arrays given by their shapes
    (DeepCache's cached feature)."""
    from sdaccel.cpu.quantize import time_unet

    spec = dict(inputs_spec)
    extra = spec.pop("extra", {})
    inputs = unet_inputs(**spec)
    rng = np.random.default_rng(1)
    inputs.update({name: rng.standard_normal(shape, dtype=np.float32) for name, shape in extra.items()})
    timing = time_unet(xml, inputs, iters=iters, warmup=warmup, precision=precision, static=True)
    return {k: timing[k] for k in ("times", "cpu_times", "compile_s", "precision")}


def synthetic_calibration(
    folder: str, model: str, batch: int, latent: int, count: int, extra: dict | None = None
):
    """``count`` UNet inputs spread over the timestep range, written as a CalibrationSet."""
    from sdaccel.cpu.quantize import CalibrationSet

    timesteps = np.linspace(999, 1, count).round().astype(int)
    samples = []
    for i, t in enumerate(timesteps):
        sample = unet_inputs(model, batch, latent, timestep=int(t), seed=100 + i)
        rng = np.random.default_rng(200 + i)
        sample.update(
            {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in (extra or {}).items()}
        )
        samples.append(sample)
    shutil.rmtree(folder, ignore_errors=True)
    return CalibrationSet.save(samples, folder)


# ----------------------------------------------------------------------------------------------
# DeepCache: the shallow UNet
# ----------------------------------------------------------------------------------------------


def export_deepcache_shallow(model: str, xml: str, seed: int = 0) -> dict:
    """Export the shallow UNet that DeepCache runs on its cached steps
    (:func:`sdaccel.cpu.deepcache.convert_shallow`: the UNet's inputs plus ``cached``, the input of
    the last up block saved by the last full step; output ``out_sample``), weights stored fp16."""
    import gc

    import openvino as ov

    from sdaccel.cpu.deepcache import convert_shallow

    ov_model = convert_shallow(build_torch_unet(model, seed))
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=True)
    return {"inputs": [port.get_any_name() for port in ov_model.inputs]}


# ----------------------------------------------------------------------------------------------
# Token merging: the merged UNets (lever tome; children)
# ----------------------------------------------------------------------------------------------


def export_tome_ir(model: str, xml: str, ratio: float, latent: int, seed: int = 0) -> dict:
    """The UNet with ``ratio`` of its full-resolution tokens merged
    (:func:`sdaccel.cpu.tome.convert_tome_unet`), traced at ``latent x latent`` latents, weights
    stored fp16; what was merged is written next to the IR (``.json``, last: its presence marks a
    finished export)."""
    import gc

    from sdaccel.cpu.export import save_ir
    from sdaccel.cpu.tome import convert_tome_unet

    start = time.perf_counter()
    unet = build_torch_unet(model, seed)
    ov_model, report = convert_tome_unet(unet, ratio, latent, latent)
    del unet
    gc.collect()
    xml = Path(xml)
    xml.parent.mkdir(parents=True, exist_ok=True)
    xml.with_suffix(".json").unlink(missing_ok=True)
    save_ir(ov_model, xml, compress_to_fp16=True)
    xml.with_suffix(".json").write_text(json.dumps(report, indent=2))
    return {"seconds": time.perf_counter() - start}


def time_tome(
    irs: dict[str, str], inputs_spec: dict, rounds: int, warmup: int, precision: str | None
) -> dict:
    """The unmerged UNet (the first of ``irs``: name -> IR) and each merged one, static, interleaved:
    every round compiles, warms up and times each IR in turn (``sdaccel.cpu.levers.time_arms`` on
    one arm, so one model is in memory at a time). The layout of ``time_arms``' result, with each
    arm's ``speedup`` over the first."""
    from sdaccel.cpu import levers

    inputs = unet_inputs(**inputs_spec)
    rows = {name: {"times": [], "cpu_times": [], "compile_s": []} for name in irs}
    for _ in range(rounds):
        for name, xml in irs.items():
            arm = levers.time_arms(
                xml, inputs, {name: levers.Arm()}, 1, warmup, precision, keep_compiled=False
            )["arms"][name]
            for key in ("times", "cpu_times", "compile_s"):
                rows[name][key] += arm[key]
            rows[name].setdefault("reported", arm["reported"])
            rows[name].setdefault("output_abs_max", arm["output_abs_max"])
    first = next(iter(irs))
    for name, row in rows.items():
        row["s_per_call"] = statistics.median(row["times"])
        row["cpu_s_per_call"] = statistics.median(row["cpu_times"])
        row["speedup"] = rows[first]["s_per_call"] / row["s_per_call"]
        row["cpu_speedup"] = rows[first]["cpu_s_per_call"] / row["cpu_s_per_call"]
        row["ir"] = str(Path(irs[name]).resolve())
    return {"reference": first, "rounds": rounds, "warmup": warmup, "keep_compiled": False, "arms": rows}


# ----------------------------------------------------------------------------------------------
# The float precision of the INT8 variants, and the runtime levers (children)
# ----------------------------------------------------------------------------------------------


def choose_unet_precision(
    xml: str, inputs_spec: dict, candidates: list[str], iters: int, warmup: int
) -> dict:
    """``choose_precision``'s rule on the UNet IR alone: each candidate compiled static (as the
    variants are timed), ``warmup`` + ``iters`` calls, the fastest that the plugin honoured."""
    import openvino as ov

    from sdaccel.cpu.precision import decide, measure

    core = ov.Core()
    inputs = unet_inputs(**inputs_spec)
    model = core.read_model(xml)
    model.reshape({name: list(value.shape) for name, value in inputs.items()})

    def compile_model(precision):
        return core.compile_model(
            model, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
        )

    measurements = {p: measure(compile_model, inputs, p, iters, warmup) for p in candidates}
    return {
        "chosen": decide(measurements),
        "measurements": {
            p: {"reported": m.reported, "median_s": m.median_s, "times": m.times, "cpu_times": m.cpu_times}
            for p, m in measurements.items()
        },
    }


def time_lever(
    xml: str,
    inputs_spec: dict,
    lever: str,
    rounds: int,
    warmup: int,
    precision: str | None,
    keep_compiled: bool,
    cores: int,
    only: list[str] | None = None,
) -> dict:
    """The arms of a runtime lever (``sdaccel.cpu.levers``) on one UNet call's inputs, interleaved;
    ``only``: those of them (by name), the lever's reference arm always first."""
    from sdaccel.cpu import levers

    arms = {
        "runtime": levers.runtime_arms(cores),
        "static": levers.STATIC_ARMS,
        "guidance_split": levers.GUIDANCE_ARMS,
    }[lever]
    if only:
        unknown = sorted(set(only) - set(arms))
        if unknown:
            raise ValueError(f"no arm {unknown} in lever {lever}; its arms: {list(arms)}")
        reference = next(iter(arms))
        arms = {name: arm for name, arm in arms.items() if name == reference or name in only}
    return levers.time_arms(
        xml, unet_inputs(**inputs_spec), arms, rounds, warmup, precision, keep_compiled=keep_compiled
    )


# ----------------------------------------------------------------------------------------------
# The VAE decoder: f32 against INT8 (lever vae_int8; children)
# ----------------------------------------------------------------------------------------------


def vae_config(model: str) -> dict:
    folder = checkpoint_folder(model)
    if folder is not None:
        return json.loads((folder / "vae" / "config.json").read_text())
    path = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}/vae.json")
    return json.loads(path.read_text())


def vae_latents(model: str, latent: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` decoder inputs ``[count, C, latent, latent]``: unit Gaussian diffusion latents,
    unscaled as the pipeline unscales them (``/ scaling_factor``)."""
    cfg = vae_config(model)
    rng = np.random.default_rng(seed)
    shape = (count, cfg.get("latent_channels", 4), latent, latent)
    return (rng.standard_normal(shape, dtype=np.float32) / cfg.get("scaling_factor", 0.18215)).astype(
        np.float32
    )


def export_vae_decoder(model: str, xml: str, seed: int = 0) -> dict:
    """The VAE decoder (a checkpoint's, or the architecture's with seeded random weights) -> IR,
    weights stored fp16, with the export's converter."""
    import gc

    import openvino as ov
    import torch
    from diffusers import AutoencoderKL

    from sdaccel.cpu.export import convert_vae_decoder

    start = time.perf_counter()
    folder = checkpoint_folder(model)
    torch.manual_seed(seed)
    if folder is not None:
        vae = AutoencoderKL.from_pretrained(folder / "vae", torch_dtype=torch.float32)
    else:
        vae = AutoencoderKL.from_config(vae_config(model))
    vae.eval()
    params = sum(p.numel() for p in [*vae.decoder.parameters(), *vae.post_quant_conv.parameters()])
    ov_model = convert_vae_decoder(vae)
    del vae
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=True)
    return {"seconds": time.perf_counter() - start, "params": params}


def quantize_vae_child(src: str, dst: str, variant: str, latents_npy: str | None, subset: int) -> dict:
    from sdaccel.cpu.quantize_vae import quantize_vae_decoder

    latents = None if latents_npy is None else np.load(latents_npy)
    return quantize_vae_decoder(src, dst, variant, latents, subset)


def time_vae(xml: str, model: str, latent: int, precision: str | None, iters: int, warmup: int) -> dict:
    """One decode (batch 1, as the pipeline decodes) of the VAE decoder IR, static shapes."""
    from sdaccel.cpu.quantize import time_unet

    inputs = {"latent_sample": vae_latents(model, latent, 1, seed=1)}
    timing = time_unet(xml, inputs, iters=iters, warmup=warmup, precision=precision, static=True)
    return {k: timing[k] for k in ("times", "cpu_times", "compile_s", "precision")}


def time_torch_vae(model: str, latent: int, iters: int, warmup: int, seed: int = 0) -> dict:
    import torch
    from diffusers import AutoencoderKL

    torch.set_flush_denormal(True)
    folder = checkpoint_folder(model)
    torch.manual_seed(seed)
    if folder is not None:
        vae = AutoencoderKL.from_pretrained(folder / "vae", torch_dtype=torch.float32).eval()
    else:
        vae = AutoencoderKL.from_config(vae_config(model)).eval()
    latents = torch.from_numpy(vae_latents(model, latent, 1, seed=1))

    def call():
        with torch.inference_mode():
            vae.decode(latents)

    times, cpu_times = _time_calls(call, iters, warmup)
    return {"times": times, "cpu_times": cpu_times, "precision": "f32", "compile_s": 0.0}


# ----------------------------------------------------------------------------------------------
# Quality on a trained tiny checkpoint (--quality; children)
# ----------------------------------------------------------------------------------------------


def quality_int8(checkpoint: str, work: str, prompts: int) -> dict:
    """Adherence and PSNR/SSIM of every INT8 UNet recipe (``sdaccel.toy.adherence``)."""
    from sdaccel.toy.adherence import evaluate

    out = evaluate(
        checkpoint,
        work,
        prompts,
        pipelines=("torch_fp32", "ov_f32"),
        variants=("int8_weights", "hybrid", "full_int8", *FLOAT_GROUP_VARIANTS),
    )
    return {"config": out["config"], "rows": out["rows"]}


def quality_deepcache(checkpoint: str, work: str, prompts: int, intervals: list[int]) -> dict:
    """DeepCache's cost (``sdaccel.toy.deepcache_quality.measure``), f32 and full INT8 at the first interval."""
    from sdaccel.toy.deepcache_quality import measure

    out = measure(
        checkpoint,
        work,
        num_prompts=prompts,
        intervals=intervals,
        int8_intervals=intervals[:1],
        progress=False,
    )
    return {"settings": out["settings"], "rows": out["rows"]}


def quality_vae(checkpoint: str, work: str, prompts: int) -> dict:
    from sdaccel.toy.adherence import vae_decoder_quality

    return vae_decoder_quality(checkpoint, work, VAE_VARIANTS, num_prompts=prompts)


def quality_tome(checkpoint: str, work: str, prompts: int, ratios: list[float]) -> dict:
    """Token merging's cost (``sdaccel.toy.tome_quality.measure``): adherence, PSNR/SSIM against the
    unmerged f32 images, at each ratio."""
    from sdaccel.toy.tome_quality import measure

    out = measure(checkpoint, work, ratios=ratios, num_prompts=prompts, progress=False)
    return {"settings": out["settings"], "rows": out["rows"]}


def quality_levers(checkpoint: str, work: str, batch: int) -> dict:
    """Max abs difference of each runtime lever's UNet output from its reference arm, on the
    checkpoint's exported UNet at its native size (one round each: numerics, not speed)."""
    from sdaccel.core.checkpoint import resolve_checkpoint
    from sdaccel.cpu import levers
    from sdaccel.cpu.export import MODEL_XML, export_pipeline

    folder = resolve_checkpoint(checkpoint)
    export = export_pipeline(folder, Path(work) / "openvino", components=["unet"], progress=False)
    latent = json.loads((folder / "unet" / "config.json").read_text())["sample_size"]
    inputs = unet_inputs(checkpoint, batch, latent)
    arms = {
        "runtime": levers.runtime_arms(os.cpu_count() or 1),
        "static": levers.STATIC_ARMS,
        "guidance_split": levers.GUIDANCE_ARMS,
    }
    out = {}
    for lever, group in arms.items():
        timed = levers.time_arms(
            export / "unet" / MODEL_XML, inputs, group, rounds=1, warmup=0, precision="f32"
        )
        out[lever] = {
            name: {k: row[k] for k in ("max_abs_diff", "output_abs_max")}
            for name, row in timed["arms"].items()
        }
    return out


# ----------------------------------------------------------------------------------------------
# Precision by measurement: a whole pipeline folder
# ----------------------------------------------------------------------------------------------

#: The components of a text-to-image export, per reference architecture.
PIPELINE_PARTS = {
    "sd15": ("text_encoder", "unet", "vae_decoder"),
    "sdxl": ("text_encoder", "text_encoder_2", "unet", "vae_decoder"),
}


def export_random_component(model: str, folder: str, component: str, seed: int = 0) -> dict:
    """One component of the architecture ``model`` with random weights (seeded), converted with
    the export's own converters into ``folder/component`` (``config.json`` and the IR, weights
    stored fp16), as ``export_pipeline`` lays it out."""
    import gc

    import openvino as ov
    import torch

    from sdaccel.cpu.export import MODEL_XML, convert_text_encoder, convert_unet, convert_vae_decoder

    start = time.perf_counter()
    configs = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}")
    torch.manual_seed(seed)
    if component == "unet":
        module = build_torch_unet(model, seed)
        config = unet_config(model)
        ov_model = convert_unet(module)
    elif component.startswith("text_encoder"):
        import transformers

        config = json.loads(configs.joinpath(f"{component}.json").read_text())
        cls = getattr(transformers, config.get("architectures", ["CLIPTextModel"])[0])
        module = cls(transformers.CLIPTextConfig(**config)).eval()
        ov_model = convert_text_encoder(module, config.get("max_position_embeddings", 77))
    else:
        from diffusers import AutoencoderKL

        config = json.loads(configs.joinpath("vae.json").read_text())
        module = AutoencoderKL.from_config(config).eval()
        ov_model = convert_vae_decoder(module)
    params = sum(p.numel() for p in module.parameters())
    del module
    gc.collect()
    out = Path(folder) / component
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    ov.save_model(ov_model, str(out / MODEL_XML), compress_to_fp16=True)
    return {"seconds": time.perf_counter() - start, "params": params}


def choose_precision_child(folder: str, candidates: list[str], iters: int, warmup: int) -> dict:
    """``choose_precision`` on an export folder, measured afresh (the cache is not read)."""
    from sdaccel.cpu.precision import choose_precision

    choice = choose_precision(folder, candidates=candidates, iters=iters, warmup=warmup, cache=False)
    return {"choice": choice.to_json(), "table": choice.table()}


def bench_precision(model: str, args, work: Path) -> dict:
    """Export a text-to-image pipeline folder (or reuse it with ``--reuse``) and choose the
    precision of each component by measurement, in a child process."""
    from sdaccel.cpu.export import MODEL_XML, export_pipeline, text_to_image_components

    limit, free = args.memory_limit_gb, args.min_free_gb
    folder = work / "pipeline"
    out = {"folder": str(folder), "export": {}}
    print(f"[{label(model)}] precision by measurement: {' vs '.join(args.precision_candidates)}", flush=True)
    if model in MODELS:
        folder.mkdir(parents=True, exist_ok=True)
        configs = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}")
        kind = "StableDiffusionXLPipeline" if model == "sdxl" else "StableDiffusionPipeline"
        index = {"_class_name": kind} | {c: ["sdaccel", "random"] for c in PIPELINE_PARTS[model]}
        (folder / "model_index.json").write_text(json.dumps(index, indent=2))
        (folder / "scheduler").mkdir(exist_ok=True)
        (folder / "scheduler" / "scheduler_config.json").write_text(
            configs.joinpath("scheduler.json").read_text()
        )
        for component in PIPELINE_PARTS[model]:
            if args.reuse and (folder / component / MODEL_XML).is_file():
                out["export"][component] = {"ok": True, "reused": True}
                continue
            run = _run(
                f"export {component} (random weights)",
                export_random_component,
                model,
                str(folder),
                component,
                limit_gb=limit,
                min_free_gb=free,
            )
            out["export"][component] = _summary(run)
            if not run.ok:
                return out
    else:
        src = checkpoint_folder(model)
        export_pipeline(src, folder, components=text_to_image_components(src), progress=False)
    run = _run(
        "choose the precision of each component",
        choose_precision_child,
        str(folder),
        list(args.precision_candidates),
        args.iters,
        args.warmup,
        limit_gb=limit,
        min_free_gb=free,
    )
    out["choose"] = _summary(run)
    if run.ok:
        print(run.result["table"], flush=True)
    return out


# ----------------------------------------------------------------------------------------------
# The driver (parent process)
# ----------------------------------------------------------------------------------------------


def machine_info() -> dict:
    import nncf
    import openvino as ov
    import psutil
    import torch

    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
        model_name = next(
            line.split(":", 1)[1].strip() for line in flags.splitlines() if "model name" in line
        )
    except (OSError, StopIteration):
        model_name = platform.processor()
    return {
        "cpu": model_name,
        "logical_cores": psutil.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "avx512_vnni": "avx512_vnni" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx": "amx_tile" in flags,
        "cpu_flags": cpu_features(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "openvino": ov.get_version(),
        "nncf": nncf.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def _free_gb() -> float:
    import psutil

    return psutil.virtual_memory().available / 2**30


def _run(label: str, fn, *args, limit_gb: float | None, min_free_gb: float, wait_s: float = 900, **kwargs):
    """One child-process job. It waits up to ``wait_s`` for ``min_free_gb`` of available memory
    (the machine may be shared), and is skipped if that never comes."""
    from sdaccel.core.processes import ChildRun, run_with_memory_limit

    deadline = time.monotonic() + wait_s
    while (free := _free_gb()) < min_free_gb and time.monotonic() < deadline:
        time.sleep(10)
    if free < min_free_gb:
        print(f"  {label}: skipped, {free:.1f} GiB available < {min_free_gb} GiB", flush=True)
        return ChildRun(error=f"skipped: {free:.1f} GiB available < {min_free_gb} GiB")
    print(f"  {label} ...", end="", flush=True)
    load = os.getloadavg()[0]
    run = run_with_memory_limit(fn, *args, limit_gb=limit_gb, **kwargs)
    run.load = (load, os.getloadavg()[0])
    status = "ok" if run.ok else run.error.splitlines()[0][:200]
    print(
        f" {run.seconds:.0f} s, peak RSS {run.peak_rss_gb:.1f} GiB (anonymous {run.peak_anon_gb:.1f}), "
        f"load {load:.1f}, {status}",
        flush=True,
    )
    return run


def _summary(run, extra: dict | None = None) -> dict:
    out = {
        "ok": run.ok,
        "peak_rss_gb": round(run.peak_rss_gb, 2),
        "peak_anon_gb": round(run.peak_anon_gb, 2),
        "wall_s": round(run.seconds, 1),
    }
    if run.samples:  # RSS over the run, at most 40 points (GiB), to see where the peak is
        step = max(1, len(run.samples) // 40)
        out["rss_timeline_gb"] = [
            round(max(run.samples[i : i + step]) / 2**30, 2) for i in range(0, len(run.samples), step)
        ]
    if hasattr(run, "load"):  # 1-minute load average before and after: other jobs on the machine
        out["load_avg"] = [round(x, 1) for x in run.load]
    if run.error:
        out["error"] = run.error
    if run.ok and isinstance(run.result, dict):
        result = dict(run.result)
        if "times" in result:
            result["s_per_step"] = statistics.median(result["times"])
            result["cpu_s_per_step"] = statistics.median(result["cpu_times"])
        out.update(result)
    out.update(extra or {})
    return out


def bench_model(model: str, args, previous: dict | None = None) -> dict:
    from sdaccel.cpu.quantize import ir_size_bytes

    name = label(model)
    work = Path(args.workdir) / name.replace("/", "--")
    work.mkdir(parents=True, exist_ok=True)
    source = work / "unet_fp16.xml"
    spec = {"model": model, "batch": args.batch, "latent": args.latent}
    sdxl_like = unet_config(model).get("addition_embed_type") == "text_time"
    smooth_quant = {"on": True, "off": False, "auto": not sdxl_like}[args.smooth_quant]
    weights = "random" if model in MODELS else "checkpoint"
    result = previous or {"variants": {}, "quantization": {}, "export": {}}  # --update adds to a run
    result.update(weights=weights, smooth_quant=smooth_quant)
    limit = args.memory_limit_gb
    free = args.min_free_gb

    print(f"[{name}] {MODELS.get(model, 'checkpoint')} UNet, {weights} weights", flush=True)
    if args.reuse and source.is_file():
        result["export"] = {"ok": True, "reused": str(source.resolve()), "params": _ir_parameters(source)}
    else:
        run = _run(
            "export to OpenVINO IR (fp16 weights)",
            export_ir,
            model,
            str(source),
            limit_gb=limit,
            min_free_gb=free,
        )
        result["export"] = _summary(run)
        if not run.ok:
            return result
    result["export"]["size_bytes"] = ir_size_bytes(source)
    params = result["export"].get("params")

    calibration = work / "calibration"
    calibrated = [v for v in args.variants if v in INT8 and v != "int8_weights"]
    if calibrated or "quant_memory" in args.levers:
        synthetic_calibration(str(calibration), model, args.batch, args.latent, args.calib_samples)

    for variant in args.variants:
        if variant == "torch_fp32":
            run = _run(
                variant,
                time_torch,
                model,
                args.batch,
                args.latent,
                args.iters,
                args.warmup,
                limit_gb=limit,
                min_free_gb=free,
            )
            size = {"size_bytes": 4 * params} if params else {}
            result["variants"][variant] = _summary(run, size)
            continue
        xml = source
        if variant in INT8:
            xml = work / f"unet_{variant}.xml"
            if not _quantize_unet(model, variant, xml, source, calibration, smooth_quant, args, work, result):
                continue
            for precision in int8_floats(model, args, work, spec, result):
                row = variant if precision == result["int8_float"]["chosen"] else f"{variant}@{precision}"
                run = _run(
                    f"{row} (float layers: {precision})",
                    time_openvino,
                    str(xml),
                    spec,
                    precision,
                    args.iters,
                    args.warmup,
                    limit_gb=limit,
                    min_free_gb=free,
                )
                extra = {"size_bytes": ir_size_bytes(xml), "float_precision_asked": precision}
                result["variants"][row] = _summary(run, extra)
            continue
        precision = "f32" if variant == "ov_f32" else None
        run = _run(
            variant,
            time_openvino,
            str(xml),
            spec,
            precision,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        result["variants"][variant] = _summary(run, {"size_bytes": ir_size_bytes(xml)})

    if "deepcache" in args.levers:
        result["deepcache"] = bench_deepcache(model, args, work, spec, result)
    if "quant_memory" in args.levers:
        result.setdefault("memory_study", {}).update(bench_quant_memory(model, args, work))
    for lever in ("static", "guidance_split", "runtime"):
        if lever in args.levers:
            result.setdefault("levers", {})[lever] = bench_lever(
                model, args, work, spec, result, lever, source
            )
    if "vae_int8" in args.levers:
        result.setdefault("levers", {})["vae_int8"] = bench_vae_int8(model, args, work, result)
    if "tome" in args.levers:
        result.setdefault("levers", {})["tome"] = bench_tome(model, args, work, spec, result, source)
    _speedups(result)
    _whole_image(result, args.steps_per_image)
    return result


def _quantize_unet(model, variant, xml, source, calibration, smooth_quant, args, work, result) -> bool:
    """Quantize (or, with ``--reuse``, reuse) the INT8 UNet of ``variant`` at ``xml``; whether it is there."""
    recipe, float_group = FLOAT_GROUPS.get(variant, (variant, None))
    knobs = {}
    if recipe == "full_int8" and not smooth_quant:
        knobs["smooth_quant_alpha"] = None
    if recipe == "full_int8" and args.no_bias_correction:
        knobs["bias_correction"] = False
    if float_group is not None:
        knobs["ignored"] = [*SENSITIVE_LAYER_PATTERNS, float_group]
    if args.reuse and xml.is_file():  # keep what an earlier run measured
        result["quantization"].setdefault(variant, {"ok": True})["reused"] = str(xml.resolve())
        return True
    quant_source = source if args.quant_source == "fp16" else _f32_ir(model, work, args)
    if quant_source is None:
        return False
    data = str(calibration) if recipe != "int8_weights" else None
    extra = {"source_ir": args.quant_source, "recipe": recipe}
    if recipe == "full_int8":
        extra["smooth_quant"] = knobs.get("smooth_quant_alpha", 0.95) is not None
        extra["bias_correction"] = knobs.get("bias_correction", True)
    if float_group is not None:
        extra["kept_in_float"] = knobs["ignored"]
    budget = args.quant_max_memory_gb
    if budget is None:
        run = _run(
            f"quantize {variant} (from the {args.quant_source} IR)",
            quantize_ir,
            str(quant_source),
            str(xml),
            recipe,
            data,
            args.calib_samples,
            limit_gb=args.quant_memory_limit_gb,
            min_free_gb=max(args.min_free_gb, args.quant_memory_limit_gb),
            **knobs,
        )
        result["quantization"][variant] = _summary(run, extra)
        return run.ok
    # in parts within the budget: quantize_ir runs every part in its own watched child
    _wait_for_memory(max(args.min_free_gb, budget + 2), f"quantize {variant}")
    print(f"  quantize {variant} in parts within {budget} GiB ...", end="", flush=True)
    load, tick = os.getloadavg()[0], time.perf_counter()
    try:
        report = quantize_ir(
            str(quant_source), str(xml), recipe, data, args.calib_samples, max_memory_gb=budget, **knobs
        )
    except Exception as error:  # reported in the results, as a failed child would be
        print(f" failed: {error}", flush=True)
        result["quantization"][variant] = {"ok": False, "error": f"{type(error).__name__}: {error}", **extra}
        return False
    seconds = time.perf_counter() - tick
    print(f" {seconds:.0f} s in {report['parts']} parts, peak RSS {report['peak_rss_bytes'] / 2**30:.1f} GiB")
    result["quantization"][variant] = {
        "ok": True,
        "peak_rss_gb": round(report["peak_rss_bytes"] / 2**30, 2),
        "peak_anon_gb": round(report["peak_anon_bytes"] / 2**30, 2),
        "wall_s": round(seconds, 1),
        "load_avg": [round(load, 1), round(os.getloadavg()[0], 1)],
        "max_memory_gb": budget,
        **{k: report[k] for k in ("parts", "size_bytes", "fake_quantize", "int8_weights") if k in report},
        "stages": report.get("stages"),
        **extra,
    }
    return True


def _wait_for_memory(min_free_gb: float, label: str, wait_s: float = 900) -> None:
    deadline = time.monotonic() + wait_s
    while _free_gb() < min_free_gb and time.monotonic() < deadline:
        time.sleep(10)
    if _free_gb() < min_free_gb:
        print(
            f"  {label}: only {_free_gb():.1f} GiB available (wanted {min_free_gb}); going ahead", flush=True
        )


def best_float(model: str, args, work: Path, spec: dict, result: dict) -> dict:
    """The float precision of the UNet on this CPU, by ``choose_precision``'s rule: the only one the
    plugin offers; else the faster of ``ov_f32`` / ``ov_bf16`` where both ran as asked in this run;
    else measured now (``choose_unet_precision``). Cached in ``result["best_float"]``."""
    import openvino as ov

    from sdaccel.cpu.precision import offered_precisions

    if "best_float" in result and result["best_float"].get("offered"):
        return result["best_float"]
    offered = [p for p in offered_precisions(ov.Core()) if p in FLOAT_VARIANTS.values()]
    rows = {p: result["variants"].get(name, {}) for name, p in FLOAT_VARIANTS.items() if p in offered}
    if len(offered) == 1:
        choice = {
            "chosen": offered[0],
            "why": f"the only float precision the CPU plugin offers ({offered[0]})",
        }
    elif all(r.get("ok") and r.get("precision") == p for p, r in rows.items()):
        chosen = min(offered, key=lambda p: rows[p]["s_per_step"])
        choice = {
            "chosen": chosen,
            "why": "the faster of " + " / ".join(f"ov_{p}" for p in offered) + " in this run",
        }
    else:
        run = _run(
            "choose the UNet's float precision",
            choose_unet_precision,
            str(work / "unet_fp16.xml"),
            spec,
            offered,
            args.iters,
            args.warmup,
            limit_gb=args.memory_limit_gb,
            min_free_gb=args.min_free_gb,
        )
        if not run.ok:
            choice = {"chosen": "f32", "why": f"measuring failed ({run.error}); f32"}
        else:
            choice = {
                "chosen": run.result["chosen"],
                "why": "measured",
                "measured": run.result["measurements"],
            }
    result["best_float"] = {**choice, "offered": offered, "variant": f"ov_{choice['chosen']}"}
    return result["best_float"]


def int8_floats(model: str, args, work: Path, spec: dict, result: dict) -> list[str]:
    """The float precisions each INT8 variant is timed with (``--int8-float``), the chosen one first."""
    best = best_float(model, args, work, spec, result)
    chosen = best["chosen"] if args.int8_float in ("auto", "both") else args.int8_float
    floats = [chosen]
    if args.int8_float == "both":
        floats += [p for p in best["offered"] if p != chosen]
    result["int8_float"] = {
        "mode": args.int8_float,
        "chosen": chosen,
        "timed": floats,
        "why": best["why"] if args.int8_float != chosen else "asked with --int8-float",
        "not_timed": [p for p in ("f32", "bf16") if p not in floats] if args.int8_float == "both" else [],
    }
    return floats


def bench_lever(model: str, args, work: Path, spec: dict, result: dict, lever: str, source: Path) -> dict:
    """One runtime lever (``sdaccel.cpu.levers``) on the UNet IR in the best float, in a child."""
    precision = best_float(model, args, work, spec, result)["chosen"]
    run = _run(
        f"lever {lever} ({precision}, {args.lever_rounds} rounds"
        + (", compiled afresh each round)" if args.lever_recompile else ")"),
        time_lever,
        str(source),
        spec,
        lever,
        args.lever_rounds,
        args.warmup,
        precision,
        not args.lever_recompile,
        os.cpu_count() or 1,
        args.runtime_arms if lever == "runtime" else None,
        limit_gb=args.memory_limit_gb,
        min_free_gb=args.min_free_gb,
    )
    out = _summary(run, {"precision_asked": precision, "source_ir": str(source.resolve())})
    for name, arm in out.get("arms", {}).items():
        print(
            f"    {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:.2f}  "
            f"cpu {arm['cpu_s_per_call']:8.3f} s  max |diff| {arm['max_abs_diff']:.2e}",
            flush=True,
        )
    return out


def bench_tome(model: str, args, work: Path, spec: dict, result: dict, source: Path) -> dict:
    """Lever ``tome``: export the UNet merged at each of ``--tome-ratios`` (or, with ``--reuse``,
    reuse it), then time the unmerged IR ``source`` and the merged ones in the best float,
    interleaved (:func:`time_tome`), in a child."""
    limit, free = args.memory_limit_gb, args.min_free_gb
    precision = best_float(model, args, work, spec, result)["chosen"]
    out = {"ratios": args.tome_ratios, "latent": args.latent, "export": {}, "merged": {}}
    irs = {"unmerged": str(source)}
    for ratio in args.tome_ratios:
        key = f"{ratio:g}"
        xml = work / f"unet_tome_{key}_{args.latent}x{args.latent}_fp16.xml"
        report = xml.with_suffix(".json")
        if args.reuse and xml.is_file() and report.is_file():
            out["export"][key] = {"ok": True, "reused": str(xml.resolve())}
        else:
            run = _run(
                f"tome: export the UNet merged at {key} ({args.latent}x{args.latent} latents)",
                export_tome_ir,
                model,
                str(xml),
                ratio,
                args.latent,
                limit_gb=limit,
                min_free_gb=free,
            )
            out["export"][key] = _summary(run)
            if not run.ok:
                continue
        out["merged"][key] = json.loads(report.read_text())
        irs[f"tome {key}"] = str(xml)
    run = _run(
        f"lever tome ({precision}, {args.lever_rounds} rounds, compiled afresh each round)",
        time_tome,
        irs,
        spec,
        args.lever_rounds,
        args.warmup,
        precision,
        limit_gb=limit,
        min_free_gb=free,
    )
    out.update(_summary(run, {"precision_asked": precision}))
    for name, arm in out.get("arms", {}).items():
        print(
            f"    {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:.2f}  "
            f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:.2f}",
            flush=True,
        )
    return out


def bench_vae_int8(model: str, args, work: Path, result: dict) -> dict:
    """The VAE decoder (batch 1, the image size of ``--latent``): PyTorch fp32 (when the run has a
    ``torch_fp32`` row), the IR in the best float, and each INT8 recipe of
    ``sdaccel.cpu.quantize_vae`` calibrated on ``--calib-samples`` synthetic latents."""
    from sdaccel.cpu.quantize import ir_size_bytes

    limit, free = args.memory_limit_gb, args.min_free_gb
    spec = {"model": model, "batch": args.batch, "latent": args.latent}
    best = best_float(model, args, work, spec, result)["chosen"]
    int8 = result.get("int8_float", {}).get("chosen", best)
    source = work / "vae_decoder_fp16.xml"
    out = {"image_size": args.latent * 8, "rows": {}, "quantization": {}}
    if not (args.reuse and source.is_file()):
        run = _run(
            "vae: export the decoder",
            export_vae_decoder,
            model,
            str(source),
            limit_gb=limit,
            min_free_gb=free,
        )
        out["export"] = _summary(run)
        if not run.ok:
            return out
    latents = work / "vae_calibration.npy"
    np.save(latents, vae_latents(model, args.latent, args.calib_samples))
    if "torch_fp32" in args.variants or "torch_fp32" in result["variants"]:
        run = _run(
            "vae: torch_fp32",
            time_torch_vae,
            model,
            args.latent,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        out["rows"]["torch_fp32"] = _summary(run)
    run = _run(
        f"vae: {best}",
        time_vae,
        str(source),
        model,
        args.latent,
        best,
        args.iters,
        args.warmup,
        limit_gb=limit,
        min_free_gb=free,
    )
    out["rows"][best] = _summary(run, {"size_bytes": ir_size_bytes(source)})
    for variant in VAE_VARIANTS:
        xml = work / f"vae_decoder_{variant}.xml"
        if not (args.reuse and xml.is_file()):
            run = _run(
                f"vae: quantize {variant}",
                quantize_vae_child,
                str(source),
                str(xml),
                variant,
                None if variant == "int8_weights" else str(latents),
                args.calib_samples,
                limit_gb=args.quant_memory_limit_gb,
                min_free_gb=free,
            )
            out["quantization"][variant] = _summary(run)
            if not run.ok:
                continue
        run = _run(
            f"vae: {variant} (float layers: {int8})",
            time_vae,
            str(xml),
            model,
            args.latent,
            int8,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        out["rows"][variant] = _summary(run, {"size_bytes": ir_size_bytes(xml)})
    reference = out["rows"].get(best, {})
    for row in out["rows"].values():
        if row.get("ok") and reference.get("ok"):
            row["vs_float"] = reference["s_per_step"] / row["s_per_step"]
            row["cpu_vs_float"] = reference["cpu_s_per_step"] / row["cpu_s_per_step"]
    return out


def bench_quality(args) -> dict:
    """The quality cost of the levers that change numbers, on a trained tiny checkpoint, each part
    of ``--quality-parts`` in a child: the INT8 UNets (adherence, PSNR/SSIM vs f32), DeepCache at
    each interval, the INT8 VAE decoders, token merging at each ratio; and the max abs difference
    of the levers that should not change them."""
    checkpoint, prompts = args.quality, args.quality_prompts
    work = Path(args.workdir) / "quality" / label(checkpoint).replace("/", "--")
    limit, free = args.memory_limit_gb, args.min_free_gb
    print(f"[quality] {checkpoint}, {prompts} held-out prompts", flush=True)
    jobs = {
        "int8_unet": (quality_int8, checkpoint, str(work / "int8"), prompts),
        "deepcache": (
            quality_deepcache,
            checkpoint,
            str(work / "deepcache"),
            prompts,
            args.deepcache_intervals,
        ),
        "vae_int8": (quality_vae, checkpoint, str(work / "vae"), prompts),
        "levers_max_abs_diff": (quality_levers, checkpoint, str(work / "levers"), 2),
        "tome": (quality_tome, checkpoint, str(work / "tome"), prompts, args.tome_ratios),
    }
    out = {"checkpoint": checkpoint, "prompts": prompts}
    for name, (fn, *fn_args) in jobs.items():
        if name not in args.quality_parts:
            continue
        run = _run(f"quality: {name}", fn, *fn_args, limit_gb=limit, min_free_gb=free)
        out[name] = _summary(run)
    return out


def _ir_parameters(xml: Path) -> int:
    """Number of floating-point constant elements of an IR: its parameter count."""
    import openvino as ov

    return sum(
        int(np.prod(op.get_output_shape(0)))
        for op in ov.Core().read_model(str(xml)).get_ops()
        if op.get_type_name() == "Constant"
        and op.get_output_element_type(0).get_type_name() in ("f16", "f32")
    )


def _f32_ir(model: str, work: Path, args) -> Path | None:
    """The UNet exported with f32 weights (exported once; NNCF needs less memory from it)."""
    xml = work / "unet_f32.xml"
    if not xml.is_file():
        run = _run(
            "export to OpenVINO IR (f32 weights)",
            export_ir,
            model,
            str(xml),
            fp16=False,
            limit_gb=args.memory_limit_gb,
            min_free_gb=args.min_free_gb,
        )
        if not run.ok:
            return None
    return xml


def bench_quant_memory(model: str, args, work: Path) -> dict:
    """Peak RSS of quantization under the memory levers (:data:`MEMORY_STUDY`), each in a child
    stopped at ``--quant-memory-limit-gb``. The quantized IRs are deleted afterwards."""
    study = {}
    sources = {"fp16": work / "unet_fp16.xml", "f32": _f32_ir(model, work, args)}
    if sources["f32"] is None:
        return {}
    calibration = work / "calibration"
    for name, (variant, source, knobs) in MEMORY_STUDY.items():
        target = work / "memory_study.xml"
        run = _run(
            f"memory study: {name}",
            quantize_ir,
            str(sources[source]),
            str(target),
            variant,
            str(calibration),
            args.calib_samples,
            limit_gb=args.quant_memory_limit_gb,
            min_free_gb=max(args.min_free_gb, args.quant_memory_limit_gb),
            **knobs,
        )
        study[name] = _summary(run)
        for path in (target, target.with_suffix(".bin")):
            path.unlink(missing_ok=True)
    return study


def bench_deepcache(model: str, args, work: Path, spec: dict, result: dict) -> dict:
    """The shallow UNet in the best float (and full INT8), and the average step time for each interval."""
    limit, free = args.memory_limit_gb, args.min_free_gb
    shallow = work / "unet_shallow_fp16.xml"
    out = {"intervals": args.deepcache_intervals}
    if not (args.reuse and shallow.is_file()):
        run = _run(
            "deepcache: export the shallow UNet",
            export_deepcache_shallow,
            model,
            str(shallow),
            limit_gb=limit,
            min_free_gb=free,
        )
        if not run.ok:
            return _summary(run)
    cached = {"cached": cached_shape(unet_config(model), args.batch, args.latent, args.latent)}
    shallow_spec = {**spec, "extra": cached}
    best = best_float(model, args, work, spec, result)
    out["float"] = best["chosen"]
    # around the best float: the shallow UNet in the precision that the full float UNet ran best in
    targets = {best["variant"]: shallow}
    precisions = {best["variant"]: best["chosen"]}
    quantized = work / "unet_shallow_full_int8.xml"
    if args.no_deepcache_int8:
        pass
    elif args.reuse and quantized.is_file():
        targets["full_int8"] = quantized
    elif "full_int8" in result["variants"] and result["variants"]["full_int8"].get("ok"):
        calibration = work / "calibration_shallow"
        synthetic_calibration(
            str(calibration), model, args.batch, args.latent, args.calib_samples, extra=cached
        )
        q = _run(
            "deepcache: quantize the shallow UNet (full_int8)",
            quantize_ir,
            str(shallow),
            str(quantized),
            "full_int8",
            str(calibration),
            args.calib_samples,
            limit_gb=args.quant_memory_limit_gb,
            min_free_gb=free,
        )
        if q.ok:
            targets["full_int8"] = quantized
    for base, xml in targets.items():
        precision = precisions.get(base, result.get("int8_float", {}).get("chosen", best["chosen"]))
        run = _run(
            f"deepcache shallow step ({base}, float layers: {precision})",
            time_openvino,
            str(xml),
            shallow_spec,
            precision,
            args.iters,
            args.warmup,
            limit_gb=limit,
            min_free_gb=free,
        )
        entry = _summary(run)
        full = result["variants"].get(base, {})
        if run.ok and full.get("s_per_step"):
            entry["shallow_fraction"] = entry["s_per_step"] / full["s_per_step"]
            for key in ("s_per_step", "cpu_s_per_step"):
                entry[f"avg_{key}"] = {
                    str(n): (full[key] + (n - 1) * entry[key]) / n for n in args.deepcache_intervals
                }
        out[base] = entry
    return out


def _speedups(result: dict) -> None:
    variants = result["variants"]
    rows = dict(variants)
    for base, entry in result.get("deepcache", {}).items():
        if isinstance(entry, dict) and "avg_s_per_step" in entry:
            for n, s in entry["avg_s_per_step"].items():
                cpu = entry["avg_cpu_s_per_step"][n]
                rows[f"{base}+deepcache(N={n})"] = {"s_per_step": s, "cpu_s_per_step": cpu, "ok": True}
    rows = {name: entry for name, entry in rows.items() if entry.get("ok") and entry.get("s_per_step")}

    def ratio(base: str | None, name: str, key: str):
        return rows[base][key] / rows[name][key] if base in rows else None

    best = result.get("best_float", {}).get("variant")
    result["speedup"] = {
        name: {
            "s_per_step": entry["s_per_step"],
            "cpu_s_per_step": entry["cpu_s_per_step"],
            "vs_torch_fp32": ratio("torch_fp32", name, "s_per_step"),
            "vs_ov_bf16": ratio("ov_bf16", name, "s_per_step"),
            "vs_best_float": ratio(best, name, "s_per_step"),
            "cpu_vs_torch_fp32": ratio("torch_fp32", name, "cpu_s_per_step"),
            "cpu_vs_ov_bf16": ratio("ov_bf16", name, "cpu_s_per_step"),
            "cpu_vs_best_float": ratio(best, name, "cpu_s_per_step"),
        }
        for name, entry in rows.items()
    }


def _whole_image(result: dict, steps: int) -> None:
    """Seconds per image composed from the measured parts: ``steps`` UNet steps (batch 2, one
    guided image) plus one VAE decode (lever ``vae_int8``): PyTorch's decoder for ``torch_fp32``,
    the decoder in the best float for the OpenVINO rows, and each INT8 decoder beside the fastest
    UNet row. The text encoder (one call per image, well under a UNet step) is left out."""
    vae = result.get("levers", {}).get("vae_int8", {}).get("rows", {})
    vae = {name: row["s_per_step"] for name, row in vae.items() if row.get("ok")}
    float_vae = vae.get(result.get("best_float", {}).get("chosen"))
    speed = result.get("speedup", {})
    if float_vae is None or not speed:
        return
    rows = {}
    for name, entry in speed.items():
        decoder = vae.get("torch_fp32") if name == "torch_fp32" else float_vae
        if decoder is not None:
            rows[name] = {"unet_s": steps * entry["s_per_step"], "vae_s": decoder, "vae": "float"}
    fastest = min((n for n in speed if n != "torch_fp32"), key=lambda n: speed[n]["s_per_step"])
    for variant in VAE_VARIANTS:
        if variant in vae:
            rows[f"{fastest} + vae {variant}"] = {
                "unet_s": steps * speed[fastest]["s_per_step"],
                "vae_s": vae[variant],
                "vae": variant,
            }
    best = result.get("best_float", {}).get("variant")
    for row in rows.values():
        row["s_per_image"] = row["unet_s"] + row["vae_s"]
    for row in rows.values():
        for base in ("torch_fp32", best):
            if base in rows:
                row[f"vs_{'torch_fp32' if base == 'torch_fp32' else 'best_float'}"] = (
                    rows[base]["s_per_image"] / row["s_per_image"]
                )
    result["whole_image"] = {"steps": steps, "rows": rows}


def print_table(results: dict) -> str:
    header = (
        f"{'model':10} {'variant':30} {'prec':5} {'s/step':>8} {'x torch':>8} {'x bf16':>7} {'x best':>7} "
        f"{'cpu s':>8} {'x torch':>8} {'x best':>7} {'size MB':>8} {'run GiB':>8} {'quant GiB':>9}"
    )
    lines = [
        f"{'':10} {'':30} {'':5} {'-- wall clock, median --':>33} {'-- CPU time, median --':>25}",
        header,
    ]
    for model, result in results["models"].items():
        for name, speed in result.get("speedup", {}).items():
            entry = result["variants"].get(name, {})
            quant = result["quantization"].get(name.split("@")[0], {})
            size = entry.get("size_bytes")
            lines.append(
                f"{model[:10]:10} {name:30} {entry.get('precision', ''):5} {speed['s_per_step']:8.2f} "
                f"{_fmt(speed['vs_torch_fp32'], 8)} {_fmt(speed['vs_ov_bf16'], 7)} "
                f"{_fmt(speed.get('vs_best_float'), 7)} "
                f"{speed['cpu_s_per_step']:8.2f} {_fmt(speed['cpu_vs_torch_fp32'], 8)} "
                f"{_fmt(speed.get('cpu_vs_best_float'), 7)} {_fmt(size / 1e6 if size else None, 8, 0)} "
                f"{_fmt(entry.get('peak_rss_gb'), 8, 1)} {_fmt(quant.get('peak_rss_gb'), 9, 1)}"
            )
        for name, quant in result["quantization"].items():
            if not quant.get("ok"):
                lines.append(f"{model[:10]:10} {name:30} quantization failed: {quant.get('error', '')[:80]}")
        if "best_float" in result:
            best = result["best_float"]
            lines.append(f"{model[:10]:10} best float: {best['chosen']} ({best['why']})")
        if "int8_float" in result:
            lines.append(
                f"{model[:10]:10} INT8 variants' float layers: {', '.join(result['int8_float']['timed'])} "
                f"(--int8-float {result['int8_float']['mode']})"
            )
        lines.extend(_lever_lines(model, result))
        choose = result.get("precision_choice", {}).get("choose", {})
        if choose.get("ok"):
            lines.append(f"{model[:10]:10} precision by measurement:")
            lines.extend(f"{'':10} {line}" for line in choose["table"].splitlines())
        elif choose:
            lines.append(f"{model[:10]:10} precision by measurement failed: {choose.get('error', '')[:80]}")
        for name, run in result.get("memory_study", {}).items():
            status = "ok" if run.get("ok") else run.get("error", "")[:60]
            lines.append(
                f"{model[:10]:10} memory study: {name:32} peak RSS {run.get('peak_rss_gb', 0):5.1f} GiB "
                f"(anonymous {run.get('peak_anon_gb', 0):5.1f}) "
                f"{run.get('wall_s', 0):6.0f} s  {status}"
            )
    for checkpoint, quality in results.get("quality", {}).items():
        lines.extend(_quality_lines(checkpoint, quality))
    table = "\n".join(lines)
    print(table)
    return table


def _lever_lines(model: str, result: dict) -> list[str]:
    """One line per lever setting: seconds per call, the ratio to the lever's reference arm (wall
    and CPU), and the max abs difference of its output from the reference's."""
    lines = []
    for lever, out in result.get("levers", {}).items():
        if lever in ("vae_int8", "tome"):
            continue
        if not out.get("ok"):
            lines.append(f"{model[:10]:10} lever {lever}: failed: {out.get('error', '')[:80]}")
            continue
        lines.append(
            f"{model[:10]:10} lever {lever} ({out['precision_asked']}, {out['rounds']} rounds, "
            f"reference: {out['reference']}):"
        )
        for name, arm in out["arms"].items():
            parallel = (
                f"  {arm['parallel']} in flight: {arm['s_per_call_parallel']:.3f} s per call"
                if "s_per_call_parallel" in arm
                else ""
            )
            lines.append(
                f"{'':10}   {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:5.2f}  "
                f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:5.2f}  "
                f"max |diff| {arm['max_abs_diff']:.1e}{parallel}"
            )
    lines.extend(_tome_lines(model, result.get("levers", {}).get("tome")))
    vae = result.get("levers", {}).get("vae_int8")
    if vae:
        lines.append(
            f"{model[:10]:10} lever vae_int8 (decoder, batch 1, {vae['image_size']}x{vae['image_size']}):"
        )
        for name, row in vae["rows"].items():
            status = (
                f"{row['s_per_step']:9.3f} s  x{_fmt(row.get('vs_float'), 5)} vs float  "
                f"cpu {row['cpu_s_per_step']:8.3f} s  ({row.get('precision', '')})"
                if row.get("ok")
                else f"failed: {row.get('error', '')[:60]}"
            )
            lines.append(f"{'':10}   {name:28} {status}")
    whole = result.get("whole_image")
    if whole:
        lines.append(f"{model[:10]:10} per image ({whole['steps']} UNet steps + one VAE decode, composed):")
        for name, row in whole["rows"].items():
            lines.append(
                f"{'':10}   {name:40} {row['s_per_image']:9.1f} s  x{_fmt(row.get('vs_torch_fp32'), 5)} torch  "
                f"x{_fmt(row.get('vs_best_float'), 5)} best float"
            )
    return lines


def _tome_lines(model: str, tome: dict | None) -> list[str]:
    """Lever ``tome``: seconds per UNet call of each merged IR against the unmerged one, and how many
    tokens its merged self-attentions kept."""
    if not tome:
        return []
    if not tome.get("ok"):
        return [f"{model[:10]:10} lever tome: failed: {tome.get('error', '')[:80]}"]
    lines = [
        f"{model[:10]:10} lever tome ({tome['precision_asked']}, {tome['rounds']} rounds, "
        f"{tome['latent']}x{tome['latent']} latents, reference: {tome['reference']}):"
    ]
    for name, arm in tome["arms"].items():
        merged = tome["merged"].get(name.removeprefix("tome "), {}).get("merged_blocks", {})
        kept = (
            f"  self-attention over {sorted({b['attended'] for b in merged.values()})} of "
            f"{sorted({b['tokens'] for b in merged.values()})} tokens in {len(merged)} blocks"
            if merged
            else ""
        )
        lines.append(
            f"{'':10}   {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:5.2f}  "
            f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:5.2f}{kept}"
        )
    return lines


def _quality_lines(checkpoint: str, quality: dict) -> list[str]:
    lines = [f"quality on {checkpoint} ({quality['prompts']} held-out prompts):"]
    lines.append(f"  {'row':34} {'adherence':>9} {'PSNR dB':>8} {'SSIM':>6}  against")
    int8 = quality.get("int8_unet", {})
    for name, row in int8.get("rows", {}).items():
        pair = row.get("vs_ov_f32") or row.get("vs_torch_fp32") or {}
        against = "ov_f32" if "vs_ov_f32" in row else "torch_fp32"
        lines.append(
            f"  {'unet ' + name:34} {row['adherence']['score']:9.3f} {_fmt(pair.get('psnr_mean'), 8, 1)} "
            f"{_fmt(pair.get('ssim_mean'), 6, 3)}  {against if pair else ''}"
        )
    for name, row in quality.get("deepcache", {}).get("rows", {}).items():
        lines.append(
            f"  {'deepcache ' + name:34} {row['adherence']['score']:9.3f} {_fmt(row.get('psnr_mean'), 8, 1)} "
            f"{_fmt(row.get('ssim_mean'), 6, 3)}  {'f32 (no cache)' if 'ssim_mean' in row else ''}"
        )
    for name, row in quality.get("tome", {}).get("rows", {}).items():
        if name != "f32":
            lines.append(
                f"  {'unet ' + name:34} {row['adherence']['score']:9.3f} {_fmt(row.get('psnr_mean'), 8, 1)} "
                f"{_fmt(row.get('ssim_mean'), 6, 3)}  f32 (unmerged)"
            )
    for name, row in quality.get("vae_int8", {}).get("rows", {}).items():
        pair = row.get("vs_f32", {})
        lines.append(
            f"  {'vae decoder ' + name:34} {row['adherence']['score']:9.3f} {_fmt(pair.get('psnr_mean'), 8, 1)} "
            f"{_fmt(pair.get('ssim_mean'), 6, 3)}  {'f32 decoder' if pair else ''}"
        )
    for lever, arms in quality.get("levers_max_abs_diff", {}).items():
        if isinstance(arms, dict) and lever not in (
            "ok",
            "peak_rss_gb",
            "peak_anon_gb",
            "wall_s",
            "load_avg",
        ):
            worst = max((arm["max_abs_diff"] for arm in arms.values() if isinstance(arm, dict)), default=None)
            if worst is not None:
                lines.append(
                    f"  lever {lever:28} max abs diff of the UNet output from its reference: {worst:.1e}"
                )
    for name, part in quality.items():
        if isinstance(part, dict) and part.get("ok") is False:
            lines.append(f"  {name}: failed: {part.get('error', '')[:80]}")
    return lines


def _fmt(value, width: int, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
        default=list(VARIANTS),
        help="UNet variants to time (none: only --choose-precision)",
    )
    parser.add_argument("--levers", nargs="*", choices=LEVERS, default=[])
    parser.add_argument("--iters", type=int, default=3, help="timed UNet calls per variant (median reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    parser.add_argument("--batch", type=int, default=2, help="UNet batch (2 = one image with CFG)")
    parser.add_argument("--latent", type=int, default=64, help="latent size (64 -> 512x512 images)")
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
    parser.add_argument("--deepcache-intervals", nargs="+", type=int, default=[2, 3, 5])
    parser.add_argument(
        "--no-deepcache-int8", action="store_true", help="time DeepCache's shallow UNet in float only"
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
    args = parser.parse_args(argv)
    for ratio in args.tome_ratios:  # refused before anything is measured or written
        try:
            check_ratio(ratio)
        except ValueError as error:
            parser.error(f"--tome-ratios: {error}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    settings = dict(vars(args))
    results = {"machine": machine_info(), "settings": settings, "runs": [settings], "models": {}}
    if args.update and out.is_file():
        previous = json.loads(out.read_text())
        results["models"] = previous["models"]
        for key in ("quality", "notes"):  # the notes are written by hand: kept as they are
            if key in previous:
                results[key] = previous[key]
        results["runs"] = [*previous.get("runs", [previous["settings"]]), settings]
    print(json.dumps(results["machine"]), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.quality:
        quality = results.setdefault("quality", {})
        quality[label(args.quality)] = quality.get(label(args.quality), {}) | bench_quality(args)
        out.write_text(json.dumps(results, indent=2, default=str))
    for model in args.models:
        name = label(model)
        entry = results["models"].get(name) or {"variants": {}, "quantization": {}, "export": {}}
        if args.variants or args.levers:
            entry = bench_model(model, args, entry)
        if args.choose_precision:
            work = Path(args.workdir) / name.replace("/", "--")
            work.mkdir(parents=True, exist_ok=True)
            entry["precision_choice"] = bench_precision(model, args, work)
        results["models"][name] = entry
        out.write_text(json.dumps(results, indent=2, default=str))  # partial results survive a crash
    results["table"] = print_table(results)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
