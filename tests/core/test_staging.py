"""sdaccel.core.staging: a folder is published whole or not at all, files are replaced atomically,
hard-linked originals are never written into, and an unwritable output folder is named before any
work."""

from __future__ import annotations

import json
import os

import pytest

from sdaccel.core import staging
from sdaccel.core.staging import (
    check_writable,
    link_tree,
    publish_folder,
    replace_json,
    replace_text,
    staged_folder,
)


def snapshot(folder) -> dict:
    """Every file and folder under ``folder`` with its content and modification time (ns)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def hidden(parent) -> list[str]:
    """What a publish may leave next to its destination: staging, set-aside and temporary files."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture
def existing(tmp_path):
    """A published folder with a file, a sub-folder, and an old modification time."""
    dst = tmp_path / "model"
    (dst / "unet").mkdir(parents=True)
    (dst / "model_index.json").write_text('{"old": true}')
    (dst / "unet" / "weights.bin").write_bytes(b"old weights")
    for path in (dst / "model_index.json", dst / "unet" / "weights.bin"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    return dst


# ----------------------------------------------------------------------------------------------
# check_writable
# ----------------------------------------------------------------------------------------------


def test_check_writable_returns_the_folder_and_leaves_nothing(tmp_path):
    assert check_writable(str(tmp_path)) == tmp_path
    nested = tmp_path / "a" / "b"
    assert check_writable(nested) == nested
    assert list(tmp_path.iterdir()) == []  # neither the folders nor the probe file were created


def test_check_writable_refuses_a_file_on_the_way(tmp_path):
    (tmp_path / "report.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"report.txt is a file, not a folder\. Choose another"):
        check_writable(tmp_path / "report.txt" / "out")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_writable(tmp_path / "report.txt")


def test_check_writable_names_the_folder_and_the_fix(tmp_path, monkeypatch):
    def refuse(**kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(staging.tempfile, "mkstemp", refuse)
    out = tmp_path / "out"
    with pytest.raises(PermissionError) as info:
        check_writable(out)
    message = str(info.value)
    assert message.startswith(f"Cannot write to {out} (Permission denied in {tmp_path})")
    assert "choose a writable output folder, or make it writable" in message
    assert isinstance(info.value.__cause__, PermissionError)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_check_writable_refuses_a_read_only_folder(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(PermissionError, match=f"Cannot write to {locked / 'out'}"):
            check_writable(locked / "out")
    finally:
        locked.chmod(0o755)


# ----------------------------------------------------------------------------------------------
# staged_folder and publish_folder
# ----------------------------------------------------------------------------------------------


def test_staged_folder_publishes_a_new_folder(tmp_path):
    dst = tmp_path / "new" / "model"  # its parent is created too
    with staged_folder(dst) as stage:
        assert stage.parent == dst.parent and stage.name.startswith(".model.staging-")
        assert stage.is_dir() and list(stage.iterdir()) == []
        assert not dst.exists()  # nothing at the destination until the block ends
        (stage / "unet").mkdir()
        (stage / "unet" / "weights.bin").write_bytes(b"new")
    assert (dst / "unet" / "weights.bin").read_bytes() == b"new"
    assert hidden(dst.parent) == []


def test_staged_folder_replaces_an_existing_folder_whole(existing):
    with staged_folder(existing) as stage:
        (stage / "model_index.json").write_text('{"new": true}')
        assert (existing / "unet").is_dir()  # the old folder stays readable meanwhile
    assert sorted(p.name for p in existing.iterdir()) == ["model_index.json"]  # no old file kept
    assert (existing / "model_index.json").read_text() == '{"new": true}'
    assert hidden(existing.parent) == []  # the old folder, set aside, is deleted


def test_staged_folder_replaces_an_empty_folder(tmp_path):
    dst = tmp_path / "model"
    dst.mkdir()
    with staged_folder(dst) as stage:
        (stage / "a.txt").write_text("a")
    assert [p.name for p in dst.iterdir()] == ["a.txt"] and hidden(tmp_path) == []


@pytest.mark.parametrize("error", [RuntimeError("export failed"), KeyboardInterrupt()])
def test_an_exception_in_the_block_leaves_the_destination_as_it_was(existing, error):
    before = snapshot(existing)
    with pytest.raises(type(error)):
        with staged_folder(existing) as stage:
            (stage / "model_index.json").write_text("half")
            raise error
    assert snapshot(existing) == before  # the same files, contents and modification times
    assert hidden(existing.parent) == []  # the staging folder is gone


def test_an_exception_in_the_block_creates_no_destination(tmp_path):
    with pytest.raises(RuntimeError):
        with staged_folder(tmp_path / "model") as stage:
            (stage / "a.txt").write_text("a")
            raise RuntimeError("export failed")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rename_puts_the_old_folder_back(existing, monkeypatch):
    before = snapshot(existing)
    real_rename = os.rename

    def rename(src, dst):
        if ".staging-" in str(src):
            raise OSError(18, "Invalid cross-device link")
        real_rename(src, dst)

    monkeypatch.setattr(staging.os, "rename", rename)
    with pytest.raises(OSError, match="cross-device"):
        with staged_folder(existing) as stage:
            (stage / "model_index.json").write_text("new")
    assert snapshot(existing) == before
    assert hidden(existing.parent) == []  # neither the staging folder nor the set-aside one is left


def test_staged_folder_refuses_an_unwritable_parent_before_the_block(tmp_path):
    (tmp_path / "file").write_text("x")
    ran = []
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        with staged_folder(tmp_path / "file" / "model"):
            ran.append(True)
    assert ran == [] and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_publish_folder_renames_a_finished_stage(tmp_path, existing):
    stage = tmp_path / ".stage"
    stage.mkdir()
    (stage / "b.txt").write_text("b")
    assert publish_folder(stage, existing) == existing
    assert [p.name for p in existing.iterdir()] == ["b.txt"] and not stage.exists()
    assert hidden(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# link_tree
# ----------------------------------------------------------------------------------------------


def test_link_tree_links_every_entry_but_the_skipped(existing, tmp_path):
    (existing / "vae").mkdir()
    (existing / "vae" / "weights.bin").write_bytes(b"vae")
    dst = tmp_path / "next"
    dst.mkdir()
    link_tree(existing, dst, skip=["vae"])
    assert sorted(p.name for p in dst.iterdir()) == ["model_index.json", "unet"]
    for name in ("model_index.json", "unet/weights.bin"):
        assert os.path.samefile(existing / name, dst / name)  # hard links: no copy of the weights


def test_link_tree_copies_where_there_are_no_hard_links(existing, tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(staging.os, "link", no_links)
    dst = tmp_path / "next"
    dst.mkdir()
    link_tree(existing, dst)
    assert snapshot(dst) == snapshot(existing)  # copies keep the content and modification times
    assert not os.path.samefile(existing / "unet" / "weights.bin", dst / "unet" / "weights.bin")


def test_replacing_a_linked_file_leaves_the_original_alone(existing, tmp_path):
    dst = tmp_path / "next"
    dst.mkdir()
    link_tree(existing, dst)
    replace_text(dst / "model_index.json", '{"new": true}')
    assert (existing / "model_index.json").read_text() == '{"old": true}'
    assert (dst / "model_index.json").read_text() == '{"new": true}'


# ----------------------------------------------------------------------------------------------
# replace_text and replace_json
# ----------------------------------------------------------------------------------------------


def test_replace_text_writes_new_and_existing_files(tmp_path):
    path = tmp_path / "notes.md"
    replace_text(str(path), "first")
    assert path.read_text() == "first"
    replace_text(path, "second")
    assert path.read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.md"]  # no temporary file left


def test_a_failed_replace_keeps_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "notes.md"
    path.write_text("old")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(staging.os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        replace_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.md"]  # the temporary file is deleted


def test_replace_text_writes_a_temporary_file_then_renames_it(tmp_path, monkeypatch):
    path = tmp_path / "notes.md"
    path.write_text("old")
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        seen.append((src.name, open(src).read(), path.read_text()))  # the old text until the rename
        real_replace(src, dst)

    monkeypatch.setattr(staging.os, "replace", replace)
    replace_text(path, "new")
    [(tmp_name, tmp_text, during)] = seen
    assert tmp_name.startswith(".notes.md.") and tmp_name.endswith(".tmp")
    assert tmp_text == "new" and during == "old" and path.read_text() == "new"


def test_replace_json_writes_indented_json(tmp_path):
    path = tmp_path / "results.json"
    data = {"variant": "INT8", "s_per_step": 1.58, "steps": [1, 2]}
    replace_json(path, data)
    assert json.loads(path.read_text()) == data
    assert path.read_text() == json.dumps(data, indent=2)


def test_update_json_keeps_every_entry_of_two_writers_at_once(tmp_path):
    """Two processes that each add 15 entries to one results file, started together, each change
    taking 20 ms between its read and its write: all 30 entries stay. (With ``writer_lock`` taken
    out, the same run keeps about half: each write drops what the other wrote meanwhile.)"""
    import subprocess
    import sys
    import time

    out, go = tmp_path / "results.json", tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "from sdaccel.core.staging import update_json\n"
        "while not os.path.exists(sys.argv[3]):\n"
        "    time.sleep(0.01)\n"
        "def add(data, key):\n"
        "    time.sleep(0.02)\n"
        "    data['models'][key] = 1\n"
        "for i in range(15):\n"
        "    update_json(sys.argv[1], lambda d: add(d, f'{sys.argv[2]}{i}'), {'models': {}})\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", code, str(out), name, str(go)]) for name in "ab"]
    time.sleep(3)  # both started and waiting
    go.touch()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    models = json.loads(out.read_text())["models"]
    assert sorted(models) == sorted(f"{n}{i}" for n in "ab" for i in range(15))


def test_update_json_leaves_the_file_as_it_was_when_the_change_fails(tmp_path):
    out = tmp_path / "results.json"
    staging.update_json(out, lambda d: d.update(kept=1))

    def fail(data):
        data["half"] = 1
        raise ValueError("stopped")

    with pytest.raises(ValueError, match="stopped"):
        staging.update_json(out, fail)
    assert json.loads(out.read_text()) == {"kept": 1}


def test_the_disk_of_a_folder_not_made_yet_is_its_nearest_existing_parent(tmp_path):
    assert staging.nearest_existing(tmp_path / "a" / "b") == tmp_path
    assert staging.free_bytes(tmp_path / "a" / "b") == staging.free_bytes(tmp_path) > 0
