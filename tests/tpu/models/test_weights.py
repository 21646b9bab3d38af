"""Filling an NNX module from safetensors (sdaccel.tpu.models.weights): the PyTorch -> Flax
layouts, an abstract model, counting parameters, the loader's refusals, on a tiny module; and its
memory: one copy of each weight, cast straight to the asked dtype, the mapped file let go."""

from __future__ import annotations

import tracemalloc

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from sdaccel.core.checkpoint import CheckpointError, WeightReader
from sdaccel.tpu.models import weights


class Tiny(nnx.Module):
    """A conv (3x3, 2 -> 4 channels) and a linear layer (4 -> 3), named as a PyTorch module would be."""

    def __init__(self, config=None, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(2, 4, (3, 3), rngs=rngs)
        self.proj = nnx.Linear(4, 3, rngs=rngs)


def torch_tensors(proj_shape=(3, 4)) -> dict[str, np.ndarray]:
    """The PyTorch state dict of :class:`Tiny`: conv OIHW, linear (out, in)."""
    rng = np.random.default_rng(0)
    return {
        "conv.weight": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
        "conv.bias": rng.standard_normal(4).astype(np.float32),
        "proj.weight": rng.standard_normal(proj_shape).astype(np.float32),
        "proj.bias": rng.standard_normal(proj_shape[0]).astype(np.float32),
    }


def reader(tmp_path, tensors) -> WeightReader:
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return WeightReader([tmp_path / "model.safetensors"])


def test_to_jax_layout():
    conv = np.zeros((4, 2, 3, 5))
    assert weights.to_jax_layout("kernel", conv).shape == (3, 5, 2, 4)
    assert weights.to_jax_layout("kernel", np.zeros((3, 4))).shape == (4, 3)
    assert weights.to_jax_layout("bias", np.zeros((3, 4))).shape == (3, 4)  # only kernels move


def test_count_params_of_a_tiny_model_abstract_or_not():
    expected = 4 * 2 * 3 * 3 + 4 + 4 * 3 + 3
    assert weights.count_params(Tiny(rngs=nnx.Rngs(0))) == (expected, 4 * expected)
    abstract = weights.abstract_model(Tiny, None)
    assert weights.count_params(abstract) == (expected, 4 * expected)
    assert isinstance(abstract.proj.kernel.get_value(), jax.ShapeDtypeStruct)


def test_load_weights_fills_an_abstract_model_in_our_layout(tmp_path):
    tensors = torch_tensors()
    model = weights.load_weights(weights.abstract_model(Tiny, None), reader(tmp_path, tensors))
    np.testing.assert_array_equal(
        np.asarray(model.conv.kernel.get_value()), tensors["conv.weight"].transpose(2, 3, 1, 0)
    )
    np.testing.assert_array_equal(np.asarray(model.proj.kernel.get_value()), tensors["proj.weight"].T)
    np.testing.assert_array_equal(np.asarray(model.proj.bias.get_value()), tensors["proj.bias"])


def test_load_weights_refuses_a_shape_mismatch(tmp_path):
    with pytest.raises(
        CheckpointError, match=r"'proj.weight' has shape \(3, 5\) in the checkpoint.*expects \(4, 3\)"
    ):
        weights.load_weights(weights.abstract_model(Tiny, None), reader(tmp_path, torch_tensors((3, 5))))


def test_load_weights_names_a_missing_tensor_and_warns_of_unused_ones(tmp_path):
    tensors = torch_tensors()
    del tensors["proj.bias"]
    with pytest.raises(CheckpointError, match=r"Tensor 'proj.bias' \(tried \['proj.bias'\]\) is missing"):
        weights.load_weights(weights.abstract_model(Tiny, None), reader(tmp_path, tensors))
    extra = {**torch_tensors(), "position_ids": np.arange(3), "stray.weight": np.zeros(2, np.float32)}
    (tmp_path / "extra").mkdir()
    with pytest.warns(
        UserWarning, match=r"1 tensors .* were not used by the model, for example \['stray.weight'\]"
    ):
        weights.load_weights(
            weights.abstract_model(Tiny, None),
            reader(tmp_path / "extra", extra),
            ignore_unused=["position_ids"],
        )


class Wide(nnx.Module):
    """Tiny in structure, but 5 MiB of float16 weights: a 3x3 conv 256 -> 512 and a linear 1024 -> 1024."""

    def __init__(self, config=None, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(256, 512, (3, 3), rngs=rngs)
        self.proj = nnx.Linear(1024, 1024, rngs=rngs)


def wide_tensors(dtype) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    shapes = {
        "conv.weight": (512, 256, 3, 3),
        "conv.bias": (512,),
        "proj.weight": (1024, 1024),
        "proj.bias": (1024,),
    }
    return {k: rng.standard_normal(shape, np.float32).astype(dtype) for k, shape in shapes.items()}


def test_load_weights_lets_go_of_the_mapped_file(tmp_path, mapped_rss):
    """Once loaded, none of the checkpoint stays in the loader's resident set, though its reader is
    still open: the pages of each tensor are released once it is placed. Before, every page read
    stayed until the reader was closed, so loading SDXL peaked at its weights plus the whole
    mapped file (1.8x its bf16 bytes of RSS; benchmarks/results/jax_memory_sdxl.md)."""
    tensors = wide_tensors(np.float16)
    source = reader(tmp_path, tensors)
    model = weights.load_weights(weights.abstract_model(Wide, None), source, dtype=jnp.bfloat16)
    resident = mapped_rss(tmp_path / "model.safetensors")
    if resident is None:
        pytest.skip("no /proc/self/smaps here")
    file_bytes = sum(t.nbytes for t in tensors.values())
    assert resident < 64 * 1024, f"{resident} of the file's {file_bytes} bytes still mapped in"
    assert model.proj.kernel.get_value().dtype == jnp.bfloat16


def test_load_weights_casts_straight_to_the_asked_dtype(tmp_path):
    """float16 -> bfloat16 is one cast (the values are NumPy's ``astype``, bit for bit), with no float32
    copy of any weight on the way: the loader's host allocations never exceed the weights in
    bfloat16 (on the CPU the placed arrays keep the loader's copies) plus half the largest one,
    where a float32 intermediate would add twice the largest. And a bfloat16 file asked for
    float32 gives float32 (it used to keep bfloat16: NumPy does not count ml_dtypes' bfloat16 as
    floating)."""
    tensors = wide_tensors(np.float16)
    source = reader(tmp_path, tensors)
    tracemalloc.start()
    try:
        model = weights.load_weights(weights.abstract_model(Wide, None), source, dtype=jnp.bfloat16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    bf16_bytes = sum(t.size for t in tensors.values()) * 2
    largest = max(t.size for t in tensors.values()) * 2  # the conv: 2.25 MiB in bfloat16
    assert peak < bf16_bytes + largest / 2, (
        f"host allocations peaked at {peak / bf16_bytes:.2f}x the bf16 weights"
    )
    expected = tensors["conv.weight"].transpose(2, 3, 1, 0).astype(ml_dtypes.bfloat16)
    kernel = np.asarray(model.conv.kernel.get_value())
    assert kernel.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(kernel.view(np.uint16), expected.view(np.uint16))

    (tmp_path / "bf16").mkdir()
    bf16 = {k: v.astype(ml_dtypes.bfloat16) for k, v in torch_tensors().items()}
    model = weights.load_weights(
        weights.abstract_model(Tiny, None), reader(tmp_path / "bf16", bf16), dtype=jnp.float32
    )
    assert model.proj.kernel.get_value().dtype == jnp.float32
    np.testing.assert_array_equal(
        np.asarray(model.proj.kernel.get_value()), bf16["proj.weight"].T.astype(np.float32)
    )


def test_aligned_copy_is_adopted_by_device_put_on_the_cpu():
    """The loader's copy is C-contiguous, 64-byte aligned and cast like ``astype``; on the CPU,
    ``jax.device_put`` then uses it as the placed array's buffer (no second copy of the weight)."""
    source = np.random.default_rng(2).standard_normal((8, 6, 3, 3)).astype(np.float16).transpose(2, 3, 1, 0)
    out = weights.aligned_copy(source, ml_dtypes.bfloat16)
    assert out.flags.c_contiguous and out.ctypes.data % weights.ALIGNMENT == 0
    np.testing.assert_array_equal(out.view(np.uint16), source.astype(ml_dtypes.bfloat16).view(np.uint16))
    if jax.default_backend() == "cpu":
        assert jax.device_put(out).unsafe_buffer_pointer() == out.ctypes.data
