"""How much of ``sdaccel`` the notebooks reach: the lines of every module a notebook's code needs.

    python -m sdaccel.tools.workshop.reach            # the total, then one row per module, longest first
    python -m sdaccel.tools.workshop.reach --json     # the same as JSON: {"total": ..., "modules": {...}}

It reads source only (``ast``; nothing is imported):

1. **Start**: every name each notebook's code cells import from the package
   (``from sdaccel.cpu.export import export_pipeline``, ``from sdaccel.cpu import quality``) or read
   off a module they bound (``quality.compare_images``, ``sh.spec_for``).
2. **Resolve** each name to the module that defines it: through a ``from X import name`` that
   re-exports it, and through a room's lazy table (a module-level dict, name -> submodule, that its
   ``__getattr__`` reads), where only the entries used count.
3. **Follow** each reached module's imports within the package, at module level and inside
   functions, transitively; a package's ``__init__`` counts when anything under it is imported.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

#: The package's source root: src/ (this file is src/sdaccel/tools/workshop/reach.py).
SRC = Path(__file__).resolve().parents[3]
NOTEBOOKS = SRC.parent / "notebooks"


def notebook_code(path: Path) -> str:
    """A notebook's code cells, IPython's magics and shell lines left out."""
    cells = json.loads(path.read_text())["cells"]
    lines = (
        line
        for cell in cells
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if not line.lstrip().startswith(("%", "!"))
    )
    return "\n".join(lines)


class Reach:
    """The modules of ``package`` (under ``src``) reached so far, each read and parsed once."""

    def __init__(self, src: Path, package: str):
        self.src, self.package = src, package
        self.reached: dict[str, int] = {}  # module -> its lines
        self.trees: dict[str, ast.Module] = {}

    def path(self, module: str) -> Path | None:
        """The file of ``module`` (``a.b`` -> a/b.py or a/b/__init__.py), ``None`` outside the package."""
        base = self.src.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file() and module.split(".")[0] == self.package:
                return path
        return None

    def tree(self, module: str) -> ast.Module:
        if module not in self.trees:
            self.trees[module] = ast.parse(self.path(module).read_text())
        return self.trees[module]

    def module(self, module: str) -> None:
        """Reach ``module``, the packages above it, and everything it imports."""
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            path = self.path(name)
            if path is None or name in self.reached:
                continue
            self.reached[name] = len(path.read_text().splitlines())
            self.imports(name, self.tree(name).body)

    def imports(self, module: str, body: Iterable[ast.stmt]) -> None:
        """Follow the imports of ``body`` (a module's, functions' included) within the package."""
        for node in walk_outside_type_checking(body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.module(alias.name)
            elif isinstance(node, ast.ImportFrom):
                source = absolute(module, node, is_package=self.path(module).name == "__init__.py")
                if self.path(source) is not None:
                    for alias in node.names:
                        self.name(source, alias.name)

    def name(self, module: str, name: str) -> None:
        """Reach what ``name`` of ``module`` is: a submodule, a re-exported name's module, or the
        entry of the module's lazy table; ``module`` itself in every case."""
        self.module(module)
        if self.path(f"{module}.{name}") is not None:
            self.module(f"{module}.{name}")
            return
        for node in self.tree(module).body:
            if isinstance(node, ast.ImportFrom) and name in {a.asname or a.name for a in node.names}:
                source = absolute(module, node, is_package=self.path(module).name == "__init__.py")
                original = next(a.name for a in node.names if (a.asname or a.name) == name)
                if self.path(source) is not None:
                    self.name(source, original)
                return
        target = lazy_tables(self.tree(module)).get(name)
        if target is not None and self.path(f"{module}.{target}") is not None:
            self.name(f"{module}.{target}", name)


def walk_outside_type_checking(body: Iterable[ast.stmt]) -> Iterator[ast.AST]:
    """Every node under ``body``, except inside ``if TYPE_CHECKING:`` (never run)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack += node.orelse
            continue
        yield node
        stack += list(ast.iter_child_nodes(node))


def absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts[: len(parts) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def lazy_tables(tree: ast.Module) -> dict[str, str]:
    """Name -> submodule, from the module-level dicts of string literals to string literals (a
    room's table of public names, read by its ``__getattr__``)."""
    table = {}
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Dict) and value.keys:
            pairs = list(zip(value.keys, value.values, strict=True))
            if all(isinstance(k, ast.Constant) and isinstance(v, ast.Constant) for k, v in pairs):
                table |= {k.value: v.value for k, v in pairs if isinstance(v.value, str)}
    return table


def notebook_uses(source: str, package: str) -> list[tuple[str, str | None]]:
    """(module, name) for every name the code imports from the package or reads off a module it
    bound (``name`` ``None`` for a module imported whole)."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> module
    uses: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package:
                    uses.append((alias.name, None))
                    if alias.asname:  # `import sdaccel.cpu.quality as q` binds q to the module
                        bound[alias.asname] = alias.name
                    else:  # `import sdaccel.cpu.quality` binds sdaccel
                        bound[package] = package
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            for alias in node.names:
                uses.append((node.module, alias.name))
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"  # a module, maybe
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            uses.append((bound[node.value.id], node.attr))
    return uses


def reach(notebooks: Iterable[Path], src: Path = SRC, package: str = "sdaccel") -> dict[str, int]:
    """Module -> lines, for every module of ``package`` the notebooks' code reaches."""
    walk = Reach(src, package)
    for notebook in notebooks:
        for module, name in notebook_uses(notebook_code(notebook), package):
            if walk.path(module) is None:
                continue  # an attribute of something that is not a module (a class, a function)
            if name is None:
                walk.module(module)
            else:
                walk.name(module, name)
    return walk.reached


def report(reached: dict[str, int]) -> str:
    """The total, then one row per module, longest first."""
    rows = sorted(reached.items(), key=lambda row: (-row[1], row[0]))
    lines = [f"{sum(reached.values())} lines in {len(reached)} modules the notebooks reach", ""]
    lines += [f"{count:>6}  {module}" for module, count in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="folder of the *.ipynb files")
    parser.add_argument("--src", type=Path, default=SRC, help="the folder that holds the package")
    parser.add_argument("--package", default="sdaccel")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    reached = reach(sorted(args.notebooks.glob("*.ipynb")), args.src, args.package)
    result = {"total": sum(reached.values()), "modules": dict(sorted(reached.items(), key=lambda r: -r[1]))}
    print(json.dumps(result, indent=1) if args.json else report(reached))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
