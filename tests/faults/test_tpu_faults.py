"""Faults from outside a call, injected into the JAX/TPU track's caches and plans: a TPU plan run
killed or interrupted between its cases, before its files are published or in the middle of
writing one; plan files that lie (truncated, of another layout, JAX or libtpu, of another case);
two processes writing one plan at once; and JAX's persistent compilation cache with an entry that a
full disk cut short, a truncated one, and two processes filling it at once.

Most plan runs here compile nothing: the child replaces
:func:`sdaccel.tpu.plan_compile.compile_case` (as the plan and the command line import it) by a
stand-in that returns a recorded row (:data:`FAKE`), so that what is tested, the writing, the
reusing and the locking of ``python -m sdaccel.tools.measure.tpu_plan``, costs a process start.
One case compiles for real (the tiny SDXL checkpoint, 16x16, one step: about ten seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from sdaccel.core import staging
from sdaccel.tools.measure import tpu_plan as plan_command
from sdaccel.tpu import compilation, plan_compile, plan_files, plan_floor
from sdaccel.tpu import plan as tpu_plan

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "benchmarks" / "results" / "tpu_plan_v5e-1_b4.json"

#: A stand-in for ``plan.compile_case``: a recorded row with the case's own fields. It says
#: "compiled batch N" when called and, when ``GO`` names a file, waits for it: a compile that lasts
#: until the test says.
FAKE = f"""
import dataclasses, json, time
from pathlib import Path
from sdaccel.tools.measure import tpu_plan as plan_command
from sdaccel.tpu import plan, plan_compile
TEMPLATE_ROW = json.loads(Path({str(TEMPLATE)!r}).read_text())["rows"][0]
GO = None

def fake_compile(case, source=plan_compile.DEFAULT_CONFIG, unet_flops=None):
    print(f"compiled batch {{case.batch}}", flush=True)
    deadline = time.monotonic() + 120
    while GO and not Path(GO).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {{**TEMPLATE_ROW, **dataclasses.asdict(case), "config": str(source)}}, None
"""

#: What a child runs first: the stand-in in place of the compile.
CHILD = FAKE + "\nplan.compile_case = plan_command.compile_case = fake_compile\n"


def fake_namespace() -> dict:
    namespace: dict = {}
    exec(FAKE, namespace)  # the same stand-in as the children's (not put in place here)
    return namespace


def plan_argv(out: Path, batches=(1, 2)) -> list[str]:
    return ["--config", "tiny", "--topology", "v5e-1", "--attention", "xla", "--out", str(out)] + [
        "--batch",
        *map(str, batches),
    ]


def run_plan(argv, go: Path | None = None) -> str:
    """A child's code: the plan's command line with the stand-in compile (waiting for ``go``)."""
    return CHILD + f"\nGO = {None if go is None else str(go)!r}\nplan_command.main({argv!r})\n"


def clean_rows(argv) -> list[dict]:
    """What a run on a clean machine writes: every case's stand-in row with its key."""
    fake = fake_namespace()["fake_compile"]
    args = plan_command.parse_args(argv)
    rows = []
    for case in plan_command.cases(args):
        row, _ = fake(case, args.config)
        rows.append({**row, "plan_key": plan_files.plan_key(case, args.config)})
    return rows


def make_old_plan(out: Path) -> dict:
    """The plan file of an earlier command (batch 4 only), as the plan writes it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    data = plan_files.as_stored(plan_files.plan_document(clean_rows(plan_argv(out, (4,))), "an earlier run"))
    out.write_text(json.dumps(data))
    out.with_suffix(".md").write_text("# the earlier table\n")
    return data


@pytest.fixture
def in_process_plan(monkeypatch):
    """The next run, here: ``plan_command.main`` (or ``plan.predict``) with the stand-in compile;
    returns the batches it compiled."""
    compiled: list[int] = []
    fake = fake_namespace()["fake_compile"]

    def counting(case, source=plan_compile.DEFAULT_CONFIG, unet_flops=None):
        compiled.append(case.batch)
        return fake(case, source, unet_flops)

    monkeypatch.setattr(tpu_plan, "compile_case", counting)
    monkeypatch.setattr(plan_command, "compile_case", counting)
    return compiled


# ----------------------------------------------------------------------------------------------
# 1 and 4. A plan run killed or interrupted
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "journaled", "leftover"),
    [
        ("plan.case-compiled:kill", 0, None),  # the first case compiled, its row not yet saved
        ("plan.row-saved:kill", 1, None),  # between the two cases
        ("plan.row-saved:interrupt", 1, None),  # Ctrl-C between the two cases
        ("plan.partial-written:kill", 2, ".plan.md."),  # inside the first file's write
        ("plan.partial-written#2:kill", 2, ".plan.json."),  # the table published, the plan not yet
    ],
)
def test_a_plan_run_stopped_part_way_keeps_the_old_plan_and_the_next_run_reuses_its_rows(
    tmp_path, fault_kit, in_process_plan, capsys, fault, journaled, leftover
):
    out = tmp_path / "plan.json"
    old = make_old_plan(out)
    before = fault_kit.digest(tmp_path)
    argv = plan_argv(out)

    stopped = fault_kit.run_python(run_plan(argv), fault)
    if fault.endswith(":kill"):
        assert stopped.returncode == -9, stopped.stderr[-2000:]
    else:
        assert stopped.returncode != 0 and "Interrupted" in stopped.stderr, stopped.stderr[-2000:]
        assert "the same command reuses" in stopped.stderr
    assert fault_kit.wait_for_group_to_end(stopped.pgid) == []
    # what a reader finds: the old plan whole (the table may already be the new one)
    assert json.loads(out.read_text()) == old
    after = fault_kit.digest(tmp_path)
    new_already = {"plan.md"} if fault == "plan.partial-written#2:kill" else set()  # the table
    assert {n: after.get(n) for n in before if n not in new_already} == {
        n: d for n, d in before.items() if n not in new_already
    }
    hidden = fault_kit.hidden_leftovers(tmp_path)
    journal = [h for h in hidden if h.endswith(".rows")]
    assert len(journal) == (1 if journaled else 0), hidden
    if leftover:
        assert any(h.startswith(leftover) and h.endswith(".partial") for h in hidden), hidden

    # the next run: says what it cleared, compiles only what was not finished, publishes
    rows = plan_command.main(argv)
    err = capsys.readouterr().err
    assert in_process_plan == [1, 2][journaled:]
    if journaled:
        assert f"Reusing {journaled} finished row(s) of an interrupted run" in err
    if leftover:
        assert "left by an interrupted write" in err
    assert fault_kit.hidden_leftovers(tmp_path) == []
    assert json.loads(out.read_text())["rows"] == rows == clean_rows(argv)
    assert "| v5e-1 | 1 | xla | 2 |" in out.with_suffix(".md").read_text()


def test_a_real_plan_killed_before_publishing_is_finished_by_the_next_run_without_compiling(
    tmp_path, fault_kit, monkeypatch
):
    """The real compile of one case (the tiny SDXL checkpoint for a v5e-1): its row survives the
    kill, and the next run publishes it without compiling again."""
    out = tmp_path / "plan.json"
    argv = [
        "--config",
        str(REPO / "checkpoints" / "tiny-shapes-sdxl"),
        "--topology",
        "v5e-1",
        "--attention",
        "xla",
        "--batch",
        "1",
        "--height",
        "16",
        "--width",
        "16",
        "--steps",
        "1",
        "--out",
        str(out),
    ]
    killed = fault_kit.run_python(
        f"from sdaccel.tools.measure import tpu_plan as plan_command; plan_command.main({argv!r})",
        "plan.before-publish:kill",
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert fault_kit.wait_for_group_to_end(killed.pgid) == []
    assert not out.exists()
    (journal,) = tmp_path.glob(".plan.json.rows")
    (saved,) = [json.loads(line) for line in journal.read_text().splitlines()]

    def must_not_compile(*args, **kwargs):
        raise AssertionError("the finished row was compiled again")

    monkeypatch.setattr(plan_command, "compile_case", must_not_compile)
    (row,) = plan_command.main(argv)
    assert row == saved and row["fits"] and row["hbm_bytes"]["argument"] > 0
    assert json.loads(out.read_text())["rows"] == [saved]
    assert fault_kit.hidden_leftovers(tmp_path) == []


def test_a_killed_predict_leaves_no_file_and_the_next_call_clears_its_leftover(
    tmp_path, fault_kit, in_process_plan, capsys
):
    cache = tmp_path / "tpu-plan"
    code = CHILD + f"\nplan.predict('tiny', 'v5e-1', batch=2, steps=3, cache_dir={str(cache)!r})\n"
    killed = fault_kit.run_python(code, "plan.partial-written:kill")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert list(cache.glob("*.json")) == []
    assert [p.name.endswith(".partial") for p in cache.iterdir()] == [True]

    row = tpu_plan.predict("tiny", "v5e-1", batch=2, steps=3, cache_dir=cache)
    assert "left by an interrupted write" in capsys.readouterr().err
    assert in_process_plan == [2] and "cached" not in row
    assert fault_kit.hidden_leftovers(cache) == [] and len(list(cache.glob("*.json"))) == 1
    assert tpu_plan.predict("tiny", "v5e-1", batch=2, steps=3, cache_dir=cache) == {**row, "cached": True}


# ----------------------------------------------------------------------------------------------
# 2. Plan files that lie
# ----------------------------------------------------------------------------------------------


def predict_b2(cache):
    return tpu_plan.predict("tiny", "v5e-1", batch=2, steps=3, cache_dir=cache)


def one_line(text: str, *words: str) -> str:
    (line,) = [line for line in text.splitlines() if all(w in line for w in words)]
    return line


@pytest.mark.parametrize("lie", ["truncated", "old layout", "another libtpu", "another case"])
def test_a_cached_plan_that_lies_is_compiled_again_and_replaced(tmp_path, in_process_plan, capsys, lie):
    cache = tmp_path / "tpu-plan"
    good = predict_b2(cache)
    (path,) = cache.glob("*.json")
    data = json.loads(path.read_text())
    other = tpu_plan.predict("tiny", "v5e-1", batch=1, steps=3, cache_dir=cache)
    assert in_process_plan == [2, 1]
    capsys.readouterr()
    if lie == "truncated":
        path.write_text(path.read_text()[:100])
    elif lie == "old layout":
        path.write_text(json.dumps(data["rows"][0]))  # a bare row, as the first plans kept them
    elif lie == "another libtpu":
        path.write_text(json.dumps({**data, "environment": {**data["environment"], "libtpu": "0.0.1"}}))
    else:  # the plan of batch 1 under batch 2's name
        path.write_text(json.dumps({**data, "rows": [other]}))

    row = predict_b2(cache)
    line = one_line(capsys.readouterr().err, str(path))
    assert "compiled again" in line and ("0.0.1" in line if lie == "another libtpu" else True)
    assert in_process_plan == [2, 1, 2] and row == good and row["batch"] == 2
    assert predict_b2(cache) == {**good, "cached": True}  # the file is whole again
    assert in_process_plan == [2, 1, 2]


@pytest.mark.parametrize("lie", ["truncated", "another jax"])
def test_a_plan_file_that_lies_is_not_reused_by_the_next_run(tmp_path, in_process_plan, capsys, lie):
    out = tmp_path / "plan.json"
    argv = plan_argv(out)
    plan_command.main(argv)
    assert in_process_plan == [1, 2]
    text = out.read_text()
    if lie == "truncated":
        out.write_text(text[: len(text) // 2])
    else:
        data = json.loads(text)
        out.write_text(json.dumps({**data, "environment": {**data["environment"], "jax": "0.4.1"}}))
    capsys.readouterr()
    rows = plan_command.main(argv)
    line = one_line(capsys.readouterr().err, str(out))
    assert "compiled again" in line and ("0.4.1" in line if lie == "another jax" else "not whole" in line)
    assert in_process_plan == [1, 2, 1, 2] and rows == clean_rows(argv)
    plan_command.main(argv)  # whole again: reused
    assert in_process_plan == [1, 2, 1, 2]
    plan_command.main([*argv, "--recompile"])
    assert in_process_plan == [1, 2, 1, 2, 1, 2]


def test_reading_the_flops_of_a_broken_plan_file_names_the_file_and_the_fix(tmp_path):
    torn = tmp_path / "tpu_plan_torn.json"
    torn.write_text(TEMPLATE.read_text()[:500])
    with pytest.raises(
        plan_files.PlanFileError, match=r"tpu_plan_torn.json is not whole JSON.*make it again"
    ):
        plan_floor.unet_row_flops([TEMPLATE, torn])
    alien = tmp_path / "tpu_plan_alien.json"
    alien.write_text(json.dumps({"rows": [{"flops": {"unet_call": 1.0}}]}))
    with pytest.raises(plan_files.PlanFileError, match=r"tpu_plan_alien.json.*lacks 'global_batch'"):
        plan_floor.unet_row_flops([alien])


# ----------------------------------------------------------------------------------------------
# 3. Two at once
# ----------------------------------------------------------------------------------------------


def start(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("SDACCEL_FAULT", None)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(stream, text: str) -> None:
    for line in stream:
        if text in line:
            return
    pytest.fail(f"the process ended without saying {text!r}")


def one_after_the_other(first_code: str, second_code: str, go: Path, compiling: str):
    """Start the first process and let it compile (``compiling`` printed, the lock held) until
    the second says that it waits; then let the first go. Returns both, ended:
    ``[(returncode, stdout, stderr), ...]``."""
    first = start(first_code)
    second = None
    try:
        wait_for_line(first.stdout, compiling)
        second = start(second_code)
        wait_for_line(second.stderr, "Waiting for another process that is writing")
        go.touch()
        ended = []
        for proc in (first, second):
            out, err = proc.communicate(120)
            ended.append((proc.returncode, out, err))
        return ended
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()


def test_two_plan_runs_of_one_file_take_turns_and_the_second_reuses_the_first_rows(tmp_path, fault_kit):
    out = tmp_path / "plan.json"
    argv, go = plan_argv(out), tmp_path / "go"
    (first, second) = one_after_the_other(run_plan(argv, go), run_plan(argv), go, "compiled batch 1")
    assert first[0] == 0 and second[0] == 0, (first[2][-2000:], second[2][-2000:])
    assert "compiled batch" not in second[1]  # every row came from the first
    assert "Reusing 2 row(s) of" in second[2]
    assert json.loads(out.read_text())["rows"] == clean_rows(argv)
    assert fault_kit.hidden_leftovers(tmp_path) == []


def test_two_kernels_predicting_one_plan_compile_it_once(tmp_path, fault_kit):
    cache, go = tmp_path / "tpu-plan", tmp_path / "go"
    call = f"row = plan.predict('tiny', 'v5e-1', batch=2, steps=3, cache_dir={str(cache)!r})\n"
    call += "print('cached' if row.get('cached') else 'fresh', row['batch'])\n"
    first_code = CHILD + f"\nGO = {str(go)!r}\n" + call
    (first, second) = one_after_the_other(first_code, CHILD + call, go, "compiled batch 2")
    assert first[0] == 0 and second[0] == 0, (first[2][-2000:], second[2][-2000:])
    assert first[1].split()[-2:] == ["fresh", "2"] and second[1].split() == ["cached", "2"]
    assert len(list(cache.glob("*.json"))) == 1 and fault_kit.hidden_leftovers(cache) == []


# ----------------------------------------------------------------------------------------------
# JAX's persistent compilation cache
# ----------------------------------------------------------------------------------------------

#: A child that enables the cache in the folder argv[1] (argv[2] == "jax": JAX's own settings,
#: as ``enable_compilation_cache`` makes them, without its check of the entries), compiles and runs
#: a small function, and prints the cache's hits and misses and JAX's warnings as JSON.
CACHE_USER = """
import json, sys, warnings
import jax, jax.numpy as jnp
from sdaccel.tpu import compilation
if sys.argv[2:] == ["jax"]:
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
else:
    compilation.enable_compilation_cache(sys.argv[1])
with compilation.count_cache_events() as events, warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fn, spec = compilation.probe_program(size=64, depth=4)
    value = float(jax.jit(fn)(jnp.ones(spec.shape, spec.dtype)))
print(json.dumps({"value": value, "hits": events.hits, "misses": events.misses,
                  "warnings": [str(w.message) for w in caught]}))
"""


def use_cache(fault_kit, folder: Path, *how: str) -> dict:
    code = f"import sys; sys.argv[1:] = {[str(folder), *how]!r}\n" + CACHE_USER
    child = fault_kit.run_python(code)
    assert child.returncode == 0, child.stderr[-3000:]
    return {**json.loads(child.stdout.strip().splitlines()[-1]), "stderr": child.stderr}


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*-cache"))


def age(paths, seconds: float = 3600.0) -> None:
    """Date the files ``seconds`` back: the cut entries of a writer that stopped long ago."""
    for p in paths:
        os.utime(p, (time.time() - seconds, time.time() - seconds))


def test_a_truncated_cache_entry_is_removed_and_its_program_stored_again(tmp_path, fault_kit):
    folder = tmp_path / "jax-cache"
    first = use_cache(fault_kit, folder)
    assert first["misses"] >= 1 and first["hits"] == 0 and first["warnings"] == []
    made = entries(folder)
    for p in made:  # what a writer killed in the middle of JAX's write leaves
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    age(made)
    cut = fault_kit.digest(folder)

    # JAX alone: it warns, compiles again, and leaves the cut entries as they are, for good
    alone = use_cache(fault_kit, folder, "jax")
    assert alone["value"] == first["value"] and alone["hits"] == 0
    assert [w for w in alone["warnings"] if "Error reading persistent compilation cache" in w]
    assert fault_kit.digest(folder) == cut

    second = use_cache(fault_kit, folder)
    assert second["value"] == first["value"]
    assert (
        f"Removed {len(made)} unreadable entries of JAX's compilation cache in {folder}" in second["stderr"]
    )
    assert second["warnings"] == [] and second["misses"] == first["misses"]
    third = use_cache(fault_kit, folder)
    assert third["hits"] == first["misses"] and third["misses"] == 0 and third["warnings"] == []
    assert third["value"] == first["value"]


def test_a_full_disk_while_jax_writes_the_cache_does_not_spoil_the_next_process(small_disk, fault_kit):
    folder = small_disk / "jax-cache"
    filler = small_disk / "filler"
    free = staging.free_bytes(small_disk)
    filler.write_bytes(b"x" * (free - 4096))  # a page left: JAX's entries do not fit
    full = use_cache(fault_kit, folder)
    assert any("No space left on device" in w for w in full["warnings"]), full["warnings"]
    cut = entries(folder)
    assert cut, "the full disk left no entry behind: the fault was not injected"
    filler.unlink()
    age(cut)

    healed = use_cache(fault_kit, folder)
    assert "unreadable entr" in healed["stderr"] and "of JAX's compilation cache" in healed["stderr"]
    assert healed["warnings"] == [] and healed["value"] == full["value"]
    again = use_cache(fault_kit, folder)
    assert again["misses"] == 0 and again["hits"] >= 1 and again["warnings"] == []


def test_two_processes_filling_one_cache_at_once_both_work_and_a_third_reads_it(tmp_path, fault_kit):
    """JAX writes each entry in place (no temporary file and rename), after checking that it is
    not there yet: two processes that compile one program at once may both write it. Both work,
    and what they leave is read back whole."""
    folder = tmp_path / "jax-cache"
    both = [start(CACHE_USER, str(folder)) for _ in range(2)]
    results = []
    for proc in both:
        out, err = proc.communicate(120)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["value"] == results[1]["value"]
    assert all(not any("Error writing" in w for w in r["warnings"]) for r in results)
    third = use_cache(fault_kit, folder)
    assert third["misses"] == 0 and third["hits"] >= 1 and third["warnings"] == []
    assert [p.name for p in folder.iterdir() if not p.name.endswith("-cache")] in (
        [],
        [".sdaccel-checked.json"],
    )


def test_only_unreadable_entries_that_nobody_is_writing_are_removed(tmp_path, capsys):
    folder = tmp_path / "jax-cache"
    folder.mkdir()
    whole = zlib.compress(b"an executable" * 1000)
    (folder / "jit_a-1-cache").write_bytes(whole)
    (folder / "jit_b-2-cache").write_bytes(whole[: len(whole) // 2])  # cut
    (folder / "jit_c-3-cache").write_bytes(b"")  # created, nothing written
    flipped = bytearray(whole)
    flipped[len(flipped) // 2] ^= 0xFF
    (folder / "jit_d-4-cache").write_bytes(bytes(flipped))  # a damaged byte
    (folder / "jit_e-5-cache").write_bytes(whole[:10])  # cut, but its writer may still be at it
    age([folder / f"jit_{n}-cache" for n in ("a-1", "b-2", "c-3", "d-4")])

    removed = compilation.drop_unreadable_entries(folder)
    assert sorted(p.name for p in removed) == ["jit_b-2-cache", "jit_c-3-cache", "jit_d-4-cache"]
    assert sorted(p.name for p in entries(folder)) == ["jit_a-1-cache", "jit_e-5-cache"]
    assert "Removed 3 unreadable entries" in capsys.readouterr().err
    record = json.loads((folder / compilation.CHECKED_RECORD).read_text())
    assert list(record) == ["jit_a-1-cache"]  # found whole: not read again
    assert compilation.drop_unreadable_entries(folder) == []
