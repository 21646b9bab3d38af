"""Every notebook fits its slot in the instructor's guide (issue #56).

A notebook's reading minutes are its words (markdown and code cells, split on whitespace) at 200 a
minute, plus its smoke run ("smoke, idle" in docs/workshop.md's notebook table; a range counts at
its top). Its slot is the half-day agenda's; a notebook that is not in the half day (03 and the
optional appendices) takes the full-day agenda's. A notebook with no slot, or no smoke minutes,
fails by name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sdaccel.tools.workshop.discovery import REPO, discover

GUIDE = REPO / "docs" / "workshop.md"
WORDS_PER_MINUTE = 200
HALF_DAY, FULL_DAY, NOTEBOOK_TABLE = (
    "## Half-day agenda",
    "## Full-day agenda",
    "## The notebooks and their times",
)


def words(notebook: Path) -> int:
    cells = json.loads(notebook.read_text())["cells"]
    return sum(len("".join(c["source"]).split()) for c in cells if c["cell_type"] in ("markdown", "code"))


def table_under(text: str, heading: str) -> list[dict[str, str]]:
    """The first table after the heading that starts with ``heading``, as rows keyed by its header."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        elif rows or line.startswith("## "):
            break
    header, body = rows[0], rows[2:]
    return [dict(zip(header, row, strict=True)) for row in body]


def slots(text: str) -> dict[str, float]:
    """Each notebook's slot in minutes: the half day's, then the full day's for the others."""
    found: dict[str, float] = {}
    for heading in (HALF_DAY, FULL_DAY):
        for row in table_under(text, heading):
            if row["notebook"] not in ("-", "—"):
                found.setdefault(row["notebook"], float(row["slot"]))
    return found


def smoke_minutes(text: str) -> dict[str, float]:
    """Each notebook's smoke run in minutes (the top of a range)."""
    return {
        row["#"]: max(float(n) for n in re.findall(r"\d+(?:\.\d+)?", row["smoke, idle"].split("min")[0]))
        for row in table_under(text, NOTEBOOK_TABLE)
    }


def overrun(notebook: Path, text: str) -> str | None:
    """Why ``notebook`` does not fit its slot in the guide ``text``, or None where it fits."""
    number = notebook.stem.split("_")[0]
    slot, smoke = slots(text).get(number), smoke_minutes(text).get(number)
    if slot is None:
        return f"{notebook.name} has no slot in docs/workshop.md's agendas: give it one"
    if smoke is None:
        return f"{notebook.name} has no 'smoke, idle' minutes in docs/workshop.md's notebook table"
    minutes = words(notebook) / WORDS_PER_MINUTE + smoke
    if minutes > slot:
        return (
            f"{notebook.name}: {words(notebook):,} words / {WORDS_PER_MINUTE} + {smoke} min smoke = "
            f"{minutes:.1f} min, over its {slot:.0f}-minute slot"
        )
    return None


@pytest.mark.parametrize("notebook", discover(), ids=lambda nb: nb.stem)
def test_a_notebook_fits_its_slot(notebook):
    reason = overrun(notebook, GUIDE.read_text())
    assert reason is None, reason


def test_the_half_day_is_three_and_a_half_hours():
    total = sum(float(row["slot"]) for row in table_under(GUIDE.read_text(), HALF_DAY))
    assert total == 210, f"the half-day agenda's slots add up to {total} minutes"


MADE_UP = """
## The notebooks and their times

| # | notebook | smoke, idle |
|---|---|---|
| 01 | one | 1 min |
| 02 | two | 1.5-2.5 min |

## Half-day agenda (1 h)

| time | what | notebook | slot |
|---|---|---|---|
| 0:00 | welcome | - | 10 |
| 0:10 | one | 01 | 10 |

## Full-day agenda

| time | what | notebook | profile | slot |
|---|---|---|---|---|
| 0:00 | one, longer | 01 | full | 60 |
| 1:00 | two | 02 | smoke | 5 |
"""


def made_up_notebook(tmp_path: Path, name: str, n_words: int) -> Path:
    cells = [
        {"cell_type": "markdown", "source": ["word " * (n_words - 3)]},
        {"cell_type": "code", "source": ["x = 1"]},
    ]
    path = tmp_path / name
    path.write_text(json.dumps({"cells": cells}))
    assert words(path) == n_words
    return path


def test_the_check_fails_a_notebook_too_long_for_its_slot(tmp_path):
    assert slots(MADE_UP) == {"01": 10.0, "02": 5.0}  # the half day's slot wins over the full day's
    assert smoke_minutes(MADE_UP) == {"01": 1.0, "02": 2.5}
    assert overrun(made_up_notebook(tmp_path, "01_one.ipynb", 1800), MADE_UP) is None  # 9 + 1 = 10
    too_long = overrun(made_up_notebook(tmp_path, "01_one.ipynb", 1801), MADE_UP)
    assert too_long and "01_one.ipynb" in too_long and "10-minute slot" in too_long
    assert "5-minute slot" in overrun(made_up_notebook(tmp_path, "02_two.ipynb", 600), MADE_UP)  # 3 + 2.5
    assert "no slot" in overrun(made_up_notebook(tmp_path, "03_three.ipynb", 10), MADE_UP)
    no_smoke = MADE_UP.replace("| 02 | two | 1.5-2.5 min |\n", "")
    assert "no 'smoke, idle'" in overrun(made_up_notebook(tmp_path, "02_two.ipynb", 10), no_smoke)
