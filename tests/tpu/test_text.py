"""Prompt encoding against diffusers' ``encode_prompt`` on the tiny SDXL and SD 1.5 checkpoints."""

import numpy as np
import pytest

from sdaccel.tpu import text

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

PROMPTS = ["a photo of an astronaut riding a horse", "a red cat on a blue mountain"]


@pytest.fixture(scope="module")
def sdxl_pair(tiny_sdxl):
    ours = text.load_prompt_encoder(tiny_sdxl, progress=False, force_zeros_for_empty_prompt=True)
    ref = diffusers.StableDiffusionXLPipeline.from_pretrained(tiny_sdxl, dtype=torch.float32)
    return ours, ref


def _close(ours, ref, tol=1e-5):
    ours, ref = np.asarray(ours), ref.detach().numpy()
    assert ours.shape == ref.shape
    err = np.abs(ours - ref).max()
    assert err < tol, f"max abs err {err:.2e}"


def _sdxl_reference(pipe, prompts, negative_prompts):
    with torch.no_grad():
        return pipe.encode_prompt(
            prompts, device="cpu", do_classifier_free_guidance=True, negative_prompt=negative_prompts
        )


def test_sdxl_tokenizers(sdxl_pair):
    ours, _ = sdxl_pair
    ids, ids_2 = ours.tokenize(["a cat"])
    assert ids.shape == ids_2.shape == (1, 77) and ids.dtype == np.int32
    # the OpenCLIP tokenizer pads with "!", the OpenAI one with <|endoftext|>
    assert ids_2[0, -1] == ours.tokenizers[1].convert_tokens_to_ids("!")
    assert ids[0, -1] == ours.tokenizers[0].convert_tokens_to_ids("<|endoftext|>")


@pytest.mark.parametrize("negative", [None, ["blurry", ""], "purple"], ids=["none_zeros", "list", "string"])
def test_sdxl_matches_diffusers(sdxl_pair, negative):
    ours, ref = sdxl_pair
    embeds, neg_embeds, pooled, neg_pooled = _sdxl_reference(ref, PROMPTS, negative)
    out = ours(PROMPTS, negative)
    assert out.prompt_embeds.shape == (2, 77, 64)  # 32 + 32 features of the two tiny encoders
    _close(out.prompt_embeds, embeds)
    _close(out.pooled, pooled)
    _close(out.negative_prompt_embeds, neg_embeds)
    _close(out.negative_pooled, neg_pooled)
    if negative is None:  # force_zeros_for_empty_prompt
        assert not np.asarray(out.negative_prompt_embeds).any() and not np.asarray(out.negative_pooled).any()
    else:
        assert np.asarray(out.negative_pooled).any()


def test_sdxl_without_force_zeros(tiny_sdxl):
    """With force_zeros_for_empty_prompt false, no negative prompt means the encoded ""."""
    ours = text.load_prompt_encoder(tiny_sdxl, progress=False, force_zeros_for_empty_prompt=False)
    ref = diffusers.StableDiffusionXLPipeline.from_pretrained(
        tiny_sdxl, dtype=torch.float32, force_zeros_for_empty_prompt=False
    )
    assert ref.config.force_zeros_for_empty_prompt is False
    _, neg_embeds, _, neg_pooled = _sdxl_reference(ref, PROMPTS, None)
    out = ours(PROMPTS)
    _close(out.negative_prompt_embeds, neg_embeds)
    _close(out.negative_pooled, neg_pooled)
    assert np.asarray(out.negative_pooled).any()


def test_sdxl_no_guidance(sdxl_pair):
    ours, ref = sdxl_pair
    with torch.no_grad():
        embeds, _, pooled, _ = ref.encode_prompt(PROMPTS[:1], device="cpu", do_classifier_free_guidance=False)
    out = ours(PROMPTS[0], do_classifier_free_guidance=False)
    assert out.negative_prompt_embeds is None and out.negative_pooled is None
    _close(out.prompt_embeds, embeds)
    _close(out.pooled, pooled)


def test_truncation_warns_and_matches(sdxl_pair):
    ours, ref = sdxl_pair
    long_prompt = " ".join(["a photo of a red cat"] * 20)  # 100 words: far over 77 tokens
    n_tokens = len(ours.tokenizers[0](long_prompt)["input_ids"])
    with pytest.warns(UserWarning, match=f"the last {n_tokens - 77} tokens were dropped"):
        out = ours([long_prompt], negative_prompts=[""])
    embeds, neg_embeds, pooled, _ = _sdxl_reference(ref, [long_prompt], [""])
    _close(out.prompt_embeds, embeds)
    _close(out.pooled, pooled)
    _close(out.negative_prompt_embeds, neg_embeds)


def test_sd15_matches_diffusers(tiny_sd15):
    ours = text.load_prompt_encoder(tiny_sd15, progress=False)
    ref = diffusers.StableDiffusionPipeline.from_pretrained(
        tiny_sd15, dtype=torch.float32, safety_checker=None, requires_safety_checker=False
    )
    assert not ours.is_sdxl
    for negative in (None, ["ugly", "dark"]):
        with torch.no_grad():
            embeds, neg_embeds = ref.encode_prompt(PROMPTS, "cpu", 1, True, negative_prompt=negative)
        out = ours(PROMPTS, negative)
        assert out.pooled is None and out.negative_pooled is None
        _close(out.prompt_embeds, embeds)
        _close(out.negative_prompt_embeds, neg_embeds)  # None -> "" encoded (no zeros for SD 1.x)


def test_bf16_close(tiny_sdxl, sdxl_pair):
    """bfloat16 keeps 8 bits of mantissa (relative step 2**-8 = 0.4%); through three layers of
    a tiny encoder the hidden states (|x| ~ 1-4) stay within a few hundredths of float32."""
    import jax.numpy as jnp

    fp32, _ = sdxl_pair
    bf16 = text.load_prompt_encoder(
        tiny_sdxl, dtype=jnp.bfloat16, progress=False, force_zeros_for_empty_prompt=True
    )
    a, b = fp32(PROMPTS), bf16(PROMPTS)
    assert b.prompt_embeds.dtype == jnp.bfloat16
    scale = np.abs(np.asarray(a.prompt_embeds)).max()
    err = np.abs(np.asarray(a.prompt_embeds) - np.asarray(b.prompt_embeds, np.float32)).max()
    assert err < 0.03 * scale, (err, scale)


def test_negative_prompt_count_mismatch(sdxl_pair):
    ours, _ = sdxl_pair
    with pytest.raises(ValueError, match="2 negative prompts for 1 prompts"):
        ours(["a cat"], ["a", "b"])
