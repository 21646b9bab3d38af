"""The checks of an executed notebook (as JSON): noise a reader would have to ignore (standard
error, warnings, progress bars, raw dumps, saved widget state), absolute paths of the machine that
ran it, plots without an inline figure, and development notes. Each returns one line per problem;
the runner prints them as notes, and the tests of the notebooks assert there are none."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

from sdaccel.tools.workshop.discovery import PROFILE_ENV, REPO
from sdaccel.tools.workshop.widget_state import saved_widget_state

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
#: (:func:`sdaccel.cpu.convert.no_loading_bars`); :func:`noisy_outputs` finds any that is left.
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


def noisy_outputs(nb: dict) -> list[str]:
    """Outputs of an executed notebook (as JSON) that a reader would have to ignore: standard error
    outside :data:`ALLOWED_STDERR`, terminal control codes (live progress bars), warning text,
    frozen progress bars (:func:`frozen_bars`), NNCF's progress bars (:data:`RICH_BARS`), the
    finished bars of a library's loading step (:data:`LOADING_BARS`), raw dicts and JSON
    (:func:`raw_dumps`), and saved widget state
    (:func:`~sdaccel.tools.workshop.widget_state.saved_widget_state`: without a widget manager it
    reads "Loading widget..."; the runner replaces it by text). One line each."""
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
