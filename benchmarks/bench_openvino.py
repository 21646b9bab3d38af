"""Seconds per UNet step on CPU: PyTorch fp32, OpenVINO f32 / bf16 / INT8 recipes, and the runtime levers.

    python benchmarks/bench_openvino.py                               # SD 1.5 and SDXL, every variant
    python benchmarks/bench_openvino.py --models sd15 --iters 5
    python benchmarks/bench_openvino.py --models sdxl --variants ov_bf16 full_int8 --quant-memory-limit-gb 16
    python benchmarks/bench_openvino.py --models sd15 --levers deepcache quant_memory
    python benchmarks/bench_openvino.py --models sd15 --variants torch_fp32 ov_f32 --levers stack --lever-rounds 2
    python benchmarks/bench_openvino.py --models sd15 --reuse --update --variants full_int8   # add to a run
    python benchmarks/bench_openvino.py --models build/checkpoints/tiny-sd15 --latent 8     # a checkpoint

What is measured, for the *real* SD 1.5 and SDXL UNet architectures (configs in
``sdaccel/reference_configs``) with random weights (seeded; no download), batch 2 (a prompt and
its negative, as with classifier-free guidance) and 64x64 latents (512x512 images):

``torch_fp32``    diffusers' ``UNet2DConditionModel`` in PyTorch, float32, ``inference_mode``.
``ov_f32``        the same UNet exported to OpenVINO IR (``sdaccel.cpu.convert.convert_unet``, weights
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
                  ``sdaccel.toy.int8_unets.FLOAT_GROUP_VARIANTS``, added to the sensitive layers),
                  the recipe that held prompt adherence on the tiny trained models.
``full_int8_accuracy_control``, ``full_int8_sensitive_4`` (asked for by name; SD 1.5 only)
                  full INT8 with the layers that the SD 1.5-layout toy's accuracy control gave
                  back to float (SmoothQuant off, as its search ran), or the 4 costliest groups of
                  its sensitivity ranking, kept in float: the toy's recipes replayed at real size
                  (``sdaccel.toy.replayed_recipes``), read from ``--accuracy-control-json``
                  (default ``benchmarks/results/accuracy_control_31_tiny-shapes-sd15_xeon_amx.json``)
                  and ``benchmarks/results/sensitivity_tiny-shapes-sd15.json``. Their quality is
                  the toy's, in those files.

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

Lever ``stack``: the float levers stacked, per UNet step in the best float: static shapes; token
merging at ``--stack-ratio``; DeepCache at each of ``--deepcache-intervals``; and merging with
DeepCache (the merged UNet on full steps, DeepCache's shallow UNet merged alike between them:
``sdaccel.cpu.tome.convert_tome_deepcache``). Four UNets (the UNet, its shallow part, both merged;
weights stored fp16, traced at ``--latent``) are timed side by side, interleaved over
``--lever-rounds`` rounds, and each stack's step composed from them
(``sdaccel.tools.measure.speedups.compose_stack``; a DeepCache step averages ``(t_full + (N - 1) t_shallow) / N``).
``--stack-int8 VARIANT`` adds INT8 alone and with DeepCache: the UNet quantized by that variant's
recipe and DeepCache's shallow UNet quantized alike, timed beside the four (not merged: merging on
top of INT8 cost the trained toy its adherence). ``--deepcache-layer-cut`` adds DeepCache cut at
the last up block's last layer (``sdaccel.cpu.deepcache``'s ``cut="layer"``, the paper's default
branch): its shallow UNet, timed beside the others in float, which it stays in after the INT8 UNet
too (``sdaccel.cpu.deepcache.QUANTIZED_PARTS``). Its quality cost: ``python -m
sdaccel.toy.stack_quality checkpoints/tiny-shapes-sd15 --levers static tome deepcache`` (and
``--levers static int8 deepcache`` for the INT8 rows, with ``--deepcache-cut layer`` for the layer
cut's).

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

import json
import sys
from pathlib import Path

from bench_openvino_args import INT8, parse_args
from bench_openvino_levers import bench_deepcache, bench_lever, bench_stack, bench_tome, bench_vae_int8
from bench_openvino_quality import bench_quality
from bench_openvino_unet import bench_precision, bench_quant_memory, int8_floats, quantize_unet

from sdaccel.cpu.machine import describe_machine, machine_info
from sdaccel.cpu.quantize import ir_size_bytes
from sdaccel.cpu.random_unet import MODELS, export_ir, unet_config
from sdaccel.tools.measure.children import run_child, summarize_run
from sdaccel.tools.measure.exports import ir_parameters
from sdaccel.tools.measure.models import label, synthetic_calibration
from sdaccel.tools.measure.speedups import add_speedups, add_whole_image
from sdaccel.tools.measure.tables import results_table
from sdaccel.tools.measure.timing import time_openvino, time_torch
from sdaccel.tools.toys.random_checkpoints import BUILDERS, ensure_tiny


def resolve_model(model: str) -> str:
    """A ``--models`` entry as ``sdaccel.tools.measure`` takes it: the folder of a tiny checkpoint
    of ``sdaccel.tools.toys.random_checkpoints`` (built when missing), anything else as it is."""
    return str(ensure_tiny("build/checkpoints", model)) if model in BUILDERS else model


def bench_model(model: str, args, previous: dict | None = None) -> dict:
    """One model's run: the UNet exported, each variant of ``--variants`` timed, then each lever of
    ``--levers``, and the speed-ups and seconds per image composed. ``previous``: the model's
    entry of an earlier run (``--update`` adds to it)."""
    # 1. The work folder and the model's entry
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
    print(f"[{name}] {MODELS.get(model, 'checkpoint')} UNet, {weights} weights", flush=True)
    # 2. Export the UNet (or reuse it)
    if not export_unet(model, args, source, result):
        return result
    # 3. Synthetic calibration data, for the recipes that calibrate and the memory study
    calibration = work / "calibration"
    calibrated = [v for v in args.variants if v in INT8 and v != "int8_weights"]
    if calibrated or "quant_memory" in args.levers:
        synthetic_calibration(str(calibration), model, args.batch, args.latent, args.calib_samples)
    # 4. Each variant timed
    for variant in args.variants:
        time_variant(model, variant, args, work, spec, smooth_quant, result)
    # 5. The levers
    bench_levers(model, args, work, spec, result, source)
    # 6. The speed-ups, and seconds per image composed
    add_speedups(result)
    add_whole_image(result, args.steps_per_image)
    return result


def export_unet(model: str, args, source: Path, result: dict) -> bool:
    """Export the UNet with fp16 weights to ``source`` in a child (or, with ``--reuse``, reuse it)
    and record its size; whether it is there."""
    if args.reuse and source.is_file():
        result["export"] = {"ok": True, "reused": str(source.resolve()), "params": ir_parameters(source)}
    else:
        run = run_child(
            "export to OpenVINO IR (fp16 weights)",
            export_ir,
            model,
            str(source),
            limit_gb=args.memory_limit_gb,
            min_free_gb=args.min_free_gb,
        )
        result["export"] = summarize_run(run)
        if not run.ok:
            return False
    result["export"]["size_bytes"] = ir_size_bytes(source)
    return True


def time_variant(model: str, variant: str, args, work: Path, spec: dict, smooth_quant: bool, result: dict):
    """Time one variant of ``--variants`` in a child: PyTorch fp32; an INT8 variant quantized (or
    reused) and timed in each float precision of ``--int8-float``; or the fp16 IR in f32 / the
    plugin's default precision."""
    limit, free = args.memory_limit_gb, args.min_free_gb
    source = work / "unet_fp16.xml"
    if variant == "torch_fp32":
        run = run_child(
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
        params = result["export"].get("params")
        size = {"size_bytes": 4 * params} if params else {}
        result["variants"][variant] = summarize_run(run, size)
        return
    if variant in INT8:
        xml = work / f"unet_{variant}.xml"
        if not quantize_unet(
            model, variant, xml, source, work / "calibration", smooth_quant, args, work, result
        ):
            return
        for precision in int8_floats(model, args, work, spec, result):
            row = variant if precision == result["int8_float"]["chosen"] else f"{variant}@{precision}"
            run = run_child(
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
            result["variants"][row] = summarize_run(run, extra)
        return
    precision = "f32" if variant == "ov_f32" else None
    run = run_child(
        variant,
        time_openvino,
        str(source),
        spec,
        precision,
        args.iters,
        args.warmup,
        limit_gb=limit,
        min_free_gb=free,
    )
    result["variants"][variant] = summarize_run(run, {"size_bytes": ir_size_bytes(source)})


def bench_levers(model: str, args, work: Path, spec: dict, result: dict, source: Path) -> None:
    """Each lever of ``--levers``, in the order they have always run."""
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
    if "stack" in args.levers:
        result.setdefault("levers", {})["stack"] = bench_stack(model, args, work, spec, result, source)


def print_table(results: dict) -> str:
    table = results_table(results)
    print(table)
    return table


def main(argv=None) -> dict:
    args = parse_args(argv, __doc__)
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
    print("machine:", describe_machine(results["machine"]), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.quality:
        quality = results.setdefault("quality", {})
        quality[label(args.quality)] = quality.get(label(args.quality), {}) | bench_quality(args)
        out.write_text(json.dumps(results, indent=2, default=str))
    for model in args.models:
        name = label(model)
        entry = results["models"].get(name) or {"variants": {}, "quantization": {}, "export": {}}
        if args.variants or args.levers:
            entry = bench_model(resolve_model(model), args, entry)
        if args.choose_precision:
            work = Path(args.workdir) / name.replace("/", "--")
            work.mkdir(parents=True, exist_ok=True)
            entry["precision_choice"] = bench_precision(resolve_model(model), args, work)
        results["models"][name] = entry
        out.write_text(json.dumps(results, indent=2, default=str))  # partial results survive a crash
    results["table"] = print_table(results)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
