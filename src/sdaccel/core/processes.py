"""Run a function in a fresh Python process and measure its peak memory.

Quantizing, exporting or timing a large model in a child process means nothing stays resident
between two of them, the peak memory of each is measured on its own, and one that would exhaust
the machine is stopped at a limit instead (:func:`run_with_memory_limit`). Children are started
with the ``spawn`` method (a fresh interpreter), never ``fork``: a forked copy of a process that
has started JAX's or OpenVINO's threads can deadlock, and JAX warns about ``os.fork()``.

A child never outlives the run that started it: if the parent is interrupted (Ctrl-C, a notebook's
"interrupt kernel", an exception) it kills the child before re-raising, and if the parent dies
(killed, even with ``SIGKILL``) the child stops too (Linux: a parent-death signal; elsewhere, and as
a second guard, a thread that watches the parent's pid). Otherwise a stopped benchmark would leave
a child holding gigabytes and a core for as long as its row runs.

Used by the INT8 notebook and both benchmarks (``benchmarks/bench_openvino.py``,
``benchmarks/bench_jax_vs_torch.py``).
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil


@dataclass
class ChildRun:
    """What :func:`run_with_memory_limit` saw: the function's result (``None`` if it failed), the
    child's peak resident memory in bytes (all of it, and its anonymous part), the polled RSS
    ``samples``, and why it failed if it did.

    The two peaks differ by the file-backed pages the child mapped and touched, such as an IR's
    ``.bin`` read memory-mapped: they count as resident, but the kernel can drop and re-read them
    under memory pressure. The anonymous part (``RssAnon``: heap, compiled weights, activations)
    is what cannot be given back, so it is what the limit watches.
    """

    result: object = None
    peak_rss_bytes: int = 0
    peak_anon_bytes: int = 0
    seconds: float = 0.0
    ok: bool = False
    error: str | None = None
    samples: list[int] = field(default_factory=list, repr=False)

    @property
    def peak_rss_gb(self) -> float:
        return self.peak_rss_bytes / 2**30

    @property
    def peak_anon_gb(self) -> float:
        return self.peak_anon_bytes / 2**30


#: How often a child checks that its parent is alive, where no parent-death signal is available.
PARENT_POLL_S = 1.0


def _die_with_parent(parent_pid: int) -> None:
    """Stop this (child) process as soon as ``parent_pid`` is no longer its parent.

    On Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill it when the parent exits.
    A daemon thread checks ``os.getppid()`` every :data:`PARENT_POLL_S` seconds as well (the only
    guard elsewhere); the check right here covers a parent that died before either was set up.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the thread below still guards
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="sdaccel-parent-watch", daemon=True).start()


def _child_main(conn, fn, args, kwargs, address_space_bytes, parent_pid=None):
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    if address_space_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    try:
        result, error = fn(*args, **kwargs), None
    except BaseException as exc:  # reported to the parent, which decides
        result, error = None, f"{type(exc).__name__}: {exc}"
    conn.send((result, error, _peak_rss_bytes()))
    conn.close()


@dataclass(frozen=True)
class MemoryStatus:
    """A process's memory, in bytes, from one read of ``/proc/<pid>/status`` (:func:`memory_status`):
    ``peak`` its resident high-water mark (``VmHWM``; Linux updates these counters a few pages at a
    time, so two reads may differ by that), ``rss``
    its resident set now (``VmRSS``), ``anon`` the anonymous part of it (``RssAnon`` + ``RssShmem``:
    heap, weights copied in, activations; not the pages of memory-mapped files)."""

    peak: int
    rss: int
    anon: int


def memory_status(pid: int | str = "self") -> MemoryStatus | None:
    """:class:`MemoryStatus` of process ``pid`` (this one by default); ``None`` off Linux or for a
    process that has ended."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        kib = {k: int(fields[k].split()[0]) * 1024 for k in ("VmHWM", "VmRSS", "RssAnon", "RssShmem")}
    except (OSError, KeyError, ValueError):
        return None
    return MemoryStatus(peak=kib["VmHWM"], rss=kib["VmRSS"], anon=kib["RssAnon"] + kib["RssShmem"])


def anon_bytes(pid: int) -> int | None:
    """Anonymous resident memory of a process (``RssAnon`` + ``RssShmem``), ``None`` off Linux."""
    status = memory_status(pid)
    return None if status is None else status.anon


def return_freed_memory() -> bool:
    """Collect Python's garbage, then hand the free pages of the C heap back to the system.

    A model deleted with ``del`` is freed, but glibc keeps much of it in the process's heap for
    later allocations: after diffusers' float32 SDXL was deleted beside a JAX pipeline, 4.5 GiB
    stayed resident (anonymous) until ``malloc_trim`` gave it back. Only glibc has the call; the
    result is whether it gave memory back (``False`` on macOS, Windows or musl, where nothing is
    done beyond the collection)."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (Windows: no CDLL(None) at all)
        return False
    return bool(trim(0))


def _peak_rss_bytes() -> int:
    """Peak resident set of this process: ``VmHWM`` from ``/proc/self/status`` on Linux.

    Not ``ru_maxrss``: Linux carries it across ``exec``, so a child started by fork+exec (as
    ``spawn`` does) would report at least its parent's RSS at the fork. ``VmHWM`` belongs to the
    process's own address space and starts afresh at ``exec``.
    """
    status = memory_status()
    return status.peak if status is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_with_memory_limit(
    fn: Callable,
    *args,
    limit_gb: float | None = None,
    address_space_gb: float | None = None,
    poll_s: float = 0.05,
    timeout_s: float | None = None,
    **kwargs,
) -> ChildRun:
    """Run ``fn(*args, **kwargs)`` in a fresh (spawned) Python process and measure its peak memory.

    ``peak_rss_bytes`` is the child's own high-water mark (``VmHWM``, exact) when it finishes, or
    the largest RSS seen by polling it every ``poll_s`` seconds when it is killed;
    ``peak_anon_bytes`` is the largest anonymous RSS seen by polling (see :class:`ChildRun`).
    ``limit_gb`` is a watchdog on the anonymous RSS (the RSS where ``/proc`` does not tell): the
    child is killed as soon as it is seen above the limit, so a run that would exhaust the machine
    stops first (an allocation made between two polls can still overshoot briefly).
    ``address_space_gb`` additionally sets ``RLIMIT_AS`` in the child, a hard limit on virtual
    memory (allocations beyond it fail at once); leave generous headroom, since threads and
    allocators reserve far more address space than they touch.

    ``fn`` must be importable by name (a module-level function), as for any spawned process.
    """

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    address_space = int(address_space_gb * 2**30) if address_space_gb else 0
    process = context.Process(target=_child_main, args=(child, fn, args, kwargs, address_space, os.getpid()))
    start = time.perf_counter()
    try:
        _start_uninterrupted(process)
        child.close()
        run = _watch(process, parent, start, limit_gb, poll_s, timeout_s, psutil)
    except BaseException:  # interrupted (KeyboardInterrupt) or failed here: the child goes too
        if process.pid is not None and process.is_alive():
            process.kill()
        if process.pid is not None:
            process.join()
        raise
    return run


def _start_uninterrupted(process) -> None:
    """``process.start()`` with Ctrl-C held back until the child is started and tracked.

    A ``KeyboardInterrupt`` raised inside ``start()`` could leave a child that ``multiprocessing``
    already tracks but that this call never kills: the interpreter then waits for it at exit.
    Python runs signal handlers in the main thread only, so there the handler is swapped for one
    that notes the interrupt, which is raised as soon as ``start()`` has returned."""
    if threading.current_thread() is not threading.main_thread():
        process.start()
        return
    interrupted = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        process.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt


def _watch(process, parent, start, limit_gb, poll_s, timeout_s, psutil) -> ChildRun:
    """Poll ``process`` until it reports, dies, or is killed for its memory or time."""
    watched = psutil.Process(process.pid)
    run = ChildRun()
    limit = int(limit_gb * 2**30) if limit_gb else None
    message = None
    while process.is_alive() and message is None:
        try:
            rss = watched.memory_info().rss
        except psutil.NoSuchProcess:
            break
        anon = anon_bytes(process.pid)
        run.samples.append(rss)
        run.peak_rss_bytes = max(run.peak_rss_bytes, rss)
        run.peak_anon_bytes = max(run.peak_anon_bytes, anon or 0)
        watched_bytes, kind = (rss, "RSS") if anon is None else (anon, "anonymous RSS")
        if limit is not None and watched_bytes > limit:
            process.kill()
            run.error = f"killed: {kind} {watched_bytes / 2**30:.1f} GiB above the {limit_gb} GiB limit"
            break
        if timeout_s is not None and time.perf_counter() - start > timeout_s:
            process.kill()
            run.error = f"killed: still running after {timeout_s} s"
            break
        if parent.poll(poll_s):
            message = parent.recv()
    if message is None and run.error is None and parent.poll(1.0):
        message = parent.recv()
    process.join()
    run.seconds = time.perf_counter() - start
    if message is not None:
        run.result, error, maxrss = message
        run.peak_rss_bytes = max(run.peak_rss_bytes, maxrss)
        run.error = error
        run.ok = error is None
    elif run.error is None:
        run.error = f"child exited with code {process.exitcode} without a result"
    return run
