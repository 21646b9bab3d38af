"""The sharded pipeline (sdaccel.tpu.sharded_pipeline) on the tiny SDXL checkpoint: a
model-parallel mesh gives one device's images, moving to another mesh, and the FLOPs of every
UNet step. Multi-device cases need the CPU backend to show 8 devices (tests/conftest.py asks for
them before JAX starts; with fewer, those cases are skipped, and say so).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from sdaccel.tpu import aot
from sdaccel.tpu import sharding as sh
from sdaccel.tpu.sharded_pipeline import ShardedPipeline


def needs(n: int):
    return pytest.mark.skipif(
        jax.device_count() < n, reason=f"needs {n} devices, JAX started with {jax.device_count()}"
    )


@pytest.mark.slow
@needs(8)
def test_tiny_sdxl_on_a_model_parallel_mesh_matches_one_device(tiny_sdxl):
    prompts = ["a red circle", "a cat", "a dog", "a horse"]
    options = dict(steps=2, guidance_scale=5.0, height=64, width=64, seed=3)
    mesh = sh.make_mesh(4, 2)
    pipe = ShardedPipeline.from_pretrained(
        tiny_sdxl, mesh, dtype=jnp.float32, min_shard_size=4096, progress=False
    )
    specs = sh.param_specs(pipe.pipeline.params["unet"], "unet")
    split = [name for name, spec in specs.items() if "model" in str(spec)]
    assert split and all(name.endswith(("kernel", "embedding")) for name in split)
    assert all(specs[name] == P() for name in specs if name.endswith("bias"))
    per_device = pipe.bytes_per_device()
    images, timings = pipe.generate_array(pipe.pipeline.check_inputs(prompts, **options))
    assert images.sharding.spec == P("data") and timings["devices"] == 8 and timings["compile_s"] > 0
    assert timings["images"] == 4 and timings["padded"] == 0
    args = pipe.inputs(prompts, None, 2, 5.0, 64, 64, 3)
    flops = pipe.flops(args)
    assert flops["total"] == pytest.approx(flops["program_as_counted"] + flops["unet_step"])  # 2 steps

    one = pipe.to_mesh(sh.make_mesh(1))  # weights move through the host; `pipe` is spent
    assert sum(one.bytes_per_device().values()) > max(per_device.values())  # one device holds it all
    chunks = [one.generate(prompts[i : i + 2], first_index=i, **options).array for i in (0, 2)]
    np.testing.assert_allclose(np.asarray(images), np.concatenate(chunks), atol=1e-5, rtol=0)


@needs(4)
def test_sharded_flops_count_every_unet_step(tiny_sdxl):
    """XLA counts the sampling loop's body once; the UNet step is counted from its *compiled*
    program (a lowered program's cost analysis is None on TPU) with the same batch sharding, and
    all devices together it equals the step compiled for one device."""
    pipe = ShardedPipeline.from_pretrained(tiny_sdxl, sh.make_mesh(4), dtype=jnp.float32, progress=False)
    args = pipe.inputs(["a red circle"] * 4, None, 3, 5.0, 64, 64, 0)
    flops = pipe.flops(args)
    assert flops["total"] == pytest.approx(flops["program_as_counted"] + 2 * flops["unet_step"])
    params, state, cond, noise, _ = args

    def spec(x):
        return None if x is None else jax.ShapeDtypeStruct((8, *x.shape[2:]), x.dtype)  # B * G = 8

    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params["unet"])
    t = jax.ShapeDtypeStruct((), state.timesteps.dtype)
    whole = aot.aot_compile(
        pipe._unet_call, abstract, jax.ShapeDtypeStruct((8, *noise.shape[1:]), noise.dtype), t, spec(cond.prompt_embeds), spec(cond.text_embeds),
        spec(cond.time_ids),
    ).flops  # fmt: skip
    assert whole > 1e6 and flops["unet_step"] == pytest.approx(whole, rel=1e-2)
    assert len(pipe._unet_cache) == 1 and pipe.flops(args) == flops  # compiled once

    assert pipe.pipeline.attention_implementations() == {"xla"}
    pipe.use_attention("splash")  # part of the models' structure: what was compiled is dropped
    assert pipe.pipeline.attention_implementations() == {"splash"}
    assert len(pipe.cache) == len(pipe._unet_cache) == len(pipe.pipeline._denoise) == 0
