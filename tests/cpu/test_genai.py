"""``sdaccel.cpu.genai.GenAIPipeline``: what it refuses before GenAI loads anything (the pipeline on
a real export is checked against the contract in test_contract_cpu.py)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("openvino_genai")

from sdaccel.core.checkpoint import CheckpointError  # noqa: E402
from sdaccel.cpu.genai import GENAI_SCHEDULERS, GenAIPipeline  # noqa: E402


@pytest.fixture
def configs_only(tiny_sd15, tmp_path):
    """An export folder's configs without any model: enough for the checks, never loaded."""
    folder = tmp_path / "export"
    for component in ("unet", "scheduler"):
        shutil.copytree(
            tiny_sd15 / component, folder / component, ignore=shutil.ignore_patterns("*.safetensors")
        )
    (folder / "vae_decoder").mkdir()
    shutil.copy2(tiny_sd15 / "vae" / "config.json", folder / "vae_decoder" / "config.json")
    shutil.copy2(tiny_sd15 / "model_index.json", folder / "model_index.json")
    return folder


def test_a_folder_without_an_export_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="No OpenVINO export"):
        GenAIPipeline(tmp_path)


def test_an_unknown_precision_is_refused_before_the_folder_is_read(tmp_path):
    with pytest.raises(ValueError, match="precision must be 'auto'"):
        GenAIPipeline(tmp_path, precision="int4")


def test_a_scheduler_genai_does_not_implement_is_an_error(configs_only):
    with pytest.raises(ValueError):
        GenAIPipeline(configs_only, scheduler="NoSuchScheduler")
    assert "EulerDiscreteScheduler" in GENAI_SCHEDULERS


def test_a_static_batch_of_more_than_one_image_is_refused(configs_only):
    assert json.loads((configs_only / "model_index.json").read_text())["_class_name"]
    with pytest.raises(ValueError, match="static batch must be 1"):
        GenAIPipeline(configs_only, precision=None, static=(2, 64, 64))


@pytest.mark.parametrize("scheduler", ["lcm", None], ids=["lcm-asked", "lcm-in-the-folder"])
def test_lcm_on_a_v_prediction_checkpoint_is_refused_before_genai_runs(configs_only, scheduler):
    """GenAI's LCM scheduler computes the denoised sample for epsilon prediction only: on an SD 2.x
    (v-prediction) export its ``step`` reads an empty buffer and the process dies of SIGSEGV. The
    folder here has configs and no model: any call into GenAI would fail otherwise."""
    from importlib.resources import files

    config = json.loads((files("sdaccel") / "reference_configs" / "sd-2.1" / "scheduler.json").read_text())
    assert config["prediction_type"] == "v_prediction"
    if scheduler is None:  # an export whose own scheduler is LCM
        config["_class_name"] = "LCMScheduler"
    (configs_only / "scheduler" / "scheduler_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"LCM.*v_prediction.*OVPipeline.*scheduler='lcm'"):
        GenAIPipeline(configs_only, precision=None, scheduler=scheduler)


def test_lcm_with_epsilon_prediction_passes_the_check(configs_only):
    from sdaccel.cpu.genai import check_genai_scheduler

    config = json.loads((configs_only / "scheduler" / "scheduler_config.json").read_text())
    assert config.get("prediction_type", "epsilon") == "epsilon"
    check_genai_scheduler(configs_only, "LCMScheduler")
    check_genai_scheduler(configs_only, None)
