"""Shared fixtures: the tiny checkpoints, built once into build/checkpoints (as `make run` does)."""

from pathlib import Path

import pytest

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
