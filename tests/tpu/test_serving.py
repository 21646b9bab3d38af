"""The serving tools (sdaccel.tpu.serving): throughput sweeps over batches and devices, and resolution
buckets warmed into the sharded pipeline's own compile cache (tiny SDXL checkpoint)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from sdaccel.tpu import serving
from sdaccel.tpu import sharding as sh
from sdaccel.tpu.sharded_pipeline import ShardedPipeline


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
