"""Scaled dot-product attention, shared by the UNet, the VAE and the CLIP text encoders.

One function so that the attention implementation is chosen in one place:
``jax.nn.dot_product_attention`` lowers to plain XLA ops (``implementation="xla"``), to cuDNN's
fused kernel on NVIDIA GPUs (``"cudnn"``), or lets JAX choose (``None``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: The implementation every model uses unless a call overrides it. Notebook 03 changes it.
IMPLEMENTATION: str | None = None


def set_implementation(name: str | None) -> None:
    """Choose ``None`` (let JAX pick), ``"xla"`` or ``"cudnn"`` for every later trace."""
    if name not in (None, "xla", "cudnn"):
        raise ValueError(f"Unknown attention implementation {name!r}: use None, 'xla' or 'cudnn'.")
    global IMPLEMENTATION
    IMPLEMENTATION = name


def attention(q, k, v, *, is_causal: bool = False, mask=None, upcast: bool = False):
    """q: (batch, q_len, heads, head_dim); k, v: (batch, kv_len, heads, head_dim).

    ``upcast`` computes the softmax in float32 (diffusers' ``upcast_attention``), which SD 2.x
    needs in half precision.
    """
    dtype = q.dtype
    if upcast:
        q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
    out = jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=is_causal, implementation=IMPLEMENTATION)
    return out.astype(dtype)
