"""sdaccel.course.colab, the installer the setup cell runs where sdaccel is missing: outside Colab it
names the fix and runs nothing; on Colab it clones, pip-installs (with the TPU extra on a TPU) and
restarts the kernel when the install replaced a package the kernel had imported. Every command is
recorded by a fake ``subprocess.run``; nothing is cloned or installed."""

import ast
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from sdaccel.course import colab
from sdaccel.course.notebook import SETUP_CELL

REPO = Path(__file__).resolve().parents[2]
URL = "https://github.com/sdaccel/sd-fast-tutorial"


@pytest.fixture
def commands(monkeypatch):
    """The commands the installer runs, recorded instead of run. A clone makes the checkout with the
    repository's requirements-colab.txt, as the real one would."""
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        if command[:2] == ["git", "clone"]:
            Path(command[-1]).mkdir(parents=True)
            shutil.copy(REPO / "requirements-colab.txt", command[-1])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    return calls


def not_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)


def on_colab(monkeypatch, kernel=True, tpu_device=None):
    """A Colab kernel (it has imported google.colab and ipykernel); ``tpu_device``: the one device file
    that exists (None: a CPU runtime)."""
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    if kernel:
        monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    else:
        monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    real_exists = colab.os.path.exists
    monkeypatch.setattr(
        colab.os.path, "exists", lambda p: p == tpu_device if str(p).startswith("/dev/") else real_exists(p)
    )


def pip(checkout: Path, *extra: str) -> list[str]:
    requirements = str(checkout / "requirements-colab.txt")
    return [sys.executable, "-m", "pip", "install", "-q", "-r", requirements, *extra, str(checkout)]


def no_kill(monkeypatch):
    kills = []
    monkeypatch.setattr(colab.os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.setattr(colab.time, "sleep", lambda s: None)
    return kills


def test_outside_colab_it_names_the_fix_and_runs_nothing(monkeypatch, commands, tmp_path):
    not_colab(monkeypatch)
    with pytest.raises(RuntimeError, match=r"README's 'Where to run' \(make setup, then make lab"):
        colab.install(tmp_path / "checkout")
    assert commands == [] and not (tmp_path / "checkout").exists()


def test_colab_is_its_kernel_or_a_process_started_there(monkeypatch):
    not_colab(monkeypatch)
    assert not colab.on_colab()
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20260101")  # a terminal or !python on Colab
    assert colab.on_colab()
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert colab.on_colab()


def test_a_cpu_runtime_clones_then_installs_the_requirements_and_the_package(
    monkeypatch, commands, tmp_path, capsys
):
    on_colab(monkeypatch)
    kills = no_kill(monkeypatch)
    checkout = tmp_path / "sd-fast-tutorial"
    assert colab.install(checkout) == []  # nothing the kernel had imported changed here
    assert commands == [["git", "clone", "--depth", "1", URL, str(checkout)], pip(checkout)]
    assert kills == [] and "no restart needed" in capsys.readouterr().out


@pytest.mark.parametrize("device", ["/dev/accel0", "/dev/vfio/0"])
def test_a_tpu_runtime_adds_jax_tpu_of_the_pinned_version(monkeypatch, commands, tmp_path, device):
    on_colab(monkeypatch, tpu_device=device)
    no_kill(monkeypatch)
    checkout = tmp_path / "sd-fast-tutorial"
    checkout.mkdir()  # an earlier run cloned it: no second clone
    shutil.copy(REPO / "requirements-colab.txt", checkout)
    colab.install(checkout)
    assert commands == [pip(checkout, "jax[tpu]==0.10.2")]


def test_the_tpu_extra_follows_the_requirements_pin(tmp_path):
    (tmp_path / "r.txt").write_text("# JAX\njaxlib==9.9.8\njax==9.9.9  # the track\nflax==1\n")
    assert colab.tpu_extra(tmp_path / "r.txt") == "jax[tpu]==9.9.9"
    (tmp_path / "r.txt").write_text("flax==1\n")
    with pytest.raises(ValueError, match="pins no jax"):
        colab.tpu_extra(tmp_path / "r.txt")


def replacing(monkeypatch, before: dict, after: dict):
    """The kernel has imported the distributions of ``before``; the install leaves them at ``after``."""
    monkeypatch.setattr(colab, "loaded_distributions", lambda modules: sorted(before))
    reads = iter([before, after])
    monkeypatch.setattr(colab, "versions", lambda dists: next(reads))


def test_the_kernel_restarts_itself_when_the_install_replaced_what_it_had_imported(
    monkeypatch, commands, tmp_path, capsys
):
    on_colab(monkeypatch)
    kills = no_kill(monkeypatch)
    replacing(monkeypatch, {"jax": "0.4.38", "numpy": "2.0.2"}, {"jax": "0.10.2", "numpy": "2.0.2"})
    colab.install(tmp_path / "sd-fast-tutorial")
    assert kills == [(colab.os.getpid(), signal.SIGKILL)]
    out = capsys.readouterr().out
    assert "restarting the runtime" in out and "replaced jax," in out and "Run all again" in out
    assert "numpy" not in out  # unchanged by the install: not stale


def test_no_restart_when_nothing_imported_was_replaced(monkeypatch, commands, tmp_path, capsys):
    on_colab(monkeypatch)
    kills = no_kill(monkeypatch)
    replacing(monkeypatch, {"numpy": "2.0.2"}, {"numpy": "2.0.2"})
    assert colab.install(tmp_path / "sd-fast-tutorial") == []
    assert kills == [] and "no restart needed" in capsys.readouterr().out


def test_run_as_a_command_it_kills_no_kernel_and_says_to_restart(monkeypatch, commands, tmp_path, capsys):
    on_colab(monkeypatch, kernel=False)  # python -m sdaccel.course.colab in a terminal on Colab
    kills = no_kill(monkeypatch)
    replacing(monkeypatch, {"jax": "0.4.38"}, {"jax": "0.10.2"})
    assert colab.install(tmp_path / "sd-fast-tutorial") == ["jax"]
    assert kills == [] and "Restart any notebook kernel" in capsys.readouterr().out


def test_a_failed_pip_shows_its_output_in_the_cell(monkeypatch, tmp_path):
    on_colab(monkeypatch)
    (tmp_path / "sd-fast-tutorial").mkdir()

    def failing(command, **kwargs):
        return subprocess.CompletedProcess(
            command, 1, "", "ERROR: No matching distribution found for jax==0.10.2"
        )

    monkeypatch.setattr(subprocess, "run", failing)
    with pytest.raises(RuntimeError, match="exit status 1:\nERROR: No matching distribution found"):
        colab.install(tmp_path / "sd-fast-tutorial")


def test_versions_are_read_for_the_distributions_of_loaded_modules():
    assert colab.loaded_distributions(["numpy.linalg", "json", "sys", "__main__"]) == ["numpy"]
    assert colab.versions(["numpy", "no-such-distribution-here"]) == {
        "numpy": np.__version__,
        "no-such-distribution-here": None,
    }


# ----------------------------------------------------------------------------------------------
# The setup cell runs this file's text, fetched from GitHub, before sdaccel is installed
# ----------------------------------------------------------------------------------------------


def test_the_cell_fetches_this_file():
    module = Path(colab.__file__).resolve()
    assert colab.INSTALLER_URL == f"{URL}/raw/main/{module.relative_to(REPO).as_posix()}"
    assert f'INSTALLER = "{colab.INSTALLER_URL}"' in SETUP_CELL


def test_the_installer_imports_only_the_standard_library():
    tree = ast.parse(Path(colab.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    tops = {name.partition(".")[0] for name in imported}
    assert tops and tops <= sys.stdlib_module_names | {"__future__"}, tops - sys.stdlib_module_names


def test_its_text_run_as_the_cell_runs_it_stops_outside_colab_before_running_anything(monkeypatch, commands):
    not_colab(monkeypatch)
    source = Path(colab.__file__).read_bytes()  # what urlopen(INSTALLER).read() returns
    with pytest.raises(RuntimeError, match="not installed in this kernel"):
        exec(source, {"__name__": "__main__"})
    assert commands == []


def test_its_text_run_as_the_cell_runs_it_installs_on_colab(monkeypatch, commands, tmp_path):
    on_colab(monkeypatch)
    kills = no_kill(monkeypatch)
    namespace = {"__name__": "installer"}  # define everything, then point CHECKOUT at tmp_path
    exec(Path(colab.__file__).read_bytes(), namespace)
    namespace["CHECKOUT"] = tmp_path / "sd-fast-tutorial"
    namespace["main"]()
    assert [c[:2] for c in commands] == [["git", "clone"], [sys.executable, "-m"]]
    assert commands[1] == pip(tmp_path / "sd-fast-tutorial") and kills == []
