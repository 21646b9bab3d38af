"""Fixtures of the CPU room's tests: the tiny UNets as f32 OpenVINO IRs (test_quantize.py,
test_ir_parts.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

#: The tiny checkpoints that tests/conftest.py builds (ensure_checkpoint).
CHECKPOINTS = Path(__file__).resolve().parents[2] / "build" / "checkpoints"


def _unet_inputs(config: dict, timestep: int, rng: np.random.Generator, size: int = 8) -> dict:
    sample = {
        "sample": rng.standard_normal((2, 4, size, size), dtype=np.float32),
        "timestep": np.array([timestep], dtype=np.int64),
        "encoder_hidden_states": rng.standard_normal(
            (2, 77, config["cross_attention_dim"]), dtype=np.float32
        ),
    }
    if config.get("addition_embed_type") == "text_time":
        pooled = config["projection_class_embeddings_input_dim"] - 6 * config["addition_time_embed_dim"]
        sample["text_embeds"] = rng.standard_normal((2, pooled), dtype=np.float32)
        sample["time_ids"] = np.tile(np.array([[64, 64, 0, 0, 64, 64]], np.float32), (2, 1))
    return sample


@pytest.fixture(scope="module")
def convert(tmp_path_factory):
    """name -> (name, f32 IR path, a few UNet inputs): the tiny UNet converted once per module with
    the export's port names."""
    ov = pytest.importorskip("openvino")
    from diffusers import UNet2DConditionModel

    from sdaccel.cpu.convert import convert_unet
    from sdaccel.tools.toys.random_checkpoints import ensure_tiny

    cache = {}

    def get(name: str):
        if name not in cache:
            unet = UNet2DConditionModel.from_pretrained(ensure_tiny(CHECKPOINTS, name) / "unet").eval()
            xml = tmp_path_factory.mktemp("ir") / "unet_f32.xml"
            ov.save_model(convert_unet(unet, example_size=8), str(xml), compress_to_fp16=False)
            rng = np.random.default_rng(0)
            cache[name] = name, xml, [_unet_inputs(dict(unet.config), t, rng) for t in (999, 500, 1)]
        return cache[name]

    return get


@pytest.fixture(params=["tiny-sd15", "tiny-sdxl"])
def unet_ir(request, convert):
    return convert(request.param)
