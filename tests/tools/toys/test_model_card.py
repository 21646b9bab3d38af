"""The LCM-LoRA's model card: the committed README is the template's output from the run's log,
and each of its sentences says what the numbers say."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from sdaccel.tools.toys import model_card
from sdaccel.tools.toys.distill_config import WEIGHT_NAME, DistillConfig

REPO = Path(__file__).resolve().parents[3]
SHIPPED = Path("checkpoints") / "tiny-shapes-sdxl-lcm-lora"
SWEEP = REPO / "benchmarks" / "results" / "steps_adherence_tiny-shapes-sdxl.json"


def without_versions(text: str) -> list[str]:
    """The card's lines but the one naming the installed diffusers and torch."""
    return [line for line in text.splitlines() if " CPU, fp32, image `i`" not in line]


def test_the_committed_card_is_the_template_output():
    if not (REPO / SHIPPED).is_dir() or not SWEEP.is_file():
        pytest.skip("no shipped adapter or sweep")
    log = json.loads((REPO / SHIPPED / "distill_log.json").read_text())
    text = model_card.readme_text(
        (REPO / SHIPPED / WEIGHT_NAME).stat().st_size,
        SHIPPED,
        Path(log["checkpoint"]),
        model_card.config_from_log(log),
        log,
        json.loads(SWEEP.read_text()),
    )
    committed = (REPO / SHIPPED / "README.md").read_text()
    assert without_versions(text) == without_versions(committed)
    assert "Recipes tried and not kept" in text  # the shipped adapter's history
    assert (
        "python -m sdaccel.tools.toys.distill checkpoints/tiny-shapes-sdxl checkpoints/tiny-shapes-sdxl-lcm-lora"
        in text
    )


def test_refresh_readme_writes_the_card_again_from_the_log(tmp_path):
    if not (REPO / SHIPPED).is_dir():
        pytest.skip("no shipped adapter")
    folder = tmp_path / SHIPPED.name
    shutil.copytree(REPO / SHIPPED, folder)
    (folder / "README.md").unlink()
    written = model_card.refresh_readme(folder, steps_json=tmp_path / "no-sweep.json")
    text = written.read_text()
    assert written == folder / "README.md"
    assert f"--lora {folder} --prompts 96" in text  # no sweep: the command that makes it
    assert "### Against steps" not in text and "Recipes tried and not kept" in text


def test_the_command_names_only_the_changed_numbers():
    config = DistillConfig(w_min=4.0, w_max=6.0, ema_decay=0.95, eval_steps=(4,))
    assert model_card.remake_command(Path("base"), Path("out"), config) == (
        "nice -n 5 python -m sdaccel.tools.toys.distill base out --w-min 4.0 --w-max 6.0 --ema-decay 0.95"
    )


def test_config_from_log_round_trips():
    config = DistillConfig(rank=8, eval_steps=(2, 4))
    log = json.loads(json.dumps({"config": {**dataclasses.asdict(config), "unknown": 1}}))
    assert model_card.config_from_log(log) == config


def test_target_network():
    assert model_card.target_network(DistillConfig()) == "the student without gradient"
    assert "decay 0.95" in model_card.target_network(DistillConfig(ema_decay=0.95))


def test_target_verdict():
    rows = [
        {"lora": False, "steps": 20, "score": 0.984},
        {"lora": True, "steps": 4, "score": 0.969},
    ]
    assert model_card.target_verdict(rows, 20, 64) == (
        "Target: the adapter at 4 steps within 5 points of the base model at 20 steps. "
        "On these 64 prompts through diffusers: 0.969 against 0.984 (1.5 points below): met."
    )
    rows[1]["score"] = 0.9
    assert model_card.target_verdict(rows, 20, 64).endswith("(8.4 points below): **missed**.")
    assert model_card.target_verdict(rows[:1], 20, 64) == "The adapter was not evaluated at 4 steps."


def test_steps_section_without_a_sweep_gives_its_command():
    assert model_card.steps_section(None, Path("checkpoints/base"), Path("out")) == (
        "The sweep over 1 to 20 steps in the JAX, OpenVINO f32 and INT8 pipelines: "
        "`python -m sdaccel.toy.adherence_steps checkpoints/base --lora out --prompts 96 "
        "--out benchmarks/results/steps_adherence_base.json`."
    )
