"""Finding a diffusers-format checkpoint and reading its weights without PyTorch.

A diffusers checkpoint is a folder (or a hub repo with the same layout)::

    model_index.json
    scheduler/scheduler_config.json
    text_encoder/{config.json, model.safetensors}
    text_encoder_2/...                      (SDXL only)
    tokenizer/{vocab.json, merges.txt, ...}
    tokenizer_2/...                         (SDXL only)
    unet/{config.json, diffusion_pytorch_model.safetensors}
    vae/{config.json, diffusion_pytorch_model.safetensors}

This module does three things, and the same code serves a real hub checkpoint and the tiny
ones that the tests build:

1. ``resolve_checkpoint`` turns a local folder or a hub id into a local folder, downloading only
   the files a pipeline needs (and the fp16 variant of the weights when asked for).
2. ``WeightFile`` reads ``.safetensors`` files with ``mmap``: a tensor is a view of the file
   until it is used, so loading never holds two full copies of the weights. Each file's header is
   checked first (``check_safetensors``): a truncated, empty or corrupt file is named, with the
   way to get it back, instead of failing later with a bare ``struct.error``.
3. ``load_weights`` fills a Flax NNX module from those tensors. Our modules name their
   attributes exactly as diffusers/transformers do (``down_blocks.0.resnets.1.conv1``), so the
   PyTorch key of every parameter is its NNX path with the leaf renamed, and the only layout work
   is a transpose: conv kernels OIHW -> HWIO and linear weights (out, in) -> (in, out).
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors import SafetensorError, safe_open


class CheckpointError(ValueError):
    """A checkpoint folder or hub id is missing, incomplete or does not match the model."""


# ----------------------------------------------------------------------------------------------
# 1. Finding the checkpoint
# ----------------------------------------------------------------------------------------------

#: The files each pipeline component needs; everything else in a hub repo (the original
#: single-file checkpoint, ONNX and Flax exports, example images) is never downloaded.
#: ``WEIGHTS`` stands for the component's safetensors, of one variant only (see ``allow_patterns``).
WEIGHTS = "<weights>"
COMPONENT_PATTERNS = {
    "model_index": ["model_index.json"],
    "scheduler": ["scheduler/*.json"],
    "tokenizer": ["tokenizer/*"],
    "tokenizer_2": ["tokenizer_2/*"],
    "text_encoder": ["text_encoder/config.json", WEIGHTS],
    "text_encoder_2": ["text_encoder_2/config.json", WEIGHTS],
    "unet": ["unet/config.json", WEIGHTS],
    "vae": ["vae/config.json", WEIGHTS],
}
_WEIGHT_STEMS = ("diffusion_pytorch_model", "model")

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def allow_patterns(components: Iterable[str] | None = None, variant: str | None = None) -> list[str]:
    """Glob patterns for ``huggingface_hub.snapshot_download``: config files plus the weights of
    one variant. Hub repos often hold several copies of each model (fp32, ``fp16``, non-EMA):
    naming the files exactly downloads one (``fp16`` weights are half the size of fp32)."""
    names = list(COMPONENT_PATTERNS) if components is None else ["model_index", *components]
    patterns: list[str] = ["*/config.json", "*/*_config.json"]  # every component's config: a few KB
    for name in names:
        for pattern in COMPONENT_PATTERNS[name]:
            if pattern != WEIGHTS:
                patterns.append(pattern)
                continue
            for stem in _WEIGHT_STEMS:
                if variant:  # model.fp16.safetensors, or shards model-00001-of-00002.fp16.safetensors
                    patterns += [
                        f"{name}/{stem}.{variant}.safetensors",
                        f"{name}/{stem}-*.{variant}.safetensors",
                    ]
                    patterns.append(f"{name}/{stem}.safetensors.index.{variant}.json")
                else:
                    patterns += [f"{name}/{stem}.safetensors", f"{name}/{stem}-*-of-*.safetensors"]
                    patterns.append(f"{name}/{stem}.safetensors.index.json")
    return patterns


def resolve_checkpoint(
    path_or_id: str | os.PathLike,
    components: Iterable[str] | None = None,
    variant: str | None = None,
) -> Path:
    """Return a local folder for ``path_or_id``.

    A path that exists is used as it is. Otherwise a string shaped like ``org/name`` is fetched
    from the Hugging Face hub (or found in its local cache), limited to ``components``.
    """
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file() and not (path / "config.json").is_file():
            raise CheckpointError(
                f"{path} is a folder but holds neither model_index.json (a pipeline) nor config.json "
                "(one component). Point at the checkpoint's top folder, for example the folder that "
                "`python -m sdaccel.tiny build/checkpoints` wrote."
            )
        return path
    text = str(path_or_id)
    if not _HUB_ID.match(text) or text.startswith((".", "/", "~")):
        raise CheckpointError(
            f"No checkpoint folder at {text!r}, and it is not a hub id of the form 'org/name'. "
            "Check the path, or build the tiny checkpoints with `python -m sdaccel.tiny build/checkpoints`."
        )
    from huggingface_hub import snapshot_download

    patterns = allow_patterns(components, variant)
    try:
        return Path(snapshot_download(text, allow_patterns=patterns))
    except Exception as err:  # the hub client raises many types; all mean "could not get it"
        raise CheckpointError(
            f"Could not download {text!r} from the Hugging Face hub ({type(err).__name__}: {err}). "
            "Without network access, pass a local folder instead (for example the tiny checkpoints "
            "from `python -m sdaccel.tiny build/checkpoints`); for gated models run `hf auth login`."
        ) from err


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"Missing file {path}: the checkpoint folder is incomplete.")
    return json.loads(path.read_text())


def read_config(folder: str | os.PathLike, component: str | None = None) -> dict:
    """The ``config.json`` of one component (``unet``, ``vae``, ...), or of the folder itself.

    The scheduler's file is called ``scheduler_config.json``; both names are accepted.
    """
    base = Path(folder) / component if component else Path(folder)
    for name in ("config.json", "scheduler_config.json"):
        if (base / name).is_file():
            return read_json(base / name)
    raise CheckpointError(
        f"Missing {base}/config.json: is {folder} a diffusers checkpoint with a {component!r} folder?"
    )


# ----------------------------------------------------------------------------------------------
# 2. Reading safetensors without PyTorch
# ----------------------------------------------------------------------------------------------

_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


_HUB_CACHE_REPO = re.compile(r"^models--(?P<org>[^/]+?)--(?P<name>[^/]+)$")


def refetch_hint(path: Path) -> str:
    """How to get a broken weight file back: download it again when it came from the hub cache
    (``.../models--org--name/snapshots/...``), else remake the checkpoint folder it belongs to."""
    path = Path(path)
    for part in path.parts:
        match = _HUB_CACHE_REPO.match(part)
        if match:  # the cache keeps the broken blob: only a forced download replaces it
            return f"download it again with `hf download {match['org']}/{match['name']} --force-download`"
    checkpoint = path.parent.parent if (path.parent.parent / "model_index.json").is_file() else path.parent
    return (
        f"make the checkpoint {checkpoint} again: download it again (`hf download <org/name> "
        "--force-download`), export it again (`export_pipeline(..., force=True)`), or, for a tiny "
        "checkpoint, delete its folder and run `python -m sdaccel.tiny build/checkpoints`"
    )


def check_safetensors(path: str | os.PathLike) -> None:
    """Raise :class:`CheckpointError`, naming the file and the fix, unless ``path`` is a whole
    ``.safetensors`` file.

    The safetensors library checks the header only (the file is memory-mapped, never read through):
    the 8-byte header length lies within the file, the header is JSON, every dtype is known, every
    tensor's ``data_offsets`` match its shape and dtype, the tensors tile the data area without
    gaps or overlap, and the data area ends exactly at the end of the file (a truncated download
    fails here). Our reader then also needs a dtype it can map to NumPy.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"Missing weight file {path}: the checkpoint folder is incomplete; {refetch_hint(path)}."
        )
    size = path.stat().st_size
    try:
        with safe_open(str(path), framework="numpy") as f:
            f.keys()
    except SafetensorError as err:
        reason = str(err).removeprefix("Error while deserializing header: ")
        what = "is empty" if size == 0 else f"({size:,} bytes) is truncated or corrupt: {reason}"
        raise CheckpointError(
            f"Weight file {path} {what}. It is not a whole safetensors file (an interrupted download "
            f"or export leaves one like this). Fix: {refetch_hint(path)}."
        ) from err


def check_weight_files(folder: str | os.PathLike, components: Iterable[str] | None = None) -> list[Path]:
    """:func:`check_safetensors` on every ``.safetensors`` file of ``components`` (default: every
    component folder) of a checkpoint, and return them. Header reads only: a few milliseconds per
    file, so a loader that hands the files to another library (diffusers, OpenVINO's converter)
    can name a broken file before it starts."""
    base = Path(folder)
    dirs = (
        [base / c for c in components]
        if components is not None
        else [p for p in base.iterdir() if p.is_dir()]
    )
    files = sorted(f for d in dirs if d.is_dir() for f in d.glob("*.safetensors"))
    for f in files:
        check_safetensors(f)
    return files


class WeightFile:
    """One ``.safetensors`` file, memory-mapped.

    The format is an 8-byte little-endian header length, a JSON header mapping each tensor name
    to its dtype, shape and byte range, then the raw bytes. The header is validated first
    (:func:`check_safetensors`). ``get`` returns a read-only numpy view into the mapped file, so
    nothing is copied until the caller converts it.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        check_safetensors(self.path)
        with open(self.path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.metadata = header.pop("__metadata__", {}) or {}
        unknown = {k: e["dtype"] for k, e in header.items() if e["dtype"] not in _DTYPES}
        if unknown:
            raise CheckpointError(
                f"Weight file {self.path} holds tensors of dtypes this reader does not map to NumPy "
                f"({dict(list(unknown.items())[:3])}; it reads {', '.join(_DTYPES)}). Convert the weights "
                "to float32, float16 or bfloat16 with diffusers (`save_pretrained`), or load a variant "
                "that has them (variant=None or 'fp16')."
            )
        self._entries = header
        self._data_start = 8 + header_len

    def keys(self) -> list[str]:
        return list(self._entries)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._entries[key]["shape"])

    def get(self, key: str) -> np.ndarray:
        entry = self._entries[key]
        dtype = np.dtype(_DTYPES[entry["dtype"]])
        start, end = entry["data_offsets"]
        count = (end - start) // dtype.itemsize
        flat = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._data_start + start)
        return flat.reshape(entry["shape"])


class WeightReader:
    """All weight files of one component (a single file, or shards listed in an index)."""

    def __init__(self, files: list[Path]):
        self.files = [WeightFile(p) for p in files]
        self._where = {key: wf for wf in self.files for key in wf.keys()}

    def __contains__(self, key: str) -> bool:
        return key in self._where

    def keys(self) -> list[str]:
        return list(self._where)

    def shape(self, key: str) -> tuple[int, ...]:
        return self._where[key].shape(key)

    def get(self, key: str) -> np.ndarray:
        return self._where[key].get(key)

    @property
    def nbytes(self) -> int:
        return sum(wf.path.stat().st_size for wf in self.files)


def open_weights(folder: str | os.PathLike, component: str, variant: str | None = None) -> WeightReader:
    """Open the safetensors of ``folder/component``, preferring ``variant`` (e.g. ``fp16``) when
    present. Sharded checkpoints (``*.safetensors.index.json``) are followed."""
    base = Path(folder) / component
    if not base.is_dir():
        raise CheckpointError(f"Missing folder {base}: the checkpoint has no {component!r} component.")
    # (single file, shard index) names, as diffusers' _add_variant writes them
    names = [(f".{variant}.safetensors", f".safetensors.index.{variant}.json")] if variant else []
    names.append((".safetensors", ".safetensors.index.json"))
    for single_suffix, index_suffix in names:
        for stem in _WEIGHT_STEMS:
            single = base / f"{stem}{single_suffix}"
            if single.is_file():
                return WeightReader([single])
            index = base / f"{stem}{index_suffix}"
            if index.is_file():
                shards = sorted(set(read_json(index)["weight_map"].values()))
                return WeightReader([base / s for s in shards])
    found = sorted(p.name for p in base.iterdir())
    hint = f" No {variant!r} variant either: try variant=None." if variant else ""
    raise CheckpointError(
        f"No safetensors weights in {base} (found: {found}). This loader reads diffusers-format "
        f"*.safetensors only; convert .bin/.ckpt files with diffusers first.{hint}"
    )


# ----------------------------------------------------------------------------------------------
# 3. Filling an NNX module
# ----------------------------------------------------------------------------------------------

#: Our leaf name -> the PyTorch leaf name.
_LEAF = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}


def torch_key(path: tuple) -> str:
    """``('down_blocks', 0, 'resnets', 1, 'conv1', 'kernel')`` -> ``down_blocks.0.resnets.1.conv1.weight``."""
    *head, leaf = (str(p) for p in path)
    return ".".join([*head, _LEAF.get(leaf, leaf)])


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
    allocated. Each tensor goes file -> (transpose, cast) -> device on its own, which keeps the
    peak host memory near one tensor above the mapped files.

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
    import jax.numpy as jnp
    from flax import nnx

    graphdef, state = nnx.split(model)
    flat = nnx.to_flat_state(state)
    used: set[str] = set()
    items = list(flat)
    if progress:
        from tqdm.auto import tqdm

        items = tqdm(items, desc=progress, unit="tensor", leave=False)
    for path, variable in items:
        if not isinstance(variable, nnx.Param):
            continue
        ours = torch_key(path)
        tries = candidates(ours) if candidates else [ours]
        key = next((k for k in tries if k in reader), None)
        if key is None:
            raise CheckpointError(
                f"Tensor {ours!r} (tried {tries}) is missing from the checkpoint "
                f"({[str(f.path) for f in reader.files]}); expected shape "
                f"{tuple(variable.get_value().shape)}. The config and the weights do not match."
            )
        array = to_jax_layout(str(path[-1]), reader.get(key))
        expected = tuple(variable.get_value().shape)
        if tuple(array.shape) != expected:
            raise CheckpointError(
                f"Tensor {key!r} has shape {tuple(reader.shape(key))} in the checkpoint, which is "
                f"{tuple(array.shape)} in our layout, but the model built from config.json expects {expected}."
            )
        target = dtype if (dtype is not None and np.issubdtype(array.dtype, np.floating)) else array.dtype
        if array.dtype == ml_dtypes.bfloat16 or target != array.dtype:
            array = array.astype(target)
        placed = jax.device_put(array, sharding(path)) if sharding else jnp.asarray(array)
        variable.set_value(placed)
        used.add(key)
    patterns = [re.compile(p) for p in ignore_unused]
    unused = [k for k in reader.keys() if k not in used and not any(p.search(k) for p in patterns)]
    if unused:
        warnings.warn(
            f"{len(unused)} tensors in {reader.files[0].path.parent} were not used by the model, "
            f"for example {unused[:5]}",
            stacklevel=2,
        )
    return nnx.merge(graphdef, state)


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
