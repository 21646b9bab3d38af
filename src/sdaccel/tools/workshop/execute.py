"""Executing one notebook with papermill under a profile (:func:`execute`): its parameters, a kernel
whose environment carries the profile and the run's marker, a second kernel when the first did not
start, the memory watched meanwhile, and a failure that names the cell (:func:`failed_cell`). The
executed copy and the outputs of the last finished run stay in place until the run finishes
(:mod:`sdaccel.tools.workshop.run_files`)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from sdaccel.core.faults import fault_point
from sdaccel.core.staging import writer_lock
from sdaccel.course import run_profiles
from sdaccel.tools.workshop.discovery import PROFILE_ENV, PROFILES, discover
from sdaccel.tools.workshop.memory_watch import MemoryWatch, cell_peaks
from sdaccel.tools.workshop.run_files import (
    RUN_MARKER,
    RunFiles,
    cache_entries,
    end_run_processes,
    found_from_earlier,
    set_aside_outputs,
    settle_run,
    start_guard,
    stop_guard,
)
from sdaccel.tools.workshop.widget_state import drop_widget_state_in


class NotebookFailed(RuntimeError):
    """A cell raised: the message names the notebook and the cell; ``run`` holds the time and
    memory measured up to the failure (``None`` when it did not run)."""

    run: Run | None = None


@dataclass
class Run:
    notebook: Path
    executed: Path
    output_dir: Path
    seconds: float
    started: float = 0.0  #: wall-clock time (``time.time()``) when the execution began
    #: peak memory of the kernel and of the processes it started
    #: (:class:`~sdaccel.tools.workshop.memory_watch.MemoryPeaks`, as a dict)
    memory: dict | None = None
    #: the cells during which the run held the most memory
    #: (:func:`~sdaccel.tools.workshop.memory_watch.cell_peaks`)
    cells: list[dict] | None = None
    #: what it started with from earlier runs and left as it was
    #: (:func:`~sdaccel.tools.workshop.run_files.found_from_earlier`)
    found: list[str] | None = None


def profile_parameters(notebook: Path, profile: str, checkpoints: Path, output_dir: Path) -> dict:
    """The papermill parameters of ``notebook`` under ``profile``: :func:`sdaccel.course.run_profiles.overrides`
    and the output folder."""
    if profile not in PROFILES:
        raise SystemExit(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    # the kernel works in the notebook's folder (papermill's cwd, as Jupyter's): the folders it is
    # handed, and so the ones it prints, are relative to it where they lie in the repository
    params = run_profiles.overrides(notebook.stem, profile, checkpoints, relative_to=notebook.parent)
    params["OUTPUT_DIR"] = run_profiles.within_repo(Path(output_dir).resolve(), notebook.parent)
    return params


def failed_cell(executed: Path, error: BaseException | None = None) -> str:
    """Where a run failed, read from papermill's executed copy: the cell that raised, with its index,
    first line and error; or, when none raised (a kernel killed, e.g. for memory, raises nothing),
    the last cell that started, with ``error`` (papermill's, such as ``DeadKernelError``)."""
    try:
        nb = json.loads(executed.read_text())
    except (OSError, json.JSONDecodeError):
        return "an unknown cell"

    def first_line(cell) -> str:
        first = "".join(cell.get("source", "")).strip().splitlines()
        return repr(first[0][:80] if first else "empty")

    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"cell {i} ({first_line(cell)}): {out.get('ename')}: {out.get('evalue')}"
    started = [
        (cell["metadata"]["papermill"]["start_time"], i)
        for i, cell in enumerate(nb.get("cells", []))
        if (cell.get("metadata", {}).get("papermill") or {}).get("start_time")
    ]
    if not started:
        return "an unknown cell"
    _, i = max(started)
    cell = nb["cells"][i]
    cause = "no error recorded" if error is None else f"{type(error).__name__}: {error}".strip()
    return (
        f"cell {i} (In [{cell.get('execution_count')}], {first_line(cell)}), the last one that started: "
        f"its kernel stopped without a Python error ({cause}), as a kernel killed for memory does"
    )


def execute(
    notebook: Path,
    profile: str,
    build_dir: Path,
    checkpoints: Path,
    timeout: int | None = None,
) -> Run:
    """Run one notebook with papermill; raise :class:`NotebookFailed` naming the cell on error.

    The executed copy and the outputs of the last finished run stay in place until this run
    finishes (:class:`~sdaccel.tools.workshop.run_files.RunFiles`). A run stopped half-way by
    Ctrl-C, or by its process being killed, ends its kernel and every process the kernel started,
    and leaves the last finished run in place (a guard process does it when the runner is killed:
    :func:`~sdaccel.tools.workshop.run_files.guard_run`). Two runs of one notebook into one build
    folder take turns.
    """
    run = RunFiles.of(notebook, profile, build_dir)
    params = profile_parameters(notebook, profile, checkpoints, run.output_dir)
    run.executed.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(run.executed):
        # 1. Settle what a run stopped together with its guard left (a killed process group)
        stale = RunFiles.read(run.note)
        if stale is not None:
            end_run_processes(stale.run_id)
            print(f"  (an earlier run was stopped: {settle_run(run.note)})", flush=True)
        # 2. Record the run (before anything moves), set the earlier outputs aside, start the guard
        stems = [p.stem for p in discover(notebook.parent)]
        caches = cache_entries(run.output_dir.parent, notebook.stem, stems)
        run.run_id, run.had_outputs = uuid.uuid4().hex, run.output_dir.exists()
        run.write()
        guard = None
        try:
            set_aside_outputs(run.output_dir, run.earlier)
            guard = start_guard(run)
            # 3. Execute into the working copy
            started, seconds, error = _papermill(notebook, run, profile, params, checkpoints, timeout)
            # 4. Publish it, a failed run's too (its copy shows the error); the note says so first.
            #    A run that wrote no copy (its kernel did not start) is undone instead.
            if run.working.exists():
                drop_widget_state_in(
                    run.working
                )  # the executed copy is documentation: text, not widget state
                run.finished = True
                run.write()
                fault_point("run_notebooks.before-publish")
            _publish(run, build_dir)
        except BaseException as stop:
            stop_guard(guard, run)
            settled = settle_run(run.note)
            if isinstance(stop, KeyboardInterrupt) and settled:
                again = "" if run.finished else " Run it again to execute it."
                print(f"Interrupted: {settled}{again}", file=sys.stderr, flush=True)
            raise
        stop_guard(guard, run)
    found = found_from_earlier(caches, cache_entries(run.output_dir.parent, notebook.stem, stems))
    measured = Run(notebook, run.executed, run.output_dir, seconds, started, run.memory, run.cells, found)
    if error is not None and not run.finished:
        failed = NotebookFailed(
            f"{notebook.name} failed before it ran a cell ({type(error).__name__}: {error}); its earlier "
            "executed copy and outputs are in place."
        )
        failed.run = measured
        raise failed from error
    if error is not None:
        failed = NotebookFailed(
            f"{notebook.name} failed in {failed_cell(run.executed, error)} (executed copy: {run.executed})"
        )
        failed.run = measured  # its time and memory, up to the failure (an OOM is a measurement too)
        raise failed from error
    return measured


#: How many kernels a run starts before it gives up on one that does not answer. jupyter_client
#: picks the kernel's five TCP ports, frees them, and the kernel binds them a moment later: another
#: process (a second runner, a test worker starting its own kernel) can take one in between, and
#: the kernel dies with "Address already in use" while papermill waits 60 s for it. A new kernel
#: gets new ports.
KERNEL_START_TRIES = 2


def kernel_did_not_start(error: Exception, working: Path) -> bool:
    """Whether a papermill run failed before its kernel ran any cell: not a cell's error
    (``PapermillExecutionError``), and no code cell of the working copy has run. Only then is it
    safe to start the run again: no cell has written anything."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(error, PapermillExecutionError):
        return False
    try:
        cells = json.loads(working.read_text()).get("cells", [])
    except FileNotFoundError:
        return True
    except (OSError, json.JSONDecodeError):
        return False
    return not any(c.get("cell_type") == "code" and c.get("execution_count") for c in cells)


def _papermill(
    notebook: Path, run: RunFiles, profile: str, params: dict, checkpoints: Path, timeout: int | None
) -> tuple[float, float, Exception | None]:
    """Execute ``notebook`` into ``run.working`` in a kernel whose environment has the profile's
    settings and :data:`~sdaccel.tools.workshop.run_files.RUN_MARKER`. Returns when it started
    (``time.time()``), its seconds, and the error of a failed cell (or ``None``); Ctrl-C and the
    like go through."""
    import papermill

    env_backup = dict(os.environ)
    # the kernel's profile cell (sdaccel.course.run_profiles.start) reads the same profile and checkpoints
    os.environ.update(
        {**PROFILE_ENV[profile], run_profiles.CHECKPOINTS_VAR: str(checkpoints), RUN_MARKER: run.run_id}
    )
    started, start, error = time.time(), time.perf_counter(), None
    watch = MemoryWatch(run.run_id)
    try:
        with watch:
            for attempt in range(1, KERNEL_START_TRIES + 1):
                try:
                    papermill.execute_notebook(
                        str(notebook),
                        str(run.working),
                        parameters=params,
                        cwd=str(notebook.parent),
                        kernel_name="python3",
                        progress_bar=False,
                        execution_timeout=timeout,
                    )
                    error = None
                    break
                except Exception as err:  # PapermillExecutionError for a cell; anything else fails too
                    error = err
                    if attempt == KERNEL_START_TRIES or not kernel_did_not_start(err, run.working):
                        break
                    print(f"  (the kernel did not start: {err}; starting another)", flush=True)
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
        run.memory = asdict(watch.peaks)
        try:
            run.cells = cell_peaks(json.loads(run.working.read_text()), watch.timeline)
        except (OSError, json.JSONDecodeError):  # no copy written (the kernel did not start)
            run.cells = None
    return started, time.perf_counter() - start, error


def _publish(run: RunFiles, build_dir: Path) -> None:
    """Publish a finished run, or undo one that wrote nothing
    (:func:`~sdaccel.tools.workshop.run_files.settle_run`), saying where the earlier copy and
    outputs went."""
    kept_copy, kept_outputs = run.executed.exists(), run.earlier.exists()
    settled = settle_run(run.note)
    if not run.finished:
        print(f"  ({settled})", flush=True)
        return
    if kept_copy:
        print(f"  (kept the earlier executed copy as {run.previous_copy.relative_to(build_dir.parent)})")
    if kept_outputs:
        previous = run.output_dir.with_name(run.output_dir.name + ".previous")
        print(f"  (moved the earlier outputs to {previous.relative_to(build_dir.parent)})")
