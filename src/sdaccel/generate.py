"""Batch image generation from a prompt file, on every device of one host or of a multi-host slice.

    python -m sdaccel.generate --model stabilityai/stable-diffusion-xl-base-1.0 \\
        --prompts prompts.txt --out outputs/run1 --batch 8 --steps 20 --height 1024 --width 1024

What it does:

1. Joins the other processes when the environment says there are several
   (``sdaccel.distributed.initialize``: explicit ``SDACCEL_*`` variables, a Kubernetes indexed
   Job's index, or a Cloud TPU / GKE TPU slice's own settings), and turns on the persistent
   compilation cache when ``--cache-dir`` is given (a restarted job then skips the compile).
2. Builds the mesh (``--mesh``: ``auto`` puts every device on ``"data"``; ``4x2`` adds a
   ``"model"`` axis of 2) and loads the weights straight onto it.
3. Cuts the prompt file into global batches of ``--batch`` prompts. The ``"data"`` axis must divide
   ``--batch`` (an error says so before anything loads). The last batch, when shorter, is padded
   by repeating its last prompt and the padding images are dropped (the only padding there is).
   Prompt ``k`` of the file always gets noise index ``k``: the images do not depend on the batch
   size, the number of devices or of hosts.
4. Every process encodes only its rows; process 0 gathers the images and writes
   ``DIR/00000.png ...``, ``DIR/images.jsonl`` (file, prompt, noise index) and ``DIR/timing.json``
   (compile time kept apart from run time, images per second, the device summary).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DTYPES = ("bfloat16", "float32", "float16")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sdaccel.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="checkpoint folder or hub id")
    p.add_argument(
        "--prompts", required=True, type=Path, help="text file, one prompt per line (blank lines skipped)"
    )
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--negative-prompt", default=None, help="one negative prompt for every image")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--height", type=int, default=1024)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument(
        "--batch", type=int, default=None, help="global batch (default: one image per 'data' device)"
    )
    p.add_argument("--guidance", type=float, default=5.0, help="classifier-free guidance scale (<= 1: off)")
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    p.add_argument("--mesh", default="auto", help="'auto', 'DATA' or 'DATAxMODEL' (e.g. 4x2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variant", default=None, help="weights variant to read, e.g. fp16")
    p.add_argument("--cache-dir", default=None, help="persistent compilation cache folder")
    p.add_argument("--coordinator-address", default=None, help="host:port of process 0 (multi-host)")
    p.add_argument("--num-processes", type=int, default=None)
    p.add_argument("--process-id", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    return p


def read_prompts(path: Path) -> list[str]:
    if not path.is_file():
        raise SystemExit(f"Prompt file {path} does not exist.")
    prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not prompts:
        raise SystemExit(f"Prompt file {path} holds no prompts (one per line).")
    return prompts


def run(args: argparse.Namespace) -> dict:
    """Generate every prompt of ``args.prompts``; return the summary written to ``timing.json``."""
    from sdaccel import distributed

    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)

    import jax.numpy as jnp

    from sdaccel import bench
    from sdaccel import sharding as sh
    from sdaccel.pipeline import to_pil

    wall_start = time.perf_counter()
    if args.cache_dir:
        bench.enable_compilation_cache(args.cache_dir)
    prompts = read_prompts(args.prompts)
    mesh = sh.make_mesh(*sh.parse_mesh(args.mesh))
    batch = args.batch or sh.axis_size(mesh, sh.DATA)
    sh.check_batch(batch, mesh)
    main = distributed.is_main_process()
    if main:
        args.out.mkdir(parents=True, exist_ok=True)

    load_start = time.perf_counter()
    pipe = sh.ShardedPipeline.from_pretrained(
        args.model,
        mesh,
        dtype=jnp.dtype(args.dtype),
        variant=args.variant,
        progress=main and not args.no_progress,
    )
    load_s = time.perf_counter() - load_start

    starts = range(0, len(prompts), batch)
    if main and not args.no_progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="batches", unit="batch")
    records, batches = [], []
    for start in starts:
        chunk = prompts[start : start + batch]
        n_real = len(chunk)
        chunk += [chunk[-1]] * (batch - n_real)  # a short last batch: padded, so one program serves all
        images, timings = pipe.generate(
            chunk,
            args.negative_prompt,
            steps=args.steps,
            guidance_scale=args.guidance,
            height=args.height,
            width=args.width,
            seed=args.seed,
            start_index=start,
        )
        host = distributed.gather(images, to="process0")
        batches.append({**timings, "first_index": start, "images_kept": n_real})
        if host is None:
            continue
        for k, image in enumerate(to_pil(host[:n_real])):
            name = f"{start + k:05d}.png"
            image.save(args.out / name)
            records.append({"file": name, "prompt": chunk[k], "noise_index": start + k, "seed": args.seed})

    # the first batch carries the compile; steady state is measured on the others when there are any
    steady = batches[1:] or batches
    run_s = sum(b["run_s"] for b in steady)
    images_steady = sum(b["batch"] for b in steady)
    summary = {
        "model": str(args.model),
        "prompts": len(prompts),
        "batch": batch,
        "batches": len(batches),
        "steps": args.steps,
        "height": args.height,
        "width": args.width,
        "guidance": args.guidance,
        "dtype": args.dtype,
        "seed": args.seed,
        "mesh": dict(mesh.shape),
        **bench.device_summary(),
        "load_s": load_s,
        "compile_s": sum(b["compile_s"] for b in batches),
        "steady_run_s_per_batch": run_s / len(steady),
        "images_per_s": images_steady / run_s,
        "wall_s": time.perf_counter() - wall_start,
        "per_batch": batches,
    }
    if main:
        (args.out / "images.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (args.out / "timing.json").write_text(json.dumps(summary, indent=2))
    distributed.barrier("sdaccel.generate done")
    return summary


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    summary = run(args)
    from sdaccel import distributed

    if distributed.is_main_process():
        print(
            f"{summary['prompts']} images in {args.out} | compile {summary['compile_s']:.1f} s | "
            f"{summary['images_per_s']:.2f} images/s on {summary['device_count']} {summary['device_kind']} devices",
            file=sys.stderr,
        )
    distributed.shutdown()


if __name__ == "__main__":
    main()
