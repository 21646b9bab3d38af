"""The shapes trainer writes real diffusers checkpoints, and the committed one draws what it is asked."""

import json
from pathlib import Path

import numpy as np
import pytest

from sdaccel import shapes, train_tiny

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "checkpoints" / "tiny-shapes-sdxl"

#: Adherence (colour and shape right) of the committed checkpoint on the prompts of
#: test_committed_checkpoint_draws_the_prompt, measured when it was trained, minus a safety margin
#: for other torch/diffusers builds (see checkpoints/tiny-shapes-sdxl/README.md).
MIN_SCORE = 0.6


@pytest.fixture(scope="module")
def smoke_checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("train") / "tiny-shapes-smoke"
    train_tiny.train(folder, train_tiny.SMOKE)
    return folder


def test_tokenizer_spells_caption_words_as_one_token(tmp_path):
    from transformers import CLIPTokenizer

    train_tiny.write_tokenizer(tmp_path, pad_token="!")
    tokenizer = CLIPTokenizer.from_pretrained(tmp_path)
    prompt = "a green triangle on an orange background, bottom right"
    assert tokenizer.tokenize(prompt) == [
        f"{w}</w>" for w in "a green triangle on an orange background , bottom right".split()
    ]
    assert tokenizer.eos_token_id == max(tokenizer.get_vocab().values())  # CLIP pools at the argmax id
    assert tokenizer.pad_token == "!"


def test_smoke_run_writes_a_diffusers_checkpoint(smoke_checkpoint):
    import torch
    from diffusers import StableDiffusionXLPipeline

    log = json.loads((smoke_checkpoint / "training_log.json").read_text())
    assert len(log["vae_loss"]) == train_tiny.SMOKE.vae_steps
    assert len(log["unet_loss"]) == train_tiny.SMOKE.unet_steps
    assert all(np.isfinite(log["unet_loss"]))
    assert {"training_loss.png", "samples.png"} <= {p.name for p in smoke_checkpoint.iterdir()}
    assert not smoke_checkpoint.with_name(smoke_checkpoint.name + ".partial").exists()

    pipe = StableDiffusionXLPipeline.from_pretrained(smoke_checkpoint, torch_dtype=torch.float32)
    assert pipe.vae.config.scaling_factor == log["scaling_factor"] != 0.18215
    pipe.set_progress_bar_config(disable=True)
    image = pipe("a red circle on a blue background, center", num_inference_steps=2, output_type="np").images
    size = train_tiny.SMOKE.image_size
    assert image.shape == (1, size, size, 3) and np.isfinite(image).all()


def test_training_conditioning_matches_the_pipeline(smoke_checkpoint):
    """The UNet is trained on exactly the embeddings StableDiffusionXLPipeline gives it."""
    import torch
    from diffusers import StableDiffusionXLPipeline

    pipe = StableDiffusionXLPipeline.from_pretrained(smoke_checkpoint, torch_dtype=torch.float32)
    prompts = shapes.heldout_prompts(3)
    embeds, pooled = train_tiny.encode_prompts(
        prompts, [pipe.tokenizer, pipe.tokenizer_2], [pipe.text_encoder, pipe.text_encoder_2]
    )
    want = pipe.encode_prompt(prompts, do_classifier_free_guidance=True)
    torch.testing.assert_close(embeds, want[0], rtol=0, atol=0)
    torch.testing.assert_close(pooled, want[2], rtol=0, atol=0)
    # the unconditional input: zeros, which training's caption dropout feeds
    assert not want[1].any() and not want[3].any()
    size = train_tiny.SMOKE.image_size
    ids = pipe._get_add_time_ids((size, size), (0, 0), (size, size), torch.float32, pooled.shape[-1])
    torch.testing.assert_close(ids[0], train_tiny.sdxl_time_ids(size))


@pytest.mark.skipif(not (COMMITTED / "model_index.json").is_file(), reason="no committed checkpoint")
def test_committed_checkpoint_draws_the_prompt():
    prompts = shapes.heldout_prompts(24, seed=0)
    images = train_tiny.generate(COMMITTED, prompts, steps=20, guidance_scale=6.0)
    result = shapes.adherence(images, prompts)
    assert result["score"] >= MIN_SCORE, result
    # and not just a lucky prompt-blind model: the same images against shuffled prompts fail
    assert shapes.adherence(images, prompts[1:] + prompts[:1])["score"] < 0.4
