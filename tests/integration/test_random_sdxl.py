"""The real architectures with random weights (sdaccel.tools.toys.random_checkpoints.build_random_checkpoint, used by
benchmarks/bench_memory.py), built from shrunk reference configs (the full
size takes about 7 GB of disk and 20 GB of RAM), and benchmarks/bench_whole_image.py's SDXL rows
on it: the layout every loader reads, the fp16 storage, both text encoders, the VAE's force_upcast."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "src" / "sdaccel" / "reference_configs" / "sdxl-base-1.0"


def shrunk_configs() -> dict[str, dict]:
    """SDXL base's reference configs with every width, depth and count made small, and everything
    else (classes, the added time conditioning, force_upcast, the scaling factor) kept: the hub
    stand-in's tiny scale (sdaccel.tools.workshop.hub_cache.tiny_configs)."""
    from sdaccel.tools.workshop.hub_cache import tiny_configs

    return tiny_configs("sdxl")


def build(folder: Path, weight_dtype: str, name: str = "sdxl", configs: dict | None = None) -> dict:
    """``build_random_checkpoint`` in a child Python (PyTorch's global seed and memory stay out of
    the test process)."""
    code = (
        "import json, sys; from sdaccel.tools.toys.random_checkpoints import build_random_checkpoint; "
        "print(json.dumps(build_random_checkpoint(sys.argv[1], sys.argv[2], 0, sys.argv[3], json.loads(sys.argv[4]))))"
    )
    args = [name, str(folder), weight_dtype, json.dumps(configs if configs is not None else shrunk_configs())]
    run = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def random_sdxl(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("random") / "random-sdxl"
    out = build(folder, "fp16")
    assert out["weight_dtype"] == "fp16" and out["disk_bytes"] > 0
    return folder


def _dtypes(path: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return {str(f.get_slice(k).get_dtype()) for k in f.keys()}


def test_the_folder_has_sdxls_layout_and_its_weights_are_fp16(random_sdxl):
    from sdaccel.tools.toys.random_checkpoints import SDXL_COMPONENTS

    index = json.loads((random_sdxl / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionXLPipeline"
    assert {k: tuple(v) for k, v in index.items() if k != "_class_name"} == SDXL_COMPONENTS
    assert not (random_sdxl.parent / "random-sdxl.partial").exists()
    te2 = json.loads((random_sdxl / "text_encoder_2" / "config.json").read_text())
    assert te2["architectures"] == ["CLIPTextModelWithProjection"] and te2["hidden_act"] == "gelu"
    vae = json.loads((random_sdxl / "vae" / "config.json").read_text())
    assert vae["force_upcast"] is True and vae["scaling_factor"] == 0.13025
    scheduler = json.loads((random_sdxl / "scheduler" / "scheduler_config.json").read_text())
    assert scheduler["_class_name"] == "EulerDiscreteScheduler" and scheduler["timestep_spacing"] == "leading"
    from transformers import CLIPTokenizer

    assert CLIPTokenizer.from_pretrained(random_sdxl / "tokenizer").pad_token == "<|endoftext|>"
    assert CLIPTokenizer.from_pretrained(random_sdxl / "tokenizer_2").pad_token == "!"
    for component in ("unet", "vae"):
        assert _dtypes(random_sdxl / component / "diffusion_pytorch_model.safetensors") == {"F16"}
    for component in ("text_encoder", "text_encoder_2"):
        assert _dtypes(random_sdxl / component / "model.safetensors") == {"F16"}


def test_diffusers_loads_it_in_float32_with_the_fp32_builds_values_rounded(random_sdxl, tmp_path):
    import torch
    from diffusers import DiffusionPipeline
    from safetensors.torch import load_file
    from transformers import CLIPTextModelWithProjection

    pipe = DiffusionPipeline.from_pretrained(random_sdxl, dtype=torch.float32)
    assert type(pipe).__name__ == "StableDiffusionXLPipeline"
    assert isinstance(pipe.text_encoder_2, CLIPTextModelWithProjection)
    assert {p.dtype for p in pipe.unet.parameters()} == {torch.float32}
    assert {p.dtype for p in pipe.text_encoder_2.parameters()} == {torch.float32}
    pipe.set_progress_bar_config(disable=True)
    image = pipe("a red circle", num_inference_steps=1, height=64, width=64, output_type="np").images
    assert image.shape == (1, 64, 64, 3) and bool((image >= 0).all() and (image <= 1).all())
    # the same seed in fp32: the fp16 folder holds its weights rounded once
    full = tmp_path / "random-sdxl-fp32"
    assert build(full, "fp32")["weight_dtype"] == "fp32"
    for component, name in (("unet", "diffusion_pytorch_model"), ("text_encoder_2", "model")):
        half = load_file(str(random_sdxl / component / f"{name}.safetensors"))
        exact = load_file(str(full / component / f"{name}.safetensors"))
        assert half.keys() == exact.keys()
        for key in list(exact)[:20]:
            assert exact[key].dtype == torch.float32
            assert torch.equal(half[key], exact[key].to(torch.float16)), (component, key)


def test_the_sd15_layout_is_unchanged(tmp_path):
    configs = {p.stem: json.loads(p.read_text()) for p in (REFERENCE.parent / "sd-1.5").glob("*.json")}
    configs["unet"].update(
        block_out_channels=[32, 32, 64, 64], layers_per_block=1, attention_head_dim=2, norm_num_groups=8
    )
    configs["unet"]["cross_attention_dim"] = 32
    configs["text_encoder"].update(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )
    configs["vae"].update(block_out_channels=[8, 8, 8, 8], layers_per_block=1, norm_num_groups=4)
    folder = tmp_path / "random-sd15"
    assert build(folder, "fp32", "sd15", configs)["weight_dtype"] == "fp32"
    index = json.loads((folder / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionPipeline"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "scheduler",
        "text_encoder",
        "tokenizer",
        "unet",
        "vae",
    ]
    assert (
        json.loads((folder / "scheduler" / "scheduler_config.json").read_text())["_class_name"]
        == "PNDMScheduler"
    )
    assert _dtypes(folder / "unet" / "diffusion_pytorch_model.safetensors") == {"F32"}


def test_a_name_or_dtype_it_does_not_know_is_refused(tmp_path):
    code = (
        "from sdaccel.tools.toys.random_checkpoints import build_random_checkpoint as b\n"
        "for args in (('sd3', 'x'), ('sdxl', 'x', 0, 'bf16')):\n"
        "    try:\n        b(*args)\n    except ValueError as e:\n        print(e)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "no reference architecture 'sd3': choose one of ['sd15', 'sdxl']" in run.stdout
    assert "weight_dtype must be one of ['fp16', 'fp32'], got 'bf16'" in run.stdout
    assert not (ROOT / "benchmarks" / "x").exists() and not (ROOT / "benchmarks" / "x.partial").exists()


@pytest.mark.slow
def test_the_composed_sdxl_rows_run_on_it_end_to_end(random_sdxl, tmp_path):
    """``bench_whole_image.py sdxl --quick --compose`` on the random SDXL (fp16 on disk, force_upcast,
    both encoders): PyTorch, OpenVINO and JAX each compose their 3-step row from calls of 1 and 3."""
    out = tmp_path / "whole.json"
    rows = ["torch_fp32_20", "ov_float_20", "jax_fp32_20"]
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_whole_image.py"),
            "sdxl",
            "--quick",
            "--compose",
            "--size",
            "512",  # 16x --quick's step: on a loaded machine, calls of 1 and 3 steps at 128x128 came out the wrong way round
            "--runs",
            "3",
            "--rows",
            *rows,
            "--quick-checkpoint",
            str(random_sdxl),
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert {k: data["rows"][k].get("error") for k in data["missing_rows"]} == {}
    assert data["complete"] is True
    settings = data["settings"]
    assert (settings["model"], settings["size"], settings["steps"], settings["compose"]) == (
        "sdxl",
        512,
        3,
        [1, 3],
    )
    assert data["artifacts"]["checkpoint"]["path"] == str(random_sdxl)
    for key in rows:
        row = data["rows"][key]
        assert row["ok"], (key, row.get("error"))
        assert row["composed"] == {"from_steps": [1, 3]}
        assert row["title"].endswith("(composed from calls of 1 and 3 steps)")
        assert sorted(row["calls"]) == ["1", "3"] and all(
            len(c["image_s"]) == 3 for c in row["calls"].values()
        )
        meta, median = row["timed"]["composed"], row["median"]
        # the call of 1 step plus two more step times, each the difference of the calls over 3 - 1
        short, long = (sorted(row["calls"][n]["image_s"])[1] for n in ("1", "3"))
        assert meta["step_s"] == pytest.approx((long - short) / 2) and meta["step_s"] > 0
        assert median["image_s"] == pytest.approx(short + 2 * meta["step_s"])
        assert median["composed"]["from_steps"] == [1, 3] and median["runs"] == 3
    assert data["rows"]["torch_fp32_20"]["unet_batch"] == 2  # SDXL's default guidance: CFG
    assert data["rows"]["jax_fp32_20"]["compile_s"] > 0
    table = data["table"]
    assert "rows marked composed: 3 steps composed from calls of 1 and 3 steps" in table
    assert table.count("(composed from calls of 1 and 3 steps)") == len(rows)
