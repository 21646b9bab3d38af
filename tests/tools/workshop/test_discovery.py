"""Which notebooks the runner executes: discovery in number order, and ``--only``'s selection."""

import json

import pytest

from sdaccel.tools.workshop import discovery
from sdaccel.tools.workshop.discovery import select


def test_only_selects_by_number_and_names_unknown(tmp_path):
    nbs = [tmp_path / "00_a.ipynb", tmp_path / "01_b.ipynb"]
    assert select(nbs, ["01"]) == [nbs[1]]
    with pytest.raises(SystemExit, match="No notebook matches"):
        select(nbs, ["07"])


def test_discover_orders_by_number():
    found = discovery.discover()
    assert [p.name for p in found] == sorted(p.name for p in found)
    assert all(json.loads(p.read_text())["nbformat"] == 4 for p in found)
