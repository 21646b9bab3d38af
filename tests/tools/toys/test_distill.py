"""LCM-LoRA distillation writes a LoRA our loaders read, refuses bad input, and the shipped adapter
is what its README says; the command line keeps its flags."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from sdaccel.core.lora_files import read_lora
from sdaccel.tools.toys import distill
from sdaccel.tools.toys.distill_config import TARGET_MODULES, WEIGHT_NAME, DistillConfig

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "checkpoints" / "tiny-shapes-sdxl"
SHIPPED = REPO / "checkpoints" / "tiny-shapes-sdxl-lcm-lora"

#: A run of a few iterations: seconds, on 64 training images.
QUICK = dataclasses.replace(DistillConfig(), steps=3, batch=4, train_images=64, warmup_steps=1)


def test_a_few_iterations_write_an_adapter_that_changes_the_unet(tmp_path):
    import torch
    from diffusers import UNet2DConditionModel

    from sdaccel.cpu.lora_export import fuse_into_torch

    out = tmp_path / "lora"
    log = distill.run(BASE, out, QUICK, evaluate_model=False, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["distill_log.json", WEIGHT_NAME]
    assert log["steps_done"] == 3 and len(log["loss"]) == 3 and not log["stopped_by_time"]
    assert json.loads((out / "distill_log.json").read_text())["config"]["steps"] == 3
    assert not list(tmp_path.glob(".lora.staging-*"))  # the staging folder was renamed

    adapter = read_lora(out)
    layers = adapter.layers["unet"]
    assert {lay.rank for lay in layers.values()} == {QUICK.rank}
    # every target kind is there, and nothing else: attention, feed-forward, ResNets, resamplers
    names = set(layers)
    for suffix in (
        "attn1.to_q",
        "attn2.to_out.0",
        "ff.net.2",
        "resnets.0.conv1",
        "time_emb_proj",
        "downsamplers.0.conv",
    ):
        assert any(n.endswith(suffix) for n in names), suffix
    assert all(n.endswith(TARGET_MODULES) for n in names)
    deltas = [np.abs(lay.delta()).max() for lay in layers.values()]
    assert min(deltas) > 0  # B starts at zero; three Adam steps moved every layer

    unet = UNet2DConditionModel.from_pretrained(BASE / "unet").eval()
    torch.manual_seed(0)
    sample = torch.randn(2, 4, 8, 8)
    context = torch.randn(2, 77, unet.config.cross_attention_dim)
    added = {"text_embeds": torch.randn(2, 32), "time_ids": torch.tensor([[32.0, 32, 0, 0, 32, 32]] * 2)}
    with torch.no_grad():
        before = unet(sample, 500, encoder_hidden_states=context, added_cond_kwargs=added).sample
        assert fuse_into_torch(unet, "unet", [(adapter, 1.0)]) == len(layers)
        after = unet(sample, 500, encoder_hidden_states=context, added_cond_kwargs=added).sample
    change = (after - before).abs().max().item()
    assert 1e-5 < change < 1.0, change


def test_ema_writes_the_moving_average_of_the_lora_weights(tmp_path):
    from safetensors.numpy import load_file

    one = dataclasses.replace(QUICK, steps=1)
    distill.run(BASE, tmp_path / "plain", one, evaluate_model=False, progress=False)
    averaged = dataclasses.replace(one, ema_decay=0.25)
    distill.run(BASE, tmp_path / "ema", averaged, evaluate_model=False, progress=False)
    plain = load_file(tmp_path / "plain" / WEIGHT_NAME)
    ema = load_file(tmp_path / "ema" / WEIGHT_NAME)
    assert sorted(plain) == sorted(ema)
    # Before the first update the average is the initial LoRA, so the target and the step are those
    # of the plain run; the file then holds 0.25 initial + 0.75 updated, where lora_B starts at 0.
    b_keys = [k for k in plain if ".lora_B." in k]
    assert b_keys and all(np.abs(plain[k]).max() > 0 for k in b_keys)
    for k in b_keys:
        np.testing.assert_allclose(ema[k], 0.75 * plain[k], rtol=1e-5, atol=1e-12)
    # lora_A gets no gradient while lora_B is 0: the first step only decays it (AdamW, 1e-2)
    shrink = 1 - one.lr * 1e-2
    for k in (k for k in plain if ".lora_A." in k):
        np.testing.assert_allclose(ema[k], plain[k] / shrink * (0.25 + 0.75 * shrink), rtol=1e-6)


def test_existing_destination_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "lora"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--overwrite"):
        distill.run(BASE, out, QUICK, evaluate_model=False, progress=False)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_other_pipelines_and_missing_folders_are_refused(tmp_path):
    other = tmp_path / "flux"
    other.mkdir()
    (other / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    with pytest.raises(ValueError, match="StableDiffusionXLPipeline or StableDiffusionPipeline"):
        distill.run(other, tmp_path / "out", QUICK, progress=False)
    with pytest.raises(FileNotFoundError, match="model_index.json"):
        distill.run(tmp_path / "nothing", tmp_path / "out", QUICK, progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"minutes": 0}, "--minutes must be > 0"),
        ({"minutes": -3}, "--minutes must be > 0"),
        ({"steps": 0}, "--steps must be >= 1"),
        ({"rank": 0}, "--rank must be >= 1"),
        ({"w_min": 8.0, "w_max": 3.0}, "--w-min <= --w-max"),
        ({"train_images": -1}, "--train-images"),
        ({"ema_decay": 1.0}, "--ema-decay must be in"),
        ({"ema_decay": -0.1}, "--ema-decay must be in"),
    ],
)
def test_bad_settings_are_refused(tmp_path, change, message):
    config = dataclasses.replace(QUICK, **change)
    with pytest.raises(ValueError, match=message):
        distill.run(BASE, tmp_path / "out", config, progress=False)
    assert not (tmp_path / "out").exists()


def test_boundary_scalings_and_solver():
    import torch

    c_skip, c_out = distill.boundary_scalings(torch.tensor([0, 19, 999]), 10.0)
    assert c_skip.flatten().tolist() == pytest.approx([1.0, 0.25 / (190**2 + 0.25), 0.25 / (9990**2 + 0.25)])
    assert c_out.flatten().tolist() == pytest.approx(
        [0.0, 190 / (190**2 + 0.25) ** 0.5, 9990 / (9990**2 + 0.25) ** 0.5]
    )
    alphas = torch.linspace(0.99, 0.01, 1000)
    solver = distill.DDIMSolver(alphas, 50)
    assert solver.skip == 20 and solver.timesteps[:3].tolist() == [19, 39, 59] and solver.timesteps[-1] == 999
    # from timesteps[i] the step lands on timesteps[i - 1] (on timestep 0 from the first)
    assert solver.alpha_prev[0] == alphas[0] and solver.alpha_prev[5] == alphas[99]
    x0, eps = torch.ones(1, 1, 1, 1), torch.zeros(1, 1, 1, 1)
    assert solver.step(x0, eps, torch.tensor([5])).item() == pytest.approx(alphas[99].sqrt().item())


def test_shipped_adapter_folder():
    if not SHIPPED.is_dir():
        pytest.skip("no shipped adapter")
    weights = SHIPPED / WEIGHT_NAME
    assert weights.stat().st_size < 1_000_000
    log = json.loads((SHIPPED / "distill_log.json").read_text())
    assert log["checkpoint"].endswith("tiny-shapes-sdxl") and log["wall_s"]["train"] < 30 * 60
    readme = (SHIPPED / "README.md").read_text()
    assert (
        "python -m sdaccel.tools.toys.distill checkpoints/tiny-shapes-sdxl checkpoints/tiny-shapes-sdxl-lcm-lora"
        in readme
    )
    rows = {(r["lora"], r["steps"]): r for r in log["adherence"]["rows"]}
    # the target, as measured by diffusers on 64 prompts when the adapter was made (0.969, 1.000)
    assert rows[(True, 4)]["score"] >= rows[(False, 20)]["score"] - 0.05


def test_every_number_of_the_config_is_a_flag_with_its_default():
    parser = distill.build_parser()
    args = parser.parse_args(["base", "out", "--w-min", "4.0", "--ema-decay", "0.95", "--steps", "7"])
    assert (args.w_min, args.ema_decay, args.steps) == (4.0, 0.95, 7)
    defaults = parser.parse_args(["base", "out"])
    assert not defaults.overwrite and not defaults.no_eval and not defaults.readme_only
    for field in dataclasses.fields(DistillConfig):
        if field.type in ("int", "float"):
            assert getattr(defaults, field.name) == field.default, field.name
    assert not hasattr(defaults, "eval_steps")  # a tuple: not a flag


def test_checkpoint_layout():
    assert distill.checkpoint_layout(BASE) == "sdxl"
