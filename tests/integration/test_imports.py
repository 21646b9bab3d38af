"""Imports stand at the top of a module (issue #54): an import inside a function is kept only where
it loads a heavy or track-specific framework (PyTorch, OpenVINO, JAX, ...), directly or through an
sdaccel module that imports one at its top, so that importing a light module stays light and the
TPU environment, which has no PyTorch or OpenVINO, can import what it needs. Everything else goes to
the top, where the dependency graph can be read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Top-level packages an import may load lazily: the deep-learning frameworks, packages one track's
#: environment lacks (requirements-tpu.txt has no torch, OpenVINO, NNCF, SciPy, scikit-image), and
#: the heavy notebook and plotting stacks that only some calls need.
HEAVY = frozenset(
    {
        "torch", "torchvision", "diffusers", "transformers", "accelerate", "peft", "tomesd",
        "openvino", "openvino_genai", "openvino_tokenizers", "nncf",
        "jax", "jaxlib", "flax", "optax", "libtpu",
        "matplotlib", "gradio", "papermill", "nbformat", "nbclient", "IPython", "ipywidgets",
        "scipy", "skimage", "rich", "huggingface_hub", "sphinx", "selenium", "grimp", "zstandard",
        "compression", "onnxruntime",
    }
)  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, modules: set[str]) -> list[str]:
    """The modules an import statement names (for ``from pkg import sub`` the submodule when it is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
    return subs or [base]


def function_imports(tree: ast.Module):
    """Import statements inside a function, outside a ``try`` (an optional dependency's probe)."""
    guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) for n in ast.walk(t)}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Import | ast.ImportFrom)
                    and not getattr(node, "level", 0)
                    and id(node) not in guarded
                ):
                    yield node


def top_imports(tree: ast.Module):
    """Import statements that run when the module is imported (not in a function or a class)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If | ast.Try | ast.With):
            stack.extend(ast.iter_child_nodes(node))


def package_trees() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text()) for p in sorted((SRC / "sdaccel").rglob("*.py"))}


def heavy_modules(trees: dict[str, ast.Module]) -> set[str]:
    """The sdaccel modules whose import loads a HEAVY package (their own top-level imports, followed
    through sdaccel; a package's ``__init__`` runs before its submodules)."""
    modules = set(trees)
    direct = {m: {d for n in top_imports(t) for d in imported(n, modules)} for m, t in trees.items()}

    def parents(m: str) -> list[str]:
        parts = m.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts))]

    heavy: set[str] = set()
    changed = True
    while changed:
        changed = False
        for m, deps in direct.items():
            if m in heavy:
                continue
            for d in deps | set(parents(m)):
                if d.split(".")[0] in HEAVY or d in heavy:
                    heavy.add(m)
                    changed = True
                    break
    return heavy


def light_imports_in_functions(trees: dict[str, ast.Module]) -> list[str]:
    heavy = heavy_modules(trees)
    modules = set(trees)
    found = []
    for m, tree in trees.items():
        for node in function_imports(tree):
            targets = imported(node, modules)
            if any(t.split(".")[0] in HEAVY or t in heavy for t in targets):
                continue
            if any(t.split(".")[0] == "sdaccel" and t not in modules for t in targets):
                continue  # not a module of ours (the test of the missing module says so elsewhere)
            found.append(f"{m}:{node.lineno} {ast.unparse(node)}")
    return found


def test_imports_inside_functions_load_only_heavy_frameworks():
    found = light_imports_in_functions(package_trees())
    assert found == [], "move these imports to the top of their module:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "body, flagged",
    [
        ("def f():\n    import json\n", True),
        ("def f():\n    from sdaccel.light import x\n", True),
        ("def f():\n    import torch\n", False),
        ("def f():\n    from sdaccel.heavy import y\n", False),  # imports OpenVINO at its top
        ("def f():\n    try:\n        import json\n    except ImportError:\n        pass\n", False),
        ("import json\n", False),
    ],
)
def test_the_check_tells_light_from_heavy(body, flagged):
    trees = {
        "sdaccel": ast.parse(""),
        "sdaccel.light": ast.parse("x = 1\n"),
        "sdaccel.heavy": ast.parse("import openvino\ny = 2\n"),
        "sdaccel.user": ast.parse(body),
    }
    assert bool(light_imports_in_functions(trees)) is flagged
