"""Build the documentation site from the executed smoke notebooks.

    python -m sdaccel.tools.workshop.docs_site                              # from build/smoke (what `make run` writes)
    python -m sdaccel.tools.workshop.docs_site --from build/test/smoke      # from the test suite's executed copies

The site is Sphinx with myst-nb (configured in ``docs/conf.py``). Its sources are staged into
``<out>/src`` in the repository's own layout: the README as the landing page (``index.md``),
``notebooks/`` with the *executed* copies, ``docs/`` and the READMEs these pages link to, with the
images they show. So a relative link that works on GitHub works on the site. The HTML goes to
``<out>/html``; a new build replaces the old one only once it has succeeded.

The lab notes (:data:`LAB_NOTES`) show the committed results' own tables: a page's MyST
``{include}`` of ``../benchmarks/results/<run>.md`` is staged with it, at the same relative path
(``docs/conf.py`` keeps those files out of the pages themselves).

The API reference is one page per room (:data:`API_PAGES`, ``docs/api/<room>.md``: a paragraph on
what the room is for, then the autodoc of its public names), listed by ``docs/api.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sdaccel.tools.workshop.discovery import REPO, discover

#: Pages of docs/ in the site's navigation, in order.
GUIDE = ["docs/workshop.md", "docs/troubleshooting.md"]
#: The lab notes: the measurements behind the course, moved out of the README.
LAB_NOTES = [
    f"docs/{page}.md"
    for page in (
        "setup",
        "memory",
        "rehearsal",
        "int8-under-constraints",
        "tpu-plan",
        "fewer-steps",
        "cpu-speedups",
        "stacking",
    )
]
REFERENCE = [
    "docs/api.md",
    "checkpoints/tiny-shapes-sdxl/README.md",
    "checkpoints/tiny-shapes-sd15/README.md",
    "deploy/README.md",
    "docs/about-this-site.md",
]
#: The API page of each room, in the order of ``docs/api.md``'s table of contents (which lists them).
API_PAGES = [f"docs/api/{room}.md" for room in ("course", "toy", "tpu", "cpu", "core")]
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: A MyST include: the lab notes show the results' own tables (``benchmarks/results/*.md``).
_INCLUDE = re.compile(r"^```\{include\}\s+(\S+)", re.MULTILINE)


class SiteError(RuntimeError):
    """The site cannot be built (executed notebooks missing, Sphinx failed)."""


@dataclass
class Site:
    html: Path
    warnings: list[str]
    seconds: float


def executed_notebooks(executed_dir: Path, notebooks: list[Path] | None = None) -> list[Path]:
    """The executed copy of every notebook, in order; raise naming the missing ones and the fix."""
    notebooks = discover() if notebooks is None else notebooks
    found = [executed_dir / nb.name for nb in notebooks]
    missing = [p.name for p in found if not p.is_file()]
    if missing:
        raise SiteError(
            f"{executed_dir} lacks the executed notebooks {missing}. Run them first: "
            "`make run` (writes build/smoke), or pass --from a folder that has all of them."
        )
    for path in found:
        for i, cell in enumerate(json.loads(path.read_text()).get("cells", [])):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    raise SiteError(
                        f"{path} stopped with an error in cell {i} ({out.get('ename')}: {out.get('evalue')}). "
                        "Fix the notebook and run it again before building the site."
                    )
    return found


def _copy_with_assets(rel: str, src_root: Path, staging: Path) -> None:
    """Copy one Markdown page, the local files (images) it links to and the files it includes,
    keeping their paths; raise naming an included file that is missing."""
    page = src_root / rel
    target = staging / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(page, target)
    for included in _INCLUDE.findall(page.read_text()):
        source = (page.parent / included).resolve()
        if not source.is_file():
            raise SiteError(
                f"{rel} includes {included}, which does not exist: fix the path or restore the file."
            )
        dest = staging / source.relative_to(src_root.resolve())
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)
    for link in _LINK.findall(page.read_text()):
        if "://" in link or link.startswith(("#", "mailto:")):
            continue
        asset = (page.parent / link.split("#")[0]).resolve()
        if asset.is_file() and asset.suffix.lower() not in (".md", ".ipynb"):
            dest = staging / asset.relative_to(src_root.resolve())
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(asset, dest)


def stage(executed_dir: Path, staging: Path, repo: Path = REPO) -> list[str]:
    """Lay out the site's sources in ``staging`` (emptied first); return the notebook documents."""
    notebooks = executed_notebooks(executed_dir)
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "notebooks").mkdir(parents=True)
    docs = []
    for nb in notebooks:
        shutil.copy2(nb, staging / "notebooks" / nb.name)
        docs.append(f"notebooks/{nb.stem}")
    for rel in GUIDE + LAB_NOTES + REFERENCE + API_PAGES:
        _copy_with_assets(rel, repo, staging)
    _copy_with_assets("README.md", repo, staging)
    readme = (staging / "README.md").read_text()
    (staging / "README.md").unlink()

    def toctree(caption: str, entries: list[str]) -> str:
        lines = "\n".join(e.removesuffix(".md") for e in entries)
        return f"\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{lines}\n```\n"

    (staging / "index.md").write_text(
        readme
        + toctree("Notebooks", docs)
        + toctree("Workshop", GUIDE)
        + toctree("Lab notes", LAB_NOTES)
        + toctree("Reference", REFERENCE)
    )
    return docs


def build(executed_dir: Path, out: Path, repo: Path = REPO) -> Site:
    """Stage and build the site into ``out/html``; the previous ``out/html`` stays until this succeeds."""
    start = time.perf_counter()
    executed_notebooks(executed_dir)  # fail before touching anything
    staging, html, fresh = out / "src", out / "html", out / "html.partial"
    stage(executed_dir, staging, repo)
    for old in (fresh, out / "doctrees"):
        if old.exists():
            shutil.rmtree(old)
    warnings_file = out / "warnings.txt"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-E",
            "-c",
            str(repo / "docs"),
            "-d",
            str(out / "doctrees"),
            "-w",
            str(warnings_file),
            str(staging),
            str(fresh),
        ],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    if proc.returncode != 0:
        raise SiteError(f"sphinx-build failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    if html.exists():
        shutil.rmtree(html)
    fresh.rename(html)
    warnings = [w for w in warnings_file.read_text().splitlines() if "WARNING" in w or "ERROR" in w]
    return Site(html, warnings, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--from", dest="executed", type=Path, default=REPO / "build" / "smoke")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "docs")
    args = parser.parse_args(argv)
    try:
        site = build(args.executed, args.out)
    except SiteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for w in site.warnings:
        print(w)
    print(f"Built {site.html / 'index.html'} in {site.seconds:.0f} s ({len(site.warnings)} warnings).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
