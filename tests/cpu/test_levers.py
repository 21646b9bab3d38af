"""CPU speed levers on tiny models: the runtime arms (sdaccel.cpu.levers) run what they ask for and
leave the UNet's output alone."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import levers  # noqa: E402


@pytest.fixture(scope="module")
def unet(tmp_path_factory, tiny_sd15):
    """The tiny SD 1.5 UNet as an f32 IR (export port names) and one guided call's inputs (8x8)."""
    from diffusers import UNet2DConditionModel

    from sdaccel.cpu.convert import convert_unet

    module = UNet2DConditionModel.from_pretrained(tiny_sd15 / "unet").eval()
    xml = tmp_path_factory.mktemp("unet") / "unet.xml"
    ov.save_model(convert_unet(module, example_size=8), str(xml), compress_to_fp16=False)
    rng = np.random.default_rng(0)
    inputs = {
        "sample": rng.standard_normal((2, 4, 8, 8), dtype=np.float32),
        "timestep": np.array([500], dtype=np.int64),
        "encoder_hidden_states": rng.standard_normal(
            (2, 77, module.config.cross_attention_dim), dtype=np.float32
        ),
    }
    return xml, inputs


def test_static_dynamic_and_guidance_split_leave_the_output_alone(unet):
    xml, inputs = unet
    arms = {**levers.STATIC_ARMS, "split": levers.Arm(split=2)}
    result = levers.time_arms(xml, inputs, arms, rounds=2, warmup=1, precision="f32")
    rows = result["arms"]
    assert result["reference"] == "static" and list(rows) == ["static", "dynamic", "split"]
    for row in rows.values():
        assert len(row["times"]) == 2 and len(row["cpu_times"]) == 2
        assert row["s_per_call"] == statistics.median(row["times"])
        assert row["reported"]["INFERENCE_PRECISION_HINT"] == "f32"
        assert row["reported"]["PERFORMANCE_HINT"] == "LATENCY"
        assert len(row["compile_s"]) == 1  # held compiled: one compile, however many rounds
    assert rows["static"]["speedup"] == 1.0 and rows["static"]["max_abs_diff"] == 0.0
    assert rows["dynamic"]["speedup"] == rows["static"]["s_per_call"] / rows["dynamic"]["s_per_call"]
    scale = rows["static"]["output_abs_max"]
    assert scale > 0.1  # a real output, not zeros
    # the same arithmetic in another kernel order: float rounding only
    assert rows["dynamic"]["max_abs_diff"] <= 1e-5 * scale
    assert rows["split"]["max_abs_diff"] <= 1e-5 * scale
    assert (rows["split"]["static"], rows["split"]["split"]) == (True, 2)


def test_runtime_arms_run_what_they_ask_for(unet):
    xml, inputs = unet
    every = levers.runtime_arms(2)
    assert list(every)[0] == "default (LATENCY)" and len(every) == 6
    names = ("default (LATENCY)", "THROUGHPUT", "INFERENCE_NUM_THREADS=1")
    arms = {name: every[name] for name in names}
    result = levers.time_arms(xml, inputs, arms, rounds=2, warmup=0, precision="f32", keep_compiled=False)
    rows = result["arms"]
    assert rows["THROUGHPUT"]["reported"]["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert rows["THROUGHPUT"]["parallel"] == 2 and rows["THROUGHPUT"]["s_per_call_parallel"] > 0
    assert rows["INFERENCE_NUM_THREADS=1"]["reported"]["INFERENCE_NUM_THREADS"] == "1"
    assert rows["INFERENCE_NUM_THREADS=1"]["config"] == {"INFERENCE_NUM_THREADS": "1"}
    assert every["ENABLE_CPU_PINNING=False"].config == {"ENABLE_CPU_PINNING": False}
    for row in rows.values():
        assert len(row["compile_s"]) == 2  # compiled afresh in each round
        assert row["max_abs_diff"] == 0.0  # scheduling, not arithmetic: bit-identical here


def test_time_arms_refuses_bad_input_before_compiling(unet):
    xml, inputs = unet
    with pytest.raises(ValueError, match="at least one arm"):
        levers.time_arms(xml, inputs, {})
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        levers.time_arms(xml, inputs, levers.STATIC_ARMS, rounds=0)
    with pytest.raises(ValueError, match="split=3 does not divide the batch of 2"):
        levers.time_arms(xml, inputs, {"odd": levers.Arm(split=3)})
