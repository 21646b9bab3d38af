"""The documentation site: staged from the executed smoke notebooks, built with Sphinx, and opened
in headless Chromium (Debian's ``chromium`` package, driven over the DevTools protocol).

The slow test builds from the copies that tests/integration/test_notebooks.py executed into build/test/smoke
in this test run (the ``smoke_notebook`` fixture, which executes each notebook once per run on
whichever worker asks first), and executes the notebooks itself when it runs alone. It asserts that every notebook page renders with all its figures, that the
landing page links every notebook, and that no internal link of the site is broken.
"""

from __future__ import annotations

import base64
import fcntl
import html.parser
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from sdaccel.tools.workshop import docs_site
from sdaccel.tools.workshop.discovery import REPO, discover

NOTEBOOKS = discover()
OWN_BUILD = REPO / "build" / "site-test"


# ----------------------------------------------------------------------------------------------
# Staging (fast: no Sphinx, no notebook execution)
# ----------------------------------------------------------------------------------------------


def fake_executed(tmp_path: Path) -> Path:
    folder = tmp_path / "executed"
    folder.mkdir()
    for nb in NOTEBOOKS:
        shutil.copy2(nb, folder / nb.name)
    return folder


def test_stage_lays_out_the_repository(tmp_path):
    staging = tmp_path / "src"
    docs = docs_site.stage(fake_executed(tmp_path), staging)
    assert docs == [f"notebooks/{nb.stem}" for nb in NOTEBOOKS]
    index = (staging / "index.md").read_text()
    assert index.startswith(
        (REPO / "README.md").read_text().split("\n", 1)[0]
    )  # the README is the landing page
    for doc in (
        docs
        + [
            "docs/workshop",
            "docs/troubleshooting",
            "docs/api",
            "checkpoints/tiny-shapes-sdxl/README",
        ]
        + [page.removesuffix(".md") for page in docs_site.LAB_NOTES]
    ):
        assert f"\n{doc}\n" in index, doc
    # the lab notes include the results' own tables: staged beside them, at the same relative path
    assert (
        "```{include} ../benchmarks/results/whole_image_sd15.md"
        in (staging / "docs" / "fewer-steps.md").read_text()
    )
    assert (staging / "benchmarks" / "results" / "whole_image_sd15.md").is_file()
    # the checkpoint READMEs keep their pictures, at the same relative paths
    assert (staging / "checkpoints" / "tiny-shapes-sdxl" / "samples.png").is_file()
    assert not (staging / "checkpoints" / "tiny-shapes-sdxl" / "unet").exists()  # pages and images only


def test_stage_refuses_a_page_that_includes_a_missing_file(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "page.md").write_text("# Page\n\n```{include} ../benchmarks/results/gone.md\n```\n")
    with pytest.raises(docs_site.SiteError, match="gone.md"):
        docs_site._copy_with_assets("docs/page.md", repo, tmp_path / "src")


def test_stage_refuses_missing_or_failed_notebooks(tmp_path):
    executed = fake_executed(tmp_path)
    (executed / NOTEBOOKS[-1].name).unlink()
    with pytest.raises(docs_site.SiteError, match=NOTEBOOKS[-1].name):
        docs_site.stage(executed, tmp_path / "src")
    assert not (tmp_path / "src").exists()  # nothing written
    shutil.copy2(NOTEBOOKS[-1], executed / NOTEBOOKS[-1].name)
    nb = json.loads((executed / NOTEBOOKS[0].name).read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "error", "ename": "ValueError", "evalue": "boom", "traceback": []}]
    (executed / NOTEBOOKS[0].name).write_text(json.dumps(nb))
    with pytest.raises(docs_site.SiteError, match="ValueError: boom"):
        docs_site.stage(executed, tmp_path / "src")


# ----------------------------------------------------------------------------------------------
# Headless Chromium over the DevTools protocol (--remote-debugging-pipe: no extra package)
# ----------------------------------------------------------------------------------------------


class Chromium:
    """A headless Chromium page driven over file descriptors 3 (commands) and 4 (replies)."""

    def __init__(self, width: int = 1280, height: int = 1000):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            pytest.skip("Chromium is not installed: apt-get install -y chromium (.ci/run does)")
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        cmd_r, self._cmd_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        # park the child's ends above 10 so that moving them to 3 and 4 cannot clobber each other
        cmd_hi, reply_hi = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(reply_w, fcntl.F_DUPFD, 10)

        def to_3_and_4():
            os.dup2(cmd_hi, 3)
            os.dup2(reply_hi, 4)

        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--allow-file-access-from-files",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            preexec_fn=to_3_and_4,
            close_fds=False,  # keep 3 and 4 (Python's own descriptors are not inheritable anyway)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fd in (cmd_r, reply_w, cmd_hi, reply_hi):
            os.close(fd)
        self._buffer, self._next_id, self._events = b"", 0, []
        target = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable", page=True)
        # the page's viewport is exactly width x height (the window also holds the browser's frame)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            page=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def call(self, method: str, page: bool = False, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if page:
            message["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._events.append(reply)

    def _read(self, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._reply_r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium exited")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def open(self, path: Path) -> None:
        self._events.clear()
        self.call("Page.navigate", page=True, url=path.resolve().as_uri())
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            self._events.append(self._read())

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", page=True, expression=expression, returnByValue=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", page=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        for fd in (self._cmd_w, self._reply_r):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Links
# ----------------------------------------------------------------------------------------------


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for name in ("href", "src"):
            if attrs.get(name) and tag in ("a", "img", "link", "script"):
                self.links.append(attrs[name])


def broken_links(root: Path) -> list[str]:
    """Every relative href/src of every page that names a missing file or a missing anchor."""
    parsed = {}
    for page in root.rglob("*.html"):
        p = _Links()
        p.feed(page.read_text(errors="replace"))
        parsed[page.resolve()] = p
    broken = []
    for page, p in parsed.items():
        for link in p.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external, data: and mailto: links are not the site's
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(root.resolve())}: {link}")
            elif parts.fragment and target in parsed and unquote(parts.fragment) not in parsed[target].ids:
                broken.append(f"{page.relative_to(root.resolve())}: {link} (no such anchor)")
    return broken


# ----------------------------------------------------------------------------------------------
# The built site
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executed_dir(smoke_notebook) -> Path:
    """This run's executed copies (``smoke_notebook`` runs each notebook once per test run, so
    after tests/integration/test_notebooks.py, on either worker, this only reads them back)."""
    folders = {smoke_notebook(nb).executed.parent for nb in NOTEBOOKS}
    (folder,) = folders
    return folder


def plots(notebook: Path) -> bool:
    """Whether the notebook's code shows a figure (matplotlib or IPython's display)."""
    code = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    return any(k in "".join(c["source"]) for c in code for k in ("plt.show(", "display("))


def figure_count(notebook: Path) -> int:
    """How many images the executed notebook's outputs hold."""
    nb = json.loads(notebook.read_text())
    return sum(
        1
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if any(k.startswith("image/") for k in out.get("data", {}))
    )


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
def test_site_builds_and_renders_in_chromium(executed_dir):
    out = OWN_BUILD / "docs"
    built = docs_site.build(executed_dir, out)
    root = built.html
    print(f"site built in {built.seconds:.1f} s with {len(built.warnings)} warnings")
    serious = [
        w
        for w in built.warnings
        if any(k in w for k in ("xref", "toctree", "image", "not found", "nonexist"))
    ]
    assert serious == [], "\n".join(serious)
    assert broken_links(root) == []

    browser = Chromium()
    shots = out / "screenshots"
    shots.mkdir(exist_ok=True)
    try:
        browser.open(root / "index.html")
        nav = browser.evaluate("Array.from(document.querySelectorAll('.sidebar-tree a')).map(a => a.href)")
        for nb in NOTEBOOKS:
            assert any(f"notebooks/{nb.stem}.html" in href for href in nav), (
                f"no link to {nb.stem} on the landing page"
            )
        browser.screenshot(shots / "index.png")
        for nb in NOTEBOOKS:
            page = root / "notebooks" / f"{nb.stem}.html"
            browser.open(page)
            state = browser.evaluate(
                """(() => {
                  const imgs = Array.from(document.querySelectorAll('article img'));
                  return {
                    title: document.querySelector('article h1') ? document.querySelector('article h1').textContent : '',
                    images: imgs.length,
                    loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
                    outputs: document.querySelectorAll('.cell_output').length,
                    errors: document.querySelectorAll('.output.traceback').length,
                  };
                })()"""
            )
            first_line = json.loads(nb.read_text())["cells"][0]["source"][0].lstrip("# ").strip()
            assert state["title"].strip().rstrip("¶#").strip() == first_line, state
            figures = figure_count(executed_dir / nb.name)
            if plots(nb):  # a figure the executed copy lacks (a non-inline backend) is not on the page either
                assert figures > 0, f"{nb.name} shows figures, but its executed copy holds none"
            assert state["images"] >= figures and state["loaded"] == state["images"], (
                nb.stem,
                state,
                figures,
            )
            assert state["outputs"] > 0 and state["errors"] == 0, (nb.stem, state)
            # the screenshot shows the page's first figure where it has one, else its top
            browser.evaluate(
                "(() => { const i = document.querySelector('.cell_output img'); if (!i) return;"
                " const r = i.getBoundingClientRect();"  # 'instant': the theme scrolls smoothly otherwise
                " window.scrollTo({top: window.scrollY + r.top + r.height / 2 - innerHeight / 2, behavior: 'instant'}); })()"
            )
            browser.screenshot(shots / f"{nb.stem}.png")
    finally:
        browser.close()

    from PIL import Image, ImageStat

    for shot in sorted(shots.glob("*.png")):
        image = Image.open(io.BytesIO(shot.read_bytes())).convert("L")
        assert image.size == (1280, 1000), shot
        assert ImageStat.Stat(image).stddev[0] > 10, f"{shot.name} looks blank"
