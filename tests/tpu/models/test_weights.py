"""Filling an NNX module from safetensors (sdaccel.tpu.models.weights): the PyTorch -> Flax
layouts, an abstract model, counting parameters, and the loader's refusals, on a tiny module."""

from __future__ import annotations

import jax
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
