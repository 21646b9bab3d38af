"""The three environment files must agree on every package they share, and keep the known traps out."""

import re
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
