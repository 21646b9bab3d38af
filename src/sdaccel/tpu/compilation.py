"""Measuring a jitted JAX program honestly: compile vs run time, FLOPs, utilisation and cost, and
the persistent compilation cache.

JAX dispatches work asynchronously and compiles on the first call, so a naive ``time.time()``
around a call measures neither the compile nor the run. The rules this module follows:

- **The first call compiles** (tracing, lowering to StableHLO, XLA optimisation); for SDXL on a
  TPU that is minutes. :func:`sdaccel.tpu.aot.aot_compile` does it ahead of time and times
  lowering and compiling separately; :class:`sdaccel.tpu.aot.AOTCache` keeps one such executable
  per input signature (the one in-memory compile cache of the JAX pipelines).
- **Steady state** is the median of several calls, each ended by ``jax.block_until_ready``
  (:func:`time_calls`, over :func:`sdaccel.core.timing.time_calls`); otherwise the clock stops
  when the work is *queued*, not done.
- **The persistent compilation cache** (:func:`enable_compilation_cache`) stores compiled
  executables on disk, keyed by the program, the devices and the compiler flags, so that the next
  *process* skips the compile. JAX writes each entry in place (no temporary file and rename) and
  never replaces one: an entry cut short by a killed process or a full disk would be read, warned
  about and compiled again by every later process; :func:`enable_compilation_cache` removes such
  entries first (:func:`drop_unreadable_entries`), so the next compile stores them anew. Several
  processes may share one cache folder at once. :func:`cache_probe` runs a fresh process to show it:

    python -m sdaccel.tpu.compilation probe --cache-dir /tmp/jax-cache                 # a small stand-in program
    python -m sdaccel.tpu.compilation probe --cache-dir /tmp/jax-cache --model PATH \\
        --batch 8 --height 1024 --width 1024 --steps 20                            # the pipeline's program

- **FLOPs** come from XLA's own ``compiled.cost_analysis()`` (:func:`sdaccel.tpu.aot.xla_flops`),
  with two caveats: for a program split over devices it counts one device's share, and the body
  of a ``while`` loop (``fori_loop``, ``scan``) is counted once, not once per step.
  :func:`utilisation` compares the achieved FLOP/s with the chip's peak from
  :data:`PEAK_BF16_FLOPS`.
- **Cost** per image and per 1,000 images follows from throughput and an hourly price
  (:func:`sdaccel.core.timing.cost_per_image`, framework-free, so the CPU track prices its images too).
- **Attention kernels** (:func:`time_attention`): XLA's, cuDNN's on GPUs, and the Pallas splash
  kernel on TPUs (``sdaccel.tpu.models.attention``), on one attention problem.

Sweeps over batch sizes and devices and resolution buckets drive the sharded pipeline, in
:mod:`sdaccel.tpu.serving`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental.compilation_cache import compilation_cache

from sdaccel.core import timing as core_timing
from sdaccel.core.staging import replace_json
from sdaccel.tpu.aot import aot_compile
from sdaccel.tpu.models.attention import AttentionImpl, attention

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


def block(x):
    """Wait for every array in ``x`` (any pytree) to be computed; return ``x``."""
    return jax.block_until_ready(x)


def time_calls(fn: Callable, *args, repeats: int = 5, **kwargs) -> core_timing.Timing:
    """Call ``fn`` once (compiling it if it is a fresh ``jax.jit``), then ``repeats`` more times;
    each call waits for its result (:func:`sdaccel.core.timing.time_calls` with ``jax.block_until_ready``).
    Notebook 03 writes this loop out in a cell; ``tests/course/test_lesson_03.py`` holds the two equal."""
    return core_timing.time_calls(fn, *args, repeats=repeats, wait=block, **kwargs)


def utilisation(flops: float | None, seconds: float, peak: float | None, devices: int = 1) -> float | None:
    """Achieved / peak: ``flops`` done by ``devices`` devices together in ``seconds``, against
    ``devices * peak``. ``None`` when the FLOPs or the peak are unknown (CPU)."""
    if not flops or peak is None or seconds <= 0:
        return None
    return flops / seconds / (peak * devices)


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
    it is picked up on the next (the cache is re-initialised here). Entries that cannot be read
    back are removed first (:func:`drop_unreadable_entries`).
    """
    Path(path).mkdir(parents=True, exist_ok=True)
    drop_unreadable_entries(path)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
    compilation_cache.reset_cache()


#: The file, in a cache folder, that lists the entries found whole (name: size and time), so
#: that :func:`drop_unreadable_entries` reads each entry once.
CHECKED_RECORD = ".sdaccel-checked.json"

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def drop_unreadable_entries(path: str | os.PathLike, settle_s: float = 60.0) -> list[Path]:
    """Remove the entries of JAX's persistent compilation cache in ``path`` that cannot be read
    back, say so on stderr, and return them.

    JAX writes an entry in place and never replaces one: a process killed or out of disk while
    writing leaves a cut entry, which every later process reads, warns about ("Error reading
    persistent compilation cache entry"), compiles again and cannot store. Once removed, the next
    compile stores it anew. An entry is checked by decompressing it, once: the entries found whole
    are listed in the folder's :data:`CHECKED_RECORD`. Entries written in the last ``settle_s``
    seconds are left alone, for another process may still be writing them."""
    folder = Path(path)
    # 1. What was found whole before, and is still the same file
    record_path = folder / CHECKED_RECORD
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {}
    record = record if isinstance(record, dict) else {}
    checked, removed = {}, []
    # 2. Every other entry that nobody is writing: decompress it
    for entry in sorted(folder.glob("*-cache")):
        try:
            stat = entry.stat()
        except FileNotFoundError:  # evicted by another process meanwhile
            continue
        stamp = [stat.st_size, stat.st_mtime_ns]
        if record.get(entry.name) == stamp:
            checked[entry.name] = stamp
        elif time.time() - stat.st_mtime < settle_s:
            continue
        elif _readable(entry.read_bytes()):
            checked[entry.name] = stamp
        else:
            try:
                entry.unlink(missing_ok=True)
            except OSError:  # a folder this process may only read: JAX warns and compiles, as before
                continue
            removed.append(entry)
    # 3. Keep the record (where the folder is writable); say what went
    if checked != record:
        try:
            replace_json(record_path, checked)
        except OSError:
            pass
    if removed:
        noun = "entry" if len(removed) == 1 else "entries"
        print(
            f"Removed {len(removed)} unreadable {noun} of JAX's compilation cache in {folder} (a compile "
            "was stopped while writing them): their programs are compiled again and stored anew.",
            file=sys.stderr,
        )
    return removed


def _readable(data: bytes) -> bool:
    """Whether a cache entry decompresses whole: zstandard where JAX uses it, else zlib."""
    if data.startswith(_ZSTD_MAGIC):
        try:
            from compression import zstd  # Python 3.14

            decompress = zstd.decompress
        except ImportError:
            try:
                import zstandard
            except ImportError:
                return True  # nothing here reads it: JAX itself is the judge
            decompress = zstandard.ZstdDecompressor().decompress
        try:
            decompress(data)
            return True
        except Exception:
            return False
    stream = zlib.decompressobj()
    try:
        left = data
        while left:
            stream.decompress(left, 1 << 24)
            left = stream.unconsumed_tail
        stream.flush()
    except zlib.error:
        return False
    return stream.eof and not stream.unused_data


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
    ``batch``, ``height``, ``width``, ``steps``, ``dtype``, ``variant``; left out: the checkpoint's
    defaults); ``None`` compiles :func:`probe_program`.
    """
    cmd = [sys.executable, "-m", "sdaccel.tpu.compilation", "probe", "--cache-dir", str(cache_dir)]
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


def _probe(args) -> dict:
    """What one probe process does: enable the cache, compile one program, count the cache events."""
    enable_compilation_cache(args.cache_dir)
    with count_cache_events() as events:
        if args.model is None:
            fn, spec = probe_program()
            compiled = aot_compile(fn, spec)
        else:
            # the pipeline sits above this module: imported only by a probe of a checkpoint
            from sdaccel.tpu.sharded_pipeline import ShardedPipeline

            pipe = ShardedPipeline.from_pretrained(
                args.model, dtype=jnp.dtype(args.dtype), variant=args.variant, progress=False
            )
            compiled = pipe.warm(args.batch, args.height, args.width, args.steps, args.guidance)
    return {
        "lower_s": compiled.lower_s,
        "compile_s": compiled.compile_s,
        "cache_hits": events.hits,
        "cache_misses": events.misses,
        "flops": compiled.flops,
        **device_summary(),
    }


# ----------------------------------------------------------------------------------------------
# Attention kernels
# ----------------------------------------------------------------------------------------------


def attention_implementations(platform: str | None = None) -> list[str]:
    """The choices of ``sdaccel.tpu.models.attention.use`` that run natively on ``platform``: ``"xla"``
    everywhere, ``"cudnn"`` on NVIDIA GPUs, the Pallas ``"splash"`` kernel on TPUs."""
    platform = platform or jax.default_backend()
    return ["xla", *({"gpu": ["cudnn"], "tpu": ["splash"]}.get(platform, []))]


def time_attention(
    batch: int,
    q_len: int,
    kv_len: int,
    heads: int,
    head_dim: int,
    dtype=jnp.bfloat16,
    repeats: int = 5,
    implementations: list[str] | None = None,
    interpret: bool = False,
) -> dict[str, dict]:
    """Time each attention implementation (:func:`attention_implementations`, or those named) on one
    (batch, len, heads, head_dim) problem with the models' own ``attention`` function, and its
    largest difference from the first. Splash attention runs its kernel only for lengths that its
    128-token blocks divide (XLA otherwise); ``interpret=True`` runs the kernel in the Pallas
    interpreter (any backend, very slow): only for checking it."""
    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], (batch, q_len, heads, head_dim), dtype)
    k, v = (jax.random.normal(kk, (batch, kv_len, heads, head_dim), dtype) for kk in keys[1:])
    reference = None
    out = {}
    for name in implementations or attention_implementations():
        impl = AttentionImpl(name, interpret=interpret)
        fn = jax.jit(lambda q, k, v, impl=impl: attention(q, k, v, impl=impl))
        timing = time_calls(fn, q, k, v, repeats=repeats)
        result = fn(q, k, v).astype(jnp.float32)
        reference = result if reference is None else reference
        out[name] = {**timing.as_dict(), "max_abs_diff": float(jnp.abs(result - reference).max())}
    return out


# ----------------------------------------------------------------------------------------------
# Command line: the probe's process
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m sdaccel.tpu.compilation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe", help="compile one program with the persistent cache on; print JSON")
    probe.add_argument("--cache-dir", required=True)
    probe.add_argument(
        "--model", default=None, help="a pipeline checkpoint; default: a small stand-in program"
    )
    probe.add_argument("--batch", type=int, default=1)
    probe.add_argument("--height", type=int, default=None, help="default: the checkpoint's")
    probe.add_argument("--width", type=int, default=None, help="default: the checkpoint's")
    probe.add_argument("--steps", type=int, default=None, help="default: the checkpoint's")
    probe.add_argument("--guidance", type=float, default=None, help="default: the checkpoint's")
    probe.add_argument("--dtype", default="bfloat16")
    probe.add_argument("--variant", default=None)
    args = parser.parse_args(argv)
    print(json.dumps(_probe(args)))


if __name__ == "__main__":
    main()
