"""From prompts to the text conditioning of the UNet, as diffusers' pipelines compute it.

Two steps:

1. **Tokenize** with the checkpoint's own CLIP tokenizer(s) (``transformers.CLIPTokenizer``, which
   needs no PyTorch): ``<start> tokens... <end>`` padded to 77 ids. The pad token differs:
   ``<|endoftext|>`` for OpenAI CLIP (``tokenizer``), ``!`` for OpenCLIP (SDXL's ``tokenizer_2``,
   SD 2.x), as each ``tokenizer_config.json`` says. Longer prompts are cut to 77 tokens, with a
   warning that says how many were dropped (the UNet never sees them).
2. **Encode** with the CLIP text encoder(s) in one jitted call:

   - SD 1.x / 2.x: ``prompt_embeds = last_hidden_state`` of the single encoder, (B, 77, 768 or 1024).
   - SDXL: ``prompt_embeds`` = the *penultimate* hidden states of both encoders, concatenated on
     the feature axis (768 + 1280 = 2048), and ``pooled`` = ``text_encoder_2``'s projected pooled
     output (B, 1280), which feeds the UNet's micro-conditioning (``text_time``).

Negative prompts (for classifier-free guidance) follow diffusers exactly:

- SDXL with ``force_zeros_for_empty_prompt`` (its ``model_index.json``; true for SDXL base) and
  *no* negative prompt given (``None``): the unconditional embeddings are zeros, both the sequence
  and the pooled vector. A negative prompt of ``""`` is encoded like any other text.
- SD 1.x / 2.x, or SDXL without that flag: ``None`` means the empty string ``""``, encoded.

Negative prompts are checked by ``sdaccel.core.contract.normalize_negative_prompts`` (one string for
all prompts, or one per prompt).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from transformers import CLIPTokenizer

from sdaccel.core.contract import normalize_negative_prompts
from sdaccel.tpu.models.clip import load_text_encoder


class PromptEmbeddings(NamedTuple):
    """The text conditioning of a batch of B prompts.

    prompt_embeds: (B, 77, D) the sequence the UNet cross-attends to.
    pooled: (B, P) SDXL's pooled text embedding (``text_embeds`` of the UNet), else None.
    negative_prompt_embeds, negative_pooled: the same for the negative prompts, or None when
      classifier-free guidance is off.
    """

    prompt_embeds: jax.Array
    pooled: jax.Array | None
    negative_prompt_embeds: jax.Array | None
    negative_pooled: jax.Array | None


def load_tokenizer(folder: str | os.PathLike, subfolder: str = "tokenizer"):
    """The checkpoint's ``CLIPTokenizer`` (vocabulary, merges, pad token, max length 77)."""
    path = Path(folder) / subfolder
    if not path.is_dir():
        raise FileNotFoundError(f"Missing tokenizer folder {path}.")
    return CLIPTokenizer.from_pretrained(path)


def tokenize(tokenizer, prompts: list[str]) -> np.ndarray:
    """(B, max_length) int32 token ids, padded with the tokenizer's pad token and truncated to
    ``tokenizer.model_max_length`` (77) with a warning naming what was dropped."""
    max_length = tokenizer.model_max_length
    ids = tokenizer(prompts, padding="max_length", max_length=max_length, truncation=True)["input_ids"]
    full = tokenizer(prompts, verbose=False)["input_ids"]
    for i, (prompt, tokens) in enumerate(zip(prompts, full, strict=True)):
        dropped = len(tokens) - max_length
        if dropped > 0:
            removed = tokenizer.decode(tokens[max_length - 1 : -1])
            warnings.warn(
                f"Prompt {i} ({prompt[:40]!r}...) is {len(tokens)} tokens long, but CLIP reads at most "
                f"{max_length} (start and end tokens included): the last {dropped} tokens were dropped: "
                f"{removed!r}",
                stacklevel=2,
            )
    return np.asarray(ids, np.int32)


class PromptEncoder:
    """The tokenizer(s) and text encoder(s) of a checkpoint, and the rule that combines them.

    Args:
      tokenizers, text_encoders: one of each (SD 1.x / 2.x) or two (SDXL: CLIP ViT-L, then
        OpenCLIP bigG with projection), in that order.
      force_zeros_for_empty_prompt: SDXL's flag from ``model_index.json`` (see the module doc).
    """

    def __init__(self, tokenizers: list, text_encoders: list, force_zeros_for_empty_prompt: bool = False):
        if len(tokenizers) != len(text_encoders) or len(tokenizers) not in (1, 2):
            raise ValueError("Pass one tokenizer and text encoder (SD 1.x/2.x) or two of each (SDXL).")
        self.tokenizers = tokenizers
        self.is_sdxl = len(text_encoders) == 2
        self.force_zeros_for_empty_prompt = force_zeros_for_empty_prompt and self.is_sdxl
        graphdefs, params = zip(*(nnx.split(m) for m in text_encoders), strict=True)
        self._graphdefs = graphdefs
        self.params = list(params)
        self._encode = jax.jit(self.encode_ids)

    @property
    def text_encoders(self) -> list:
        return [nnx.merge(g, p) for g, p in zip(self._graphdefs, self.params, strict=True)]

    @property
    def dtype(self):
        """The dtype of the encoders' weights (and so of the embeddings)."""
        return jax.tree.leaves(self.params[0])[0].dtype

    def encode_ids(self, params: list, ids: list[jax.Array]) -> tuple[jax.Array, jax.Array | None]:
        """Pure function: token ids (one (B, 77) array per tokenizer) -> (prompt_embeds, pooled).

        ``params`` are the text encoders' ``nnx.State``; jitted in ``__init__`` so that a sharding
        helper can also wrap it with its own shardings.
        """
        outputs = [nnx.merge(g, p)(x) for g, p, x in zip(self._graphdefs, params, ids, strict=True)]
        if self.is_sdxl:
            embeds = jnp.concatenate([o.penultimate_hidden_state for o in outputs], axis=-1)
            return embeds, outputs[1].pooled
        return outputs[0].last_hidden_state, None

    def tokenize(self, prompts: list[str]) -> list[np.ndarray]:
        """One (B, 77) int32 array per tokenizer."""
        return [tokenize(t, prompts) for t in self.tokenizers]

    def __call__(
        self,
        prompts: str | list[str],
        negative_prompts: str | list[str] | None = None,
        do_classifier_free_guidance: bool = True,
        encode=None,
    ) -> PromptEmbeddings:
        """Encode ``prompts`` (and the negative prompts when guidance is on) in one batch.

        ``encode`` replaces the jitted :meth:`encode_ids` (same signature), e.g. by a version
        compiled ahead of time or with shardings, as :class:`sdaccel.tpu.pipeline.JaxPipeline` does.
        """
        encode = encode or self._encode
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        batch = len(prompts)
        if not do_classifier_free_guidance:
            embeds, pooled = encode(self.params, self.tokenize(prompts))
            return PromptEmbeddings(embeds, pooled, None, None)
        zeros = negative_prompts is None and self.force_zeros_for_empty_prompt
        if zeros:
            texts = prompts
        else:
            negatives = normalize_negative_prompts(negative_prompts, batch) or [""] * batch
            texts = prompts + negatives
        embeds, pooled = encode(self.params, self.tokenize(texts))
        if zeros:
            neg_embeds = jnp.zeros_like(embeds)
            neg_pooled = None if pooled is None else jnp.zeros_like(pooled)
            return PromptEmbeddings(embeds, pooled, neg_embeds, neg_pooled)
        neg_pooled = None if pooled is None else pooled[batch:]
        return PromptEmbeddings(
            embeds[:batch], None if pooled is None else pooled[:batch], embeds[batch:], neg_pooled
        )


def load_prompt_encoder(
    folder: str | os.PathLike,
    dtype=jnp.float32,
    sharding=None,
    progress: bool = True,
    variant: str | None = None,
    force_zeros_for_empty_prompt: bool = False,
) -> PromptEncoder:
    """The ``PromptEncoder`` of a checkpoint: SDXL when it has ``tokenizer_2``/``text_encoder_2``.

    ``sharding`` maps (component name, parameter path) to a ``jax.sharding.Sharding``.
    """
    folder = Path(folder)
    names = ["text_encoder", "text_encoder_2"] if (folder / "text_encoder_2").is_dir() else ["text_encoder"]
    tokenizer_names = [n.replace("text_encoder", "tokenizer") for n in names]
    encoders = [
        load_text_encoder(
            folder,
            name,
            dtype=dtype,
            sharding=None if sharding is None else (lambda path, name=name: sharding(name, path)),
            progress=progress,
            variant=variant,
        )
        for name in names
    ]
    tokenizers = [load_tokenizer(folder, n) for n in tokenizer_names]
    return PromptEncoder(tokenizers, encoders, force_zeros_for_empty_prompt)
