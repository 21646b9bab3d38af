"""LoRA adapters on the OpenVINO export's side (``sdaccel.cpu.lora_export``): the checkpoint's
targets read from the safetensors headers, an adapter checked against them, fused into the PyTorch
module before its conversion, and recorded in the export's manifest."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from sdaccel.core.lora_files import LoraError  # noqa: E402
from sdaccel.cpu import lora_export  # noqa: E402


def _to_q(targets: dict) -> tuple[str, tuple[int, ...]]:
    name = next(n for n in sorted(targets["unet"]) if n.endswith("attn1.to_q"))
    return name, targets["unet"][name]


def _lora_file(path, layer: str, shape: tuple[int, ...], rank: int = 2):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    down = rng.standard_normal((rank, shape[1]), np.float32)
    up = rng.standard_normal((shape[0], rank), np.float32)
    save_file({f"unet.{layer}.lora.down.weight": down, f"unet.{layer}.lora.up.weight": up}, str(path))
    return up @ down


def test_checkpoint_targets_are_the_weights_of_the_checkpoint(tiny_sd15):
    from sdaccel.core.checkpoint import open_weights

    targets = lora_export.checkpoint_targets(tiny_sd15)
    assert {"unet", "text_encoder"} <= set(targets)
    name, shape = _to_q(targets)
    assert open_weights(tiny_sd15, "unet").shape(f"{name}.weight") == shape
    assert not any(n.startswith("text_model.") for n in targets["text_encoder"])


def test_an_adapter_is_checked_fused_and_recorded(tiny_sd15, tmp_path):
    import torch
    from diffusers import UNet2DConditionModel

    name, shape = _to_q(lora_export.checkpoint_targets(tiny_sd15))
    delta = _lora_file(tmp_path / "lora.safetensors", name, shape)
    adapters = lora_export.check_lora(tiny_sd15, [(tmp_path / "lora.safetensors", 0.5)])
    unet = UNet2DConditionModel.from_pretrained(tiny_sd15 / "unet", dtype=torch.float32).eval()
    before = unet.get_submodule(name).weight.detach().clone()
    assert lora_export.fuse_into_torch(unet, "unet", adapters) == 1
    after = unet.get_submodule(name).weight.detach()
    np.testing.assert_allclose((after - before).numpy(), 0.5 * delta, rtol=1e-4, atol=1e-5)
    (settings,) = lora_export.lora_settings(adapters)
    assert settings["scale"] == 0.5 and settings["file"].endswith("lora.safetensors")
    assert settings["size"] == (tmp_path / "lora.safetensors").stat().st_size
    assert lora_export.lora_settings([]) is None


def test_one_adapter_file_is_recorded_alike_however_its_path_is_written(tiny_sd15, tmp_path, monkeypatch):
    """A notebook hands its kernel ``../checkpoints/...`` and a test the absolute path of the same
    file: the export that one made must be the export the other reuses."""
    name, shape = _to_q(lora_export.checkpoint_targets(tiny_sd15))
    _lora_file(tmp_path / "lora.safetensors", name, shape)
    monkeypatch.chdir(tmp_path)
    relative = lora_export.lora_settings(lora_export.check_lora(tiny_sd15, [("lora.safetensors", 1.0)]))
    absolute = lora_export.lora_settings(
        lora_export.check_lora(tiny_sd15, [(tmp_path / "lora.safetensors", 1.0)])
    )
    assert relative == absolute and relative[0]["file"] == str((tmp_path / "lora.safetensors").resolve())


def test_an_adapter_of_another_shape_is_refused(tiny_sd15, tmp_path):
    name, (rows, cols) = _to_q(lora_export.checkpoint_targets(tiny_sd15))
    _lora_file(tmp_path / "wrong.safetensors", name, (rows + 1, cols))
    with pytest.raises(LoraError):
        lora_export.check_lora(tiny_sd15, [(tmp_path / "wrong.safetensors", 1.0)])
