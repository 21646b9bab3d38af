"""sdaccel.tools.workshop.reach on a fake package and notebook: a planted chain of imports is
counted (by name, by attribute, through a re-export, a lazy table's used entry, an import inside a
function, a relative import, the packages' ``__init__``), and what nothing reaches is not."""

from __future__ import annotations

import json
from pathlib import Path

from sdaccel.tools.workshop import reach


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def notebook(path: Path, *cells: str) -> Path:
    nb = {"cells": [{"cell_type": "code", "source": cell.splitlines(keepends=True)} for cell in cells]}
    path.parent.mkdir(parents=True, exist_ok=True)
    nb["cells"].append({"cell_type": "markdown", "source": ["from fake.room import unreached\n"]})
    path.write_text(json.dumps(nb))
    return path


FAKE = {
    "fake/__init__.py": "",
    "fake/room/__init__.py": (
        "from fake.room.eager import early\n"
        "PUBLIC_NAMES = {'listed': 'listed', 'unused': 'unreached'}\n"
        "def __getattr__(name): ...\n"
    ),
    "fake/room/eager.py": "def early(): pass\n",
    "fake/room/listed.py": "def listed():\n    from fake.deep.inner import x\n    return x\n",
    "fake/room/unreached.py": "import fake.never\nunused = 1\nunreached = 2\n",
    "fake/room/attrs.py": "from .helper import helped\n\ndef used(): return helped\n",
    "fake/room/helper.py": "helped = 1\n\n\n\n",
    "fake/deep/__init__.py": "# the deep package\n",
    "fake/deep/inner.py": "from fake.again import y as x\n",
    "fake/again.py": "y = 1\n",
    "fake/never.py": "z = 1\n",
    "fake/typing_only.py": "z = 1\n",
    "fake/room/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fake.typing_only\n",
}


def test_a_planted_chain_is_counted_and_an_unreached_module_is_not(tmp_path):
    write(tmp_path / "src", FAKE)
    nb = notebook(
        tmp_path / "00.ipynb",
        "%matplotlib inline\nfrom fake.room import listed\nfrom fake.room import attrs as a\n",
        "a.used()\nimport fake.room.typed\nimport os\n",
    )
    reached = reach.reach([nb], src=tmp_path / "src", package="fake")
    assert set(reached) == {
        "fake",
        "fake.room",
        "fake.room.eager",  # the room's __init__ imports it
        "fake.room.listed",  # the lazy table's used entry
        "fake.deep",  # the package above what listed imports inside a function
        "fake.deep.inner",
        "fake.again",  # re-exported by inner
        "fake.room.attrs",  # imported as a module, read by attribute
        "fake.room.helper",  # a relative import of attrs
        "fake.room.typed",
    }
    assert reached["fake.room.helper"] == 4 and reached["fake"] == 0


def test_the_command_prints_the_total_and_the_modules(tmp_path, capsys):
    write(tmp_path / "src", FAKE)
    notebook(tmp_path / "nb" / "01.ipynb", "from fake.room.listed import listed\n")
    result = reach.main(
        ["--notebooks", str(tmp_path / "nb"), "--src", str(tmp_path / "src"), "--package", "fake"]
    )
    out = capsys.readouterr().out
    assert (
        result["total"] == sum(result["modules"].values()) == 3 + 1 + 3 + 1 + 1 + 1
    )  # fake's __init__ is empty
    assert out.splitlines()[0].startswith(f"{result['total']} lines in 7 modules")
    reach.main(
        ["--notebooks", str(tmp_path / "nb"), "--src", str(tmp_path / "src"), "--package", "fake", "--json"]
    )
    assert json.loads(capsys.readouterr().out) == result
