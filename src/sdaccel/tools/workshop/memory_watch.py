"""Wall time and peak memory of each notebook run: its kernel and every process the kernel starts
(:class:`MemoryWatch`, :class:`MemoryPeaks`), and the cells during which the run held the most
(:func:`cell_peaks`)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import psutil

from sdaccel.core.processes import MemoryStatus, memory_status
from sdaccel.tools.workshop.run_files import RUN_MARKER


@dataclass
class MemoryPeaks:
    """Peak resident memory of one notebook run, in bytes.

    ``kernel_bytes``: the kernel's own high-water mark (``VmHWM``). ``largest_child_bytes``: the
    largest high-water mark of a process the kernel started (a quantization or benchmark child).
    ``tree_bytes``: the largest sum of the current RSS of the kernel and its processes at one
    sample (shared pages counted once per process, so an upper bound). ``children``: processes seen;
    ``samples``: how many times the tree was read.

    The RSS counts the pages of memory-mapped files once per mapping: OpenVINO maps an IR's weights
    for each model it reads, so a kernel that holds two pipelines of one export can report more RSS
    than the machine has. The ``*_anon_bytes`` peaks are the anonymous part (``RssAnon`` +
    ``RssShmem``: heap, compiled weights, activations), the memory that must fit in RAM, sampled
    (a spike shorter than the interval can be missed)."""

    kernel_bytes: int = 0
    largest_child_bytes: int = 0
    tree_bytes: int = 0
    children: int = 0
    samples: int = 0
    kernel_anon_bytes: int = 0
    largest_child_anon_bytes: int = 0
    tree_anon_bytes: int = 0


class MemoryWatch:
    """``with MemoryWatch(run_id) as watch:`` read, every ``interval`` seconds in a thread, the
    processes below this one that carry ``RUN_MARKER=run_id`` (the kernel, which is this process's
    child, and whatever it starts); :attr:`peaks` holds the result.

    Sampled rather than read from ``resource.getrusage(RUSAGE_CHILDREN)`` after the kernel exits:
    ``ru_maxrss`` of the children is one maximum over every child this runner ever reaped (the
    notebooks before, the guard), so it cannot be told per notebook, nor kernel from child; it
    counts a grandchild only if its parent waited for it; and Linux carries ``ru_maxrss`` across
    ``exec``, so the kernel would report at least the runner's RSS at the fork. Each process's
    ``VmHWM`` is exact when read, so a sample misses only what a process gained in its last
    ``interval`` before it ended; ``tree_bytes`` is a sampled sum."""

    def __init__(self, run_id: str, interval: float = 0.5):
        self.run_id, self.interval = run_id, interval
        self.peaks = MemoryPeaks()
        #: ``(time.time(), anonymous bytes of the whole tree)`` at each sample: what :func:`cell_peaks`
        #: lays over the cells' start and end times
        self.timeline: list[tuple[float, int]] = []
        self._marked: dict[tuple[int, float], bool] = {}
        self._seen: set[tuple[int, float]] = set()
        self._stop = None
        self._thread = None

    def _is_marked(self, proc) -> bool:

        try:
            key = (proc.pid, proc.create_time())
            if key not in self._marked:
                self._marked[key] = proc.environ().get(RUN_MARKER) == self.run_id
            return self._marked[key]
        except psutil.Error:
            return False

    def sample(self) -> None:
        """Read the run's processes once and raise the peaks."""

        me, tree, tree_anon, peaks = os.getpid(), 0, 0, self.peaks
        for proc in psutil.Process().children(recursive=True):
            if not self._is_marked(proc):
                continue
            try:
                parent, key = proc.ppid(), (proc.pid, proc.create_time())
                status = memory_status(proc.pid)  # one read of /proc/<pid>/status
                if status is None:  # off Linux: the current RSS for the peak, and no anonymous part
                    rss = proc.memory_info().rss
                    status = MemoryStatus(peak=rss, rss=rss, anon=0)
            except psutil.Error:
                continue
            peak, anon = status.peak, status.anon
            tree, tree_anon = tree + status.rss, tree_anon + anon
            if parent == me:
                peaks.kernel_bytes = max(peaks.kernel_bytes, peak)
                peaks.kernel_anon_bytes = max(peaks.kernel_anon_bytes, anon)
            else:
                self._seen.add(key)
                peaks.largest_child_bytes = max(peaks.largest_child_bytes, peak)
                peaks.largest_child_anon_bytes = max(peaks.largest_child_anon_bytes, anon)
        peaks.tree_bytes = max(peaks.tree_bytes, tree)
        peaks.tree_anon_bytes = max(peaks.tree_anon_bytes, tree_anon)
        peaks.children = len(self._seen)
        peaks.samples += 1
        self.timeline.append((time.time(), tree_anon))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> MemoryWatch:

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="notebook-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


#: How many cells a summary row names: those during which the run held the most memory.
PEAK_CELLS = 3


def cell_peaks(nb: dict, timeline: list[tuple[float, int]], top: int = PEAK_CELLS) -> list[dict]:
    """The ``top`` code cells of the executed copy ``nb`` during which the run's processes held the
    most anonymous memory, the most first: ``{"cell": its execution count (Jupyter's "In [n]"),
    "line": its first line of code, "tree_anon_gib": the largest sample of :class:`MemoryWatch`'s
    ``timeline`` between the cell's start and end}``. papermill writes each cell's start and end
    into its metadata; a cell shorter than the sampling interval may have no sample, and is left
    out. The peak of a notebook says how much it needs; these say which of its steps to shrink."""

    rows = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("papermill", {})
        if cell.get("cell_type") != "code" or not (meta.get("start_time") and meta.get("end_time")):
            continue
        start, end = (datetime.fromisoformat(meta[key]).timestamp() for key in ("start_time", "end_time"))
        held = [anon for t, anon in timeline if start <= t <= end]
        if held:
            rows.append(
                {
                    "cell": cell.get("execution_count"),
                    "line": _first_code_line(cell),
                    "tree_anon_gib": round(max(held) / 2**30, 2),
                }
            )
    return sorted(rows, key=lambda row: row["tree_anon_gib"], reverse=True)[:top]


def _first_code_line(cell: dict, width: int = 60) -> str:
    source = cell.get("source", "")
    lines = (source if isinstance(source, str) else "".join(source)).splitlines()
    code = next((line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")), "")
    return code if len(code) <= width else code[: width - 3] + "..."
