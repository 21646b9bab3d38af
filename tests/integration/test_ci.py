""".ci/run: it runs `make test`, repeats pytest's summary line last, and fails when the tests fail."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def fake_tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("make_exit", "summary"),
    [
        (1, "==== 2 failed, 40 passed in 81.20s (0:01:21) ===="),
        (0, "==== 42 passed in 80.00s (0:01:20) ===="),
    ],
)
def test_ci_run_reports_the_summary_and_the_status(tmp_path, make_exit, summary):
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")  # run in a copy: it writes build/
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3.11", "chromium"):
        fake_tool(bin_dir, tool, "exit 0")
    fake_tool(
        bin_dir, "make", f'echo "ran make $*"; echo "{summary}"; echo "trailing output"; exit {make_exit}'
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == make_exit, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert "ran make test" in lines
    assert lines[-1] == f"pytest: {summary}", proc.stdout
    assert summary in (tmp_path / "build" / "ci-test.log").read_text()
