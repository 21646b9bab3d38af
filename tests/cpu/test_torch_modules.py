"""The PyTorch wrappers that the exporters trace (``sdaccel.cpu.torch_modules``): each returns what
the diffusers/transformers module it wraps computes, as plain tensors in the export's order."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sdaccel.cpu import torch_modules as TM  # noqa: E402
from sdaccel.cpu.deepcache import CUTS, cached_shape  # noqa: E402


@pytest.fixture(scope="module")
def unet(tiny_sd15):
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel.from_pretrained(tiny_sd15 / "unet", dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def unet_inputs(unet):
    generator = torch.Generator().manual_seed(0)
    sample = torch.randn(2, unet.config.in_channels, 8, 8, generator=generator)
    context = torch.randn(2, 77, unet.config.cross_attention_dim, generator=generator)
    return sample, torch.tensor([500], dtype=torch.int64), context


@torch.no_grad()
def test_the_unet_wrapper_is_the_unet(unet, unet_inputs):
    expected = unet(*unet_inputs, return_dict=False)[0]
    torch.testing.assert_close(TM.UNet(unet)(*unet_inputs), expected)


@pytest.mark.parametrize("cut", CUTS)
@torch.no_grad()
def test_deepcache_full_and_shallow_are_the_unet_cut_in_two(unet, unet_inputs, cut):
    expected = unet(*unet_inputs, return_dict=False)[0]
    out, cached = TM.DeepCacheFull(unet, cut)(*unet_inputs)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert tuple(cached.shape) == cached_shape(dict(unet.config), 2, 8, 8, cut)
    # the shallow UNet on the feature of the same step gives the full UNet's output back
    shallow = TM.DeepCacheShallow(unet, cut)(*unet_inputs, cached=cached)
    torch.testing.assert_close(shallow, expected, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_the_layer_cut_leaves_the_shallow_part_only_the_last_layer(unet, unet_inputs):
    """The layer cut's shallow part runs conv_in, the last up block's last ResNet and attention and
    conv_out: no layer of the first down block, no other layer of the last up block."""
    first, last = unet.down_blocks[0], unet.up_blocks[-1]
    names = {id(r): f"down {i}" for i, r in enumerate(first.resnets)}
    names |= {id(r): f"up {i}" for i, r in enumerate(last.resnets)}
    every_layer = list(names.values())
    ran = []
    hooks = [
        resnet.register_forward_hook(lambda module, *_: ran.append(names[id(module)]))
        for resnet in [*first.resnets, *last.resnets]
    ]
    try:
        _, cached = TM.DeepCacheFull(unet, "layer")(*unet_inputs)
        assert ran == every_layer
        ran.clear()
        TM.DeepCacheShallow(unet, "layer")(*unet_inputs, cached=cached)
        assert ran == [f"up {len(last.resnets) - 1}"]
        _, cached = TM.DeepCacheFull(unet, "block")(*unet_inputs)
        ran.clear()
        TM.DeepCacheShallow(unet, "block")(*unet_inputs, cached=cached)
        assert ran == every_layer
    finally:
        for hook in hooks:
            hook.remove()


def test_an_unknown_cut_is_refused(unet):
    with pytest.raises(ValueError, match="cut must be one of"):
        TM.DeepCacheFull(unet, "branch")


@torch.no_grad()
def test_the_text_encoder_wrapper_puts_hidden_states_last(tiny_sd15):
    import transformers

    model = transformers.CLIPTextModel.from_pretrained(tiny_sd15 / "text_encoder", dtype=torch.float32).eval()
    ids = torch.arange(77, dtype=torch.int64)[None] % model.config.vocab_size
    outputs = TM.TextEncoder(model, with_projection=False)(ids)
    reference = model(input_ids=ids, output_hidden_states=True)
    assert len(outputs) == 2 + model.config.num_hidden_layers + 1
    torch.testing.assert_close(outputs[0], reference.last_hidden_state)
    torch.testing.assert_close(outputs[1], reference.pooler_output)
    torch.testing.assert_close(outputs[-1], reference.hidden_states[-1])


@torch.no_grad()
def test_the_vae_wrappers_decode_and_encode_as_the_vae(tiny_sd15):
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(tiny_sd15 / "vae", dtype=torch.float32).eval()
    latents = torch.randn(1, vae.config.latent_channels, 4, 4, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(TM.VAEDecoder(vae)(latents), vae.decode(latents).sample)
    image = TM.VAEDecoder(vae)(latents).clamp(-1, 1)
    moments = TM.VAEEncoder(vae)(image)
    torch.testing.assert_close(moments, vae.quant_conv(vae.encoder(image)))
