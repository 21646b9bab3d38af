"""The exports a CPU benchmark times, each run in a child process: DeepCache's shallow UNet
(:func:`export_deepcache_shallow`), the UNet with its tokens merged (:func:`export_tome_ir`), the VAE
decoder (:func:`export_vae_decoder`), one component of a random-weight pipeline
(:func:`export_random_component`), and an IR's parameter count (:func:`ir_parameters`)."""

from __future__ import annotations

import gc
import json
import time
from importlib import resources
from pathlib import Path

import numpy as np

from sdaccel.cpu.convert import convert_text_encoder, convert_unet, convert_vae_decoder
from sdaccel.cpu.deepcache import convert_shallow
from sdaccel.cpu.export import MODEL_XML
from sdaccel.cpu.ir_files import save_ir
from sdaccel.cpu.random_unet import MODELS, build_torch_unet, checkpoint_folder, unet_config
from sdaccel.cpu.tome import convert_tome_deepcache, convert_tome_unet
from sdaccel.tools.measure.models import vae_config


def export_deepcache_shallow(model: str, xml: str, seed: int = 0, cut: str = "block") -> dict:
    """Export the shallow UNet that DeepCache runs on its cached steps
    (:func:`sdaccel.cpu.deepcache.convert_shallow`: the UNet's inputs plus ``cached``, the feature
    at the ``cut`` saved by the last full step; output ``out_sample``), weights stored fp16."""
    import openvino as ov

    ov_model = convert_shallow(build_torch_unet(model, seed), cut=cut)
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=True)
    return {"inputs": [port.get_any_name() for port in ov_model.inputs]}


def export_tome_ir(
    model: str, xml: str, ratio: float, latent: int, seed: int = 0, part: str = "unet"
) -> dict:
    """The UNet with ``ratio`` of its full-resolution tokens merged
    (:func:`sdaccel.cpu.tome.convert_tome_unet`), or with ``part="shallow"`` DeepCache's shallow
    UNet merged alike (:func:`sdaccel.cpu.tome.convert_tome_deepcache`), traced at
    ``latent x latent`` latents, weights stored fp16; what was merged is written next to the IR
    (``.json``, last: its presence marks a finished export)."""

    start = time.perf_counter()
    unet = build_torch_unet(model, seed)
    if part == "unet":
        ov_model, report = convert_tome_unet(unet, ratio, latent, latent)
    else:
        models, report = convert_tome_deepcache(unet, ratio, latent, parts=(part,))
        ov_model = models.pop(part)
    del unet
    gc.collect()
    xml = Path(xml)
    xml.parent.mkdir(parents=True, exist_ok=True)
    xml.with_suffix(".json").unlink(missing_ok=True)
    save_ir(ov_model, xml, compress_to_fp16=True)
    xml.with_suffix(".json").write_text(json.dumps(report, indent=2))
    return {"seconds": time.perf_counter() - start}


def export_vae_decoder(model: str, xml: str, seed: int = 0) -> dict:
    """The VAE decoder (a checkpoint's, or the architecture's with seeded random weights) -> IR,
    weights stored fp16, with the export's converter."""
    import openvino as ov
    import torch
    from diffusers import AutoencoderKL

    start = time.perf_counter()
    folder = checkpoint_folder(model)
    torch.manual_seed(seed)
    if folder is not None:
        vae = AutoencoderKL.from_pretrained(folder / "vae", torch_dtype=torch.float32)
    else:
        vae = AutoencoderKL.from_config(vae_config(model))
    vae.eval()
    params = sum(p.numel() for p in [*vae.decoder.parameters(), *vae.post_quant_conv.parameters()])
    ov_model = convert_vae_decoder(vae)
    del vae
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=True)
    return {"seconds": time.perf_counter() - start, "params": params}


def export_random_component(model: str, folder: str, component: str, seed: int = 0) -> dict:
    """One component of the architecture ``model`` with random weights (seeded), converted with
    the export's own converters into ``folder/component`` (``config.json`` and the IR, weights
    stored fp16), as ``export_pipeline`` lays it out."""
    import openvino as ov
    import torch

    start = time.perf_counter()
    configs = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}")
    torch.manual_seed(seed)
    if component == "unet":
        module = build_torch_unet(model, seed)
        config = unet_config(model)
        ov_model = convert_unet(module)
    elif component.startswith("text_encoder"):
        import transformers

        config = json.loads(configs.joinpath(f"{component}.json").read_text())
        cls = getattr(transformers, config.get("architectures", ["CLIPTextModel"])[0])
        module = cls(transformers.CLIPTextConfig(**config)).eval()
        ov_model = convert_text_encoder(module, config.get("max_position_embeddings", 77))
    else:
        from diffusers import AutoencoderKL

        config = json.loads(configs.joinpath("vae.json").read_text())
        module = AutoencoderKL.from_config(config).eval()
        ov_model = convert_vae_decoder(module)
    params = sum(p.numel() for p in module.parameters())
    del module
    gc.collect()
    out = Path(folder) / component
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    ov.save_model(ov_model, str(out / MODEL_XML), compress_to_fp16=True)
    return {"seconds": time.perf_counter() - start, "params": params}


def ir_parameters(xml: Path) -> int:
    """Number of floating-point constant elements of an IR: its parameter count."""
    import openvino as ov

    return sum(
        int(np.prod(op.get_output_shape(0)))
        for op in ov.Core().read_model(str(xml)).get_ops()
        if op.get_type_name() == "Constant"
        and op.get_output_element_type(0).get_type_name() in ("f16", "f32")
    )
