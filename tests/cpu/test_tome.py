"""Token merging (sdaccel.cpu.tome) on the trained tiny SD 1.5 UNet: the ratio is checked before
anything happens, the merged UNet keeps the output's shape and merges only the full-resolution
self-attentions, a merge of nothing is the plain UNet, the exported IR agrees with the patched
PyTorch UNet, and the patch comes off without a trace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")
pytest.importorskip("tomesd")

from sdaccel.cpu import tome  # noqa: E402
from sdaccel.cpu.quality import compile_f32  # noqa: E402

CHECKPOINT = Path(__file__).resolve().parents[2] / "checkpoints" / "tiny-shapes-sd15"
#: The tiny UNet's levels: 8x8 latents (64 tokens) with attention, then 4x4 (16 tokens) in the mid block.
FULL_RES = (
    "down_blocks.0.attentions.0.transformer_blocks.0",
    "up_blocks.1.attentions.0.transformer_blocks.0",
    "up_blocks.1.attentions.1.transformer_blocks.0",
)
MID = "mid_block.attentions.0.transformer_blocks.0"
BAD_RATIOS = [0, 0.0, -0.1, 0.76, 1, 1.5, math.nan, math.inf, "0.5", None, True]


@pytest.fixture(scope="module")
def unet():
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel.from_pretrained(CHECKPOINT / "unet", dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "sample": torch.randn(2, 4, 8, 8, generator=g),
        "timestep": torch.tensor([500], dtype=torch.int64),
        "encoder_hidden_states": torch.randn(2, 77, 32, generator=g),
    }


def _run(unet, inputs) -> torch.Tensor:
    with torch.no_grad():
        return unet(inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"]).sample


@pytest.fixture(scope="module")
def plain(unet, inputs):
    return _run(unet, inputs)


@pytest.mark.parametrize("ratio", BAD_RATIOS, ids=repr)
def test_a_bad_ratio_is_refused_before_anything_happens(ratio, unet, tmp_path):
    with pytest.raises(ValueError, match=r"ratio must be"):
        tome.check_ratio(ratio)
    with pytest.raises(ValueError, match=r"ratio must be"):
        tome.apply_tome(unet, ratio)
    assert not tome.is_patched(unet)
    with pytest.raises(ValueError, match=r"ratio must be"):
        tome.export_tome(CHECKPOINT, tmp_path / "export", ratio)
    assert not (tmp_path / "export").exists()


def test_the_ratio_range():
    assert tome.check_ratio(0.5) == 0.5
    assert tome.check_ratio(tome.MAX_RATIO) == 0.75
    with pytest.raises(ValueError, match=r"0\.75"):
        tome.check_ratio(0.8)


def test_only_a_unet_with_transformer_blocks_is_patched():
    with pytest.raises(ValueError, match="BasicTransformerBlock"):
        tome.apply_tome(torch.nn.Linear(2, 2), 0.5)


def test_merged_unet_keeps_the_shape_and_merges_only_full_resolution_self_attention(unet, inputs, plain):
    with tome.token_merging(unet, 0.5) as seen:
        merged = _run(unet, inputs)
    assert merged.shape == plain.shape
    # int(64 * 0.5) = 32 tokens merged in each full-resolution block; the 4x4 mid block keeps its 16
    assert seen == {
        **{name: {"tokens": 64, "attended": 32} for name in FULL_RES},
        MID: {"tokens": 16, "attended": 16},
    }
    report = tome.merge_report(seen, 0.5, (8, 8))
    assert sorted(report["merged_blocks"]) == list(FULL_RES)
    assert report["unmerged_blocks"] == [MID]
    # it is a different computation: the output moves, by a fraction of its range
    diff = (merged - plain).abs().max().item()
    assert 0.05 < diff < 0.1 * plain.abs().max().item()


def test_a_merge_of_nothing_is_the_plain_unet_and_one_token_stays_close(unet, inputs, plain):
    with tome.token_merging(unet, 0.01) as seen:  # int(64 * 0.01) = 0 tokens: tomesd merges nothing
        none = _run(unet, inputs)
    assert all(row["attended"] == row["tokens"] for row in seen.values())
    assert torch.equal(none, plain)
    with tome.token_merging(unet, 1 / 64) as seen:  # one token of 64 merged in each full-resolution block
        one = _run(unet, inputs)
    assert {seen[name]["attended"] for name in FULL_RES} == {63}
    diff = (one - plain).abs().max().item()
    assert 0 < diff < 2e-2, diff  # measured 0.0099 on an output of max |x| 4.1
    with tome.token_merging(unet, 0.5):
        half = _run(unet, inputs)
    assert diff < (half - plain).abs().max().item()


def test_the_patch_comes_off_without_a_trace(unet, inputs, plain):
    classes = {name: type(m) for name, m in unet.named_modules()}
    tome.apply_tome(unet, 0.5)
    assert tome.is_patched(unet)
    assert not torch.equal(_run(unet, inputs), plain)
    tome.remove_tome(unet)
    assert not tome.is_patched(unet)
    assert {name: type(m) for name, m in unet.named_modules()} == classes
    assert not any(hasattr(m, "_tome_info") for m in unet.modules())
    assert not unet._forward_pre_hooks
    assert torch.equal(_run(unet, inputs), plain)


def test_the_patch_comes_off_after_an_error(unet, inputs, plain):
    with pytest.raises(RuntimeError, match="boom"), tome.token_merging(unet, 0.5):
        raise RuntimeError("boom")
    assert not tome.is_patched(unet)
    assert torch.equal(_run(unet, inputs), plain)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return tome.export_tome(CHECKPOINT, tmp_path_factory.mktemp("tome"), 0.5)


def test_the_exported_ir_runs_in_openvino_and_agrees_with_the_patched_unet(exported, unet, inputs, plain):
    assert exported.name == "ratio-0.5-32x32" and exported.parent.name == tome.FOLDER
    model = ov.Core().read_model(exported / tome.MODEL_XML)
    assert [p.get_any_name() for p in model.inputs] == ["sample", "timestep", "encoder_hidden_states"]
    assert str(model.input("sample").get_partial_shape()) == "[?,4,8,8]"  # one latent size, any batch
    with tome.token_merging(unet, 0.5):
        merged = _run(unet, inputs).numpy()
    compiled = compile_f32(model)
    out = compiled({k: v.numpy() for k, v in inputs.items()})[0]
    assert np.abs(out - merged).max() < 1e-4
    assert np.abs(out - plain.numpy()).max() > 0.05  # the IR merges: it is not the plain UNet
    one = compiled({k: v[:1].numpy() if k != "timestep" else v.numpy() for k, v in inputs.items()})[0]
    assert np.abs(one - out[:1]).max() < 1e-4  # batch 1 (no guidance) runs the same merge
    manifest = json.loads((exported / tome.MANIFEST).read_text())
    assert manifest["ratio"] == 0.5 and (manifest["height"], manifest["width"]) == (32, 32)
    assert manifest["latent_size"] == [8, 8] and manifest["settings"]["use_rand"] is False
    assert manifest["merged_blocks"] == {name: {"tokens": 64, "attended": 32} for name in FULL_RES}


def test_an_export_is_reused_and_a_wrong_size_refused(exported, capsys, tmp_path):
    mtime = (exported / tome.MODEL_XML).stat().st_mtime_ns
    again = tome.export_tome(CHECKPOINT, exported.parents[1], 0.5)
    assert again == exported and (exported / tome.MODEL_XML).stat().st_mtime_ns == mtime
    assert capsys.readouterr().out == ""  # reused in silence
    with pytest.raises(ValueError, match="multiples of"):
        tome.export_tome(CHECKPOINT, tmp_path / "export", 0.5, height=30, width=30)
    assert not (tmp_path / "export").exists()


def test_deepcache_irs_with_token_merging_are_the_merged_unet_cut_in_two(exported, tmp_path):
    """export_tome(deepcache=True): the full IR gives the merged UNet's output and the cached
    feature, and the shallow IR fed that feature gives the same output again (the same step);
    both fix the latent size, as the merged UNet does."""
    folder = tome.export_tome(CHECKPOINT, exported.parents[1], 0.5, deepcache=True)
    assert folder.name == "ratio-0.5-32x32-deepcache"
    assert folder != exported and (exported / tome.MODEL_XML).is_file()  # beside the merged UNet
    full = ov.Core().read_model(folder / "full" / tome.MODEL_XML)
    shallow = ov.Core().read_model(folder / "shallow" / tome.MODEL_XML)
    assert str(full.input("sample").get_partial_shape()) == "[?,4,8,8]"
    assert str(shallow.input("cached").get_partial_shape()) == "[?,64,8,8]"
    g = np.random.default_rng(0)
    x = {
        "sample": g.standard_normal((2, 4, 8, 8), dtype=np.float32),
        "timestep": np.array([500], np.int64),
        "encoder_hidden_states": g.standard_normal((2, 77, 32), dtype=np.float32),
    }
    merged = compile_f32(ov.Core().read_model(exported / tome.MODEL_XML))(x)[0]
    out = compile_f32(full)(x)
    assert np.abs(out["out_sample"] - merged).max() < 1e-4
    again = compile_f32(shallow)({**x, "cached": out["cached"]})["out_sample"]
    assert np.abs(again - merged).max() < 1e-4
    manifest = json.loads((folder / tome.MANIFEST).read_text())
    assert manifest["deepcache"] is True and manifest["merged_blocks"] == {
        name: {"tokens": 64, "attended": 32} for name in FULL_RES
    }
    # reused as it is, and refused for a size it cannot take, before anything is written
    mtime = (folder / "full" / tome.MODEL_XML).stat().st_mtime_ns
    assert tome.export_tome(CHECKPOINT, exported.parents[1], 0.5, deepcache=True) == folder
    assert (folder / "full" / tome.MODEL_XML).stat().st_mtime_ns == mtime
    with pytest.raises(ValueError, match="square images"):
        tome.export_tome(CHECKPOINT, tmp_path / "export", 0.5, height=32, width=64, deepcache=True)
    assert not (tmp_path / "export").exists()
