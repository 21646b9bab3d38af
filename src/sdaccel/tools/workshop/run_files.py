"""Where one run of a notebook writes, and how a run stopped half-way leaves the last finished one
in place: the output folder set aside and put back (only :data:`REUSED` carries over), the hidden
working copy published when the run finishes (:class:`RunFiles`, :func:`settle_run`), and the guard
process that ends the run's processes and settles what a killed runner left (:func:`guard_run`).
What a run found from earlier runs (:func:`cache_entries`, :func:`found_from_earlier`) is read here
too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from sdaccel.core.staging import replace_text, writer_lock

#: Subfolders of a notebook's output folder that a re-run reuses: an OpenVINO export kept there
#: (``EXPORT_DIR`` set to one), which ``export_pipeline`` reuses only when complete and exported
#: from the same source (and re-exports otherwise). Everything else starts empty on every run.
REUSED = ("openvino",)


def cache_entries(outputs: Path, own: str, notebooks: Iterable[str]) -> dict[str, float]:
    """What a notebook's run can read back from earlier runs instead of making it: each entry of
    the folders of ``outputs`` that belong to no notebook (the OpenVINO exports of ``openvino/``,
    the TPU plans of ``tpu-plan/``) and of its own reusable folders (:data:`REUSED`), as its path
    relative to ``outputs`` -> its modification time. ``own``: the notebook's stem; ``notebooks``:
    every notebook's stem (their folders, and their hidden and ``.previous`` ones, are theirs)."""
    stems = set(notebooks)
    folders = [
        d
        for d in (sorted(outputs.iterdir()) if outputs.is_dir() else [])
        if d.is_dir() and not d.name.startswith(".") and d.name.removesuffix(".previous") not in stems
    ]
    folders += [outputs / own / name for name in REUSED if (outputs / own / name).is_dir()]
    return {
        entry.relative_to(outputs).as_posix(): entry.lstat().st_mtime
        for folder in folders
        for entry in sorted(folder.iterdir())
        if not entry.name.startswith(".")
    }


def found_from_earlier(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """The entries of :func:`cache_entries` that a run started with and left as they were: what it
    may have read back (an export, a compiled plan) where a first run makes it. Its time is then
    not a first run's."""
    return sorted(path for path, mtime in before.items() if after.get(path) == mtime)


def set_aside_outputs(output_dir: Path, earlier: Path) -> bool:
    """Empty ``output_dir`` for a new run, the earlier outputs moved whole to ``earlier`` (a hidden
    folder beside it) and their reusable exports (:data:`REUSED`) moved back. Returns whether there
    were earlier outputs. :func:`keep_as_previous` or :func:`put_back_outputs` ends the run."""
    if not output_dir.exists():
        output_dir.mkdir(parents=True)
        return False
    shutil.rmtree(earlier, ignore_errors=True)
    output_dir.rename(earlier)
    output_dir.mkdir()
    for name in REUSED:
        if (earlier / name).exists():
            (earlier / name).rename(output_dir / name)
    return True


def keep_as_previous(output_dir: Path, earlier: Path) -> Path | None:
    """A run finished: its earlier outputs (``earlier``) become ``<output_dir>.previous``, replacing
    an older one. Returns that folder, or ``None`` when the run had no earlier outputs."""
    previous = output_dir.with_name(output_dir.name + ".previous")
    if not earlier.exists():
        return None
    shutil.rmtree(previous, ignore_errors=True)
    earlier.rename(previous)
    return previous


def put_back_outputs(output_dir: Path, earlier: Path, had_outputs: bool) -> None:
    """A run stopped before it finished: what it wrote to ``output_dir`` goes, and the earlier
    outputs come back in its place, with the reusable exports (:data:`REUSED`), which are whole
    whenever they are there (the exporter publishes them by rename). Without earlier outputs, only
    those exports stay."""
    if earlier.exists():
        for name in REUSED:
            if (output_dir / name).exists() and not (earlier / name).exists():
                (output_dir / name).rename(earlier / name)
        shutil.rmtree(output_dir, ignore_errors=True)
        earlier.rename(output_dir)
    elif not had_outputs and output_dir.is_dir():
        for entry in output_dir.iterdir():
            if entry.name in REUSED:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        if not any(output_dir.iterdir()):
            output_dir.rmdir()


def fresh_output_dir(output_dir: Path) -> Path | None:
    """Empty ``output_dir`` for a new run without losing the last one's results.

    An existing folder is moved whole to ``<output_dir>.previous`` (replacing an older one), and
    the reusable exports of :data:`REUSED` are moved back. Returns the previous folder, or
    ``None`` when there was none. Within one Jupyter session, ``Results`` still updates
    ``results.json`` key by key; only a new run by this runner starts empty.
    (:func:`~sdaccel.tools.workshop.execute.execute` does the same in two steps, so that a run
    stopped half-way puts the earlier outputs back.)
    """
    earlier = output_dir.with_name(f".{output_dir.name}.earlier")
    set_aside_outputs(output_dir, earlier)
    return keep_as_previous(output_dir, earlier)


# ----------------------------------------------------------------------------------------------
# A run that is stopped half-way (Ctrl-C, its process killed) leaves the last finished run in place
# ----------------------------------------------------------------------------------------------

#: The environment variable that marks every process of one notebook run: the kernel inherits it
#: from the runner, and whatever the kernel starts inherits it from the kernel, whatever their
#: process group (:func:`end_run_processes`).
RUN_MARKER = "SDACCEL_NOTEBOOK_RUN"

#: The guard of a run (:func:`guard_run`), in a Python of its own. It ignores Ctrl-C, which a
#: terminal sends to the runner's whole process group: it must outlive the runner to clean up.
GUARD = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
from pathlib import Path
from sdaccel.tools.workshop.run_files import guard_run
guard_run(Path(sys.argv[1]))
"""


@dataclass
class RunFiles:
    """Where one run of a notebook writes, and what it keeps until it finishes.

    papermill writes the executed copy to the hidden ``working`` file, which replaces ``executed``
    only when the run finishes (the earlier copy is kept as ``<name>.previous.ipynb``); the earlier
    outputs wait in the hidden folder ``earlier`` meanwhile. The hidden ``note`` (JSON) records the
    run while it lasts, so that whoever settles it (:func:`settle_run`) knows what to put back.
    """

    notebook: str
    executed: Path
    working: Path
    output_dir: Path
    earlier: Path
    note: Path
    run_id: str = ""
    had_outputs: bool = False
    finished: bool = False
    #: the run's peak memory (:class:`~sdaccel.tools.workshop.memory_watch.MemoryPeaks`), once it has run
    memory: dict | None = None
    cells: list[dict] | None = (
        None  #: its cells that held the most memory (:func:`~sdaccel.tools.workshop.memory_watch.cell_peaks`)
    )

    @classmethod
    def of(cls, notebook: Path, profile: str, build_dir: Path) -> RunFiles:
        out_dir = build_dir / profile
        output_dir = out_dir / "outputs" / notebook.stem
        return cls(
            notebook=notebook.name,
            executed=out_dir / notebook.name,
            working=out_dir / f".{notebook.stem}.running.ipynb",
            output_dir=output_dir,
            earlier=output_dir.with_name(f".{notebook.stem}.earlier"),
            note=out_dir / f".{notebook.stem}.running.json",
        )

    @classmethod
    def read(cls, note: Path) -> RunFiles | None:
        try:
            data = json.loads(note.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        paths = ("executed", "working", "output_dir", "earlier", "note")
        return cls(**{k: Path(v) if k in paths else v for k, v in data.items()})

    def write(self) -> None:
        data = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        replace_text(self.note, json.dumps(data, indent=1))

    @property
    def previous_copy(self) -> Path:
        return self.executed.with_suffix(".previous.ipynb")


def end_run_processes(run_id: str) -> list[int]:
    """Kill (``SIGKILL``) every process that carries ``RUN_MARKER=run_id`` in its environment: the
    kernel of that run and every process it started. Returns their pids."""

    ended: list[int] = []
    for _ in range(5):  # again, for a process started while the others were being killed
        found = []
        for proc in psutil.process_iter():
            if proc.pid == os.getpid():
                continue
            try:
                if proc.environ().get(RUN_MARKER) == run_id:
                    proc.kill()
                    found.append(proc.pid)
            except psutil.Error:
                continue
        if not found:
            break
        ended += found
    return ended


def settle_run(note: Path) -> str | None:
    """Settle the run that ``note`` records and that nobody runs any more; say what was done.

    1. A run that finished (its note says so) is published: the working copy becomes the executed
       copy, the earlier one kept as ``<name>.previous.ipynb``, and the earlier outputs become
       ``<output_dir>.previous``. Each step can be done again, so a publication cut short is
       completed.
    2. A run that did not finish is undone: its working copy is deleted and the earlier outputs are
       put back (:func:`put_back_outputs`); the executed copy was never touched.
    """
    run = RunFiles.read(note)
    if run is None:
        note.unlink(missing_ok=True)
        return None
    if run.finished:
        if run.working.exists():
            if run.executed.exists():
                shutil.copy2(run.executed, run.previous_copy)
            os.replace(run.working, run.executed)
        keep_as_previous(run.output_dir, run.earlier)
        note.unlink(missing_ok=True)
        return f"{run.notebook} had finished: its executed copy and outputs are now in place."
    run.working.unlink(missing_ok=True)
    put_back_outputs(run.output_dir, run.earlier, run.had_outputs)
    note.unlink(missing_ok=True)
    if run.had_outputs or run.executed.exists():
        return f"{run.notebook} did not finish: its earlier executed copy and outputs are back in place."
    return f"{run.notebook} did not finish, and nothing of it was kept (it had no earlier run)."


def guard_run(note: Path) -> None:
    """The guard of a run (started by :func:`start_guard`): wait until the runner says ``done`` on
    standard input, or dies (the input ends), then end every process of the run
    (:func:`end_run_processes`: a kernel lives on for a moment after its runner, and what it
    started for good). When the runner died, settle what it left (:func:`settle_run`), taking its
    turn as a writer of the executed copy."""
    run = RunFiles.read(note)
    said = sys.stdin.readline().strip()
    if run is None:
        return
    end_run_processes(run.run_id)
    if said == "done":
        return
    with writer_lock(run.executed):
        if run.note.exists():
            settled = settle_run(run.note)
            if settled:
                print(f"The runner of {run.notebook} was stopped: {settled}", file=sys.stderr, flush=True)


def start_guard(run: RunFiles) -> subprocess.Popen | None:
    """Start the guard of ``run`` (:func:`guard_run`) in a Python process of its own, which outlives
    the runner by as long as it takes to clean up; ``None`` if it cannot start (the runner then
    cleans up alone, and the next run settles what a killed runner left)."""
    env = {k: v for k, v in os.environ.items() if k != RUN_MARKER}
    try:
        return subprocess.Popen(
            [sys.executable, "-c", GUARD, str(run.note)], stdin=subprocess.PIPE, env=env, text=True
        )
    except OSError:
        return None


def stop_guard(guard: subprocess.Popen | None, run: RunFiles) -> None:
    """Tell the guard that the runner is done and wait for it to end the run's processes (here, if
    the guard is gone)."""
    if guard is None or guard.poll() is not None:
        end_run_processes(run.run_id)
        return
    try:
        guard.stdin.write("done\n")
        guard.stdin.close()
    except OSError:
        pass
    try:
        guard.wait(timeout=60)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()
    if guard.returncode != 0:
        end_run_processes(run.run_id)
