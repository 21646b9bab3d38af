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
Only the folders in :data:`REUSED` come back into the new folder. The OpenVINO exports that
notebooks 04-06 share are not in any notebook's folder but in ``outputs/openvino/`` (one per
checkpoint and weight precision, :func:`sdaccel.cpu.export.default_export_dir`): a re-run finds
them and reuses them, and ``export_pipeline`` refuses one made from another checkpoint.

A run stopped half-way changes nothing of the last finished one. Until a run finishes, papermill
writes a hidden working copy and the earlier outputs wait in a hidden folder; the executed copy
and the outputs are swapped in only when it finishes (a failed cell finishes it too: its copy
shows the error). Stopped by Ctrl-C, or killed (the OOM killer, a closed laptop), the run ends its
kernel and every process the kernel started, and puts the earlier outputs back: a guard process,
which outlives the runner, does it when the runner is killed (:func:`guard_run`). Two runs of one
notebook into one build folder take turns.

The executed copies keep no ipywidgets state: each progress bar is replaced by its final text
(:func:`drop_widget_state`).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from sdaccel.core.faults import fault_point
from sdaccel.core.processes import MemoryStatus, memory_status
from sdaccel.core.staging import replace_text, update_json, writer_lock
from sdaccel.course import run_profiles

REPO = run_profiles.REPO
NOTEBOOKS = REPO / "notebooks"
PROFILES = run_profiles.PROFILES

#: Environment of the notebook kernels, per profile.
PROFILE_ENV = run_profiles.KERNEL_ENV


#: Subfolders of a notebook's output folder that a re-run reuses: an OpenVINO export kept there
#: (``EXPORT_DIR`` set to one), which ``export_pipeline`` reuses only when complete and exported
#: from the same source (and re-exports otherwise). Everything else starts empty on every run.
REUSED = ("openvino",)


#: Standard-error text that an executed notebook may show (each an exact start). Everything else
#: on stderr is noise that a reader has to ignore, and :func:`noisy_outputs` reports it.
ALLOWED_STDERR: tuple[str, ...] = ()
#: Terminal control other than colours (``ESC[...m``, which Jupyter and the docs render, e.g. in
#: ``jax.debug.visualize_array_sharding``): cursor moves and line erases of live progress bars.
_CONTROL = re.compile(r"\x1b\[(?![\d;]*m)")
_WARNING = re.compile(r"\b[A-Z]\w*Warning\b|^WARNING\b|warnings\.warn\(", re.M)

#: The progress bars of our libraries' loading steps: transformers' over the tensors of each
#: ``from_pretrained``, diffusers' over a pipeline's components. Over in a moment, they are left in a
#: cell as a finished bar: a line of noise. The code that loads hides them
#: (:func:`sdaccel.cpu.export.no_loading_bars`); :func:`noisy_outputs` finds any that is left.
LOADING_BARS = re.compile(
    r"^\s*(Loading weights|Loading pipeline components\.\.\.|Loading checkpoint shards): *\d+%\|", re.M
)

#: NNCF's progress bars (rich's, drawn with heavy horizontal lines): in a notebook's kernel rich
#: shows each pass of ``nncf.quantize`` as a display of its own, left finished in the cell. The code
#: that quantizes hides them (:func:`sdaccel.cpu.quantize.no_progress_bars`).
RICH_BARS = re.compile(r"\u2501{5,}")

#: Phrases of development notes that have no place in a notebook a reader runs (a test checks the
#: notebooks and their executed copies; lower case, matched case-insensitively).
BANNED_PHRASES = (
    "the issue",
    "issue's",
    "target (",
    "speed target",
    "load average",
    "development vm",
    "development machine",
    "shared with other jobs",
    "this project's machine",
    "shared 2-core vm",
    "this machine",
    # the machine's load and its being shared belong in the JSON, not in a lesson's outputs
    ", load ",
    "busy vm",
    "vm busy",
    "vm was shared",
)

#: Where Jupyter saves the state of ipywidgets (tqdm's and rich's live progress bars), and the
#: output that shows one of them.
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def noisy_outputs(nb: dict) -> list[str]:
    """Outputs of an executed notebook (as JSON) that a reader would have to ignore: standard error
    outside :data:`ALLOWED_STDERR`, terminal control codes (live progress bars), warning text,
    frozen progress bars (:func:`frozen_bars`), NNCF's progress bars (:data:`RICH_BARS`), the
    finished bars of a library's loading step (:data:`LOADING_BARS`), raw dicts and JSON (:func:`raw_dumps`), and saved widget state (:func:`saved_widget_state`: without a widget
    manager it reads "Loading widget..."; the runner replaces it by text). One line each."""
    problems = saved_widget_state(nb)
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                text = "".join(out.get("data", {}).get("text/plain", ""))
            else:
                continue
            if out.get("name") == "stderr" and text.strip() and not text.lstrip().startswith(ALLOWED_STDERR):
                problems.append(f"cell {i}: stderr {text.strip()[:160]!r}")
            elif _CONTROL.search(text):
                problems.append(f"cell {i}: terminal control codes {text.strip()[:80]!r}")
            elif _WARNING.search(text):
                problems.append(f"cell {i}: warning {text.strip()[:160]!r}")
            elif frozen := frozen_bars(text):
                problems.append(f"cell {i}: frozen progress bar {frozen[0]!r}")
            elif RICH_BARS.search(text):
                line = next(x for x in text.strip().splitlines() if RICH_BARS.search(x))
                problems.append(
                    f"cell {i}: NNCF's progress bar {line[:80]!r}: quantize under "
                    "sdaccel.cpu.quantize.no_progress_bars()"
                )
            elif loading := LOADING_BARS.search(text):
                line = text[loading.start() :].strip().splitlines()[0]
                problems.append(
                    f"cell {i}: a library's loading bar {line[:120]!r}: load under sdaccel.cpu.export."
                    "no_loading_bars(), or call the library's logging.disable_progress_bar() first"
                )
            elif dumps := raw_dumps(text):
                problems.append(
                    f"cell {i}: a raw dict or JSON dump {dumps[0][:120]!r}: print it as a sentence or a table"
                )
    return problems


def raw_dumps(text: str) -> list[str]:
    """Lines of ``text`` that are a whole dict of three or more keys, as JSON or as Python prints
    it: data a reader has to parse. A labelled value (``precision -> {'unet': 'f32'}``) is not one."""
    import ast

    found = []
    for line in text.splitlines():
        line = line.strip()
        if len(line) < 2 or line[0] != "{" or line[-1] != "}":
            continue
        try:
            value = json.loads(line)
        except ValueError:
            try:
                value = ast.literal_eval(line)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
        if isinstance(value, dict) and len(value) >= 3:
            found.append(line)
    return found


def cell_text(cell: dict, kinds: tuple[str, ...]) -> str:
    """A cell's source and the text of its outputs (streams, and the ``kinds`` of rich data), one
    string: what the checks of an executed copy read."""
    texts = ["".join(cell.get("source", ""))]
    for out in cell.get("outputs", []):
        texts.append("".join(out.get("text", "")))
        texts += ["".join(out.get("data", {}).get(kind, "")) for kind in kinds]
    return "\n".join(texts)


_BAR = re.compile(r"(\d+)%\|([^|]{10})\| *(\d+)/(\d+)")


def frozen_bars(text: str) -> list[str]:
    """The progress-bar lines of ``text`` whose parts disagree, as a bar shows when it was saved
    between two refreshes: a full bar over "12/52", or "23%" over a count of 12 of 52 drawn as 0%.
    A bar that stopped part way but says so consistently (an interrupted loop) is not one."""
    frozen = []
    for line in text.splitlines():
        for match in _BAR.finditer(line):
            percent, bar, n, total = int(match[1]), match[2], int(match[3]), int(match[4])
            if not total:
                continue
            # tqdm rounds the percentage and draws the last tenth as a partial block: one of slack
            if abs(percent - 100 * n / total) > 1 or abs(bar.count("█") - 10 * n / total) > 1:
                frozen.append(line.strip()[:120])
    return frozen


def absolute_paths(nb: dict, root: str | os.PathLike = REPO) -> list[str]:
    """``cell i: line`` for each line of a notebook's sources (the injected parameters among them)
    and text outputs that holds the absolute path of ``root``, the clone that ran it: a reader's
    clone is elsewhere, so the executed copy shows folders relative to the notebook's."""
    roots = {str(root), str(Path(root).resolve())}
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        for line in cell_text(cell, ("text/plain", "text/markdown")).splitlines():
            if any(r in line for r in roots):
                found.append(f"cell {i}: {line.strip()[:160]}")
    return found


def machine_paths(nb: dict, profile: str) -> list[str]:
    """:func:`absolute_paths` of the clone and of the Hugging Face home that the profile's kernels
    read (the rehearsal's hub stand-in): a hub id resolves to a snapshot folder there, which a
    reader's executed copy would show as their own cache, so a notebook prints the id it loaded."""
    roots = [REPO]
    hf_home = PROFILE_ENV[profile].get("HF_HOME")
    if hf_home:
        roots.append(Path(hf_home))
    return [problem for root in roots for problem in absolute_paths(nb, root)]


def cells_without_figures(nb: dict) -> list[int]:
    """Indices of the code cells that call ``plt.show()`` at their top level but have no
    ``image/png`` output (the figure was drawn but not shown inline)."""
    missing = []
    for i, cell in enumerate(nb.get("cells", [])):
        src = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "code" and re.search(r"^plt\.show\(\)", src, re.M):
            if not any("image/png" in out.get("data", {}) for out in cell.get("outputs", [])):
                missing.append(i)
    return missing


def banned_phrases(nb: dict) -> list[str]:
    """``cell i: phrase`` for each :data:`BANNED_PHRASES` in a notebook's sources and text outputs."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        lowered = cell_text(cell, ("text/plain", "text/markdown", "text/html")).lower()
        found += [f"cell {i}: {phrase!r}" for phrase in BANNED_PHRASES if phrase in lowered]
    return found


def saved_widget_state(nb: dict) -> list[str]:
    """What an executed notebook (as JSON) keeps of ipywidgets: saved widget state in its metadata,
    and outputs that only a widget manager can draw. One line each; an empty list when clean."""
    found = ["metadata: saved widget state"] if nb.get("metadata", {}).get("widgets") else []
    for i, cell in enumerate(nb.get("cells", [])):
        if any(WIDGET_VIEW in out.get("data", {}) for out in cell.get("outputs", [])):
            found.append(f"cell {i}: widget output")
    return found


def _widget_text(model_id: str, state: dict) -> list[dict] | None:
    """The outputs that stand for one widget, as text, from its saved final state: a tqdm bar
    (an HBox of label, progress and counter) as tqdm prints it in a terminal; a rich live display
    (an Output widget) as the outputs it captured. ``None`` for any other widget."""
    model = state.get(model_id, {})
    fields = model.get("state", {})
    if model.get("model_name") == "OutputModel":
        return [dict(out) for out in fields.get("outputs", [])]
    if model.get("model_name") != "HBoxModel":
        return None
    layout = state.get(str(fields.get("layout", "")).removeprefix("IPY_MODEL_"), {}).get("state", {})
    if layout.get("visibility") == "hidden" or layout.get("display") == "none":
        return []  # a bar closed with leave=False: tqdm hid it, and a reader of the notebook saw nothing
    parts = [state.get(c.removeprefix("IPY_MODEL_"), {}) for c in fields.get("children", [])]
    if [p.get("model_name") for p in parts] != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, bar, right = (p.get("state", {}) for p in parts)
    total, value = bar.get("max") or 0, bar.get("value") or 0
    filled = int(10 * value / total) if total else 0
    text = f"{left.get('value', '')}|{'█' * filled}{' ' * (10 - filled)}|{right.get('value', '')}"
    text = html.unescape(text).replace("\u2007", " ")
    return [{"output_type": "display_data", "data": {"text/plain": text}, "metadata": {}}]


def drop_widget_state(nb: dict) -> dict:
    """An executed notebook (as JSON) without saved widget state, each widget output replaced by
    its final state as text (:func:`_widget_text`), or by its own ``text/plain`` where that cannot
    be read. The state (up to 130 KB of progress bars per notebook) needs a widget manager's
    JavaScript to show at all; the text shows everywhere, in the docs as a literal block. Empty
    outputs that rich leaves behind (``<pre></pre>`` with no text) go too."""
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.get("cells", []):
        outputs = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                text = _widget_text(data[WIDGET_VIEW].get("model_id", ""), state)
                if text is None:
                    plain = {k: v for k, v in data.items() if k == "text/plain"}
                    text = [{**out, "data": plain}] if plain else []
                outputs += text
            elif (
                out.get("output_type") == "display_data"
                and not "".join(data.get("text/plain", "")).strip()
                and re.fullmatch(r"\s*<pre[^>]*>\s*</pre>\s*", "".join(data.get("text/html", "")) or "x")
            ):
                continue
            else:
                outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


def _drop_widget_state_in(executed: Path) -> None:
    """:func:`drop_widget_state` of an executed copy on disk (rewritten atomically)."""
    try:
        nb = json.loads(executed.read_text())
    except (OSError, json.JSONDecodeError):
        return
    replace_text(executed, json.dumps(drop_widget_state(nb), indent=1, ensure_ascii=False) + "\n")


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
    #: peak memory of the kernel and of the processes it started (:class:`MemoryPeaks`, as a dict)
    memory: dict | None = None
    #: the cells during which the run held the most memory (:func:`cell_peaks`)
    cells: list[dict] | None = None
    #: what it started with from earlier runs and left as it was (:func:`found_from_earlier`)
    found: list[str] | None = None


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


def discover(notebook_dir: Path = NOTEBOOKS) -> list[Path]:
    """All notebooks, in the order of their number prefix (``00_``, ``01_``...)."""
    return sorted(p for p in notebook_dir.glob("[0-9][0-9]_*.ipynb"))


def select(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    if not only:
        return notebooks
    chosen = [nb for nb in notebooks if any(nb.stem == o or nb.stem.startswith(o + "_") for o in only)]
    missing = [o for o in only if not any(nb.stem == o or nb.stem.startswith(o + "_") for nb in notebooks)]
    if missing:
        raise SystemExit(f"No notebook matches {missing}; the notebooks are {[nb.stem for nb in notebooks]}.")
    return chosen


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


def needed_tiny_checkpoints(notebooks: list[Path]) -> set[str]:
    names: set[str] = set()
    for nb in notebooks:
        names |= run_profiles.tiny_checkpoints_needed(nb.stem)
    return names


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
    ``results.json`` key by key; only a new run by this runner starts empty. (:func:`execute` does
    the same in two steps, so that a run stopped half-way puts the earlier outputs back.)
    """
    earlier = output_dir.with_name(f".{output_dir.name}.earlier")
    set_aside_outputs(output_dir, earlier)
    return keep_as_previous(output_dir, earlier)


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
from sdaccel.tools.workshop.run_notebooks import guard_run
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
    memory: dict | None = None  #: the run's peak memory (:class:`MemoryPeaks`), once it has run
    cells: list[dict] | None = None  #: its cells that held the most memory (:func:`cell_peaks`)

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
    import psutil

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


def execute(
    notebook: Path,
    profile: str,
    build_dir: Path,
    checkpoints: Path,
    timeout: int | None = None,
) -> Run:
    """Run one notebook with papermill; raise :class:`NotebookFailed` naming the cell on error.

    The executed copy and the outputs of the last finished run stay in place until this run
    finishes (:class:`RunFiles`). A run stopped half-way by Ctrl-C, or by its process being
    killed, ends its kernel and every process the kernel started, and leaves the last finished run
    in place (a guard process does it when the runner is killed: :func:`guard_run`). Two runs of
    one notebook into one build folder take turns.
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
                _drop_widget_state_in(
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
    settings and :data:`RUN_MARKER`. Returns when it started (``time.time()``), its seconds, and the
    error of a failed cell (or ``None``); Ctrl-C and the like go through."""
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
    """Publish a finished run, or undo one that wrote nothing (:func:`settle_run`), saying where
    the earlier copy and outputs went."""
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


# ----------------------------------------------------------------------------------------------
# Wall time and peak memory of each notebook: its kernel and every process the kernel starts
# ----------------------------------------------------------------------------------------------


@dataclass
class MemoryPeaks:
    """Peak resident memory of one notebook run, in bytes.

    ``kernel_bytes``: the kernel's own high-water mark (``VmHWM``). ``largest_child_bytes``: the
    largest high-water mark of a process the kernel started (a quantization or benchmark child).
    ``tree_bytes``: the largest sum of the current RSS of the kernel and its processes at one
    sample (shared pages counted once per process, so an upper bound). ``children``: processes seen;
    ``samples``: how many times the tree was read.

    The RSS counts the pages of memory-mapped files once per mapping: OpenVINO maps an IR's weights
    for each model it reads, so a kernel that holds two pipelines of one export can report more RSS
    than the machine has. The ``*_anon_bytes`` peaks are the anonymous part (``RssAnon`` +
    ``RssShmem``: heap, compiled weights, activations), the memory that must fit in RAM, sampled
    (a spike shorter than the interval can be missed)."""

    kernel_bytes: int = 0
    largest_child_bytes: int = 0
    tree_bytes: int = 0
    children: int = 0
    samples: int = 0
    kernel_anon_bytes: int = 0
    largest_child_anon_bytes: int = 0
    tree_anon_bytes: int = 0


class MemoryWatch:
    """``with MemoryWatch(run_id) as watch:`` read, every ``interval`` seconds in a thread, the
    processes below this one that carry ``RUN_MARKER=run_id`` (the kernel, which is this process's
    child, and whatever it starts); :attr:`peaks` holds the result.

    Sampled rather than read from ``resource.getrusage(RUSAGE_CHILDREN)`` after the kernel exits:
    ``ru_maxrss`` of the children is one maximum over every child this runner ever reaped (the
    notebooks before, the guard), so it cannot be told per notebook, nor kernel from child; it
    counts a grandchild only if its parent waited for it; and Linux carries ``ru_maxrss`` across
    ``exec``, so the kernel would report at least the runner's RSS at the fork. Each process's
    ``VmHWM`` is exact when read, so a sample misses only what a process gained in its last
    ``interval`` before it ended; ``tree_bytes`` is a sampled sum."""

    def __init__(self, run_id: str, interval: float = 0.5):
        self.run_id, self.interval = run_id, interval
        self.peaks = MemoryPeaks()
        #: ``(time.time(), anonymous bytes of the whole tree)`` at each sample: what :func:`cell_peaks`
        #: lays over the cells' start and end times
        self.timeline: list[tuple[float, int]] = []
        self._marked: dict[tuple[int, float], bool] = {}
        self._seen: set[tuple[int, float]] = set()
        self._stop = None
        self._thread = None

    def _is_marked(self, proc) -> bool:
        import psutil

        try:
            key = (proc.pid, proc.create_time())
            if key not in self._marked:
                self._marked[key] = proc.environ().get(RUN_MARKER) == self.run_id
            return self._marked[key]
        except psutil.Error:
            return False

    def sample(self) -> None:
        """Read the run's processes once and raise the peaks."""
        import psutil

        me, tree, tree_anon, peaks = os.getpid(), 0, 0, self.peaks
        for proc in psutil.Process().children(recursive=True):
            if not self._is_marked(proc):
                continue
            try:
                parent, key = proc.ppid(), (proc.pid, proc.create_time())
                status = memory_status(proc.pid)  # one read of /proc/<pid>/status
                if status is None:  # off Linux: the current RSS for the peak, and no anonymous part
                    rss = proc.memory_info().rss
                    status = MemoryStatus(peak=rss, rss=rss, anon=0)
            except psutil.Error:
                continue
            peak, anon = status.peak, status.anon
            tree, tree_anon = tree + status.rss, tree_anon + anon
            if parent == me:
                peaks.kernel_bytes = max(peaks.kernel_bytes, peak)
                peaks.kernel_anon_bytes = max(peaks.kernel_anon_bytes, anon)
            else:
                self._seen.add(key)
                peaks.largest_child_bytes = max(peaks.largest_child_bytes, peak)
                peaks.largest_child_anon_bytes = max(peaks.largest_child_anon_bytes, anon)
        peaks.tree_bytes = max(peaks.tree_bytes, tree)
        peaks.tree_anon_bytes = max(peaks.tree_anon_bytes, tree_anon)
        peaks.children = len(self._seen)
        peaks.samples += 1
        self.timeline.append((time.time(), tree_anon))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> MemoryWatch:
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="notebook-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


#: How many cells a summary row names: those during which the run held the most memory.
PEAK_CELLS = 3


def cell_peaks(nb: dict, timeline: list[tuple[float, int]], top: int = PEAK_CELLS) -> list[dict]:
    """The ``top`` code cells of the executed copy ``nb`` during which the run's processes held the
    most anonymous memory, the most first: ``{"cell": its execution count (Jupyter's "In [n]"),
    "line": its first line of code, "tree_anon_gib": the largest sample of :class:`MemoryWatch`'s
    ``timeline`` between the cell's start and end}``. papermill writes each cell's start and end
    into its metadata; a cell shorter than the sampling interval may have no sample, and is left
    out. The peak of a notebook says how much it needs; these say which of its steps to shrink."""
    from datetime import datetime

    rows = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("papermill", {})
        if cell.get("cell_type") != "code" or not (meta.get("start_time") and meta.get("end_time")):
            continue
        start, end = (datetime.fromisoformat(meta[key]).timestamp() for key in ("start_time", "end_time"))
        held = [anon for t, anon in timeline if start <= t <= end]
        if held:
            rows.append(
                {
                    "cell": cell.get("execution_count"),
                    "line": _first_code_line(cell),
                    "tree_anon_gib": round(max(held) / 2**30, 2),
                }
            )
    return sorted(rows, key=lambda row: row["tree_anon_gib"], reverse=True)[:top]


def _first_code_line(cell: dict, width: int = 60) -> str:
    source = cell.get("source", "")
    lines = (source if isinstance(source, str) else "".join(source)).splitlines()
    code = next((line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")), "")
    return code if len(code) <= width else code[: width - 3] + "..."


#: The summary of a profile's runs, beside its executed copies: one row per notebook (JSON), and
#: the same rows as a table (Markdown).
SUMMARY_JSON, SUMMARY_TABLE = "summary.json", "summary.md"


def summary_row(run: Run, profile: str, status: str) -> dict:
    """A notebook's row of the summary: status, wall minutes, peak GiB, and the overrides used."""
    memory = MemoryPeaks(**(run.memory or {}))
    gib = 2**30
    return {
        "notebook": run.notebook.stem,
        "status": status,
        "started": round(run.started, 1),
        "wall_min": round(run.seconds / 60, 2),
        "kernel_peak_gib": round(memory.kernel_bytes / gib, 2),
        "largest_child_peak_gib": round(memory.largest_child_bytes / gib, 2),
        "tree_peak_gib": round(memory.tree_bytes / gib, 2),
        "kernel_anon_gib": round(memory.kernel_anon_bytes / gib, 2),
        "largest_child_anon_gib": round(memory.largest_child_anon_bytes / gib, 2),
        "tree_anon_gib": round(memory.tree_anon_bytes / gib, 2),
        "children": memory.children,
        "peak_cells": run.cells,
        "found_from_earlier": run.found,
        "overrides": _profile_table(profile).get(run.notebook.stem, {}),  # as written ({repo}, {checkpoints})
        **machine_row(),  # per row: a profile's rows may come from runs on different machines
    }


def machine_row() -> dict:
    """What ran a notebook: the CPU's model and ISA tier (every CPU time is named by them), its
    cores, and the commit of this repository (``-dirty`` after it where files had changed since;
    ``None`` outside a git checkout)."""
    from sdaccel.core import env
    from sdaccel.cpu.families import isa_tier

    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],  # "-dirty": with changes not committed
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no git, or not in time
        commit = ""
    return {
        "cpu": env.cpu_model(),
        "isa_tier": isa_tier(env.cpu_features()),
        "cpus": os.cpu_count(),
        "commit": commit or None,
    }


def _profile_table(profile: str) -> dict:
    return {"smoke": run_profiles.SMOKE, "rehearsal": run_profiles.REHEARSAL}.get(profile, {})


def format_summary(rows: list[dict]) -> str:
    """The rows as a Markdown table: wall minutes and the peaks of the kernel, its largest child
    and the whole tree, in GiB, each with its anonymous part in brackets (``-`` where a row was
    recorded without it), the cell during which the tree held the most anonymous memory (its "In
    [n]" and GiB; ``-`` for a row recorded without it), what it started with from earlier runs
    (:func:`found_from_earlier`, counted per folder: a row that did is not a first run's time; "not
    recorded" for a row recorded without it), and the CPU that ran it."""
    lines = [
        "| notebook | status | wall min | kernel GiB (anonymous) | largest child GiB (anonymous) "
        "| tree GiB (anonymous) | children | cell with the most (GiB) | started with, from earlier runs "
        "| CPU (ISA tier), cores |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        cpu = f"{r.get('cpu', '?')} ({r.get('isa_tier', '?')}), {r.get('cpus', '?')}"
        lines.append(
            f"| {r['notebook']} | {r['status']} | {r['wall_min']:.1f} | {_peak(r, 'kernel')} | "
            f"{_peak(r, 'largest_child')} | {_peak(r, 'tree')} | {r['children']} | {_top_cell(r)} | "
            f"{_found(r)} | {cpu} |"
        )
    return "\n".join(lines)


def _found(row: dict) -> str:
    if row.get("found_from_earlier") is None:
        return "not recorded"
    folders = Counter(path.rsplit("/", 1)[0] for path in row["found_from_earlier"])
    return ", ".join(f"{folder}/: {n}" for folder, n in sorted(folders.items())) or "nothing"


def _top_cell(row: dict) -> str:
    cells = row.get("peak_cells")
    return f"In [{cells[0]['cell']}] ({cells[0]['tree_anon_gib']:.2f})" if cells else "-"


def _peak(row: dict, part: str) -> str:
    anon = row.get(f"{part}_anon_gib")
    return f"{row[f'{part}_peak_gib']:.2f} ({'-' if anon is None else f'{anon:.2f}'})"


def write_summary(build_dir: Path, profile: str, rows: list[dict]) -> Path:
    """Add ``rows`` to ``build/<profile>/summary.json`` (a notebook run again replaces its row; the
    others stay), then write all of its rows as ``summary.md``. Returns the JSON's path."""
    folder = Path(build_dir) / profile
    path = folder / SUMMARY_JSON

    def merge(data: dict) -> None:
        data["profile"] = profile
        data.setdefault("machine", {}).update(cpus=os.cpu_count(), memory_gib=_memory_gib())
        notebooks = data.setdefault("notebooks", {})
        notebooks.update({r["notebook"]: r for r in rows})
        data["notebooks"] = dict(sorted(notebooks.items()))

    data = update_json(path, merge)
    replace_text(folder / SUMMARY_TABLE, format_summary(list(data["notebooks"].values())) + "\n")
    return path


def _memory_gib() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 2**30, 1)


def run_all(
    profile: str, only: list[str] | None = None, build_dir: Path | None = None, keep_going: bool = False
):
    build_dir = Path(build_dir or REPO / "build")
    if profile not in PROFILES:
        raise SystemExit(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    notebooks = select(discover(), only)
    checkpoints = build_dir / "checkpoints"
    if profile == "smoke":
        from sdaccel.tools.toys.random_checkpoints import ensure_tiny

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
