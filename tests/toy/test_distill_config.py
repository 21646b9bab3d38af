"""A distillation's config refuses, naming the flag, every value that cannot work; the defaults pass."""

import dataclasses

import pytest

from sdaccel.toy.distill_config import TARGET_MODULES, WEIGHT_NAME, DistillConfig


def test_the_defaults_pass_and_are_recorded_as_plain_values():
    config = DistillConfig()
    config.check()
    assert dataclasses.asdict(config)["eval_steps"] == (1, 2, 4, 8)
    assert WEIGHT_NAME == "pytorch_lora_weights.safetensors"
    assert {"to_q", "ff.net.2", "conv1", "time_emb_proj"} <= set(TARGET_MODULES)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"threads": 0}, "--threads must be >= 1"),
        ({"batch": 0}, "--batch must be >= 1"),
        ({"num_ddim_timesteps": 0}, "--num-ddim-timesteps must be >= 1"),
        ({"lr": 0.0}, "--lr must be > 0"),
        ({"w_min": -1.0}, "--w-min <= --w-max"),
    ],
)
def test_bad_values_name_their_flag(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(DistillConfig(), **change).check()
