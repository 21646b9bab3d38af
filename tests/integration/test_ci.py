""".ci/run: it runs `make test`, repeats pytest's summary line last, and fails when the tests fail; and the
grouping of tests for its workers (tests/conftest.py) names only modules that exist, in the right order."""

import os
import shutil
import subprocess
import sys
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


def loaded_conftest():
    """tests/conftest.py as pytest loaded it (loading it again would configure JAX twice)."""
    path = REPO / "tests" / "conftest.py"
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path))


def test_every_module_and_group_that_the_scheduler_names_exists(monkeypatch):
    conftest = loaded_conftest()
    assert conftest.stale_group_entries() == []
    monkeypatch.setitem(conftest.GROUPS, "tests/cpu/test_gone.py", "ov-exports")
    monkeypatch.setitem(conftest.SLOW_GROUPS, "tests/old_room/test_moved.py", 100)
    monkeypatch.setitem(conftest.SLOW_GROUPS, "no-such-group", 100)
    assert conftest.stale_group_entries() == [
        "GROUPS: tests/cpu/test_gone.py (no such file)",
        "SLOW_GROUPS: tests/old_room/test_moved.py (no such file)",
        "SLOW_GROUPS: no-such-group (no such group: not a value of GROUPS)",
    ]


class FakeItem:
    def __init__(self, nodeid: str):
        self.nodeid = nodeid

    def iter_markers(self, name):
        return iter(())


def test_the_site_runs_after_the_notebooks_of_its_group_whatever_the_collection_order():
    """tests/course/ is collected before tests/integration/: the site's tests, which read every
    executed notebook, must still come after 04-07 (else that worker would wait for 00-03 first)."""
    conftest = loaded_conftest()
    items = [
        FakeItem("tests/tools/workshop/test_docs_site.py::test_site_builds_and_renders_in_chromium"),
        FakeItem("tests/core/test_contract.py::test_a"),
        FakeItem("tests/integration/test_notebooks.py::test_notebook_runs_in_smoke_profile[04_openvino]"),
        FakeItem("tests/integration/test_notebooks.py::test_notebook_runs_in_smoke_profile[00_environment]"),
        FakeItem("tests/integration/test_notebooks.py::test_notebooks_exist"),
    ]
    conftest.pytest_collection_modifyitems(None, items)
    assert [item.nodeid.split("::")[1] for item in items] == [
        "test_notebook_runs_in_smoke_profile[04_openvino]",
        "test_notebooks_exist",
        "test_site_builds_and_renders_in_chromium",
        "test_notebook_runs_in_smoke_profile[00_environment]",
        "test_a",
    ]


def test_each_worker_computes_on_its_own_share_of_the_cpus():
    conftest = loaded_conftest()

    def cpus(worker, count, available):
        env = {"PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": str(count)}
        return conftest.worker_cpus(env, available)

    assert [cpus(f"gw{k}", 2, {0, 1}) for k in (0, 1)] == [{0}, {1}]
    assert [cpus(f"gw{k}", 2, range(8)) for k in (0, 1)] == [{0, 2, 4, 6}, {1, 3, 5, 7}]
    assert [cpus(f"gw{k}", 3, {4, 5, 6, 7}) for k in (0, 1, 2)] == [{4, 7}, {5}, {6}]
    assert cpus("gw0", 1, {0, 1}) is None  # one worker keeps every CPU
    assert cpus("gw1", 3, {0, 1}) is None  # more workers than CPUs: left to the scheduler
    assert conftest.worker_cpus({}, {0, 1}) is None  # not under xdist
    if conftest.WORKER_CPUS:  # under make test on two or more CPUs: this worker is pinned
        assert os.sched_getaffinity(0) == conftest.WORKER_CPUS
