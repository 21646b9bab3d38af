"""The artifacts of ``bench_whole_image.py``, each made in a child process (``Bench.artifact``): the
random LoRA, the f32 exports, the tiny autoencoder, the calibration samples, the INT8 UNets (NNCF's
recipes, the toy's recipes replayed, DeepCache's two UNets quantized by the stack's recipe)."""

from __future__ import annotations

import os
from pathlib import Path

from sdaccel.cpu.deepcache import QUANTIZED_PARTS
from sdaccel.tools.toys.distill_config import TARGET_MODULES
from sdaccel.toy import replayed_recipes
from sdaccel.toy.int8_unets import FLOAT_GROUP_RECIPES, float_group_ignored


def make_lora(src: str, path: str, rank: int = 64, seed: int = 0) -> dict:
    """A random LoRA in the diffusers layout (``unet.<module>.lora_A/B.weight``) on every UNet
    module that LCM-LoRA adapts, rank ``rank``, alpha = rank. Small updates (B ~ 0.01)."""
    import numpy as np
    from safetensors.numpy import save_file

    from sdaccel.cpu.lora_export import checkpoint_targets

    rng = np.random.default_rng(seed)
    tensors = {}
    for module, shape in checkpoint_targets(src)["unet"].items():
        if not module.endswith(TARGET_MODULES):  # the layers an LCM-LoRA adapts
            continue
        out, fan_in = shape[0], shape[1]
        kernel = tuple(shape[2:])
        down = rng.standard_normal((rank, fan_in, *kernel)).astype(np.float32) / np.sqrt(
            fan_in * max(1, np.prod(kernel))
        )
        up = (rng.standard_normal((out, rank, *([1] * len(kernel)))) * 0.01).astype(np.float32)
        tensors[f"unet.{module}.lora_A.weight"] = down
        tensors[f"unet.{module}.lora_B.weight"] = up
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
    params = sum(t.size for t in tensors.values())
    return {"modules": len(tensors) // 2, "rank": rank, "parameters": int(params)}


def export(src: str, dst: str, lora: list | None = None) -> dict:
    from sdaccel.cpu.export import export_pipeline

    export_pipeline(src, dst, weight_dtype="fp32", progress=False, lora=[tuple(x) for x in lora or ()])
    return {}


def tiny_vae(src: str, folder: str) -> dict:
    """A random tiny autoencoder in TAESD's layout (64 channels, 1-3-3-3 / 3-3-3-1 blocks) with one
    level per level of ``src``'s VAE. Its ``config.json`` keeps the ``block_out_channels`` that
    ``save_random_tiny_vae`` writes, which the OpenVINO pipeline reads for the latent scale."""
    from sdaccel.core.checkpoint import read_config
    from sdaccel.tpu.models.taesd import save_random_tiny_vae

    vae = read_config(Path(src), "vae")
    levels = len(vae["block_out_channels"])
    save_random_tiny_vae(
        folder,
        latent_channels=vae.get("latent_channels", 4),
        num_encoder_blocks=(1, *[3] * (levels - 1)),
        num_decoder_blocks=(*[3] * (levels - 1), 1),
        encoder_block_out_channels=(64,) * levels,
        decoder_block_out_channels=(64,) * levels,
    )
    return {"levels": levels}


def calibrate_child(folder, out_dir, samples, steps, scheduler, guidance):
    import math

    from sdaccel.cpu.calibration import collect_unet_inputs, read_prompts
    from sdaccel.cpu.pipeline import OVPipeline

    pipe = OVPipeline.from_pretrained(folder, precision="f32", scheduler=scheduler)
    prompts = read_prompts()[: math.ceil(samples / steps)]
    # the inputs of the benchmarked call: its guidance (1.0: no CFG, UNet batch 1) and scheduler
    knobs = {} if guidance is None else {"guidance_scale": guidance}
    kept = collect_unet_inputs(
        pipe, prompts, steps=steps, num_samples=samples, out_dir=out_dir, progress=False, **knobs
    )
    return {"samples": len(kept)}


def quantize_unet(src_xml, dst_xml, variant, calibration, samples, max_memory_gb, parts=None):
    """``quantize_ir`` of one recipe; hybrid and full INT8 in parts, each part's process watched at
    ``max_memory_gb``: ``parts`` of them, or as many as ``max_memory_gb`` needs by
    ``sdaccel.cpu.quantize_parts.parts_for_budget``'s estimate (fitted at 64x64 latents: calibration
    samples of SDXL at 1024x1024, 128x128 latents, need more parts than it chooses)."""
    from sdaccel.cpu.quantize_parts import quantize_ir

    if variant == "int8_weights":
        return quantize_ir(src_xml, dst_xml, variant, calibration, samples)
    if variant in FLOAT_GROUP_RECIPES:  # full INT8 with one more group of layers kept in float
        ignored = float_group_ignored(variant)
        made = quantize_ir(
            src_xml, dst_xml, "full_int8", calibration, samples, max_memory_gb=max_memory_gb, parts=parts,
            ignored=ignored,
        )  # fmt: skip
        return {**made, "recipe": variant, "kept_in_float": ignored}
    return quantize_ir(
        src_xml, dst_xml, variant, calibration, samples, max_memory_gb=max_memory_gb, parts=parts
    )


def quantize_replayed(src_xml, dst_xml, name, found, calibration, samples) -> dict:
    """Child: full INT8 of ``src_xml`` with what the toy's ``name`` keeps in float (read from
    ``found``), refused before any work on a UNet that lacks those layers; in one piece (SD 1.5's
    UNet fits: the stack's quantization of two UNets does)."""
    from sdaccel.cpu.quantize_parts import quantize_ir

    knobs = replayed_recipes.knobs(name, found)
    replayed_recipes.check(src_xml, name, knobs)
    quantize_ir(src_xml, dst_xml, replayed_recipes.RECIPE, calibration, samples, **knobs)
    return {
        "recipe": replayed_recipes.RECIPE,
        "found_on": Path(found).name,
        "kept_in_float": replayed_recipes.kept_in_float(knobs),
        "smooth_quant": knobs.get("smooth_quant_alpha", 0.95) is not None,
    }


def deepcache_irs(src: str, export_dir: str, cut: str = "block") -> dict:
    """Child: DeepCache's full and shallow IRs of ``src`` cut at ``cut``, into
    ``<export_dir>/unet_deepcache`` (``unet_deepcache_layer`` for the layer cut)."""
    from sdaccel.cpu.deepcache import export_deepcache

    return {"folder": str(export_deepcache(src, export_dir, cut=cut)), "cut": cut}


def quantize_stack(deepcache: str, dst: str, calibration: str, samples: int, cut: str = "block") -> dict:
    """Child: DeepCache's IRs quantized by the stack's recipe, the one the toy's stack measures
    (:func:`sdaccel.toy.stack_quality.recipe_patterns` of its ``FLOAT_GROUPS``): both for the block
    cut, the full IR alone for the layer cut (``QUANTIZED_PARTS``)."""
    from sdaccel.cpu.deepcache import quantize_deepcache
    from sdaccel.toy.stack_quality import FLOAT_GROUPS, recipe_patterns

    ignored = recipe_patterns(FLOAT_GROUPS)
    parts = QUANTIZED_PARTS[cut]
    quantize_deepcache(
        deepcache, dst, calibration, "full_int8", subset_size=samples, parts=parts, ignored=ignored
    )
    return {"recipe": "full_int8", "float_groups": list(FLOAT_GROUPS), "ignored": ignored, "quantized": parts}
