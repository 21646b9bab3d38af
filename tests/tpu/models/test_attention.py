"""sdaccel.tpu.models.attention: the choice each module carries, and the Pallas splash kernel against
XLA attention, run in the Pallas interpreter on the CPU (the same kernel code a TPU compiles)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.tpu import plan_compile, sharding
from sdaccel.tpu.models import attention
from sdaccel.tpu.models.unet import UNet2DConditionModel, UNetConfig
from sdaccel.tpu.models.weights import abstract_model

SPLASH = attention.AttentionImpl("splash", interpret=True)


def qkv(batch, q_len, kv_len, heads, head_dim, dtype=jnp.float32, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(keys[0], (batch, q_len, heads, head_dim), dtype)
    k, v = (jax.random.normal(key, (batch, kv_len, heads, head_dim), dtype) for key in keys[1:])
    return q, k, v


def reference(q, k, v):
    """softmax(q k^T / sqrt(d)) v in float64 NumPy."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


@pytest.mark.parametrize(("dtype", "tol"), [(jnp.float32, 2e-5), (jnp.bfloat16, 3e-2)])
def test_splash_matches_xla_on_unet_self_attention_shapes(dtype, tol):
    """SDXL's self-attention pattern (heads of 64), at 256 tokens (two 128-blocks of K and V)."""
    q, k, v = qkv(2, 256, 256, 2, 64, dtype)
    splash = jax.jit(lambda q, k, v: attention.attention(q, k, v, impl=SPLASH))(q, k, v)
    xla = attention.attention(q, k, v)
    assert splash.dtype == xla.dtype == dtype and splash.shape == q.shape
    want = reference(q, k, v)
    assert np.abs(np.asarray(xla, np.float64) - want).max() < tol
    assert np.abs(np.asarray(splash, np.float64) - want).max() < tol


def test_splash_on_vae_shapes_one_wide_head():
    q, k, v = qkv(1, 384, 384, 1, 128)
    out = jax.jit(lambda q, k, v: attention.attention(q, k, v, impl=SPLASH))(q, k, v)
    np.testing.assert_allclose(np.asarray(out), reference(q, k, v), atol=2e-5)


@pytest.mark.parametrize(
    ("q_len", "kv_len", "kwargs"),
    [(256, 77, {}), (77, 77, {"is_causal": True}), (64, 64, {}), (128, 128, {"is_causal": True})],
)
def test_what_splash_does_not_take_stays_xla(q_len, kv_len, kwargs):
    """Cross-attention to 77 tokens, causal (CLIP), lengths the 128-blocks do not divide: XLA, exactly."""
    q, k, v = qkv(2, q_len, kv_len, 2, 64)
    fn = jax.jit(lambda q, k, v: attention.attention(q, k, v, impl=SPLASH, **kwargs))
    assert attention.splash_flops(jax.make_jaxpr(fn)(q, k, v)) == 0
    xla = jax.jit(lambda q, k, v: attention.attention(q, k, v, **kwargs))
    np.testing.assert_array_equal(np.asarray(fn(q, k, v)), np.asarray(xla(q, k, v)))


def test_splash_under_shard_map_over_the_data_axis():
    """On a mesh the kernel runs per device under shard_map: batch over "data", heads over "model"."""
    mesh = sharding.make_mesh(2, 2, devices=jax.devices()[:4])
    q, k, v = qkv(4, 128, 128, 2, 64)
    placed = [jax.device_put(x, NamedSharding(mesh, P("data"))) for x in (q, k, v)]
    impl = attention.AttentionImpl("splash", mesh=mesh, interpret=True)
    fn = jax.jit(lambda q, k, v: attention.attention(q, k, v, impl=impl))
    assert "shard_map" in str(jax.make_jaxpr(fn)(*placed))
    out = fn(*placed)
    np.testing.assert_allclose(np.asarray(out), reference(q, k, v), atol=2e-5)
    # the mesh set around the trace is used when the module names none
    with jax.set_mesh(mesh):
        traced = jax.jit(lambda q, k, v: attention.attention(q, k, v, impl=SPLASH)).trace(*placed)
    assert "shard_map" in str(traced.jaxpr)


def test_splash_flops_counts_each_kernel_call():
    q, k, v = qkv(2, 256, 256, 2, 64)

    def two_calls(q, k, v):
        return attention.attention(attention.attention(q, k, v, impl=SPLASH), k, v, impl=SPLASH)

    assert attention.attention_flops(2, 256, 256, 2, 64) == 4 * 2 * 2 * 256 * 256 * 64
    assert attention.splash_flops(jax.make_jaxpr(two_calls)(q, k, v)) == 2 * attention.attention_flops(
        2, 256, 256, 2, 64
    )
    assert attention.splash_flops(jax.make_jaxpr(lambda q, k, v: attention.attention(q, k, v))(q, k, v)) == 0


@nnx.jit(static_argnums=0)
def _build_unet(config):  # one compiled program instead of one dispatch per weight
    return UNet2DConditionModel(config, rngs=nnx.Rngs(0))


def tiny_unet(impl: str, weights: bool = True) -> UNet2DConditionModel:
    config = UNetConfig.from_dict(plan_compile._tiny_configs()["unet"])
    model = _build_unet(config) if weights else abstract_model(UNet2DConditionModel, config)
    return attention.use(model, impl, interpret=True)


def test_use_sets_every_attention_module_and_the_graph_definition():
    model = tiny_unet("splash", weights=False)
    modules = [
        m for _, m in nnx.iter_graph(model) if isinstance(m, nnx.Module) and hasattr(m, "attention_impl")
    ]
    # 1 down + 1 mid + 2 up transformer layers, two attentions each
    assert len(modules) == 8
    assert {m.attention_impl for m in modules} == {attention.AttentionImpl("splash", interpret=True)}
    xla_graph, _ = nnx.split(attention.use(tiny_unet("splash", weights=False), "xla"))
    assert nnx.split(model)[0] != xla_graph  # a compiled-program cache keyed on the graph tells them apart
    with pytest.raises(ValueError, match="Unknown attention implementation 'flash'"):
        attention.use(model, "flash")


def test_interpret_follows_the_platform_compiled_for():
    from sdaccel.tpu import topology as tpu_topology

    cpu = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    cpu.attention_impl = attention.XLA
    assert attention.use(cpu, "splash").attention_impl.interpret  # the CPU runs the interpreter
    tpu_mesh = sharding.make_mesh(devices=tpu_topology.tpu_devices("v5e-4"))
    impl = attention.use(cpu, "splash", mesh=tpu_mesh).attention_impl
    assert not impl.interpret and impl.mesh is tpu_mesh  # compile-only TPU devices: the real kernel
    assert [attention.default_for(p) for p in ("tpu", "gpu", "cpu")] == ["splash", "cudnn", "xla"]


def test_whole_tiny_unet_splash_matches_xla():
    """The tiny plan UNet at latents 16x8: 3 self-attentions through the kernel, the rest XLA."""
    splash, xla = tiny_unet("splash"), tiny_unet("xla")
    keys = jax.random.split(jax.random.key(1), 4)
    x = jax.random.normal(keys[0], (2, 16, 8, 4))
    context = jax.random.normal(keys[1], (2, 77, 128))
    text_embeds = jax.random.normal(keys[2], (2, 64))
    time_ids = jnp.tile(jnp.array([[32.0, 16.0, 0.0, 0.0, 32.0, 16.0]]), (2, 1))
    args = (x, jnp.float32(500.0), context, text_embeds, time_ids)

    @nnx.jit
    def run(model, *args):
        return model(*args)

    want = run(xla, *args)
    got = run(splash, *args)
    scale = float(jnp.abs(want).max())
    assert scale > 0.1
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-4 * scale)
    jaxpr = jax.make_jaxpr(lambda *a: splash(*a))(*args)
    assert attention.splash_flops(jaxpr) == 3 * attention.attention_flops(2, 128, 128, 2, 64)
