"""The UNet the CPU benchmark measures (``sdaccel.cpu.random_unet``): one call's inputs of the real
architectures. (Its export runs in the benchmarks and in notebook 06.)"""

from __future__ import annotations

import pytest

from sdaccel.cpu import random_unet as B


@pytest.mark.parametrize(
    ("model", "context", "extra"), [("sd15", 768, set()), ("sdxl", 2048, {"text_embeds", "time_ids"})]
)
def test_unet_inputs_of_the_real_architectures(model, context, extra):
    inputs = B.unet_inputs(model, batch=2, latent=16, timestep=7)
    assert set(inputs) == {"sample", "timestep", "encoder_hidden_states"} | extra
    assert inputs["sample"].shape == (2, 4, 16, 16) and inputs["timestep"].tolist() == [7]
    assert inputs["encoder_hidden_states"].shape == (2, 77, context)
    if extra:
        assert inputs["time_ids"].tolist() == [[128, 128, 0, 0, 128, 128]] * 2
    # seeded: the same call gives the same inputs
    again = B.unet_inputs(model, batch=2, latent=16, timestep=7)
    assert (again["sample"] == inputs["sample"]).all()
