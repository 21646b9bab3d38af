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

This module does four things, and the same code serves a real hub checkpoint and the tiny
ones that the tests build:

1. ``resolve_checkpoint`` turns a local folder or a hub id into a local folder, downloading only
   the files a pipeline needs (and the fp16 variant of the weights when asked for).
2. ``WeightFile`` reads ``.safetensors`` files with ``mmap``: a tensor is a view of the file
   until it is used, and ``release`` unmaps its pages once the loader has copied it out, so
   loading never holds two full copies of the weights, not even in the RSS. Each file's header is
   checked first (``check_safetensors``): a truncated, empty or corrupt file is named, with the
   way to get it back, instead of failing later with a bare ``struct.error``.
3. ``torch_key`` names the PyTorch tensor of a parameter path: our modules name their
   attributes exactly as diffusers/transformers do (``down_blocks.0.resnets.1.conv1``), so the
   PyTorch key of every parameter is its path with the leaf renamed
   (:mod:`sdaccel.tpu.models.weights` fills the Flax NNX modules with it).
4. ``resolve_tiny_vae`` turns the pipelines' ``vae`` argument (``"tiny"``, a folder or a hub id)
   into the folder of a tiny autoencoder (TAESD) whose latents are the checkpoint's.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors import SafetensorError, safe_open

from sdaccel.core.contract import Defaults, vae_scale_factor


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
    from the Hugging Face hub (or found in its local cache), limited to ``components``. A cached
    download that lacks files those components need (an interrupted download, a cache copied in
    part) is refused, naming the files and the fix (:func:`missing_pipeline_files`), rather than
    handed to a loader that would fail deep inside.
    """
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file() and not (path / "config.json").is_file():
            raise CheckpointError(
                f"{path} is a folder but holds neither model_index.json (a pipeline) nor config.json "
                "(one component). Point at the checkpoint's top folder, for example the folder that "
                "`python -m sdaccel.tools.toys.random_checkpoints build/checkpoints` wrote."
            )
        return path
    text = str(path_or_id)
    if not _HUB_ID.match(text) or text.startswith((".", "/", "~")):
        raise CheckpointError(
            f"No checkpoint folder at {text!r}, and it is not a hub id of the form 'org/name'. "
            "Check the path, or build the tiny checkpoints with `python -m sdaccel.tools.toys.random_checkpoints build/checkpoints`."
        )
    from huggingface_hub import snapshot_download

    patterns = allow_patterns(components, variant)
    try:
        folder = Path(snapshot_download(text, allow_patterns=patterns))
    except Exception as err:  # the hub client raises many types; all mean "could not get it"
        partial = cached_part(text, components, variant)
        if partial is not None:
            raise CheckpointError(partial_cache_message(text, *partial, variant)) from err
        raise CheckpointError(
            f"Could not download {text!r} from the Hugging Face hub ({type(err).__name__}: {err}). "
            "Without network access, pass a local folder instead (for example the tiny checkpoints "
            "from `python -m sdaccel.tools.toys.random_checkpoints build/checkpoints`); for gated models run `hf auth login`."
        ) from err
    missing = missing_pipeline_files(folder, components, variant)
    if missing:  # offline, the hub client hands out a cached snapshot as it is
        raise CheckpointError(partial_cache_message(text, folder, missing, variant))
    return folder


def shown_path(folder: str | os.PathLike) -> str:
    """How a notebook prints a checkpoint folder that :func:`resolve_checkpoint` returned: a
    snapshot of the Hugging Face cache as ``hub cache: org/name, revision <12 hex digits>`` (the
    same on every machine, where the absolute path names the user and the disk that ran it), any
    other folder as it is given."""
    parts = Path(folder).parts
    for i in range(len(parts) - 2):
        repo, snapshots, revision = parts[i : i + 3]
        if repo.startswith("models--") and snapshots == "snapshots":
            inside = "/".join(parts[i + 3 :])
            shown = f"hub cache: {repo.removeprefix('models--').replace('--', '/')}, revision {revision[:12]}"
            return shown + (f", {inside}" if inside else "")
    return str(folder)


def _weight_names(component: str, variant: str | None) -> list[tuple[str, str]]:
    """(single file, shard index) names of ``component``'s weights that :func:`open_weights` reads,
    ``variant`` first."""
    names = [(f".{variant}.safetensors", f".safetensors.index.{variant}.json")] if variant else []
    names.append((".safetensors", ".safetensors.index.json"))
    return [
        (f"{component}/{stem}{one}", f"{component}/{stem}{index}")
        for one, index in names
        for stem in _WEIGHT_STEMS
    ]


def _missing_component_files(base: Path, component: str, variant: str | None) -> list[str]:
    """The files of one component of the checkpoint ``base`` that a loader needs and that are not
    there (see :func:`missing_pipeline_files`)."""
    if component.startswith("tokenizer"):
        folder = base / component
        return [] if folder.is_dir() and any(p.is_file() for p in folder.iterdir()) else [f"{component}/*"]
    if component == "scheduler":
        return (
            []
            if (base / "scheduler" / "scheduler_config.json").is_file()
            else ["scheduler/scheduler_config.json"]
        )
    missing = [] if (base / component / "config.json").is_file() else [f"{component}/config.json"]
    for single, index in _weight_names(component, variant):
        if (base / single).is_file():
            return missing
        if (base / index).is_file():
            shards = sorted(set(read_json(base / index)["weight_map"].values()))
            return missing + [f"{component}/{s}" for s in shards if not (base / component / s).is_file()]
    stem = "model" if component.startswith("text_encoder") else "diffusion_pytorch_model"
    return [*missing, f"{component}/{stem}{f'.{variant}' if variant else ''}.safetensors"]


def missing_pipeline_files(
    folder: str | os.PathLike, components: Iterable[str] | None = None, variant: str | None = None
) -> list[str]:
    """The files that loading ``components`` (default: every one that ``model_index.json`` names)
    of the checkpoint ``folder`` needs and that are not there, as paths inside it: ``model_index.json``;
    each component's config (the scheduler's ``scheduler_config.json``); one weight file of
    ``variant`` or of none (or every shard its index lists) for a component with weights; a file in
    a tokenizer's folder. A link to a file that is gone (a hub cache copied without its blobs) is
    missing too. An empty list for a whole checkpoint, and for a folder of one component (a
    ``config.json`` and no ``model_index.json``), which has no list of components to check."""
    base = Path(folder)
    if not (base / "model_index.json").is_file():
        return [] if (base / "config.json").is_file() else ["model_index.json"]
    index = read_json(base / "model_index.json")
    named = [c for c, v in index.items() if c in COMPONENT_PATTERNS and isinstance(v, list) and v and v[0]]
    wanted = named if components is None else [c for c in components if c in named]
    return [f for c in wanted for f in _missing_component_files(base, c, variant)]


def hub_cache_folder(repo_id: str) -> Path:
    """The folder of the model repository ``repo_id`` in the Hugging Face cache (``HF_HUB_CACHE``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"


def cached_part(
    repo_id: str, components: Iterable[str] | None = None, variant: str | None = None
) -> tuple[Path, list[str]] | None:
    """``(snapshot, missing files)`` when the Hugging Face cache holds a download of ``repo_id``
    that cannot be loaded: the snapshot that its ``main`` reference names (or, with no such
    reference, the newest one: a download that did not finish) and the files of ``components`` it
    lacks (:func:`missing_pipeline_files`; none for an unfinished download that has them all).
    ``None`` when the cache holds nothing of it, or the whole of it."""
    storage = hub_cache_folder(repo_id)
    snapshots = [p for p in (storage / "snapshots").glob("*") if p.is_dir()]
    if not snapshots:
        return None
    ref = storage / "refs" / "main"
    named = storage / "snapshots" / ref.read_text().strip() if ref.is_file() else None
    snapshot = (
        named if named is not None and named.is_dir() else max(snapshots, key=lambda p: p.stat().st_mtime)
    )
    missing = missing_pipeline_files(snapshot, components, variant)
    return (snapshot, missing) if missing or named is None else None


def partial_cache_message(
    repo_id: str, snapshot: Path, missing: list[str], variant: str | None = None
) -> str:
    """Why a cached download of ``repo_id`` is refused, and the two ways to make it whole."""
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        what = f"its snapshot {snapshot} lacks {shown}"
    else:
        what = f"the download into {snapshot} did not finish (the cache names no 'main' revision of it)"
    hint = f" If the repository has no {variant!r} weights, load it with variant=None." if variant else ""
    return (
        f"{repo_id} is only partly in the Hugging Face cache: {what}. An interrupted download, or a "
        "copy of the cache that stopped part-way, leaves it so. Fix: run the download again where "
        f"the hub is reachable (`python -m sdaccel.tools.workshop.download`, or `hf download {repo_id}`), or "
        f"copy the whole cache folder (HF_HUB_CACHE) again.{hint}"
    )


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


def read_defaults(path_or_id: str | os.PathLike, vae_component: str = "vae") -> Defaults:
    """A checkpoint's call defaults and input limits (:class:`~sdaccel.core.contract.Defaults`)
    from its configs alone: ``model_index.json``, the UNet's, the VAE's and the scheduler's. No
    weights are read, and from the hub only the config files are fetched; what the pipelines give
    ``pipe.defaults``, so that a caller can check its inputs before loading.

    ``vae_component`` is the folder of the VAE's config: ``"vae"`` in a diffusers checkpoint (a
    local folder or a hub id), ``"vae_decoder"`` in an OpenVINO export folder
    (:mod:`sdaccel.cpu.export`). A tiny autoencoder's config (TAESD) names its levels
    ``decoder_block_out_channels``.
    """
    folder = resolve_checkpoint(path_or_id, components=[])
    index = read_json(folder / "model_index.json")
    unet, vae, scheduler = (read_config(folder, name) for name in ("unet", vae_component, "scheduler"))
    vae_levels = vae.get("block_out_channels") or vae.get("decoder_block_out_channels")
    if "block_out_channels" not in unet or not vae_levels:
        raise CheckpointError(f"{folder}: the unet or vae config has no block_out_channels.")
    return Defaults.from_checkpoint(
        index,
        unet.get("sample_size"),
        len(unet["block_out_channels"]),
        vae_scale_factor(vae_levels),
        scheduler.get("num_train_timesteps", 1000),
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
        "checkpoint, delete its folder and run `python -m sdaccel.tools.toys.random_checkpoints build/checkpoints`"
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
    nothing is copied until the caller converts it; ``release`` gives the pages of a tensor that
    has been copied out back (a loader calls it after each tensor).
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

    def release(self, key: str) -> None:
        """Unmap the pages of ``key``'s bytes from this process once it has been copied out.

        Every page of the mapped file that a read touches stays in this process's resident set
        (``RssFile``) for as long as the file is open, so reading a whole checkpoint would hold
        its size on top of the copies made from it: loading SDXL peaked at 1.8x its bf16 bytes of
        RSS, the weights plus the mapped file. ``madvise(MADV_DONTNEED)`` takes them out again.
        Nothing is lost: the file is mapped read-only and shared, its pages stay in the page cache,
        and reading ``key`` again (a view :meth:`get` returned earlier, say) faults them back in.
        A no-op where ``madvise`` is not available.
        """
        if not hasattr(mmap, "MADV_DONTNEED") or not hasattr(self._map, "madvise"):
            return
        start, end = (self._data_start + offset for offset in self._entries[key]["data_offsets"])
        first = start - start % mmap.PAGESIZE  # madvise wants a page-aligned start
        if end > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, end - first)


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

    def release(self, key: str) -> None:
        """:meth:`WeightFile.release` of the file that holds ``key``."""
        self._where[key].release(key)

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
# 3. Parameter paths and PyTorch keys
# ----------------------------------------------------------------------------------------------

#: Our leaf name -> the PyTorch leaf name.
_LEAF = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}


def torch_key(path: tuple) -> str:
    """``('down_blocks', 0, 'resnets', 1, 'conv1', 'kernel')`` -> ``down_blocks.0.resnets.1.conv1.weight``."""
    *head, leaf = (str(p) for p in path)
    return ".".join([*head, _LEAF.get(leaf, leaf)])


# ----------------------------------------------------------------------------------------------
# 4. The tiny autoencoder (TAESD) to decode with: the pipelines' vae=None, "tiny" or a folder
# ----------------------------------------------------------------------------------------------

#: The published tiny autoencoder for each pipeline class (SD 1.x and 2.x share one latent space).
TINY_VAE_IDS = {
    "StableDiffusionPipeline": "madebyollin/taesd",
    "StableDiffusionXLPipeline": "madebyollin/taesdxl",
}
#: The two files of a tiny autoencoder repository (they sit at its top, not in a ``vae/`` folder).
TINY_VAE_FILES = ["config.json", "diffusion_pytorch_model.safetensors"]


def tiny_vae_folder(path: str | os.PathLike) -> Path | None:
    """``path`` if it holds an AutoencoderTiny's ``config.json``, ``path/vae`` if that does, else None."""
    for candidate in (Path(path), Path(path) / "vae"):
        config = candidate / "config.json"
        if config.is_file() and read_json(config).get("_class_name") == "AutoencoderTiny":
            return candidate
    return None


def download_tiny_vae(repo_id: str) -> Path:
    """The local folder of a tiny autoencoder on the hub (from the cache when it is there)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=TINY_VAE_FILES))
    except Exception as err:  # the hub client raises many types; all mean "could not get it"
        raise CheckpointError(
            f"Could not download the tiny autoencoder {repo_id!r} from the Hugging Face hub "
            f"({type(err).__name__}: {err}). Without network access, pass vae= a local folder that "
            "holds an AutoencoderTiny (config.json + diffusion_pytorch_model.safetensors), or "
            "vae=None for the checkpoint's own VAE."
        ) from err


def resolve_tiny_vae(checkpoint: str | os.PathLike, vae: str | os.PathLike | None) -> Path | None:
    """The folder of the autoencoder to decode with, for the checkpoint (or OpenVINO export)
    folder ``checkpoint`` and the pipelines' ``vae`` argument; checked before any weight is read.

    * ``None``: ``None``, the checkpoint's own VAE.
    * ``"tiny"``: TAESD for SD 1.x/2.x or TAESDXL for SDXL (:data:`TINY_VAE_IDS`, chosen by the
      ``_class_name`` in the checkpoint's ``model_index.json``), from the hub or its cache.
    * a folder holding an AutoencoderTiny's ``config.json`` (or a ``vae/`` folder that does), or
      the hub id ``org/name`` of one.

    Raises :class:`~sdaccel.core.checkpoint.CheckpointError`, naming the fix, when there is no such
    autoencoder, or when its latents are not the checkpoint's (:func:`check_tiny_vae_compatible`).
    """
    if vae is None:
        return None
    checkpoint = Path(checkpoint)
    index = read_json(checkpoint / "model_index.json")
    text = os.fspath(vae)
    if text == "tiny":
        kind = index.get("_class_name")
        if kind not in TINY_VAE_IDS:
            raise CheckpointError(
                f"No tiny autoencoder is known for a {kind!r} (only for {sorted(TINY_VAE_IDS)}); pass "
                "vae= the folder of one, or vae=None."
            )
        folder = download_tiny_vae(TINY_VAE_IDS[kind])
    elif Path(text).expanduser().exists():
        folder = Path(text).expanduser()
    elif text.count("/") == 1 and not text.startswith((".", "/", "~")):
        folder = download_tiny_vae(text)
    else:
        raise CheckpointError(
            f"vae={text!r} is neither None, 'tiny', an existing folder nor a hub id 'org/name'."
        )
    found = tiny_vae_folder(folder)
    if found is None:
        raise CheckpointError(
            f"{folder} holds no AutoencoderTiny (a config.json with _class_name 'AutoencoderTiny', in "
            "it or in its vae/ folder). Pass vae='tiny', or the folder of a tiny autoencoder."
        )
    check_tiny_vae_compatible(read_config(found), checkpoint)
    return found


def check_tiny_vae_compatible(tiny: dict, checkpoint: str | os.PathLike) -> None:
    """Refuse a tiny autoencoder (its config, ``tiny``) whose latents are not those of
    ``checkpoint``: the latent channels and the image-to-latent scale of the checkpoint's own VAE
    (``vae/`` in a diffusers folder, ``vae_decoder/`` in an OpenVINO export) must be its own."""
    checkpoint = Path(checkpoint)
    base = next((checkpoint / c for c in ("vae", "vae_decoder") if (checkpoint / c).is_dir()), None)
    if base is None:
        raise CheckpointError(f"{checkpoint} has neither a vae/ nor a vae_decoder/ folder.")
    own = read_config(base)
    own_scale = 2 ** (len(own["block_out_channels"]) - 1)
    levels = len(tiny.get("num_decoder_blocks", (3, 3, 3, 1)))  # missing fields: diffusers' defaults
    scale = tiny.get("upsampling_scaling_factor", 2) ** (levels - 1)
    channels = tiny.get("latent_channels", 4)
    if (own.get("latent_channels", 4), own_scale) != (channels, scale):
        raise CheckpointError(
            f"The tiny autoencoder decodes {channels}-channel latents {scale}x smaller than the image, "
            f"but {checkpoint} makes {own.get('latent_channels', 4)}-channel latents {own_scale}x smaller: "
            "it was made for another model. Use vae=None, or a tiny autoencoder made for this one."
        )


# ----------------------------------------------------------------------------------------------
# 5. LoRA adapters: a local file or folder, or a hub repository (LCM-LoRA, say)
# ----------------------------------------------------------------------------------------------

#: The files of a LoRA repository on the hub: diffusers' ``save_lora_weights`` writes the first,
#: peft's ``save_pretrained`` the other two (:data:`sdaccel.core.lora_files.WEIGHT_NAMES` reads either).
LORA_FILES = ["pytorch_lora_weights.safetensors", "adapter_model.safetensors", "adapter_config.json"]


def resolve_lora(path_or_id: str | os.PathLike) -> Path:
    """The local path of a LoRA adapter, for :func:`sdaccel.core.lora_files.read_lora` and the pipelines'
    ``fuse_lora`` / ``export_pipeline(..., lora=...)``.

    * an existing ``.safetensors`` file or folder: itself;
    * a hub id ``org/name`` (``latent-consistency/lcm-lora-sdxl``): the repository's LoRA files
      (:data:`LORA_FILES`, nothing else) from the hub or its cache, as a folder.

    Raises :class:`CheckpointError`, naming the fix, for anything else or when the download fails
    or the repository holds no LoRA weights.
    """
    text = os.fspath(path_or_id)
    local = Path(text).expanduser()
    if local.exists():
        return local
    if text.count("/") != 1 or text.startswith((".", "/", "~")) or text.endswith(".safetensors"):
        raise CheckpointError(
            f"No LoRA at {text!r}: it is neither an existing file or folder nor a hub id 'org/name' "
            "(check the path, or pass e.g. 'latent-consistency/lcm-lora-sdv1-5')."
        )
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(text, allow_patterns=LORA_FILES))
    except Exception as err:  # the hub client raises many types; all mean "could not get it"
        raise CheckpointError(
            f"Could not download the LoRA {text!r} from the Hugging Face hub ({type(err).__name__}: "
            f"{err}). Without network access, download it elsewhere (`python -m sdaccel.tools.workshop.download "
            "--notebooks 07`) or pass the path of its .safetensors file."
        ) from err
    if not any((folder / name).is_file() for name in LORA_FILES[:2]):
        raise CheckpointError(
            f"The hub repository {text!r} holds no {' or '.join(LORA_FILES[:2])}: it is not a LoRA in "
            "the diffusers or peft layout. Pass the path of the adapter's .safetensors file."
        )
    return folder
