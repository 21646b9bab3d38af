"""The mesh, the sharding rules and data parallelism (sdaccel.tpu.sharding), on a small stand-in
NNX model; the sharded pipeline on the tiny SDXL checkpoint is tests/tpu/test_sharded_pipeline.py.

The stand-in has what matters for the rules: convs, a big linear kernel, norms and biases, and a
denoise-like loop over noise drawn per example with ``fold_in``. Multi-device cases need the CPU
backend to show 8 devices; this module asks for them before JAX starts (when another test module
started JAX first with fewer, those cases are skipped, and say so).
"""

from __future__ import annotations

import jax

try:
    jax.config.update("jax_num_cpu_devices", 8)
except RuntimeError:  # backends already started by an earlier test module
    pass

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.tpu import sharding as sh
from sdaccel.tpu.pipeline import initial_noise


def needs(n: int):
    return pytest.mark.skipif(
        jax.device_count() < n, reason=f"needs {n} devices, JAX started with {jax.device_count()}"
    )


class StandIn(nnx.Module):
    """A denoiser-shaped toy: conv -> norm -> conditioned linear -> conv, channels-last."""

    def __init__(self, rngs: nnx.Rngs, width: int = 16, cond: int = 8):
        self.conv_in = nnx.Conv(4, width, (3, 3), rngs=rngs)
        self.norm = nnx.GroupNorm(width, num_groups=4, rngs=rngs)
        self.proj = nnx.Linear(cond, width, rngs=rngs)
        self.ff = nnx.Linear(width, 4 * width, rngs=rngs)
        self.ff_out = nnx.Linear(4 * width, width, rngs=rngs)
        self.conv_out = nnx.Conv(width, 4, (3, 3), rngs=rngs)

    def __call__(self, x, c):
        h = self.norm(self.conv_in(x))
        h = h + self.proj(c)[:, None, None, :]
        h = h + self.ff_out(jax.nn.gelu(self.ff(h)))
        return self.conv_out(jax.nn.silu(h))


def make_standin():
    model = StandIn(nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    return model, graphdef, params


def denoise_fn(graphdef):
    """A pure function of (params, inputs), batch first on every input, like the pipeline's."""

    def fn(params, inputs):
        model = nnx.merge(graphdef, params)
        x = initial_noise(7, inputs["indices"], (8, 8, 4))
        for _ in range(3):
            x = x - 0.1 * model(x, inputs["cond"])
        return {"images": jnp.tanh(x)}

    return fn


def data_parallel(fn, mesh, params, inputs):
    """``fn(params, inputs)`` jitted with the rules' shardings: weights replicated, batch over "data"."""
    return jax.jit(
        fn,
        in_shardings=(sh.tree_shardings(params, mesh), sh.tree_shardings(inputs, mesh, "inputs")),
        out_shardings={"images": sh.batch_sharding(mesh)},
    )


def host_inputs(batch: int):
    cond = np.random.default_rng(0).normal(size=(batch, 8)).astype(np.float32)
    return {"indices": np.arange(batch, dtype=np.int32), "cond": cond}


# ----------------------------------------------------------------------------------------------


def test_parse_mesh():
    assert sh.parse_mesh(None, 8) == (8, 1)
    assert sh.parse_mesh("auto", 4) == (4, 1)
    assert sh.parse_mesh("4", 8) == (4, 1)
    assert sh.parse_mesh("4x2", 8) == (4, 2)
    with pytest.raises(ValueError, match="DATAxMODEL"):
        sh.parse_mesh("four", 8)


def test_make_mesh_axes_and_error():
    mesh = sh.make_mesh(1)
    assert mesh.axis_names == ("data",) and sh.axis_size(mesh, "model") == 1
    with pytest.raises(ValueError, match="xla_force_host_platform_device_count"):
        sh.make_mesh(jax.device_count() + 1)


@needs(8)
def test_make_mesh_data_and_model():
    mesh = sh.make_mesh(model=2)
    assert dict(mesh.shape) == {"data": 4, "model": 2}
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)


@needs(8)
def test_rules_on_data_and_model_meshes():
    data_mesh = sh.make_mesh(8)
    both = sh.make_mesh(4, 2)
    # replicated on a data-only mesh, whatever the size
    assert sh.spec_for("unet/ff/kernel", (1280, 10240), data_mesh) == P()
    # under "model": the largest dimension that the axis divides
    assert sh.spec_for("unet/ff/kernel", (1280, 10240), both) == P(None, "model")
    assert sh.spec_for("unet/conv/kernel", (3, 3, 1281, 640), both, min_shard_size=1) == P(
        None, None, None, "model"
    )
    # nothing divisible, or too small: replicated
    assert sh.spec_for("unet/odd/kernel", (3, 3, 5, 7), both, min_shard_size=1) == P()
    assert sh.spec_for("unet/ff/kernel", (16, 64), both) == P()
    assert sh.spec_for("unet/norm/scale", (1280,), both, min_shard_size=1) == P()
    # activations: batch over data, on both meshes
    assert sh.spec_for("inputs/latents", (8, 128, 128, 4), data_mesh) == P("data")
    assert sh.spec_for("outputs/images", (8, 64, 64, 3), both) == P("data")
    assert sh.match_rule("inputs/latents").name == "batch"


@needs(4)
def test_indivisible_batch_is_a_clear_error_and_padding_is_explicit():
    mesh = sh.make_mesh(4)
    with pytest.raises(sh.ShardingError, match=r"multiple of 4 \(for example 8\).*pad_batch"):
        sh.spec_for("inputs/latents", (6, 8, 8, 4), mesh)
    padded, n_real = sh.pad_batch(["a", "b", "c", "d", "e", "f"], mesh)
    assert padded == ["a", "b", "c", "d", "e", "f", "f", "f"] and n_real == 6
    rows, n_real = sh.pad_batch(np.arange(5), mesh)
    assert rows.tolist() == [0, 1, 2, 3, 4, 4, 4, 4] and n_real == 5
    with pytest.raises(sh.ShardingError, match="multiple of 4"):
        sh.tree_shardings(host_inputs(6), mesh, "inputs")


@needs(8)
def test_loader_sharding_fn_and_shard_model_follow_the_rules():
    mesh = sh.make_mesh(4, 2)
    abstract = nnx.eval_shape(lambda: StandIn(nnx.Rngs(0)))
    fn = sh.param_sharding_fn(abstract, mesh, min_shard_size=512)
    assert fn(("ff", "kernel")).spec == P(None, "model")  # (16, 64): 64 is the largest
    assert fn(("ff_out", "kernel")).spec == P("model", None)  # (64, 16)
    assert fn(("ff", "bias")).spec == P()  # a bias is never split
    assert fn(("conv_out", "kernel")).spec == P(None, None, "model", None)  # (3, 3, 16, 4)
    assert sh.param_sharding_fn(abstract, mesh)(("ff", "kernel")).spec == P()  # default size floor
    model = sh.shard_model(StandIn(nnx.Rngs(0)), mesh, min_shard_size=512)
    specs = sh.param_specs(model)
    assert specs["ff/kernel"] == P(None, "model") and specs["norm/scale"] == P()
    shard = model.ff.kernel.get_value().addressable_shards[0]
    assert shard.data.shape == (16, 32)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_same_images_on_any_number_of_devices(n):
    if jax.device_count() < n:
        pytest.skip(f"needs {n} devices")
    model, graphdef, params = make_standin()
    fn = denoise_fn(graphdef)
    reference = np.asarray(jax.jit(fn)(params, host_inputs(8))["images"])
    mesh = sh.make_mesh(n)
    inputs = jax.device_put(host_inputs(8), sh.tree_shardings(host_inputs(8), mesh, "inputs"))
    assert inputs["cond"].sharding.spec == P("data")
    run = data_parallel(fn, mesh, params, inputs)
    out = run(params, inputs)["images"]
    assert out.sharding.spec == P("data")
    assert {s.data.shape[0] for s in out.addressable_shards} == {8 // n}
    np.testing.assert_allclose(np.asarray(out), reference, atol=1e-5, rtol=0)


@needs(8)
def test_model_parallel_mesh_gives_the_same_images():
    model, graphdef, params = make_standin()
    fn = denoise_fn(graphdef)
    reference = np.asarray(jax.jit(fn)(params, host_inputs(4))["images"])
    mesh = sh.make_mesh(4, 2)
    rules = sh.RULES
    run = jax.jit(
        fn,
        in_shardings=(
            sh.tree_shardings(params, mesh, "", rules, 512),
            sh.tree_shardings(host_inputs(4), mesh, "inputs"),
        ),
        out_shardings={"images": sh.batch_sharding(mesh)},
    )
    out = run(params, host_inputs(4))["images"]
    np.testing.assert_allclose(np.asarray(out), reference, atol=1e-5, rtol=0)


@needs(4)
def test_explain_describe_and_visualize(capsys):
    mesh = sh.make_mesh(4)
    x = jax.device_put(jnp.zeros((8, 4, 4, 3)), sh.batch_sharding(mesh))
    assert "float32[8,4,4,3]" in sh.describe(x) and "'data'" in sh.describe(x)
    sh.visualize(x)
    assert "CPU 3" in capsys.readouterr().out
    rows = sh.explain({"latents": np.zeros((8, 2))}, mesh, "inputs")
    assert rows == [("inputs/latents", (8, 2), "batch", P("data"))]
    # with Explicit axes, the sharding is part of the type
    explicit = sh.make_mesh(4, explicit=True)
    y = jax.device_put(jnp.zeros((8, 3)), NamedSharding(explicit, P("data")))
    assert "8@data" in str(jax.typeof(y))
