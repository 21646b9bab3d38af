"""The helpers of notebook 07 (sdaccel.course.few_steps) and the LoRA hub resolution it relies on."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from sdaccel.core.checkpoint import LORA_FILES, CheckpointError, resolve_lora, resolve_tiny_vae
from sdaccel.core.lora_files import read_lora
from sdaccel.course import few_steps

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "checkpoints" / "tiny-shapes-sd15"


class FakePipe:
    """generate() returns fixed images and the timings a pipeline reports; the first call compiles."""

    def __init__(self, run_s=(0.4, 0.2, 0.3), compile_s=1.5):
        self.run_s, self.compile_s, self.calls = list(run_s), compile_s, []

    def generate(self, prompts, **kw):
        k = len(self.calls)
        self.calls.append((list(prompts), kw))
        images = [Image.new("RGB", (8, 8), (k, 0, 0)) for _ in prompts]
        compile_s = self.compile_s if k == 0 else 0.0
        return SimpleNamespace(images=images, timings={"compile_s": compile_s, "steps": kw["steps"]})


def test_time_images_warms_up_then_times_per_image():
    ticks = iter([0.0, 2.0, 10.0, 10.4, 20.0, 20.2, 30.0, 30.3])  # warm-up, then three timed calls
    pipe = FakePipe()
    timed = few_steps.time_images(pipe, ["a", "b"], repeats=3, clock=lambda: next(ticks), steps=4, seed=1)
    assert len(pipe.calls) == 4 and all(kw == {"steps": 4, "seed": 1} for _, kw in pipe.calls)
    assert timed.compile_s == 1.5  # the first call's, kept apart
    assert timed.per_image_s == pytest.approx([0.2, 0.1, 0.15])  # wall / 2 images
    assert timed.seconds == pytest.approx(0.15)
    assert timed.steps == 4
    assert timed.images[0].getpixel((0, 0)) == (3, 0, 0)  # the last call's images
    with pytest.raises(ValueError, match="at least one prompt"):
        few_steps.time_images(pipe, [], steps=4)


def test_time_images_keeps_the_decode_time_and_the_latents_a_pipeline_reports():
    class DecodingPipe(FakePipe):
        def generate(self, prompts, **kw):
            result = super().generate(prompts, **kw)
            k = len(self.calls) - 1
            result.timings.update(vae_decoder_s=0.02 * (k + 1), run_s=1.0)
            result.latents = np.full((len(prompts), 4, 2, 2), k, np.float32)
            return result

    ticks = iter([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    timed = few_steps.time_images(DecodingPipe(), ["a", "b"], repeats=2, clock=lambda: next(ticks), steps=4)
    assert timed.decode_per_image_s == pytest.approx([0.02, 0.03])  # calls 2 and 3, over 2 images
    assert timed.decode_seconds == pytest.approx(0.025)
    assert timed.latents.shape == (2, 4, 2, 2) and timed.latents.max() == 2  # the last call's
    # a pipeline that reports no decode time (JAX: one program) and keeps no latents
    ticks = iter([0.0, 1.0, 2.0, 3.0])
    plain = few_steps.time_images(FakePipe(), ["a"], repeats=1, clock=lambda: next(ticks), steps=4)
    assert plain.decode_per_image_s == [] and plain.decode_seconds is None and plain.latents is None


def test_decoder_cost_compares_two_decodes_of_the_same_latents():
    from sdaccel.toy import dataset

    prompts = ["a red circle on a blue background, center", "a green square on a white background, top left"]
    vae = [dataset.render(dataset.parse_prompt(p), 32) for p in prompts]
    close = [np.clip(im.astype(np.int16) + 3, 0, 255).astype(np.uint8) for im in vae]
    cost = few_steps.decoder_cost(vae, close, prompts, vae_decode_s=0.004, tiny_decode_s=0.001)
    assert cost["adherence"] == cost["vae_adherence"] == 1.0 and cost["images"] == 2
    assert (
        35 < cost["psnr_mean"] < 40 and cost["ssim_mean"] > 0.9
    )  # 3 levels off (less where clipped): ~38.6 dB
    assert cost["decode_x"] == pytest.approx(4.0)
    swapped = few_steps.decoder_cost(vae, list(reversed(vae)), prompts)
    assert swapped["adherence"] == 0.0 and swapped["psnr_mean"] < 20 and "decode_x" not in swapped
    assert "adherence" not in few_steps.decoder_cost(vae, close, ["a photo", "a cat"])
    with pytest.raises(ValueError, match="same latents, one each"):
        few_steps.decoder_cost(vae, close[:1])


def _timed(seconds, steps=4, compile_s=0.0):
    return few_steps.Timed(images=[], compile_s=compile_s, per_image_s=[seconds], steps=steps)


def test_speed_rows_are_ratios_to_the_base_of_the_same_run():
    timed = {"base": _timed(2.0, 20), "lcm": _timed(0.25), "slower": _timed(4.0)}
    rows = few_steps.speed_rows(timed, "base", {"base": "f32", "lcm": "bf16"})
    assert rows["base"]["x_base"] == 1.0
    assert rows["lcm"]["x_base"] == pytest.approx(8.0)
    assert rows["slower"]["x_base"] == pytest.approx(0.5)
    assert rows["lcm"]["precision"] == "bf16" and rows["slower"]["precision"] == ""
    assert rows["base"]["steps"] == 20
    text = few_steps.format_speed(rows, "base")
    assert "8.00" in text.splitlines()[2] and "0.2500" in text.splitlines()[2]
    with pytest.raises(KeyError, match="not among"):
        few_steps.speed_rows(timed, "nope")


def test_faster_follows_the_ratio():
    assert few_steps.faster(3.1) == "3.10x faster"
    assert few_steps.faster(0.8) == "1.25x slower"
    assert few_steps.faster(1.0) == "1.00x faster"
    with pytest.raises(ValueError):
        few_steps.faster(0)


def test_lever_costs_scores_captions_and_compares_pixels():
    from sdaccel.toy import dataset

    prompts = ["a red circle on a blue background, center", "a green square on a white background, top left"]
    right = [dataset.render(dataset.parse_prompt(p), 32) for p in prompts]
    wrong = [dataset.render(dataset.parse_prompt(p), 32) for p in reversed(prompts)]
    costs = few_steps.lever_costs(right, {"same": right, "swapped": wrong}, prompts)
    assert costs["reference"]["adherence"] == 1.0
    assert costs["same"]["adherence"] == 1.0 and costs["swapped"]["adherence"] == 0.0
    assert costs["same"]["ssim_mean"] == pytest.approx(1.0)
    assert costs["swapped"]["psnr_mean"] < 20
    text = few_steps.format_costs(costs, "base")
    assert text.splitlines()[1].startswith("base") and "100%" in text.splitlines()[1]
    # prompts that are not captions: no adherence, PSNR and SSIM only
    plain = few_steps.lever_costs(right, {"same": right}, ["a photo", "a cat"])
    assert "reference" not in plain and "adherence" not in plain["same"]


def test_random_tiny_vae_fits_the_checkpoint(tmp_path):
    folder = few_steps.random_tiny_vae(TOY, tmp_path / "taesd")
    assert resolve_tiny_vae(TOY, folder) == folder  # the latents' channels and scale are the toy's
    a = (folder / "diffusion_pytorch_model.safetensors").read_bytes()
    again = few_steps.random_tiny_vae(TOY, tmp_path / "again")
    assert (again / "diffusion_pytorch_model.safetensors").read_bytes() == a  # seeded
    from safetensors import safe_open

    with safe_open(folder / "diffusion_pytorch_model.safetensors", "np") as f:
        sizes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    decoder = sum(int(np.prod(v)) for k, v in sizes.items() if k.startswith("decoder."))
    assert 0 < few_steps.parameters(folder, "", "decoder.") == decoder < few_steps.parameters(folder)
    with pytest.raises(CheckpointError, match="model_index.json"):
        few_steps.random_tiny_vae(tmp_path, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_use_scheduler_swaps_the_sampler_and_drops_programs():
    dropped = []
    pipe = SimpleNamespace(
        folder=REPO / "checkpoints" / "tiny-shapes-sdxl",
        scheduler=None,
        set_jit_options=lambda: dropped.append(1),
    )
    few_steps.use_scheduler(pipe, "lcm")
    assert type(pipe.scheduler).__name__ == "LCMScheduler" and dropped == [1]
    few_steps.use_scheduler(pipe, None)  # the checkpoint's own (Euler for the SDXL layout)
    assert type(pipe.scheduler).__name__ == "EulerDiscreteScheduler" and dropped == [1, 1]


def _offline_hub(monkeypatch, folders):
    import huggingface_hub

    asked = []

    def snapshot_download(repo_id, **kwargs):
        asked.append((repo_id, kwargs.get("allow_patterns")))
        if repo_id in folders:
            return str(folders[repo_id])
        raise OSError("the hub is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return asked


def _lora_folder(folder: Path) -> Path:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    save_file(
        {
            "unet.mid_block.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight": np.ones(
                (2, 8), np.float32
            ),
            "unet.mid_block.attentions.0.transformer_blocks.0.attn1.to_q.lora_B.weight": np.ones(
                (8, 2), np.float32
            ),
        },
        str(folder / "pytorch_lora_weights.safetensors"),
    )
    return folder


def test_resolve_lora_fetches_only_the_lora_files_of_a_hub_repo(tmp_path, monkeypatch):
    cached = _lora_folder(tmp_path / "cache" / "lcm-lora-sdv1-5")
    asked = _offline_hub(monkeypatch, {"latent-consistency/lcm-lora-sdv1-5": cached})
    folder = resolve_lora("latent-consistency/lcm-lora-sdv1-5")
    assert folder == cached
    assert asked == [("latent-consistency/lcm-lora-sdv1-5", LORA_FILES)]
    assert len(read_lora(folder).layers["unet"]) == 1  # what fuse_lora and export_pipeline read


def test_resolve_lora_local_paths_and_errors(tmp_path, monkeypatch):
    local = _lora_folder(tmp_path / "mine")
    asked = _offline_hub(monkeypatch, {"org/empty": tmp_path / "empty"})
    assert resolve_lora(local) == local
    assert (
        resolve_lora(local / "pytorch_lora_weights.safetensors") == local / "pytorch_lora_weights.safetensors"
    )
    with pytest.raises(CheckpointError, match="neither an existing file or folder nor a hub id"):
        resolve_lora(tmp_path / "missing.safetensors")
    with pytest.raises(
        CheckpointError, match="Could not download the LoRA 'org/offline'.*sdaccel.tools.workshop.download"
    ):
        resolve_lora("org/offline")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no pytorch_lora_weights.safetensors"):
        resolve_lora("org/empty")
    assert [a[0] for a in asked] == ["org/offline", "org/empty"]


def _row(sampler, steps, score, psnr):
    return {"pipeline": "ov_f32", "sampler": sampler, "steps": steps, "score": score, "psnr_mean": psnr}


def test_adapter_gain_pairs_the_two_lcm_samplers_at_each_number_of_steps():
    rows = [
        _row("base", 1, 0.0, 8.0),
        _row("base", 20, 1.0, None),
        _row("lcm", 1, 0.625, 21.25),
        _row("lcm", 4, 0.9375, 31.0),
        _row("lcm_no_adapter", 1, 0.4375, 20.75),
        _row("lcm_no_adapter", 4, 1.0, 30.5),
        _row("lcm", 8, 1.0, 31.0),  # no row without the adapter at 8 steps: left out
    ]
    gain = few_steps.adapter_gain(rows)
    assert list(gain) == [1, 4]
    assert gain[1] == {
        "with": 0.625,
        "without": 0.4375,
        "adds": pytest.approx(0.1875),
        "psnr_with": 21.25,
        "psnr_without": 20.75,
    }
    assert gain[4]["adds"] == pytest.approx(-0.0625)  # the sampler alone drew one more prompt here
    table = few_steps.format_adapter_gain(gain, base_steps=20)
    assert "PSNR to the 20-step base" in table
    assert "| 1 | 62% | 21.2 dB | 44% | 20.8 dB | +19 points, +0.5 dB |" in table
    assert "| 4 | 94% | 31.0 dB | 100% | 30.5 dB | -6 points, +0.5 dB |" in table
    with pytest.raises(ValueError, match="both LCM samplers"):
        few_steps.adapter_gain([_row("lcm", 1, 0.5, 20.0)])


@pytest.mark.slow
def test_adapter_rows_score_every_sampler_against_the_base_images(tmp_path):
    """The shipped adapter on 2 held-out prompts, OpenVINO f32: one row per sampler and number of
    steps, the base at its usual steps is the reference (no PSNR of its own), the others have one."""
    sdxl = REPO / "checkpoints" / "tiny-shapes-sdxl"
    rows = few_steps.adapter_rows(
        sdxl, REPO / "checkpoints" / "tiny-shapes-sdxl-lcm-lora", [1], 2, 0, tmp_path, base_steps=4
    )
    assert [(r["sampler"], r["steps"]) for r in rows] == [
        ("base", 1),
        ("base", 4),
        ("lcm", 1),
        ("lcm_no_adapter", 1),
    ]
    assert rows[1]["psnr_mean"] is None and all(r["psnr_mean"] > 5 for r in rows if r is not rows[1])
    assert all(0 <= r["score"] <= 1 and r["prompts"] == 2 for r in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["openvino_base", "openvino_lcm"]
