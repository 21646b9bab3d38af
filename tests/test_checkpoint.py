"""Finding checkpoints, reading safetensors without torch, and the errors that name the fix."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from sdaccel.checkpoint import (
    CheckpointError,
    WeightFile,
    WeightReader,
    allow_patterns,
    load_weights,
    open_weights,
    read_config,
    resolve_checkpoint,
    torch_key,
)


def write_safetensors(path, tensors):
    """A minimal writer, independent of the reader under test."""
    codes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(ml_dtypes.bfloat16): "BF16"}
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": codes[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_reader_reads_every_dtype(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "a": rng.standard_normal((3, 4)).astype(np.float32),
        "b": rng.standard_normal((5,)).astype(np.float16),
        "c": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
    }
    write_safetensors(tmp_path / "w.safetensors", tensors)
    wf = WeightFile(tmp_path / "w.safetensors")
    assert sorted(wf.keys()) == ["a", "b", "c"]
    for name, array in tensors.items():
        got = wf.get(name)
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got.astype(np.float32), array.astype(np.float32))


def test_reader_matches_the_safetensors_library(tmp_path):
    from safetensors.numpy import save_file

    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    save_file({"x": array}, str(tmp_path / "x.safetensors"))
    np.testing.assert_array_equal(WeightFile(tmp_path / "x.safetensors").get("x"), array)


def test_load_weights_fills_and_transposes(tmp_path):
    import jax.numpy as jnp
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.blocks = nnx.List([nnx.Linear(2, 3, rngs=rngs)])
            self.conv = nnx.Conv(2, 4, (3, 3), rngs=rngs)

    rng = np.random.default_rng(1)
    torch_tensors = {
        "blocks.0.weight": rng.standard_normal((3, 2)).astype(np.float32),  # (out, in)
        "blocks.0.bias": rng.standard_normal((3,)).astype(np.float32),
        "conv.weight": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),  # OIHW
        "conv.bias": rng.standard_normal((4,)).astype(np.float32),
    }
    write_safetensors(tmp_path / "m.safetensors", torch_tensors)
    model = nnx.eval_shape(lambda: Net(nnx.Rngs(0)))
    model = load_weights(model, WeightReader([tmp_path / "m.safetensors"]), dtype=jnp.bfloat16)
    assert model.blocks[0].kernel.get_value().dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(model.blocks[0].kernel.get_value(), np.float32),
        torch_tensors["blocks.0.weight"].T,
        rtol=1e-2,
    )
    np.testing.assert_allclose(
        np.asarray(model.conv.kernel.get_value(), np.float32),
        torch_tensors["conv.weight"].transpose(2, 3, 1, 0),
        rtol=1e-2,
    )


def test_missing_and_mismatched_tensors_are_named(tmp_path):
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.proj = nnx.Linear(2, 3, rngs=rngs)

    write_safetensors(
        tmp_path / "bad.safetensors",
        {"proj.weight": np.zeros((3, 5), np.float32), "proj.bias": np.zeros(3, np.float32)},
    )
    with pytest.raises(CheckpointError, match=r"proj\.weight.*\(3, 5\).*expects \(2, 3\)"):
        load_weights(nnx.eval_shape(lambda: Net(nnx.Rngs(0))), WeightReader([tmp_path / "bad.safetensors"]))
    write_safetensors(tmp_path / "short.safetensors", {"proj.weight": np.zeros((3, 2), np.float32)})
    with pytest.raises(CheckpointError, match=r"proj\.bias.*missing"):
        load_weights(nnx.eval_shape(lambda: Net(nnx.Rngs(0))), WeightReader([tmp_path / "short.safetensors"]))


def test_torch_key_names():
    assert (
        torch_key(("down_blocks", 0, "resnets", 1, "conv1", "kernel"))
        == "down_blocks.0.resnets.1.conv1.weight"
    )
    assert torch_key(("norm", "scale")) == "norm.weight"
    assert torch_key(("embeddings", "token_embedding", "embedding")) == "embeddings.token_embedding.weight"


def test_allow_patterns_take_only_what_is_needed():
    from fnmatch import fnmatch

    hub_files = [
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "unet/diffusion_pytorch_model.fp16.safetensors",
        "unet/diffusion_pytorch_model.non_ema.safetensors",
        "unet/diffusion_pytorch_model.bin",
        "unet/diffusion_pytorch_model-00001-of-00002.safetensors",
        "vae/diffusion_pytorch_model.safetensors",
        "vae/config.json",
        "sd_xl_base_1.0.safetensors",
    ]

    def fetched(patterns):
        return {f for f in hub_files if any(fnmatch(f, p) for p in patterns)}

    assert fetched(allow_patterns(["unet"], variant="fp16")) == {
        "model_index.json",
        "unet/config.json",
        "vae/config.json",
        "unet/diffusion_pytorch_model.fp16.safetensors",
    }
    assert fetched(allow_patterns(["unet"])) == {
        "model_index.json",
        "unet/config.json",
        "vae/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "unet/diffusion_pytorch_model-00001-of-00002.safetensors",
    }


def test_resolve_errors_name_the_fix(tmp_path):
    with pytest.raises(CheckpointError, match="sdaccel.tiny"):
        resolve_checkpoint(tmp_path / "does-not-exist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="model_index.json"):
        resolve_checkpoint(tmp_path / "empty")


def test_incomplete_checkpoint_is_named(tiny_sdxl, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_sdxl, broken)
    (broken / "unet" / "diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="No safetensors weights in .*unet"):
        open_weights(broken, "unet")
    (broken / "vae" / "config.json").unlink()
    with pytest.raises(CheckpointError, match="vae/config.json"):
        read_config(broken, "vae")
    with pytest.raises(CheckpointError, match="no 'controlnet' component"):
        open_weights(broken, "controlnet")


def test_tiny_checkpoint_resolves_and_prefers_variant(tiny_sdxl):
    folder = resolve_checkpoint(tiny_sdxl)
    assert folder == tiny_sdxl
    reader = open_weights(folder, "unet", variant="fp16")  # no fp16 files: the default ones are used
    assert reader.files[0].path.name == "diffusion_pytorch_model.safetensors"
    assert read_config(folder, "scheduler")["_class_name"] == "EulerDiscreteScheduler"
