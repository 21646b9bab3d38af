"""The PyTorch wrapper modules that the OpenVINO exports trace.

Each wraps a diffusers/transformers module in a ``torch.nn.Module`` whose ``forward`` takes and
returns plain tensors (what ``openvino.convert_model`` traces). This module imports torch at the
top; the exporters (:mod:`sdaccel.cpu.export`, :mod:`sdaccel.cpu.deepcache`, :mod:`sdaccel.cpu.tome`)
import it inside the functions that convert, so that importing them does not import torch.

- :class:`TextEncoder`, :class:`UNet`, :class:`VAEDecoder`, :class:`VAEEncoder`: one component
  each, with GenAI's inputs and outputs (:mod:`sdaccel.cpu.export`).
- :class:`UNetPieces`, :class:`DeepCacheFull`, :class:`DeepCacheShallow`: the UNet cut at the
  input of its last up block, for DeepCache (:mod:`sdaccel.cpu.deepcache`).
"""

from __future__ import annotations

import torch

from sdaccel.core.checkpoint import CheckpointError

__all__ = [
    "DeepCacheFull",
    "DeepCacheShallow",
    "TextEncoder",
    "UNet",
    "UNetPieces",
    "VAEDecoder",
    "VAEEncoder",
    "call_block",
]

# ----------------------------------------------------------------------------------------------
# One component each (export.py): plain tensor inputs and a flat tuple of outputs
# ----------------------------------------------------------------------------------------------


class TextEncoder(torch.nn.Module):
    """CLIP text encoder -> (first outputs..., hidden_states.0, ..., hidden_states.N)."""

    def __init__(self, model, with_projection: bool):
        super().__init__()
        self.model = model
        self.with_projection = with_projection

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, output_hidden_states=True, return_dict=True)
        first = (
            (out.text_embeds, out.last_hidden_state)
            if self.with_projection
            else (out.last_hidden_state, out.pooler_output)
        )
        return (*first, *out.hidden_states)


class UNet(torch.nn.Module):
    """UNet2DConditionModel -> noise prediction; SDXL's added conditioning as two inputs."""

    def __init__(self, unet):
        super().__init__()
        self.unet = unet

    def forward(
        self, sample, timestep, encoder_hidden_states, text_embeds=None, time_ids=None, timestep_cond=None
    ):
        added = None if text_embeds is None else {"text_embeds": text_embeds, "time_ids": time_ids}
        return self.unet(
            sample,
            timestep,
            encoder_hidden_states,
            timestep_cond=timestep_cond,
            added_cond_kwargs=added,
            return_dict=False,
        )[0]


class VAEDecoder(torch.nn.Module):
    """Latents (already divided by the scaling factor) -> image in [-1, 1]."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latent_sample):
        return self.vae.decode(latent_sample, return_dict=False)[0]


class VAEEncoder(torch.nn.Module):
    """Image in [-1, 1] -> the Gaussian's parameters (mean and log-variance, concatenated)."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, sample):
        moments = self.vae.encoder(sample)
        if self.vae.quant_conv is not None:
            moments = self.vae.quant_conv(moments)
        return moments


# ----------------------------------------------------------------------------------------------
# The UNet in four pieces (deepcache.py)
# ----------------------------------------------------------------------------------------------


def call_block(block, context, **kwargs):
    """A down/mid/up block, given the text context only if it has cross-attention."""
    if getattr(block, "has_cross_attention", False):
        kwargs["encoder_hidden_states"] = context
    return block(**kwargs)


#: Where DeepCache may cut the UNet, as :data:`sdaccel.cpu.deepcache.CUTS` names them (the exporter
#: imports this module, so the names are repeated here; a test proves they agree).
CUTS = ("block", "layer")


class UNetPieces(torch.nn.Module):
    """One diffusers ``UNet2DConditionModel`` cut where ``cut`` says
    (:data:`sdaccel.cpu.deepcache.CUTS`: at the input of the last up block, or of its last layer).

    ``embed`` -> ``head`` -> ``deep`` -> ``tail`` is the UNet's own forward (for SD 1.x/2.x
    and SDXL: no ControlNet residuals, masks or class labels); DeepCache skips ``deep``.
    """

    def __init__(self, unet, cut: str = "block"):
        super().__init__()
        if cut not in CUTS:
            raise ValueError(f"cut must be one of {list(CUTS)}, got {cut!r}.")
        self.cut = cut
        cfg = unet.config
        if cfg.class_embed_type is not None or cfg.center_input_sample:
            raise CheckpointError("DeepCache export supports SD 1.x/2.x and SDXL UNets only.")
        if cfg.addition_embed_type not in (None, "text_time"):
            raise CheckpointError(f"UNet addition_embed_type={cfg.addition_embed_type!r} is not supported.")
        if len(unet.up_blocks) < 2:
            raise CheckpointError("A one-level UNet has no deep part to cache.")
        self.unet = unet

    def embed(self, sample, timestep, encoder_hidden_states, text_embeds, time_ids):
        """The timestep embedding (plus SDXL's pooled text and size embedding) and the context."""
        u = self.unet
        added = None if text_embeds is None else {"text_embeds": text_embeds, "time_ids": time_ids}
        emb = u.time_embedding(u.get_time_embed(sample=sample, timestep=timestep))
        aug = u.get_aug_embed(emb=emb, encoder_hidden_states=encoder_hidden_states, added_cond_kwargs=added)
        emb = emb if aug is None else emb + aug
        if u.time_embed_act is not None:
            emb = u.time_embed_act(emb)
        context = u.process_encoder_hidden_states(
            encoder_hidden_states=encoder_hidden_states, added_cond_kwargs=added
        )
        return emb, context

    def head(self, sample, emb, context) -> list:
        """The full-resolution features that the skip connections carry to the tail, computed
        every step: ``conv_in``, and with the block cut the first down block up to its
        downsampler."""
        u = self.unet
        skips = [u.conv_in(sample)]
        if self.cut == "block":
            skips.extend(self.first_down_layers(skips[-1], emb, context))
        return skips

    def first_down_layers(self, hidden, emb, context) -> list:
        """The first down block's layers (ResNet, then attention if any), without its downsampler:
        each layer's output, a skip feature."""
        first = self.unet.down_blocks[0]
        attentions = getattr(first, "attentions", None) or [None] * len(first.resnets)
        outputs = []
        for resnet, attention in zip(first.resnets, attentions, strict=True):
            hidden = resnet(hidden, emb)
            if attention is not None:
                hidden = attention(hidden, encoder_hidden_states=context, return_dict=False)[0]
            outputs.append(hidden)
        return outputs

    def up_layers(self, block, hidden, skips: list, emb, context, layers: slice):
        """``layers`` of an up block without its upsampler, as its forward runs them: each takes the
        last skip feature, concatenated to the hidden state, through its ResNet and attention."""
        attentions = getattr(block, "attentions", None) or [None] * len(block.resnets)
        for resnet, attention in list(zip(block.resnets, attentions, strict=True))[layers]:
            hidden = resnet(torch.cat([hidden, skips.pop()], dim=1), emb)
            if attention is not None:
                hidden = attention(hidden, encoder_hidden_states=context, return_dict=False)[0]
        return hidden

    def deep(self, skips: list, emb, context):
        """Everything in between: the first down block's downsampler (and with the layer cut its
        layers too), the other down blocks, the mid block and every up block but the last (and with
        the layer cut the last one's layers but its last). Returns the feature DeepCache caches."""
        u = self.unet
        skips = list(skips)  # the head's own list stays for the tail
        if self.cut == "layer":
            skips.extend(self.first_down_layers(skips[-1], emb, context))
        hidden = skips[-1]
        if u.down_blocks[0].downsamplers is not None:
            for downsampler in u.down_blocks[0].downsamplers:
                hidden = downsampler(hidden)
            skips.append(hidden)
        for block in u.down_blocks[1:]:
            hidden, res = call_block(block, context, hidden_states=hidden, temb=emb)
            skips.extend(res)
        if u.mid_block is not None:
            hidden = call_block(u.mid_block, context, hidden_states=hidden, temb=emb)
        # as diffusers does: pass the skip's size to the upsamplers when the latent size is
        # not a multiple of the total upsampling factor
        odd = any(size % 2**u.num_upsamplers for size in skips[0].shape[-2:])
        for block in u.up_blocks[:-1]:
            n = len(block.resnets)
            res, skips = skips[-n:], skips[:-n]
            hidden = call_block(
                block,
                context,
                hidden_states=hidden,
                temb=emb,
                res_hidden_states_tuple=tuple(res),
                upsample_size=skips[-1].shape[2:] if odd else None,
            )
        if self.cut == "layer":  # the last up block's layers but its last, on the first down block's skips
            hidden = self.up_layers(u.up_blocks[-1], hidden, skips, emb, context, slice(None, -1))
        return hidden

    def tail(self, cached, skips: list, emb, context):
        """The last up block (with the layer cut its last layer) on the (cached) deep feature and
        the head's skips, then the output."""
        u = self.unet
        if self.cut == "layer":
            hidden = self.up_layers(u.up_blocks[-1], cached, list(skips), emb, context, slice(-1, None))
        else:
            hidden = call_block(
                u.up_blocks[-1], context, hidden_states=cached, temb=emb, res_hidden_states_tuple=tuple(skips)
            )
        if u.conv_norm_out is not None:
            hidden = u.conv_act(u.conv_norm_out(hidden))
        return u.conv_out(hidden)


class DeepCacheFull(UNetPieces):
    """The whole UNet -> (noise prediction, cached feature)."""

    def forward(self, sample, timestep, encoder_hidden_states, text_embeds=None, time_ids=None):
        emb, context = self.embed(sample, timestep, encoder_hidden_states, text_embeds, time_ids)
        skips = self.head(sample, emb, context)
        cached = self.deep(skips, emb, context)
        return self.tail(cached, skips, emb, context), cached


class DeepCacheShallow(UNetPieces):
    """The UNet without its deep part, which a cached feature replaces -> noise prediction."""

    def forward(self, sample, timestep, encoder_hidden_states, text_embeds=None, time_ids=None, cached=None):
        emb, context = self.embed(sample, timestep, encoder_hidden_states, text_embeds, time_ids)
        return self.tail(cached, self.head(sample, emb, context), emb, context)
