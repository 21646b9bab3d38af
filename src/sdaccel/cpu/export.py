"""Export a diffusers checkpoint to OpenVINO IR, component by component, into one folder.

Each component is converted by :mod:`sdaccel.cpu.convert` (one PyTorch module -> one ``ov.Model``,
with the input and output names GenAI looks up) and saved by :func:`sdaccel.cpu.ir_files.save_ir`.

The folder written here has the layout that optimum-intel writes and that
``openvino_genai.Text2ImagePipeline`` loads, so the same export runs in our Python pipeline
(:mod:`sdaccel.cpu.pipeline`) and in OpenVINO GenAI's C++ pipeline (:mod:`sdaccel.cpu.genai`)::

    model_index.json                        copied: decides SD (1.x/2.x) or SDXL
    scheduler/scheduler_config.json         copied
    tokenizer/      HF tokenizer files + openvino_tokenizer.xml/.bin + openvino_detokenizer.xml/.bin
    tokenizer_2/    (SDXL)
    text_encoder/   openvino_model.xml/.bin + config.json
    text_encoder_2/ (SDXL)
    unet/           openvino_model.xml/.bin + config.json
    vae_decoder/    openvino_model.xml/.bin + config.json (the VAE's config)
    vae_encoder/    openvino_model.xml/.bin + config.json (image-to-image only)
    sdaccel_export.json                     what was exported, how, and the sizes

Shapes are dynamic (``?``) except the channel dimensions. :func:`reshape_static` fixes batch and
image size, which lets the CPU plugin pick kernels for one shape ahead of time.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import math
import os
import shutil
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from sdaccel.core.checkpoint import CheckpointError, read_config, read_defaults, read_json, resolve_checkpoint
from sdaccel.core.contract import Defaults, size_multiple, vae_scale_factor
from sdaccel.core.faults import fault_point
from sdaccel.core.staging import (
    clear_leftovers,
    link_tree,
    replace_json,
    require_free_space,
    staged_folder,
    writer_lock,
)
from sdaccel.cpu.convert import (
    DETOKENIZER_XML,
    TOKENIZER_XML,
    convert_text_encoder,
    convert_tokenizer,
    convert_unet,
    convert_vae_decoder,
    convert_vae_encoder,
    load_torch_component,
)
from sdaccel.cpu.ir_files import read_ir, save_ir
from sdaccel.cpu.lora_export import check_lora, fuse_into_torch, lora_settings

log = logging.getLogger(__name__)

#: File names inside each component folder (the ones GenAI opens).
MODEL_XML = "openvino_model.xml"
MANIFEST = "sdaccel_export.json"

#: The pipelines we know how to export, and the exported components of each, in export order.
PIPELINE_COMPONENTS = {
    "StableDiffusionPipeline": ("tokenizer", "text_encoder", "unet", "vae_decoder", "vae_encoder"),
    "StableDiffusionXLPipeline": (
        "tokenizer",
        "tokenizer_2",
        "text_encoder",
        "text_encoder_2",
        "unet",
        "vae_decoder",
        "vae_encoder",
    ),
}


def text_to_image_components(src: Path) -> list[str]:
    """The components a text-to-image export of the checkpoint ``src`` needs: every one of
    :data:`PIPELINE_COMPONENTS` but the VAE encoder (only image-to-image uses it)."""
    return [c for c in PIPELINE_COMPONENTS[pipeline_class(src)] if c != "vae_encoder"]


@dataclass(frozen=True)
class StaticShape:
    """The one shape a static model accepts.

    ``batch`` is the number of images per call (prompts). With classifier-free guidance
    (``guidance=True``) the text encoders and the UNet see twice that batch (negative and
    positive halves), exactly as GenAI's ``Text2ImagePipeline.reshape`` counts it.
    """

    batch: int = 1
    height: int = 512
    width: int = 512
    guidance: bool = True

    @classmethod
    def coerce(cls, value) -> StaticShape | None:
        """``None``, a ``StaticShape``, a dict of its fields or a ``(batch, height, width)`` tuple."""
        if value is None or isinstance(value, StaticShape):
            return value
        if isinstance(value, dict):
            return cls(**value)
        return cls(*value)

    @property
    def model_batch(self) -> int:
        return self.batch * (2 if self.guidance else 1)


def pipeline_class(folder: str | os.PathLike) -> str:
    """The diffusers pipeline class named in ``model_index.json``; only SD and SDXL are supported."""
    index = read_json(Path(folder) / "model_index.json")
    name = index.get("_class_name")
    if name not in PIPELINE_COMPONENTS:
        raise CheckpointError(
            f"{folder} holds a {name!r} checkpoint; this exporter handles {sorted(PIPELINE_COMPONENTS)} "
            "(Stable Diffusion 1.x/2.x and SDXL)."
        )
    return name


# ----------------------------------------------------------------------------------------------
# Static shapes
# ----------------------------------------------------------------------------------------------


def _static_shapes(model, shape: StaticShape, vae_scale_factor: int, max_length: int) -> dict:
    """The static shape of every input of one exported component, recognised by its input names."""
    import openvino as ov

    names = {port.get_any_name() for port in model.inputs}
    h, w = shape.height // vae_scale_factor, shape.width // vae_scale_factor
    shapes = {}
    for port in model.inputs:
        name = port.get_any_name()
        dims = [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]
        if name == "input_ids":
            dims = [shape.model_batch, max_length]
        elif name == "timestep":
            dims = [1]
        elif name == "sample" and "timestep" in names:  # the UNet
            dims = [shape.model_batch, dims[1], h, w]
        elif name == "cached" and "timestep" in names:  # DeepCache's shallow UNet: the feature it is fed
            dims = [shape.model_batch, dims[1], h, w]
        elif name in ("encoder_hidden_states", "text_embeds", "time_ids", "timestep_cond"):
            dims[0] = shape.model_batch
            if name == "encoder_hidden_states":
                dims[1] = max_length
        elif name == "latent_sample":
            dims = [shape.batch, dims[1], h, w]
        elif name == "sample":  # the VAE encoder takes images
            dims = [shape.batch, dims[1], shape.height, shape.width]
        else:
            raise ValueError(f"Do not know how to make input {name!r} static.")
        shapes[name] = ov.PartialShape(dims)
    return shapes


def reshape_static(target, batch: int = 1, height: int = 512, width: int = 512, guidance: bool = True, **kw):
    """Fix batch and image size of an exported model or of every model in an export folder.

    ``target`` is an ``ov.Model`` (reshaped in place and returned) or an export folder (each IR is
    rewritten static and the folder returned). ``batch`` counts images; with ``guidance`` the
    text encoders and the UNet get twice that batch. ``vae_scale_factor`` (default 8, read from
    ``vae_decoder/config.json`` for a folder) and ``max_length`` (default 77) can be passed.
    """
    import openvino as ov

    shape = StaticShape(batch, height, width, guidance)
    if isinstance(target, ov.Model):
        vae_scale_factor = kw.get("vae_scale_factor", 8)
        if height % vae_scale_factor or width % vae_scale_factor:
            raise ValueError(
                f"height and width must be multiples of {vae_scale_factor}, got {height}x{width}."
            )
        target.reshape(_static_shapes(target, shape, vae_scale_factor, kw.get("max_length", 77)))
        return target
    folder = Path(target)
    if not (folder / "model_index.json").is_file():
        raise CheckpointError(f"{folder} is not an export folder (no model_index.json).")
    if (folder / "vae_decoder").is_dir():
        kw.setdefault("vae_scale_factor", vae_scale_factor_of(folder))
    multiple = kw.get("vae_scale_factor", 8)
    if (folder / "unet").is_dir():
        multiple = size_multiple(len(read_config(folder, "unet")["block_out_channels"]), multiple)
    check_static_shape(shape, multiple)
    core = ov.Core()
    with staged_folder(folder) as stage:  # a failure half-way leaves the folder as it was
        link_tree(folder, stage)
        for xml in sorted(stage.glob(f"*/{MODEL_XML}")):
            model = reshape_static(read_ir(xml, core), batch, height, width, guidance, **kw)
            save_ir(model, xml, compress_to_fp16=False)  # constants already fp16 stay fp16
            del model
        if (stage / MANIFEST).is_file():
            replace_json(stage / MANIFEST, read_json(stage / MANIFEST) | {"static": asdict(shape)})
    return folder


def check_static_shape(shape: StaticShape, m: int) -> None:
    """Refuse, before anything is reshaped or written, a static size the model cannot take (sizes
    must be multiples of ``m``, :func:`sdaccel.core.contract.size_multiple`)."""
    if shape.batch < 1 or shape.height <= 0 or shape.width <= 0 or shape.height % m or shape.width % m:
        nearest = "x".join(str(max(m, round(v / m) * m)) for v in (shape.height, shape.width))
        raise ValueError(
            f"static shape {shape}: batch must be >= 1 and height and width positive multiples of {m} "
            f"for this model (its VAE and UNet downsampling); the nearest valid size is {nearest}."
        )


def vae_scale_factor_of(folder: Path, component: str = "vae_decoder") -> int:
    """2 ** (number of VAE levels - 1): 8 for every Stable Diffusion VAE (4 for the three-level
    VAE of the shapes checkpoints). ``component`` is ``"vae"`` in a diffusers checkpoint folder.
    A tiny autoencoder's config (TAESD) names its levels ``decoder_block_out_channels``."""
    config = read_config(folder, component)
    return vae_scale_factor(config.get("block_out_channels") or config["decoder_block_out_channels"])


def checkpoint_defaults(src: str | os.PathLike) -> Defaults:
    """:func:`sdaccel.core.checkpoint.read_defaults` of a diffusers checkpoint folder."""
    return read_defaults(src, "vae")


def is_static(model) -> bool:
    return all(port.get_partial_shape().is_static for port in model.inputs)


# ----------------------------------------------------------------------------------------------
# The whole pipeline
# ----------------------------------------------------------------------------------------------


def _component_files(component: str) -> tuple[str, ...]:
    if component.startswith("tokenizer"):
        return (TOKENIZER_XML, DETOKENIZER_XML)
    return (MODEL_XML, MODEL_XML.replace(".xml", ".bin"), "config.json")


def _component_complete(folder: Path, component: str) -> bool:
    return all((folder / component / f).is_file() for f in _component_files(component))


def is_complete(folder: str | os.PathLike, components: Iterable[str] | None = None) -> bool:
    """Whether ``folder`` holds a finished export of ``components`` (default: all of its pipeline)."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file() or not (folder / "model_index.json").is_file():
        return False
    names = components or PIPELINE_COMPONENTS.get(
        read_json(folder / "model_index.json").get("_class_name"), ()
    )
    return bool(names) and all(_component_complete(folder, c) for c in names)


def export_sizes(folder: str | os.PathLike) -> dict[str, int]:
    """Bytes on disk of each exported component's weights (``.bin`` files)."""
    folder = Path(folder)
    return {
        p.name: sum(f.stat().st_size for f in p.glob("*.bin"))
        for p in sorted(folder.iterdir())
        if p.is_dir() and any(p.glob("*.bin"))
    }


def default_export_dir(
    model_id: str | os.PathLike, weight_dtype: str = "fp32", root: str | os.PathLike = "outputs/openvino"
) -> Path:
    """The one export folder of a checkpoint that notebooks 04, 05 and 06 share: the first to run
    exports into it, the others find it complete and reuse it.

    ``root/<name>-<weight_dtype>``, where ``<name>`` tells the checkpoint apart without opening it:

    * a hub id ``org/name``: ``hub--org--name`` (a hub name cannot contain ``--``, so two ids
      never meet);
    * a local folder: ``local--<folder name>`` (:func:`local_export_name`), the same wherever the
      folder lies, unless another checkpoint of that folder name already holds it: then
      ``local--<folder name>-<digest of its absolute path>``. Two folders of the same name elsewhere
      never share an export, and no local folder takes a hub id's place.

    The weight precision is part of the name, so an fp16 export never lands on an f32 one. A
    checkpoint changed in place keeps its folder: :func:`export_pipeline` then refuses the old
    export (its source check) rather than mix the two.
    """
    if weight_dtype not in ("fp32", "fp16"):
        raise ValueError(f"weight_dtype must be 'fp32' or 'fp16', got {weight_dtype!r}.")
    path = Path(model_id).expanduser()
    if path.is_dir():
        return Path(root) / local_export_name(path.resolve(), weight_dtype, Path(root))
    text = str(model_id).strip("/")
    if not text or "--" in text or text.count("/") != 1:
        raise ValueError(
            f"{model_id!r} is neither a checkpoint folder nor a hub id of the form 'org/name': "
            "check the path, or pass EXPORT_DIR explicitly."
        )
    return Path(root) / f"hub--{text.replace('/', '--')}-{weight_dtype}"


def local_export_name(src: Path, weight_dtype: str, root: Path) -> str:
    """The name of the export folder in ``root`` of the checkpoint folder ``src`` (absolute).

    ``local--<folder name>-<weight_dtype>``, which does not depend on where the folder lies, when
    that folder of ``root`` is free or already holds an export of ``src`` (its manifest's
    ``source``). When another checkpoint holds it (or holds a folder named after it, such as
    notebook 07's ``<name>-lcm-lora``), or it holds anything else, the name carries the first 12
    hex digits of the sha256 of its absolute path: ``local--<folder name>-<digest>-<weight_dtype>``. An
    export already made under that name is kept there, so a checkpoint's folder does not move."""

    short = f"local--{src.name}-{weight_dtype}"
    digest = f"local--{src.name}-{hashlib.sha256(str(src).encode()).hexdigest()[:12]}-{weight_dtype}"
    if holds_export_of(root / short, src):
        return short
    if holds_export_of(root / digest, src):
        return digest
    return digest if _taken(root, short, src) else short


def holds_export_of(folder: Path, src: Path) -> bool:
    """Whether ``folder`` holds an export whose manifest names ``src`` as its source (a manifest
    that cannot be read names none)."""
    try:
        source = read_json(folder / MANIFEST).get("source")
    except (OSError, ValueError, AttributeError, CheckpointError):
        return False
    return source is not None and Path(source).resolve() == src


def _taken(root: Path, name: str, src: Path) -> bool:
    """Whether ``root/name`` holds anything (the caller has checked that it is no export of
    ``src``), or a folder of ``root`` named ``name-...`` holds an export of another checkpoint."""
    folder = root / name
    if folder.exists() and not (folder.is_dir() and not any(folder.iterdir())):
        return True
    if not root.is_dir():
        return False
    return any((f / MANIFEST).is_file() and not holds_export_of(f, src) for f in root.glob(f"{name}-*"))


def export_pipeline(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    components: Iterable[str] | None = None,
    force: bool = False,
    static=None,
    weight_dtype: str = "fp32",
    progress: bool = True,
    lora: Sequence[tuple[str | os.PathLike, float]] = (),
) -> Path:
    """Export a diffusers SD 1.x/2.x or SDXL checkpoint to an OpenVINO folder and return it.

    Args:
      src: a local diffusers folder or a hub id (resolved with ``resolve_checkpoint``).
      dst: the export folder (created).
      components: export only these (e.g. ``["unet"]``); default: every component of the pipeline.
      force: replace whatever ``dst`` holds by a new export of exactly ``components``.
      static: ``None`` for dynamic shapes, or a :class:`StaticShape` / ``(batch, height, width)``.
      weight_dtype: ``"fp32"`` keeps the weights as they are; ``"fp16"`` stores them in half
        precision (half the disk size; the CPU plugin decompresses them when it compiles).
      progress: show a progress bar over the components.
      lora: ``[(LoRA .safetensors file, scale), ...]`` fused into the UNet and text encoders
        before their conversion (:mod:`sdaccel.cpu.lora_export`; diffusers or kohya layout),
        checked against the checkpoint before anything is written. The manifest records them, so
        an export is reused only for the same adapters and scales.

    What happens to an existing ``dst``, decided before anything is written:

    * it holds a finished export of ``src`` with all of ``components``: reused (other settings: said once);
    * it holds a finished export of ``src`` made with the same settings but missing some of
      ``components``: they are added, the others kept as they are;
    * it holds anything else (another checkpoint's export, this one's before it changed, other
      settings, files that are no finished export): refused with an error, unless ``force=True``,
      which replaces the whole folder (nothing of the old one stays).

    The new folder is written next to ``dst`` and renamed into place only when complete
    (:func:`sdaccel.core.staging.staged_folder`): a failure at any point leaves ``dst`` as it was.
    Faults from outside the call are survived too:

    * two exports of one ``dst`` at once (two notebooks that share the folder): the second says
      that it waits, then finds the first one's export and reuses it rather than export again;
    * a process killed mid-export leaves only a hidden ``.NAME.staging-*`` folder beside ``dst``
      (as big as the export); the next call for ``dst``, whatever it then does, removes it and
      says how much it freed;
    * a disk without room for the weights (:func:`estimate_export_bytes`) is refused before
      anything is loaded or written; one that fills up during the export fails it like any other
      error.

    The PyTorch modules are loaded in float32, one at a time, and freed after their conversion,
    so the peak memory is about that of the largest component (the UNet) plus its IR.
    """
    # 1. Check the request (before anything is read or written)
    request = check_export_request(src, components, static, weight_dtype, lora)
    src, names, dst = request.src, request.names, Path(dst)

    # 2. One writer of dst at a time: a second one waits here, then finds the first one's export
    with writer_lock(dst):
        clear_leftovers(dst)  # what a killed export left beside dst (its staging folder)

        # 3. What dst holds: nothing, a finished export to keep or add to, or something to refuse
        old = {} if force else _reusable_manifest(dst, src)
        if old and _already_exported(dst, src, names, old, request.settings):
            return dst
        todo = [n for n in names if not (old and _component_complete(dst, n))]

        # 4. Room for it on dst's disk, before anything is loaded or written
        need = estimate_export_bytes(src, todo, weight_dtype)
        require_free_space(dst.parent, need, f"the OpenVINO export of {src.name} ({', '.join(todo)})")

        # 5. The new folder, written beside dst and renamed into place when complete
        vae_config = read_config(src, "vae")
        max_length = read_config(src, "text_encoder").get("max_position_embeddings", 77)
        with staged_folder(dst) as stage:
            if old:  # keep what is there (hard links: no copy of the weights, the originals untouched)
                link_tree(dst, stage, skip={*todo, "model_index.json", "scheduler", MANIFEST})
            _copy_index_and_scheduler(src, stage)
            timings = _export_components(src, stage, todo, request, vae_config, max_length, progress)
            # 6. The manifest: what was exported, how, and the sizes
            write_manifest(stage, request, old, old.get("export_seconds", {}) | timings)
    return dst


@dataclass(frozen=True)
class ExportRequest:
    """What :func:`export_pipeline` was asked to export, checked: the checkpoint folder, its
    pipeline class, the components, the static shape (or ``None``), the LoRA adapters resolved
    by :func:`sdaccel.cpu.lora_export.check_lora`, and the settings the manifest records."""

    src: Path
    kind: str
    names: tuple[str, ...]
    static: StaticShape | None
    adapters: list
    settings: dict


def check_export_request(src, components, static, weight_dtype: str, lora) -> ExportRequest:
    """:func:`export_pipeline`'s arguments checked, before anything is read or written: the weight
    precision, the checkpoint, the components, the static shape and the LoRA adapters."""
    if weight_dtype not in ("fp32", "fp16"):
        raise ValueError(f"weight_dtype must be 'fp32' or 'fp16', got {weight_dtype!r}.")
    src = resolve_checkpoint(src)
    kind = pipeline_class(src)
    names = check_components(kind, components)
    static = StaticShape.coerce(static)
    if static is not None:
        check_static_shape(static, checkpoint_defaults(src).size_multiple)
    adapters = check_lora(src, lora) if lora else []
    settings = {
        "weight_dtype": weight_dtype,
        "static": asdict(static) if static else None,
        "lora": lora_settings(adapters),
    }
    return ExportRequest(src, kind, names, static, adapters, settings)


def write_manifest(stage: Path, request: ExportRequest, old: dict, timings: dict[str, float]) -> None:
    """The manifest of the new export in ``stage``: what was exported (with what the old export
    ``old`` held), how, the seconds of each component and the sizes."""
    import openvino as ov

    exported = set(old.get("components", [])) | set(request.names)
    replace_json(
        stage / MANIFEST,
        {
            "source": str(request.src.resolve()),  # absolute: recognised from any working folder
            "source_fingerprint": source_fingerprint(request.src),
            "pipeline": request.kind,
            "components": [c for c in PIPELINE_COMPONENTS[request.kind] if c in exported],
            "export_seconds": timings,
            "sizes": export_sizes(stage),
            "openvino": ov.get_version(),
            **request.settings,
        },
    )


#: The checkpoint folder each exported component is converted from, and the prefixes of its
#: weights' names (``None``: all of them); the VAE's encoder and decoder share one file.
COMPONENT_WEIGHTS = {
    "text_encoder": ("text_encoder", None),
    "text_encoder_2": ("text_encoder_2", None),
    "unet": ("unet", None),
    "vae_decoder": ("vae", ("decoder.", "post_quant_conv.")),
    "vae_encoder": ("vae", ("encoder.", "quant_conv.")),
}


def estimate_export_bytes(
    src: str | os.PathLike, components: Iterable[str], weight_dtype: str = "fp32"
) -> int:
    """About the bytes of the ``.bin`` files that an export of ``components`` of the checkpoint
    ``src`` writes: their weights at 4 bytes a value (2 with ``weight_dtype="fp16"``), counted
    from the headers of the ``.safetensors`` files (no weight is read), plus the tokenizer
    folders. The graphs (``.xml``) come on top, so a disk with less free space than this cannot
    hold the export."""
    src = Path(src)
    width = 2 if weight_dtype == "fp16" else 4
    total = 0
    for name in components:
        if name.startswith("tokenizer"):  # copied, and converted to two small IRs
            total += sum(p.stat().st_size for p in (src / name).glob("*") if p.is_file())
            continue
        folder, prefixes = COMPONENT_WEIGHTS[name]
        total += width * weight_values(src / folder, prefixes)
    return total


def weight_values(folder: Path, prefixes: tuple[str, ...] | None = None) -> int:
    """The number of weight values in the ``.safetensors`` files of a checkpoint component (one
    variant: the files without a variant such as ``.fp16`` when there are any), counting only the
    tensors whose names start with one of ``prefixes`` when given. A file whose header cannot be
    read counts its size in bytes divided by 4."""

    files = sorted(folder.glob("*.safetensors"))
    plain = [f for f in files if "." not in f.name.removesuffix(".safetensors")]
    count = 0
    for path in plain or files:
        try:
            with open(path, "rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length))
        except (OSError, ValueError, struct.error):
            count += path.stat().st_size // 4
            continue
        header.pop("__metadata__", None)
        count += sum(
            math.prod(entry["shape"])
            for key, entry in header.items()
            if prefixes is None or key.startswith(prefixes)
        )
    return count


def check_components(kind: str, components: Iterable[str] | None) -> tuple[str, ...]:
    """The components to export of a ``kind`` pipeline (default: all of them), checked."""
    everything = PIPELINE_COMPONENTS[kind]
    names = tuple(everything if components is None else components)
    unknown = sorted(set(names) - set(everything))
    if unknown:
        raise ValueError(f"Unknown components {unknown} for a {kind}; choose from {list(everything)}.")
    if not names:
        raise ValueError(f"components is empty: name at least one of {list(everything)}.")
    return names


_SAID: set[str] = set()


def _say_once(message: str) -> None:
    """Print ``message`` the first time this process has it to say."""
    if message not in _SAID:
        _SAID.add(message)
        print(message)


def _already_exported(dst: Path, src: Path, names: tuple[str, ...], old: dict, settings: dict) -> bool:
    """Whether the finished export in ``dst`` (its manifest ``old``) already holds ``names`` (then
    it is reused, and only settings that differ from the request are said); refuse one whose
    settings would mix with these."""
    recorded = {k: old.get(k) for k in settings}
    if recorded["lora"] != settings["lora"]:  # other weights: never reused in place of these
        raise ValueError(
            f"{dst} holds an export with the LoRA adapters {recorded['lora']}, not {settings['lora']}: "
            "its weights differ. Export into another folder, or pass force=True to replace it."
        )
    if is_complete(dst, names):
        # the caller has dst back either way: a reuse is logged, not printed, and only settings
        # that differ from the request are said, once a process (a notebook may ask again)
        log.info("%s already holds a complete OpenVINO export of %s; reused.", dst, list(names))
        differ = [f"{k} {recorded[k]!r}, not {settings[k]!r}" for k in settings if recorded[k] != settings[k]]
        if differ:
            _say_once(
                f"Reusing the OpenVINO export {dst.name!r}, made with {'; '.join(differ)} "
                "(pass force=True to export again)."
            )
        return True
    if recorded != settings:
        raise ValueError(
            f"{dst} holds an export of {src} made with {recorded}; adding components with {settings} "
            "would mix the two. Use the same settings, another folder, or force=True to replace it."
        )
    return False


def _copy_index_and_scheduler(src: Path, stage: Path) -> None:
    """``model_index.json`` and the scheduler's config, copied as they are."""
    shutil.copy2(src / "model_index.json", stage / "model_index.json")
    (stage / "scheduler").mkdir()
    shutil.copy2(src / "scheduler" / "scheduler_config.json", stage / "scheduler" / "scheduler_config.json")


def _export_components(
    src: Path,
    stage: Path,
    todo: Sequence[str],
    request: ExportRequest,
    vae_config: dict,
    max_length: int,
    progress: bool,
) -> dict[str, float]:
    """Convert each of ``todo`` into ``stage`` (:func:`_export_component`) as ``request`` says;
    seconds of each."""

    timings = {}
    bar = tqdm(todo, desc="export", unit="component", disable=not progress, leave=False)
    for name in bar:
        bar.set_postfix_str(name)
        start = time.perf_counter()
        weight_dtype = request.settings["weight_dtype"]
        _export_component(
            src, stage / name, name, request.static, weight_dtype, vae_config, max_length, request.adapters
        )
        timings[name] = time.perf_counter() - start
        fault_point("export.component-saved")  # one component written, the next not yet
    return timings


def _export_component(
    src: Path,
    out: Path,
    name: str,
    static,
    weight_dtype: str,
    vae_config: dict,
    max_length: int,
    adapters: Sequence = (),
) -> None:
    """Convert one component of ``src`` into the new folder ``out`` (with ``adapters``, resolved
    by :func:`sdaccel.cpu.lora_export.check_lora`, fused into the UNet and text encoders)."""
    if name.startswith("tokenizer"):
        convert_tokenizer(src / name, out)
        return
    model = load_torch_component(src, name)
    if adapters and (name == "unet" or name.startswith("text_encoder")):
        fuse_into_torch(model, name, adapters)
    if name.startswith("text_encoder"):
        ov_model = convert_text_encoder(model, max_length)
        config = read_config(src, name)
    elif name == "unet":
        ov_model = convert_unet(model, sequence_length=max_length)
        config = read_config(src, name)
    else:
        convert = convert_vae_decoder if name == "vae_decoder" else convert_vae_encoder
        ov_model = convert(model)
        config = vae_config
    del model
    gc.collect()
    if static:
        scale = vae_scale_factor_of(src, "vae")
        reshape_static(ov_model, **asdict(static), vae_scale_factor=scale, max_length=max_length)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_ir(ov_model, out / MODEL_XML, compress_to_fp16=weight_dtype == "fp16")
    del ov_model
    gc.collect()


def _reusable_manifest(dst: Path, src: Path) -> dict:
    """The manifest of a finished export of ``src`` in ``dst`` (``{}`` when ``dst`` is missing or
    empty); refuse, naming the fix, anything else that ``dst`` holds."""
    if not dst.exists() or (dst.is_dir() and not any(dst.iterdir())):
        return {}
    if not dst.is_dir():
        raise NotADirectoryError(f"{dst} is a file, not a folder: export into another folder.")
    if not (dst / MANIFEST).is_file():
        raise CheckpointError(
            f"{dst} is not empty and holds no finished OpenVINO export (no {MANIFEST}). Export into "
            "another folder, or pass force=True to replace everything in it."
        )
    manifest = read_json(dst / MANIFEST)
    check_source(manifest, src, dst)
    return manifest


def source_fingerprint(src: Path) -> str:
    """A digest of a checkpoint folder's configs and weights (path, size, modification time):
    it changes when the checkpoint is retrained or replaced in place."""

    digest = hashlib.sha256()
    for path in sorted(Path(src).rglob("*")):
        if path.is_file() and path.suffix in (".json", ".safetensors", ".bin", ".txt"):
            stat = path.stat()
            digest.update(f"{path.relative_to(src)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def check_source(manifest: dict, src: Path, dst: Path) -> None:
    """Refuse to reuse an export made from another checkpoint, or from this one before it changed."""
    source = manifest.get("source")
    if source is not None and Path(source).resolve() != Path(src).resolve():
        raise CheckpointError(
            f"{dst} holds an OpenVINO export of {source}, not of {src}. Export into another "
            "folder, or pass force=True to replace it."
        )
    recorded = manifest.get("source_fingerprint")
    if recorded is not None and recorded != source_fingerprint(src):
        raise CheckpointError(
            f"{src} has changed since it was exported to {dst} (its files are not the ones exported). "
            "Pass force=True to export it again."
        )
