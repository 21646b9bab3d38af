"""Shared fixtures: the tiny checkpoints, built once into build/checkpoints (as `make run` does),
the notebooks executed once per session, and how tests are grouped for pytest-xdist.

``make test`` runs the suite on several workers (``-n``, with ``--dist loadgroup`` from
pyproject.toml). Each group of tests runs on one worker, in file order, so its module- and
session-scoped fixtures (exported models, compiled pipelines, executed notebooks) are built once:

- every test module is a group of its own;
- modules that share state are one group, in :data:`GROUPS`;
- the smoke notebooks are two groups, so that two workers execute them side by side
  (:func:`group_of`): ``"notebooks-jax"`` (00-03) and ``"notebooks-cpu"`` (04-07, then the site,
  which reads every executed copy). A notebook runs once per test run whichever worker asks
  first (:func:`smoke_notebook`), and the other worker reads its result.

Each worker computes on its own share of the CPUs (:func:`worker_cpus`), and keeps JAX's
persistent compilation cache for the run (:func:`jax_compilation_cache`), so a program that
several tests compile is compiled once.

Groups start longest first (:data:`SLOW_GROUPS`, then by number of tests), so that the two
workers finish together rather than one of them ending on a long group alone: the collection is
put in that order (:func:`pytest_collection_modifyitems`) and xdist keeps it
(``--no-loadscope-reorder`` in pyproject.toml).

The grouping is done here, by module, in our own scheduler (:func:`pytest_xdist_make_scheduler`):
pytest-xdist 3.8 reads ``@pytest.mark.xdist_group`` by rewriting node ids, which pytest 9.2 no
longer lets it do, so the mark alone silently groups nothing (pytest-dev/pytest-xdist#1386).
Tests still carry the mark (a group's name, or ``"notebooks"`` for both notebook groups), and
collection fails when a mark and :func:`group_of` disagree.
"""

import fcntl
import json
import os
import re
import signal
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

# The CPU is the backend of every test, also where libtpu is installed (requirements-cpu.txt pins
# it to compile for TPU topologies): without this, JAX would try to open a TPU and log errors.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# OpenVINO's telemetry off (openvino_telemetry reads CI=true), for this process and its children:
# offline, its sender only forks the test process at every ov.convert_model, after JAX has started
# its threads (JAX warns "os.fork() was called ... will likely lead to a deadlock"). The smoke
# notebooks' kernels get the same from sdaccel.course.run_profiles.KERNEL_ENV.
os.environ.setdefault("CI", "true")
# Ctrl-C as Python's KeyboardInterrupt in this process and in every process it starts. A shell
# that starts a job in the background without job control (`cmd &` in a script) starts it with
# SIGINT ignored, children inherit that across exec, and Python then installs no handler: the tests
# that interrupt a child (tests/faults/, tests/core/test_processes.py) would wait for a child that
# never stops. A handler (unlike SIG_IGN) is reset to the default by exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def worker_cpus(environ=os.environ, cpus=None) -> set[int] | None:
    """The CPUs an xdist worker computes on: the ``k``-th of ``n`` workers gets every ``n``-th CPU
    this process may use, from the ``k``-th on (``None`` outside xdist, with one worker, or with
    fewer CPUs than workers). PyTorch's OpenMP, OpenVINO's TBB and XLA's Eigen each start as many
    threads as the process has CPUs; unpinned, two workers on two cores run four busy threads that
    take turns (spinning while they wait), pinned, two. A pair of OpenVINO-heavy modules
    (tests/toy/test_adherence.py and tests/cpu/test_quantize.py, ``-n 2`` on a 2-core Xeon) took
    159 s unpinned and 129 s pinned; a JAX pair (tests/tpu/test_generate.py, tests/integration/test_lcm.py)
    110 and 107 s. The processes a test starts (notebook kernels, benchmark children) inherit it."""
    worker, count = environ.get("PYTEST_XDIST_WORKER", ""), int(environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if not worker.startswith("gw") or count < 2 or len(cpus) < count:
        return None
    return set(cpus[int(worker[2:]) % count :: count])


#: This worker's CPUs (:func:`worker_cpus`), pinned before JAX, PyTorch or OpenVINO start threads,
#: and every CPU it had before (where a test marked ``every_cpu`` runs: :func:`pytest_pyfunc_call`).
WORKER_CPUS = worker_cpus() if hasattr(os, "sched_setaffinity") else None
ALL_CPUS = os.sched_getaffinity(0) if WORKER_CPUS else None
if WORKER_CPUS:
    os.sched_setaffinity(0, WORKER_CPUS)

import jax  # noqa: E402
import pytest  # noqa: E402

# Eight simulated CPU devices for every test, as in the notebooks' smoke profile. This must run
# before anything starts JAX's backends; single-device code simply runs on device 0.
jax.config.update("jax_num_cpu_devices", 8)

REPO = Path(__file__).resolve().parents[1]
CHECKPOINTS = REPO / "build" / "checkpoints"
#: Where the notebook tests execute the notebooks (``build/test/smoke/<name>.ipynb``).
NOTEBOOK_BUILD = REPO / "build" / "test"

#: Test modules that share state, and the xdist group they run in together (one worker, in order).
GROUPS = {
    "tests/integration/test_notebooks.py": "notebooks-cpu",  # its tests of one notebook: see group_of
    "tests/tools/workshop/test_docs_site.py": "notebooks-cpu",  # builds the site from the notebooks' executed copies
    # these share one session folder of OpenVINO exports (basetemp/ov-exports): on one worker, each
    # checkpoint is exported once
    "tests/cpu/test_contract_cpu.py": "ov-exports",
    "tests/cpu/test_export.py": "ov-exports",
    "tests/cpu/test_pipeline.py": "ov-exports",
    "tests/cpu/test_precision.py": "ov-exports",
    "tests/cpu/test_deepcache.py": "ov-exports",
    # the tiny plan's programs, compiled once for both (tests/tpu/conftest.py, tiny_plans)
    "tests/tpu/test_plan.py": "tpu-plan",
    "tests/tpu/test_plan_compile.py": "tpu-plan",
}


#: Groups that take long, with their worker-seconds on a 2-core CI machine running two or three workers
#: (``make test``'s ``--durations``, rounded): they start first, the longest first, after the two
#: notebook groups, which start before anything else, one on each worker (the site, at the end of
#: ``"notebooks-cpu"``, then finds 00-03 executed instead of waiting for them). A group not named
#: here starts after them, by number of tests. Re-measure when a group's cost changes a lot.
SLOW_GROUPS = {
    # notebooks 04-07 (measured alone: 70, 181, 227, 243 s), then the site built from every notebook
    "notebooks-cpu": 750,
    # notebooks 00-03 (21, 125, 160, 68 s), and 00 and 02 again up to their last checked cell (21, 50 s)
    "notebooks-jax": 450,
    "ov-exports": 450,  # five modules that share their exports; test_deepcache.py is 130 of it
    "tests/integration/test_bench_memory.py": 260,  # eight child processes, two of them whole exports
    "tests/cpu/test_quantize_parts.py": 150,  # quantizing in parts, and like one piece (was in test_quantize.py)
    "tests/cpu/test_quantize.py": 60,
    "tests/cpu/test_calibration.py": 40,
    "tests/toy/test_adherence.py": 210,
    "tests/toy/test_adherence_steps.py": 100,  # the JAX steps sweep (was in test_distill.py)
    "tests/toy/test_sensitivity_quality.py": 50,  # an export, a ranking of 4 groups, three quantizations
    "tests/toy/test_stack_quality.py": 60,  # an export with two merged UNets, three quantizations, five stacks, then DeepCache alone
    "tests/tpu/test_generate.py": 105,
    "tests/tpu/test_sharded_pipeline.py": 90,
    "tests/integration/test_lcm.py": 80,
    # the fault suite: child processes killed, interrupted or out of disk (one worker each, measured alone)
    "tests/faults/test_tpu_faults.py": 70,
    "tests/faults/test_cpu_quantize_faults.py": 60,
    "tests/faults/test_course_faults.py": 50,
    "tests/faults/test_cpu_export_faults.py": 45,
    "tpu-plan": 90,  # test_plan_compile.py and test_plan.py, on one compile of each tiny mesh
    "tests/tpu/models/test_attention.py": 60,
    "tests/cpu/test_levers.py": 50,
}

#: Modules that run after every other module of their group, whatever the collection order: the
#: site reads every notebook's executed copy, so it must come after 04-07 have run on its worker
#: (by then the other worker has run 00-03). Collected first (tests/course/ sorts before
#: tests/integration/), it would execute or wait for 00-03 before 04 could start.
LAST_IN_GROUP = ("tests/tools/workshop/test_docs_site.py",)

#: Notebooks numbered below this run in the ``"notebooks-jax"`` group, the rest in ``"notebooks-cpu"``.
FIRST_CPU_NOTEBOOK = "04"
#: The two groups of the notebooks' tests (:func:`group_of`), JAX first.
NOTEBOOK_GROUPS = ("notebooks-jax", "notebooks-cpu")


def stale_group_entries(root: Path = REPO) -> list[str]:
    """What :data:`GROUPS`, :data:`SLOW_GROUPS` and :data:`LAST_IN_GROUP` name that is no longer
    there: a module path (``tests/...``) with no file under ``root``, or a group name that no
    module runs in. After a test module moves, its old path would otherwise match nothing, and its
    group (or its place among the slow ones, or last in its group) would be dropped without a word."""
    names = {*GROUPS.values(), *NOTEBOOK_GROUPS}
    stale = [f"GROUPS: {path} (no such file)" for path in GROUPS if not (root / path).is_file()]
    stale += [
        f"LAST_IN_GROUP: {path} (no such file)" for path in LAST_IN_GROUP if not (root / path).is_file()
    ]
    for key in SLOW_GROUPS:
        if key.startswith("tests/"):
            if not (root / key).is_file():
                stale.append(f"SLOW_GROUPS: {key} (no such file)")
        elif key not in names:
            stale.append(f"SLOW_GROUPS: {key} (no such group: not a value of GROUPS)")
    return stale


def group_of(nodeid: str) -> str:
    module, _, test = nodeid.partition("::")
    if module == "tests/integration/test_notebooks.py" and "[" in test:  # one notebook's test: by its number
        number = test.split("[", 1)[1][:2]
        if number.isdigit():
            return NOTEBOOK_GROUPS[0] if number < FIRST_CPU_NOTEBOOK else NOTEBOOK_GROUPS[1]
    return GROUPS.get(module, module)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test marked ``every_cpu`` needs more than one CPU thread in OpenVINO (on one thread, the
    CPU plugin does not check some shapes: a Concat of mismatched inputs returns a wrong output,
    then an empty one at every call, and a later compile can crash). On a worker pinned to fewer
    CPUs than its process had (:data:`WORKER_CPUS`), the test runs again, alone, in a pytest
    process on every CPU, and passes or fails with it."""
    if pyfuncitem.get_closest_marker("every_cpu") is None or not WORKER_CPUS or len(WORKER_CPUS) > 1:
        return None
    import subprocess
    import sys
    import tempfile

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not a worker
    if "ov_exports" in pyfuncitem.funcargs:  # the worker's exports, made already: read, not made again
        env[OV_EXPORTS_VAR] = str(pyfuncitem.funcargs["ov_exports"])
    with tempfile.TemporaryDirectory(prefix="every-cpu-") as basetemp:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-q"]
            + ["--basetemp", str(Path(basetemp) / "t"), pyfuncitem.nodeid],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            preexec_fn=lambda: os.sched_setaffinity(0, ALL_CPUS),
        )
    if run.returncode != 0 or not re.search(r"^1 passed", run.stdout, re.MULTILINE):  # not skipped
        pytest.fail(f"On every CPU, in a process of its own:\n{run.stdout[-4000:]}{run.stderr[-2000:]}")
    return True


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: whole groups to one worker each, the largest first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ModuleGroups(config, log)


def pytest_collection_modifyitems(config, items):
    """Check the ``xdist_group`` marks, then order the groups longest first (each group's tests
    keep their order, but for the modules of :data:`LAST_IN_GROUP`, which go last). Every worker
    collects the same order, and xdist hands out groups in it. A module or group that these tables
    name and that is gone fails the collection (:func:`stale_group_entries`)."""
    stale = stale_group_entries()
    if stale:
        raise pytest.UsageError(
            "tests/conftest.py names test modules or groups that do not exist (moved or renamed? "
            "update GROUPS / SLOW_GROUPS / LAST_IN_GROUP): " + "; ".join(stale)
        )
    for item in items:
        for mark in item.iter_markers("xdist_group"):
            name = mark.args[0] if mark.args else mark.kwargs.get("name")
            if name != group_of(item.nodeid) and not (
                name == "notebooks" and group_of(item.nodeid).startswith("notebooks-")
            ):
                module = item.nodeid.split("::", 1)[0]
                raise pytest.UsageError(
                    f"{item.nodeid} is marked xdist_group({name!r}) but its module runs in group "
                    f"{group_of(item.nodeid)!r}: add {module!r}: {name!r} to GROUPS in tests/conftest.py."
                )
    groups = [group_of(item.nodeid) for item in items]
    sizes = Counter(groups)
    first = {}
    for i, group in enumerate(groups):
        first.setdefault(group, i)
    order = sorted(
        range(len(items)),
        key=lambda i: (
            not groups[i].startswith("notebooks-"),
            -SLOW_GROUPS.get(groups[i], 0),
            -sizes[groups[i]],
            first[groups[i]],
            items[i].nodeid.split("::", 1)[0] in LAST_IN_GROUP,
            i,
        ),
    )
    items[:] = [items[i] for i in order]


@contextmanager
def _checkpoints_lock():
    """One builder of build/checkpoints at a time across xdist workers (``ensure_tiny`` publishes
    by rename, but two workers building the same checkpoint would share its staging folder)."""
    CHECKPOINTS.parent.mkdir(parents=True, exist_ok=True)
    with open(CHECKPOINTS.parent / ".checkpoints.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_checkpoint(name: str) -> Path:
    from sdaccel.tools.toys.random_checkpoints import ensure_tiny

    with _checkpoints_lock():
        return ensure_tiny(CHECKPOINTS, name)


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """JAX's persistent compilation cache in this worker's temporary folder, for this test run only:
    many tests build a fresh pipeline of the same tiny model and compile a program that an earlier
    test already compiled; they read its executable back instead of compiling it again (the same
    executable, so the same numbers). Only programs that took a second or more are kept. Processes
    that the tests start (notebook kernels, ``compilation.cache_probe``) do not inherit it."""
    from sdaccel.tpu.compilation import enable_compilation_cache

    folder = tmp_path_factory.getbasetemp() / "jax-cache"
    enable_compilation_cache(folder, min_compile_time_s=1.0, min_entry_size_bytes=0)
    yield folder
    _compilation_cache_off()


def _compilation_cache_off() -> None:
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()


@pytest.fixture(scope="module")
def without_compilation_cache(jax_compilation_cache):
    """The persistent compilation cache off for a module that compiles for compile-only TPU
    devices (``pytestmark = pytest.mark.usefixtures("without_compilation_cache")``): JAX writes
    such an executable to the cache but cannot read it back (it warns, then compiles again)."""
    from sdaccel.tpu.compilation import enable_compilation_cache

    _compilation_cache_off()
    yield
    enable_compilation_cache(jax_compilation_cache, min_compile_time_s=1.0, min_entry_size_bytes=0)


@pytest.fixture(scope="session")
def mapped_rss():
    """``mapped_rss(path)``: the bytes of the file ``path`` resident in this process's mappings of
    it (``/proc/self/smaps``), ``None`` where there is no such file (not Linux): what a reader of a
    memory-mapped checkpoint still holds (tests/core/test_checkpoint.py, tests/tpu/models/test_weights.py)."""
    import re

    def resident(path) -> int | None:
        smaps, target, total, inside = Path("/proc/self/smaps"), str(Path(path).resolve()), 0, False
        if not smaps.is_file():
            return None
        for line in smaps.read_text().splitlines():
            fields = line.split(maxsplit=5)
            if fields and re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", fields[0]):
                inside = len(fields) == 6 and fields[5] == target
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
        return total

    return resident


#: Where the process that a test marked ``every_cpu`` runs again in finds the exports of the worker
#: that started it (:func:`pytest_pyfunc_call`): the worker waits, so the folder is whole and still.
OV_EXPORTS_VAR = "SDACCEL_TEST_OV_EXPORTS"


@pytest.fixture(scope="session")
def ov_exports(tmp_path_factory) -> Path:
    """The session folder of OpenVINO exports that the modules of the ``"ov-exports"`` group share
    (each checkpoint exported once); in an ``every_cpu`` test's own process, its worker's."""
    given = os.environ.get(OV_EXPORTS_VAR)
    return Path(given) if given else tmp_path_factory.getbasetemp() / "ov-exports"


@pytest.fixture(scope="session")
def tiny_sdxl() -> Path:
    return ensure_checkpoint("tiny-sdxl")


@pytest.fixture(scope="session")
def tiny_sd15() -> Path:
    return ensure_checkpoint("tiny-sd15")


def _run_notebook_once(notebook: Path, testrun: str):
    """Execute ``notebook`` in the smoke profile unless a worker of this test run (``testrun``,
    xdist's id shared by its workers) already did: a lock per notebook lets one worker execute it
    while another waits, and ``<stem>.run.json`` records the finished run (or its error)."""
    import dataclasses
    import json

    from sdaccel.tools.workshop.discovery import needed_tiny_checkpoints
    from sdaccel.tools.workshop.execute import NotebookFailed, Run, execute

    record = NOTEBOOK_BUILD / "smoke" / f"{notebook.stem}.run.json"
    locks = NOTEBOOK_BUILD / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{notebook.stem}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            done = json.loads(record.read_text()) if record.is_file() else {}
            if done.get("testrun") == testrun:  # executed by another worker of this run
                if done["error"] is not None:
                    return NotebookFailed(done["error"])
                return Run(
                    **{
                        k: Path(v) if k in ("notebook", "executed", "output_dir") else v
                        for k, v in done["run"].items()
                    }
                )
            for name in sorted(needed_tiny_checkpoints([notebook])):
                ensure_checkpoint(name)
            try:
                got = execute(notebook, "smoke", NOTEBOOK_BUILD, CHECKPOINTS, timeout=900)
                entry = {
                    "run": {
                        k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(got).items()
                    },
                    "error": None,
                }
            except NotebookFailed as err:
                got, entry = err, {"run": None, "error": str(err)}
            partial = record.with_name(record.name + ".partial")
            partial.write_text(json.dumps({"testrun": testrun, **entry}))
            partial.replace(record)
            return got
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def smoke_notebook(testrun_uid):
    """``smoke_notebook(path)`` executes that notebook in the smoke profile into ``NOTEBOOK_BUILD``
    once per test run, on whichever worker asks first, and returns its ``execute.Run``;
    later calls (from any worker) return the same run, and after a failed execution every caller
    fails with the same error. Each execution starts with an empty output folder
    (``run_files.fresh_output_dir``), so what a test reads is this run's. Tests using it carry
    ``@pytest.mark.xdist_group("notebooks")``."""
    from sdaccel.tools.workshop.execute import NotebookFailed

    runs: dict[str, object] = {}

    def run(notebook: Path):
        if notebook.stem not in runs:
            runs[notebook.stem] = _run_notebook_once(notebook, testrun_uid)
        got = runs[notebook.stem]
        if isinstance(got, NotebookFailed):
            raise got
        return got

    return run


class PeftLora:
    """Make a LoRA adapter with peft on a tiny checkpoint, the way a user's training would: random,
    non-zero factors on every UNet target (attention, feed-forward, resnet convolutions 3x3 and 1x1,
    embeddings, samplers) and on every text encoder's attention and MLP, saved by diffusers'
    ``save_lora_weights`` (the diffusers/peft layout, with peft's config as metadata). Shared by the
    tests of reading LoRA files (tests/core/test_lora_files.py) and of fusing them
    (tests/tpu/test_lora.py)."""

    UNET_TARGETS = [
        "to_q",
        "to_k",
        "to_v",
        "to_out.0",
        "proj_in",
        "proj_out",
        "ff.net.2",
        "conv1",
        "conv2",
        "conv_shortcut",
        "time_emb_proj",
        "conv",  # the down- and upsamplers
        "conv_in",
        "conv_out",
        "time_embedding.linear_1",
        "add_embedding.linear_2",
    ]
    TEXT_TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"]
    UNET_RANK, UNET_ALPHA, TEXT_RANK, TEXT_ALPHA = 4, 8, 2, 1

    def make(self, checkpoint: Path, folder: Path) -> tuple[Path, dict]:
        """The adapter file written into ``folder``, and the deltas peft computes for it
        (``get_delta_weight``), by (component, module)."""
        import diffusers
        import peft
        import torch
        from peft import LoraConfig, inject_adapter_in_model
        from peft.utils import get_peft_model_state_dict

        # 1. The pipeline, with the adapters added (transformers' own add_adapter needs peft >= 0.22,
        #    which is not published: peft's inject_adapter_in_model does the same for the encoders)
        torch.manual_seed(0)
        index = json.loads((Path(checkpoint) / "model_index.json").read_text())
        pipe = getattr(diffusers, index["_class_name"]).from_pretrained(str(checkpoint), dtype=torch.float32)
        ucfg = LoraConfig(
            r=self.UNET_RANK,
            lora_alpha=self.UNET_ALPHA,
            init_lora_weights=False,
            target_modules=self.UNET_TARGETS,
        )
        tcfg = LoraConfig(
            r=self.TEXT_RANK,
            lora_alpha=self.TEXT_ALPHA,
            init_lora_weights=False,
            target_modules=self.TEXT_TARGETS,
        )
        pipe.unet.add_adapter(ucfg)
        encoders = {
            name: getattr(pipe, name)
            for name in ("text_encoder", "text_encoder_2")
            if getattr(pipe, name, None)
        }
        for model in encoders.values():
            inject_adapter_in_model(tcfg, model)

        # 2. Small updates, so the pictures stay pictures
        with torch.no_grad():
            for model in [pipe.unet, *encoders.values()]:
                for name, param in model.named_parameters():
                    if "lora_B" in name:
                        param.mul_(0.3)

        # 3. peft's own deltas, to compare with
        deltas = {}
        for component, model in {"unet": pipe.unet, **encoders}.items():
            for name, module in model.named_modules():
                if isinstance(module, peft.tuners.lora.LoraLayer):
                    with torch.no_grad():
                        deltas[(component, name)] = module.get_delta_weight("default").numpy()

        # 4. The diffusers file
        kwargs = {
            "unet_lora_layers": get_peft_model_state_dict(pipe.unet),
            "unet_lora_adapter_metadata": ucfg.to_dict(),
        }
        for name, model in encoders.items():
            kwargs[f"{name}_lora_layers"] = get_peft_model_state_dict(model)
            kwargs[f"{name}_lora_adapter_metadata"] = tcfg.to_dict()
        type(pipe).save_lora_weights(str(folder), **kwargs)
        return Path(folder) / "pytorch_lora_weights.safetensors", deltas


@pytest.fixture(scope="session")
def peft_lora() -> PeftLora:
    pytest.importorskip("peft")
    pytest.importorskip("diffusers")
    return PeftLora()
