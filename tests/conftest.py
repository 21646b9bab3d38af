"""Shared fixtures: the tiny checkpoints, built once into build/checkpoints (as `make run` does)."""

from pathlib import Path

import jax
import pytest

# Eight simulated CPU devices for every test, as in the notebooks' smoke profile. This must run
# before anything starts JAX's backends; single-device code simply runs on device 0.
jax.config.update("jax_num_cpu_devices", 8)

REPO = Path(__file__).resolve().parents[1]
CHECKPOINTS = REPO / "build" / "checkpoints"


@pytest.fixture(scope="session")
def tiny_sdxl() -> Path:
    from sdaccel.tiny import ensure_tiny

    return ensure_tiny(CHECKPOINTS, "tiny-sdxl")


@pytest.fixture(scope="session")
def tiny_sd15() -> Path:
    from sdaccel.tiny import ensure_tiny

    return ensure_tiny(CHECKPOINTS, "tiny-sd15")
