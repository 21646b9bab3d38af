"""What every fault case needs: a child Python process to inject the fault into, a digest of a
folder to prove nothing was lost, the hidden leftovers an interrupted writer leaves, the processes
still alive in the child's process group, and a small real disk to fill.

A fault is injected for real: the child is started with ``SDACCEL_FAULT=<point>:<kind>``
(:mod:`sdaccel.core.faults`) and is killed, interrupted or runs out of disk at that point; or it is
sent a signal from here; or it writes onto a tmpfs of a few MiB.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from sdaccel.core.faults import FAULT_ENV

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Child:
    """A finished child: its exit code (``-9`` for SIGKILL), output, and process group."""

    returncode: int
    stdout: str
    stderr: str
    pgid: int


def digest(folder: str | os.PathLike) -> dict[str, str]:
    """Every file under ``folder`` (relative path) with the sha256 of its bytes."""
    folder = Path(folder)
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def hidden_leftovers(folder: str | os.PathLike) -> list[str]:
    """Hidden entries of ``folder``: staging, aside and working folders, temporary files."""
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("."))


def group_processes(pgid: int) -> list[psutil.Process]:
    """Live (not zombie) processes of the process group ``pgid``."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def run_python(
    code: str,
    fault: str | None = None,
    *,
    env: dict | None = None,
    timeout: float = 300,
    signal_after: tuple[float, int] | None = None,
    cwd: str | os.PathLike | None = None,
) -> Child:
    """Run ``code`` in a fresh Python in a new session (its own process group), with the fault
    ``fault`` (``"<point>[#n]:<kind>"``) armed, or sent ``signal_after = (seconds, signal)``. Waits
    for it, then gives what is left of its group 10 s to go and kills it (the test then fails on
    :func:`group_processes`, not on a hang)."""
    full_env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    full_env.pop(FAULT_ENV, None)
    if fault:
        full_env[FAULT_ENV] = fault
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        cwd=cwd or REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    if signal_after is not None:
        seconds, signum = signal_after
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signum)
    return Child(*finish(proc, timeout), proc.pid)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """Wait for ``proc`` (started in a session of its own, with pipes): its exit code, stdout and
    stderr. Past ``timeout`` its whole group is killed and the test fails, instead of hanging."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the child ran past {timeout} s:\n{err[-3000:]}")
    return proc.returncode, out, err


def wait_for_group_to_end(pgid: int, seconds: float = 15.0) -> list[psutil.Process]:
    """The processes of group ``pgid`` still alive after up to ``seconds`` (they die with their
    parent, but the kernel takes a moment); the rest of the group is then killed so that a failing
    test leaves nothing behind."""
    deadline = time.monotonic() + seconds
    while (alive := group_processes(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return alive


@pytest.fixture
def small_disk(tmp_path):
    """A real file system of 4 MiB (a tmpfs mounted in ``tmp_path``), to fill for real: ``ENOSPC``
    comes from the kernel, at whatever write reaches the limit. Needs the right to mount (root, as in
    CI); elsewhere the case is skipped, and the injected ``enospc`` fault covers the same path."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


class Kit:
    """The helpers above, for a test to take as the ``fault_kit`` fixture (test modules here do not
    import from conftest)."""

    digest = staticmethod(digest)
    hidden_leftovers = staticmethod(hidden_leftovers)
    group_processes = staticmethod(group_processes)
    run_python = staticmethod(run_python)
    finish = staticmethod(finish)
    wait_for_group_to_end = staticmethod(wait_for_group_to_end)
    REPO = REPO


@pytest.fixture(scope="session")
def fault_kit() -> Kit:
    return Kit()
