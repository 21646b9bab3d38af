"""The memory watch of a run: only the processes that carry the run's marker count."""

from sdaccel.tools.workshop import memory_watch, run_files


def test_the_memory_watch_ignores_processes_of_other_runs(monkeypatch):
    import subprocess
    import sys

    env = {**__import__("os").environ, run_files.RUN_MARKER: "another-run"}
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], env=env)
    try:
        watch = memory_watch.MemoryWatch("this-run")
        watch.sample()
        assert watch.peaks == memory_watch.MemoryPeaks(samples=1)
        mine = memory_watch.MemoryWatch("another-run")
        mine.sample()
        assert mine.peaks.kernel_bytes > 0, "a marked child of this process is the kernel"
    finally:
        other.kill()
        other.wait()
