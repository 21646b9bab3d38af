"""The checks of an executed notebook (as JSON): noise a reader would have to ignore (standard
error, warnings, progress bars, raw dumps, saved widget state, "nothing to do" and other repeated
lines, the build folder's paths), absolute paths of the machine that ran it, plots without an
inline figure, and development notes and words. Each returns one line per problem; the runner
prints them as notes, and the tests of the notebooks assert there are none."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import tokenize
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

#: A progress bar's text as tqdm leaves it, finished or not: in a terminal, as a library's bar
#: (diffusers' over the denoising steps: ``100%|██████████| 10/10 [00:00<00:00, 87.33it/s]``), or as
#: the runner keeps a widget bar that stayed (``export: 100%|...| 5/5``). A bar that disappears
#: when it finishes (``tqdm.auto.tqdm(..., leave=False)``) leaves nothing.
LEFT_BAR = re.compile(r"\d{1,3}%\|[^|\n]*\| *\d+/\d+")

#: What a step says when it had nothing to do: the caller has its return value, the reader nothing.
NOTHING_TO_DO = re.compile(r"nothing to do", re.I)

#: A path into the repository's build folder (``../build/smoke/outputs/...``, ``build/checkpoints/...``):
#: where one run of one profile put its files, which a reader's copy would not have.
BUILD_PATH = re.compile(r"(?<![\w/.-])(?:\.\./)*build/[\w.-]+(?:/[\w.-]*)*")

#: A command line of a script with three or more options: a line to run, not one to read.
COMMAND_LINE = re.compile(r"\bpython3? +(?:-m +[\w.]+|\S+\.py)\b(?:.*? --?[a-z][\w-]*){3,}")

#: Lines of a child process's log: a ``[tag] `` prefix, a timestamp, a logging level.
LOG_LINE = re.compile(
    r"^\s*(?:\[[^\]\s][^\]]{0,39}\] |\d{4}-\d\d-\d\d[ T]\d\d:\d\d|(?:DEBUG|INFO|ERROR|CRITICAL)[:\s])"
)

#: Shorthand of the project's development in learner text (markdown, code comments, outputs), each
#: with the plain words to say instead. "arm" only in lower case: ARM and Arm are the platform and
#: the company; ``arm64``, "harm" and "warm" are other words. A module or option (``sdaccel.toy``,
#: ``--levers``) is not learner text.
DEVELOPMENT_WORDS = {
    re.compile(r"(?<![\w./-])knobs?\b", re.I): "setting",
    re.compile(r"(?<![\w./-])levers?\b(?![./]\w)", re.I): "speed-up or method",
    re.compile(r"(?<![\w./-])toys?\b(?![./]\w)", re.I): "the tiny trained model",
    re.compile(r"(?<![\w./-])arms?\b(?![./]\w)"): "variant or configuration",
    re.compile(r"(?<![\w./-])rooms\b", re.I): "parts of the package",
}

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
    finished bars of a library's loading step (:data:`LOADING_BARS`), any other progress bar left
    in a cell (:data:`LEFT_BAR`), "nothing to do" lines (:data:`NOTHING_TO_DO`), paths into the
    build folder (:data:`BUILD_PATH`), raw dicts, lists, command lines and logs (:func:`raw_dumps`),
    a line printed again (:func:`repeated_lines`), and saved widget state
    (:func:`~sdaccel.tools.workshop.widget_state.saved_widget_state`: without a widget manager it
    reads "Loading widget..."; the runner replaces it by text). One line each."""
    problems = saved_widget_state(nb)
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                data = out.get("data", {})
                text = "".join(data.get("text/plain", ""))
                if "text/markdown" in data:  # display(Markdown(...)): its text/plain says only that
                    text = "".join(data["text/markdown"])
            else:
                continue
            if out.get("name") == "stderr" and text.strip() and not text.lstrip().startswith(ALLOWED_STDERR):
                problems.append(f"cell {i}: stderr {text.strip()[:160]!r}")
            elif problem := output_noise(text):
                problems.append(f"cell {i}: {problem}")
    return problems + repeated_lines(nb)


def output_noise(text: str) -> str | None:
    """The first kind of noise in one output's text, named with its fix, or None (see
    :func:`noisy_outputs`)."""
    if _CONTROL.search(text):
        return f"terminal control codes {text.strip()[:80]!r}"
    if _WARNING.search(text):
        return f"warning {text.strip()[:160]!r}"
    if frozen := frozen_bars(text):
        return f"frozen progress bar {frozen[0]!r}"
    if RICH_BARS.search(text):
        line = next(x for x in text.strip().splitlines() if RICH_BARS.search(x))
        return f"NNCF's progress bar {line[:80]!r}: quantize under sdaccel.cpu.quantize.no_progress_bars()"
    if loading := LOADING_BARS.search(text):
        line = text[loading.start() :].strip().splitlines()[0]
        return (
            f"a library's loading bar {line[:120]!r}: load under sdaccel.cpu.export."
            "no_loading_bars(), or call the library's logging.disable_progress_bar() first"
        )
    if LEFT_BAR.search(text):
        return (
            f"a progress bar left in the cell {_line_of(LEFT_BAR, text)!r}: use tqdm.auto.tqdm(..., "
            "leave=False) or none, and a diffusers pipeline's set_progress_bar_config(disable=True)"
        )
    if NOTHING_TO_DO.search(text):
        return (
            f"a 'nothing to do' line {_line_of(NOTHING_TO_DO, text)!r}: the step's return value tells "
            "the caller; say nothing"
        )
    if dumps := raw_dumps(text):
        return f"a raw dict or JSON dump, command line or log {dumps[0][:120]!r}: print it as a sentence or a table"
    if BUILD_PATH.search(text):
        return (
            f"a path into the build folder {_line_of(BUILD_PATH, text)!r}: name what is there "
            "(the model, the results file's name), not where one run put it"
        )
    return None


def _line_of(pattern: re.Pattern, text: str) -> str:
    line = next(x for x in text.splitlines() if pattern.search(x)).strip()
    return line[:120]


def repeated_lines(nb: dict, min_chars: int = 20) -> list[str]:
    """``cell j: ...`` for each line of text output (streams, ``text/plain``) printed again, in
    the same cell or a later one: a sentence of at least ``min_chars`` characters and two words,
    not a table's row or rule (``|``, ``+``, ``-`` or ``=`` first, or columns aligned by spaces). Said once, it tells the reader; said again, it is noise."""
    seen: dict[str, int] = {}
    problems = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            for line in text.splitlines():
                line = line.strip()
                if len(line) < min_chars or line[0] in "|<+-=" or "  " in line or "\t" in line:
                    continue  # short, or a table's row or rule (columns aligned by spaces)
                if not re.search(r"[A-Za-z]{3,}\s+\S*[A-Za-z]", line) or NOTHING_TO_DO.search(line):
                    continue  # no sentence, or a "nothing to do" (once is too many: output_noise)
                if line in seen:
                    problems.append(
                        f"cell {i}: the line of cell {seen[line]} again {line[:120]!r}: say it once"
                    )
                else:
                    seen[line] = i
    return problems


def raw_dumps(text: str) -> list[str]:
    """Lines of ``text`` that hold data a reader has to parse: a whole dict of three or more keys
    (as JSON or as Python prints it), a dict of five or more keys within a line
    (``features: {'avx2': True, ...}``), a list of three or more dicts, a command line
    (:data:`COMMAND_LINE`), or a child process's log (two or more :data:`LOG_LINE` lines). A labelled
    value of a few keys (``precision -> {'unet': 'f32'}``) is not one, nor a list of numbers
    (``timesteps [1, 51, 101]``)."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if COMMAND_LINE.search(line):
            found.append(line)
            continue
        for literal in _literals(line):
            value = _parsed(literal)
            whole = literal == line and isinstance(value, dict) and len(value) >= 3
            records = isinstance(value, list) and len(value) >= 3 and all(isinstance(v, dict) for v in value)
            if whole or records or (isinstance(value, dict) and len(value) >= 5):
                found.append(line)
                break
    logged = [line.strip() for line in text.splitlines() if LOG_LINE.match(line)]
    return found + (logged[:1] if len(logged) >= 2 else [])


def _literals(line: str) -> list[str]:
    """The outermost ``{...}`` and ``[...]`` spans of ``line`` (brackets inside quotes ignored)."""
    spans, depth, start, quote = [], 0, 0, ""
    for k, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote and line[k - 1] != "\\" else quote
        elif ch in "'\"" and depth:
            quote = ch
        elif ch in "{[":
            start = k if depth == 0 else start
            depth += 1
        elif ch in "}]" and depth:
            depth -= 1
            if depth == 0:
                spans.append(line[start : k + 1])
    return spans


def _parsed(literal: str):
    try:
        return json.loads(literal)
    except ValueError:
        try:
            return ast.literal_eval(literal)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None


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
    """``cell i: phrase`` for each :data:`BANNED_PHRASES` in a notebook's sources and text outputs,
    then the :func:`development_words` of its learner text."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        lowered = cell_text(cell, ("text/plain", "text/markdown", "text/html")).lower()
        found += [f"cell {i}: {phrase!r}" for phrase in BANNED_PHRASES if phrase in lowered]
    return found + development_words(nb)


_CODE_SPAN = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def learner_text(cell: dict) -> str:
    """What a reader of a cell reads as prose: a markdown cell's text, a code cell's comments and
    the text of its outputs (streams, ``text/plain``, ``text/markdown``); code spans and fenced
    code left out (a module or an option is named as it is spelled)."""
    if cell.get("cell_type") == "markdown":
        return _CODE_SPAN.sub(" ", "".join(cell.get("source", "")))
    if cell.get("cell_type") != "code":
        return ""
    texts = [_comments("".join(cell.get("source", "")))]
    for out in cell.get("outputs", []):
        texts.append("".join(out.get("text", "")))
        texts += ["".join(out.get("data", {}).get(kind, "")) for kind in ("text/plain", "text/markdown")]
    return _CODE_SPAN.sub(" ", "\n".join(texts))


def _comments(source: str) -> str:
    """The comments of a cell's code, one a line (IPython's ``%`` and ``!`` lines read as comments
    would not parse: then each line's text after a ``#`` outside quotes)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return "\n".join(tok.string for tok in tokens if tok.type == tokenize.COMMENT)
    except (tokenize.TokenError, SyntaxError):
        return "\n".join(m[1] for m in re.finditer(r"^[^#'\"]*(#.*)$", source, re.M))


def development_words(nb: dict) -> list[str]:
    """``cell i: 'word' (say ...)`` for each of :data:`DEVELOPMENT_WORDS` in a notebook's learner
    text (:func:`learner_text`), once per word and cell."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        text = learner_text(cell)
        for pattern, plain in DEVELOPMENT_WORDS.items():
            if match := pattern.search(text):
                found.append(f"cell {i}: {match[0]!r} (say {plain!r})")
    return found
