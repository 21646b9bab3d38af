"""The record of a ``bench_whole_image.py`` run (:class:`Bench`): its JSON, written whole after each
step; the artifacts made or reused; the rows, each run in a child watched for memory; ``--resume``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sdaccel.course.whole_image_rows import BASELINE
from sdaccel.cpu.machine import machine_info
from sdaccel.tools.measure.children import run_child, summarize_run


class Bench:
    def __init__(self, args):
        from sdaccel.core.staging import replace_json

        self.args, self.replace_json = args, replace_json
        self.out = Path(args.out)
        self.results = {
            "machine": machine_info(),
            "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
            "settings": dict(vars(args)),
            "artifacts": {},
            "rows": {},
            "complete": False,
        }
        if args.resume and self.out.is_file():
            self.resume(json.loads(self.out.read_text()))

    def resume(self, previous: dict) -> None:
        """Keep the rows an earlier run of the same settings measured (``--resume``): a run stopped
        half-way goes on where it stopped, and its ratios stay against its own PyTorch row."""
        same = (
            "model",
            "size",
            "steps",
            "few_steps",
            "quick",
            "runs",
            "warmup_steps",
            "lcm_variant",
            "compose",
            "stack_interval",
            "stack_layer_interval",
        )
        # a setting a file predates (stack_interval, stack_layer_interval) cannot disagree with rows
        # it has none of
        now = self.args.__dict__
        changed = {k: (previous["settings"].get(k, now[k]), now[k]) for k in same}
        before = changed["lcm_variant"][0]
        before = [before] if isinstance(before, str) else before or []
        if before and self.args.lcm_variant[: len(before)] == before:
            changed.pop("lcm_variant")  # more INT8 recipes after the same ones: their rows are added
        changed = {k: v for k, v in changed.items() if v[0] != v[1]}
        if changed:
            raise SystemExit(
                f"--resume: {self.out} was measured with other settings {changed} (before, now): "
                "pass another --out, or the same settings."
            )
        kept = {k: row for k, row in previous["rows"].items() if row.get("ok")}
        self.results["rows"] = kept
        self.results["artifacts"] = previous.get("artifacts", {})
        self.results["commands"] = [*previous.get("commands", [previous["command"]]), self.results["command"]]
        print(f"--resume: kept {sorted(kept)} from {self.out}")

    def save(self):
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.replace_json(self.out, self.results)

    def child(self, title, fn, *fn_args, limit_gb=None, **kwargs):
        run = run_child(
            title,
            fn,
            *fn_args,
            limit_gb=limit_gb or self.args.memory_limit_gb,
            min_free_gb=self.args.min_free_gb,
            **kwargs,
        )
        return run

    def artifact(self, key, title, fn, *fn_args, path=None, reused_from=None, **kwargs):
        entry = {"path": str(path) if path else None}
        if reused_from is None and path is not None and artifact_made(Path(path)):
            reused_from = "an earlier run of this script (same --workdir)"
        if reused_from:
            earlier = self.results["artifacts"].get(key, {})
            if earlier.get("path") == entry["path"] and (earlier.get("ok") or earlier.get("reused")):
                return True  # --resume: the run that made (or reused) it is on record; keep that record
            entry.update(reused=True, made_by=reused_from)
            self.results["artifacts"][key] = entry
            self.save()
            return True
        run = self.child(title, fn, *fn_args, **kwargs)
        entry.update(reused=False, **summarize_run(run))
        entry.pop("rss_timeline_gb", None)
        self.results["artifacts"][key] = entry
        self.save()
        return run.ok

    def row(self, key, title, fn, *fn_args, **extra):
        run = self.child(title, fn, *fn_args)
        entry = {"key": key, "title": title, **extra, **summarize_run(run), "finished": _now()}
        entry.pop("rss_timeline_gb", None)
        if run.ok:
            from sdaccel.course.whole_image import summarize

            base = self.results["rows"].get(BASELINE, {}).get("median", {})
            entry["median"] = summarize(entry["timed"], base.get("image_s"), base.get("cpu_s"))
        self.results["rows"][key] = entry
        self.save()
        return run.ok


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def artifact_made(path: Path) -> bool:
    """Whether an artifact of an earlier run is there whole (every one is written atomically)."""
    if path.suffix == ".xml":
        return path.is_file() and path.with_suffix(".bin").is_file()
    if path.is_dir():
        return any(path.glob("*.json")) or any(path.glob("*.npz"))
    return path.is_file()
