"""Measuring a jitted JAX program honestly: compile vs run time, FLOPs, utilisation and cost.

JAX dispatches work asynchronously and compiles on the first call, so a naive ``time.time()``
around a call measures neither the compile nor the run. The rules this module follows:

- **The first call compiles** (tracing, lowering to StableHLO, XLA optimisation); for SDXL on a
  TPU that is minutes. :func:`aot_compile` does it ahead of time with
  ``jax.jit(f).lower(*args).compile()`` and times lowering and compiling separately.
- **Steady state** is the median of several calls, each ended by ``jax.block_until_ready``
  (:func:`time_calls`); otherwise the clock stops when the work is *queued*, not done.
- **The persistent compilation cache** (:func:`enable_compilation_cache`) stores compiled
  executables on disk, keyed by the program, the devices and the compiler flags, so that the next
  *process* skips the compile (:func:`cache_probe` runs a fresh process to show it).
- **FLOPs** come from XLA's own ``compiled.cost_analysis()`` (:func:`xla_flops`), with two
  caveats: for a program split over devices it counts one device's share, and the body of a
  ``while`` loop (``fori_loop``, ``scan``) is counted once, not once per step. :func:`utilisation`
  compares the achieved FLOP/s with the chip's peak from :data:`PEAK_BF16_FLOPS`.
- **Cost** per image and per 1,000 images follows from throughput and an hourly price
  (:func:`cost_per_image`).
- **Throughput** over batch sizes and device counts (:func:`sweep`), skipping what the devices do
  not divide or what does not fit in memory, and saying so.
- **Resolution buckets** (:class:`Buckets`): every new input shape is a new program. Compile the
  few shapes you serve up front, so the first request at each does not wait for XLA.
- **Attention kernels** (:func:`time_attention`): XLA's, cuDNN's on GPUs, and the Pallas splash
  kernel on TPUs, on one attention problem.

    python -m sdaccel.bench probe --cache-dir /tmp/jax-cache                 # a small stand-in program
    python -m sdaccel.bench probe --cache-dir /tmp/jax-cache --model PATH \
        --batch 8 --height 1024 --width 1024 --steps 20                       # the pipeline's program
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

# ----------------------------------------------------------------------------------------------
# Chips
# ----------------------------------------------------------------------------------------------

#: Dense bf16 peak FLOP/s per device, by a piece of ``jax.Device.device_kind`` (matched
#: case-insensitively, longest first). Datasheet figures; edit or extend for your hardware.
#: A TPU v5e reports itself as "TPU v5 lite", a v6e as "TPU v6 lite".
PEAK_BF16_FLOPS: dict[str, float | None] = {
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v4": 275e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "H100": 989e12,
    "H200": 989e12,
    "cpu": None,  # no meaningful bf16 peak: utilisation is not reported on CPU
}


def peak_flops(device: jax.Device | None = None) -> float | None:
    """Peak bf16 FLOP/s of ``device`` (default: the first device), or ``None`` when unknown."""
    kind = (device or jax.devices()[0]).device_kind.lower()
    for name in sorted(PEAK_BF16_FLOPS, key=len, reverse=True):
        if name.lower() in kind:
            return PEAK_BF16_FLOPS[name]
    return None


def device_summary() -> dict:
    """Platform, device kind and count, process count, and the peak used for utilisation."""
    device = jax.devices()[0]
    return {
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
        "peak_bf16_flops_per_device": peak_flops(device),
    }


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


@dataclass
class Timing:
    """``first_s``: the first call (compile + run). ``run_s``: the median of ``runs_s``, the
    following calls. ``compile_s`` is their difference, the usual estimate of the compile cost."""

    first_s: float
    run_s: float
    runs_s: list[float] = field(default_factory=list)

    @property
    def compile_s(self) -> float:
        return max(self.first_s - self.run_s, 0.0)

    def as_dict(self) -> dict:
        return {**asdict(self), "compile_s": self.compile_s}


def block(x):
    """Wait for every array in ``x`` (any pytree) to be computed; return ``x``."""
    return jax.block_until_ready(x)


def time_calls(fn: Callable, *args, repeats: int = 5, **kwargs) -> Timing:
    """Call ``fn`` once (compiling it if it is a fresh ``jax.jit``), then ``repeats`` more times;
    each call waits for its result."""
    start = time.perf_counter()
    block(fn(*args, **kwargs))
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn(*args, **kwargs))
        runs.append(time.perf_counter() - start)
    return Timing(first, statistics.median(runs) if runs else first, runs)


@dataclass
class Compiled:
    """An ahead-of-time compiled executable and what it cost to make."""

    executable: Any
    lower_s: float
    compile_s: float
    flops: float | None  # per device, loop bodies once: see xla_flops

    def __call__(self, *args):
        return self.executable(*args)


def aot_compile(fn: Callable, *args, **jit_kwargs) -> Compiled:
    """``jax.jit(fn, **jit_kwargs).lower(*args).compile()``, timed in its two stages.

    ``fn`` may already be a ``jax.jit`` function (its own shardings are kept). ``args`` may be
    arrays or ``jax.ShapeDtypeStruct`` (with ``sharding=``): nothing runs, only shapes matter.
    The executable then accepts exactly those shapes, dtypes and shardings, and never recompiles.
    """
    jitted = fn if hasattr(fn, "lower") and not jit_kwargs else jax.jit(fn, **jit_kwargs)
    start = time.perf_counter()
    lowered = jitted.lower(*args)
    lowered_at = time.perf_counter()
    executable = lowered.compile()
    done = time.perf_counter()
    return Compiled(executable, lowered_at - start, done - lowered_at, xla_flops(executable))


def xla_flops(executable) -> float | None:
    """FLOPs of one call as XLA's cost model counts them, or ``None`` where the backend has no
    cost model. Per device for a partitioned program; a loop body counts once."""
    try:
        analysis = executable.cost_analysis()
    except NotImplementedError:
        return None
    if isinstance(analysis, list | tuple):  # older jax: one dict per program
        analysis = analysis[0] if analysis else {}
    flops = (analysis or {}).get("flops")
    return float(flops) if flops is not None and flops >= 0 else None


def utilisation(flops: float | None, seconds: float, peak: float | None, devices: int = 1) -> float | None:
    """Achieved / peak: ``flops`` done by ``devices`` devices together in ``seconds``, against
    ``devices * peak``. ``None`` when the FLOPs or the peak are unknown (CPU)."""
    if not flops or peak is None or seconds <= 0:
        return None
    return flops / seconds / (peak * devices)


def cost_per_image(images_per_s: float, price_per_hour: float) -> dict:
    """Dollars per image and per 1,000 images for a machine that costs ``price_per_hour`` (all
    its chips together) and makes ``images_per_s`` when kept busy."""
    per_image = price_per_hour / 3600.0 / images_per_s
    return {"per_image": per_image, "per_1000_images": 1000.0 * per_image, "price_per_hour": price_per_hour}


# ----------------------------------------------------------------------------------------------
# The persistent compilation cache
# ----------------------------------------------------------------------------------------------


def enable_compilation_cache(
    path: str | os.PathLike, min_compile_time_s: float = 0.0, min_entry_size_bytes: int = -1
):
    """Store every compiled executable under ``path`` and look there before compiling.

    JAX's defaults only store programs that took at least 1 s to compile; ``0`` stores all (so
    a small demo is cached too; for SDXL every program is far above any threshold).
    ``min_entry_size_bytes=-1`` disables the size floor. Call it before the first compile, or
    it is picked up on the next (the cache is re-initialised here).
    """
    from jax.experimental.compilation_cache import compilation_cache

    Path(path).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
    compilation_cache.reset_cache()


@dataclass
class CacheEvents:
    hits: int = 0
    misses: int = 0


@contextmanager
def count_cache_events():
    """Count persistent-cache hits and misses inside the ``with`` block (``jax.monitoring`` events)."""
    events = CacheEvents()

    def listener(event: str, **_):
        if event == "/jax/compilation_cache/cache_hits":
            events.hits += 1
        elif event == "/jax/compilation_cache/cache_misses":
            events.misses += 1

    jax.monitoring.register_event_listener(listener)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_listener(listener)


def probe_program(size: int = 256, depth: int = 8):
    """The small stand-in program of the probe: ``depth`` dense layers (each a separate op, so the
    compiler has some work) and a ``ShapeDtypeStruct`` to compile it for."""

    def fn(x):
        for i in range(depth):
            w = jnp.cos(jnp.arange(size * size, dtype=x.dtype).reshape(size, size) * (i + 1) / size**2)
            x = jnp.tanh(x @ w)
        return x.sum()

    return fn, jax.ShapeDtypeStruct((size, size), jnp.float32)


def cache_probe(
    cache_dir: str | os.PathLike, model: str | None = None, env: dict | None = None, **shape
) -> dict:
    """Start a fresh Python process that enables the cache at ``cache_dir``, compiles one program
    and reports, as a dict: ``process_s`` (the whole process, measured here), ``compile_s``,
    ``cache_hits``, ``cache_misses``. Run it twice: the second start reads the first's executable.

    ``model``: a pipeline checkpoint whose denoise-and-decode function to compile (``shape`` holds
    ``batch``, ``height``, ``width``, ``steps``, ``dtype``); ``None`` compiles :func:`probe_program`.
    """
    cmd = [sys.executable, "-m", "sdaccel.bench", "probe", "--cache-dir", str(cache_dir)]
    if model is not None:
        cmd += ["--model", str(model)]
    for key, value in shape.items():
        if value is not None:
            cmd += [f"--{key}", str(value)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"The probe process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "process_s": elapsed}


# ----------------------------------------------------------------------------------------------
# Sweeps and buckets
# ----------------------------------------------------------------------------------------------


def sweep(
    make_call: Callable[[Any, int], Callable[[], Any]],
    batch_sizes: Sequence[int],
    device_counts: Sequence[int],
    repeats: int = 3,
    progress: bool = True,
) -> list[dict]:
    """Throughput over batch sizes and device counts.

    ``make_call(mesh, batch)`` returns a no-argument function that makes ``batch`` images on
    ``mesh`` (a ``"data"`` mesh of the first ``n`` devices). Combinations whose batch the devices
    do not divide, or whose program runs out of device memory, are skipped and listed with
    ``skipped`` set (the reason). Each row holds ``devices``,
    ``batch``, ``compile_s``, ``run_s``, ``images_per_s`` and ``images_per_s_per_device``.
    """
    from sdaccel.sharding import make_mesh

    combos = [(n, b) for n in device_counts for b in batch_sizes]
    if progress:
        from tqdm.auto import tqdm

        combos = tqdm(combos, desc="sweep", unit="config")
    rows = []
    for n, batch in combos:
        if batch % n:
            rows.append(
                {"devices": n, "batch": batch, "skipped": f"{n} devices do not divide a batch of {batch}"}
            )
            continue
        try:
            call = make_call(make_mesh(n, devices=jax.devices()[:n]), batch)
            timing = time_calls(call, repeats=repeats)
        except jax.errors.JaxRuntimeError as err:  # the largest batches may not fit: note it, go on
            if "RESOURCE_EXHAUSTED" not in str(err):
                raise
            rows.append(
                {"devices": n, "batch": batch, "skipped": f"out of memory: {str(err).splitlines()[0][:200]}"}
            )
            continue
        rows.append(
            {
                "devices": n,
                "batch": batch,
                "compile_s": timing.compile_s,
                "run_s": timing.run_s,
                "images_per_s": batch / timing.run_s,
                "images_per_s_per_device": batch / timing.run_s / n,
            }
        )
    return rows


#: The (height, width) pairs SDXL was trained on around one megapixel (a subset of its aspect buckets).
SDXL_BUCKETS: tuple[tuple[int, int], ...] = (
    (1024, 1024),
    (1152, 896),
    (896, 1152),
    (1216, 832),
    (832, 1216),
    (1344, 768),
    (768, 1344),
)


def nearest_bucket(
    height: int, width: int, buckets: Iterable[tuple[int, int]] = SDXL_BUCKETS
) -> tuple[int, int]:
    """The bucket whose aspect ratio is closest to ``height / width`` (ties: the closer area)."""
    return min(buckets, key=lambda b: (abs(b[0] / b[1] - height / width), abs(b[0] * b[1] - height * width)))


class Buckets:
    """Executables compiled ahead of time for a few input shapes.

    ``compile_for(key)`` returns a :class:`Compiled` for one key (for example
    ``(batch, height, width)``). :meth:`warm` compiles a list of keys up front; calling with a
    key that was not warmed raises instead of silently compiling in the middle of serving.
    """

    def __init__(self, compile_for: Callable[[Any], Compiled]):
        self.compile_for = compile_for
        self.compiled: dict[Any, Compiled] = {}

    def warm(self, keys: Iterable, progress: bool = False) -> dict[Any, float]:
        """Compile every key not compiled yet; return ``{key: lower_s + compile_s}``."""
        keys = list(keys)
        if progress:
            from tqdm.auto import tqdm

            keys = tqdm(keys, desc="compile buckets", unit="shape")
        seconds = {}
        for key in keys:
            if key not in self.compiled:
                self.compiled[key] = self.compile_for(key)
            seconds[key] = self.compiled[key].lower_s + self.compiled[key].compile_s
        return seconds

    def __contains__(self, key) -> bool:
        return key in self.compiled

    def __getitem__(self, key) -> Compiled:
        if key not in self.compiled:
            raise KeyError(
                f"No executable for {key}; compiled: {sorted(self.compiled)}. Warm it with "
                "Buckets.warm([...]) first, or round the request to a bucket with nearest_bucket()."
            )
        return self.compiled[key]


# ----------------------------------------------------------------------------------------------
# Attention kernels
# ----------------------------------------------------------------------------------------------


def attention_implementations(platform: str | None = None) -> list[str | None]:
    """The choices of ``sdaccel.models.attention.set_implementation`` that exist on ``platform``:
    ``None`` (JAX picks) and ``"xla"`` everywhere, ``"cudnn"`` on NVIDIA GPUs."""
    platform = platform or jax.default_backend()
    return [None, "xla", "cudnn"] if platform == "gpu" else [None, "xla"]


def splash_attention(q_len: int, kv_len: int, heads: int, interpret: bool = False):
    """The Pallas TPU splash-attention kernel (``jax.experimental.pallas.ops.tpu.splash_attention``)
    for unmasked attention, as a function of (batch, len, heads, head_dim) q, k, v like ours.

    TPU only: the kernel is written for the TPU's vector and matrix units. It never builds the
    full (q_len, kv_len) score matrix in HBM, streaming blocks of K and V through VMEM instead;
    that matters for SDXL's 4096-token self-attention at 1024x1024. ``interpret=True`` runs the
    kernel through the Pallas interpreter (any backend, very slow): only for checking it.
    """
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    mask = splash.MultiHeadMask([splash.FullMask((q_len, kv_len)) for _ in range(heads)])
    kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1, interpret=interpret)

    def attend(q, k, v):
        q = q * (q.shape[-1] ** -0.5)  # the kernel does not scale the scores
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))  # (B, H, L, D)
        return jax.vmap(kernel)(q, k, v).transpose(0, 2, 1, 3)

    return attend


def time_attention(
    batch: int, q_len: int, kv_len: int, heads: int, head_dim: int, dtype=jnp.bfloat16, repeats: int = 5
) -> dict[str, dict]:
    """Time each attention implementation on one (batch, len, heads, head_dim) problem, and its
    largest difference from the first (JAX's default). Splash attention is included on TPU only,
    for lengths that its default 128-token blocks divide."""
    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], (batch, q_len, heads, head_dim), dtype)
    k, v = (jax.random.normal(kk, (batch, kv_len, heads, head_dim), dtype) for kk in keys[1:])
    candidates: dict[str, Callable] = {
        str(name): jax.jit(
            lambda q, k, v, name=name: jax.nn.dot_product_attention(q, k, v, implementation=name)
        )
        for name in attention_implementations()
    }
    if jax.default_backend() == "tpu" and q_len % 128 == 0 and kv_len % 128 == 0:  # its default blocks
        candidates["splash (Pallas)"] = jax.jit(splash_attention(q_len, kv_len, heads))
    reference = None
    out = {}
    for name, fn in candidates.items():
        timing = time_calls(fn, q, k, v, repeats=repeats)
        result = fn(q, k, v).astype(jnp.float32)
        reference = result if reference is None else reference
        out[name] = {**timing.as_dict(), "max_abs_diff": float(jnp.abs(result - reference).max())}
    return out


# ----------------------------------------------------------------------------------------------
# The probe process
# ----------------------------------------------------------------------------------------------


def _probe(args) -> dict:
    enable_compilation_cache(args.cache_dir)
    with count_cache_events() as events:
        if args.model is None:
            fn, spec = probe_program()
            compiled = aot_compile(fn, spec)
        else:
            from sdaccel.sharding import ShardedPipeline

            pipe = ShardedPipeline.from_pretrained(
                args.model, dtype=jnp.dtype(args.dtype), variant=args.variant, progress=False
            )
            compiled = pipe.warm(args.batch, args.height, args.width, args.steps)
    return {
        "lower_s": compiled.lower_s,
        "compile_s": compiled.compile_s,
        "cache_hits": events.hits,
        "cache_misses": events.misses,
        "flops": compiled.flops,
        **device_summary(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe", help="compile one program with the persistent cache on; print JSON")
    probe.add_argument("--cache-dir", required=True)
    probe.add_argument(
        "--model", default=None, help="a pipeline checkpoint; default: a small stand-in program"
    )
    probe.add_argument("--batch", type=int, default=1)
    probe.add_argument("--height", type=int, default=1024)
    probe.add_argument("--width", type=int, default=1024)
    probe.add_argument("--steps", type=int, default=20)
    probe.add_argument("--dtype", default="bfloat16")
    probe.add_argument("--variant", default=None)
    args = parser.parse_args(argv)
    print(json.dumps(_probe(args)))


if __name__ == "__main__":
    main()
