"""LoRA adapters fused into the PyTorch modules before their OpenVINO conversion.

The OpenVINO IR then carries the adapted weights, and runs exactly as fast as the base model
(no extra MatMuls). The same reader and the same deltas as the JAX track (:mod:`sdaccel.tpu.lora`)
are used, so an export fused here and a JAX pipeline fused with :func:`sdaccel.tpu.lora.fuse_lora`
hold the same weights; diffusers' ``load_lora_weights`` + ``fuse_lora`` is not needed (it would
load the whole pipeline, where the export loads one component at a time).

Two steps, so that a bad adapter is refused before any export file is written:

1. :func:`check_lora` resolves every adapter against the checkpoint's weight files (their
   headers only: names and shapes, no tensor is read, no torch module built);
2. :func:`fuse_into_torch` adds the deltas to one loaded component, tensor by tensor, in place.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from sdaccel.core.checkpoint import open_weights
from sdaccel.core.lora_files import (
    COMPONENTS,
    LoraAdapter,
    LoraError,
    LoraLayer,
    resolve_adapters,
    save_kohya,
)

#: Token and position tables: 2-D weights that no LoRA layer of ours updates.
_EMBEDDINGS = ("token_embedding.weight", "position_embedding.weight")

LoraSpec = Sequence[tuple["LoraAdapter | str | os.PathLike", float]]


def checkpoint_targets(src: str | os.PathLike) -> dict[str, dict[str, tuple[int, ...]]]:
    """component -> module name -> weight shape (PyTorch layout) of every linear and convolution
    weight of a diffusers checkpoint folder, read from the safetensors headers. Text-encoder names
    drop transformers' ``text_model.`` prefix, as :func:`sdaccel.tpu.lora.lora_targets` does."""
    src = Path(src)
    out = {}
    for component in COMPONENTS:
        if not (src / component).is_dir():
            continue
        reader = open_weights(src, component)
        out[component] = {
            key.removesuffix(".weight").removeprefix("text_model."): reader.shape(key)
            for key in reader.keys()
            if key.endswith(".weight") and len(reader.shape(key)) in (2, 4) and not key.endswith(_EMBEDDINGS)
        }
    return out


def check_lora(src: str | os.PathLike, lora: LoraSpec) -> list[tuple[LoraAdapter, float]]:
    """Read and resolve every ``(adapter or path, scale)`` against the checkpoint ``src``; raise
    :class:`sdaccel.core.lora_files.LoraError` naming what does not fit. Call it before writing anything."""
    return resolve_adapters(lora, checkpoint_targets(src), "lora")


def fuse_into_torch(model, component: str, adapters: Sequence[tuple[LoraAdapter, float]]) -> int:
    """Add each resolved adapter's ``component`` deltas to ``model`` (a diffusers UNet or a
    transformers CLIP text model) in place, one weight at a time, computed in float32 and cast
    back to the weight's dtype; return how many weights changed."""
    import torch

    modules = {name.removeprefix("text_model."): m for name, m in model.named_modules()}
    changed = 0
    with torch.no_grad():
        for adapter, scale in adapters:
            for name, layer in adapter.layers.get(component, {}).items():
                module = modules.get(name)
                if module is None or tuple(module.weight.shape) != layer.shape:
                    raise LoraError(
                        f"{component}.{name}: not a module of shape {layer.shape} in the loaded model; "
                        "resolve the adapters with check_lora against the same checkpoint."
                    )
                weight = module.weight
                delta = torch.from_numpy(layer.delta(scale))
                weight.copy_((weight.float() + delta).to(weight.dtype))
                changed += 1
    return changed


# ----------------------------------------------------------------------------------------------
# OpenVINO GenAI's runtime adapters
# ----------------------------------------------------------------------------------------------

#: The UNet layers whose LoRA OpenVINO GenAI 2026.4 applies to our exports (checked by
#: tests/tpu/test_lora.py against a fused export; SD 1.5's ``proj_in``/``proj_out`` are 1x1 convolutions). It refuses 3x3 convolution LoRAs ("not pointwise
#: Convolutional kernel is not supported"), reads kohya names by turning ``_`` into ``.``, so it
#: misses ``time_emb_proj``, ``conv_shortcut`` and ``time_embedding.linear_1``, and finds no text
#: encoder layer in our exports (transformers 5 names them ``model.encoder...``, without ``text_model``).
GENAI_UNET_LAYERS = ("to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.2")


def save_genai_adapter(adapter: LoraAdapter, path: str | os.PathLike, sdxl: bool) -> tuple[Path, list[str]]:
    """Write the part of a resolved adapter that OpenVINO GenAI applies at run time as a kohya
    file for ``openvino_genai.Adapter``, and return it with the names of the layers left out.

    GenAI 2026.4 scales a kohya adapter by the ``alpha`` given to ``AdapterConfig.add`` only, not
    by the file's ``alpha / r``, so the file's ``up`` factors carry ``alpha / r`` here (and
    ``alpha = r``): ``AdapterConfig.add(Adapter(path), scale)`` then applies what
    ``fuse_lora(..., [(adapter, scale)])`` fuses. The layers left out (3x3 convolutions, the text
    encoders, names GenAI does not map) need the fused export instead."""

    kept, dropped = {}, []
    for component, layers in adapter.layers.items():
        for name, layer in layers.items():
            if (
                component == "unet"
                and name.endswith(GENAI_UNET_LAYERS)
                and layer.down.shape[2:] in ((), (1, 1))
            ):
                up = (layer.up.astype("float32") * layer.scale).astype(layer.up.dtype)
                kept[name] = LoraLayer(layer.down, up, float(layer.rank))
            else:
                dropped.append(f"{component}.{name}")
    if not kept:
        raise LoraError(
            f"{adapter.source}: none of its layers is one that OpenVINO GenAI applies; fuse it at export."
        )
    out = save_kohya(dataclasses.replace(adapter, layers={"unet": kept}), path, sdxl=sdxl)
    return out, dropped


def lora_settings(adapters: Sequence[tuple[LoraAdapter, float]]) -> list[dict] | None:
    """What an export records of the adapters fused into it (``None`` when there are none, as in
    a manifest written before LoRA support): each file, its scale, size and modification time,
    so that an export is reused only for the same adapters, files and scales."""
    if not adapters:
        return None
    out = []
    for adapter, scale in adapters:
        file = Path(adapter.source).resolve()  # one file, however the caller spelled its path
        stat = file.stat()
        out.append({"file": str(file), "scale": scale, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return out
