"""The tiny autoencoder distilled from a toy's VAE: a short run moves its losses down, the folder it
writes loads through the loaders notebook 07 uses, bad input is refused before anything is written,
a killed run leaves no half folder, and the shipped one is what its README says."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sdaccel.core.checkpoint import resolve_tiny_vae
from sdaccel.core.faults import FAULT_ENV
from sdaccel.tools.toys import distill_taesd
from sdaccel.tools.toys.taesd_config import LOG_NAME, WEIGHTS, TaesdConfig

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "checkpoints" / "tiny-shapes-sdxl"
SHIPPED = REPO / "checkpoints" / "tiny-shapes-sdxl-taesd"

#: A run of seconds: 64 training images, 40 steps.
QUICK = dataclasses.replace(TaesdConfig(), steps=40, batch=8, train_images=64, warmup_steps=5)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("taesd") / "tiny"
    log = distill_taesd.run(BASE, out, QUICK, evaluate_model=False, progress=False)
    return out, log


def test_a_short_run_moves_both_losses_down_and_writes_a_diffusers_folder(quick_run):
    out, log = quick_run
    assert sorted(p.name for p in out.iterdir()) == ["config.json", WEIGHTS, LOG_NAME]
    assert not list(out.parent.glob(".tiny.staging-*"))  # the staging folder was renamed
    assert log["steps_done"] == 40 and not log["stopped_by_time"]
    for curve in ("decoder_loss", "encoder_loss"):
        losses = log[curve]
        assert len(losses) == 40 and np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5]), curve
    assert json.loads((out / LOG_NAME).read_text())["config"]["steps"] == 40
    assert log["decoder_parameters"]["TAESD"] < log["decoder_parameters"]["VAE"]


def test_the_folder_loads_through_the_loaders_of_notebook_07(quick_run, tmp_path):
    """resolve_tiny_vae (what OVPipeline and JaxPipeline call with vae=), diffusers, JAX and the
    OpenVINO conversion of sdaccel.cpu.tiny_vae read it, and all three decode alike."""
    import jax.numpy as jnp
    import openvino as ov
    import torch
    from diffusers import AutoencoderTiny

    from sdaccel.cpu.tiny_vae import export_tiny_decoder
    from sdaccel.tpu.models.taesd import load_tiny_vae

    out, _ = quick_run
    assert resolve_tiny_vae(BASE, out) == out  # the latents' channels and scale are the toy's
    latents = np.random.default_rng(0).standard_normal((2, 4, 8, 8)).astype(np.float32)
    model = AutoencoderTiny.from_pretrained(out).eval()
    assert model.config.scaling_factor == 1.0  # it decodes the diffusion latents as they are
    with torch.no_grad():
        reference = model.decode(torch.from_numpy(latents)).sample.numpy()
    assert reference.shape == (2, 3, 32, 32)

    jax_model = load_tiny_vae(out, dtype=jnp.float32, progress=False)
    ours = np.asarray(jax_model.decode(jnp.asarray(latents.transpose(0, 2, 3, 1))))
    np.testing.assert_allclose(ours.transpose(0, 3, 1, 2), reference, atol=1e-4)

    # an export's place for it: the checkpoint's index and its VAE decoder's config are what is checked
    export = tmp_path / "export"
    (export / "vae_decoder").mkdir(parents=True)
    (export / "model_index.json").write_text((BASE / "model_index.json").read_text())
    (export / "vae_decoder" / "config.json").write_text((BASE / "vae" / "config.json").read_text())
    decoder = export_tiny_decoder(export, out)
    compiled = ov.Core().compile_model(
        decoder / "openvino_model.xml", "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    np.testing.assert_allclose(compiled(latents)[0], reference, atol=1e-4)


def test_an_existing_destination_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--overwrite"):
        distill_taesd.run(BASE, out, QUICK, evaluate_model=False, progress=False)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_folders_without_a_vae_to_learn_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="model_index.json"):
        distill_taesd.run(tmp_path / "nothing", tmp_path / "out", QUICK, progress=False)
    no_vae = tmp_path / "no_vae"
    no_vae.mkdir()
    (no_vae / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline"}))
    with pytest.raises(FileNotFoundError, match="no vae/config.json"):
        distill_taesd.run(no_vae, tmp_path / "out", QUICK, progress=False)
    (no_vae / "vae").mkdir()
    (no_vae / "vae" / "config.json").write_text(json.dumps({"_class_name": "AutoencoderTiny"}))
    with pytest.raises(ValueError, match="learns an AutoencoderKL's decodes"):
        distill_taesd.run(no_vae, tmp_path / "out", QUICK, progress=False)
    with pytest.raises(FileNotFoundError, match="no LoRA weights"):
        distill_taesd.run(BASE, tmp_path / "out", QUICK, lora=tmp_path / "no_lora", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"minutes": 0}, "--minutes must be > 0"),
        ({"steps": 0}, "--steps must be >= 1"),
        ({"width": 0}, "--width must be >= 1"),
        ({"decoder_blocks": 0}, "--decoder-blocks must be >= 1"),
        ({"encoder_blocks": -1}, "--encoder-blocks must be >= 0"),
        ({"lr": 0.0}, "--lr must be > 0"),
        ({"edge_weight": -1.0}, "--edge-weight must be >= 0"),
        ({"train_images": -1}, "--train-images"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        distill_taesd.run(BASE, tmp_path / "out", dataclasses.replace(QUICK, **change), progress=False)
    assert not (tmp_path / "out").exists()


def test_a_run_killed_while_writing_leaves_no_half_folder(tmp_path):
    out = tmp_path / "tiny"
    command = [sys.executable, "-m", "sdaccel.tools.toys.distill_taesd", str(BASE), str(out)]
    command += ["--steps", "2", "--batch", "4", "--train-images", "16", "--no-eval"]
    env = {**os.environ, FAULT_ENV: "distill_taesd.weights-saved:kill"}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not out.exists()  # the weights were written into the staging folder only
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", WEIGHTS, LOG_NAME]
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]  # the killed run's staging folder is gone


def test_every_number_of_the_config_is_a_flag_with_its_default():
    parser = distill_taesd.build_parser()
    args = parser.parse_args(["base", "out", "--width", "8", "--edge-weight", "3", "--lora", "x"])
    assert (args.width, args.edge_weight, args.lora) == (8, 3.0, Path("x"))
    defaults = parser.parse_args(["base", "out"])
    assert not defaults.overwrite and not defaults.no_eval and defaults.lora is None
    for field in dataclasses.fields(TaesdConfig):
        assert getattr(defaults, field.name) == field.default, field.name


def test_the_shipped_folder_is_small_loads_and_says_what_was_measured():
    if not SHIPPED.is_dir():
        pytest.skip("no shipped tiny autoencoder")
    assert resolve_tiny_vae(BASE, SHIPPED) == SHIPPED
    assert (SHIPPED / WEIGHTS).stat().st_size < 1_000_000
    log = json.loads((SHIPPED / LOG_NAME).read_text())
    assert log["checkpoint"].endswith("tiny-shapes-sdxl") and log["wall_s"]["train"] < 30 * 60
    assert log["decoder_parameters"]["TAESD"] * 4 < log["decoder_parameters"]["VAE"]
    readme = (SHIPPED / "README.md").read_text()
    assert (
        "python -m sdaccel.tools.toys.distill_taesd checkpoints/tiny-shapes-sdxl checkpoints/tiny-shapes-sdxl-taesd"
        in readme
    )
    rows = {r["latents"]: r for r in log["evaluation"]["rows"]}
    assert set(rows) == {"data set", "base sampler", "LCM-LoRA"}
    for name, row in rows.items():  # what the card's table says, measured when it was made
        assert f"| {name} |" in readme and f"**{row['psnr_mean']:.2f}**" in readme
        assert row["psnr_mean"] > 30, name
        assert row["taesd_score"] >= row["vae_score"] - 0.15, name
