"""Running a benchmark's pieces in child processes: each waits for enough free memory and runs
watched (:func:`run_child`), its record summarized for the results (:func:`summarize_run`);
:func:`wait_for_memory`, :func:`free_gb`; and two children of their own: an INT8 VAE decoder
(:func:`quantize_vae_child`) and a pipeline folder's precision by measurement
(:func:`choose_precision_child`)."""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import psutil

from sdaccel.core.processes import ChildRun, run_with_memory_limit
from sdaccel.cpu.precision import choose_precision
from sdaccel.cpu.quantize_vae import quantize_vae_decoder


def free_gb() -> float:
    return psutil.virtual_memory().available / 2**30


def run_child(
    label: str, fn, *args, limit_gb: float | None, min_free_gb: float, wait_s: float = 900, **kwargs
):
    """One child-process job. It waits up to ``wait_s`` for ``min_free_gb`` of available memory
    (the machine may be shared), and is skipped if that never comes."""
    deadline = time.monotonic() + wait_s
    while (free := free_gb()) < min_free_gb and time.monotonic() < deadline:
        time.sleep(10)
    if free < min_free_gb:
        print(f"  {label}: skipped, {free:.1f} GiB available < {min_free_gb} GiB", flush=True)
        return ChildRun(error=f"skipped: {free:.1f} GiB available < {min_free_gb} GiB")
    print(f"  {label} ...", end="", flush=True)
    load = os.getloadavg()[0]
    run = run_with_memory_limit(fn, *args, limit_gb=limit_gb, **kwargs)
    run.load = (load, os.getloadavg()[0])  # kept in the JSON (load_avg), not printed
    status = "ok" if run.ok else run.error.splitlines()[0][:200]
    print(
        f" {run.seconds:.0f} s, peak RSS {run.peak_rss_gb:.1f} GiB (anonymous {run.peak_anon_gb:.1f}), {status}",
        flush=True,
    )
    return run


def summarize_run(run, extra: dict | None = None) -> dict:
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


def wait_for_memory(min_free_gb: float, label: str, wait_s: float = 900) -> None:
    deadline = time.monotonic() + wait_s
    while free_gb() < min_free_gb and time.monotonic() < deadline:
        time.sleep(10)
    if free_gb() < min_free_gb:
        print(
            f"  {label}: only {free_gb():.1f} GiB available (wanted {min_free_gb}); going ahead", flush=True
        )


def quantize_vae_child(src: str, dst: str, variant: str, latents_npy: str | None, subset: int) -> dict:
    latents = None if latents_npy is None else np.load(latents_npy)
    return quantize_vae_decoder(src, dst, variant, latents, subset)


def choose_precision_child(folder: str, candidates: list[str], iters: int, warmup: int) -> dict:
    """``choose_precision`` on an export folder, measured afresh (the cache is not read)."""
    choice = choose_precision(folder, candidates=candidates, iters=iters, warmup=warmup, cache=False)
    return {"choice": choice.to_json(), "table": choice.table()}
