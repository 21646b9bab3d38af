"""sdaccel.core.tables: the one Markdown table writer: cells as text, one alignment letter per
column, and a bad row or alignment refused before any text is made."""

from __future__ import annotations

import doctest

import pytest

from sdaccel.core import tables
from sdaccel.core.tables import markdown_table


def test_the_module_example_holds():
    assert doctest.testmod(tables).failed == 0


def test_a_table_is_a_header_a_rule_and_one_line_per_row():
    text = markdown_table(["variant", "s/step"], [["f32", "4.84"], ["INT8", "1.58"]])
    assert text == "| variant | s/step |\n|---|---|\n| f32 | 4.84 |\n| INT8 | 1.58 |"


def test_cells_are_made_text_with_str():
    text = markdown_table(("n", "x", "ok"), [(1, 2.5, None), (2, 0.1, True)])
    assert text.splitlines()[2:] == ["| 1 | 2.5 | None |", "| 2 | 0.1 | True |"]


def test_rows_may_be_any_iterable_of_sequences():
    rows = (["a", str(i)] for i in range(2))  # a generator, read once
    assert markdown_table(["k", "v"], rows).splitlines()[2:] == ["| a | 0 |", "| a | 1 |"]


def test_no_rows_is_a_header_and_a_rule():
    assert markdown_table(["a", "b"], []) == "| a | b |\n|---|---|"


@pytest.mark.parametrize(
    ("align", "rule"),
    [
        ("lrc", "|---|---:|:---:|"),
        ("rrr", "|---:|---:|---:|"),
        ("c", "|:---:|---|---|"),  # a shorter string leaves the other columns left-aligned
        ("", "|---|---|---|"),
        (None, "|---|---|---|"),
    ],
)
def test_alignment_sets_each_columns_rule(align, rule):
    assert markdown_table(["a", "b", "c"], [[1, 2, 3]], align=align).splitlines()[1] == rule


@pytest.mark.parametrize("align", ["lrx", "lrrr", "L", "r c"])
def test_a_bad_alignment_raises(align):
    with pytest.raises(ValueError, match=r"align takes one of l, r, c per column \(3\), got"):
        markdown_table(["a", "b", "c"], [[1, 2, 3]], align=align)


def test_a_short_row_raises_naming_it():
    with pytest.raises(ValueError, match=r"^Row 1 has 1 cells, the header 2: \['only'\]$"):
        markdown_table(["a", "b"], [["1", "2"], ["only"], ["3", "4"]])


def test_a_long_row_raises_naming_it():
    with pytest.raises(ValueError, match=r"^Row 0 has 3 cells, the header 2"):
        markdown_table(["a", "b"], [[1, 2, 3]])


def test_a_bad_row_anywhere_raises_instead_of_a_partial_table():
    rows = [[i, i * i] for i in range(50)] + [[50]] + [[51, 51 * 51]]
    with pytest.raises(ValueError, match=r"^Row 50 has 1 cells, the header 2: \['50'\]$"):
        markdown_table(["n", "n^2"], iter(rows))
