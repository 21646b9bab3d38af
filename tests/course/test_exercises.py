"""Exercises: the check function, the cell format, the attendee copy (solutions stripped), and
that every check fails without its solution (fast: the stub and the check cell alone; and one
whole notebook executed without its solutions)."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import numpy as np
import pytest

from sdaccel.course import exercises as ex
from sdaccel.tools.workshop.discovery import REPO, discover

NOTEBOOKS = discover()
IDS = [nb.stem for nb in NOTEBOOKS]

SOLUTION = """# Exercise 99.1: how many rows does each device hold?
rows_per_device = None
# BEGIN SOLUTION
rows_per_device = len(data) // devices
# END SOLUTION"""
CHECK = """from sdaccel.course.exercises import check

check("99.1", rows_per_device, lambda: len(data) // devices)"""


def toy_notebook() -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 · Toy\n\nYou will learn"),
        nbformat.v4.new_code_cell("data, devices = list(range(16)), 8"),
        nbformat.v4.new_markdown_cell("## Next steps\n\n- more"),
    ]
    item = {"id": "99.1", "title": "Rows", "task": "Compute it.", "solution": SOLUTION, "check": CHECK}
    return ex.insert(nb, [item], "## Exercises\n\nTry these.")


def run_cells(nb: dict, kinds=("code",)) -> dict:
    namespace: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] in kinds:
            exec(compile(ex.source(cell), "<cell>", "exec"), namespace)
    return namespace


# ----------------------------------------------------------------------------------------------
# check()
# ----------------------------------------------------------------------------------------------


def test_check_right_wrong_and_missing(capsys):
    assert ex.check("01.1", 0.5000001, 0.5) is None  # a notebook shows the message only
    assert "✓ Exercise 01.1: right." in capsys.readouterr().out
    with pytest.raises(ex.ExerciseNotDone, match="not quite .*0.6.*Hint: count again"):
        ex.check("01.1", 0.6, 0.5, hint="count again")
    with pytest.raises(ex.ExerciseNotDone, match="not answered yet"):
        ex.check("01.1", None, lambda: 1 / 0)  # an unanswered exercise computes nothing
    with pytest.raises(TypeError):
        ex.check("01.1", 1)  # neither expected= nor test=
    ex.check("01.2", (0.0, 0.3), test=lambda a: a[0] == 0 and a[1] > 0.05)  # no exception: right
    with pytest.raises(ex.ExerciseNotDone):
        ex.check("01.2", (1.5, 0.3), test=lambda a: a[0] == 0)


def test_same_compares_by_kind():
    assert ex.same((2, 4), (2, 4)) and not ex.same((2, 4), (4, 2)) and not ex.same([2, 4], (2, 4, 1))
    assert ex.same(np.float32(0.1), 0.1, rtol=1e-6) and not ex.same(0.11, 0.1)
    assert ex.same(np.arange(1.0, 4.0), np.arange(1.0, 4.0) + 1e-9) and not ex.same(np.zeros(3), np.zeros(4))
    assert ex.same({"a": 1, "b": (1, 2)}, {"a": 1.0, "b": (1, 2)}) and not ex.same({"a": 1}, {"a": 1, "b": 2})
    assert ex.same(" UNet ", "unet") and not ex.same("vae", "unet") and not ex.same(1, "1")
    assert ex.same(True, True) and not ex.same(1, True) and not ex.same(False, 0)


# ----------------------------------------------------------------------------------------------
# Format, stripping, the attendee copy
# ----------------------------------------------------------------------------------------------


def test_insert_puts_exercises_before_next_steps_and_they_pass():
    nb = toy_notebook()
    assert "Next steps" in ex.source(nb["cells"][-1])
    assert [ex.tags(c) for c in nb["cells"][2:6]] == [["exercise"], ["exercise"], ["solution"], ["check"]]
    (found,) = ex.exercises(nb)
    assert found.id == "99.1" and (found.task, found.solution, found.check) == (3, 4, 5)
    assert run_cells(nb)["rows_per_device"] == 2  # with the solution, the check passes


def test_attendee_copy_fails_the_check_and_keeps_everything_else():
    nb = toy_notebook()
    copy = ex.attendee_copy(nb)
    stub = ex.source(copy["cells"][4])
    assert "BEGIN SOLUTION" not in stub and "len(data) // devices" not in stub
    assert stub.endswith("rows_per_device = None\n# your code here") and ex.tags(copy["cells"][4]) == [
        "answer"
    ]
    assert [ex.source(c) for i, c in enumerate(copy["cells"]) if i != 4] == [
        ex.source(c) for i, c in enumerate(nb["cells"]) if i != 4
    ]
    with pytest.raises(ex.ExerciseNotDone, match="99.1: not answered yet"):
        run_cells(copy)
    assert "BEGIN SOLUTION" in ex.source(nb["cells"][4]), "the original is untouched"


def test_strip_keeps_indentation_and_refuses_broken_markers():
    code = "if True:\n    x = None\n    # BEGIN SOLUTION\n    x = 1\n    # END SOLUTION\nprint(x)"
    assert ex.strip_solution(code) == "if True:\n    x = None\n    # your code here\nprint(x)"
    compile(ex.strip_solution(code), "<cell>", "exec")
    for broken in ("# BEGIN SOLUTION\nx = 1", "x = 1\n# END SOLUTION", "# BEGIN SOLUTION\n# BEGIN SOLUTION"):
        with pytest.raises(ex.ExerciseFormatError):
            ex.strip_solution(broken)


def test_malformed_exercises_are_named():
    nb = toy_notebook()
    del nb["cells"][5]  # the check cell
    with pytest.raises(ex.ExerciseFormatError, match="'solution' then a 'check'"):
        ex.exercises(nb, "toy")
    nb = toy_notebook()
    nb["cells"][4]["source"] = "rows_per_device = 2"  # no block to strip: the answer would leak
    with pytest.raises(ex.ExerciseFormatError, match="BEGIN SOLUTION"):
        ex.attendee_copy(nb, "toy")


def test_strip_command_writes_a_fresh_folder_and_never_into_the_sources(tmp_path):
    src = tmp_path / "notebooks"
    src.mkdir()
    nbformat.write(nbformat.from_dict(toy_notebook()), src / "99_toy.ipynb")
    dest = tmp_path / "attendee"
    dest.mkdir()
    (dest / "stale.ipynb").write_text("{}")  # a previous run's leftover is not mixed in
    proc = subprocess.run(
        [sys.executable, "-m", "sdaccel.course.exercises", "strip", str(src), str(dest)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["99_toy.ipynb"]
    assert "BEGIN SOLUTION" not in (dest / "99_toy.ipynb").read_text()
    refused = subprocess.run(
        [sys.executable, "-m", "sdaccel.course.exercises", "strip", str(src), str(src / "attendee")],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "somewhere else" in refused.stderr and not (src / "attendee").exists()


# ----------------------------------------------------------------------------------------------
# The notebooks' own exercises
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=IDS)
def test_every_check_fails_without_its_solution(nb_path):
    """The stub of each solution cell, then its check cell, in an empty namespace: the check must
    say "not answered yet" (it computes nothing else before that)."""
    nb = nbformat.read(nb_path, as_version=4)
    copy = ex.attendee_copy(nb, nb_path.name)
    for found in ex.exercises(nb, nb_path.name):
        namespace: dict = {}
        exec(compile(ex.source(copy["cells"][found.solution]), f"{found.id} stub", "exec"), namespace)
        with pytest.raises(ex.ExerciseNotDone, match=f"{found.id}: not answered yet"):
            exec(compile(ex.source(copy["cells"][found.check]), f"{found.id} check", "exec"), namespace)


@pytest.mark.slow
def test_notebook_00_without_solutions_stops_at_its_first_check(tmp_path):
    """The attendee copy of notebook 00, executed in the smoke profile: it runs up to the first
    exercise and stops there with the check's message (the copy with solutions passes in
    tests/integration/test_notebooks.py)."""
    from sdaccel.tools.workshop.execute import NotebookFailed, execute

    source = NOTEBOOKS[0]
    nb = nbformat.read(source, as_version=4)
    found = ex.exercises(nb, source.name)
    if not found:
        pytest.skip(f"{source.name} has no exercises")
    attendee = tmp_path / "attendee"
    ex.strip(source, attendee)
    with pytest.raises(NotebookFailed, match=rf"ExerciseNotDone: ✗ Exercise {found[0].id}: not answered yet"):
        execute(
            attendee / source.name, "smoke", tmp_path / "build", REPO / "build" / "checkpoints", timeout=600
        )
    executed = json.loads((tmp_path / "build" / "smoke" / source.name).read_text())
    errors = [c for c in executed["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    # one error, in the first check cell: every cell before it ran (the runner may add cells of its own)
    assert [ex.source(c) for c in errors] == [ex.source(nb.cells[found[0].check])]


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=IDS)
def test_every_notebook_ends_with_two_or_three_exercises(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    found = ex.exercises(nb, nb_path.name)
    assert 2 <= len(found) <= 3, f"{nb_path.name}: {len(found)} exercises"
    number = nb_path.stem.split("_")[0]
    assert [f.id for f in found] == [f"{number}.{k}" for k in range(1, len(found) + 1)]
    assert found[-1].check == len(nb.cells) - 2, "the exercises come just before 'Next steps'"
    assert "## Exercises" in ex.source(nb.cells[found[0].task - 1])
