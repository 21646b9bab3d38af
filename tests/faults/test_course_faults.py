"""Faults from outside the course tooling, injected for real: a model download killed in the middle
of a file, a hub cache that holds part of a snapshot, a notebook run killed or interrupted while a
cell runs, the whole-image benchmark stopped while a row's child process runs, and two builders
of the tiny checkpoints at once (``make run`` beside ``make test``).

No machine here reaches the model hub, so the downloads run against a fake at the boundary that
``sdaccel.tools.workshop.download`` calls (``huggingface_hub.HfApi`` and ``snapshot_download``): it writes
the cache as huggingface_hub 2.x does (:data:`FAKE_HUB`), and everything else (the plan, the cache
accounting, the doctor, the offline load) is the real code."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

REPO_ID = "stable-diffusion-v1-5/stable-diffusion-v1-5"  # resources.MODELS["sd15"]
STORAGE = "models--stable-diffusion-v1-5--stable-diffusion-v1-5"

#: A hub that serves the files of ``source`` as ``repo_id``, installed in the child process. Its
#: ``snapshot_download`` leaves on disk what huggingface_hub 2.x's does: the repository's tree
#: listing in ``trees/<commit>.json`` first; then each file written to
#: ``blobs/<etag>.<random>.incomplete`` under the lock ``.locks/<repo>/<etag>.lock``, renamed to
#: ``blobs/<etag>`` and linked from ``snapshots/<commit>/<path>``. A killed download leaves its
#: ``.incomplete`` file, which no later download resumes or removes, and a revision given as a
#: commit hash (as the downloader gives it) writes no ``refs/main``. The point ``hub.mid-file``
#: is reached with half of a file written.
FAKE_HUB = """
import hashlib, os, sys, uuid
from pathlib import Path
from types import SimpleNamespace

import filelock
import huggingface_hub
from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache
from huggingface_hub.utils import filter_repo_objects

from sdaccel.core.faults import fault_point

SOURCE, SHA = Path({source!r}), "5" * 40
FILES = {{p.relative_to(SOURCE).as_posix(): p for p in sorted(SOURCE.rglob("*")) if p.is_file()}}


class FakeApi:
    def model_info(self, repo_id, files_metadata=False):
        siblings = [SimpleNamespace(rfilename=f, size=p.stat().st_size) for f, p in FILES.items()]
        return SimpleNamespace(sha=SHA, siblings=siblings)


def fake_snapshot_download(repo_id, revision, allow_patterns, cache_dir):
    storage = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    snapshot = storage / "snapshots" / revision
    etags = {{name: hashlib.sha256(p.read_bytes()).hexdigest() for name, p in FILES.items()}}
    listing = {{n: TreeCacheEntry(size=p.stat().st_size, blob_id=etags[n]) for n, p in FILES.items()}}
    write_tree_cache(str(storage), revision, listing)
    for name in filter_repo_objects(list(FILES), allow_patterns=allow_patterns):
        data, etag = FILES[name].read_bytes(), etags[name]
        blob, pointer = storage / "blobs" / etag, snapshot / name
        if not blob.exists():
            blob.parent.mkdir(parents=True, exist_ok=True)
            lock = Path(cache_dir) / ".locks" / storage.name / f"{{etag}}.lock"
            lock.parent.mkdir(parents=True, exist_ok=True)
            with filelock.FileLock(lock):
                piece = blob.with_name(f"{{etag}}.{{uuid.uuid4().hex[:8]}}.incomplete")
                with open(piece, "wb") as f:
                    f.write(data[: len(data) // 2])
                    f.flush()
                    fault_point("hub.mid-file")
                    f.write(data[len(data) // 2 :])
                os.replace(piece, blob)
        if not os.path.lexists(pointer):
            pointer.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    return str(snapshot)


huggingface_hub.HfApi = FakeApi
huggingface_hub.snapshot_download = fake_snapshot_download
"""

DOWNLOAD = """
from sdaccel.tools.workshop.download import main
sys.exit(main(["--models", "sd15", "--dest", {cache!r}]))
"""

#: What a reader of the cache finds, offline: the doctor's row and the loader's folder (or error).
INSPECT = """
import json
from huggingface_hub import scan_cache_dir
from sdaccel.core.checkpoint import CheckpointError, resolve_checkpoint
from sdaccel.course import resources
from sdaccel.tools.workshop import doctor

models = {{"sd15": resources.MODELS["sd15"]}}
cached, unfinished = doctor.read_cache(models, scan_cache_dir({cache!r}))
check = doctor.check_models(models, cached, False, "full", unfinished)
try:
    folder, error = str(resolve_checkpoint({repo!r})), None
except CheckpointError as err:
    folder, error = None, str(err)
print(json.dumps({{"status": check.status, "detail": check.detail, "fix": check.fix, "folder": folder, "error": error}}))
"""


def download_code(source: Path, cache: Path) -> str:
    return FAKE_HUB.format(source=str(source)) + DOWNLOAD.format(cache=str(cache))


def inspect(fault_kit, cache: Path) -> dict:
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    child = fault_kit.run_python(INSPECT.format(cache=str(cache), repo=REPO_ID), env=env, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def selected(fault_kit, source: Path) -> dict[str, str]:
    """The digest of the files of ``source`` that the downloader fetches for SD 1.5."""
    from huggingface_hub.utils import filter_repo_objects

    from sdaccel.course import resources

    everything = fault_kit.digest(source)
    wanted = set(
        filter_repo_objects(list(everything), allow_patterns=resources.MODELS["sd15"].allow_patterns())
    )
    return {name: sha for name, sha in everything.items() if name in wanted}


@pytest.fixture(scope="module")
def hub_repo(tmp_path_factory, tiny_sd15) -> Path:
    """The files of the fake hub repository: the tiny SD 1.5 checkpoint, and a single-file
    checkpoint beside it that the downloader's patterns leave out (as on the real hub)."""
    source = tmp_path_factory.mktemp("hub-repo") / "sd15"
    shutil.copytree(tiny_sd15, source)
    (source / "v1-5-pruned-emaonly.ckpt").write_bytes(b"not fetched" * 100)
    return source


def run_quietly(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python, for the setup of a module's fixtures (``fault_kit`` is per test)."""
    full_env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    full_env.pop("SDACCEL_FAULT", None)
    done = subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def full_cache(tmp_path_factory, hub_repo) -> Path:
    """A hub cache that holds the whole SD 1.5 download, made by the downloader."""
    cache = tmp_path_factory.mktemp("full-cache") / "hub"
    run_quietly(download_code(hub_repo, cache))
    return cache


# ----------------------------------------------------------------------------------------------
# 1. A download killed; 2. a cache that holds part of a snapshot
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["hub.mid-file#4:kill", "download.repo-fetched:kill"])
def test_a_killed_download_never_passes_for_cached_and_the_next_one_completes(
    tmp_path, fault_kit, hub_repo, fault
):
    cache = tmp_path / "hub"
    killed = fault_kit.run_python(download_code(hub_repo, cache), fault)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert fault_kit.wait_for_group_to_end(killed.pgid) == []

    # neither the doctor nor an offline load takes the unfinished download for the model
    seen = inspect(fault_kit, cache)
    assert seen["status"] == "fail" and seen["detail"].startswith("not cached"), seen
    assert seen["fix"].startswith("python -m sdaccel.tools.workshop.download --models sd15"), seen
    assert seen["folder"] is None, f"an offline load took the unfinished download: {seen}"
    assert REPO_ID in seen["error"] and "python -m sdaccel.tools.workshop.download" in seen["error"], seen

    # the next download completes it, and removes what the killed one left
    again = fault_kit.run_python(download_code(hub_repo, cache))
    assert again.returncode == 0, again.stderr[-3000:]
    if fault.startswith("hub.mid-file"):
        assert "Removed 1 unfinished file" in again.stdout, again.stdout
    assert list(cache.glob("*/blobs/*.incomplete")) == []
    seen = inspect(fault_kit, cache)
    assert seen["status"] == "ok" and seen["error"] is None, seen
    assert fault_kit.digest(seen["folder"]) == selected(fault_kit, hub_repo)


def _drop_weight(storage: Path) -> str:
    """A copy of the cache that stopped before the VAE's weights: the snapshot lacks them."""
    name = "vae/diffusion_pytorch_model.safetensors"
    next((storage / "snapshots").iterdir()).joinpath(name).unlink()
    return name


def _drop_blob(storage: Path) -> str:
    """A copy of the snapshots without the blob the VAE's weights link to (a broken link)."""
    name = "vae/diffusion_pytorch_model.safetensors"
    link = next((storage / "snapshots").iterdir()) / name
    link.resolve().unlink()
    return name


DAMAGE = {
    "a weight file missing": _drop_weight,
    "a weight file missing, no tree listing": lambda storage: (
        shutil.rmtree(storage / "trees"),
        _drop_weight(storage),
    )[1],
    "a weight file's blob missing": _drop_blob,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_cache_holding_part_of_a_snapshot_is_refused_naming_the_file_and_the_fix(
    tmp_path, fault_kit, full_cache, damage
):
    cache = tmp_path / "hub"
    shutil.copytree(full_cache, cache, symlinks=True)
    missing = DAMAGE[damage](cache / STORAGE)
    before = fault_kit.digest(cache)

    seen = inspect(fault_kit, cache)
    assert seen["status"] == "fail" and seen["detail"].startswith("not cached"), seen
    assert seen["folder"] is None, f"an offline load took a partial snapshot: {seen}"
    assert missing in seen["error"], seen
    assert "python -m sdaccel.tools.workshop.download" in seen["error"] and "copy" in seen["error"], seen
    assert fault_kit.digest(cache) == before, "a check changed the cache"


def test_an_unfinished_file_in_the_cache_is_reported_and_the_next_download_removes_it(
    tmp_path, fault_kit, full_cache, hub_repo
):
    cache = tmp_path / "hub"
    shutil.copytree(full_cache, cache, symlinks=True)
    piece = cache / STORAGE / "blobs" / f"{'7' * 64}.0a1b2c3d.incomplete"
    piece.write_bytes(b"x" * 4096)

    seen = inspect(fault_kit, cache)
    assert seen["status"] == "fail" and "unfinished" in seen["detail"], seen
    assert seen["error"] is None, "the snapshot itself is whole: it loads"

    again = fault_kit.run_python(download_code(hub_repo, cache))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Removed 1 unfinished file" in again.stdout and not piece.exists(), again.stdout
    assert inspect(fault_kit, cache)["status"] == "ok"


# ----------------------------------------------------------------------------------------------
# 3. A notebook run killed or interrupted
# ----------------------------------------------------------------------------------------------

#: A notebook that records which run it is (``NB_RUN``) and, when ``NB_HOLD`` names a file, starts
#: a child process, writes that file and waits: the moment to kill or interrupt its runner.
NOTEBOOK_CELLS = [
    "import os\nfrom sdaccel.course.notebook import Results\nresults = Results(OUTPUT_DIR)\n"
    "results['run'] = os.environ['NB_RUN']\nprint('run', os.environ['NB_RUN'])",
    "import os, pathlib, subprocess, time\nif os.environ.get('NB_HOLD'):\n"
    "    subprocess.Popen(['sleep', '600'])\n    pathlib.Path(os.environ['NB_HOLD']).write_text('held')\n"
    "    time.sleep(600)",
]

RUN_NOTEBOOK = """
import sys
from pathlib import Path
from sdaccel.tools.workshop.execute import execute
execute(Path(sys.argv[1]), "full", Path(sys.argv[2]), Path(sys.argv[2]) / "checkpoints", timeout=300)
"""


def notebook_runner(
    root: Path, run: str, hold: Path | None = None, fault: str | None = None
) -> subprocess.Popen:
    """The runner (``execute.execute``) of ``root/01_fault.ipynb`` into ``root/build``, in a
    new session, as ``make run`` starts it from a terminal."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "NB_RUN": run}
    env.pop("SDACCEL_FAULT", None)
    if hold is not None:
        env["NB_HOLD"] = str(hold)
    if fault is not None:
        env["SDACCEL_FAULT"] = fault
    return subprocess.Popen(
        [sys.executable, "-c", RUN_NOTEBOOK, str(root / "01_fault.ipynb"), str(root / "build")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_until(condition, proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(
                f"the child ended (status {proc.returncode}) before {what}:\n{proc.stderr.read()[-3000:]}"
            )
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.05)


def still_alive(processes: list[psutil.Process], seconds: float = 15.0) -> list[str]:
    """The ``processes`` still running after up to ``seconds``; those are then killed."""
    deadline = time.monotonic() + seconds
    while True:
        alive = []
        for proc in processes:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                continue
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    names = []
    for proc in alive:
        try:
            names.append(" ".join(proc.cmdline())[:120])
            proc.kill()
        except psutil.Error:
            pass
    return names


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, fault_kit) -> Path:
    """A folder with the notebook and one finished run of it (``build/full/...``)."""
    root = tmp_path_factory.mktemp("notebook-run")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('OUTPUT_DIR = "outputs"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *(nbformat.v4.new_code_cell(src) for src in NOTEBOOK_CELLS)]
    nbformat.write(nb, root / "01_fault.ipynb")
    code, _, err = fault_kit.finish(notebook_runner(root, "first"))
    assert code == 0, err[-3000:]
    return root


def held_second_run(tmp_path: Path, fault_kit, finished_run: Path):
    """A copy of the finished run's folder, its build digest, and a second run of the notebook held
    inside its cell (the kernel and a child of it are running): ``(root, build, before, runner)``."""
    root = tmp_path / "work"
    shutil.copytree(finished_run, root)
    build = root / "build" / "full"
    before = fault_kit.digest(build)
    held = root / "held"
    runner = notebook_runner(root, "second", hold=held)
    wait_until(held.exists, runner, "cell holding")
    return root, build, before, runner


@pytest.mark.parametrize("how", ["kill", "interrupt"])
def test_a_notebook_run_stopped_mid_cell_keeps_the_last_finished_run_and_ends_its_kernel(
    tmp_path, fault_kit, finished_run, how
):
    root, build, before, runner = held_second_run(tmp_path, fault_kit, finished_run)
    family = psutil.Process(runner.pid).children(recursive=True)  # the kernel, its child, ...
    assert any("sleep" in p.name() for p in family), [p.cmdline() for p in family]
    if how == "kill":  # as the OOM killer would
        os.kill(runner.pid, signal.SIGKILL)
    else:  # Ctrl-C in the terminal: SIGINT to the runner's process group
        os.killpg(runner.pid, signal.SIGINT)
    code, _, err = fault_kit.finish(runner)

    if how == "kill":
        assert code == -9, err[-3000:]
    else:
        assert code != 0 and "Interrupted" in err and "01_fault" in err, err[-3000:]
    assert fault_kit.wait_for_group_to_end(runner.pid) == []
    assert still_alive(family) == [], "the run's kernel or its children outlived the runner"
    # what a reader finds: the last finished run's executed copy and outputs, nothing half-written
    assert fault_kit.digest(build) == before
    assert fault_kit.hidden_leftovers(build) == [] and fault_kit.hidden_leftovers(build / "outputs") == []

    # the next run starts clean: its own outputs only, the finished run kept as the previous one
    code, _, err = fault_kit.finish(notebook_runner(root, "third"))
    assert code == 0, err[-3000:]
    assert json.loads((build / "outputs" / "01_fault" / "results.json").read_text()) == {"run": "third"}
    assert json.loads((build / "outputs" / "01_fault.previous" / "results.json").read_text()) == {
        "run": "first"
    }
    executed = (build / "01_fault.ipynb").read_text()
    assert "run third" in executed and "second" not in executed
    assert fault_kit.digest(build)["01_fault.previous.ipynb"] == before["01_fault.ipynb"]
    assert fault_kit.hidden_leftovers(build) == [] and fault_kit.hidden_leftovers(build / "outputs") == []


def test_a_runner_killed_while_it_publishes_a_finished_run_has_it_published(
    tmp_path, fault_kit, finished_run
):
    """Killed between the note that says the run finished and the renames that publish it: the
    guard completes the publication, so the executed copy and the outputs are of one run."""
    root = tmp_path / "work"
    shutil.copytree(finished_run, root)
    build = root / "build" / "full"
    before = fault_kit.digest(build)

    code, _, err = fault_kit.finish(
        notebook_runner(root, "second", fault="run_notebooks.before-publish:kill")
    )
    assert code == -9, err[-3000:]
    assert "01_fault.ipynb had finished: its executed copy and outputs are now in place" in err, err[-3000:]
    assert json.loads((build / "outputs" / "01_fault" / "results.json").read_text()) == {"run": "second"}
    assert json.loads((build / "outputs" / "01_fault.previous" / "results.json").read_text()) == {
        "run": "first"
    }
    assert "run second" in (build / "01_fault.ipynb").read_text()
    assert fault_kit.digest(build)["01_fault.previous.ipynb"] == before["01_fault.ipynb"]
    assert fault_kit.hidden_leftovers(build) == [] and fault_kit.hidden_leftovers(build / "outputs") == []


# ----------------------------------------------------------------------------------------------
# 4. The whole-image benchmark stopped while a row's child runs
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["kill", "interrupt"])
def test_the_whole_image_benchmark_stopped_takes_its_row_child_with_it(tmp_path, fault_kit, how):
    out = tmp_path / "results" / "whole_image.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("SDACCEL_FAULT", None)
    bench = subprocess.Popen(
        [
            sys.executable,
            "benchmarks/bench_whole_image.py",
            "sd15",
            "--quick",
            "--rows",
            "torch_fp32_20",
            "--runs",
            "1",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=fault_kit.REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def row_child() -> list[psutil.Process]:
        try:
            family = psutil.Process(bench.pid).children(recursive=True)
            return family if any("spawn_main" in " ".join(p.cmdline()) for p in family) else []
        except psutil.Error:
            return []

    wait_until(lambda: bool(row_child()), bench, "row child")
    family = row_child()
    time.sleep(0.5)  # the child is loading the pipeline
    if how == "kill":
        os.kill(bench.pid, signal.SIGKILL)
    else:
        os.killpg(bench.pid, signal.SIGINT)
    code, _, err = fault_kit.finish(bench)

    assert still_alive(family) == [], "the row's child outlived the benchmark"
    assert fault_kit.wait_for_group_to_end(bench.pid) == []
    results = json.loads(out.read_text())  # written whole after every row: never half a file
    assert results["complete"] is False and not results["rows"]
    assert fault_kit.hidden_leftovers(out.parent) == []
    if how == "kill":
        assert code == -9, err[-3000:]
    else:
        assert code == 130, err[-3000:]
        assert "Interrupted" in err and "--resume" in err, err[-3000:]


# ----------------------------------------------------------------------------------------------
# 5. Two builders of the tiny checkpoints at once
# ----------------------------------------------------------------------------------------------

#: ``make run``'s builder (the command line) and ``make test``'s (``ensure_tiny``), each checking,
#: once it returns, that the checkpoint is whole, and naming the folder it found.
BUILDER = """
import json
from pathlib import Path
from sdaccel.core.checkpoint import check_weight_files, read_json
from sdaccel.tools.toys import random_checkpoints

root, how = Path({root!r}), {how!r}
if how == "cli":
    random_checkpoints.main([str(root), "--only", "tiny-sd15"])
else:
    random_checkpoints.ensure_tiny(root, "tiny-sd15")
folder = root / "tiny-sd15"
index = read_json(folder / "model_index.json")
check_weight_files(folder, [c for c in index if not c.startswith("_")])
print(json.dumps({{"inode": folder.stat().st_ino}}))
"""


def test_two_builders_of_the_tiny_checkpoints_take_turns_and_the_second_reuses_the_first(
    tmp_path, fault_kit, tiny_sd15
):
    root = tmp_path / "checkpoints"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("SDACCEL_FAULT", None)
    builders = [
        subprocess.Popen(
            [sys.executable, "-c", BUILDER.format(root=str(root), how=how)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for how in ("cli", "ensure")
    ]
    done = [fault_kit.finish(b) for b in builders]
    for code, _, err in done:
        assert code == 0, err[-3000:]
    assert sum("Waiting for another process that is writing tiny-sd15" in err for _, _, err in done) == 1
    folder = root / "tiny-sd15"
    seen = {json.loads(out.strip().splitlines()[-1])["inode"] for _, out, _ in done}
    assert seen == {folder.stat().st_ino}, "the second builder replaced the first one's checkpoint"
    assert fault_kit.hidden_leftovers(root) == []
    assert fault_kit.digest(folder) == fault_kit.digest(tiny_sd15), "not the checkpoint a clean build makes"


def test_a_builder_killed_before_it_publishes_leaves_no_checkpoint_and_the_next_one_cleans_up(
    tmp_path, fault_kit, tiny_sd15
):
    root = tmp_path / "checkpoints"
    killed = fault_kit.run_python(BUILDER.format(root=str(root), how="cli"), "random_checkpoints.built:kill")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (root / "tiny-sd15").exists(), "a reader would find half a checkpoint"
    assert fault_kit.hidden_leftovers(root), "the kill left nothing behind: the fault was not injected"

    again = fault_kit.run_python(BUILDER.format(root=str(root), how="ensure"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "interrupted write" in again.stderr
    assert fault_kit.hidden_leftovers(root) == []
    assert fault_kit.digest(root / "tiny-sd15") == fault_kit.digest(tiny_sd15)


def test_a_kernel_killed_by_the_oom_killer_fails_its_run_and_keeps_the_last_finished_one(
    tmp_path, fault_kit, finished_run
):
    """The kernel, not the runner, is over the memory limit: the OOM killer sends it SIGKILL. The
    runner says the notebook failed because its kernel died, and the last finished run is kept."""
    root, build, before, runner = held_second_run(tmp_path, fault_kit, finished_run)
    family = psutil.Process(runner.pid).children(recursive=True)
    (kernel,) = [p for p in family if "ipykernel" in " ".join(p.cmdline())]
    kernel.send_signal(signal.SIGKILL)  # as the OOM killer would
    code, _, err = fault_kit.finish(runner)

    assert code != 0 and "01_fault" in err and "kernel" in err.lower(), err[-3000:]
    assert fault_kit.wait_for_group_to_end(runner.pid) == []
    assert still_alive(family) == [], "a process of the dead kernel outlived the run"
    after = fault_kit.digest(build)
    kept = (after.get("01_fault.ipynb"), after.get("01_fault.previous.ipynb"))
    assert before["01_fault.ipynb"] in kept, "the last finished run is lost"
    assert fault_kit.hidden_leftovers(build) == [] and fault_kit.hidden_leftovers(build / "outputs") == []

    code, _, err = fault_kit.finish(notebook_runner(root, "third"))
    assert code == 0, err[-3000:]
    assert json.loads((build / "outputs" / "01_fault" / "results.json").read_text()) == {"run": "third"}
