"""The three environment files must agree on every package they share, and keep the known traps out."""

import functools
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^\s*(?:-\s*)?([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*==\s*([^\s#;]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            name = normalize(match.group(1))
            assert name not in found, f"{path.name} pins {name} twice"
            found[name] = match.group(2)
    return found


CPU, TPU, CONDA = (
    pins(REPO / f) for f in ("requirements-cpu.txt", "requirements-tpu.txt", "environment.yml")
)


@pytest.mark.parametrize(("left", "right"), [("cpu", "tpu"), ("cpu", "conda"), ("tpu", "conda")])
def test_shared_pins_agree(left, right):
    files = {"cpu": CPU, "tpu": TPU, "conda": CONDA}
    a, b = files[left], files[right]
    shared = set(a) & set(b)
    assert shared, "the files share no pins at all: the parser is broken"
    assert {n: (a[n], b[n]) for n in shared if a[n] != b[n]} == {}


def test_every_requirement_is_pinned_exactly():
    for name in ("requirements-cpu.txt", "requirements-tpu.txt"):
        for line in (REPO / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                assert PIN.match(line), f"{name}: {line!r} is not pinned with =="


def test_core_packages_are_pinned():
    for package in (
        "jax",
        "flax",
        "diffusers",
        "openvino",
        "nncf",
        "papermill",
        "nbval",
        "jupyterlab",
        "matplotlib",
    ):
        assert package in CPU, package
    assert CPU["jax"] == "0.10.2" and CPU["flax"] == "0.12.8"  # newest for Python 3.11


def test_the_demo_pins_gradio_beside_a_pillow_it_accepts():
    """gradio 6.x requires pillow<13: the demo of notebook 07 holds pillow at 12.x everywhere it
    is pinned (Colab keeps its own pillow, which the resolution test checks against the cap)."""
    colab = pins(REPO / "requirements-colab.txt")
    assert CPU["gradio"] == CONDA["gradio"] == colab["gradio"] == "6.31.0"
    for files in (CPU, TPU, CONDA):
        assert files["pillow"] == "12.3.0"


def test_known_traps_are_left_out():
    assert "torch" not in TPU, "the TPU environment must not pull PyTorch"
    assert CPU["torch"] == "2.13.0", "any other torch version downloads a multi-GB CUDA build here"
    for files in (CPU, TPU, CONDA):
        assert "optimum-intel" not in files  # caps huggingface-hub below what diffusers 0.42 needs
        assert "torchvision" not in files  # PyPI's build fails to import beside the CPU torch
    assert TPU["jax"] == CPU["jax"]
    assert "jax[tpu]" in (REPO / "requirements-tpu.txt").read_text()


def test_the_pinned_peft_adds_a_text_encoder_lora_the_documented_way():
    """transformers' ``add_adapter`` refuses the pinned peft (it asks for a release that does not
    exist yet); peft's ``inject_adapter_in_model``, which requirements-cpu.txt names instead, adds
    the LoRA. When a newer peft is pinned and ``add_adapter`` works, this fails: then update the
    comment in requirements-cpu.txt and PeftLora in tests/conftest.py."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    assert "inject_adapter_in_model" in (REPO / "requirements-cpu.txt").read_text()
    folder = REPO / "checkpoints" / "tiny-shapes-sd15" / "text_encoder"
    encoder = transformers.CLIPTextModel.from_pretrained(str(folder), dtype=torch.float32)
    config = peft.LoraConfig(r=2, lora_alpha=2, target_modules=["q_proj", "v_proj"])
    with pytest.raises(ValueError, match="version >= 0.22"):
        encoder.add_adapter(config)
    peft.inject_adapter_in_model(config, encoder)
    assert any(isinstance(m, peft.tuners.lora.LoraLayer) for m in encoder.modules())


# ----------------------------------------------------------------------------------------------
# Resolution for every platform the README names, with uv's resolver: `uv pip compile
# --python-platform` evaluates the environment markers for the target (`pip --platform` evaluates
# them for the running machine, so it would keep libtpu for macOS here). Against the public index,
# PyPI, read from uv's cache first (--offline): the pins are exact, so a cached answer stays right.
# Where the cache lacks something, uv asks PyPI; with PyPI unreachable too, the test skips and says
# why. One or two uv calls per file, platform and Python: well under a second each from the cache.
# ----------------------------------------------------------------------------------------------

INDEX = "https://pypi.org/simple/"
# the oldest platform tag that every pinned wheel accepts, per platform the README names
PLATFORMS = {
    # glibc 2.31 (Ubuntu 20.04, Debian 11): libtpu 0.0.42.1 publishes manylinux_2_31 wheels only
    "linux-x86_64": ("x86_64-manylinux_2_31", {}),
    # glibc 2.35 (Ubuntu 22.04, Debian 12): openvino 2026.4.1 publishes manylinux_2_35 aarch64 wheels only
    "linux-aarch64": ("aarch64-manylinux_2_35", {}),
    # macOS 14 on Apple silicon: torch 2.13.0's oldest macOS wheel is macosx_14_0_arm64
    "macos-arm64": ("aarch64-apple-darwin", {"MACOSX_DEPLOYMENT_TARGET": "14.0"}),
    # Windows x64, for the CPU notebooks without WSL
    "windows-x86_64": ("x86_64-pc-windows-msvc", {}),
}
RESOLUTIONS = [
    *(("requirements-cpu.txt", platform, "3.11") for platform in PLATFORMS),
    *(("requirements-colab.txt", platform, "3.11") for platform in PLATFORMS),
    # Colab's own Python (3.12 at the time of writing)
    ("requirements-colab.txt", "linux-x86_64", "3.12"),
    # requirements-tpu.txt is for Cloud TPU VMs and Colab TPU runtimes, which are Linux x86-64:
    # jax[tpu] pulls libtpu, which exists for nothing else. 3.11 is the README's; 3.12 is Colab's.
    ("requirements-tpu.txt", "linux-x86_64", "3.11"),
    ("requirements-tpu.txt", "linux-x86_64", "3.12"),
]


def uv_binary() -> str:
    try:
        import uv  # requirements-cpu.txt pins it
    except ImportError:
        found = shutil.which("uv")
        if not found:
            pytest.skip("uv is not installed (requirements-cpu.txt pins it: make setup)")
        return found
    return uv.find_uv_bin()


@functools.cache
def index_unreachable() -> str | None:
    """Why PyPI cannot be read from here, or None when it can."""
    try:
        urllib.request.urlopen(INDEX, timeout=5).close()
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return None


def resolve(requirements: str, platform: str, python: str, out: Path) -> dict[str, str]:
    """``name -> version`` of everything uv resolves for that platform and Python: from uv's cache
    first (--offline, well under a second), from the index where the cache lacks something."""
    target, env = PLATFORMS[platform]
    command = [
        *(uv_binary(), "pip", "compile", "--quiet", "--no-header", "--no-annotate"),
        *("--python-platform", target, "--python-version", python),
        *("--default-index", INDEX),  # the public index, whatever the machine's configuration says
        *(str(REPO / requirements), "-o", str(out)),
    ]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k == "UV_CACHE_DIR"}
    environment.update(env, UV_NO_CONFIG="1")

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*command, *extra], capture_output=True, text=True, timeout=300, env=environment
        )

    proc = run("--offline")
    if proc.returncode and "network was disabled" in proc.stderr:  # the cache lacks something
        if unreachable := index_unreachable():
            pytest.skip(
                f"needs the package index {INDEX}, unreachable ({unreachable}), and uv's cache lacks it"
            )
        proc = run()
    assert proc.returncode == 0, (
        f"{requirements} does not resolve for {platform}, Python {python}:\n{proc.stderr}"
    )
    return pins(out)


@pytest.mark.needs_index
@pytest.mark.parametrize(
    ("requirements", "platform", "python"),
    RESOLUTIONS,
    ids=[f"{r.removeprefix('requirements-').removesuffix('.txt')}-{p}-py{v}" for r, p, v in RESOLUTIONS],
)
def test_requirements_resolve_for_every_named_platform(requirements, platform, python, tmp_path):
    got = resolve(requirements, platform, python, tmp_path / "resolved.txt")
    wanted = pins(REPO / requirements)
    if requirements == "requirements-tpu.txt":
        assert "libtpu" in got, "jax[tpu] pulls libtpu"
        assert "torch" not in got, "nothing in the TPU file may pull PyTorch"
    else:  # the CPU and Colab files carry notebook 07's demo, with a pillow that gradio accepts
        assert got.get("gradio") == CPU["gradio"], f"the demo's gradio must resolve for {platform}"
        assert int(got["pillow"].split(".")[0]) < 13, "gradio 6.x requires pillow<13"
    # every pin holds, except libtpu off Linux x86-64, where its marker leaves it out
    if platform != "linux-x86_64":
        assert "libtpu" not in got, f"libtpu has no {platform} wheels: its marker must leave it out"
        wanted.pop("libtpu", None)
    assert {
        name: (version, got.get(name)) for name, version in wanted.items() if got.get(name) != version
    } == {}


def test_libtpu_is_marked_for_linux_x86_64_only():
    (line,) = [
        li for li in (REPO / "requirements-cpu.txt").read_text().splitlines() if li.startswith("libtpu")
    ]
    assert line.endswith('; sys_platform == "linux" and platform_machine == "x86_64"'), line


def test_setup_gives_uv_what_pip_is_configured_with_and_torch_from_the_cpu_index():
    """uv reads no pip configuration: without the find-links folders that pip's configuration names
    (where a machine keeps its CPU torch), uv would fetch PyPI's multi-GB CUDA torch where pip does not."""
    make = (REPO / "Makefile").read_text()
    assert "pip config list" in make and "(find-links|constraint)" in make
    assert "TORCH_INDEX ?= https://download.pytorch.org/whl/cpu" in make
    assert "--no-deps --index-url $(TORCH_INDEX) torch==$(TORCH_PIN)" in make  # torch alone
    assert 'source="--no-index --find-links $(abspath $(WHEELS))"' in make  # make setup WHEELS=...
    assert re.search(r"^UV_PIN = .*requirements-cpu\.txt\)$", make, re.M) and "uv" in CPU
