"""Execute every notebook in order through papermill, with a named profile.

    python -m sdaccel.tools.workshop.run_notebooks --profile smoke          # tiny checkpoints, 8 simulated devices
    python -m sdaccel.tools.workshop.run_notebooks --profile full           # the notebooks' own defaults
    python -m sdaccel.tools.workshop.run_notebooks --profile smoke --only 01 --only 02

Profiles (``sdaccel.course.run_profiles``, the one place that defines them, also for ``make lab``):

- ``smoke``: each notebook's smoke overrides (:data:`sdaccel.course.run_profiles.SMOKE`: small images, few
  steps, and the trained 1 M-parameter checkpoints ``checkpoints/tiny-shapes-*``), injected by
  papermill, and a kernel that sees 8 simulated CPU devices. It is what CI and the tests run.
- ``full``: no overrides: the real models, on whatever hardware this is.

Executed copies go to ``build/<profile>/`` (never into ``notebooks/``), and each notebook writes
its measurements to ``build/<profile>/outputs/<notebook>/results.json``.

Every run starts from an empty output folder, so a key that a notebook no longer writes cannot
survive from an earlier run. Nothing is lost either: a re-run keeps the earlier executed copy as
``<name>.previous.ipynb`` and moves the earlier output folder whole to ``outputs/<notebook>.previous/``.
Only the folders in :data:`~sdaccel.tools.workshop.run_files.REUSED` come back into the new folder.
The OpenVINO exports that notebooks 04-06 share are not in any notebook's folder but in
``outputs/openvino/`` (one per checkpoint and weight precision,
:func:`sdaccel.cpu.export.default_export_dir`): a re-run finds them and reuses them, and
``export_pipeline`` refuses one made from another checkpoint.

A run stopped half-way changes nothing of the last finished one. Until a run finishes, papermill
writes a hidden working copy and the earlier outputs wait in a hidden folder; the executed copy
and the outputs are swapped in only when it finishes (a failed cell finishes it too: its copy
shows the error). Stopped by Ctrl-C, or killed (the OOM killer, a closed laptop), the run ends its
kernel and every process the kernel started, and puts the earlier outputs back: a guard process,
which outlives the runner, does it when the runner is killed
(:func:`~sdaccel.tools.workshop.run_files.guard_run`). Two runs of one notebook into one build
folder take turns.

The executed copies keep no ipywidgets state: each progress bar is replaced by its final text
(:func:`~sdaccel.tools.workshop.widget_state.drop_widget_state`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sdaccel.tools.toys.random_checkpoints import ensure_tiny
from sdaccel.tools.workshop.discovery import PROFILES, REPO, discover, needed_tiny_checkpoints, select
from sdaccel.tools.workshop.execute import NotebookFailed, execute
from sdaccel.tools.workshop.output_checks import (
    banned_phrases,
    cells_without_figures,
    machine_paths,
    noisy_outputs,
)
from sdaccel.tools.workshop.run_summary import SUMMARY_JSON, SUMMARY_TABLE, summary_row, write_summary


def run_all(
    profile: str, only: list[str] | None = None, build_dir: Path | None = None, keep_going: bool = False
):
    build_dir = Path(build_dir or REPO / "build")
    if profile not in PROFILES:
        raise SystemExit(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    notebooks = select(discover(), only)
    checkpoints = build_dir / "checkpoints"
    if profile == "smoke":
        for name in sorted(needed_tiny_checkpoints(notebooks)):
            ensure_tiny(checkpoints, name)
    runs, failures, rows = [], [], []
    for nb in notebooks:
        print(f"[{profile}] {nb.name} ...", flush=True)
        try:
            run = execute(nb, profile, build_dir, checkpoints)
        except NotebookFailed as err:
            print(f"  FAILED: {err}", flush=True)
            failures.append(str(err))
            if err.run is not None:
                rows.append(summary_row(err.run, profile, "failed"))
                write_summary(build_dir, profile, rows)
            if not keep_going:
                break
            continue
        runs.append(run)
        rows.append(summary_row(run, profile, "ok"))
        write_summary(build_dir, profile, rows)
        print(f"  ok in {run.seconds:.0f} s -> {run.executed.relative_to(build_dir.parent)}", flush=True)
        executed = json.loads(run.executed.read_text())
        for problem in (
            noisy_outputs(executed)
            + [f"{where} (development notes)" for where in banned_phrases(executed)]
            + [f"cell {i}: no inline figure" for i in cells_without_figures(executed)]
            + [f"{where} (an absolute path)" for where in machine_paths(executed, profile)]
        ):
            print(f"  note: {problem}", flush=True)
    return runs, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default="smoke", help=f"one of {', '.join(PROFILES)} (default smoke)")
    parser.add_argument("--only", action="append", help="a notebook number or stem, e.g. 01 (repeatable)")
    parser.add_argument("--build-dir", type=Path, default=REPO / "build")
    parser.add_argument("--keep-going", action="store_true", help="run the rest after a failure")
    args = parser.parse_args(argv)
    try:
        runs, failures = run_all(args.profile, args.only, args.build_dir, args.keep_going)
    except KeyboardInterrupt:  # execute() said which notebook stopped and what is in place
        return 130
    total = sum(r.seconds for r in runs)
    ran = len(runs) + len(failures)
    print(f"\n{len(runs)} of {ran} notebooks ran through, in {total:.0f} s; {len(failures)} failed.")
    summary = Path(args.build_dir) / args.profile / SUMMARY_TABLE
    if summary.is_file():
        print(f"Wall time and peak memory ({summary}, and {SUMMARY_JSON} beside it):")
        print(summary.read_text(), end="")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
