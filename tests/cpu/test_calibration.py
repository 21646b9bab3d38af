"""Calibration data for INT8: the shipped prompts, the bounded uniform reservoir, the UNet inputs
collected from a pipeline (in memory or streamed to disk), and the real path on tiny SDXL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import quantize as Q  # noqa: E402
from sdaccel.cpu.calibration import CalibrationSet, Reservoir, collect_unet_inputs, read_prompts  # noqa: E402
from sdaccel.cpu.quality import unet_relative_error  # noqa: E402
from sdaccel.tools.toys.random_checkpoints import ensure_tiny  # noqa: E402

#: The tiny checkpoints that tests/conftest.py builds (ensure_checkpoint).
CHECKPOINTS = Path(__file__).resolve().parents[2] / "build" / "checkpoints"


def test_shipped_prompts():
    prompts = read_prompts()
    assert 100 <= len(prompts) <= 250
    assert len(set(prompts)) == len(prompts)
    assert not any(p.startswith("#") for p in prompts)


def test_reservoir_is_bounded_and_uniform():
    reservoir = Reservoir(5, seed=1)
    for i in range(1000):
        reservoir.add(i)
    assert len(reservoir) == 5 and reservoir.seen == 1000
    assert len(set(reservoir.items)) == 5
    # over many seeds every position of the stream is kept with probability 5/20
    hits = np.zeros(20)
    for seed in range(2000):
        r = Reservoir(5, seed=seed)
        for i in range(20):
            r.add(i)
        hits[r.items] += 1
    assert np.allclose(hits / 2000, 0.25, atol=0.04), hits / 2000


class FakePipeline:
    """Calls the UNet-input callback once per step, as OVPipeline.generate does."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, negative_prompts=None, steps=20, seed=0, unet_input_callback=None, **kwargs):
        self.calls.append((prompts, seed, kwargs))
        for step in range(steps):
            buffer = np.full((2, 4, 2, 2), step, np.float32)
            unet_input_callback({"sample": buffer, "timestep": np.array([1000 - 50 * step], np.int64)})
            buffer[:] = -1  # a pipeline may reuse its buffers: the collector must have copied


def test_collect_unet_inputs_subsamples_in_memory():
    pipe = FakePipeline()
    samples = collect_unet_inputs(pipe, ["a", "b", "c"], steps=10, num_samples=7, progress=False)
    assert len(pipe.calls) == 3 and [c[1] for c in pipe.calls] == [0, 1, 2]
    assert len(samples) == 7
    assert all(s["sample"].min() >= 0 for s in samples)  # copies, not the overwritten buffers
    assert len({int(s["timestep"][0]) for s in samples}) > 1


def test_collect_unet_inputs_streams_to_disk_with_stride(tmp_path):
    pipe = FakePipeline()
    store = collect_unet_inputs(
        pipe, ["a", "b"], steps=10, num_samples=50, stride=4, out_dir=tmp_path / "calib", progress=False
    )
    # 20 UNet calls, every 4th offered: 5 kept, all of them since 5 < 50
    assert isinstance(store, CalibrationSet) and len(store) == 5
    timesteps = sorted(int(s["timestep"][0]) for s in store)
    assert timesteps == sorted([1000, 800, 600, 1000 - 50 * 2, 1000 - 50 * 6])
    small = collect_unet_inputs(
        pipe, ["a", "b"], steps=10, num_samples=3, out_dir=tmp_path / "calib", progress=False
    )
    assert len(small) == 3  # the folder is emptied first, then holds at most num_samples files


def test_calibration_from_the_sdxl_pipeline(tmp_path):
    """The real path on tiny SDXL: capture the pipeline's UNet inputs (with SDXL's text_embeds
    and time_ids), quantize with them, and swap the INT8 UNet into the pipeline."""

    from sdaccel.cpu.export import MODEL_XML, export_pipeline
    from sdaccel.cpu.pipeline import OVPipeline

    needed = ["tokenizer", "tokenizer_2", "text_encoder", "text_encoder_2", "unet", "vae_decoder"]
    # exported once into build/ and reused (the notebooks' smoke profile uses the same folder)
    folder = export_pipeline(
        ensure_tiny(CHECKPOINTS, "tiny-sdxl"),
        CHECKPOINTS.parent / "openvino" / "tiny-sdxl",
        components=needed,
        weight_dtype="fp16",
        progress=False,
    )
    pipe = OVPipeline.from_pretrained(folder, precision="f32")
    calibration = collect_unet_inputs(
        pipe,
        read_prompts()[:2],
        steps=3,
        num_samples=4,
        height=64,
        width=64,
        out_dir=tmp_path,
        progress=False,
    )
    samples = list(calibration)
    assert len(samples) == 4
    assert set(samples[0]) == {"sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids"}
    assert samples[0]["sample"].shape == (2, 4, 8, 8) and samples[0]["time_ids"].shape == (2, 6)
    unet_xml = folder / "unet" / MODEL_XML
    hybrid = Q.quantize_hybrid(unet_xml, calibration, subset_size=4)
    assert Q.describe_ir(hybrid)["fake_quantize"] > 0
    errors = unet_relative_error(unet_xml, hybrid, samples)
    assert 0 < max(errors) < 0.2, errors
    reference = pipe.generate(["a red circle"], steps=3, height=64, width=64, seed=0)
    pipe.replace_unet(hybrid)
    quantized = pipe.generate(["a red circle"], steps=3, height=64, width=64, seed=0)
    assert not np.array_equal(reference.array, quantized.array)
    assert np.abs(reference.array - quantized.array).mean() < 0.1
