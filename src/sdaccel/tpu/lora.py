"""LoRA adapters fused into a JAX pipeline's weights, and unfused again.

The adapters are read by :mod:`sdaccel.core.lora_files` (diffusers/peft and kohya layouts).
:func:`fuse_lora` checks every adapter against the pipeline first (every module exists, every
shape matches) and changes nothing when one does not; then it adds the deltas one tensor at a
time, computed in float32 and cast back to the weight's dtype, keeping each weight's sharding.
:func:`fuse_layer` is that sum for one weight.
:func:`unfuse_lora` subtracts the same deltas. In float32 the round trip is exact to about 1e-7
relative; in bfloat16 each fuse and unfuse rounds the weight to 8 bits of mantissa, so the
round trip moves a weight by up to about one bf16 step (2^-8 relative) of ``|W| + |delta|``:
fuse into float32 weights, or reload, when that matters.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence

from sdaccel.core.checkpoint import torch_key
from sdaccel.core.lora_files import LoraAdapter, LoraLayer, resolve_adapters

_FUSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _base(pipeline):
    return getattr(pipeline, "pipeline", pipeline)  # a ShardedPipeline holds a JaxPipeline


def _states(pipeline) -> dict:
    """component -> its ``nnx.State`` (the pipeline's own, changed in place)."""
    pipe = _base(pipeline)
    names = ["text_encoder", "text_encoder_2"][: len(pipe.prompt_encoder.params)]
    return {"unet": pipe.params["unet"], **dict(zip(names, pipe.prompt_encoder.params, strict=True))}


def _kernels(state) -> dict[str, tuple[tuple, object]]:
    """module name -> (shape in PyTorch layout, the kernel's nnx Variable)."""
    from flax import nnx

    out = {}
    for path, variable in nnx.to_flat_state(state):
        if str(path[-1]) != "kernel":
            continue
        shape = tuple(variable.get_value().shape)
        torch_shape = (shape[3], shape[2], shape[0], shape[1]) if len(shape) == 4 else shape[::-1]
        out[torch_key(path).removesuffix(".weight")] = (torch_shape, variable)
    return out


def lora_targets(pipeline) -> dict[str, dict[str, tuple[int, ...]]]:
    """component -> module name -> weight shape (PyTorch layout): what an adapter may update."""
    return {c: {m: s for m, (s, _) in _kernels(st).items()} for c, st in _states(pipeline).items()}


def fuse_layer(kernel, layer: LoraLayer, scale: float):
    """One weight with one LoRA layer fused: ``W + scale * alpha / r * up @ down``.

    ``kernel`` is the weight in our NNX layout, the transpose of PyTorch's: (in, out) for a
    linear layer, (kh, kw, in, out) for a convolution; ``layer`` is a
    :class:`~sdaccel.core.lora_files.LoraLayer` (PyTorch layout). The sum is computed in float32
    and cast back to the kernel's dtype. :func:`fuse_lora` writes this into every layer the
    adapter names (``scale`` negated to unfuse)."""
    import jax.numpy as jnp

    delta = layer.delta(scale)  # scale * alpha / r * up @ down, float32, (out, in[, kh, kw])
    delta = delta.transpose(2, 3, 1, 0) if delta.ndim == 4 else delta.T  # -> (in, out) / (kh, kw, in, out)
    return (kernel.astype(jnp.float32) + jnp.asarray(delta)).astype(kernel.dtype)


def _apply(pipeline, adapters: Sequence[tuple[LoraAdapter, float]], sign: float) -> None:
    import jax

    states = _states(pipeline)
    for adapter, scale in adapters:
        for component, layers in adapter.layers.items():
            kernels = _kernels(states[component])
            for module, layer in layers.items():
                _, variable = kernels[module]
                weight = variable.get_value()
                sharding = getattr(weight, "sharding", None)
                new = fuse_layer(weight, layer, sign * scale)
                variable.set_value(jax.device_put(new, sharding) if sharding is not None else new)


def fuse_lora(
    pipeline, adapters: Sequence[tuple[LoraAdapter | str | os.PathLike, float]]
) -> list[LoraAdapter]:
    """Add ``scale * alpha / r * up @ down`` of each adapter to the pipeline's weights, in place.

    ``adapters`` is ``[(adapter or path, scale), ...]`` (``pipeline`` a :class:`~sdaccel.tpu.pipeline.JaxPipeline`
    or a ``ShardedPipeline``). Every adapter is read and checked against the pipeline first: a
    module it names that the model lacks, or a shape that differs, raises :class:`LoraError`
    naming them, and no weight is changed. Then each delta is computed (float32), added and cast
    back to the weight's dtype one tensor at a time, so the memory used is one delta, never a
    second copy of the model. The compiled programs stay valid (same shapes and dtypes).
    Returns the resolved adapters; :func:`unfuse_lora` takes them all out again.
    """
    checked = resolve_adapters(adapters, lora_targets(pipeline), "fuse_lora")
    _apply(pipeline, checked, +1.0)
    _FUSED.setdefault(_base(pipeline), []).extend(checked)
    return [a for a, _ in checked]


def fused_adapters(pipeline) -> list[tuple[LoraAdapter, float]]:
    """The (adapter, scale) pairs fused into ``pipeline`` and not unfused yet, oldest first."""
    return list(_FUSED.get(_base(pipeline), []))


def unfuse_lora(pipeline) -> int:
    """Subtract every fused adapter's deltas again (newest first) and return how many there were.
    Exact up to rounding: see the module docstring for the error in bfloat16."""
    fused = _FUSED.pop(_base(pipeline), [])
    _apply(pipeline, list(reversed(fused)), -1.0)
    return len(fused)
