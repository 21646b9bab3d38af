"""The measurement helpers (sdaccel.tpu.compilation): peaks, the JAX timer, utilisation and cost, the
persistent compilation cache seen from fresh processes, and attention timing, on small jitted
functions (no assertion on how long anything takes)."""

from __future__ import annotations

from types import SimpleNamespace

import jax

try:
    jax.config.update("jax_num_cpu_devices", 8)
except RuntimeError:  # backends already started by an earlier test module
    pass

import jax.numpy as jnp
import numpy as np
import pytest

from sdaccel.core import timing as core_timing
from sdaccel.tpu import compilation


@pytest.mark.parametrize(
    "kind, peak",
    [
        ("TPU v5 lite", 197e12),
        ("TPU v4", 275e12),
        ("TPU v6 lite", 918e12),
        ("NVIDIA H200", 989e12),
        ("cpu", None),
        ("Mystery chip", None),
    ],
)
def test_peak_flops_by_device_kind(kind, peak):
    assert compilation.peak_flops(SimpleNamespace(device_kind=kind)) == peak


def test_time_calls_counts_and_blocks():
    calls = []

    def fn(x):
        calls.append(1)
        return x + 1

    timing = compilation.time_calls(jax.jit(fn), jnp.ones(3), repeats=4)
    assert len(timing.runs_s) == 4 and timing.run_s == np.median(timing.runs_s)
    assert len(calls) == 1  # traced once: the later calls reuse the compiled program
    assert timing.compile_s >= 0 and set(timing.as_dict()) >= {"first_s", "run_s", "compile_s"}
    assert isinstance(timing, core_timing.Timing) and len(timing.cpu_s) == 4  # the one timer of the package


def test_time_calls_waits_for_the_device(monkeypatch):
    """Each call of the timer ends with ``jax.block_until_ready`` on its result (JAX dispatches
    asynchronously: without it the clock stops when the work is queued)."""
    waited = []
    monkeypatch.setattr(compilation, "block", lambda x: waited.append(x) or x)
    compilation.time_calls(lambda x: x * 2, 3, repeats=2)
    assert waited == [6, 6, 6]


def test_utilisation():
    assert compilation.utilisation(197e12, 1.0, 197e12) == 1.0
    assert compilation.utilisation(281e12, 2.33, 197e12, devices=1) == pytest.approx(0.612, abs=1e-3)
    assert (
        compilation.utilisation(1e12, 1.0, None) is None and compilation.utilisation(None, 1.0, 1e12) is None
    )


def test_persistent_cache_is_hit_by_a_second_process(tmp_path):
    first = compilation.cache_probe(tmp_path / "cache")
    second = compilation.cache_probe(tmp_path / "cache")
    assert first["cache_misses"] >= 1 and first["cache_hits"] == 0
    assert second["cache_hits"] >= 1 and second["cache_misses"] == 0
    assert any((tmp_path / "cache").iterdir())
    assert second["flops"] == first["flops"] > 0


def test_attention_timing_runs_the_models_kernels():
    assert compilation.attention_implementations("cpu") == ["xla"]
    assert compilation.attention_implementations("tpu") == ["xla", "splash"]
    assert compilation.attention_implementations("gpu") == ["xla", "cudnn"]
    timings = compilation.time_attention(1, 32, 16, 2, 8, dtype=jnp.float32, repeats=1)
    assert set(timings) == {"xla"} and timings["xla"]["max_abs_diff"] == 0  # no splash kernel off TPU
    # the TPU kernel, run through the Pallas interpreter, against XLA on the same problem
    both = compilation.time_attention(
        1, 128, 128, 2, 16, dtype=jnp.float32, repeats=1, implementations=["xla", "splash"], interpret=True
    )
    assert list(both) == ["xla", "splash"] and both["splash"]["max_abs_diff"] < 1e-5
