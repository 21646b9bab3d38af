"""Finding checkpoints, reading safetensors without torch, and the errors that name the fix."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from sdaccel.core.checkpoint import (
    CheckpointError,
    WeightFile,
    WeightReader,
    allow_patterns,
    check_weight_files,
    open_weights,
    read_config,
    resolve_checkpoint,
    shown_path,
    torch_key,
)
from sdaccel.tpu.models.weights import load_weights


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


def test_release_unmaps_a_tensor_read_and_keeps_its_values(tmp_path, mapped_rss):
    """A tensor's pages stay in the resident set once read, until ``release`` (what keeps a loader
    from holding the whole mapped checkpoint beside the weights it placed); reading it again after
    works, from the page cache."""
    rng = np.random.default_rng(0)
    tensors = {"a": rng.standard_normal((512, 1024)).astype(np.float16), "b": np.ones(3, np.float32)}
    write_safetensors(tmp_path / "w.safetensors", tensors)
    wf = WeightFile(tmp_path / "w.safetensors")
    view = wf.get("a")
    assert float(view.astype(np.float32).sum()) == float(tensors["a"].astype(np.float32).sum())
    before = mapped_rss(tmp_path / "w.safetensors")
    if before is None:
        pytest.skip("no /proc/self/smaps here")
    assert before >= tensors["a"].nbytes  # 1 MiB read through the mapping
    wf.release("a")
    assert mapped_rss(tmp_path / "w.safetensors") < 64 * 1024
    np.testing.assert_array_equal(view, tensors["a"])  # faulted back in, unchanged
    WeightReader([tmp_path / "w.safetensors"]).release("b")  # the reader passes it on


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
    with pytest.raises(CheckpointError, match="sdaccel.tools.toys.random_checkpoints"):
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


# ----------------------------------------------------------------------------------------------
# Corrupt weight files: named, with the fix, before anything reads a tensor
# ----------------------------------------------------------------------------------------------


def _good_file_bytes(tmp_path) -> bytes:
    from safetensors.numpy import save_file

    save_file(
        {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float16)},
        str(tmp_path / "good.safetensors"),
    )
    return (tmp_path / "good.safetensors").read_bytes()


def _with_header(data: bytes, edit) -> bytes:
    """``data`` with its JSON header changed by ``edit(header)`` (the tensor bytes are kept)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    edit(header)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data[8 + n :]


def _set(entry: str, field: str, value):
    return lambda header: header[entry].__setitem__(field, value)


#: (case, how to spoil a good file, what the message says about it)
CORRUPT = [
    ("truncated", lambda d: d[:-10], "not fully covered"),
    ("truncated_in_header", lambda d: d[:20], "header length"),
    ("empty", lambda d: b"", "is empty"),
    ("random_bytes", lambda d: np.random.default_rng(0).bytes(1000), "header too large"),
    ("header_length_beyond_file", lambda d: struct.pack("<Q", len(d) + 100) + d[8:], "header length"),
    ("offsets_beyond_file", lambda d: _with_header(d, _set("a", "data_offsets", [0, 4000])), "offset"),
    ("offsets_overlap", lambda d: _with_header(d, _set("b", "data_offsets", [0, 10])), "offset"),
    ("shape_disagrees_with_bytes", lambda d: _with_header(d, _set("a", "shape", [3, 5])), "shape"),
    ("unknown_dtype", lambda d: _with_header(d, _set("a", "dtype", "F99")), "unknown variant"),
    ("header_not_json", lambda d: struct.pack("<Q", 5) + b"{abc}" + d[13:], "invalid JSON"),
]


@pytest.mark.parametrize(("case", "spoil", "reason"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_corrupt_weight_file_is_named_with_the_fix(tmp_path, case, spoil, reason):
    bad = tmp_path / "unet" / "diffusion_pytorch_model.safetensors"
    bad.parent.mkdir()
    bad.write_bytes(spoil(_good_file_bytes(tmp_path)))
    before = bad.read_bytes()
    with pytest.raises(CheckpointError) as caught:
        WeightFile(bad)
    message = str(caught.value)
    assert str(bad) in message, message
    assert reason in message, message
    assert "--force-download" in message and "sdaccel.tools.toys.random_checkpoints" in message, message
    assert bad.read_bytes() == before, "checking a file must not change it"
    with pytest.raises(CheckpointError, match="truncated or corrupt|is empty"):
        open_weights(tmp_path, "unet")  # the path every loader takes


def test_good_file_passes_the_check(tmp_path):
    data = _good_file_bytes(tmp_path)
    wf = WeightFile(tmp_path / "good.safetensors")
    assert wf.keys() == ["a", "b"] and len(data) == (tmp_path / "good.safetensors").stat().st_size
    np.testing.assert_array_equal(wf.get("a"), np.arange(12, dtype=np.float32).reshape(3, 4))


def test_dtype_the_reader_cannot_map_is_named(tmp_path):
    data = _good_file_bytes(tmp_path)
    # a valid safetensors dtype (one byte per element, like U8) that has no NumPy counterpart here
    edited = _with_header(
        data, lambda h: h.update(c={"dtype": "F8_E4M3", "shape": [2], "data_offsets": [58, 60]})
    )
    path = tmp_path / "f8.safetensors"
    path.write_bytes(edited + b"\x00\x00")
    with pytest.raises(CheckpointError, match=r"f8\.safetensors.*F8_E4M3.*float16 or bfloat16"):
        WeightFile(path)


def test_truncated_hub_download_names_the_repo(tmp_path):
    snapshot = tmp_path / "hub" / "models--stabilityai--stable-diffusion-xl-base-1.0" / "snapshots" / "abc"
    bad = snapshot / "unet" / "diffusion_pytorch_model.safetensors"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(_good_file_bytes(tmp_path)[:-1])
    with pytest.raises(
        CheckpointError, match=r"hf download stabilityai/stable-diffusion-xl-base-1\.0 --force-download"
    ):
        open_weights(snapshot, "unet")


def test_missing_shard_is_named(tmp_path):
    unet = tmp_path / "unet"
    unet.mkdir()
    index = {"weight_map": {"a": "diffusion_pytorch_model-00001-of-00002.safetensors"}}
    (unet / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"Missing weight file .*00001-of-00002\.safetensors"):
        open_weights(tmp_path, "unet")


def test_truncated_tiny_checkpoint_fails_before_loading(tiny_sd15, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_sd15, broken)
    weights = broken / "vae" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"vae/diffusion_pytorch_model\.safetensors .*truncated"):
        open_weights(broken, "vae")
    assert open_weights(broken, "unet").keys(), "the intact components still open"


def test_check_weight_files_names_the_broken_component(tiny_sd15, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_sd15, copy)
    files = check_weight_files(copy)
    assert {f.parent.name for f in files} == {"unet", "vae", "text_encoder"}
    assert [f.parent.name for f in check_weight_files(copy, ["unet"])] == ["unet"]
    (copy / "text_encoder" / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"text_encoder/model\.safetensors is empty"):
        check_weight_files(copy)
    assert check_weight_files(copy, ["unet", "vae"]), "the other components are still whole"


def test_a_hub_snapshot_is_shown_by_its_id_and_revision_not_its_path():
    revision = "e496c488a3d20780fc0227b105d27f6dbd35be50"
    cache = "/home/ana/.cache/huggingface/hub"
    folder = f"{cache}/models--stable-diffusion-v1-5--stable-diffusion-v1-5/snapshots/{revision}"
    assert (
        shown_path(folder) == "hub cache: stable-diffusion-v1-5/stable-diffusion-v1-5, revision e496c488a3d2"
    )
    assert shown_path(f"{folder}/unet") == (
        "hub cache: stable-diffusion-v1-5/stable-diffusion-v1-5, revision e496c488a3d2, unet"
    )
    assert shown_path("../checkpoints/tiny-shapes-sd15") == "../checkpoints/tiny-shapes-sd15"  # as given
    assert shown_path(f"{cache}/models--org--name") == f"{cache}/models--org--name"  # not a snapshot
