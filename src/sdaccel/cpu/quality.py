"""How much quality an optimisation costs: images and UNet outputs against the f32 reference.

Every comparison here is *paired*: the same prompts, seeds and initial latents go through the
f32 pipeline and through a variant (INT8, a cache, fewer steps), and we measure how far the
variant's result is from the reference:

* :func:`psnr` / :func:`ssim` on the final images (scikit-image). PSNR is
  ``10 log10(255^2 / MSE)`` in dB: identical images give infinity, 40 dB is invisible, ~30 dB is
  a close look, below ~20 dB the picture has changed. SSIM compares local means, variances and
  covariances (1 = identical) and follows what the eye notices better than the MSE does.
* :func:`unet_relative_error` on the UNet's noise prediction, step by step, on the *same*
  inputs: ``||eps_variant - eps_f32|| / ||eps_f32||``. This isolates the error of the model from
  the way the sampler amplifies it along the trajectory (which the image metrics include).
* :func:`clip_score`: prompt/image agreement with a CLIP model, only if one is available locally
  (this repository downloads nothing); it returns ``None`` otherwise.

The paired metrics say how far a variant moved from the f32 images, not whether those are good;
a real-weight checkpoint and a CLIP score (or FID on a data set) answer the second question.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from PIL import Image, ImageDraw


def _as_uint8(image) -> np.ndarray:
    """A PIL image or an HxWxC array (uint8, or float in [0, 1]) -> HxWxC uint8 array."""
    array = np.asarray(image)
    if array.dtype != np.uint8:
        array = np.clip(np.rint(array.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
    if array.ndim == 2:
        array = array[..., None]
    return array


def psnr(reference, image) -> float:
    """Peak signal-to-noise ratio in dB between two 8-bit images (``inf`` when identical)."""
    from skimage.metrics import peak_signal_noise_ratio

    a, b = _as_uint8(reference), _as_uint8(image)
    if np.array_equal(a, b):
        return float("inf")
    return float(peak_signal_noise_ratio(a, b, data_range=255))


def ssim(reference, image) -> float:
    """Structural similarity (1 = identical) between two 8-bit images, over the colour channels.

    The window is scikit-image's default 7x7 (or the largest odd size that fits a tiny image).
    """
    from skimage.metrics import structural_similarity

    a, b = _as_uint8(reference), _as_uint8(image)
    win = min(7, *a.shape[:2])
    win -= 1 - win % 2
    return float(structural_similarity(a, b, data_range=255, channel_axis=-1, win_size=win))


def compare_images(references: Sequence, images: Sequence) -> dict:
    """Pairwise PSNR/SSIM of ``images[i]`` against ``references[i]``, with their means.

    The mean PSNR is taken over finite values (identical pairs are counted in ``identical``); it
    is ``inf`` only when every pair is identical.
    """
    if len(references) != len(images):
        raise ValueError(f"{len(references)} reference images but {len(images)} images")
    psnrs = [psnr(r, i) for r, i in zip(references, images, strict=True)]
    ssims = [ssim(r, i) for r, i in zip(references, images, strict=True)]
    finite = [p for p in psnrs if np.isfinite(p)]
    return {
        "psnr": psnrs,
        "ssim": ssims,
        "psnr_mean": float(np.mean(finite)) if finite else float("inf"),
        "ssim_mean": float(np.mean(ssims)),
        "identical": len(psnrs) - len(finite),
    }


def paired_summary(references: Sequence, images: Sequence) -> dict:
    """:func:`compare_images` as a JSON row: ``psnr_mean`` (``None`` when every pair is identical,
    where JSON has no infinity), ``ssim_mean`` and the number of ``identical`` pairs."""
    paired = compare_images(references, images)
    return {
        "psnr_mean": paired["psnr_mean"] if paired["identical"] < len(images) else None,
        "ssim_mean": paired["ssim_mean"],
        "identical": paired["identical"],
    }


def relative_error(reference: np.ndarray, value: np.ndarray) -> float:
    """``||value - reference|| / ||reference||`` (Frobenius norms, in float64)."""
    reference = np.asarray(reference, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    return float(np.linalg.norm(value - reference) / np.linalg.norm(reference))


def compile_f32(model_or_path, core=None):
    """Compile an IR or ``ov.Model`` on CPU with ``INFERENCE_PRECISION_HINT=f32``.

    On a CPU with bf16 (AVX-512 BF16 or AMX) OpenVINO runs floating-point layers in bf16 by
    default; quality comparisons pin f32 so that the only difference between two models is the
    one being measured (the INT8 layers still run in INT8).
    """
    import openvino as ov

    core = core or ov.Core()
    model = model_or_path if isinstance(model_or_path, ov.Model) else core.read_model(str(model_or_path))
    return core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def unet_relative_error(reference, variant, inputs: Iterable[Mapping[str, np.ndarray]]) -> list[float]:
    """Relative error of ``variant``'s UNet output against ``reference``'s, for each input dict.

    ``reference``/``variant`` are compiled models, ``ov.Model`` s or IR paths (the latter two are
    compiled with :func:`compile_f32`). ``inputs`` are UNet input dicts, e.g. those captured
    with :func:`sdaccel.cpu.calibration.collect_unet_inputs` over one generation: the result is then
    the error per denoising step.
    """
    import openvino as ov

    ref = reference if isinstance(reference, ov.CompiledModel) else compile_f32(reference)
    var = variant if isinstance(variant, ov.CompiledModel) else compile_f32(variant)
    errors = []
    for sample in inputs:
        expected = ref(dict(sample))[0]
        errors.append(relative_error(expected, var(dict(sample))[0]))
    return errors


def clip_score(
    images: Sequence, prompts: Sequence[str], model: str | os.PathLike = "openai/clip-vit-base-patch32"
):
    """CLIP score (``100 * cos(image, text)``, clipped at 0, averaged) if ``model`` is a local folder
    or already in the Hugging Face cache; ``None`` if it is not (nothing is downloaded).
    """
    try:
        import torch
        from transformers import CLIPModel, CLIPProcessor

        clip = CLIPModel.from_pretrained(model, local_files_only=True).eval()
        processor = CLIPProcessor.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError):
        return None
    batch = processor(text=list(prompts), images=list(images), return_tensors="pt", padding=True)
    with torch.no_grad():
        image = clip.get_image_features(pixel_values=batch["pixel_values"])
        text = clip.get_text_features(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    cos = torch.nn.functional.cosine_similarity(image, text)
    return float((100 * cos.clamp(min=0)).mean())


def comparison_grid(
    images: Mapping[str, Sequence],
    captions: Mapping[str, str] | None = None,
    cell: int | None = None,
    label_width: int = 170,
):
    """One PIL image: a row per variant (``images[name]``), the same prompts in the columns, so
    the f32 reference (first row) and each variant can be compared side by side.

    ``captions`` adds text under the row name (e.g. ``"PSNR 31.2 dB"``); ``cell`` is the height
    every image is resized to (the width follows the first image's aspect ratio; nearest-neighbour,
    so tiny images stay crisp).
    """

    rows = {
        name: [im if hasattr(im, "save") else Image.fromarray(_as_uint8(im).squeeze()) for im in row]
        for name, row in images.items()
    }
    columns = max(len(row) for row in rows.values())
    first = next(iter(rows.values()))[0]
    height = cell or first.height
    width = round(height * first.width / first.height)
    grid = Image.new("RGB", (label_width + columns * width, len(rows) * height), "white")
    draw = ImageDraw.Draw(grid)
    for r, (name, row) in enumerate(rows.items()):
        draw.text((6, r * height + 6), name, fill="black")
        if captions and name in captions:
            for k, line in enumerate(str(captions[name]).split("\n")):
                draw.text((6, r * height + 22 + 14 * k), line, fill="dimgray")
        for c, im in enumerate(row):
            im = im.convert("RGB")
            if im.size != (width, height):
                im = im.resize((width, height), Image.NEAREST)
            grid.paste(im, (label_width + c * width, r * height))
    return grid
