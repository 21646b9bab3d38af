"""The benchmark helpers (sdaccel.tpu.compilation) and the tuning tools above them (sdaccel.tpu.serving), on small
jitted functions and the tiny SDXL checkpoint (no assertion on how long anything takes)."""

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
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.tpu import compilation, serving
from sdaccel.tpu import sharding as sh
from sdaccel.tpu.sharded_pipeline import ShardedPipeline


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


def test_aot_compile_and_xla_flops():
    m, k, n = 32, 64, 48
    compiled = compilation.aot_compile(
        jnp.matmul, jax.ShapeDtypeStruct((m, k), jnp.float32), jax.ShapeDtypeStruct((k, n), jnp.float32)
    )
    assert compiled.flops == 2 * m * k * n
    out = compiled(jnp.ones((m, k)), jnp.ones((k, n)))
    assert out.shape == (m, n) and float(out[0, 0]) == k
    with pytest.raises(TypeError):  # an AOT executable takes exactly the shapes it was built for
        compiled(jnp.ones((m + 1, k)), jnp.ones((k, n)))


def test_xla_flops_caveats_per_device_and_loop_body_once():
    def step(x, w):
        return jnp.tanh(x @ w)

    def loop(x, w):
        return jax.lax.fori_loop(0, 10, lambda i, x: step(x, w), x)

    x, w = jax.ShapeDtypeStruct((64, 128), jnp.float32), jax.ShapeDtypeStruct((128, 128), jnp.float32)
    one = compilation.aot_compile(step, x, w).flops
    assert one == 2 * 64 * 128 * 128
    assert compilation.aot_compile(loop, x, w).flops < 2 * one  # ten steps, counted as one
    if jax.device_count() >= 4:
        mesh = sh.make_mesh(4)
        split = compilation.aot_compile(
            step, x, w, in_shardings=(NamedSharding(mesh, P("data")), NamedSharding(mesh, P()))
        )
        assert split.flops == one / 4  # one device's share


def test_utilisation_and_cost():
    assert compilation.utilisation(197e12, 1.0, 197e12) == 1.0
    assert compilation.utilisation(281e12, 2.33, 197e12, devices=1) == pytest.approx(0.612, abs=1e-3)
    assert (
        compilation.utilisation(1e12, 1.0, None) is None and compilation.utilisation(None, 1.0, 1e12) is None
    )
    cost = compilation.cost_per_image(images_per_s=1.0, price_per_hour=3.6)
    assert cost["per_image"] == pytest.approx(0.001) and cost["per_1000_images"] == pytest.approx(1.0)


def test_persistent_cache_is_hit_by_a_second_process(tmp_path):
    first = serving.cache_probe(tmp_path / "cache")
    second = serving.cache_probe(tmp_path / "cache")
    assert first["cache_misses"] >= 1 and first["cache_hits"] == 0
    assert second["cache_hits"] >= 1 and second["cache_misses"] == 0
    assert any((tmp_path / "cache").iterdir())
    assert second["flops"] == first["flops"] > 0


def test_sweep_skips_indivisible_batches():
    def make_call(mesh, batch):
        x = jax.device_put(jnp.ones((batch, 8)), sh.batch_sharding(mesh))
        f = jax.jit(lambda a: a * 2)
        return lambda: f(x)

    counts = [1, 2] if jax.device_count() >= 2 else [1]
    rows = serving.sweep(make_call, batch_sizes=[2, 3], device_counts=counts, repeats=1, progress=False)
    done = [r for r in rows if "skipped" not in r]
    assert {(r["devices"], r["batch"]) for r in done} == {(1, 2), (1, 3)} | (
        {(2, 2)} if 2 in counts else set()
    )
    assert all(r["images_per_s"] == pytest.approx(r["batch"] / r["run_s"]) for r in done)
    if 2 in counts:
        assert [r["batch"] for r in rows if "skipped" in r] == [3]


def test_sweep_notes_out_of_memory_and_reraises_other_errors():
    def make_call(mesh, batch):
        if batch > 2:
            raise jax.errors.JaxRuntimeError(
                "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9 GB"
            )
        return lambda: jnp.ones(batch)

    rows = serving.sweep(make_call, batch_sizes=[2, 4], device_counts=[1], repeats=1, progress=False)
    assert "run_s" in rows[0] and rows[1]["skipped"].startswith("out of memory")

    def broken(mesh, batch):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        serving.sweep(broken, batch_sizes=[1], device_counts=[1], repeats=1, progress=False)


def test_aot_cache_compiles_once_per_signature():
    cache = compilation.AOTCache(lambda x: x * 2)
    assert len(cache) == 0 and cache.compile_s == 0
    np.testing.assert_array_equal(np.asarray(cache(jnp.ones(3))), 2.0)
    spent = cache.compile_s
    assert len(cache) == 1 and spent > 0
    cache(jnp.zeros(3))  # same signature: no compile
    assert len(cache) == 1 and cache.compile_s == spent
    cache(jnp.ones(4))  # a new shape
    cache(jnp.ones(3, jnp.int32))  # a new dtype
    assert len(cache) == 3
    x = jnp.ones(4)
    compiled = cache.compile(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding))  # the same entry
    assert len(cache) == 3 and compiled.flops == 4
    cache.clear()
    assert len(cache) == 0


def test_nearest_bucket():
    assert serving.nearest_bucket(1000, 800) == (1152, 896)
    assert serving.nearest_bucket(512, 512) == (1024, 1024)
    assert serving.nearest_bucket(700, 1300) == (768, 1344)


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 devices")
def test_buckets_warm_the_pipelines_own_cache(tiny_sdxl):
    pipe = ShardedPipeline.from_pretrained(tiny_sdxl, sh.make_mesh(4), dtype=jnp.float32, progress=False)
    buckets = serving.Buckets(pipe, batch=4, steps=2, guidance_scale=5.0)
    with pytest.raises(ValueError, match="warm"):
        buckets.nearest(64, 64)
    seconds = buckets.warm([(64, 64), (48, 80)])
    assert set(seconds) == {(64, 64), (48, 80)} and all(s > 0 for s in seconds.values())
    assert len(pipe.cache) == 2 and (48, 80) in buckets and (80, 48) not in buckets
    assert buckets.nearest(50, 90) == (48, 80)
    result = pipe.generate(["a red circle"] * 4, None, 2, 5.0, 48, 80, 0)  # a warmed shape
    assert result.timings["compile_s"] == 0 and len(pipe.cache) == 2
    assert result.array.shape == (4, 48, 80, 3)


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
