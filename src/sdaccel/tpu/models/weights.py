"""Filling a Flax NNX module from a checkpoint's safetensors, and building it without weights.

Our modules name their attributes exactly as diffusers/transformers do
(``down_blocks.0.resnets.1.conv1``), so the PyTorch key of every parameter is its NNX path with
the leaf renamed (:func:`sdaccel.core.checkpoint.torch_key`), and the only layout work is a
transpose: conv kernels OIHW -> HWIO and linear weights (out, in) -> (in, out).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable

import ml_dtypes
import numpy as np
from tqdm.auto import tqdm

from sdaccel.core.checkpoint import CheckpointError, WeightReader, torch_key


def to_jax_layout(leaf: str, array: np.ndarray) -> np.ndarray:
    """PyTorch layout -> Flax layout (a view; no copy is made here)."""
    if leaf == "kernel" and array.ndim == 4:  # conv: (out, in, h, w) -> (h, w, in, out)
        return array.transpose(2, 3, 1, 0)
    if leaf == "kernel" and array.ndim == 2:  # linear: (out, in) -> (in, out)
        return array.T
    return array


def load_weights(
    model,
    reader: WeightReader,
    dtype=None,
    candidates: Callable[[str], list[str]] | None = None,
    ignore_unused: Iterable[str] = (),
    sharding: Callable[[tuple], object] | None = None,
    progress: str | None = None,
):
    """Fill every ``nnx.Param`` of ``model`` from ``reader`` and return the model.

    ``model`` may be abstract (built under ``nnx.eval_shape``), so no random weights are ever
    allocated. Each tensor goes file -> (transpose, cast) -> device on its own, and its pages of
    the memory-mapped file are then released (:meth:`~sdaccel.core.checkpoint.WeightFile.release`),
    which keeps the peak host memory near the placed weights plus one tensor: the file pages a
    read touches would otherwise stay in the resident set until the reader is closed (SDXL's RSS
    peaked at 1.8x its bf16 bytes so; ``benchmarks/bench_jax_memory.py`` measures it).

    Args:
      dtype: cast floating parameters to this dtype (``None`` keeps the file's dtype).
      candidates: maps our dotted key to the PyTorch keys to try, in order (for renamed layers,
        or prefixes such as ``text_model.`` that some saved files carry and others do not).
      ignore_unused: regexes of file keys that the model does not need (buffers such as
        ``position_ids``); any other unused key is reported with a warning.
      sharding: maps a parameter path to a ``jax.sharding.Sharding`` for ``jax.device_put``.
      progress: a label for a tqdm progress bar over the tensors, or ``None`` for none.
    """
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)
    flat = nnx.to_flat_state(state)
    used: set[str] = set()
    items = list(flat)
    if progress:
        items = tqdm(items, desc=progress, unit="tensor", leave=False)
    # 1. Each parameter: its tensor, in our layout and dtype, placed on the devices
    for path, variable in items:
        if not isinstance(variable, nnx.Param):
            continue
        key, array = _read_tensor(reader, path, tuple(variable.get_value().shape), candidates, dtype)
        # on the CPU the placed array adopts our (aligned, fresh) copy as its buffer: no second copy
        variable.set_value(jax.device_put(array, sharding(path) if sharding else None))
        del array
        reader.release(key)  # its pages of the mapped file, now copied out
        used.add(key)
    # 2. What the checkpoint holds and the model does not use
    patterns = [re.compile(p) for p in ignore_unused]
    unused = [k for k in reader.keys() if k not in used and not any(p.search(k) for p in patterns)]
    if unused:
        warnings.warn(
            f"{len(unused)} tensors in {reader.files[0].path.parent} were not used by the model, "
            f"for example {unused[:5]}",
            stacklevel=2,
        )
    return nnx.merge(graphdef, state)


def _read_tensor(
    reader: WeightReader,
    path: tuple,
    expected: tuple[int, ...],
    candidates: Callable[[str], list[str]] | None,
    dtype,
) -> tuple[str, np.ndarray]:
    """``(file key, array)`` of the parameter at ``path``: the first of its candidate keys in
    ``reader``, in our layout, checked against the model's ``expected`` shape, cast to ``dtype``."""
    ours = torch_key(path)
    tries = candidates(ours) if candidates else [ours]
    key = next((k for k in tries if k in reader), None)
    if key is None:
        raise CheckpointError(
            f"Tensor {ours!r} (tried {tries}) is missing from the checkpoint "
            f"({[str(f.path) for f in reader.files]}); expected shape "
            f"{expected}. The config and the weights do not match."
        )
    array = to_jax_layout(str(path[-1]), reader.get(key))
    if tuple(array.shape) != expected:
        raise CheckpointError(
            f"Tensor {key!r} has shape {tuple(reader.shape(key))} in the checkpoint, which is "
            f"{tuple(array.shape)} in our layout, but the model built from config.json expects {expected}."
        )
    floating = np.issubdtype(array.dtype, np.floating) or array.dtype == ml_dtypes.bfloat16
    target = np.dtype(dtype) if (dtype is not None and floating) else array.dtype
    return key, aligned_copy(array, target)


#: The alignment (bytes) of the arrays the loader places: ``jax.device_put`` on the CPU adopts a
#: NumPy array aligned so as its buffer instead of copying it (XLA's CPU buffers are 64-aligned).
ALIGNMENT = 64


def aligned_copy(array: np.ndarray, dtype) -> np.ndarray:
    """A fresh C-contiguous copy of ``array`` cast to ``dtype``, in one pass (the cast and the
    layout change together; NumPy's ``astype`` casting rules), its data aligned to
    :data:`ALIGNMENT` bytes. Never a float32 intermediate: float16 -> bfloat16 is one cast.

    The loader places it with ``jax.device_put``, which on the CPU takes the buffer over: each
    weight then exists once, with no transient second copy per tensor. (``jnp.asarray`` always
    copies; an array from ``astype`` keeps a transposed view's strides and is only 16-aligned, so
    it was copied again, and the freed intermediates left the heap fragmented: 0.5 GiB more
    resident memory after SDXL's UNet.)"""
    dtype = np.dtype(dtype)
    nbytes = array.size * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start : start + nbytes].view(dtype).reshape(array.shape)
    np.copyto(out, array, casting="unsafe")
    return out


def abstract_model(cls, config, seed: int = 0):
    """``cls(config, rngs=...)`` with shapes and dtypes only (``nnx.eval_shape``): no weights are
    allocated, which is how every loader builds a model before filling it from a checkpoint.

    One detail keeps this fast: the RNG stream's counter is held in NumPy during the trace.
    Otherwise each ``rngs.params()`` call stores a traced counter, Flax asks that tracer for its
    sharding, and JAX answers by scanning the whole trace so far: building SDXL's UNet (~1700
    parameters) then costs about a minute of CPU instead of two seconds.
    """
    from flax import nnx

    def build():
        rngs = nnx.Rngs(seed)
        rngs.params.count.set_value(np.zeros((), np.uint32))
        return cls(config, rngs=rngs)

    return nnx.eval_shape(build)


def count_params(model) -> tuple[int, int]:
    """(number of parameters, bytes) of an NNX module, abstract or concrete."""
    from flax import nnx

    leaves = [v.get_value() for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    n = sum(int(np.prod(x.shape)) for x in leaves)
    nbytes = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
    return n, nbytes
