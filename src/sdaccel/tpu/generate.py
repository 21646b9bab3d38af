"""Batch image generation from a prompt file, on every device of one host or of a multi-host slice.

    python -m sdaccel.tpu.generate --model stabilityai/stable-diffusion-xl-base-1.0 \\
        --prompts prompts.txt --out outputs/run1 --batch 8 --steps 20 --height 1024 --width 1024

What it does:

1. Joins the other processes when the environment says there are several
   (``sdaccel.tpu.distributed.initialize``: explicit ``SDACCEL_*`` variables, a Kubernetes indexed
   Job's index, or a Cloud TPU / GKE TPU slice's own settings).
2. **Checks everything before it writes anything**: the prompt file, the checkpoint's configs,
   size, steps, guidance and seed against the checkpoint's defaults and limits
   (``sdaccel.core.contract.check_inputs``; what you leave out is the checkpoint's default), the mesh
   (``--mesh``: ``auto`` puts every device on ``"data"``; ``4x2`` adds a ``"model"`` axis of 2) and
   the batch (the ``"data"`` axis must divide ``--batch``), and ``--out``: a folder that is not
   empty is refused unless ``--overwrite`` (replace it whole) or ``--resume`` (make only the images
   that ``images.jsonl`` does not list yet, with the same settings).
3. Loads the weights straight onto the mesh, and turns on the persistent compilation cache when
   ``--cache-dir`` is given (a restarted job then skips the compile).
4. Cuts the prompts into global batches of ``--batch``. The last batch, when shorter, is padded by
   repeating its last prompt and the padding images are dropped (they are never counted as
   produced). Prompt ``k`` of the file always gets noise index ``k`` and file ``0000k.png``: the
   images do not depend on the batch size, the number of devices or of hosts.
5. Every process encodes only its rows; process 0 gathers the images and writes ``DIR/00000.png
   ...``, ``DIR/images.jsonl`` (file, prompt, noise index; rewritten atomically after every batch,
   so it lists exactly the images that are complete), ``DIR/run.json`` (the settings, which
   ``--resume`` compares) and ``DIR/timing.json`` (compile time kept apart from run time, real
   images per second, the device summary).

A new or overwritten ``--out`` is written in a staging folder next to it and renamed into place
at the end, so a failed run leaves ``--out`` as it was; ``--resume`` adds to ``--out`` in place.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from sdaccel.core.checkpoint import read_defaults
from sdaccel.core.contract import Request, check_inputs, to_pil
from sdaccel.tpu import compilation, distributed
from sdaccel.tpu.sharded_pipeline import ShardedPipeline
from sdaccel.tpu.sharding import DATA, ShardingError, axis_size, check_batch, make_mesh, parse_mesh

DTYPES = ("bfloat16", "float32", "float16")
RECORDS, SETTINGS, TIMING = "images.jsonl", "run.json", "timing.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sdaccel.tpu.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="checkpoint folder or hub id")
    p.add_argument(
        "--prompts", required=True, type=Path, help="text file, one prompt per line (blank lines skipped)"
    )
    p.add_argument("--out", required=True, type=Path, help="output folder (new or empty; see --overwrite)")
    existing = p.add_mutually_exclusive_group()
    existing.add_argument("--overwrite", action="store_true", help="replace a non-empty --out whole")
    existing.add_argument(
        "--resume", action="store_true", help="add the images that --out's images.jsonl does not list yet"
    )
    p.add_argument("--negative-prompt", default=None, help="one negative prompt for every image")
    p.add_argument("--steps", type=int, default=None, help="sampling steps (default: the checkpoint's)")
    p.add_argument("--height", type=int, default=None, help="default: the checkpoint's training size")
    p.add_argument("--width", type=int, default=None, help="default: the checkpoint's training size")
    p.add_argument(
        "--batch", type=int, default=None, help="global batch (default: one image per 'data' device)"
    )
    p.add_argument(
        "--guidance",
        type=float,
        default=None,
        help="classifier-free guidance scale (<= 1: off; default: the checkpoint's)",
    )
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    p.add_argument("--mesh", default="auto", help="'auto', 'DATA' or 'DATAxMODEL' (e.g. 4x2)")
    p.add_argument("--seed", type=int, default=0, help="an integer in [0, 2**32)")
    p.add_argument("--variant", default=None, help="weights variant to read, e.g. fp16")
    p.add_argument("--cache-dir", default=None, help="persistent compilation cache folder")
    p.add_argument("--coordinator-address", default=None, help="host:port of process 0 (multi-host)")
    p.add_argument("--num-processes", type=int, default=None)
    p.add_argument("--process-id", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    return p


def read_prompts(path: Path) -> list[str]:
    if not path.is_file():
        raise SystemExit(f"Prompt file {path} does not exist: pass a text file with one prompt per line.")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise SystemExit(f"Prompt file {path} cannot be read as text ({err}): save it as UTF-8.") from None
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise SystemExit(f"Prompt file {path} holds no prompts (one per line).")
    return prompts


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _read_records(folder: Path) -> list[dict]:
    path = folder / RECORDS
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_out(
    out: Path, settings: dict, prompts: list[str], overwrite: bool, resume: bool
) -> dict[int, dict]:
    """Refuse an ``--out`` that would mix runs, before anything is written. Returns the records of
    the images that ``--resume`` keeps (``{noise index: record}``; empty otherwise)."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, not a folder: pass a folder path.")
    if not out.is_dir() or not any(out.iterdir()) or overwrite:
        return {}
    if not resume:
        raise FileExistsError(
            f"--out {out} is not empty: pass --overwrite to replace it whole, --resume to add only the "
            "images it does not hold yet, or a new folder."
        )
    if not (out / SETTINGS).is_file():
        raise FileExistsError(
            f"--out {out} holds no {SETTINGS}, so it is not an earlier run of this command: --resume "
            "cannot tell its settings. Pass --overwrite to replace it, or a new folder."
        )
    before = json.loads((out / SETTINGS).read_text())
    changed = sorted(k for k in settings if before.get(k) != settings[k])
    if changed:
        diffs = ", ".join(f"{k}: {before.get(k)!r} -> {settings[k]!r}" for k in changed)
        raise ValueError(
            f"--resume into {out} with other settings ({diffs}) would mix two runs: use the same "
            "settings, --overwrite, or a new folder."
        )
    return {
        r["noise_index"]: r
        for r in _read_records(out)
        if r["noise_index"] < len(prompts)
        and prompts[r["noise_index"]] == r["prompt"]
        and (out / r["file"]).is_file()
    }


def _publish(staging: Path, out: Path) -> None:
    """Put the finished staging folder in place of ``out`` (replaced whole when it exists)."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
        os.replace(out, old / out.name)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old)


def run(args: argparse.Namespace) -> dict:
    """Generate every prompt of ``args.prompts``; return the summary written to ``timing.json``."""
    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)
    wall_start = time.perf_counter()

    # 1. Check everything; nothing is written before the end of this block.
    prompts = read_prompts(args.prompts)
    defaults = read_defaults(args.model)
    request = check_inputs(
        prompts,
        args.negative_prompt,
        args.steps,
        args.guidance,
        args.height,
        args.width,
        args.seed,
        defaults=defaults,
    )
    mesh = make_mesh(*parse_mesh(args.mesh))
    batch = axis_size(mesh, DATA) if args.batch is None else args.batch
    if batch < 1:
        raise ShardingError(f"--batch must be at least 1, got {batch}.")
    check_batch(batch, mesh)
    settings = {
        "model": str(args.model),
        "negative_prompt": args.negative_prompt,
        "steps": request.steps,
        "guidance": request.guidance_scale,
        "height": request.height,
        "width": request.width,
        "seed": request.seed,
        "dtype": args.dtype,
        "variant": args.variant,
    }
    kept = check_out(args.out, settings, prompts, args.overwrite, args.resume)
    todo_mask = np.array([k not in kept for k in range(len(prompts))])
    todo = np.flatnonzero(distributed.broadcast_from_main(todo_mask)).tolist()

    main = distributed.is_main_process()
    in_place = args.resume and args.out.is_dir()
    target = args.out
    if main and not in_place:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        target = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.", suffix=".partial", dir=args.out.parent))
    try:
        summary = _generate(args, prompts, request, mesh, batch, settings, kept, todo, target, main)
        summary["wall_s"] = time.perf_counter() - wall_start
        if main:
            _write_atomically(target / TIMING, json.dumps(summary, indent=2))
            if not in_place:
                _publish(target, args.out)
    except BaseException:
        if main and not in_place:
            shutil.rmtree(target, ignore_errors=True)
        raise
    distributed.barrier("sdaccel.tpu.generate done")
    return summary


def _generate(args, prompts, request: Request, mesh, batch, settings, kept, todo, target: Path, main) -> dict:
    # 1. The settings first, and the persistent compilation cache
    records = dict(kept)
    earlier_files = {r["file"] for r in _read_records(target)} if main else set()
    if main:
        _write_atomically(target / SETTINGS, json.dumps(settings, indent=2))
    if args.cache_dir:
        compilation.enable_compilation_cache(args.cache_dir)
    # 2. Load the pipeline onto the mesh, when there is anything to make
    load_s, batches = 0.0, []
    if todo:
        load_start = time.perf_counter()
        pipe = ShardedPipeline.from_pretrained(
            args.model,
            mesh,
            dtype=jnp.dtype(args.dtype),
            variant=args.variant,
            progress=main and not args.no_progress,
        )
        load_s = time.perf_counter() - load_start
    # 3. Each batch: generate on every device, gather on process 0, write its images and records
    starts = range(0, len(todo), batch)
    for start in tqdm(
        starts, desc="batches", unit="batch", disable=not main or args.no_progress, leave=False
    ):
        indices = todo[start : start + batch]
        chunk = Request(
            [prompts[k] for k in indices],
            None if request.negative_prompts is None else [request.negative_prompts[k] for k in indices],
            request.steps,
            request.guidance_scale,
            request.height,
            request.width,
            request.seed,
        )
        images, timings = pipe.generate_array(chunk, indices=indices, pad_to=batch)
        host = distributed.gather(images, to="process0")
        batches.append({**timings, "first_index": indices[0], "noise_indices": indices})
        if host is None:
            continue
        for k, image in zip(indices, to_pil(host[: len(indices)]), strict=True):
            name = f"{k:05d}.png"
            image.save(target / name)
            records[k] = {"file": name, "prompt": prompts[k], "noise_index": k, "seed": request.seed}
        _write_atomically(target / RECORDS, "".join(json.dumps(records[k]) + "\n" for k in sorted(records)))
    # 4. The records of a run with nothing to make, and no image that no prompt asks for
    if main and not todo:
        _write_atomically(target / RECORDS, "".join(json.dumps(records[k]) + "\n" for k in sorted(records)))
    if main:  # images of an earlier run that the prompt file no longer asks for (--resume)
        for name in earlier_files - {r["file"] for r in records.values()}:
            (target / name).unlink(missing_ok=True)

    # 5. The summary. The first batch carries the compile; steady state is measured on the others
    #    when there are any
    steady = batches[1:] or batches
    run_s = sum(b["run_s"] for b in steady)
    real_images = sum(b["images"] for b in steady)  # never the padding
    return {
        **settings,
        "prompts": len(prompts),
        "made": sum(b["images"] for b in batches),
        "kept_from_before": len(kept),
        "batch": batch,
        "batches": len(batches),
        "mesh": dict(mesh.shape),
        **compilation.device_summary(),
        "load_s": load_s,
        "compile_s": sum(b["compile_s"] for b in batches),
        "steady_run_s_per_batch": run_s / len(steady) if steady else None,
        "images_per_s": real_images / run_s if steady else None,
        "per_batch": batches,
    }


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    summary = run(args)
    if distributed.is_main_process():
        rate = summary["images_per_s"]
        print(
            f"{summary['made']} new images ({summary['prompts']} prompts) in {args.out} | compile "
            f"{summary['compile_s']:.1f} s | {'-' if rate is None else f'{rate:.2f}'} images/s on "
            f"{summary['device_count']} {summary['device_kind']} devices",
            file=sys.stderr,
        )
    distributed.shutdown()


if __name__ == "__main__":
    main()
