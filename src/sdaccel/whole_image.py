"""Whole-image time: prompt to PIL image, for any front-end of :mod:`sdaccel.contract`.

A step time hides what the rest of the call costs (the text encoders, the VAE decode, the
scheduler), and few-step recipes (LCM, a tiny VAE) change exactly that rest. So the unit here is
one call, ``generate(prompt) -> PIL image``, timed from outside by the wall clock:

- :func:`time_calls` runs an untimed warm-up call, then ``runs`` timed calls, and keeps for each
  the whole time and its split into encode / denoise / decode where the front-end reports it
  (``result.timings``: ``encode_s``; ``vae_decoder_s`` in the OpenVINO loop; a JAX pipeline
  reports ``denoise_decode_s`` as one piece). Compile time (``compile_s``, JAX) is excluded
  from the whole time and kept apart.
- :func:`summarize` reduces the runs to medians; :func:`composed_seconds` builds a whole-image
  figure from measured parts (encode + steps x one step + decode) where a full run would not fit
  the time, and says so.
- :func:`unet_row_flops` and :func:`tpu_floor` derive the FLOPs and the time floor of a program
  from XLA's cost analysis recorded by :mod:`sdaccel.tpu_plan`.

``benchmarks/bench_whole_image.py`` uses them for its tables.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

#: The parts of a whole image, in call order.
PARTS = ("encode_s", "denoise_s", "decode_s", "denoise_decode_s")


def split_timings(timings: dict) -> dict[str, float | None]:
    """``result.timings`` -> encode / denoise / decode seconds, and denoise + decode (``None`` where
    not reported: a JAX pipeline runs denoise and decode as one program)."""
    encode = timings.get("encode_s")
    decode = timings.get("vae_decoder_s")
    rest = timings.get("denoise_decode_s")
    denoise = None if rest is None or decode is None else rest - decode
    return {"encode_s": encode, "denoise_s": denoise, "decode_s": decode, "denoise_decode_s": rest}


def time_calls(
    call: Callable[[], object],
    runs: int,
    warmup: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Time ``runs`` calls of ``call()`` (each returns a ``GenerationResult``, or a PIL image /
    anything else when the front-end has no timings), after one untimed ``warmup()`` (default:
    ``call``). Returns ``{"image_s": [...], "encode_s": [...], "denoise_s": [...], "decode_s":
    [...], "denoise_decode_s": [...], "compile_s": [...], "warmup_s": s}``: per run, the wall time of the call minus the
    compile time it reports (``timings["compile_s"]``), and its parts (``None`` where not reported)."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}.")
    start = clock()
    (warmup or call)()
    out: dict = {"warmup_s": clock() - start, "image_s": [], "compile_s": []}
    out.update({part: [] for part in PARTS})
    for _ in range(runs):
        start = clock()
        result = call()
        wall = clock() - start
        timings = dict(getattr(result, "timings", None) or {})
        compile_s = float(timings.get("compile_s", 0.0))
        out["image_s"].append(wall - compile_s)
        out["compile_s"].append(compile_s)
        for part, value in split_timings(timings).items():
            out[part].append(value)
    return out


def _median(values: Iterable[float | None]) -> float | None:
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return statistics.median(values)


def summarize(times: dict, baseline_s: float | None = None) -> dict:
    """Medians of :func:`time_calls`' runs, and ``ratio``: ``baseline_s`` / the median whole-image
    time (how many times faster than the baseline; ``None`` without a baseline)."""
    image = _median(times["image_s"])
    if image is None:
        raise ValueError("no timed runs to summarize")
    out = {"image_s": image, "runs": len(times["image_s"])}
    out.update({part: _median(times.get(part, [])) for part in PARTS})
    out["ratio"] = None if baseline_s is None else baseline_s / image
    return out


def composed_seconds(encode_s: float, step_s: float, steps: int, decode_s: float) -> float:
    """A whole image composed from measured parts: the encode, ``steps`` times one denoising
    step (UNet call and scheduler), the decode. Label such figures as composed wherever shown."""
    if steps < 1 or min(encode_s, step_s, decode_s) < 0:
        raise ValueError(
            f"need steps >= 1 and non-negative parts, got {encode_s=}, {step_s=}, {steps=}, {decode_s=}."
        )
    return encode_s + steps * step_s + decode_s


# ----------------------------------------------------------------------------------------------
# The TPU floor, from the FLOPs that sdaccel.tpu_plan recorded
# ----------------------------------------------------------------------------------------------


def unet_row_flops(plan_files: Iterable[str | os.PathLike], rel_tol: float = 1e-6) -> dict:
    """FLOPs of one UNet call on one latent (batch 1, no guidance) at the plans' size, from the
    ``flops.unet_call`` of each row of ``tpu_plan`` JSON files: XLA's cost analysis of one UNet
    call at ``global_batch`` images, doubled with guidance. Every row must give the same figure
    per latent (the UNet's FLOPs grow linearly with the batch), else this raises.

    Returns ``{"flops": ..., "height": ..., "width": ..., "dtype": ..., "sources": [...]}``."""
    found = []
    for path in plan_files:
        data = json.loads(Path(path).read_text())
        for row in data["rows"]:
            call = (row.get("flops") or {}).get("unet_call")
            if not call:
                continue
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
