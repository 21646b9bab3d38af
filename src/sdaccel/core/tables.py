"""Markdown tables, the one way every report of the package writes them.

>>> print(markdown_table(["variant", "s/step"], [["f32", "4.84"], ["INT8", "1.58"]], align="lr"))
| variant | s/step |
|---|---:|
| f32 | 4.84 |
| INT8 | 1.58 |
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: The separator cell of each alignment: left, right, centre.
_RULES = {"l": "---", "r": "---:", "c": ":---:"}


def markdown_table(
    header: Sequence[object], rows: Iterable[Sequence[object]], align: str | None = None
) -> str:
    """A Markdown table of ``header`` and ``rows`` (cells turned into text with ``str``).

    ``align`` has one letter per column, ``l`` (the default), ``r`` or ``c``; a shorter string
    leaves the remaining columns left-aligned. A row whose length is not the header's raises
    ``ValueError`` naming it, before any text is made."""
    header = [str(h) for h in header]
    rows = [[str(c) for c in row] for row in rows]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"Row {i} has {len(row)} cells, the header {len(header)}: {row}")
    align = (align or "").ljust(len(header), "l")
    if len(align) != len(header) or set(align) - set(_RULES):
        raise ValueError(f"align takes one of l, r, c per column ({len(header)}), got {align!r}.")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(_RULES[a] for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
