"""The room's public API (``sdaccel.tpu.__all__``): every name resolves, it holds what the notebooks
import from the JAX track, and importing it pulls in neither PyTorch nor OpenVINO."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sdaccel.tpu

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
#: The notebooks of the JAX track (07 also runs the JAX pipeline).
JAX_NOTEBOOKS = ("00", "01", "02", "03", "07")


def names_imported_from_the_track(source: str) -> set[str]:
    """What ``from sdaccel.tpu[.module] import ...`` statements of ``source`` import: a submodule's
    name for ``from sdaccel.tpu import module``, else the names themselves."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == ["sdaccel", "tpu"]:
            names |= {alias.name for alias in node.names}
    return names


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code":
            # IPython's magics and shell lines are not Python
            lines += [
                line
                for line in "".join(cell["source"]).splitlines()
                if not line.lstrip().startswith(("%", "!"))
            ]
    return "\n".join(lines)


def test_every_name_in_all_resolves():
    assert len(sdaccel.tpu.__all__) == len(set(sdaccel.tpu.__all__))
    for name in sdaccel.tpu.__all__:  # as `from sdaccel.tpu import name` resolves it
        exec(f"from sdaccel.tpu import {name}", {})
    assert set(sdaccel.tpu.COMMAND_LINE_MODULES) <= set(sdaccel.tpu.__all__)
    with pytest.raises(ImportError, match="nothing_here"):
        exec("from sdaccel.tpu import nothing_here", {})


def test_all_holds_what_the_notebooks_import():
    paths = [p for p in sorted(NOTEBOOKS.glob("*.ipynb")) if p.name[:2] in JAX_NOTEBOOKS]
    assert len(paths) == len(JAX_NOTEBOOKS)
    wanted = set().union(*(names_imported_from_the_track(notebook_code(p)) for p in paths))
    assert {"JaxPipeline", "ShardedPipeline", "compilation", "plan", "sharding"} <= wanted
    assert wanted - set(sdaccel.tpu.__all__) == set()


def test_the_parser_reads_module_and_name_imports():
    source = (
        "from sdaccel.tpu import plan as tpu_plan, serving\n"
        "from sdaccel.tpu.pipeline import JaxPipeline\n"
        "from sdaccel.tpu.models.weights import count_params\n"
        "from sdaccel.core import env\n"
        "from sdaccel.tpuish import nothing\n"
    )
    assert names_imported_from_the_track(source) == {"plan", "serving", "JaxPipeline", "count_params"}


def test_importing_the_room_imports_neither_torch_nor_openvino_nor_its_command_lines():
    code = (
        "import sys, sdaccel.tpu\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'diffusers', 'openvino', 'nncf'})\n"
        "lazy = sorted(m for m in sdaccel.tpu.COMMAND_LINE_MODULES if 'sdaccel.tpu.' + m in sys.modules)\n"
        "print(heavy, lazy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[] []"
