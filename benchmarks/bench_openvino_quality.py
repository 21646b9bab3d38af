"""``benchmarks/bench_openvino.py --quality``: the quality cost of the levers that change numbers, on a
trained tiny checkpoint, each part in a child process (``sdaccel.toy`` scores them)."""

from __future__ import annotations

from pathlib import Path

from sdaccel.tools.measure.children import run_child, summarize_run
from sdaccel.tools.measure.models import VAE_VARIANTS, label
from sdaccel.tools.measure.timing import quality_levers
from sdaccel.toy import adherence, deepcache_quality, tome_quality
from sdaccel.toy.int8_unets import FLOAT_GROUP_VARIANTS


def quality_int8(checkpoint: str, work: str, prompts: int) -> dict:
    """Adherence and PSNR/SSIM of every INT8 UNet recipe (``sdaccel.toy.adherence``)."""
    out = adherence.evaluate(
        checkpoint,
        work,
        prompts,
        pipelines=("torch_fp32", "ov_f32"),
        variants=("int8_weights", "hybrid", "full_int8", *FLOAT_GROUP_VARIANTS),
    )
    return {"config": out["config"], "rows": out["rows"]}


def quality_deepcache(checkpoint: str, work: str, prompts: int, intervals: list[int]) -> dict:
    """DeepCache's cost (``sdaccel.toy.deepcache_quality.measure``), f32 and full INT8 at the first interval."""
    out = deepcache_quality.measure(
        checkpoint,
        work,
        num_prompts=prompts,
        intervals=intervals,
        int8_intervals=intervals[:1],
        progress=False,
    )
    return {"settings": out["settings"], "rows": out["rows"]}


def quality_vae(checkpoint: str, work: str, prompts: int) -> dict:
    return adherence.vae_decoder_quality(checkpoint, work, VAE_VARIANTS, num_prompts=prompts)


def quality_tome(checkpoint: str, work: str, prompts: int, ratios: list[float]) -> dict:
    """Token merging's cost (``sdaccel.toy.tome_quality.measure``): adherence, PSNR/SSIM against the
    unmerged f32 images, at each ratio."""
    out = tome_quality.measure(checkpoint, work, ratios=ratios, num_prompts=prompts, progress=False)
    return {"settings": out["settings"], "rows": out["rows"]}


def bench_quality(args) -> dict:
    """The quality cost of the levers that change numbers, on a trained tiny checkpoint, each part
    of ``--quality-parts`` in a child: the INT8 UNets (adherence, PSNR/SSIM vs f32), DeepCache at
    each interval, the INT8 VAE decoders, token merging at each ratio; and the max abs difference
    of the levers that should not change them."""
    checkpoint, prompts = args.quality, args.quality_prompts
    work = Path(args.workdir) / "quality" / label(checkpoint).replace("/", "--")
    limit, free = args.memory_limit_gb, args.min_free_gb
    print(f"[quality] {checkpoint}, {prompts} held-out prompts", flush=True)
    jobs = {
        "int8_unet": (quality_int8, checkpoint, str(work / "int8"), prompts),
        "deepcache": (
            quality_deepcache,
            checkpoint,
            str(work / "deepcache"),
            prompts,
            args.deepcache_intervals,
        ),
        "vae_int8": (quality_vae, checkpoint, str(work / "vae"), prompts),
        "levers_max_abs_diff": (quality_levers, checkpoint, str(work / "levers"), 2),
        "tome": (quality_tome, checkpoint, str(work / "tome"), prompts, args.tome_ratios),
    }
    out = {"checkpoint": checkpoint, "prompts": prompts}
    for name, (fn, *fn_args) in jobs.items():
        if name not in args.quality_parts:
            continue
        run = run_child(f"quality: {name}", fn, *fn_args, limit_gb=limit, min_free_gb=free)
        out[name] = summarize_run(run)
    return out
