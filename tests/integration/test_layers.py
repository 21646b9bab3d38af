"""The package's layers: the import-linter contracts of pyproject.toml hold, they fail when broken,
the import graph has no cycle, and the JAX track runs without PyTorch, diffusers or OpenVINO."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else None
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def import_cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Every import cycle among ``package``'s modules (strongly connected components of more than
    one module, or a module importing itself), each as a sorted list. Imports inside functions
    count as much as those at the top of a file."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {
        m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in modules) for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the package is small enough to recurse
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in edges[node]:
                cycles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_contracts_hold():
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and " kept" in proc.stdout, proc.stdout[-2000:]


def test_the_package_has_no_import_cycle():
    graph = grimp.build_graph("sdaccel", cache_dir=None)
    assert len(graph.modules) > 20, "the graph is nearly empty: grimp did not find the package"
    assert import_cycles(graph, "sdaccel") == []


def test_the_cycle_walk_finds_cycles():
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg.c"),
        ("pkg.c", "pkg.a"),  # a -> b -> c -> a
        ("pkg.d", "pkg.a"),
        ("pkg.e", "pkg.e"),  # a module importing itself
        ("pkg.d", "numpy"),
    ]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph, "pkg") == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.e"]]
    graph.remove_import(importer="pkg.c", imported="pkg.a")
    assert import_cycles(graph, "pkg") == [["pkg.e"]]


def test_the_contracts_fail_on_a_shortcut(tmp_path):
    """A copy of the package with three shortcuts: the core importing the TPU track (upward, and a
    cycle through it), the CPU track importing the TPU track (across), and the JAX pipeline
    importing PyTorch inside a function."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    package = tmp_path / "src" / "sdaccel"
    shutil.copytree(REPO / "src" / "sdaccel", package, ignore=shutil.ignore_patterns("__pycache__"))
    with open(package / "core" / "checkpoint.py", "a") as f:
        f.write("\n\ndef _shortcut():\n    from sdaccel.tpu import generate\n\n    return generate\n")
    with open(package / "cpu" / "quality.py", "a") as f:
        f.write("\n\ndef _across():\n    from sdaccel.tpu import sharding\n\n    return sharding\n")
    with open(package / "tpu" / "pipeline.py", "a") as f:
        f.write("\n\ndef _reference():\n    import torch\n\n    return torch\n")
    proc = lint_imports(tmp_path, pythonpath=str(tmp_path / "src"))
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:] + proc.stderr[-2000:]
    assert "Rooms: tools -> course -> toy -> (tpu | cpu) -> core" in out and " BROKEN" in out, out[-4000:]
    assert "sdaccel.core.checkpoint -> sdaccel.tpu.generate" in out, out[-4000:]
    assert "sdaccel.cpu.quality -> sdaccel.tpu.sharding" in out, out[-4000:]
    assert "never import each other BROKEN" in out, out[-4000:]
    assert "sdaccel.tpu.pipeline -> torch" in out, out[-4000:]
    assert "Move the shared code into" in out, "the broken contract names the fix"
    assert "No import cycle between the modules of any package BROKEN" in out, out[-4000:]


SCRIPT = """
import sys
import sdaccel.tpu.generate, sdaccel.tpu.pipeline, sdaccel.tpu.sharded_pipeline, sdaccel.tpu.plan, sdaccel.tpu.serving
from sdaccel.tpu import text

tokenizer = text.load_tokenizer(sys.argv[1], "tokenizer")
assert text.tokenize(tokenizer, ["a red circle"]).shape == (1, 77)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "diffusers", "openvino", "nncf"})
modeling = sorted(m for m in sys.modules if m.startswith("transformers.") and "modeling" in m)
print(heavy, modeling)
"""


def test_the_jax_track_runs_without_torch():
    """What the import graph cannot see: a library we call that pulls PyTorch in by itself (the CLIP
    tokenizer comes from transformers, whose models are PyTorch)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(REPO / "checkpoints" / "tiny-shapes-sdxl")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "[] []", proc.stdout[-2000:]


def test_make_lint_runs_the_contracts():
    recipe = (REPO / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "lint-imports" in recipe, "make lint must check the contracts"


def test_every_module_has_its_test_file():
    """tests/ mirrors src/sdaccel/: src/sdaccel/<room>/<module>.py is tested in
    tests/<room>/test_<module>.py (tests/tpu/models/ for the models)."""
    package = REPO / "src" / "sdaccel"
    modules = [p for p in package.rglob("*.py") if p.name != "__init__.py"]
    assert len(modules) > 50, "the package is nearly empty: the walk is broken"
    missing = [
        str(p.relative_to(package))
        for p in modules
        if not (REPO / "tests" / p.relative_to(package).parent / f"test_{p.name}").is_file()
    ]
    assert missing == []
