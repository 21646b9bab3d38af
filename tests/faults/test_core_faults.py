"""Faults from outside a write, injected into sdaccel.core.staging's publishing of a folder: a
writer killed inside its staging folder or between the two renames of a replacement, two writers
of one folder at once, and a disk that fills up."""

import errno
import time

import pytest

from sdaccel.core import staging

WRITE = """
import sys, time
from pathlib import Path
from sdaccel.core.staging import staged_folder
dst, text, hold = Path(sys.argv[1] if len(sys.argv) > 1 else {dst!r}), {text!r}, {hold!r}
with staged_folder(dst) as stage:
    (stage / "weights.bin").write_bytes(text.encode() * 1000)
    (stage / "config.json").write_text(text)
    time.sleep(hold)
print("published")
"""


def writer(dst, text, hold=0.0):
    return WRITE.format(dst=str(dst), text=text, hold=hold)


def make_old(dst):
    dst.mkdir(parents=True)
    (dst / "weights.bin").write_bytes(b"old" * 1000)
    (dst / "config.json").write_text("old")


@pytest.mark.parametrize("point", ["staging.before-publish", "staging.between-renames"])
def test_a_writer_killed_mid_replacement_loses_nothing_and_the_next_one_cleans_up(tmp_path, fault_kit, point):
    dst = tmp_path / "export"
    make_old(dst)
    before = fault_kit.digest(dst) if point == "staging.before-publish" else None
    old_bytes = fault_kit.digest(dst)

    killed = fault_kit.run_python(writer(dst, "new"), f"{point}:kill")
    assert killed.returncode == -9, killed.stderr
    # what a reader finds: the old folder whole (before the renames), or the old folder renamed
    # aside with nothing in its place (between them): never a mix of old and new files
    if before is not None:
        assert fault_kit.digest(dst) == before
    else:
        assert not dst.exists()
    assert fault_kit.hidden_leftovers(tmp_path), "the kill left nothing behind: the fault was not injected"

    # the next writer puts back or removes what was left, says so, and publishes
    again = fault_kit.run_python(writer(dst, "new"))
    assert again.returncode == 0, again.stderr
    assert "interrupted write" in again.stderr
    assert fault_kit.hidden_leftovers(tmp_path) == []
    assert (dst / "config.json").read_text() == "new"
    assert old_bytes != fault_kit.digest(dst)


def test_a_killed_writer_leaves_the_old_folder_when_nobody_writes_again(tmp_path, fault_kit):
    """Between the renames the old folder is only aside: a reader-side repair puts it back."""
    dst = tmp_path / "export"
    make_old(dst)
    old = fault_kit.digest(dst)
    assert fault_kit.run_python(writer(dst, "new"), "staging.between-renames:kill").returncode == -9
    with staging.writer_lock(dst):
        staging.clear_leftovers(dst)
    assert fault_kit.digest(dst) == old
    assert fault_kit.hidden_leftovers(tmp_path) == []


def test_two_writers_at_once_take_turns_and_the_second_says_it_waits(tmp_path, fault_kit):
    import subprocess
    import sys

    dst = tmp_path / "export"
    code = writer(dst, "first", hold=3.0)
    first = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".export.staging-*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the first writer holds the lock once its staging folder exists
    assert list(tmp_path.glob(".export.staging-*")), "the first writer never started"
    second = fault_kit.run_python(writer(dst, "second"))
    assert first.wait(60) == 0
    assert second.returncode == 0, second.stderr
    assert "Waiting for another process that is writing export" in second.stderr
    assert (dst / "config.json").read_text() == "second"
    assert (dst / "weights.bin").read_bytes() == b"second" * 1000
    assert fault_kit.hidden_leftovers(tmp_path) == []


def test_the_lock_dies_with_its_holder(tmp_path, fault_kit):
    """A writer killed while it holds the lock does not block the next one: the lock is the
    kernel's, not the file's."""
    dst = tmp_path / "export"
    assert fault_kit.run_python(writer(dst, "new", hold=0.0), "staging.before-publish:kill").returncode == -9
    assert staging.lock_path(dst).exists()
    start = time.monotonic()
    with staging.staged_folder(dst) as stage:
        (stage / "config.json").write_text("after")
    assert time.monotonic() - start < 5
    assert (dst / "config.json").read_text() == "after"


def test_a_full_disk_mid_write_leaves_the_old_folder_and_no_staging(small_disk, fault_kit):
    dst = small_disk / "export"
    make_old(dst)
    old = fault_kit.digest(dst)
    with pytest.raises(OSError) as caught:
        with staging.staged_folder(dst) as stage:
            (stage / "weights.bin").write_bytes(b"x" * (8 * 2**20))  # twice the disk
    assert caught.value.errno == errno.ENOSPC
    assert fault_kit.digest(dst) == old
    assert fault_kit.hidden_leftovers(small_disk) == []


def test_a_write_that_cannot_fit_is_refused_before_it_starts(small_disk):
    with pytest.raises(OSError, match="Not enough free disk for the export.*Free some space") as caught:
        staging.require_free_space(small_disk, 64 * 2**20, "the export")
    assert caught.value.errno == errno.ENOSPC
    staging.require_free_space(small_disk, 2**20, "a small file")
    assert list(small_disk.iterdir()) == []


def test_an_injected_full_disk_fails_like_a_real_one(tmp_path, fault_kit):
    dst = tmp_path / "export"
    make_old(dst)
    old = fault_kit.digest(dst)
    child = fault_kit.run_python(writer(dst, "new"), "staging.before-publish:enospc")
    assert child.returncode == 1 and "No space left on device (fault injected" in child.stderr
    assert fault_kit.digest(dst) == old
    assert fault_kit.hidden_leftovers(tmp_path) == []
