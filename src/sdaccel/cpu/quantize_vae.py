"""INT8 for the VAE decoder, and what it costs in pixels.

The VAE decoder runs once per image, after the last denoising step, but at the image's full
resolution: at 512x512 its convolutions cost about as much as one or two UNet steps (batch 2) on a
CPU, so once the UNet is INT8 and runs fewer steps, the decoder becomes a large part of an image's
time. The UNet's recipes of :mod:`sdaccel.cpu.quantize` apply to it unchanged:

* ``int8_weights``: weight-only INT8 (no calibration); the arithmetic stays in float, the weights
  take a quarter of the bytes;
* ``hybrid``: weight-only INT8 for the MatMuls (the mid block's attention), full INT8 for the
  convolutions, which are nearly all of the decoder's work;
* ``full_int8``: weights and activations of every convolution and MatMul in INT8.

The decoder's first and last convolutions (``conv_in``, reading the latents, and ``conv_out``,
writing the pixels) match :data:`sdaccel.cpu.quantize.SENSITIVE_LAYER_PATTERNS` and stay in float
in the hybrid and full recipes, for the reason they do in the UNet: an error there goes straight
into every pixel.

Calibration data are decoder inputs: *unscaled* latents (``latents / scaling_factor``, what
:meth:`sdaccel.cpu.pipeline.OVPipeline.decode` feeds the decoder), best the final latents of real
generations (:func:`sdaccel.toy.adherence.final_latents`).
:func:`sdaccel.toy.adherence.vae_decoder_quality` measures the cost on a trained
``sdaccel.toy.dataset`` checkpoint: the held-out prompts are generated once in f32, and their final
latents are decoded by the f32 decoder and by each INT8 one; PSNR/SSIM against the f32 images and
prompt adherence say what the INT8 decoder changed (the UNet and the latents are the same).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

from sdaccel.core.contract import unscale_latents
from sdaccel.core.staging import check_writable, require_free_space
from sdaccel.cpu.ir_files import RESULT_XML, ir_workspace, publish_ir, reporting_full_disk, save_ir
from sdaccel.cpu.quantize import VARIANTS, describe_ir, ir_size_bytes, quantize_variant, read_model

#: The decoder's input (as exported by :func:`sdaccel.cpu.convert.convert_vae_decoder`).
INPUT = "latent_sample"


def decoder_inputs(latents, vae_config: dict) -> np.ndarray:
    """Diffusion latents ``[n, C, h, w]`` -> what the decoder reads (``/ scaling_factor``, and the
    per-channel mean/std where the VAE has them), float32."""

    return np.ascontiguousarray(
        unscale_latents(
            np.asarray(latents, np.float32),
            vae_config["scaling_factor"],
            vae_config.get("latents_mean"),
            vae_config.get("latents_std"),
            channel_axis=1,
        ),
        dtype=np.float32,
    )


def _check_latents(model, latents, variant: str) -> list[dict[str, np.ndarray]] | None:
    """The calibration samples (one decoder call of batch 1 each), or an error naming the fix."""
    if variant == "int8_weights":
        return None
    fix = (
        "pass decoder inputs, unscaled latents [n, C, h, w] (decoder_inputs(final_latents(...), "
        "vae_config)); int8_weights needs none."
    )
    if latents is None:
        raise ValueError(f"{variant} of the VAE decoder needs calibration latents, got None: {fix}")
    array = np.asarray(latents, np.float32)
    if array.ndim != 4 or len(array) == 0:
        raise ValueError(
            f"calibration latents must be a non-empty [n, C, h, w] array, got {array.shape}: {fix}"
        )
    channels = model.input(INPUT).get_partial_shape()[1]
    if channels.is_static and channels.get_length() != array.shape[1]:
        raise ValueError(
            f"the decoder reads {channels.get_length()} latent channels, the calibration latents have "
            f"{array.shape[1]}: {fix}"
        )
    return [{INPUT: array[i : i + 1]} for i in range(len(array))]


def quantize_vae_decoder(
    src_xml: str | os.PathLike,
    dst_xml: str | os.PathLike,
    variant: str,
    latents=None,
    subset_size: int | None = None,
    log_level: int = logging.WARNING,
    **knobs,
) -> dict:
    """Quantize the VAE decoder IR at ``src_xml`` with one of :data:`VARIANTS`, save it at
    ``dst_xml``.

    ``latents``: calibration decoder inputs ``[n, C, h, w]`` (unscaled, see
    :func:`decoder_inputs`), one call of batch 1 each; unused by ``int8_weights``.
    ``subset_size`` defaults to all of them. ``log_level`` is NNCF's. ``knobs`` go to the recipe
    (:func:`sdaccel.cpu.quantize.quantize_full`'s ``ignored``, ``smooth_quant_alpha``, ...).

    Everything is checked before any work (variant, source IR, calibration latents against the
    decoder's input, that ``dst_xml``'s folder can be written); then, as the only writer of
    ``dst_xml`` (:func:`sdaccel.cpu.ir_files.ir_workspace`: a second quantization of it waits),
    that its disk has room for the result (about the size of the source IR). The IR is saved in a
    hidden working folder beside ``dst_xml`` and moved into place at the end
    (:func:`sdaccel.cpu.ir_files.publish_ir`): a failure, a Ctrl-C or a kill leaves the old decoder
    or the new one, never a part. Returns the time, the size on disk and the counts of
    :func:`sdaccel.cpu.quantize.describe_ir`.
    """
    import nncf

    if variant not in VARIANTS:
        raise ValueError(f"unknown INT8 variant {variant!r}; expected one of {VARIANTS}")
    if not Path(src_xml).is_file():
        raise FileNotFoundError(
            f"No VAE decoder IR at {src_xml}: export it first (sdaccel.cpu.export.export_pipeline)."
        )
    model = read_model(src_xml)
    if INPUT not in {name for port in model.inputs for name in port.get_names()}:
        raise ValueError(
            f"{src_xml} has no {INPUT!r} input: is it a VAE decoder exported by sdaccel.cpu.export?"
        )
    data = _check_latents(model, latents, variant)
    dst = Path(dst_xml)
    check_writable(dst.parent)
    nncf.set_log_level(log_level)
    start = time.perf_counter()
    subset = subset_size or (len(data) if data else 1)
    with reporting_full_disk(f"Quantizing the VAE decoder {src_xml} ({variant})"):
        with ir_workspace(dst) as work:
            require_free_space(dst.parent, ir_size_bytes(src_xml), f"the {variant} VAE decoder")
            model = quantize_variant(model, variant, data, subset, **knobs)
            save_ir(model, work / RESULT_XML, compress_to_fp16=False)
            publish_ir(work / RESULT_XML, dst)
    return {
        "variant": variant,
        "seconds": time.perf_counter() - start,
        "calibration_samples": 0 if data is None else min(subset, len(data)),
        "size_bytes": ir_size_bytes(dst),
        **describe_ir(model),
    }


def decode(compiled, latents) -> np.ndarray:
    """Decoder inputs ``[n, C, h, w]`` -> float32 NHWC images in [0, 1], one call per image (as
    the pipeline decodes), with a compiled decoder."""
    request = compiled.create_infer_request()
    images = []
    for latent in np.asarray(latents, np.float32):
        request.infer({INPUT: latent[None]})
        images.append(np.array(request.get_output_tensor(0).data, copy=True)[0])
    return np.clip(np.stack(images) / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1).astype(np.float32)
