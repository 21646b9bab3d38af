"""Seconds per SDXL UNet step on this machine: our JAX port (jit) vs diffusers in PyTorch, float32.

    python benchmarks/bench_jax_vs_torch.py                       # defaults: 32x32 latents, batch 2
    python benchmarks/bench_jax_vs_torch.py --latent 16 --repeats 2 --flops-size 0 --no-pipeline
    python benchmarks/bench_jax_vs_torch.py --pipeline-checkpoint /path/to/sdxl-base --pipeline-size 256

What is measured:

1. **One UNet step** of the *real* SDXL base architecture (``sdaccel/reference_configs/
   sdxl-base-1.0/unet.json``, 2.6 B parameters) with random weights (seeded; nothing is
   downloaded), float32, batch 2 (a prompt and its negative: one classifier-free-guidance step),
   ``--latent`` x ``--latent`` latents (default 32, i.e. 256x256 images, to fit a small CPU box):

   - ``jax``: ``UNet2DConditionModel`` of ``sdaccel.tpu.models.unet``, built abstractly and filled as
     Flax's default initialisers would (LeCun-normal kernels; see ``random_params``), the step
     jitted with the weights as an argument, compiled once ahead of time; the median of
     ``--repeats`` calls, each waited for.
   - ``torch``: diffusers' ``UNet2DConditionModel.from_config`` (PyTorch's default init),
     ``torch.inference_mode``, one warm-up call, then the median of ``--repeats`` calls.

   Each runs in its own spawned process, one after the other (``run_with_memory_limit``), so the
   two 10 GB models are never in memory together; the peak RSS of each is recorded. The weights
   differ (random either way), which does not change the work done.

2. **FLOPs per step** as XLA counts them (``cost_analysis()``), at the benchmarked size and at
   ``--flops-size`` latents (default 128: SDXL's native 1024x1024), from abstract inputs
   (``nnx.eval_shape`` and ``jax.ShapeDtypeStruct``: no weights are allocated). By default the
   count at 1024 comes from the *lowered* program (``jax.jit(f).lower(...).cost_analysis()``,
   before XLA's optimisations: compiling SDXL at 128x128 latents on a small CPU takes minutes);
   ``--flops-compile`` compiles it and reads the optimised program's count instead. The
   benchmarked size reports both, which shows how close the two counts are.

3. **Whole images** (``--pipeline-checkpoint``, default the tiny SDXL checkpoint that
   ``python -m sdaccel.tools.toys.random_checkpoints build/checkpoints`` builds): ``sdaccel.tpu.pipeline.JaxPipeline.generate``
   vs diffusers' ``StableDiffusionXLPipeline`` at ``--pipeline-size`` pixels and
   ``--pipeline-steps`` steps, seconds per image (median of ``--repeats``). On the tiny
   checkpoint this measures pipeline *overhead* (Python per step vs one compiled loop), not SDXL
   compute; point it at a real SDXL folder for real whole-image times (that needs ~14 GB per side).

Results: a table on stdout and JSON at ``--out`` (default ``build/bench/jax_vs_torch.json``).

Runtime with the defaults: about 10 minutes on an idle 2-core machine with 24 GB (a step at 32x32
latents is ~1 TFLOP, tens of seconds on two cores; each framework runs it 1 + ``--repeats``
times), and proportionally longer when other work shares the CPU. ``--latent 16`` or
``--latent 8`` run it in a few minutes. The JAX side also pays ``nnx.eval_shape`` of the 2.6 B
parameter model (see the report for its cost).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

from sdaccel.core.timing import time_calls

REPO = Path(__file__).resolve().parents[1]


def sdxl_unet_config() -> dict:
    path = resources.files("sdaccel").joinpath("reference_configs/sdxl-base-1.0/unet.json")
    return json.loads(path.read_text())


def example_inputs(batch: int, latent: int, seed: int = 0) -> dict:
    """Numpy inputs of one SDXL UNet call: NHWC latents, a timestep, 77 text tokens of 2048
    features (the two encoders concatenated), pooled text (1280) and the six size ids."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {
        "sample": rng.standard_normal((batch, latent, latent, 4), dtype=np.float32),
        "timestep": np.float32(999.0),
        "encoder_hidden_states": rng.standard_normal((batch, 77, 2048), dtype=np.float32),
        "text_embeds": rng.standard_normal((batch, 1280), dtype=np.float32),
        "time_ids": np.tile(np.float32([8 * latent, 8 * latent, 0, 0, 8 * latent, 8 * latent]), (batch, 1)),
    }


# ----------------------------------------------------------------------------------------------
# JAX (runs in a child process)
# ----------------------------------------------------------------------------------------------


def _unet_step_fn(graphdef):
    from flax import nnx

    def step(params, sample, timestep, encoder_hidden_states, text_embeds, time_ids):
        return nnx.merge(graphdef, params)(sample, timestep, encoder_hidden_states, text_embeds, time_ids)

    return step


def _abstract_inputs(batch: int, latent: int):
    import jax

    shapes = example_inputs(batch, latent)
    return [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in shapes.values()]


def random_params(config, seed: int = 0):
    """``(graphdef, params)`` of the UNet built abstractly, every parameter then filled as Flax's
    default initialisers would: kernels ~ N(0, 1/fan_in) (LeCun normal), biases 0, norm scales 1.

    The normal numbers come from one seeded pool of 4 M values, each parameter reading it from
    its own random offset (wrapping around): drawing 2.6 B fresh normals, or running nnx's
    initialisers in one enormous jitted program, takes minutes on a small CPU, and which random
    numbers the weights hold does not change the work a step does.
    """
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from sdaccel.tpu.models.unet import UNet2DConditionModel

    graphdef, state = nnx.split(nnx.eval_shape(lambda: UNet2DConditionModel(config, rngs=nnx.Rngs(0))))
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal(2**22, dtype=np.float32)
    for path, variable in nnx.to_flat_state(state):
        shape, leaf = variable.get_value().shape, str(path[-1])
        if leaf == "kernel":
            start, size = int(rng.integers(pool.size)), int(np.prod(shape))
            fan_in = int(np.prod(shape[:-1]))
            value = np.resize(pool, start + size)[start:].reshape(shape) * np.float32(fan_in**-0.5)
        else:
            value = (np.ones if leaf == "scale" else np.zeros)(shape, np.float32)
        variable.set_value(jnp.asarray(value))
    return graphdef, state


def jax_measurements(batch: int, latent: int, repeats: int, flops_size: int, flops_compile: bool) -> dict:
    """Fill the SDXL UNet with random weights, compile one step, time ``repeats`` calls; count
    the FLOPs of the lowered and the compiled step, and of the lowered step at ``flops_size``."""
    import jax
    import numpy as np
    from flax import nnx

    from sdaccel.tpu.aot import xla_flops
    from sdaccel.tpu.compilation import time_calls
    from sdaccel.tpu.models.unet import UNetConfig
    from sdaccel.tpu.models.weights import count_params

    config = UNetConfig.from_dict(sdxl_unet_config())
    start = time.perf_counter()
    graphdef, params = random_params(config)
    init_s = time.perf_counter() - start
    n_params, n_bytes = count_params(nnx.merge(graphdef, params))
    step = jax.jit(_unet_step_fn(graphdef))

    inputs = [jax.numpy.asarray(x) for x in example_inputs(batch, latent).values()]
    start = time.perf_counter()
    lowered = step.lower(params, *inputs)
    lower_s = time.perf_counter() - start
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start - lower_s
    timing = time_calls(compiled, params, *inputs, repeats=repeats)
    out = np.asarray(compiled(params, *inputs))
    result = {
        "params": n_params,
        "param_bytes": n_bytes,
        "init_s": init_s,
        "lower_s": lower_s,
        "compile_s": compile_s,
        "flops_lowered": float(lowered.cost_analysis()["flops"]),
        "flops_compiled": xla_flops(compiled),
        "step_s": timing.run_s,
        "steps_s": timing.runs_s,
        "output_finite": bool(np.isfinite(out).all()),
        "output_std": float(out.std()),
        "devices": [str(d) for d in jax.devices()],
    }
    if flops_size:
        # abstract weights and inputs: nothing of the 1024x1024 activations is allocated
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
        start = time.perf_counter()
        native = step.lower(abstract, *_abstract_inputs(batch, flops_size))
        result["native"] = {"latent": flops_size, "lower_s": time.perf_counter() - start}
        result["native"]["flops_lowered"] = float(native.cost_analysis()["flops"])
        if flops_compile:
            start = time.perf_counter()
            result["native"]["flops_compiled"] = xla_flops(native.compile())
            result["native"]["compile_s"] = time.perf_counter() - start
    return result


# ----------------------------------------------------------------------------------------------
# PyTorch (runs in a child process)
# ----------------------------------------------------------------------------------------------


def torch_unet_step(batch: int, latent: int, repeats: int) -> dict:
    """diffusers' SDXL UNet with random weights, float32, median of ``repeats`` calls."""
    import numpy as np
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    start = time.perf_counter()
    unet = UNet2DConditionModel.from_config(sdxl_unet_config()).eval()
    init_s = time.perf_counter() - start
    x = {k: torch.from_numpy(np.asarray(v)) for k, v in example_inputs(batch, latent).items()}
    sample = x["sample"].permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
    added = {"text_embeds": x["text_embeds"], "time_ids": x["time_ids"]}

    def call():
        return unet(sample, x["timestep"], x["encoder_hidden_states"], added_cond_kwargs=added).sample

    with torch.inference_mode():
        timing = time_calls(call, repeats=repeats, keep_results=True)  # the first call, then `repeats`
        out = timing.results[-1] if timing.results else call()
    return {
        "params": sum(p.numel() for p in unet.parameters()),
        "init_s": init_s,
        "first_s": timing.first_s,
        "step_s": timing.run_s,
        "steps_s": timing.runs_s,
        "threads": torch.get_num_threads(),
        "output_finite": bool(torch.isfinite(out).all()),
    }


# ----------------------------------------------------------------------------------------------
# Whole images (runs in a child process per framework)
# ----------------------------------------------------------------------------------------------


def jax_pipeline(checkpoint: str, size: int, steps: int, batch: int, repeats: int) -> dict:
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import JaxPipeline

    pipe = JaxPipeline.from_pretrained(checkpoint, dtype=jnp.float32, progress=False)
    prompts = ["a photo of an astronaut riding a horse"] * batch
    kwargs = dict(steps=steps, guidance_scale=5.0, height=size, width=size)
    first = pipe.generate(prompts, **kwargs)
    runs = [pipe.generate(prompts, **kwargs).timings["per_image_s"] for _ in range(repeats)]
    return {"compile_s": first.timings["compile_s"], "per_image_s": statistics.median(runs), "runs": runs}


def torch_pipeline(checkpoint: str, size: int, steps: int, batch: int, repeats: int) -> dict:
    import torch
    from diffusers import StableDiffusionXLPipeline

    pipe = StableDiffusionXLPipeline.from_pretrained(checkpoint, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    prompts = ["a photo of an astronaut riding a horse"] * batch

    def call():
        with torch.inference_mode():
            pipe(
                prompts,
                num_inference_steps=steps,
                guidance_scale=5.0,
                height=size,
                width=size,
                output_type="np",
            )

    call()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        runs.append((time.perf_counter() - start) / batch)
    return {"per_image_s": statistics.median(runs), "runs": runs}


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def run_child(name: str, fn, *args, limit_gb: float | None = None, timeout_s: float | None = None) -> dict:
    """Run ``fn(*args)`` in a fresh process; return its result with peak RSS, or the error."""
    from sdaccel.core.processes import run_with_memory_limit

    print(f"[{name}] running ...", flush=True)
    run = run_with_memory_limit(fn, *args, limit_gb=limit_gb, timeout_s=timeout_s)
    result = dict(run.result or {})
    result.update(ok=run.ok, error=run.error, wall_s=run.seconds, peak_rss_gb=run.peak_rss_gb)
    print(f"[{name}] {'ok' if run.ok else 'FAILED: ' + str(run.error)} in {run.seconds:.0f} s", flush=True)
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latent", type=int, default=32, help="latent height = width (image = 8x): default 32")
    p.add_argument("--batch", type=int, default=2, help="UNet batch (2 = one guidance step of one image)")
    p.add_argument("--repeats", type=int, default=2, help="timed calls (median) after the first")
    p.add_argument("--flops-size", type=int, default=128, help="also count FLOPs at these latents (0: skip)")
    p.add_argument(
        "--flops-compile", action="store_true", help="compile at --flops-size for the optimised count"
    )
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-pipeline", action="store_true", help="skip the whole-image comparison")
    p.add_argument("--pipeline-checkpoint", default=str(REPO / "build/checkpoints/tiny-sdxl"))
    p.add_argument(
        "--pipeline-size", type=int, default=64, help="image height = width of the whole-image run"
    )
    p.add_argument("--pipeline-steps", type=int, default=4)
    p.add_argument("--pipeline-batch", type=int, default=1)
    p.add_argument("--memory-limit-gb", type=float, default=None, help="kill a child above this RSS")
    p.add_argument("--out", type=Path, default=REPO / "build/bench/jax_vs_torch.json")
    return p


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    report = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        },
        "setting": {
            "model": "sdxl-base-1.0 UNet, random weights, float32",
            **vars(args),
            "out": str(args.out),
        },
    }
    limit = args.memory_limit_gb
    if not args.no_jax:
        report["jax"] = run_child(
            "jax unet step and FLOPs",
            jax_measurements,
            args.batch,
            args.latent,
            args.repeats,
            args.flops_size,
            args.flops_compile,
            limit_gb=limit,
        )
    if not args.no_torch:
        report["torch"] = run_child(
            "torch unet step", torch_unet_step, args.batch, args.latent, args.repeats, limit_gb=limit
        )
    if not args.no_pipeline:
        checkpoint = args.pipeline_checkpoint
        if checkpoint == str(REPO / "build/checkpoints/tiny-sdxl"):
            from sdaccel.tools.toys.random_checkpoints import ensure_tiny

            ensure_tiny(REPO / "build/checkpoints", "tiny-sdxl")
        shape = (checkpoint, args.pipeline_size, args.pipeline_steps, args.pipeline_batch, args.repeats)
        report["pipeline"] = {"checkpoint": checkpoint}
        if not args.no_jax:
            report["pipeline"]["jax"] = run_child("jax pipeline", jax_pipeline, *shape, limit_gb=limit)
        if not args.no_torch:
            report["pipeline"]["torch"] = run_child("torch pipeline", torch_pipeline, *shape, limit_gb=limit)

    summarize(report, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {args.out}")
    return report


def summarize(report: dict, args) -> None:
    """Add the ratios and FLOP rates to ``report["summary"]``, and print the table."""
    jax_r, torch_r = report.get("jax", {}), report.get("torch", {})
    summary = {}
    if jax_r.get("ok") and torch_r.get("ok"):
        summary["torch_over_jax_step"] = torch_r["step_s"] / jax_r["step_s"]
    flops = jax_r.get("flops_compiled") or jax_r.get("flops_lowered")
    if flops:
        summary["tflops_per_step"] = flops / 1e12
        for name, r in (("jax", jax_r), ("torch", torch_r)):
            if r.get("ok"):
                summary[f"{name}_gflops_per_s"] = flops / r["step_s"] / 1e9
    native = jax_r.get("native") or {}
    if native:
        summary["native_tflops_per_step"] = (native.get("flops_compiled") or native["flops_lowered"]) / 1e12
        summary["native_flops_source"] = (
            "compiled" if native.get("flops_compiled") else "lowered (pre-optimisation)"
        )
    pipe = report.get("pipeline", {})
    if pipe.get("jax", {}).get("ok") and pipe.get("torch", {}).get("ok"):
        summary["pipeline_torch_over_jax"] = pipe["torch"]["per_image_s"] / pipe["jax"]["per_image_s"]
    report["summary"] = summary

    img = 8 * args.latent
    print(
        f"\nSDXL UNet step, float32, batch {args.batch}, latents {args.latent}x{args.latent} ({img}x{img} images)"
    )
    print(
        f"{'':22s} {'step s':>9s} {'compile/first s':>16s} {'init s':>8s} {'peak RSS GB':>12s} {'GFLOP/s':>9s}"
    )
    for key, name, first in (("jax", "JAX (jit)", "compile_s"), ("torch", "PyTorch (diffusers)", "first_s")):
        r = report.get(key, {})
        if r.get("ok"):
            rate = summary.get(f"{key}_gflops_per_s", float("nan"))
            print(
                f"{name:22s} {r['step_s']:9.2f} {r[first]:16.1f} {r['init_s']:8.1f} {r['peak_rss_gb']:12.1f} {rate:9.1f}"
            )
        elif r:
            print(f"{name:22s} failed: {r.get('error')}")
    if "torch_over_jax_step" in summary:
        print(f"PyTorch / JAX step time: {summary['torch_over_jax_step']:.2f}x")
    if jax_r.get("ok"):
        compiled = jax_r.get("flops_compiled")
        print(
            f"FLOPs per step at {args.latent}x{args.latent}: {jax_r['flops_lowered'] / 1e12:.3f} T (lowered)"
            + (f", {compiled / 1e12:.3f} T (compiled)" if compiled else "")
        )
    if native:
        print(
            f"FLOPs per step at {args.flops_size}x{args.flops_size} latents ({8 * args.flops_size}px): "
            f"{summary['native_tflops_per_step']:.2f} T, {summary['native_flops_source']}"
        )
    if pipe:
        print(
            f"Whole image on {pipe['checkpoint']} ({args.pipeline_size}px, {args.pipeline_steps} steps, "
            f"batch {args.pipeline_batch}):"
        )
        for name in ("jax", "torch"):
            r = pipe.get(name, {})
            if r.get("ok"):
                extra = f" (compile {r['compile_s']:.1f} s, not included)" if "compile_s" in r else ""
                print(f"  {name:6s} {r['per_image_s']:.3f} s per image{extra}")
            elif r:
                print(f"  {name:6s} failed: {r.get('error')}")
        if "pipeline_torch_over_jax" in summary:
            print(f"  PyTorch / JAX: {summary['pipeline_torch_over_jax']:.2f}x")
    else:
        print("Whole-image time not measured (--no-pipeline): only the UNet step is.")


if __name__ == "__main__":
    main()
