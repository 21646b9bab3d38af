"""sdaccel.core.processes: a function run in a spawned child process, its peak memory measured, and a
child above its memory limit stopped."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from sdaccel.core.processes import ChildRun, memory_status, run_with_memory_limit


def _allocate(megabytes: int, hold_s: float = 0.0) -> int:
    block = np.ones(megabytes * 2**20, dtype=np.uint8)
    time.sleep(hold_s)
    return int(block.sum() // 2**20)


def _fail() -> None:
    raise ValueError("bad input")


def test_run_with_memory_limit_measures_the_child_peak():
    # this (pytest) process holds far more than the children: their peak must not include it
    baseline = run_with_memory_limit(_allocate, 0)
    run = run_with_memory_limit(_allocate, 300, hold_s=0.5)  # held long enough to be polled
    assert baseline.ok and run.ok and run.result == 300
    assert 0.28 <= run.peak_rss_gb - baseline.peak_rss_gb < 0.4
    assert 0.28 <= run.peak_anon_gb - baseline.peak_anon_gb < 0.4


def test_run_with_memory_limit_kills_a_child_above_the_limit():
    run = run_with_memory_limit(_allocate, 800, hold_s=5.0, limit_gb=0.5)
    assert isinstance(run, ChildRun)
    assert not run.ok and run.result is None
    assert "killed" in run.error and run.peak_rss_gb > 0.5


def test_an_exception_in_the_child_is_reported_not_raised():
    run = run_with_memory_limit(_fail)
    assert not run.ok and run.result is None and run.error == "ValueError: bad input"


#: A parent that runs a child sleeping for ten minutes; it prints its child's pid once the child runs.
PARENT = """
import sys, threading, time
import psutil
from sdaccel.core.processes import run_with_memory_limit

def report():  # the function's child, not multiprocessing's resource tracker (started first)
    me = psutil.Process()
    while True:
        ours = [c for c in me.children() if "spawn_main" in " ".join(c.cmdline())]
        if ours:
            print(ours[0].pid, flush=True)
            return
        time.sleep(0.05)

threading.Thread(target=report, daemon=True).start()
try:
    run_with_memory_limit(time.sleep, 600)
except KeyboardInterrupt:
    sys.exit(3)
"""


def _parent_with_a_child():
    import subprocess
    import sys

    import psutil

    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    assert child.is_running() and child.ppid() == parent.pid
    time.sleep(1.0)  # let the child reach the function: its guards are set up by then
    return parent, child


def _gone(process, timeout_s: float = 10.0) -> bool:
    """Whether ``process`` ended within ``timeout_s`` (a zombie has ended: only its exit status is
    left, for a reaper that a container's init may never be); killed if not."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            process.kill()  # do not leave it behind for the rest of the session
            return False
        time.sleep(0.05)


def test_the_child_dies_with_a_parent_killed_outright():
    import signal

    parent, child = _parent_with_a_child()
    parent.send_signal(signal.SIGKILL)  # no handler of the parent's runs
    parent.wait(10)
    assert _gone(child), "the child outlived its SIGKILLed parent"
    parent.stdout.close()


def test_an_interrupted_parent_kills_its_child_before_raising():
    import signal

    parent, child = _parent_with_a_child()
    try:
        parent.send_signal(signal.SIGINT)  # KeyboardInterrupt in the parent, as Ctrl-C in a notebook
        # the KeyboardInterrupt reached the caller (a child left running would hold the parent's
        # exit for the rest of its ten minutes: multiprocessing joins its children at exit). The
        # bound leaves a loaded machine room to start and stop Pythons; a held parent takes 600 s.
        assert parent.wait(120) == 3
        assert _gone(child, timeout_s=0.5), "the child was still running when the parent's call returned"
    finally:
        parent.kill()
        parent.stdout.close()


#: Ctrl-C landing inside ``Process.start()``, in a Python of its own: the signal must reach the
#: main thread that runs the call (an xdist worker runs tests elsewhere, and would die of it).
CTRL_C_IN_START = """
import multiprocessing.popen_spawn_posix as popen
import os, signal, sys, time
import psutil
from sdaccel.core.processes import run_with_memory_limit

real_launch = popen.Popen._launch
started = []

def launch_then_ctrl_c(self, process_obj):
    real_launch(self, process_obj)
    started.append(psutil.Process(self.pid))
    os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came while start() was finishing
    time.sleep(0.5)  # an unguarded handler raises here, inside start()

popen.Popen._launch = launch_then_ctrl_c
try:
    run_with_memory_limit(time.sleep, 600)
except KeyboardInterrupt:
    pass
else:
    sys.exit("no KeyboardInterrupt")
child = started[0]
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    try:
        if child.status() == psutil.STATUS_ZOMBIE:
            break
    except psutil.NoSuchProcess:
        break
    time.sleep(0.05)
else:
    child.kill()
    sys.exit("the child outlived the interrupted call")
print("child gone")
"""


def test_ctrl_c_while_the_child_starts_still_kills_it():
    """The child exists before ``Process.start()`` returns. A Ctrl-C that lands inside ``start()``,
    after the child was launched but before ``multiprocessing`` recorded it, used to leave a child
    this call never killed (its pid was still unknown to the ``Process``): it slept on, for as long as
    its parent lived. The signal is now held back until ``start()`` returns, then raised, and the
    child is killed."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_START], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "child gone" in done.stdout, done.stderr[-2000:]


def test_memory_status_reads_peak_resident_and_anonymous_bytes_at_once():
    import subprocess
    import sys

    before = memory_status()
    if before is None:
        pytest.skip("no /proc/<pid>/status off Linux")
    block = np.ones(64 * 2**20, np.uint8)  # 64 MiB of heap, touched
    now = memory_status()
    assert now.anon - before.anon >= 60 * 2**20 and now.rss - before.rss >= 60 * 2**20
    page_batches = 2**20  # Linux updates the counters lazily, a few pages at a time
    assert now.peak + page_batches >= now.rss >= now.anon > 0
    del block
    assert memory_status().peak + page_batches >= now.peak  # a high-water mark: the RSS fell, not it
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    assert memory_status(int(ended.stdout)) is None  # a process that has ended


FREED_HEAP = """
import sys
from sdaccel.core.processes import memory_status, return_freed_memory
blocks = [bytearray(64 * 1024) for _ in range(4096)]  # 256 MiB in heap blocks (below mmap's threshold)
keep = bytearray(64 * 1024)  # above them: the heap's top stays in use, so free() cannot shrink it
del blocks
freed = memory_status().anon
trimmed = return_freed_memory() if sys.argv[1] == "trim" else None
print(freed, memory_status().anon, trimmed)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_return_freed_memory_gives_a_deleted_heap_back():
    """256 MiB freed inside the heap stay resident after ``del``; return_freed_memory hands them back
    to the system (in a fresh process: the test worker's own heap would blur the count)."""
    mib = 2**20
    out = {}
    for way in ("trim", "keep"):
        run = subprocess.run(
            [sys.executable, "-c", FREED_HEAP, way], capture_output=True, text=True, check=True
        )
        freed, after, trimmed = run.stdout.split()
        out[way] = (int(freed), int(after), trimmed)
    freed, after, trimmed = out["keep"]
    assert after > 200 * mib, "without the trim the freed blocks stay resident"
    freed, after, trimmed = out["trim"]
    assert freed > 200 * mib and freed - after > 200 * mib and trimmed == "True", out


def test_return_freed_memory_off_glibc_only_collects(monkeypatch):
    from sdaccel.core import processes

    def no_glibc(*args, **kwargs):
        raise OSError("no such library")

    monkeypatch.setattr(processes.ctypes, "CDLL", no_glibc)
    assert processes.return_freed_memory() is False
