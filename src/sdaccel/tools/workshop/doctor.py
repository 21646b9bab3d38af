"""Pre-flight check: is this laptop or VM ready for the chosen notebooks?

    python -m sdaccel.tools.workshop.doctor                                   # the smoke profile, every notebook
    python -m sdaccel.tools.workshop.doctor --profile full --notebooks 01 04 --json doctor.json
    python -m sdaccel.tools.workshop.doctor --profile rehearsal                 # before `make rehearsal`

It prints one row per check (``ok``, ``warn``, ``FAIL``, ``info``), writes them as JSON when asked,
and exits with status 1 when a check fails: a blocker that stops a notebook. Warnings (an
unexpected package version, no TPU for the JAX notebooks) let the notebooks run, slower or
differently. In the smoke profile it also lists, as ``full:`` rows, what the full profile would
still lack here (the hub, the cached models, memory), so that a room can be checked a day early.
In the rehearsal profile the models are read from the hub stand-in
(``sdaccel.course.run_profiles.STAND_IN_HOME``), never from the hub: a model missing there is a
blocker, and its fix is the command that writes the stand-in.

Each check is a small function of its inputs (versions, paths, byte counts, a probe's result), so
the tests can fake every condition; :func:`gather` collects the real inputs on this machine.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import urllib.request
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import psutil
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sdaccel.core import env
from sdaccel.core.checkpoint import allow_patterns
from sdaccel.core.staging import free_bytes
from sdaccel.course import resources, run_profiles
from sdaccel.cpu import families
from sdaccel.tools.workshop.discovery import PROFILE_ENV

REPO = Path(__file__).resolve().parents[4]
GIB = 2**30

#: Packages a notebook cannot run without, by track (more are pinned; these are the ones imported).
JAX_PACKAGES = ("jax", "jaxlib", "flax", "numpy", "transformers", "papermill")
CPU_PACKAGES = ("torch", "diffusers", "openvino", "openvino-genai", "nncf")
JAX_NOTEBOOKS = {"00", "01", "02", "03"}

#: Where a TPU VM exposes its chips (v5e and later: /dev/vfio; v4 and earlier: /dev/accel*), and
#: the lock file libtpu writes while a process holds them.
TPU_DEVICE_GLOBS = ("/dev/accel*", "/dev/vfio/[0-9]*")
LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | info
    detail: str
    fix: str = ""
    data: dict = field(default_factory=dict)


def ok(name, detail, **data):
    return Check(name, "ok", detail, data=data)


# ----------------------------------------------------------------------------------------------
# The checks: each takes its inputs
# ----------------------------------------------------------------------------------------------


def check_python(version: tuple[int, int, int]) -> Check:
    text = ".".join(map(str, version))
    if version[:2] == (3, 11):
        return ok("python", f"Python {text}")
    if version[:2] < (3, 11):
        return Check("python", "fail", f"Python {text}", "Install Python 3.11 and make the venv with it.")
    return Check(
        "python", "warn", f"Python {text}; the pins are for 3.11", "Use Python 3.11 if an install fails."
    )


def parse_pins(text: str, environment: dict[str, str] | None = None) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of a requirements file (extras dropped)
    that applies here: a line whose environment marker is false (``libtpu==...; sys_platform ==
    "linux" and platform_machine == "x86_64"`` on a Mac) is left out. ``environment`` overrides
    the marker variables of this Python (``{"sys_platform": "darwin", ...}``), for tests."""

    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(environment):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def check_versions(
    pins: dict[str, str], installed: dict[str, str | None], required: tuple[str, ...], source: str
) -> Check:
    """Installed versions against the pins: a missing required package fails; a different version warns."""

    def same(have: str, want: str) -> bool:  # a local build tag (torch's "+cpu") is the same release
        try:
            return Version(have).public == Version(want).public
        except InvalidVersion:
            return have == want

    installed = {canonicalize_name(k): v for k, v in installed.items()}
    missing = [p for p in required if installed.get(canonicalize_name(p)) is None]
    differ = {
        name: (installed[name], want)
        for name, want in pins.items()
        if installed.get(name) is not None and not same(installed[name], want)
    }
    absent = sorted(name for name in pins if installed.get(name) is None)
    data = {"differ": differ, "missing": missing, "not_installed": absent}
    if missing:
        return Check(
            "packages",
            "fail",
            f"not installed: {', '.join(missing)}",
            f"pip install -r {source} -e .",
            data,
        )
    if differ:
        shown = ", ".join(f"{n} {have} (pinned {want})" for n, (have, want) in sorted(differ.items()))
        return Check("packages", "warn", f"differ from {source}: {shown}", f"pip install -r {source}", data)
    return ok("packages", f"{len(pins) - len(absent)} pinned packages match {source}", **data)


def processes_holding(paths: list[str], proc_root: Path = Path("/proc")) -> dict[int, str]:
    """``pid -> command line`` of every process with one of ``paths`` open (read from /proc/<pid>/fd)."""
    wanted = {os.path.realpath(p) for p in paths}
    holders = {}
    for pid_dir in proc_root.glob("[0-9]*"):
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target in wanted:
                try:
                    cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                except OSError:
                    cmd = ""
                holders[int(pid_dir.name)] = cmd
                break
    return holders


def check_tpu_free(devices: list[str], holders: dict[int, str], lockfile_exists: bool, me: int) -> Check:
    """Whether another process holds the TPU chips (only one process may open them)."""
    others = {pid: cmd for pid, cmd in holders.items() if pid != me}
    if not devices:
        return Check("tpu", "info", "no TPU devices on this machine", data={"devices": []})
    if others:
        shown = "; ".join(f"pid {pid}: {cmd[:60] or '?'}" for pid, cmd in sorted(others.items()))
        return Check(
            "tpu",
            "fail",
            f"the TPU is held by another process ({shown})",
            "Stop that process (shut down the other notebook's kernel, or `kill PID`), then rerun. "
            f"If none is running, remove a stale {LIBTPU_LOCKFILE}.",
            {"devices": devices, "holders": others},
        )
    if lockfile_exists:
        return Check(
            "tpu",
            "warn",
            f"{len(devices)} TPU device files, none open, but {LIBTPU_LOCKFILE} exists",
            f"A crashed process left it: `rm {LIBTPU_LOCKFILE}` if no JAX process is running.",
            {"devices": devices},
        )
    return ok("tpu", f"{len(devices)} TPU device files, free", devices=devices)


def jax_probe(env_overrides: dict[str, str], timeout: float = 120.0) -> dict:
    """Start JAX in a child process (so that this one never holds the TPU) and report its backend."""
    code = (
        "import json, jax; d = jax.devices(); "
        "print(json.dumps({'backend': jax.default_backend(), 'count': len(d), "
        "'kinds': sorted({x.device_kind for x in d}), 'processes': jax.process_count()}))"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **env_overrides},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"JAX did not start within {timeout:.0f} s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"exit status {proc.returncode}"}
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    # a busy TPU is not an error for JAX: it logs why and falls back to the CPU
    busy = [ln.strip() for ln in proc.stderr.splitlines() if "already in use" in ln]
    if busy:
        probe["warning"] = busy[0]
    return probe


def check_jax(probe: dict, profile: str, jax_notebooks: bool, tpu_present: bool = False) -> Check:
    if "error" in probe:
        busy = "already in use" in probe["error"] or "TPU is held" in probe["error"]
        return Check(
            "jax",
            "fail",
            f"JAX did not start: {probe['error']}",
            "Another process holds the TPU: stop it (see the tpu row)."
            if busy
            else "Reinstall the pinned jax/jaxlib (pip install -r requirements-*.txt).",
            probe,
        )
    detail = f"backend {probe['backend']}, {probe['count']} devices ({', '.join(probe['kinds'])})"
    if probe.get("processes", 1) > 1:
        detail += f", {probe['processes']} processes"
    if profile == "smoke" and probe["count"] < 8:
        return Check(
            "jax",
            "fail",
            detail + "; the smoke profile needs 8 simulated CPU devices",
            "Set XLA_FLAGS=--xla_force_host_platform_device_count=8 before JAX starts.",
            probe,
        )
    if profile == "full" and tpu_present and probe["backend"] == "cpu":
        return Check(
            "jax",
            "fail",
            detail
            + f"; this machine has a TPU but JAX fell back to the CPU ({probe.get('warning', 'no reason given')})",
            "Another process holds the TPU (see the tpu row), or jax[tpu] is not installed: "
            "pip install -r requirements-tpu.txt.",
            probe,
        )
    if profile == "full" and jax_notebooks and probe["backend"] == "cpu":
        return Check(
            "jax",
            "warn",
            detail + "; no TPU: notebooks 01-03 run on the CPU, minutes per image",
            "Use a Cloud TPU VM (v5e) or a Colab TPU runtime for the JAX notebooks.",
            probe,
        )
    return ok("jax", detail, **probe)


def check_memory(available_bytes: int, need_gib: float, profile: str) -> Check:
    have = available_bytes / GIB
    detail = f"{have:.1f} GiB available, {need_gib:.0f} GiB needed ({profile})"
    if have < need_gib:
        return Check(
            "memory",
            "fail",
            detail,
            "Close other programs, choose fewer --notebooks, or use a larger machine.",
            {"available_gib": have, "need_gib": need_gib},
        )
    return ok("memory", detail, available_gib=round(have, 1), need_gib=need_gib)


def check_disk(free_bytes: int, need_gib: float, path: Path, profile: str) -> Check:
    have = free_bytes / GIB
    detail = f"{have:.1f} GiB free at {path}, {need_gib:.1f} GiB needed ({profile})"
    if resources.Disk(path, free_bytes, need_gib * GIB).short:
        return Check(
            "disk",
            "fail",
            detail,
            "Free some space, or put HF_HOME and build/ on a larger disk.",
            {"free_gib": have, "need_gib": need_gib},
        )
    return ok("disk", detail, free_gib=round(have, 1), need_gib=need_gib)


def check_cpu(machine: str, flags: dict[str, bool], cpu_notebooks: bool) -> Check:
    """What OpenVINO's CPU plugin does with this CPU (notebooks 04-06): ``flags`` are
    :func:`sdaccel.core.env.cpu_features` (x86 instruction sets, or ARM features on Linux ARM and
    Apple silicon), ``machine`` is ``platform.machine()``."""
    arch = env.architecture(flags)
    if arch == "arm" or (arch == "" and machine.lower() in ("arm64", "aarch64")):
        return check_arm_cpu(machine, flags, cpu_notebooks)
    if not flags:
        return Check(
            "cpu", "info", f"{machine} CPU; its instruction sets could not be read", data={"arch": machine}
        )
    return check_x86_cpu(machine, flags, cpu_notebooks)


def check_x86_cpu(machine: str, flags: dict[str, bool], cpu_notebooks: bool) -> Check:
    """An x86 CPU: which of VNNI / AMX speed up INT8, which of AVX-512 BF16 / AMX run bf16."""
    have = [env.CPU_FLAGS[k] for k, v in flags.items() if v]
    if not flags.get("avx2"):
        return Check(
            "cpu",
            "warn" if cpu_notebooks else "info",
            f"{machine} CPU without AVX2: OpenVINO falls back to slow kernels",
            "Use a machine with AVX2 or later (or an ARM CPU with FP16 arithmetic) for notebooks 04-06.",
            {"arch": machine, "flags": flags},
        )
    int8 = (
        "AMX"
        if flags.get("amx_int8")
        else "VNNI"
        if flags.get("avx512_vnni")
        else "AVX2 only (slower INT8 kernels than VNNI: small gains)"
    )
    bf16 = "AMX" if flags.get("amx_bf16") else "AVX-512 BF16" if flags.get("avx512_bf16") else "none (f32)"
    return ok(
        "cpu", f"{machine}: INT8 acceleration {int8}; bf16 {bf16}", arch=machine, flags=flags, have=have
    )


def check_arm_cpu(machine: str, flags: dict[str, bool], cpu_notebooks: bool) -> Check:
    """An ARM CPU (Linux ARM, Apple silicon): f16 where it has FP16 arithmetic, and OpenVINO's
    narrower INT8 support on ARM (:mod:`sdaccel.cpu.families`)."""
    data = {"arch": machine, "flags": flags}
    if not flags:
        return Check(
            "cpu",
            "info",
            f"{machine} CPU; its features could not be read. On ARM, OpenVINO runs f16 where the CPU has "
            "FP16 arithmetic, and INT8 is not expected to beat it",
            data=data,
        )
    tier = families.isa_tier(flags)
    detail = f"{machine}, {tier}: {families.tier_note(tier)}"
    if flags.get("bf16"):
        detail += " The CPU's BF16 is not used: OpenVINO runs bf16 on x86 only."
    data["tier"] = tier
    if flags.get("fp16"):
        return ok("cpu", detail, **data)
    return Check(
        "cpu",
        "warn" if cpu_notebooks else "info",
        detail,
        "Expect longer runs than the notebooks' text: without FP16 arithmetic OpenVINO runs f32 here.",
        data,
    )


def check_hub(reachable: bool | None, error: str, token: bool, profile: str) -> Check:
    """Whether the hub answers (None: offline mode is set). Only the full profile reads from it."""
    status = "fail" if profile == "full" else "info"
    token_text = "token present" if token else "no token (fine: the default models are not gated)"
    if reachable is None:
        return Check(
            "hub",
            status,
            f"HF_HUB_OFFLINE is set: the hub is not asked; {token_text}",
            "Unset HF_HUB_OFFLINE, or pre-download with `python -m sdaccel.tools.workshop.download`.",
            {"reachable": None, "token": token},
        )
    if not reachable:
        return Check(
            "hub",
            status,
            f"hub not reachable ({error}); {token_text}",
            "Check the network or proxy (HF_ENDPOINT); or copy a pre-downloaded HF cache and set HF_HUB_CACHE.",
            {"reachable": False, "token": token, "error": error},
        )
    return ok("hub", f"hub reachable; {token_text}", reachable=True, token=token)


def hub_reachable(endpoint: str, timeout: float = 3.0) -> tuple[bool | None, str]:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return None, "offline mode"

    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/api/models?limit=1", timeout=timeout) as r:
            return r.status == 200, f"HTTP {r.status}"
    except urllib.error.HTTPError as err:
        return err.code < 500, f"HTTP {err.code}"
    except Exception as err:  # DNS failure, refused, timeout: all mean "not reachable"
        return False, f"{type(err).__name__}: {getattr(err, 'reason', err)}"


def _cached_repo(cache_info, repo_id: str):
    for repo in getattr(cache_info, "repos", ()):
        if repo.repo_id == repo_id and repo.repo_type == "model":
            return repo
    return None


def cached_files(cache_info, repo_id: str) -> set[str]:
    """Paths (inside the repository) of the cached files of ``repo_id`` in the revision that a load
    by hub id finds: the one its ``main`` reference names (``from_pretrained("org/name")`` reads that
    one, offline too). A download that did not finish names none yet (the downloader writes the
    reference last), so nothing of it counts. ``cache_info`` is ``huggingface_hub.scan_cache_dir()``'s
    result (or None where there is no cache); a repository whose cache is damaged (a link to a
    missing file) is not in it at all."""
    repo = _cached_repo(cache_info, repo_id)
    for revision in getattr(repo, "revisions", ()):
        if "main" in revision.refs:
            return {Path(f.file_path).relative_to(revision.snapshot_path).as_posix() for f in revision.files}
    return set()


def unfinished_download(cache_info, repo_id: str) -> str:
    """What an interrupted download or copy of ``repo_id`` left in the cache, in words ('' for
    nothing): its unfinished files (``blobs/*.incomplete``), a revision that no ``main`` reference
    names yet, or the damage that made huggingface_hub skip the repository."""
    folder = f"models--{repo_id.replace('/', '--')}"
    pieces = [
        f
        for f in getattr(cache_info, "incomplete_files", ())
        if Path(f.file_path).parent.parent.name == folder
    ]
    if pieces:
        size = sum(f.size_on_disk for f in pieces) / 2**20
        return f"{len(pieces)} unfinished file(s) of an interrupted download, {size:.1f} MiB"
    repo = _cached_repo(cache_info, repo_id)
    if repo is not None and repo.revisions and not any("main" in r.refs for r in repo.revisions):
        return "a download that did not finish"
    damaged = [w for w in getattr(cache_info, "warnings", ()) if folder in str(w)]
    return f"a damaged cache: {damaged[0]}" if damaged else ""


def read_cache(models: dict[str, resources.Model], cache_info) -> tuple[dict[str, set[str]], dict[str, str]]:
    """For each model's repository: its cached files (:func:`cached_files`) and what an interrupted
    download left of it (:func:`unfinished_download`), from ``scan_cache_dir()``'s ``cache_info``."""
    repos = {m.repo_id for m in models.values()}
    return (
        {r: cached_files(cache_info, r) for r in repos},
        {r: unfinished_download(cache_info, r) for r in repos},
    )


def missing_from_cache(model: resources.Model, files: set[str]) -> list[str]:
    """The patterns of ``model`` that no cached file satisfies: for a pipeline, ``model_index.json``,
    and each component whose config or weight file (one, of the variant) is not there; for an
    explicit list, its config and one of its weight files (a LoRA repository holds one of the
    names the list allows, not all of them)."""

    if model.patterns is not None:  # an explicit list: its config, and one of its weight files
        missing = [p for p in model.patterns if p == "config.json" and not any(fnmatch(f, p) for f in files)]
        weights = [p for p in model.patterns if p.endswith(".safetensors")]
        if weights and not any(fnmatch(f, p) for f in files for p in weights):
            missing.append(" or ".join(weights))
        return missing
    components = model.components or model.parts
    missing = [] if "model_index.json" in files else ["model_index.json"]
    for component in components:
        if component in ("tokenizer", "tokenizer_2", "scheduler", "model_index"):
            continue
        weights = [p for p in allow_patterns([component], model.variant) if p.endswith(".safetensors")]
        has_weights = any(fnmatch(f, p) for f in files for p in weights)
        if not has_weights or f"{component}/config.json" not in files:
            missing.append(component)
    return missing


def check_models(
    models: dict[str, resources.Model],
    cached: dict[str, set[str]],
    hub_ok: bool,
    profile: str,
    unfinished: dict[str, str] | None = None,
) -> Check:
    """Whether the full profile's models are whole in the local cache (or at least downloadable).
    ``cached`` and ``unfinished`` are :func:`read_cache`'s; what an interrupted download left
    counts as a gap, which the next download closes."""
    unfinished = unfinished or {}
    gaps = {
        name: missing_from_cache(model, cached.get(model.repo_id, set()))
        + ([unfinished[model.repo_id]] if unfinished.get(model.repo_id) else [])
        for name, model in models.items()
    }
    gaps = {name: m for name, m in gaps.items() if m}
    if not models:
        return Check("models", "info", "the chosen notebooks read no hub model")
    if not gaps:
        return ok("models", f"cached: {', '.join(m.repo_id for m in models.values())}")
    shown = "; ".join(f"{models[n].repo_id} ({', '.join(m)})" for n, m in gaps.items())
    size = sum(models[n].download_gib for n in gaps)
    fix = f"python -m sdaccel.tools.workshop.download --models {' '.join(gaps)}   (about {size:.0f} GB)"
    if profile == "rehearsal":  # read offline from the stand-in: nothing would fetch them
        home = rehearsal_cache().parent.resolve()
        home = home.relative_to(REPO) if home.is_relative_to(REPO) else home
        fix = f"make hub-cache   (python -m sdaccel.tools.workshop.hub_cache {home})"
        return Check("models", "fail", f"not in the hub stand-in: {shown}", fix, {"missing": gaps})
    if profile != "full":
        return Check("models", "info", f"not cached: {shown}", fix, {"missing": gaps})
    # with the hub reachable the notebooks download them as they start: slow, but it works
    return Check("models", "warn" if hub_ok else "fail", f"not cached: {shown}", fix, {"missing": gaps})


def check_smoke_checkpoints(needed: list[str], repo: Path, tiny_root: Path, tiny_needed: list[str]) -> Check:
    """The trained checkpoints this repository ships (needed) and the random tiny ones (built on demand)."""
    # a pipeline, an adapter, or one model on its own (the trained TAESD: config.json and weights)
    shipped = ("model_index.json", "pytorch_lora_weights.safetensors", "config.json")
    missing = [c for c in needed if not any((repo / c / name).is_file() for name in shipped)]
    if missing:
        return Check(
            "checkpoints",
            "fail",
            f"missing: {', '.join(missing)}",
            "They ship with the repository: clone it again (git LFS is not used), or `git checkout -- checkpoints`.",
            {"missing": missing},
        )
    unbuilt = [n for n in tiny_needed if not (tiny_root / n / "model_index.json").is_file()]
    detail = f"{', '.join(needed) or 'none needed'} present"
    if unbuilt:
        return Check(
            "checkpoints",
            "warn",
            detail + f"; {', '.join(unbuilt)} not built yet (the runner builds them, a few seconds)",
            f"python -m sdaccel.tools.toys.random_checkpoints {tiny_root}",
            {"unbuilt": unbuilt},
        )
    return ok("checkpoints", detail, tiny=tiny_needed)


# ----------------------------------------------------------------------------------------------
# Gathering the real inputs and running everything
# ----------------------------------------------------------------------------------------------


def smoke_checkpoints(stems: list[str]) -> tuple[list[str], list[str]]:
    """The checkpoints the smoke profile of these notebooks reads (``sdaccel.course.run_profiles.SMOKE``):
    folders of this repository such as ``checkpoints/tiny-shapes-sdxl``, and the names of random
    tiny ones that ``sdaccel.tools.toys.random_checkpoints`` builds."""

    repo_dirs, tiny = set(), set()
    for stem in stems:
        repo_dirs |= set(
            re.findall(r"\{repo\}/(checkpoints/[\w\-]+)", repr(run_profiles.SMOKE.get(stem, {})))
        )
        tiny |= run_profiles.tiny_checkpoints_needed(stem)
    return sorted(repo_dirs), sorted(tiny)


def run_checks(
    profile: str, notebooks: list[str] | None = None, requirements: Path | None = None
) -> list[Check]:

    resources.check_profile(profile)
    chosen = resources.select(notebooks)
    numbers = {nb.stem.split("_")[0] for nb in chosen}
    jax_nbs, cpu_nbs = bool(numbers & JAX_NOTEBOOKS), bool(numbers - JAX_NOTEBOOKS)
    devices = sorted(p for g in TPU_DEVICE_GLOBS for p in glob.glob(g))
    if requirements is None:
        requirements = REPO / ("requirements-tpu.txt" if devices else "requirements-cpu.txt")
    required = (JAX_PACKAGES if jax_nbs else ()) + (CPU_PACKAGES if cpu_nbs and not devices else ())
    checks = [check_python(sys.version_info[:3])]
    if requirements.is_file():
        pins = parse_pins(requirements.read_text())
        checks.append(check_versions(pins, env.package_versions(tuple(pins)), required, requirements.name))
    else:
        installed = env.package_versions(required)
        checks.append(check_versions({}, installed, required, "requirements-cpu.txt"))
    checks.append(
        check_tpu_free(
            devices,
            processes_holding(devices) if devices else {},
            os.path.exists(LIBTPU_LOCKFILE),
            os.getpid(),
        )
    )
    if checks[-1].status != "fail":
        checks.append(check_jax(jax_probe(PROFILE_ENV[profile]), profile, jax_nbs, bool(devices)))
    from huggingface_hub import constants, get_token, scan_cache_dir

    models = resources.models_for(chosen)
    try:
        cache_info = scan_cache_dir(rehearsal_cache() if profile == "rehearsal" else None)
    except Exception:  # no cache folder yet: nothing is cached
        cache_info = None
    cached, unfinished = read_cache(models, cache_info)
    available = psutil.virtual_memory().available
    checks.append(check_cpu(platform.machine(), env.cpu_features(), cpu_nbs))
    checks.append(check_memory(available, resources.totals(chosen, profile).ram_gib, profile))
    to_download = download_gib(models, cached) if profile == "full" else 0.0
    checks.append(
        check_disk(
            free_bytes(REPO),
            resources.totals(chosen, profile).disk_gib + to_download,
            REPO,
            profile,
        )
    )
    # the rehearsal reads nothing from the hub: no request that would wait for a time-out offline
    reachable, error = (None, "") if profile == "rehearsal" else hub_reachable(constants.ENDPOINT)
    token = bool(get_token())
    if profile == "full":  # the smoke profile reads no hub model: its gaps are listed as full:* below
        checks.append(check_hub(reachable, error, token, profile))
        checks.append(check_models(models, cached, bool(reachable), profile, unfinished))
    if profile == "rehearsal":  # offline: the stand-in, never the hub
        checks.append(check_models(models, cached, False, profile, unfinished))
    repo_dirs, tiny = smoke_checkpoints([nb.stem for nb in chosen])
    checks.append(check_smoke_checkpoints(repo_dirs, REPO, REPO / "build" / "checkpoints", tiny))
    if profile == "smoke":
        checks += full_profile_gaps(
            chosen, models, reachable, error, token, cached, available, devices, unfinished
        )
    return checks


def rehearsal_cache() -> Path:
    """The hub cache the rehearsal's kernels read: the stand-in (``run_profiles.stand_in_cache`` of
    their environment, the one rule the kernels' own check follows)."""

    return run_profiles.stand_in_cache(run_profiles.KERNEL_ENV["rehearsal"])


def download_gib(models: dict[str, resources.Model], cached: dict[str, set[str]]) -> float:
    """The planned download size of the models that are not complete in the cache."""
    return sum(m.download_gib for m in models.values() if missing_from_cache(m, cached.get(m.repo_id, set())))


def full_profile_gaps(
    chosen, models, reachable, error, token, cached, available_bytes, tpu_devices, unfinished=None
) -> list[Check]:
    """What the full profile would still lack here, as ``info`` rows named ``full:<check>``."""
    need = resources.totals(chosen, "full")
    numbers = {nb.stem.split("_")[0] for nb in chosen}
    candidates = [
        check_hub(reachable, error, token, "full"),
        check_models(models, cached, bool(reachable), "full", unfinished),
        check_memory(available_bytes, need.ram_gib, "full"),
        check_disk(free_bytes(REPO), need.disk_gib + download_gib(models, cached), REPO, "full"),
    ]
    if numbers & JAX_NOTEBOOKS - {"00"} and not tpu_devices:
        candidates.append(
            Check(
                "tpu",
                "warn",
                "no TPU here: notebooks 01-03 would run the real SDXL on the CPU, minutes per image",
                "Run the TPU notebooks on a Cloud TPU VM (v5e) or a Colab TPU runtime.",
            )
        )
    gaps = []
    for c in candidates:
        if c.status in ("fail", "warn"):
            gaps.append(Check(f"full:{c.name}", "info", c.detail, c.fix, c.data))
    if not gaps:
        gaps.append(
            Check("full:all", "info", "the full profile's hub, models, memory and disk are ready too")
        )
    return gaps


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        status = "FAIL" if c.status == "fail" else c.status
        lines.append(f"{c.name:<{width}}  {status:<4}  {c.detail}")
        if c.fix and c.status != "ok":
            lines.append(f"{'':<{width}}        fix: {c.fix}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default="smoke", choices=resources.PROFILES)
    parser.add_argument(
        "--notebooks", nargs="*", help=f"notebook numbers ({' '.join(resources.NOTEBOOKS)}); default all"
    )
    parser.add_argument(
        "--requirements", type=Path, help="the requirements file to compare with (default: by platform)"
    )
    parser.add_argument("--json", type=Path, help="also write the checks to this JSON file")
    args = parser.parse_args(argv)
    try:
        resources.select(args.notebooks)
    except ValueError as err:
        parser.error(str(err))
    checks = run_checks(args.profile, args.notebooks, args.requirements)
    blockers = [c.name for c in checks if c.status == "fail"]
    print(table(checks))
    print(
        f"\n{'READY' if not blockers else 'NOT READY'} for the {args.profile} profile"
        + (f": fix {', '.join(blockers)}" if blockers else "")
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "profile": args.profile,
            "notebooks": args.notebooks or list(resources.NOTEBOOKS),
            "blockers": blockers,
            "checks": [asdict(c) for c in checks],
        }
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2, default=str))
        tmp.replace(args.json)
    return 1 if blockers else 0


if __name__ == "__main__":
    sys.exit(main())
