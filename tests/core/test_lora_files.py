"""LoRA files (sdaccel.core.lora_files), with no framework of ours: reading the diffusers/peft
layout (against peft's own deltas) and the kohya layouts (against the diffusers adapter), the SGM
names of SDXL, the older diffusers names, writing kohya files, and the errors of a file.

The adapter is made here with peft on the trained tiny SDXL checkpoint (random, non-zero factors on
the UNet's attention, feed-forward, resnet convolutions (3x3 and 1x1), embeddings and samplers, and
on both text encoders' attention and MLP), saved with diffusers' ``save_lora_weights``, and written
again in the kohya layout by :func:`sdaccel.core.lora_files.save_kohya`, also with SDXL's SGM names.
The module names it is resolved against come from the checkpoint's safetensors headers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from sdaccel.core import lora_files
from sdaccel.core.checkpoint import open_weights

CHECKPOINT = Path(__file__).resolve().parents[2] / "checkpoints" / "tiny-shapes-sdxl"


def checkpoint_targets(src: Path) -> dict[str, dict[str, tuple[int, ...]]]:
    """component -> module -> weight shape (PyTorch layout) of every linear and convolution weight
    of the checkpoint, from the safetensors headers (text encoders without ``text_model.``)."""
    out = {}
    for component in lora_files.COMPONENTS:
        reader = open_weights(src, component)
        out[component] = {
            key.removesuffix(".weight").removeprefix("text_model."): reader.shape(key)
            for key in reader.keys()
            if key.endswith(".weight") and len(reader.shape(key)) in (2, 4) and "embeddings." not in key
        }
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory, peft_lora):
    """{"diffusers", "kohya", "sgm"}: the SDXL adapter's paths; "deltas": peft's, by (component, module)."""
    # 1. A peft LoRA on every UNet and text-encoder target, with small random factors, and peft's deltas
    folder = tmp_path_factory.mktemp("lora-files")
    path, deltas = peft_lora.make(CHECKPOINT, folder)
    # 2. The kohya files written from it
    targets = checkpoint_targets(CHECKPOINT)
    resolved = lora_files.read_lora(path).resolve(targets)
    return {
        "diffusers": path,
        "deltas": deltas,
        "targets": targets,
        "kohya": lora_files.save_kohya(resolved, folder / "kohya.safetensors", sdxl=True),
        "sgm": lora_files.save_kohya(
            resolved, folder / "sgm.safetensors", sdxl=True, unet_modules=targets["unet"]
        ),
    }


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


def test_read_diffusers_layout_matches_peft_deltas(files, peft_lora):
    adapter = lora_files.read_lora(files["diffusers"])
    assert adapter.layout == "diffusers"
    deltas = files["deltas"]
    assert len(adapter) == len(deltas) > 100
    # alpha and rank from peft's config in the file's metadata: 8 / 4 for the UNet, 1 / 2 for text
    unet = adapter.layers["unet"]
    assert {(layer.rank, layer.scale) for layer in unet.values()} == {
        (peft_lora.UNET_RANK, peft_lora.UNET_ALPHA / peft_lora.UNET_RANK)
    }
    for component in ("text_encoder", "text_encoder_2"):
        scales = {layer.scale for layer in adapter.layers[component].values()}
        assert scales == {peft_lora.TEXT_ALPHA / peft_lora.TEXT_RANK}
    # 3x3 and 1x1 convolution LoRAs, and linear ones
    kinds = {tuple(layer.down.shape[2:]) for layer in unet.values()}
    assert kinds == {(), (1, 1), (3, 3)}
    for (component, module), expected in deltas.items():
        got = adapter.layers[component][module].delta()  # the file's names, as peft's
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"{component}.{module}")


@pytest.mark.parametrize("layout", ["kohya", "sgm"])
def test_kohya_layouts_resolve_to_the_diffusers_adapter(files, layout):
    targets = files["targets"]
    reference = lora_files.read_lora(files["diffusers"]).resolve(targets)
    adapter = lora_files.read_lora(files[layout])
    assert adapter.layout == "kohya"
    assert all(name.startswith(lora_files.KOHYA) for layers in adapter.layers.values() for name in layers)
    resolved = adapter.resolve(targets)
    assert {c: sorted(v) for c, v in resolved.layers.items()} == {
        c: sorted(v) for c, v in reference.layers.items()
    }
    for component, layers in reference.layers.items():
        for module, layer in layers.items():
            np.testing.assert_array_equal(resolved.layers[component][module].delta(), layer.delta())


def test_old_diffusers_names(tmp_path):
    rng = np.random.default_rng(0)
    down, up = rng.standard_normal((2, 8), np.float32), rng.standard_normal((8, 2), np.float32)
    tensors = {
        "unet.mid_block.attentions.0.transformer_blocks.0.attn1.processor.to_out_lora.down.weight": down,
        "unet.mid_block.attentions.0.transformer_blocks.0.attn1.processor.to_out_lora.up.weight": up,
        "unet.mid_block.attentions.0.proj_in.lora.down.weight": down,
        "unet.mid_block.attentions.0.proj_in.lora.up.weight": up,
        "unet.mid_block.attentions.0.proj_in.alpha": np.asarray(1.0, np.float32),
        "text_encoder.text_model.encoder.layers.0.self_attn.to_k_lora.down.weight": down,
        "text_encoder.text_model.encoder.layers.0.self_attn.to_k_lora.up.weight": up,
        "text_encoder.text_model.encoder.layers.0.mlp.fc1.lora_linear_layer.down.weight": down,
        "text_encoder.text_model.encoder.layers.0.mlp.fc1.lora_linear_layer.up.weight": up,
    }
    save_file(tensors, str(tmp_path / "old.safetensors"))
    adapter = lora_files.read_lora(tmp_path / "old.safetensors")
    assert sorted(adapter.layers["unet"]) == [
        "mid_block.attentions.0.proj_in",
        "mid_block.attentions.0.transformer_blocks.0.attn1.to_out.0",
    ]
    assert adapter.layers["unet"]["mid_block.attentions.0.proj_in"].scale == 0.5  # alpha 1, rank 2
    assert adapter.layers["unet"]["mid_block.attentions.0.transformer_blocks.0.attn1.to_out.0"].scale == 1.0
    assert sorted(adapter.layers["text_encoder"]) == [
        "text_model.encoder.layers.0.mlp.fc1",
        "text_model.encoder.layers.0.self_attn.k_proj",
    ]
    np.testing.assert_allclose(
        adapter.layers["unet"]["mid_block.attentions.0.proj_in"].delta(2.0), up @ down, rtol=1e-6
    )


# ----------------------------------------------------------------------------------------------
# Names
# ----------------------------------------------------------------------------------------------


def test_sgm_names_of_sdxl():
    names = lora_files.sgm_names(
        [
            "conv_in",
            "down_blocks.1.resnets.1.conv1",
            "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q",
            "down_blocks.0.downsamplers.0.conv",
            "down_blocks.0.resnets.0.conv1",
            "mid_block.resnets.1.time_emb_proj",
            "mid_block.attentions.0.proj_in",
            "up_blocks.0.attentions.2.proj_out",
            "up_blocks.0.upsamplers.0.conv",
            "up_blocks.2.resnets.1.conv_shortcut",
            "up_blocks.1.upsamplers.0.conv",
            "up_blocks.1.attentions.0.proj_in",
            "down_blocks.0.resnets.1.conv2",
            "up_blocks.2.resnets.2.conv1",
            "add_embedding.linear_1",
        ]
    )
    # SDXL's layout: 2 layers per block (from down_blocks.0's resnets), attention in up blocks 0
    # and 1 (kohya's names for the real SDXL: lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q)
    assert names == {
        "conv_in": "input_blocks.0.0",
        "down_blocks.1.resnets.1.conv1": "input_blocks.5.0.in_layers.2",
        "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q": "input_blocks.4.1.transformer_blocks.0.attn1.to_q",
        "down_blocks.0.downsamplers.0.conv": "input_blocks.3.0.op",
        "down_blocks.0.resnets.0.conv1": "input_blocks.1.0.in_layers.2",
        "mid_block.resnets.1.time_emb_proj": "middle_block.2.emb_layers.1",
        "mid_block.attentions.0.proj_in": "middle_block.1.proj_in",
        "up_blocks.0.attentions.2.proj_out": "output_blocks.2.1.proj_out",
        "up_blocks.0.upsamplers.0.conv": "output_blocks.2.2.conv",
        "up_blocks.2.resnets.1.conv_shortcut": "output_blocks.7.0.skip_connection",
        "up_blocks.1.upsamplers.0.conv": "output_blocks.5.2.conv",
        "up_blocks.1.attentions.0.proj_in": "output_blocks.3.1.proj_in",
        "down_blocks.0.resnets.1.conv2": "input_blocks.2.0.out_layers.3",
        "up_blocks.2.resnets.2.conv1": "output_blocks.8.0.in_layers.2",
        "add_embedding.linear_1": "label_emb.0.0",
    }


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


def test_the_errors_of_a_file(tmp_path):
    with pytest.raises(lora_files.LoraError, match="No LoRA file"):
        lora_files.read_lora(tmp_path / "missing.safetensors")
    (tmp_path / "lora.bin").write_bytes(b"\0" * 16)
    with pytest.raises(lora_files.LoraError, match="safetensors only"):
        lora_files.read_lora(tmp_path / "lora.bin")
    save_file(
        {"unet.conv_in.lora_magnitude_vector": np.ones(4, np.float32)}, str(tmp_path / "dora.safetensors")
    )
    with pytest.raises(lora_files.LoraError, match="DoRA"):
        lora_files.read_lora(tmp_path / "dora.safetensors")
    save_file(
        {"lora_unet_conv_in.lora_down.weight": np.ones((2, 4), np.float32)},
        str(tmp_path / "half.safetensors"),
    )
    with pytest.raises(lora_files.LoraError, match="needs both lora_down and lora_up"):
        lora_files.read_lora(tmp_path / "half.safetensors")
