"""INT8 calibration data of the shapes checkpoints comes from training captions, never the scored ones."""

from pathlib import Path

from sdaccel.toy import calibration, dataset


def test_calibration_runs_the_pipeline_on_training_captions(monkeypatch):
    seen = {}

    def collect(pipe, prompts, **kwargs):
        seen.update(pipe=pipe, prompts=prompts, **kwargs)
        return "calibration set"

    monkeypatch.setattr(calibration, "collect_unet_inputs", collect)
    got = calibration.calibrate_on_training_captions(
        "pipe", Path("out"), 8, 6.0, 32, prompts=12, samples=40, seed=3
    )
    assert got == "calibration set" and seen["pipe"] == "pipe"
    assert seen["prompts"] == dataset.prompts(12, seed=4, split="train")
    heldout = set(dataset.heldout_prompts(len(dataset.heldout_combinations())))
    assert not heldout & set(seen["prompts"])
    assert {k: seen[k] for k in ("steps", "num_samples", "guidance_scale", "height", "width", "seed")} == {
        "steps": 8,
        "num_samples": 40,
        "guidance_scale": 6.0,
        "height": 32,
        "width": 32,
        "seed": 3,
    }
    assert seen["out_dir"] == Path("out") and seen["progress"] is False
