"""Exercise 06b.1 of the appendix 06b: the fastest stack within a bound, as a function.

The notebook's solution passes its check on the rows the appendix shows; the attendee's stub is
"not answered yet"; the wrong answers a learner would hand in are "not quite", each listed below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdaccel.course import exercises as ex
from sdaccel.course import stack_report

NB06B = Path(__file__).resolve().parents[2] / "notebooks" / "06b_cpu_stacks_and_quality.ipynb"


def cells() -> dict[str, str]:
    nb = json.loads(NB06B.read_text())
    (found,) = [e for e in ex.exercises(nb, NB06B.name) if e.id == "06b.1"]
    return {
        "solution": ex.source(nb["cells"][found.solution]),
        "stub": ex.source(ex.attendee_copy(nb, NB06B.name)["cells"][found.solution]),
        "check": ex.source(nb["cells"][found.check]),
    }


def run(code: str, ns: dict) -> dict:
    exec(compile(code, "<cell>", "exec"), ns)
    return ns


#: The rows of the stack table as the appendix builds them (stack_report.join), a float stack and
#: INT8 with the layer cut, the slowest stack the most adherent.
ROWS = {
    "f32": {"levers": [], "adherence": 0.917, "psnr": None, "within": True, "cpu_s_per_step": 2.7},
    "static": {"levers": ["static"], "adherence": 0.917, "psnr": 60.0, "within": True, "cpu_s_per_step": 2.6},
    "static + tome": {"levers": ["static", "tome"], "adherence": 0.833, "psnr": 30.0, "within": False,
                      "cpu_s_per_step": 1.9},
    "static + int8": {"levers": ["static", "int8"], "adherence": 0.9, "psnr": 35.0, "within": True,
                      "cpu_s_per_step": 2.2},
    "static + int8 + deepcache": {"levers": ["static", "int8", "deepcache"], "adherence": 0.95, "psnr": 36.0,
                                  "within": True, "cpu_s_per_step": None},
}  # fmt: skip


def test_the_solution_passes_and_agrees_with_the_table():
    code = cells()
    ns = run(code["solution"], {})
    run(code["check"], {**ns, "stack_rows": ROWS})
    within = {
        name: {**row, "within": row["adherence"] >= ROWS["f32"]["adherence"] - 0.02}
        for name, row in ROWS.items()
    }
    assert ns["pick"](ROWS, 0.02) == stack_report.fastest(within) == "static + int8"
    with pytest.raises(ex.ExerciseNotDone, match="06b.1: not answered yet"):
        run(code["check"], {**run(code["stub"], {}), "stack_rows": ROWS})


WRONG = {
    "the fastest overall, the bound ignored": lambda rows, bound: min(
        (n for n, r in rows.items() if r["cpu_s_per_step"] is not None),
        key=lambda n: rows[n]["cpu_s_per_step"],
    ),
    "the table's within flag, set for one bound only": lambda rows, bound: min(
        (n for n, r in rows.items() if r["within"] and r["cpu_s_per_step"] is not None),
        key=lambda n: rows[n]["cpu_s_per_step"],
    ),
    "wall-clock seconds instead of CPU seconds": lambda rows, bound: min(
        (
            n
            for n, r in rows.items()
            if r["adherence"] >= rows["f32"]["adherence"] - bound and r.get("s_per_step")
        ),
        key=lambda n: rows[n]["s_per_step"],
        default=None,
    ),
    "the most adherent stack": lambda rows, bound: max(rows, key=lambda n: rows[n]["adherence"]),
    "an untimed stack counted as free": lambda rows, bound: min(
        (n for n, r in rows.items() if r["adherence"] >= rows["f32"]["adherence"] - bound),
        key=lambda n: rows[n]["cpu_s_per_step"] or 0.0,
    ),
    "the row instead of its name": lambda rows, bound: (
        rows[ex.fastest_within(rows, bound)] if ex.fastest_within(rows, bound) else None
    ),
    "a strict bound (more than, not at least)": lambda rows, bound: min(
        (
            n
            for n, r in rows.items()
            if r["adherence"] > rows["f32"]["adherence"] - bound and r["cpu_s_per_step"] is not None
        ),
        key=lambda n: rows[n]["cpu_s_per_step"],
        default=None,
    ),
    "the name answered, not a function": "static + int8",
}


@pytest.mark.parametrize("name", WRONG)
def test_wrong_answers_fail(name):
    with pytest.raises(ex.ExerciseNotDone, match="06b.1: not quite"):
        run(cells()["check"], {"pick": WRONG[name], "stack_rows": ROWS})
