"""One UNet as the CPU benchmark measures it: a real architecture of :data:`MODELS` (``"sd15"``,
``"sdxl"``: the configs in ``sdaccel/reference_configs``, random seeded weights, no download) or a
checkpoint folder or hub id (its own weights); one call's inputs (:func:`unet_inputs`), and its
export to OpenVINO IR (:func:`export_ir`), what notebook 06 times by hand."""

from __future__ import annotations

import gc
import json
import time
from importlib import resources
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import resolve_checkpoint
from sdaccel.cpu.convert import convert_unet

#: Real architectures with random weights (configs in ``sdaccel/reference_configs``). Any other
#: ``--models`` entry is a checkpoint (a diffusers folder or hub id; ``tiny-sd15`` / ``tiny-sdxl``
#: are the tiny ones of ``sdaccel.tools.toys.random_checkpoints``) whose own UNet weights are used.
MODELS = {"sd15": "sd-1.5", "sdxl": "sdxl-base-1.0"}


def checkpoint_folder(model: str) -> Path | None:
    """The checkpoint folder behind a ``--models`` entry (a folder or a hub id), or ``None`` for a
    random-weight architecture of :data:`MODELS`. The script turns the names of the tiny
    checkpoints (``tiny-sd15``) into their folders first."""
    if model in MODELS:
        return None
    return resolve_checkpoint(model, components=["unet"])


def component_config(model: str, component: str) -> dict:
    """A component's config (``"unet"``, ``"vae"``): the checkpoint's own, or the reference
    architecture's of :data:`MODELS`."""
    folder = checkpoint_folder(model)
    if folder is not None:
        return json.loads((folder / component / "config.json").read_text())
    path = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}/{component}.json")
    return json.loads(path.read_text())


def unet_config(model: str) -> dict:
    return component_config(model, "unet")


def build_torch_unet(model: str, seed: int = 0):
    """A checkpoint's UNet in float32, or the real architecture with random weights (PyTorch's
    default initialisation, seeded)."""
    import torch
    from diffusers import UNet2DConditionModel

    folder = checkpoint_folder(model)
    if folder is not None:
        return UNet2DConditionModel.from_pretrained(folder / "unet", torch_dtype=torch.float32).eval()
    torch.manual_seed(seed)
    return UNet2DConditionModel.from_config(unet_config(model)).eval()


def unet_inputs(model: str, batch: int, latent: int, timestep: int = 500, seed: int = 0) -> dict:
    """One UNet call's inputs, named as in the exported IR."""
    cfg = unet_config(model)
    rng = np.random.default_rng(seed)
    inputs = {
        "sample": rng.standard_normal((batch, cfg["in_channels"], latent, latent), dtype=np.float32),
        "timestep": np.array([timestep], dtype=np.int64),
        "encoder_hidden_states": rng.standard_normal(
            (batch, 77, cfg["cross_attention_dim"]), dtype=np.float32
        ),
    }
    if cfg.get("addition_embed_type") == "text_time":
        pooled = cfg["projection_class_embeddings_input_dim"] - 6 * cfg["addition_time_embed_dim"]
        size = latent * 8
        inputs["text_embeds"] = rng.standard_normal((batch, pooled), dtype=np.float32)
        inputs["time_ids"] = np.tile(np.array([[size, size, 0, 0, size, size]], np.float32), (batch, 1))
    return inputs


def export_ir(model: str, xml: str, seed: int = 0, fp16: bool = True) -> dict:
    """The UNet -> OpenVINO IR with the export's port names, weights stored fp16 (or f32)."""

    import openvino as ov

    start = time.perf_counter()
    unet = build_torch_unet(model, seed)
    params = sum(p.numel() for p in unet.parameters())
    ov_model = convert_unet(unet)
    del unet
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=fp16)
    return {"seconds": time.perf_counter() - start, "params": params}
