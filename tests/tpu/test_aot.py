"""Ahead-of-time compiling (sdaccel.tpu.aot): the executable and its FLOPs as XLA counts them (one
device's share, a loop body once), and the cache of one executable per input signature."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.tpu import aot
from sdaccel.tpu import sharding as sh


def test_aot_compile_and_xla_flops():
    m, k, n = 32, 64, 48
    compiled = aot.aot_compile(
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
    one = aot.aot_compile(step, x, w).flops
    assert one == 2 * 64 * 128 * 128
    assert aot.aot_compile(loop, x, w).flops < 2 * one  # ten steps, counted as one
    if jax.device_count() >= 4:
        mesh = sh.make_mesh(4)
        split = aot.aot_compile(
            step, x, w, in_shardings=(NamedSharding(mesh, P("data")), NamedSharding(mesh, P()))
        )
        assert split.flops == one / 4  # one device's share


def test_aot_cache_compiles_once_per_signature():
    cache = aot.AOTCache(lambda x: x * 2)
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


def test_a_program_traced_under_another_matmul_precision_is_compiled_again():
    """``jax.default_matmul_precision`` is read when the program is traced (on a TPU, "highest" is
    float32 and the default one bfloat16 pass): the cache must not hand back the default program."""
    cache = aot.AOTCache(lambda a, b: a @ b)
    x = jnp.ones((4, 4))
    default = cache.compile(x, x)
    with jax.default_matmul_precision("highest"):
        highest = cache.compile(x, x)
        assert cache.compile(x, x) is highest  # and kept under its own key
    assert len(cache) == 2 and cache.compile(x, x) is default
    assert "operand_precision={highest,highest}" in highest.executable.as_text()
    assert "operand_precision" not in default.executable.as_text()


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA's CPU backend computes bf16 dots in float32")
@pytest.mark.parametrize("steps", [None, 4], ids=["one pass", "in a loop"])
def test_cpu_compile_holds_one_float32_copy_of_a_bf16_weight_at_a_time(steps):
    """On the CPU, XLA converts each bfloat16 weight to float32 for its dot. With its defaults, every
    convert runs first (and a sampling loop's are hoisted before it): a float32 copy of all the
    weights, twice their bytes, is alive at once (a 256x256 SDXL step peaked at 18 GiB so).
    AOTCache compiles for the CPU with CPU_COMPILER_OPTIONS: one weight's copy at a time."""
    layers, width = 16, 256
    weights = [jax.ShapeDtypeStruct((width, width), jnp.bfloat16)] * layers
    x = jax.ShapeDtypeStruct((8, width), jnp.float32)

    def net(ws, x):
        h = x.astype(jnp.bfloat16)
        for w in ws:
            h = jnp.tanh(h @ w)
        return h.astype(jnp.float32)

    def fn(ws, x):
        return net(ws, x) if steps is None else jax.lax.fori_loop(0, steps, lambda i, h: net(ws, h), x)

    def temporaries(**kwargs) -> int:
        compiled = aot.AOTCache(fn, **kwargs).compile(weights, x)
        return compiled.executable.memory_analysis().temp_size_in_bytes

    bf16_bytes = layers * width * width * 2
    assert temporaries() <= bf16_bytes / 4  # one float32 weight: 1/8 of them
    assert temporaries(compiler_options={}) >= 2 * bf16_bytes  # XLA's defaults: all of them
    assert aot.AOTCache(fn).compiler_options == aot.CPU_COMPILER_OPTIONS
