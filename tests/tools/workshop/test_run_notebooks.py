"""The runner's command line: ``python -m sdaccel.tools.workshop.run_notebooks`` (the Makefile and CI
run it) prints its profiles in its help, and refuses an unknown profile or notebook before anything
runs (the steps themselves: test_discovery.py, test_execute.py, test_run_files.py,
test_memory_watch.py, test_run_summary.py)."""

import subprocess
import sys

import pytest

from sdaccel.tools.workshop.run_notebooks import main, run_all


def test_the_command_line_runs_as_a_module_and_says_what_it_does():
    done = subprocess.run(
        [sys.executable, "-m", "sdaccel.tools.workshop.run_notebooks", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Execute every notebook in order through papermill" in done.stdout
    assert "--profile" in done.stdout and "--only" in done.stdout and "--keep-going" in done.stdout


def test_an_unknown_profile_or_notebook_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(SystemExit, match="Unknown profile 'fast'"):
        main(["--profile", "fast", "--build-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="No notebook matches"):
        run_all("full", ["99"], tmp_path)
    assert not any(tmp_path.iterdir())
