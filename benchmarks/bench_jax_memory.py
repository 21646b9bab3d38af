"""Peak host memory of the JAX track on the CPU, before and after the fixes of #31 (item 5): loading
SDXL into the Flax NNX port, and one SDXL step, each way in a child process of its own.

    python benchmarks/bench_jax_memory.py                          # real SDXL (random fp16 weights): load, 512x512 step
    python benchmarks/bench_jax_memory.py --parts load             # the loader only (~3 minutes)
    python benchmarks/bench_jax_memory.py --checkpoint build/checkpoints/tiny-sdxl --size 64 --name tiny-sdxl

The checkpoint is a diffusers folder, or ``sdxl``: the real SDXL base architecture (2.6 B-parameter
UNet, both text encoders, the VAE) with random weights in ``*.fp16.safetensors`` files, as the hub
holds them, built once into ``--random-root`` (``sdaccel.tools.toys.random_checkpoints.build_random_checkpoint``;
~7 GB of disk, ~11 GB of memory while it is written). Memory does not depend on the weights' values.
It is loaded as notebook 01 does: ``JaxPipeline.from_pretrained(folder, dtype=bfloat16, variant="fp16")``.

The two ways (``--ways``):

- ``before``: the loader and the compile as they were: :func:`legacy_load_weights` (the previous
  ``sdaccel.tpu.models.weights.load_weights``, kept here verbatim) put in place of the package's, and
  XLA's default compile options on the CPU (``sdaccel.tpu.aot.CPU_COMPILER_OPTIONS`` emptied);
- ``after``: the package as it is.

The parts (``--parts``), each way in its own child (``sdaccel.core.processes.run_with_memory_limit``):

- ``load``: load the whole pipeline; the child reports the parameters (and so their bf16 bytes:
  2 per parameter), the bytes actually placed (SDXL's VAE stays float32: ``force_upcast``), its
  anonymous RSS once JAX is up and before loading (the runtime's own), and at the end;
- ``step``: load, compile the denoise-and-decode program for one image, ``--steps`` step(s) at
  ``--size`` x ``--size`` with classifier-free guidance (the UNet runs on a batch of 2), then run it
  (``generate``): XLA's plan for the program (``memory_analysis``: its temporaries, beside the
  weights it takes as arguments) is written to a side file before it runs, so a child stopped by
  the watchdog still reports it.

Measures: the peak *anonymous* RSS (``RssAnon + RssShmem``, polled every ``--poll-s`` seconds by the
parent: heap, placed weights, activations; what the kernel cannot drop) and the peak RSS
(``VmHWM``, exact: it also counts the pages of the memory-mapped safetensors that the process
touched), each as a ratio to the bf16 bytes of the weights. ``--limit-gb`` is a watchdog on the
anonymous RSS: a child above it is stopped (the machine is shared) and reported as such.

Results: a table (Markdown) and JSON in ``--out-dir`` (default ``benchmarks/results``):
``jax_memory_<name>.md`` and ``.json``, rewritten after each child.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WAYS = ("before", "after")
PARTS = ("load", "step")
MODEL_MODULES = ("unet", "clip", "vae", "taesd")  # the modules that import load_weights by name
PROMPT = "a photo of an astronaut riding a horse on mars"


# ----------------------------------------------------------------------------------------------
# "before": the loader as it was (sdaccel.tpu.models.weights before #31 item 5), verbatim
# ----------------------------------------------------------------------------------------------


def legacy_load_weights(
    model, reader, dtype=None, candidates=None, ignore_unused=(), sharding=None, progress=None
):
    """The previous ``load_weights``: each tensor cast with ``astype`` (which keeps a transposed
    view's strides) and placed with ``jnp.asarray`` (a second copy), the mapped file's pages left
    in the resident set until the reader is closed."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graphdef, state = nnx.split(model)
    flat = nnx.to_flat_state(state)
    used: set[str] = set()
    items = list(flat)
    for path, variable in items:
        if not isinstance(variable, nnx.Param):
            continue
        key, array = _legacy_read_tensor(reader, path, tuple(variable.get_value().shape), candidates, dtype)
        placed = jax.device_put(array, sharding(path)) if sharding else jnp.asarray(array)
        variable.set_value(placed)
        used.add(key)
    patterns = [re.compile(p) for p in ignore_unused]
    unused = [k for k in reader.keys() if k not in used and not any(p.search(k) for p in patterns)]
    if unused:
        warnings.warn(f"{len(unused)} tensors were not used by the model", stacklevel=2)
    return nnx.merge(graphdef, state)


def _legacy_read_tensor(reader, path, expected, candidates, dtype):
    import ml_dtypes
    import numpy as np

    from sdaccel.core.checkpoint import CheckpointError, torch_key
    from sdaccel.tpu.models.weights import to_jax_layout

    ours = torch_key(path)
    tries = candidates(ours) if candidates else [ours]
    key = next((k for k in tries if k in reader), None)
    if key is None:
        raise CheckpointError(f"Tensor {ours!r} (tried {tries}) is missing from the checkpoint")
    array = to_jax_layout(str(path[-1]), reader.get(key))
    if tuple(array.shape) != expected:
        raise CheckpointError(f"Tensor {key!r} has shape {tuple(array.shape)}, expected {expected}")
    target = dtype if (dtype is not None and np.issubdtype(array.dtype, np.floating)) else array.dtype
    if array.dtype == ml_dtypes.bfloat16 or target != array.dtype:
        array = array.astype(target)
    return key, array


def use_way(way: str) -> None:
    """Put the ``before`` loader and compile options in place in this (child) process."""
    if way == "after":
        return
    import importlib

    from sdaccel.tpu import aot

    for name in MODEL_MODULES:
        module = importlib.import_module(f"sdaccel.tpu.models.{name}")
        module.load_weights = legacy_load_weights
    aot.CPU_COMPILER_OPTIONS = {}


# ----------------------------------------------------------------------------------------------
# The children
# ----------------------------------------------------------------------------------------------


def _anon_bytes() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return sum(int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssShmem"))


def _runtime_up() -> int:
    """Start JAX's CPU client (as any first array does) and return the anonymous RSS then."""
    import jax.numpy as jnp

    jnp.zeros(8).block_until_ready()
    return _anon_bytes()


def _load(folder: str, dtype: str, variant: str | None):
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import JaxPipeline

    return JaxPipeline.from_pretrained(folder, dtype=jnp.dtype(dtype), variant=variant, progress=False)


def _weights(pipe) -> dict:
    """Parameters of every component, their bf16 bytes (2 per parameter) and the bytes placed."""
    from sdaccel.tpu.models.weights import count_params

    per = {name: count_params(model) for name, model in pipe.components().items()}
    return {
        "params": {name: n for name, (n, _) in per.items()},
        "params_total": sum(n for n, _ in per.values()),
        "bf16_bytes": 2 * sum(n for n, _ in per.values()),
        "placed_bytes": sum(b for _, b in per.values()),
        "dtypes": {k: str(v) for k, v in pipe.dtypes.items()},
    }


def load_child(folder: str, way: str, dtype: str, variant: str | None) -> dict:
    use_way(way)
    runtime = _runtime_up()
    start = time.perf_counter()
    pipe = _load(folder, dtype, variant)
    seconds = time.perf_counter() - start
    return {
        **_weights(pipe),
        "runtime_anon_bytes": runtime,
        "end_anon_bytes": _anon_bytes(),
        "load_s": seconds,
    }


def step_child(
    folder: str, way: str, dtype: str, variant: str | None, size: int, steps: int, side: str
) -> dict:
    import jax
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import image_keys, initial_noise

    use_way(way)
    runtime = _runtime_up()
    pipe = _load(folder, dtype, variant)
    info = {**_weights(pipe), "runtime_anon_bytes": runtime, "loaded_anon_bytes": _anon_bytes()}
    # 1. Compile the program generate() runs, for these inputs, and note XLA's plan for it
    request = pipe.check_inputs(PROMPT, None, steps, None, size, size)
    cond = pipe.conditioning(request.prompts, request.negative_prompts, request.guidance_scale, size, size)
    indices = jnp.arange(request.batch)
    if pipe.scheduler.stochastic:
        cond = dataclasses.replace(cond, noise_keys=image_keys(request.seed, indices))
    latents = initial_noise(request.seed, indices, pipe.latent_shape(size, size))
    state = pipe.scheduler.set_timesteps(request.steps)
    guidance = jnp.float32(request.guidance_scale)
    compiled = pipe._denoise.compile(pipe.params, state, cond, latents, guidance)
    plan = compiled.executable.memory_analysis()
    info |= {
        "guidance_scale": request.guidance_scale,
        "compile_s": compiled.lower_s + compiled.compile_s,
        "xla_temp_bytes": plan.temp_size_in_bytes,
        "xla_argument_bytes": plan.argument_size_in_bytes,
        "compiler_options": pipe._denoise.compiler_options,
        "compiled_anon_bytes": _anon_bytes(),
    }
    Path(side).write_text(json.dumps(info))
    # 2. Run it, as notebook 01 does
    out = pipe.generate(PROMPT, steps=steps, height=size, width=size, seed=request.seed)
    jax.block_until_ready(out.array)
    info |= {
        "run_s": out.timings["run_s"],
        "compiled_again": len(pipe._denoise) != 1,
        "image": list(out.array.shape[1:3]),
    }
    return info


def build_child(folder: str) -> dict:
    from sdaccel.tools.toys.random_checkpoints import build_random_checkpoint

    return build_random_checkpoint("sdxl", folder, weight_dtype="fp16", variants={"fp16": "fp16"})


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


def run(label: str, fn, *args, limit_gb: float, poll_s: float) -> dict:
    from sdaccel.core.processes import run_with_memory_limit

    print(f"  {label} ...", end="", flush=True)
    child = run_with_memory_limit(fn, *args, limit_gb=limit_gb, poll_s=poll_s)
    print(
        f" {child.seconds:.0f} s, peak anonymous RSS {child.peak_anon_gb:.2f} GiB, peak RSS "
        f"{child.peak_rss_gb:.2f} GiB, {'ok' if child.ok else child.error}",
        flush=True,
    )
    entry = {
        "ok": child.ok,
        "peak_anon_bytes": child.peak_anon_bytes,
        "peak_rss_bytes": child.peak_rss_bytes,
        "wall_s": round(child.seconds, 1),
    }
    if child.error:
        entry["error"] = child.error
    if isinstance(child.result, dict):
        entry.update(child.result)
    return entry


def resolve(args) -> tuple[Path, str]:
    if args.checkpoint != "sdxl":
        return Path(args.checkpoint), args.name or Path(args.checkpoint).name
    folder = Path(args.random_root) / "random-sdxl-fp16"
    if not (folder / "model_index.json").is_file():
        entry = run(f"build {folder}", build_child, str(folder), limit_gb=args.build_limit_gb, poll_s=0.5)
        if not entry["ok"]:
            raise SystemExit(f"could not build {folder}: {entry.get('error')}")
    return folder, args.name or "sdxl"


def machine() -> dict:
    import jax
    import psutil

    from sdaccel.core.env import cpu_model

    return {
        "cpu": cpu_model(),
        "logical_cores": psutil.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "jax": jax.__version__,
        "python": platform.python_version(),
        "load_avg_at_start": [round(x, 1) for x in os.getloadavg()],
    }


def ratio(entry: dict, key: str, bf16: int | None) -> str:
    value = entry.get(key)
    if not value or not bf16:
        return "-"
    return f"{value / 2**30:.2f} GiB ({value / bf16:.2f}x)"


def format_table(results: dict) -> str:
    gib = 2**30
    runs, settings = results["runs"], results["settings"]
    bf16 = next((e["bf16_bytes"] for e in runs.values() if e.get("bf16_bytes")), None)
    ckpt, host = results["checkpoint"], results["machine"]

    def gb(value) -> str:
        return "-" if value is None else f"{value / gib:.2f}"

    def peak(value) -> str:
        return "-" if not value else f"{value / gib:.2f} GiB" + (f" ({value / bf16:.2f}x)" if bf16 else "")

    lines = [
        f"# JAX track, host memory on the CPU: {ckpt['name']}",
        "",
        f"Checkpoint `{ckpt['path']}` ({ckpt['disk_bytes'] / gib:.2f} GiB on disk), loaded with "
        f"dtype {settings['dtype']}, variant {settings['variant']}"
        + (f": {bf16 // 2:,} parameters, **{bf16 / gib:.2f} GiB in bf16**" if bf16 else "")
        + f". Machine: {host['cpu']}, {host['logical_cores']} cores, {host['memory_gib']} GiB, "
        f"jax {host['jax']} (load average {host['load_avg_at_start'][0]} at the start: shared).",
        "",
        "| part | way | peak anonymous RSS (x bf16) | peak RSS, VmHWM (x bf16) | JAX runtime GiB "
        "| weights placed GiB | seconds | XLA temporaries GiB | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, e in runs.items():
        part, way = key.split("_", 1)
        seconds = e.get("load_s") if part == "load" else e.get("run_s")
        status = "ok" if e["ok"] else e.get("error", "failed")[:90]
        lines.append(
            f"| {part} | {way} | {peak(e.get('peak_anon_bytes'))} | {peak(e.get('peak_rss_bytes'))} "
            f"| {gb(e.get('runtime_anon_bytes'))} | {gb(e.get('placed_bytes'))} "
            f"| {'-' if seconds is None else f'{seconds:.0f}'} | {gb(e.get('xla_temp_bytes'))} | {status} |"
        )
    lines += [
        "",
        "Peak anonymous RSS: `RssAnon + RssShmem` of the child, polled every "
        f"{settings['poll_s']} s (heap, placed weights, activations: what the kernel cannot drop). "
        "Peak RSS: `VmHWM`, exact, which also counts the pages of the memory-mapped safetensors the "
        "child touched. JAX runtime: the anonymous RSS once JAX is up, before loading. 'seconds': "
        f"the load (load), or the run without compiling (step). The step: one {settings['size']}x"
        f"{settings['size']} image, {settings['steps']} step(s) with classifier-free guidance (UNet "
        "batch 2) and the VAE decode; its peak includes loading. XLA temporaries: the compiled "
        "program's (`memory_analysis`), beside the weights it takes as arguments. A child above "
        f"{settings['limit_gb']} GiB of anonymous RSS is stopped (the machine is shared).",
        "",
        f"`{results['command']}`",
    ]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint", default="sdxl", help="'sdxl' (real architecture, random weights) or a folder"
    )
    parser.add_argument(
        "--name", default=None, help="label of the results (default: sdxl or the folder's name)"
    )
    parser.add_argument("--random-root", default="build/checkpoints", help="where 'sdxl' is built")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--variant", default="fp16", help="weight files to read ('' for the default ones)")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    parser.add_argument("--size", type=int, default=512, help="image height and width of the step")
    parser.add_argument("--steps", type=int, default=1, help="denoising steps of the step part")
    parser.add_argument("--limit-gb", type=float, default=17.0, help="watchdog on each child's anonymous RSS")
    parser.add_argument("--build-limit-gb", type=float, default=16.0, help="watchdog of building 'sdxl'")
    parser.add_argument("--poll-s", type=float, default=0.01, help="how often the parent reads the RSS")
    parser.add_argument("--out-dir", default=str(REPO / "benchmarks" / "results"))
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    from sdaccel.core.staging import disk_bytes, replace_json

    args = parse_args(argv)
    folder, name = resolve(args)
    variant = args.variant or None
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"jax_memory_{name}.json", out_dir / f"jax_memory_{name}.md"
    side = Path(args.out_dir) / f".jax_memory_{name}.step.json"
    results = {
        "command": "python benchmarks/bench_jax_memory.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "settings": {**vars(args), "variant": variant},
        "checkpoint": {"name": name, "path": str(folder), "disk_bytes": disk_bytes(folder)},
        "runs": {},
    }
    for part in args.parts:
        for way in args.ways:
            if part == "load":
                entry = run(f"load, {way}", load_child, str(folder), way, args.dtype, variant,
                            limit_gb=args.limit_gb, poll_s=args.poll_s)  # fmt: skip
            else:
                side.unlink(missing_ok=True)
                entry = run(
                    f"{args.size}x{args.size} step, {way}", step_child, str(folder), way, args.dtype, variant,
                    args.size, args.steps, str(side), limit_gb=args.limit_gb, poll_s=args.poll_s,
                )  # fmt: skip
                if side.is_file():  # what the child noted before it ran (kept when it was stopped)
                    entry = {**json.loads(side.read_text()), **entry}
                    side.unlink()
            results["runs"][f"{part}_{way}"] = entry
            replace_json(json_path, results)
            md_path.write_text(format_table(results) + "\n")
    print(format_table(results))
    print(f"wrote {md_path} and {json_path}")
    return results


if __name__ == "__main__":
    main()
