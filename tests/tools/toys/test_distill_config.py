"""A distillation's config refuses, naming the flag, every value that cannot work; the defaults pass."""

import argparse
import dataclasses

import pytest

from sdaccel.tools.toys.distill_config import (
    TARGET_MODULES,
    WEIGHT_NAME,
    DistillConfig,
    add_config_flags,
    config_from_args,
)


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


def test_the_numbers_of_a_config_are_flags_and_come_back_as_a_config():
    @dataclasses.dataclass(frozen=True)
    class Knobs:
        steps_max: int = 10
        lr: float = 1e-3
        eval_steps: tuple[int, ...] = (1, 2)  # not a number: no flag, its default kept

    parser = argparse.ArgumentParser()
    add_config_flags(parser, Knobs)
    assert config_from_args(parser.parse_args([]), Knobs) == Knobs()
    args = parser.parse_args(["--steps-max", "3", "--lr", "0.5"])
    assert config_from_args(args, Knobs) == Knobs(steps_max=3, lr=0.5)
    with pytest.raises(SystemExit):
        parser.parse_args(["--eval-steps", "4"])
    # every number of the distillation's own config has its flag
    parser = argparse.ArgumentParser()
    add_config_flags(parser, DistillConfig)
    assert config_from_args(parser.parse_args(["--batch", "3"]), DistillConfig).batch == 3
