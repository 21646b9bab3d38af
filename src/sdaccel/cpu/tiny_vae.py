"""The tiny autoencoder (TAESD / TAESDXL, diffusers' ``AutoencoderTiny``) as an OpenVINO VAE decoder.

With a few denoising steps the VAE decoder takes a large share of an image's time on a CPU; TAESD
decodes the same latents with a network about 40 times smaller (1.2 M parameters,
:mod:`sdaccel.tpu.models.taesd` explains it). This module converts one into an IR that is a drop-in
``vae_decoder``: the same input ``latent_sample`` f32 [B, C, h, w] and output ``sample``
f32 [B, 3, 8h, 8w] in [-1, 1] (:mod:`sdaccel.cpu.export`), and, beside it, the tiny autoencoder's
own ``config.json``. That config says ``scaling_factor: 1.0``, so a pipeline that reads the
scaling from the decoder's folder (``OVPipeline.decode``, GenAI) divides by 1.0, exactly as
diffusers does with ``pipe.vae = AutoencoderTiny(...)``: TAESD decodes the diffusion latents as
they are.

Two folders, each written atomically (:func:`sdaccel.core.staging.staged_folder`):

* :func:`export_tiny_decoder`: ``<export>/vae_decoder_tiny/`` (``openvino_model.xml/.bin``,
  ``config.json`` and a record of its source), kept with the export it was made for and reused
  while its source is unchanged;
* :func:`with_tiny_decoder`: ``<export>-vae_decoder_tiny/``, the whole export with that decoder as
  its ``vae_decoder`` (hard links: no weight is copied). Any reader of the standard layout, such
  as OpenVINO GenAI's ``Text2ImagePipeline`` or :class:`~sdaccel.cpu.pipeline.OVPipeline`, then
  decodes with TAESD and needs no other change.
"""

from __future__ import annotations

import gc
import os
from dataclasses import asdict
from pathlib import Path

from sdaccel.core.checkpoint import (
    CheckpointError,
    check_safetensors,
    check_tiny_vae_compatible,
    read_config,
    read_json,
)
from sdaccel.core.staging import link_tree, replace_json, staged_folder
from sdaccel.cpu.convert import convert_vae_decoder
from sdaccel.cpu.export import (
    MANIFEST,
    MODEL_XML,
    StaticShape,
    reshape_static,
    source_fingerprint,
    vae_scale_factor_of,
)
from sdaccel.cpu.ir_files import save_ir

#: The component folder of the tiny decoder inside an export.
TINY_DECODER = "vae_decoder_tiny"
#: What :func:`export_tiny_decoder` converted, to reuse the IR while its source is unchanged.
RECORD = "sdaccel_tiny_vae.json"
WEIGHTS = "diffusion_pytorch_model.safetensors"


def check_tiny_vae(export: Path, vae: Path) -> dict:
    """The config of the AutoencoderTiny folder ``vae``, after checking, before anything is
    loaded or written, that ``export`` is an export and that the tiny decoder takes its latents."""
    if not (export / "model_index.json").is_file() or not (export / "vae_decoder" / "config.json").is_file():
        raise CheckpointError(
            f"{export} is not an OpenVINO export (no model_index.json or vae_decoder/config.json). "
            "Export the checkpoint first with sdaccel.cpu.export.export_pipeline(src, folder)."
        )
    if not (vae / "config.json").is_file():
        raise CheckpointError(
            f"No config.json in {vae}: pass the folder of an AutoencoderTiny (config.json + {WEIGHTS})."
        )
    config = read_config(vae)
    if config.get("_class_name") != "AutoencoderTiny":
        raise CheckpointError(
            f"{vae} holds a {config.get('_class_name')!r}, not an AutoencoderTiny (TAESD): pass the "
            "folder of a tiny autoencoder, such as madebyollin/taesd's."
        )
    check_safetensors(vae / WEIGHTS)
    check_tiny_vae_compatible(config, export)
    return config


def export_tiny_decoder(
    export: str | os.PathLike, vae: str | os.PathLike, name: str = TINY_DECODER, force: bool = False
) -> Path:
    """Convert the AutoencoderTiny in the folder ``vae`` into ``<export>/<name>/`` and return it.

    The IR has the ``vae_decoder``'s port names and layout; its weights are stored as the export's
    are (``weight_dtype`` in its manifest), and when the export is static the IR is reshaped to the
    same shape. An existing ``<export>/<name>/`` converted from the same files is reused (unless
    ``force``); anything else there is replaced, atomically.
    """
    import torch
    from diffusers import AutoencoderTiny

    export, vae = Path(export), Path(vae)
    if name == "vae_decoder":
        raise ValueError("name='vae_decoder' would replace the export's own decoder: choose another name.")
    config = check_tiny_vae(export, vae)
    manifest = read_json(export / MANIFEST) if (export / MANIFEST).is_file() else {}
    record = {
        "source": str(vae.resolve()),
        "source_fingerprint": source_fingerprint(vae),
        "weight_dtype": manifest.get("weight_dtype", "fp32"),
        "static": manifest.get("static"),
    }
    out = export / name
    if not force and (out / RECORD).is_file() and (out / MODEL_XML).is_file():
        if read_json(out / RECORD) == record:
            return out
    model = AutoencoderTiny.from_pretrained(vae, dtype=torch.float32).eval()
    ov_model = convert_vae_decoder(model)
    del model
    gc.collect()
    if record["static"]:
        shape = StaticShape.coerce(record["static"])
        reshape_static(ov_model, **asdict(shape), vae_scale_factor=vae_scale_factor_of(export))
    with staged_folder(out) as stage:
        replace_json(stage / "config.json", config)
        save_ir(ov_model, stage / MODEL_XML, compress_to_fp16=record["weight_dtype"] == "fp16")
        replace_json(stage / RECORD, record)
    return out


def with_tiny_decoder(
    export: str | os.PathLike,
    vae: str | os.PathLike,
    dst: str | os.PathLike | None = None,
    name: str = TINY_DECODER,
) -> Path:
    """An export folder whose ``vae_decoder`` is the tiny autoencoder in ``vae``, and return it.

    ``dst`` (default ``<export>-<name>`` beside the export) receives every file of the export as a
    hard link, except its ``vae_decoder/``, which is the tiny decoder of :func:`export_tiny_decoder`
    (converted first when needed). The folder is rebuilt on every call, atomically; the export
    itself gains only ``<name>/``. Load it with ``OVPipeline.from_pretrained(dst)`` or
    ``GenAIPipeline(dst)``.
    """
    export = Path(export)
    dst = Path(dst) if dst is not None else export.with_name(f"{export.name}-{name}")
    if dst.resolve() == export.resolve():
        raise ValueError(f"dst must be another folder than the export {export}.")
    tiny = export_tiny_decoder(export, vae, name=name)
    with staged_folder(dst) as stage:
        link_tree(export, stage, skip={"vae_decoder", name})
        (stage / "vae_decoder").mkdir()
        link_tree(tiny, stage / "vae_decoder")
    return dst
