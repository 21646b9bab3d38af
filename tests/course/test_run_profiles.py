"""sdaccel.course.run_profiles: the smoke and full profiles, the notebooks' start cell, make lab."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdaccel.course import run_profiles
from sdaccel.tools.workshop import discovery, output_checks

#: The notebooks' own smoke settings.
SMOKE = dict(run_profiles.SMOKE)


def test_every_notebook_has_smoke_settings_and_only_there():
    """One source: sdaccel.course.run_profiles.SMOKE, not the notebooks' metadata."""
    stems = [nb.stem for nb in discovery.discover()]
    assert sorted(SMOKE) == sorted(stems)
    for nb in discovery.discover():
        assert "profiles" not in json.loads(nb.read_text())["metadata"].get("sdaccel", {}), (
            f"{nb.name} keeps smoke settings in its metadata: they live in sdaccel/course/run_profiles.py"
        )


def test_the_active_profile_comes_from_the_environment():
    assert run_profiles.active_profile({}) == "full"
    assert run_profiles.active_profile({"SDACCEL_PROFILE": "smoke"}) == "smoke"
    with pytest.raises(ValueError, match=r"Unknown profile 'fast'.*SDACCEL_PROFILE=smoke"):
        run_profiles.active_profile({"SDACCEL_PROFILE": "fast"})
    smoke = run_profiles.KERNEL_ENV["smoke"]
    assert smoke["SDACCEL_PROFILE"] == "smoke" and smoke["JAX_PLATFORMS"] == "cpu"
    assert "agg" not in smoke["MPLBACKEND"], "agg leaves every plt.show() without an output"


def test_devices_are_described_without_starting_jax():
    line = run_profiles.describe_devices(run_profiles.KERNEL_ENV["smoke"])
    assert line.startswith("JAX on the CPU with 8 simulated device(s); CPU: ")
    assert run_profiles.describe_devices({"JAX_PLATFORMS": "cpu"}).startswith(
        "JAX on the CPU, one device unless the notebook simulates more; CPU: "
    )


def test_start_applies_the_same_values_as_papermill(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SDACCEL_PROFILE", "smoke")
    monkeypatch.setenv("SDACCEL_CHECKPOINTS", str(tmp_path))
    namespace = {"MODEL_ID": "stabilityai/stable-diffusion-xl-base-1.0", "STEPS": 20, "SEED": 0}
    started = run_profiles.start("01_sdxl_in_jax", namespace)
    expected = run_profiles.overrides("01_sdxl_in_jax", "smoke", tmp_path, relative_to=os.getcwd())
    assert started.overrides == expected and started.profile == "smoke"
    # relative to the kernel's folder (the notebook's), as papermill injects it
    assert namespace["MODEL_ID"] == os.path.relpath(run_profiles.REPO / "checkpoints" / "tiny-shapes-sdxl")
    assert namespace["HEIGHT"] == 32 and namespace["SEED"] == 0, "only the profile's keys change"
    again = dict(namespace)
    run_profiles.start("01_sdxl_in_jax", again)  # after papermill's injection: nothing changes
    assert again == namespace
    out = capsys.readouterr().out
    assert out.startswith("Profile smoke: 12 settings swapped for the 1 M-parameter tiny-shapes checkpoints.")
    assert "Devices: JAX on the CPU with" in out or "Devices: JAX on" in out

    monkeypatch.delenv("SDACCEL_PROFILE")
    untouched = {"MODEL_ID": "stabilityai/stable-diffusion-xl-base-1.0"}
    assert run_profiles.start("01_sdxl_in_jax", untouched).overrides == {}
    assert untouched == {"MODEL_ID": "stabilityai/stable-diffusion-xl-base-1.0"}
    assert capsys.readouterr().out.startswith("Profile full: the parameters cell as written")


def test_overrides_fill_the_folders_and_the_full_profile_has_none(tmp_path, monkeypatch):
    monkeypatch.setitem(
        run_profiles.SMOKE,
        "99_x",
        {"MODEL_ID": "{checkpoints}/tiny-a", "PATHS": ["{repo}/b", "{checkpoints}/c"], "STEPS": 2},
    )
    assert run_profiles.overrides("99_x", "smoke", tmp_path) == {
        "MODEL_ID": f"{tmp_path}/tiny-a",
        "PATHS": [f"{run_profiles.REPO}/b", f"{tmp_path}/c"],
        "STEPS": 2,
    }
    real = run_profiles.overrides("01_sdxl_in_jax", "smoke", tmp_path)
    assert real["MODEL_ID"] == f"{run_profiles.REPO}/checkpoints/tiny-shapes-sdxl" and real["HEIGHT"] == 32
    assert run_profiles.overrides("01_sdxl_in_jax", "full") == {}
    with pytest.raises(KeyError, match="No smoke settings for '98_nope'"):
        run_profiles.overrides("98_nope", "smoke")
    with pytest.raises(ValueError, match="Unknown profile 'fast'"):
        run_profiles.overrides("01_sdxl_in_jax", "fast")


def test_tiny_checkpoints_needed_are_the_checkpoints_folder_names(monkeypatch):
    monkeypatch.setitem(
        run_profiles.SMOKE, "99_x", {"MODEL_ID": "{checkpoints}/tiny-a", "OTHER": ["{checkpoints}/tiny-b", 3]}
    )
    assert run_profiles.tiny_checkpoints_needed("99_x") == {"tiny-a", "tiny-b"}
    assert run_profiles.tiny_checkpoints_needed("98_unknown") == set()


def test_default_checkpoints_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(run_profiles.CHECKPOINTS_VAR, str(tmp_path))
    assert run_profiles.default_checkpoints() == tmp_path
    monkeypatch.delenv(run_profiles.CHECKPOINTS_VAR)
    assert run_profiles.default_checkpoints() == run_profiles.REPO / "build" / "checkpoints"


def test_make_lab_starts_jupyter_with_the_smoke_kernel_environment():
    argv, environ = run_profiles.lab_command("smoke", ["--no-browser"], environ={"PATH": "/usr/bin"})
    assert argv[1:] == ["lab", "--no-browser", str(run_profiles.REPO / "notebooks")]
    assert argv[0].endswith("jupyter")
    assert environ["SDACCEL_PROFILE"] == "smoke" and environ["JAX_PLATFORMS"] == "cpu"
    assert environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"
    assert environ["PATH"] == "/usr/bin", "the rest of the environment is kept"
    with pytest.raises(ValueError, match="Unknown profile"):
        run_profiles.lab_command("fast", [])


def test_a_busy_tpu_error_comes_with_the_fix():
    busy = RuntimeError(
        "Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid 4242. "
        "Not attempting to load libtpu.so in this process."
    )
    assert run_profiles.tpu_busy_hint(busy).startswith("Only one process at a time can hold a TPU VM's chips")
    assert "Kernel > Shut Down Kernel" in run_profiles.tpu_busy_hint(busy)
    assert run_profiles.tpu_busy_hint(RuntimeError("open(/dev/vfio/0): Device or resource busy")) is not None
    assert (
        run_profiles.tpu_busy_hint(RuntimeError("Unable to initialize backend 'tpu': no TPU found")) is None
    )


FORK_PROBE = """
import os, sys
os.register_at_fork(before=lambda: sys.stdout.write("forked\\n"))
import jax, torch, openvino as ov
jax.numpy.zeros(1).block_until_ready()
ov.convert_model(torch.nn.Linear(2, 2), example_input=torch.zeros(1, 2))
print("converted")
"""


def test_the_smoke_kernel_converts_with_openvino_without_forking():
    """OpenVINO's telemetry sends from a forked process at every ``ov.convert_model``: after JAX has
    started its threads that fork can deadlock. The smoke kernels' environment turns it off; without
    that switch (and with no opt-out on file) the same conversion forks."""

    def run(env):
        done = subprocess.run(
            [sys.executable, "-c", FORK_PROBE], env=env, capture_output=True, text=True, timeout=120
        )
        assert "converted" in done.stdout, done.stderr[-2000:]
        return done.stdout

    base = {k: v for k, v in os.environ.items() if k != "CI"}
    assert "forked" not in run({**base, **run_profiles.KERNEL_ENV["smoke"]})
    consent = Path.home() / "intel" / "openvino_telemetry"
    if not (consent.is_file() and consent.read_text().strip() == "0"):
        assert "forked" in run(base), "the conversion no longer forks: the switch may no longer be needed"


def parameters_cell(nb: Path) -> str:
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    (params,) = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    return "".join(params["source"])


#: What the rehearsal keeps from the full profile: the models, their files, dtypes and recipes.
KEPT_IN_REHEARSAL = {
    "MODEL_ID", "VARIANT", "DTYPE", "WEIGHT_DTYPE", "VARIANTS", "SPEEDUPS", "CPU_MODEL_ID", "CPU_LORA",
    "FAST_VAE", "PRECISION", "INT8_VARIANT", "JAX_MODEL_ID", "JAX_VARIANT", "JAX_DTYPE", "JAX_LORA",
    "QUALITY_CHECKPOINT", "ADHERENCE_CHECKPOINT", "ADHERENCE_LORA", "QUANT_MEMORY_GB",
}  # fmt: skip


def test_every_rehearsal_override_names_a_parameter_of_its_notebook():
    import re

    stems = [nb.stem for nb in discovery.discover()]
    assert sorted(run_profiles.REHEARSAL) == sorted(stems)
    for nb in discovery.discover():
        params = parameters_cell(nb)
        for key in run_profiles.REHEARSAL[nb.stem]:
            assert re.search(rf"^{key} =", params, re.M), (
                f"rehearsal sets {key}, which {nb.name} does not define"
            )


def test_the_rehearsal_keeps_the_full_profiles_models_and_recipes():
    for stem, values in run_profiles.REHEARSAL.items():
        assert not set(values) & KEPT_IN_REHEARSAL, (
            f"{stem}: the rehearsal swaps {set(values) & KEPT_IN_REHEARSAL}"
        )
        assert "{checkpoints}" not in repr(values) and "{repo}" not in repr(values), (
            "the notebooks' own hub ids"
        )
    jax_sizes = [(v.get("HEIGHT"), v.get("WIDTH")) for k, v in run_profiles.REHEARSAL.items() if k < "04"]
    assert set(jax_sizes) == {(None, None), (512, 512)}, "512x512 for the JAX SDXL notebooks"


def test_each_rehearsal_override_has_a_reason():
    """A ``# reason`` on the override's line or on the line above it (one for a multi-line value)."""
    import ast
    import inspect

    source = inspect.getsource(run_profiles).splitlines()
    tree = ast.parse("\n".join(source))
    (node,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "REHEARSAL"
    ]
    for notebook in node.value.values:
        for key in notebook.keys:
            line, above = source[key.lineno - 1], source[key.lineno - 2]
            assert "#" in line or above.strip().startswith("#"), f"no reason for {line.strip()}"


def test_the_rehearsals_kernels_read_the_stand_in_offline(monkeypatch, capsys, tmp_path):
    env = run_profiles.KERNEL_ENV["rehearsal"]
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HOME"] == str(run_profiles.STAND_IN_HOME)
    assert env["SDACCEL_PROFILE"] == "rehearsal" and "XLA_FLAGS" not in env, "JAX's own devices, as in full"

    monkeypatch.setenv("SDACCEL_PROFILE", "rehearsal")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(
        FileNotFoundError,
        match=r"holds none: write it first with `python -m sdaccel.tools.workshop.hub_cache",
    ):
        run_profiles.start("01_sdxl_in_jax", {})
    marker = tmp_path / "hub" / "models--org--name" / ".sdaccel-stand-in.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    namespace = {"HEIGHT": 1024, "MODEL_ID": "stabilityai/stable-diffusion-xl-base-1.0"}
    started = run_profiles.start("01_sdxl_in_jax", namespace)
    assert started.random_weights and namespace["HEIGHT"] == 512
    assert namespace["MODEL_ID"] == "stabilityai/stable-diffusion-xl-base-1.0", "the notebooks' own hub id"
    out = capsys.readouterr().out
    assert out.startswith("Profile rehearsal: the full profile at real size, 5 settings swapped")
    assert "random weights" in out and "pictures are noise" in out
    assert not any(p in out.lower() for p in output_checks.BANNED_PHRASES)
    assert not run_profiles.Started("full", {}, "").random_weights
