"""Whole-image time, prompt to PIL image, of every CPU configuration beside PyTorch fp32, in one run.

    python benchmarks/bench_whole_image.py sd15 --reuse --out benchmarks/results/whole_image_sd15.json
    python benchmarks/bench_whole_image.py sd15 --quick          # a short self-check on a tiny model
    python benchmarks/bench_whole_image.py sd15 --rows torch_fp32_20 ov_float_20 --runs 3

The model is a *real architecture with random weights* (``sd15``: SD 1.5 at 512x512, built by
``bench_memory.build_random_checkpoint``): time depends on the shapes, not on the values. One
image (one prompt) per call. Each row is one configuration, loaded and run in its own child
process (``sdaccel.processes``), one after the other; in it, one untimed warm-up call, then
``--runs`` timed calls (:func:`sdaccel.whole_image.time_calls`); the row keeps the median:

====================== ============================================================================
row                    what runs
====================== ============================================================================
``torch_fp32_20``      diffusers' own pipeline in PyTorch f32, 20 steps, default guidance (CFG: the
                       UNet sees a batch of 2); the baseline of every ratio
``ov_float_20``        ``OVPipeline`` in the precision ``sdaccel.cpu.precision`` measures fastest
``ov_<variant>_20``    the same with the UNet quantized: ``int8_weights``, ``hybrid``, ``full_int8``
``lcm4_lora_int8``     4 steps, LCM scheduler, an LCM-LoRA-shaped adapter (random, rank 64, every
                       UNet layer LCM-LoRA adapts) fused at export, guidance off (UNet batch 1), the
                       fused f32 UNet quantized with ``--lcm-variant``; the export's VAE decoder
`` lcm4_lora_int8_taesd`` the same with a tiny autoencoder (TAESD layout, random) as decoder
``jax_fp32_20``        our JAX ``Pipeline`` on the CPU, f32, 20 steps Euler with CFG
``jax_lcm4_lora_taesd`` the same with LCM, the LoRA fused, TAESD, 4 steps, no CFG
====================== ============================================================================

Each timed call records its wall time and the CPU seconds of the row's process during it (every
thread: ``time.process_time``); where other work shares the cores, the wall time grows with it and
the CPU seconds much less, so the table gives the ratio to PyTorch fp32 in both.

Split: encode / denoise / decode where the front-end reports it (diffusers: timed around its
``encode_prompt`` and ``vae.decode``; OpenVINO: ``result.timings``; JAX: encode and the one
denoise-and-decode program). JAX's compile time (first call) is reported apart and excluded.

Artifacts (exports, INT8 UNets, the LoRA file, the tiny VAE) go to ``--workdir`` (default
``benchmarks/build/whole_image/<model>``, git-ignored); ``--reuse`` takes the export and INT8
UNets that ``bench_memory.py sd15`` left in ``build/bench/memory/sd15`` instead (the JSON names
what was reused and the command that made it).

TPU (``--tpu``): the FLOPs and the time floor at the v5e's bf16 peak of the 4-step SDXL program
(LCM: no CFG, one image at 1024x1024): the UNet's FLOPs per call from XLA's cost analysis recorded
in ``benchmarks/results/tpu_plan_*.json``, the VAE decode's from the cost analysis of its CPU
lowering (abstract weights; nothing is compiled).

Results: a markdown table on stdout and JSON at ``--out`` (written atomically after every row).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from pathlib import Path

from bench_memory import build_random_checkpoint
from bench_openvino import _run, _summary, machine_info

from sdaccel.distill_lcm import TARGET_MODULES
from sdaccel.whole_image import ROWS, format_table

PROMPT = "a photo of an astronaut riding a horse on mars"
QUANT_VARIANTS = ("int8_weights", "hybrid", "full_int8")
#: What ``--reuse`` takes, and the command that made it.
REUSE = {
    "sd15": {
        "root": "build/bench/memory/sd15",
        "command": "python benchmarks/bench_memory.py sd15 --calib-samples 2 --out benchmarks/results/memory_sd15.json",
    }
}
V5E_PEAK_BF16 = 197e12


# ----------------------------------------------------------------------------------------------
# Artifacts (each made in a child process)
# ----------------------------------------------------------------------------------------------


def make_lora(src: str, path: str, rank: int = 64, seed: int = 0) -> dict:
    """A random LoRA in the diffusers layout (``unet.<module>.lora_A/B.weight``) on every UNet
    module that LCM-LoRA adapts, rank ``rank``, alpha = rank. Small updates (B ~ 0.01)."""
    import numpy as np
    from safetensors.numpy import save_file

    from sdaccel.cpu.lora_export import checkpoint_targets

    rng = np.random.default_rng(seed)
    tensors = {}
    for module, shape in checkpoint_targets(src)["unet"].items():
        if not module.endswith(TARGET_MODULES):  # the layers an LCM-LoRA adapts
            continue
        out, fan_in = shape[0], shape[1]
        kernel = tuple(shape[2:])
        down = rng.standard_normal((rank, fan_in, *kernel)).astype(np.float32) / np.sqrt(
            fan_in * max(1, np.prod(kernel))
        )
        up = (rng.standard_normal((out, rank, *([1] * len(kernel)))) * 0.01).astype(np.float32)
        tensors[f"unet.{module}.lora_A.weight"] = down
        tensors[f"unet.{module}.lora_B.weight"] = up
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
    params = sum(t.size for t in tensors.values())
    return {"modules": len(tensors) // 2, "rank": rank, "parameters": int(params)}


def export(src: str, dst: str, lora: list | None = None) -> dict:
    from sdaccel.cpu.export import export_pipeline

    export_pipeline(src, dst, weight_dtype="fp32", progress=False, lora=[tuple(x) for x in lora or ()])
    return {}


def tiny_vae(src: str, folder: str) -> dict:
    """A random tiny autoencoder in TAESD's layout (64 channels, 1-3-3-3 / 3-3-3-1 blocks) with one
    level per level of ``src``'s VAE. Its ``config.json`` keeps the ``block_out_channels`` that
    ``save_random_tiny_vae`` writes, which the OpenVINO pipeline reads for the latent scale."""
    from sdaccel.checkpoint import read_config
    from sdaccel.models.taesd import save_random_tiny_vae

    vae = read_config(Path(src), "vae")
    levels = len(vae["block_out_channels"])
    save_random_tiny_vae(
        folder,
        latent_channels=vae.get("latent_channels", 4),
        num_encoder_blocks=(1, *[3] * (levels - 1)),
        num_decoder_blocks=(*[3] * (levels - 1), 1),
        encoder_block_out_channels=(64,) * levels,
        decoder_block_out_channels=(64,) * levels,
    )
    return {"levels": levels}


# ----------------------------------------------------------------------------------------------
# The rows (each runs in a child process)
# ----------------------------------------------------------------------------------------------


def torch_row(src: str, steps: int, guidance: float | None, size: int, runs: int, warmup_steps: int) -> dict:
    """diffusers' pipeline in f32; encode and decode timed around its own methods."""
    import time

    import torch
    from diffusers import DiffusionPipeline

    from sdaccel.checkpoint import read_json
    from sdaccel.whole_image import time_calls

    index = read_json(Path(src) / "model_index.json")
    skipped = {n: None for n in ("safety_checker", "feature_extractor", "image_encoder") if n in index}
    if index.get("_class_name") == "StableDiffusionPipeline":
        skipped["requires_safety_checker"] = False
    start = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(src, dtype=torch.float32, **skipped)
    load_s = time.perf_counter() - start
    pipe.set_progress_bar_config(disable=True)
    spans: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            tick = time.perf_counter()
            out = fn(*args, **kwargs)
            spans[name] = spans.get(name, 0.0) + time.perf_counter() - tick
            return out

        return wrapper

    pipe.encode_prompt = timed("encode_s", pipe.encode_prompt)
    pipe.vae.decode = timed("vae_decoder_s", pipe.vae.decode)
    kwargs = {"height": size, "width": size}
    if guidance is not None:
        kwargs["guidance_scale"] = guidance

    class Result:
        def __init__(self, image, timings):
            self.image, self.timings = image, timings

    def call(n=steps):
        spans.clear()
        tick = time.perf_counter()
        with torch.no_grad():
            image = pipe(
                PROMPT, num_inference_steps=n, generator=torch.Generator().manual_seed(0), **kwargs
            ).images[0]
        wall = time.perf_counter() - tick
        enc, dec = spans.get("encode_s", 0.0), spans.get("vae_decoder_s", 0.0)
        return Result(image, {"encode_s": enc, "vae_decoder_s": dec, "denoise_decode_s": wall - enc})

    times = time_calls(call, runs, warmup=lambda: call(warmup_steps))
    return {
        "timed": times,
        "load_s": load_s,
        "precision": {"unet": "f32", "vae_decoder": "f32", "text_encoder": "f32"},
        "guidance_scale": pipe.guidance_scale,
        "unet_batch": 2 if pipe.do_classifier_free_guidance else 1,
        "torch_threads": torch.get_num_threads(),
    }


def ov_row(
    folder: str,
    unet_xml: str | None,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    warmup_steps: int,
    scheduler: str | None = None,
    vae: str | None = None,
) -> dict:
    import time

    from sdaccel.cpu.pipeline import OVPipeline
    from sdaccel.cpu.precision import runtime_precisions
    from sdaccel.whole_image import time_calls

    start = time.perf_counter()
    pipe = OVPipeline.from_pretrained(folder, precision="auto", scheduler=scheduler, vae=vae)
    if unet_xml:
        pipe.replace_unet(Path(unet_xml))
    load_s = time.perf_counter() - start

    def call(n=steps):
        return pipe.generate(PROMPT, steps=n, guidance_scale=guidance, height=size, width=size, seed=0)

    times = time_calls(call, runs, warmup=lambda: call(warmup_steps))
    request_guided = (guidance if guidance is not None else pipe.defaults.guidance_scale) > 1
    return {
        "timed": times,
        "load_s": load_s,
        "precision": pipe.precisions,  # INFERENCE_PRECISION_HINT as the plugin reports it
        "unet_layers": runtime_precisions(pipe.unet),  # output precision of the heavy layers
        "unet_batch": 2 if request_guided and not pipe.guidance_embedded else 1,
        "scheduler": pipe.scheduler_class.__name__,
    }


def jax_row(
    src: str,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    scheduler: str | None = None,
    vae: str | None = None,
    lora: str | None = None,
) -> dict:
    import time

    import jax
    import jax.numpy as jnp

    from sdaccel.pipeline import Pipeline
    from sdaccel.whole_image import time_calls

    start = time.perf_counter()
    pipe = Pipeline.from_pretrained(src, dtype=jnp.float32, scheduler=scheduler, vae=vae, progress=False)
    if lora:
        pipe.fuse_lora([(lora, 1.0)])
    load_s = time.perf_counter() - start
    first = {}

    def call():
        return pipe.generate(PROMPT, steps=steps, guidance_scale=guidance, height=size, width=size, seed=0)

    def warmup():  # the first call compiles: its compile time is reported apart
        result = call()
        first.update(result.timings)

    times = time_calls(call, runs, warmup=warmup)
    return {
        "timed": times,
        "load_s": load_s,
        "compile_s": first.get("compile_s"),
        "precision": {"all": "f32"},
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
    }


def vae_decode_flops(height: int, width: int) -> dict:
    """XLA's cost analysis of SDXL's VAE decode of one image, from its CPU lowering with abstract
    weights (float32: SDXL's config says force_upcast), XLA attention. Nothing is compiled."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from sdaccel.tpu_plan import DEFAULT_CONFIG, abstract_pipeline

    pipe = abstract_pipeline(DEFAULT_CONFIG, jnp.bfloat16, "xla")
    graphdef, params = nnx.split(pipe.vae)
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    latents = jax.ShapeDtypeStruct((1, *pipe.latent_shape(height, width)), jnp.float32)

    def decode(params, z):
        return nnx.merge(graphdef, params).decode(z)

    lowered = jax.jit(decode).trace(params, latents).lower(lowering_platforms=("cpu",))
    return {"flops": float(lowered.cost_analysis()["flops"]), "config": str(DEFAULT_CONFIG)}


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args):
        from sdaccel.staging import replace_json

        self.args, self.replace_json = args, replace_json
        self.out = Path(args.out)
        self.results = {
            "machine": machine_info(),
            "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
            "settings": dict(vars(args)),
            "artifacts": {},
            "rows": {},
            "complete": False,
        }
        if args.resume and self.out.is_file():
            self.resume(json.loads(self.out.read_text()))

    def resume(self, previous: dict) -> None:
        """Keep the rows an earlier run of the same settings measured (``--resume``): a run stopped
        half-way goes on where it stopped, and its ratios stay against its own PyTorch row."""
        same = ("model", "size", "steps", "few_steps", "quick", "runs", "warmup_steps", "lcm_variant")
        changed = {k: (previous["settings"].get(k), self.args.__dict__[k]) for k in same}
        changed = {k: v for k, v in changed.items() if v[0] != v[1]}
        if changed:
            raise SystemExit(
                f"--resume: {self.out} was measured with other settings {changed} (before, now): "
                "pass another --out, or the same settings."
            )
        kept = {k: row for k, row in previous["rows"].items() if row.get("ok")}
        self.results["rows"] = kept
        self.results["artifacts"] = previous.get("artifacts", {})
        self.results["commands"] = [*previous.get("commands", [previous["command"]]), self.results["command"]]
        print(f"--resume: kept {sorted(kept)} from {self.out}")

    def save(self):
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.replace_json(self.out, self.results)

    def child(self, title, fn, *fn_args, limit_gb=None, **kwargs):
        run = _run(
            title,
            fn,
            *fn_args,
            limit_gb=limit_gb or self.args.memory_limit_gb,
            min_free_gb=self.args.min_free_gb,
            **kwargs,
        )
        return run

    def artifact(self, key, title, fn, *fn_args, path=None, reused_from=None, **kwargs):
        entry = {"path": str(path) if path else None}
        if reused_from is None and path is not None and _made(Path(path)):
            reused_from = "an earlier run of this script (same --workdir)"
        if reused_from:
            entry.update(reused=True, made_by=reused_from)
            self.results["artifacts"][key] = entry
            self.save()
            return True
        run = self.child(title, fn, *fn_args, **kwargs)
        entry.update(reused=False, **_summary(run))
        entry.pop("rss_timeline_gb", None)
        self.results["artifacts"][key] = entry
        self.save()
        return run.ok

    def row(self, key, title, fn, *fn_args, **extra):
        run = self.child(title, fn, *fn_args)
        entry = {"key": key, "title": title, **extra, **_summary(run), "finished": _now()}
        entry.pop("rss_timeline_gb", None)
        if run.ok:
            from sdaccel.whole_image import summarize

            base = self.results["rows"].get("torch_fp32_20", {}).get("median", {})
            entry["median"] = summarize(entry["timed"], base.get("image_s"), base.get("cpu_s"))
        self.results["rows"][key] = entry
        self.save()
        return run.ok


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _made(path: Path) -> bool:
    """Whether an artifact of an earlier run is there whole (every one is written atomically)."""
    if path.suffix == ".xml":
        return path.is_file() and path.with_suffix(".bin").is_file()
    if path.is_dir():
        return any(path.glob("*.json")) or any(path.glob("*.npz"))
    return path.is_file()


def prepare(bench: Bench, args) -> dict:
    """Every artifact the chosen rows need; returns their paths."""
    from sdaccel.cpu.export import MODEL_XML, is_complete

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = set(args.rows)
    paths = {}
    if args.quick:
        src = Path(args.quick_checkpoint)
        bench.results["artifacts"]["checkpoint"] = {
            "path": str(src),
            "reused": True,
            "made_by": "the repository",
        }
    else:
        src = Path(args.random_root) / f"random-{args.model}"
        made = (src / "model_index.json").is_file()
        bench.artifact(
            "checkpoint",
            f"build {args.model} with random weights",
            build_random_checkpoint,
            args.model,
            str(src),
            path=src,
            reused_from="benchmarks/bench_memory.py (build_random_checkpoint, seed 0)" if made else None,
        )
    paths["src"] = str(src)
    reuse = REUSE.get(args.model) if args.reuse and not args.quick else None
    f32 = Path(reuse["root"]) / "export-fp32" if reuse else work / "export-fp32"
    needs_ov = any(r.startswith(("ov_", "lcm4")) for r in rows)
    if needs_ov:
        ok_reuse = reuse and is_complete(f32)
        bench.artifact(
            "export_fp32",
            "export to OpenVINO IR (f32)",
            export,
            str(src),
            str(f32),
            path=f32,
            reused_from=reuse["command"] if ok_reuse else None,
        )
    paths["export"] = str(f32)
    calib = work / "calibration"
    for variant in QUANT_VARIANTS:
        if f"ov_{variant}_20" not in rows:
            continue
        xml = (Path(reuse["root"]) if reuse else work) / f"unet_{variant}.xml"
        if variant != "int8_weights" and not (reuse and xml.is_file()) and not _made(calib):
            _calibrate(bench, args, str(f32), calib, None, None)
        bench.artifact(
            f"unet_{variant}",
            f"quantize the UNet: {variant}",
            _quantize,
            str(f32 / "unet" / MODEL_XML),
            str(xml),
            variant,
            None if variant == "int8_weights" else str(calib),
            args.calib_samples,
            args.quant_memory_gb,
            path=xml,
            reused_from=reuse["command"] if reuse and xml.is_file() else None,
            limit_gb=args.quant_memory_gb + 4,
        )
        paths[f"unet_{variant}"] = str(xml)
    if rows & {"lcm4_lora_int8", "lcm4_lora_int8_taesd", "jax_lcm4_lora_taesd"}:
        lora = work / "lcm-lora-r64" / "pytorch_lora_weights.safetensors"
        bench.artifact(
            "lora", "random LCM-LoRA-shaped adapter, rank 64", make_lora, str(src), str(lora), path=lora
        )
        taesd = work / "taesd-random"
        bench.artifact(
            "tiny_vae", "random tiny autoencoder (TAESD layout)", tiny_vae, str(src), str(taesd), path=taesd
        )
        paths.update(lora=str(lora), taesd=str(taesd))
    if rows & {"lcm4_lora_int8", "lcm4_lora_int8_taesd"}:
        fused = work / "export-lcm-lora"
        bench.artifact(
            "export_lcm_lora",
            "export with the LoRA fused (f32)",
            export,
            str(src),
            str(fused),
            [[str(lora), 1.0]],
            path=fused,
        )
        variant = args.lcm_variant
        xml = work / f"unet_lcm_lora_{variant}.xml"
        lcm_calib = work / "calibration-lcm"
        if variant != "int8_weights":
            _calibrate(bench, args, str(fused), lcm_calib, "lcm", 1.0)
        bench.artifact(
            "unet_lcm_lora",
            f"quantize the fused UNet: {variant}",
            _quantize,
            str(fused / "unet" / MODEL_XML),
            str(xml),
            variant,
            None if variant == "int8_weights" else str(lcm_calib),
            args.calib_samples,
            args.quant_memory_gb,
            path=xml,
            limit_gb=args.quant_memory_gb + 4,
        )
        paths.update(export_lcm=str(fused), unet_lcm=str(xml))
    return paths


def _calibrate(bench, args, folder, out_dir, scheduler, guidance):
    bench.artifact(
        f"calibration_{Path(out_dir).name}",
        f"collect {args.calib_samples} calibration samples",
        calibrate_child,
        folder,
        str(out_dir),
        args.calib_samples,
        2,
        scheduler,
        guidance,
        path=out_dir,
    )


def calibrate_child(folder, out_dir, samples, steps, scheduler, guidance):
    import math

    from sdaccel.cpu import quantize
    from sdaccel.cpu.pipeline import OVPipeline

    pipe = OVPipeline.from_pretrained(folder, precision="f32", scheduler=scheduler)
    prompts = quantize.read_prompts()[: math.ceil(samples / steps)]
    # the inputs of the benchmarked call: its guidance (1.0: no CFG, UNet batch 1) and scheduler
    knobs = {} if guidance is None else {"guidance_scale": guidance}
    kept = quantize.collect_unet_inputs(
        pipe, prompts, steps=steps, num_samples=samples, out_dir=out_dir, progress=False, **knobs
    )
    return {"samples": len(kept)}


def _quantize(src_xml, dst_xml, variant, calibration, samples, max_memory_gb):
    from sdaccel.cpu.quantize import quantize_ir

    budget = None if variant == "int8_weights" else max_memory_gb
    return quantize_ir(src_xml, dst_xml, variant, calibration, samples, max_memory_gb=budget)


def measure(bench: Bench, args, paths: dict) -> None:
    from tqdm.auto import tqdm

    size, runs, wsteps = args.size, args.runs, args.warmup_steps
    steps, few = args.steps, args.few_steps
    plan = []
    for key in args.rows:
        if key == "torch_fp32_20":
            plan.append(
                (
                    key,
                    f"PyTorch fp32, {steps} steps, CFG",
                    torch_row,
                    (paths["src"], steps, None, size, runs, wsteps),
                )
            )
        elif key == "ov_float_20":
            plan.append(
                (
                    key,
                    f"OpenVINO best float, {steps} steps",
                    ov_row,
                    (paths["export"], None, steps, None, size, runs, wsteps),
                )
            )
        elif key.startswith("ov_") and key.endswith("_20"):
            variant = key[3:-3]
            xml = paths.get(f"unet_{variant}")
            plan.append(
                (
                    key,
                    f"OpenVINO {variant} UNet, {steps} steps",
                    ov_row,
                    (paths["export"], xml, steps, None, size, runs, wsteps),
                )
            )
        elif key.startswith("lcm4_lora_int8"):
            vae = paths["taesd"] if key.endswith("taesd") else None
            title = f"{few} steps LCM + LoRA fused + {args.lcm_variant} UNet" + (" + TAESD" if vae else "")
            plan.append(
                (
                    key,
                    title,
                    ov_row,
                    (paths["export_lcm"], paths["unet_lcm"], few, 1.0, size, runs, few, "lcm", vae),
                )
            )
        elif key == "jax_fp32_20":
            plan.append(
                (
                    key,
                    f"JAX fp32 on CPU, {steps} steps Euler, CFG",
                    jax_row,
                    (paths["src"], steps, None, size, runs, "euler"),
                )
            )
        elif key == "jax_lcm4_lora_taesd":
            plan.append(
                (
                    key,
                    f"JAX fp32 on CPU, {few} steps LCM + LoRA fused + TAESD",
                    jax_row,
                    (paths["src"], few, 1.0, size, runs, "lcm", paths["taesd"], paths["lora"]),
                )
            )
    plan = [p for p in plan if p[0] not in bench.results["rows"]]  # --resume: measured already
    for key, title, fn, fn_args in tqdm(plan, desc="rows", unit="row"):
        bench.row(key, title, fn, *fn_args)


def tpu_section(bench: Bench, args) -> None:
    from sdaccel.whole_image import tpu_floor, unet_row_flops

    files = sorted(glob.glob(str(Path(args.tpu_plans) / "tpu_plan_*.json")))
    unet = unet_row_flops(files)
    run = bench.child(
        "VAE decode FLOPs (CPU lowering, abstract weights)", vae_decode_flops, unet["height"], unet["width"]
    )
    decode = run.result["flops"] if run.ok else None
    floor = tpu_floor(unet["flops"], args.tpu_steps, False, decode, V5E_PEAK_BF16)
    bench.results["tpu"] = {
        "program": f"SDXL, {args.tpu_steps} steps LCM, no CFG, batch 1, {unet['height']}x{unet['width']}, bf16 UNet, f32 VAE",
        "unet_flops_per_call": unet,
        "decode": {"flops": decode, **({"error": run.error} if not run.ok else {})},
        "text_encoders": "not counted (CLIP-L + bigG on 77 tokens: about 0.13 TFLOP, 2 x parameters x tokens)",
        **floor,
        "derivation": (
            "UNet: flops.unet_call of every row of the tpu_plan JSONs (XLA cost analysis of one UNet call "
            "lowered for CPU with XLA attention) divided by its latents (global_batch x 2 with CFG); "
            "decode: XLA cost analysis of the VAE decode of one latent, lowered for CPU; "
            "floor = (steps x UNet + decode) / 197 TFLOP/s."
        ),
    }
    bench.save()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", choices=["sd15"], help="the real architecture, random weights")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS, help="the rows, in order")
    parser.add_argument("--runs", type=int, default=2, help="timed calls per row, after one warm-up call")
    parser.add_argument(
        "--warmup-steps", type=int, default=2, help="steps of the warm-up call (OpenVINO, PyTorch)"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--few-steps", type=int, default=4)
    parser.add_argument("--size", type=int, default=None, help="image side (default: the model's, 512)")
    parser.add_argument(
        "--lcm-variant", default="int8_weights", choices=QUANT_VARIANTS, help="INT8 recipe of the fused UNet"
    )
    parser.add_argument(
        "--calib-samples", type=int, default=2, help="calibration samples (hybrid, full INT8)"
    )
    parser.add_argument("--quant-memory-gb", type=float, default=8.0, help="max_memory_gb of quantize_ir")
    parser.add_argument("--memory-limit-gb", type=float, default=18.0, help="watchdog of each child")
    parser.add_argument("--min-free-gb", type=float, default=0.0)
    parser.add_argument(
        "--reuse", action="store_true", help=f"reuse what bench_memory.py left in {REUSE['sd15']['root']}"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows --out already holds (same settings); run the rest",
    )
    parser.add_argument("--quick", action="store_true", help="a short self-check on a tiny checkpoint")
    parser.add_argument("--quick-checkpoint", default="checkpoints/tiny-shapes-sd15")
    parser.add_argument(
        "--tpu", action="store_true", help="add the TPU FLOPs and floor of the 4-step SDXL program"
    )
    parser.add_argument("--tpu-steps", type=int, default=4, help="steps of the TPU program")
    parser.add_argument("--tpu-plans", default="benchmarks/results", help="folder of the tpu_plan_*.json")
    parser.add_argument("--random-root", default="build/checkpoints")
    parser.add_argument(
        "--workdir", default=None, help="default benchmarks/build/whole_image/<model>[-quick]"
    )
    parser.add_argument(
        "--out", default=None, help="JSON (default benchmarks/build/whole_image_<model>[-quick].json)"
    )
    args = parser.parse_args(argv)
    for flag in ("runs", "warmup_steps", "steps", "few_steps", "calib_samples"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    tag = args.model + ("-quick" if args.quick else "")
    if args.quick:
        args.steps, args.few_steps, args.warmup_steps = min(args.steps, 3), min(args.few_steps, 2), 1
        if args.size is None:
            args.size = 32
    args.size = args.size or 512
    args.workdir = args.workdir or f"benchmarks/build/whole_image/{tag}"
    args.out = args.out or f"benchmarks/build/whole_image_{tag}.json"
    if args.quick and args.reuse:
        parser.error("--quick builds its own small artifacts: leave out --reuse")
    return args


def main(argv=None) -> dict:
    from sdaccel.staging import check_writable

    args = parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the JAX rows run on this CPU; children inherit it
    check_writable(Path(args.out).parent)
    bench = Bench(args)
    bench.save()
    paths = prepare(bench, args)
    if args.tpu:  # first: it takes a minute, the rows take hours
        tpu_section(bench, args)
    measure(bench, args, paths)
    rows = bench.results["rows"]
    bench.results["missing_rows"] = [k for k in ROWS if not rows.get(k, {}).get("ok")]
    bench.results["complete"] = not bench.results["missing_rows"]
    bench.results["table"] = format_table(bench.results)
    bench.save()
    print(bench.results["table"])
    md = Path(args.out).with_suffix(".md")
    tmp = md.with_name(md.name + ".partial")
    tmp.write_text(
        f"# Whole-image time\n\nMade with `{bench.results['command']}`.\n\n{bench.results['table']}\n"
    )
    os.replace(tmp, md)
    print(f"wrote {args.out} and {md}")
    return bench.results


if __name__ == "__main__":
    main(sys.argv[1:])
