"""The tiny checkpoints are real diffusers checkpoints: diffusers' own pipelines load and run them."""

import json

import numpy as np
import pytest


def test_layout(tiny_sdxl, tiny_sd15):
    index = json.loads((tiny_sdxl / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionXLPipeline"
    for component in ("unet", "vae", "text_encoder", "text_encoder_2"):
        assert (tiny_sdxl / component / "config.json").is_file()
    for tokenizer in ("tokenizer", "tokenizer_2"):
        assert {"vocab.json", "merges.txt", "tokenizer_config.json"} <= {
            p.name for p in (tiny_sdxl / tokenizer).iterdir()
        }
    unet = json.loads((tiny_sdxl / "unet" / "config.json").read_text())
    assert unet["addition_embed_type"] == "text_time"
    assert (
        json.loads((tiny_sd15 / "model_index.json").read_text())["_class_name"] == "StableDiffusionPipeline"
    )


def test_tokenizers_follow_sdxl_rules(tiny_sdxl):
    from transformers import CLIPTokenizer

    tok1 = CLIPTokenizer.from_pretrained(tiny_sdxl / "tokenizer")
    tok2 = CLIPTokenizer.from_pretrained(tiny_sdxl / "tokenizer_2")
    assert tok1.pad_token == "<|endoftext|>" and tok2.pad_token == "!"
    ids = tok1("a red circle", padding="max_length", max_length=77).input_ids
    assert len(ids) == 77 and ids[0] == tok1.bos_token_id
    assert len(tok1("a red circle").input_ids) == 5  # bos, three whole-word tokens, eos
    # CLIP's legacy pooling takes the argmax id as the end of the prompt: eos must be the largest id
    assert tok1.eos_token_id == max(tok1.get_vocab().values())


def test_weights_load_in_transformers_without_reinitialising(tiny_sdxl):
    """transformers must find every saved tensor (no silent random re-initialisation)."""
    from transformers import CLIPTextModelWithProjection

    model, info = CLIPTextModelWithProjection.from_pretrained(
        tiny_sdxl / "text_encoder_2", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["mismatched_keys"]


@pytest.mark.parametrize("name", ["tiny_sdxl", "tiny_sd15"])
def test_diffusers_runs_them(name, request):
    import torch
    from diffusers import DiffusionPipeline

    folder = request.getfixturevalue(name)
    pipe = DiffusionPipeline.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        "a red circle",
        num_inference_steps=2,
        height=64,
        width=64,
        output_type="np",
        generator=torch.Generator().manual_seed(0),
    ).images
    assert image.shape == (1, 64, 64, 3) and np.isfinite(image).all()


def test_rebuild_is_deterministic(tmp_path, tiny_sd15):
    from sdaccel.tools.toys.random_checkpoints import build_tiny_sd15

    again = build_tiny_sd15(tmp_path / "again")
    a = (tiny_sd15 / "unet" / "diffusion_pytorch_model.safetensors").read_bytes()
    b = (again / "unet" / "diffusion_pytorch_model.safetensors").read_bytes()
    assert a == b


def test_cli(tmp_path, capsys):
    from sdaccel.tools.toys.random_checkpoints import main

    main([str(tmp_path), "--only", "tiny-sd15"])
    assert (tmp_path / "tiny-sd15" / "model_index.json").is_file()
    assert "tiny-sd15" in capsys.readouterr().out
    with pytest.raises(ValueError, match="Unknown tiny checkpoint"):
        from sdaccel.tools.toys.random_checkpoints import ensure_tiny

        ensure_tiny(tmp_path, "tiny-sd3")
