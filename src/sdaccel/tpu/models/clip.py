"""The CLIP text encoders of Stable Diffusion, in Flax NNX.

Stable Diffusion turns a prompt into a sequence of vectors with the text half of CLIP:

- SD 1.x uses OpenAI's CLIP ViT-L/14 text model (12 layers, width 768, ``quick_gelu``) and feeds the
  UNet its ``last_hidden_state`` (after the final LayerNorm). SD 2.x does the same with OpenCLIP ViT-H.
- SDXL uses two encoders: CLIP ViT-L (``text_encoder``) and OpenCLIP ViT-bigG (``text_encoder_2``,
  32 layers, width 1280, exact ``gelu``, with a ``text_projection``). The UNet gets the concatenation
  of both encoders' *penultimate* hidden states (the input of the last layer, without the final
  LayerNorm), and the micro-conditioning gets bigG's projected pooled vector.

The architecture is a pre-norm transformer with causal self-attention (each token only sees the
tokens before it, like a language model)::

    x = token_embedding(ids) + position_embedding(0..n-1)
    for layer in encoder.layers:
        x = x + self_attn(layer_norm1(x))       # causal, heads of width hidden/heads
        x = x + mlp(layer_norm2(x))             # fc1 -> gelu / quick_gelu -> fc2
    last_hidden_state = final_layer_norm(x)
    pooled = last_hidden_state[EOS position]   (then text_projection for SDXL's bigG)

Module names follow ``transformers.CLIPTextModel``, so every parameter's path is its PyTorch key.
transformers 5 saves ``CLIPTextModel`` without the ``text_model.`` prefix that hub checkpoints (and
``CLIPTextModelWithProjection``) carry; the loader accepts both.

Only what Stable Diffusion needs is implemented: no padding attention mask (SD pads prompts to
``max_position_embeddings`` and attends causally over the padding, exactly as the pipelines do) and
no vision tower.
"""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from sdaccel.core.checkpoint import open_weights, read_config
from sdaccel.tpu.models.attention import XLA, attention
from sdaccel.tpu.models.weights import abstract_model, load_weights


def quick_gelu(x):
    """OpenAI CLIP's GELU approximation ``x * sigmoid(1.702 x)`` (transformers' ``quick_gelu``)."""
    return x * jax.nn.sigmoid(1.702 * x)


#: transformers' activation names -> JAX functions. ``gelu`` is the exact (erf) GELU.
ACTIVATIONS = {
    "quick_gelu": quick_gelu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
}


@dataclasses.dataclass(frozen=True)
class CLIPTextConfig:
    """The fields of ``text_encoder/config.json`` that shape the model (transformers' defaults)."""

    vocab_size: int = 49408
    hidden_size: int = 512
    intermediate_size: int = 2048
    projection_dim: int = 512
    num_hidden_layers: int = 12
    num_attention_heads: int = 8
    max_position_embeddings: int = 77
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1
    bos_token_id: int = 49406
    eos_token_id: int = 49407
    architectures: tuple[str, ...] = ("CLIPTextModel",)

    @property
    def with_projection(self) -> bool:
        """True for ``CLIPTextModelWithProjection`` (SDXL's ``text_encoder_2``)."""
        return "CLIPTextModelWithProjection" in self.architectures

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict) -> CLIPTextConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
        config = cls(**kwargs)
        if config.hidden_act not in ACTIVATIONS:
            raise ValueError(f"Unsupported hidden_act {config.hidden_act!r}; known: {sorted(ACTIVATIONS)}.")
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(
                f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads {config.num_attention_heads}."
            )
        return config

    @classmethod
    def from_pretrained(
        cls, folder: str | os.PathLike, subfolder: str | None = "text_encoder"
    ) -> CLIPTextConfig:
        return cls.from_dict(read_config(folder, subfolder))


class CLIPTextOutput(NamedTuple):
    """What the Stable Diffusion pipelines take from a text encoder.

    last_hidden_state: (batch, seq, hidden) after ``final_layer_norm`` (SD 1.x / 2.x conditioning).
    penultimate_hidden_state: (batch, seq, hidden), the input of the last layer, not normalised
      (transformers' ``hidden_states[-2]``, SDXL's conditioning for both encoders).
    pooled: (batch, hidden) the final-normed state at the EOS token; for the model with projection
      it is ``text_projection`` of that, shape (batch, projection_dim) (transformers' ``text_embeds``).
    """

    last_hidden_state: jax.Array
    penultimate_hidden_state: jax.Array
    pooled: jax.Array


class CLIPTextEmbeddings(nnx.Module):
    def __init__(self, config: CLIPTextConfig, *, rngs: nnx.Rngs):
        self.token_embedding = nnx.Embed(config.vocab_size, config.hidden_size, rngs=rngs)
        self.position_embedding = nnx.Embed(config.max_position_embeddings, config.hidden_size, rngs=rngs)

    def __call__(self, input_ids):
        seq_len = input_ids.shape[-1]
        max_len = self.position_embedding.num_embeddings
        if seq_len > max_len:
            raise ValueError(f"Sequence length {seq_len} exceeds max_position_embeddings {max_len}.")
        # Index the tables directly: nnx.Embed would cast to the dtype it was built with (float32)
        # even after bfloat16 weights are loaded.
        tokens = self.token_embedding.embedding[...][input_ids]
        return tokens + self.position_embedding.embedding[...][:seq_len]


class CLIPAttention(nnx.Module):
    """Multi-head self-attention; ``is_causal`` masks out the future tokens."""

    def __init__(self, config: CLIPTextConfig, *, rngs: nnx.Rngs):
        dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.q_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.k_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.v_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.out_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.attention_impl = XLA  # static; sdaccel.tpu.models.attention.use changes it

    def __call__(self, x):
        batch, seq_len, dim = x.shape
        heads = (batch, seq_len, self.num_heads, self.head_dim)
        q = self.q_proj(x).reshape(heads)
        k = self.k_proj(x).reshape(heads)
        v = self.v_proj(x).reshape(heads)
        # scale 1/sqrt(head_dim), as transformers
        out = attention(q, k, v, impl=self.attention_impl, is_causal=True)
        return self.out_proj(out.reshape(batch, seq_len, dim))


class CLIPMLP(nnx.Module):
    def __init__(self, config: CLIPTextConfig, *, rngs: nnx.Rngs):
        self.activation = ACTIVATIONS[config.hidden_act]
        self.fc1 = nnx.Linear(config.hidden_size, config.intermediate_size, rngs=rngs)
        self.fc2 = nnx.Linear(config.intermediate_size, config.hidden_size, rngs=rngs)

    def __call__(self, x):
        return self.fc2(self.activation(self.fc1(x)))


class CLIPEncoderLayer(nnx.Module):
    """Pre-norm transformer block: attention and MLP each add to the residual stream."""

    def __init__(self, config: CLIPTextConfig, *, rngs: nnx.Rngs):
        dim, eps = config.hidden_size, config.layer_norm_eps
        self.self_attn = CLIPAttention(config, rngs=rngs)
        self.layer_norm1 = nnx.LayerNorm(dim, epsilon=eps, use_fast_variance=False, rngs=rngs)
        self.mlp = CLIPMLP(config, rngs=rngs)
        self.layer_norm2 = nnx.LayerNorm(dim, epsilon=eps, use_fast_variance=False, rngs=rngs)

    def __call__(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class CLIPEncoder(nnx.Module):
    def __init__(self, config: CLIPTextConfig, *, rngs: nnx.Rngs):
        self.layers = nnx.List([CLIPEncoderLayer(config, rngs=rngs) for _ in range(config.num_hidden_layers)])


class CLIPTextModel(nnx.Module):
    """CLIP's text transformer; call it with int token ids of shape (batch, seq_len).

    Under ``jax.jit``, outputs the caller does not use are never computed: SDXL's first encoder
    only needs ``penultimate_hidden_state``, so XLA drops its last layer and final LayerNorm.
    """

    def __init__(self, config: CLIPTextConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = CLIPTextEmbeddings(config, rngs=rngs)
        self.encoder = CLIPEncoder(config, rngs=rngs)
        self.final_layer_norm = nnx.LayerNorm(
            config.hidden_size, epsilon=config.layer_norm_eps, use_fast_variance=False, rngs=rngs
        )

    def eos_positions(self, input_ids):
        """Index of the EOS token in each sequence, with transformers' rule.

        Old configs say ``eos_token_id: 2`` (wrong, but kept by transformers for compatibility): then
        the EOS is the *largest* id in the sequence, which holds for CLIP's tokenizer (EOS is the
        last entry of the vocabulary). Otherwise it is the first occurrence of ``eos_token_id``
        (padding may repeat the EOS token, so "first" matters).
        """
        if self.config.eos_token_id == 2:
            return jnp.argmax(input_ids, axis=-1)
        return jnp.argmax((input_ids == self.config.eos_token_id).astype(jnp.int32), axis=-1)

    def __call__(self, input_ids) -> CLIPTextOutput:
        input_ids = jnp.asarray(input_ids, jnp.int32)
        with jax.named_scope("embeddings"):
            x = self.embeddings(input_ids)
        penultimate = x
        for i, layer in enumerate(self.encoder.layers):
            penultimate = x
            with jax.named_scope(f"layer_{i}"):
                x = layer(x)
        with jax.named_scope("final_layer_norm"):
            last = self.final_layer_norm(x)
        pooled = last[jnp.arange(last.shape[0]), self.eos_positions(input_ids)]
        return CLIPTextOutput(last, penultimate, pooled)


class CLIPTextModelWithProjection(CLIPTextModel):
    """CLIP text model whose pooled output goes through ``text_projection`` (a bias-free Linear)."""

    def __init__(self, config: CLIPTextConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.text_projection = nnx.Linear(
            config.hidden_size, config.projection_dim, use_bias=False, rngs=rngs
        )

    def __call__(self, input_ids) -> CLIPTextOutput:
        out = super().__call__(input_ids)
        with jax.named_scope("text_projection"):
            return out._replace(pooled=self.text_projection(out.pooled))


def checkpoint_keys(key: str) -> list[str]:
    """Our key -> the keys to look for in the file: hub checkpoints (and transformers'
    ``CLIPTextModelWithProjection``) put the transformer under ``text_model.``, transformers 5's
    ``CLIPTextModel`` does not. ``text_projection`` is never prefixed."""
    if key.startswith("text_projection."):
        return [key]
    return [f"text_model.{key}", key]


def load_text_encoder(
    folder: str | os.PathLike,
    subfolder: str = "text_encoder",
    dtype=jnp.float32,
    sharding=None,
    progress: bool = True,
    variant: str | None = None,
) -> CLIPTextModel:
    """Build the text encoder of ``folder/subfolder`` abstractly and fill it from its safetensors.

    The class comes from the config's ``architectures``: ``CLIPTextModelWithProjection`` (SDXL's
    ``text_encoder_2``) or ``CLIPTextModel``. ``sharding`` maps a parameter path to a
    ``jax.sharding.Sharding``; ``variant="fp16"`` reads ``model.fp16.safetensors`` when present.
    """
    config = CLIPTextConfig.from_pretrained(folder, subfolder)
    cls = CLIPTextModelWithProjection if config.with_projection else CLIPTextModel
    model = abstract_model(cls, config)
    return load_weights(
        model,
        open_weights(folder, subfolder, variant),
        dtype=dtype,
        candidates=checkpoint_keys,
        ignore_unused=[r"position_ids$"],
        sharding=sharding,
        progress=subfolder if progress else None,
    )
