"""The TPU floor of one image, from the FLOPs that the TPU plans recorded.

:func:`unet_row_flops` reads one UNet call's FLOPs per latent from the plan files
(``benchmarks/results/tpu_plan_*.json``, made by ``python -m sdaccel.tools.measure.tpu_plan``), and
:func:`tpu_floor` makes the time floor of a whole image from it (``benchmarks/bench_whole_image.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from sdaccel.tpu.plan_files import PlanFileError, load_plan


def unet_row_flops(plan_files: Iterable[str | os.PathLike], rel_tol: float = 1e-6) -> dict:
    """FLOPs of one UNet call on one latent (batch 1, no guidance) at the plans' size, from the
    ``flops.unet_call`` of each row of plan JSON files (``python -m sdaccel.tools.measure.tpu_plan``):
    XLA's cost analysis of one UNet call at ``global_batch`` images, doubled with guidance. Every row
    must give the same figure per latent (the UNet's FLOPs grow linearly with the batch), else this
    raises. A file that is not a whole plan raises :class:`PlanFileError`, naming it and the fix.
    Plans of earlier layouts and versions count: the agreement of their figures is the check.

    Returns ``{"flops": ..., "height": ..., "width": ..., "dtype": ..., "sources": [...]}``."""
    found = []
    for path in plan_files:
        data = load_plan(path)
        for number, row in enumerate(data["rows"], 1):
            call = (row.get("flops") or {}).get("unet_call")
            if not call:
                continue
            for key in ("global_batch", "guidance", "height", "width", "dtype"):
                if key not in row:
                    raise PlanFileError(
                        path, f"is not a TPU plan of this package: row {number} lacks {key!r}"
                    )
            latents = row["global_batch"] * (2 if row["guidance"] else 1)
            found.append(
                {
                    "file": str(path),
                    "unet_call": call,
                    "latents": latents,
                    "per_latent": call / latents,
                    "size": (row["height"], row["width"]),
                    "dtype": row["dtype"],
                }
            )
    if not found:
        raise ValueError("no row of the plan files records flops.unet_call")
    first = found[0]
    for other in found[1:]:
        if other["size"] != first["size"]:
            raise ValueError(f"plans of different sizes: {first['size']} and {other['size']}")
        if abs(other["per_latent"] - first["per_latent"]) > rel_tol * first["per_latent"]:
            raise ValueError(
                f"UNet FLOPs per latent disagree: {first['per_latent']:.6g} ({first['file']}) and "
                f"{other['per_latent']:.6g} ({other['file']})"
            )
    height, width = first["size"]
    return {
        "flops": first["per_latent"],
        "height": height,
        "width": width,
        "dtype": first["dtype"],
        "sources": [{k: f[k] for k in ("file", "unet_call", "latents")} for f in found],
    }


def tpu_floor(
    unet_flops: float,
    steps: int,
    guidance: bool,
    decode_flops: float | None,
    peak_flops: float,
    encode_flops: float = 0.0,
) -> dict:
    """FLOPs of one image and its time floor at ``peak_flops``: ``steps`` UNet calls on one
    latent (two with ``guidance``), plus the VAE decode and the text encoders when known."""
    if steps < 1 or peak_flops <= 0:
        raise ValueError(f"need steps >= 1 and a positive peak, got {steps=}, {peak_flops=}.")
    unet = steps * (2 if guidance else 1) * unet_flops
    total = unet + (decode_flops or 0.0) + encode_flops
    return {
        "unet_flops": unet,
        "decode_flops": decode_flops,
        "encode_flops": encode_flops,
        "flops": total,
        "floor_s": total / peak_flops,
        "unet_floor_s": unet / peak_flops,
        "peak_flops": peak_flops,
    }
