"""The benchmark helpers on small jitted functions (no assertion on how long anything takes)."""

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

from sdaccel import bench
from sdaccel import sharding as sh


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
    assert bench.peak_flops(SimpleNamespace(device_kind=kind)) == peak


def test_time_calls_counts_and_blocks():
    calls = []

    def fn(x):
        calls.append(1)
        return x + 1

    timing = bench.time_calls(jax.jit(fn), jnp.ones(3), repeats=4)
    assert len(timing.runs_s) == 4 and timing.run_s == np.median(timing.runs_s)
    assert len(calls) == 1  # traced once: the later calls reuse the compiled program
    assert timing.compile_s >= 0 and set(timing.as_dict()) >= {"first_s", "run_s", "compile_s"}


def test_aot_compile_and_xla_flops():
    m, k, n = 32, 64, 48
    compiled = bench.aot_compile(
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
    one = bench.aot_compile(step, x, w).flops
    assert one == 2 * 64 * 128 * 128
    assert bench.aot_compile(loop, x, w).flops < 2 * one  # ten steps, counted as one
    if jax.device_count() >= 4:
        mesh = sh.make_mesh(4)
        split = bench.aot_compile(
            step, x, w, in_shardings=(NamedSharding(mesh, P("data")), NamedSharding(mesh, P()))
        )
        assert split.flops == one / 4  # one device's share


def test_utilisation_and_cost():
    assert bench.utilisation(197e12, 1.0, 197e12) == 1.0
    assert bench.utilisation(281e12, 2.33, 197e12, devices=1) == pytest.approx(0.612, abs=1e-3)
    assert bench.utilisation(1e12, 1.0, None) is None and bench.utilisation(None, 1.0, 1e12) is None
    cost = bench.cost_per_image(images_per_s=1.0, price_per_hour=3.6)
    assert cost["per_image"] == pytest.approx(0.001) and cost["per_1000_images"] == pytest.approx(1.0)


def test_persistent_cache_is_hit_by_a_second_process(tmp_path):
    first = bench.cache_probe(tmp_path / "cache")
    second = bench.cache_probe(tmp_path / "cache")
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
    rows = bench.sweep(make_call, batch_sizes=[2, 3], device_counts=counts, repeats=1, progress=False)
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

    rows = bench.sweep(make_call, batch_sizes=[2, 4], device_counts=[1], repeats=1, progress=False)
    assert "run_s" in rows[0] and rows[1]["skipped"].startswith("out of memory")

    def broken(mesh, batch):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        bench.sweep(broken, batch_sizes=[1], device_counts=[1], repeats=1, progress=False)


def test_buckets_precompile_and_refuse_unknown_shapes():
    def compile_for(key):
        height, width = key
        return bench.aot_compile(
            lambda x: x.mean(axis=(1, 2)), jax.ShapeDtypeStruct((1, height, width, 3), jnp.float32)
        )

    buckets = bench.Buckets(compile_for)
    seconds = buckets.warm([(16, 16), (18, 14)])
    assert set(seconds) == {(16, 16), (18, 14)} and (18, 14) in buckets
    assert buckets[(18, 14)](jnp.ones((1, 18, 14, 3))).shape == (1, 3)
    with pytest.raises(KeyError, match="nearest_bucket"):
        buckets[(20, 20)]
    assert bench.nearest_bucket(1000, 800) == (1152, 896)
    assert bench.nearest_bucket(512, 512) == (1024, 1024)
    assert bench.nearest_bucket(700, 1300) == (768, 1344)


def test_attention_timing_and_the_splash_wrapper():
    timings = bench.time_attention(1, 32, 16, 2, 8, dtype=jnp.float32, repeats=1)
    assert set(timings) == {"None", "xla"}  # no splash kernel off TPU
    assert timings["xla"]["max_abs_diff"] < 1e-5
    # the TPU kernel, run through the Pallas interpreter: our scaling and layout around it are right
    q, k, v = (jax.random.normal(jax.random.key(i), (1, 128, 2, 16), jnp.float32) for i in range(3))
    out = bench.splash_attention(128, 128, 2, interpret=True)(q, k, v)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.nn.dot_product_attention(q, k, v)), atol=1e-5)
