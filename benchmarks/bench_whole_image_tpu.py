"""The TPU section of ``bench_whole_image.py`` (``--tpu``): the FLOPs of the 4-step SDXL program and its
time floor at the v5e's bf16 peak; nothing is compiled."""

from __future__ import annotations

import glob
from pathlib import Path

from bench_whole_image_results import Bench

V5E_PEAK_BF16 = 197e12


def tpu_section(bench: Bench, args) -> None:
    from sdaccel.tpu.plan_floor import tpu_floor, unet_row_flops

    files = sorted(glob.glob(str(Path(args.tpu_plans) / "tpu_plan_*.json")))
    unet = unet_row_flops(files)
    run = bench.child(
        "VAE decode FLOPs (CPU lowering, abstract weights)", vae_decode_flops, unet["height"], unet["width"]
    )
    decode = run.result["flops"] if run.ok else None
    floor = tpu_floor(unet["flops"], args.tpu_steps, False, decode, V5E_PEAK_BF16)
    bench.results["tpu"] = {
        "program": f"SDXL, {args.tpu_steps} steps LCM, no CFG, batch 1, {unet['height']}x{unet['width']}, bf16 UNet, f32 VAE",
        "unet_flops_per_call": unet,
        "decode": {"flops": decode, **({"error": run.error} if not run.ok else {})},
        "text_encoders": "not counted (CLIP-L + bigG on 77 tokens: about 0.13 TFLOP, 2 x parameters x tokens)",
        **floor,
        "derivation": (
            "UNet: flops.unet_call of every row of the tpu_plan JSONs (XLA cost analysis of one UNet call "
            "lowered for CPU with XLA attention) divided by its latents (global_batch x 2 with CFG); "
            "decode: XLA cost analysis of the VAE decode of one latent, lowered for CPU; "
            "floor = (steps x UNet + decode) / 197 TFLOP/s."
        ),
    }
    bench.save()


def vae_decode_flops(height: int, width: int) -> dict:
    """XLA's cost analysis of SDXL's VAE decode of one image, from its CPU lowering with abstract
    weights (float32: SDXL's config says force_upcast), XLA attention. Nothing is compiled."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from sdaccel.tpu.plan_compile import DEFAULT_CONFIG, abstract_pipeline

    pipe = abstract_pipeline(DEFAULT_CONFIG, jnp.bfloat16, "xla")
    graphdef, params = nnx.split(pipe.vae)
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    latents = jax.ShapeDtypeStruct((1, *pipe.latent_shape(height, width)), jnp.float32)

    def decode(params, z):
        return nnx.merge(graphdef, params).decode(z)

    lowered = jax.jit(decode).trace(params, latents).lower(lowering_platforms=("cpu",))
    return {"flops": float(lowered.cost_analysis()["flops"]), "config": str(DEFAULT_CONFIG)}
