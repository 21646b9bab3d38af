"""``python -m sdaccel.tpu.generate`` on the tiny SDXL checkpoint: in this process, and as two JAX
processes (CPU collectives) that must write the same images; honest throughput; ``--out`` is
never a mix of two runs (bad inputs that must leave no ``--out`` are in test_contract_jax.py)."""

from __future__ import annotations

import jax

try:
    jax.config.update("jax_num_cpu_devices", 8)
except RuntimeError:  # backends already started by an earlier test module
    pass

import json

import numpy as np
import pytest
from PIL import Image

from sdaccel.tpu import generate
from sdaccel.tpu.sharded_pipeline import ShardedPipeline
from sdaccel.tpu.sharding import ShardingError

PROMPTS = ["a red circle", "a cat", "", "a blue square on a white background", "a horse riding", "a dog"]
COMMON = ["--steps", "2", "--height", "64", "--width", "64", "--dtype", "float32", "--no-progress"]


def write_prompts(folder) -> str:
    path = folder / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    return str(path)


def load_images(folder, n):
    return [np.asarray(Image.open(folder / f"{k:05d}.png")).astype(int) for k in range(n)]


@pytest.fixture(scope="module")
def single_run(tiny_sdxl, tmp_path_factory):
    """One run in this process: batch = every device, 5 prompts, so the last batch is padded."""
    folder = tmp_path_factory.mktemp("generate")
    out = folder / "out"
    generate.main(["--model", str(tiny_sdxl), "--prompts", write_prompts(folder), "--out", str(out), *COMMON])
    return out


def test_parser_and_prompt_file(tmp_path):
    args = generate.build_parser().parse_args(["--model", "m", "--prompts", "p.txt", "--out", "o"])
    # left out: the checkpoint's defaults (sdaccel.core.contract.Defaults)
    assert (args.steps, args.height, args.width, args.guidance, args.dtype, args.mesh) == (
        None, None, None, None, "bfloat16", "auto",
    )  # fmt: skip
    assert args.batch is None and args.seed == 0 and not (args.overwrite or args.resume)
    with pytest.raises(SystemExit):  # one or the other
        generate.build_parser().parse_args(
            ["--model", "m", "--prompts", "p", "--out", "o", "--overwrite", "--resume"]
        )
    (tmp_path / "p.txt").write_text("one\n\n  two  \n")
    assert generate.read_prompts(tmp_path / "p.txt") == ["one", "two"]
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(SystemExit, match="no prompts"):
        generate.read_prompts(tmp_path / "empty.txt")


def test_writes_images_records_and_timing(single_run):
    files = sorted(p.name for p in single_run.glob("*.png"))
    assert files == [f"{k:05d}.png" for k in range(5)]  # the padding images are dropped
    records = [json.loads(line) for line in (single_run / "images.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in records] == [p for p in PROMPTS if p]
    assert [r["noise_index"] for r in records] == list(range(5))
    timing = json.loads((single_run / "timing.json").read_text())
    assert timing["prompts"] == 5 and timing["device_count"] == jax.device_count()
    assert timing["batch"] == jax.device_count() and timing["compile_s"] > 0
    (only,) = timing["per_batch"]  # one batch of 8, 3 of them padding
    assert (only["images"], only["padded"]) == (5, jax.device_count() - 5)
    assert timing["images_per_s"] == pytest.approx(5 / only["run_s"])  # the padding is not counted
    assert json.loads((single_run / "run.json").read_text())["steps"] == 2
    assert [p.name for p in single_run.parent.iterdir() if p.name.startswith(".")] == []  # no staging left
    first = load_images(single_run, 2)
    assert first[0].shape == (64, 64, 3) and np.abs(first[0] - first[1]).max() > 0  # different noise


@pytest.mark.skipif(jax.device_count() < 2, reason="needs 2 devices")
def test_indivisible_batch_fails_before_loading(tmp_path, tiny_sdxl):
    args = ["--model", str(tiny_sdxl), "--prompts", write_prompts(tmp_path), "--out", str(tmp_path / "o")]
    with pytest.raises(ShardingError, match="multiple of 2"):
        generate.main([*args, "--mesh", "2", "--batch", "3", *COMMON])
    assert not (tmp_path / "o").exists()


def _run(tmp_path, tiny_sdxl, prompts, *extra):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(prompts) + "\n")
    out = tmp_path / "out"
    generate.main(["--model", str(tiny_sdxl), "--prompts", str(path), "--out", str(out), *COMMON, *extra])
    records = [json.loads(line) for line in (out / "images.jsonl").read_text().splitlines()]
    return out, records, json.loads((out / "timing.json").read_text())


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 devices")
def test_overwrite_resume_and_real_throughput(tmp_path, tiny_sdxl):
    """3 prompts, then 1 prompt with --overwrite: only the new run's image is left (it used to
    leave 00001.png and 00002.png, unlisted). 1 prompt on 4 devices counts 1 image, not 4. Then
    --resume makes only what images.jsonl does not list."""
    mesh = ["--mesh", "4"]
    out, records, _ = _run(tmp_path, tiny_sdxl, ["a red circle", "a cat", "a dog"], *mesh)
    assert sorted(p.name for p in out.glob("*.png")) == ["00000.png", "00001.png", "00002.png"]
    first = (out / "00000.png").read_bytes()

    out, records, timing = _run(tmp_path, tiny_sdxl, ["a blue square"], *mesh, "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["00000.png", "images.jsonl", "run.json", "timing.json"]
    assert records == [{"file": "00000.png", "prompt": "a blue square", "noise_index": 0, "seed": 0}]
    (only,) = timing["per_batch"]
    assert (only["images"], only["padded"], timing["made"]) == (1, 3, 1)
    assert timing["images_per_s"] == pytest.approx(1 / only["run_s"])  # 1 real image, not 4
    blue = (out / "00000.png").read_bytes()
    assert blue != first

    out, records, timing = _run(tmp_path, tiny_sdxl, ["a blue square", "a cat", "a dog"], *mesh, "--resume")
    assert [r["prompt"] for r in records] == ["a blue square", "a cat", "a dog"]
    assert (timing["made"], timing["kept_from_before"]) == (2, 1)
    assert timing["per_batch"][0]["noise_indices"] == [1, 2]
    assert (out / "00000.png").read_bytes() == blue  # kept, not made again

    # a shorter prompt file: its images are kept, the others' are removed with their records
    out, records, timing = _run(tmp_path, tiny_sdxl, ["a blue square"], *mesh, "--resume")
    assert timing["made"] == 0 and timing["images_per_s"] is None and len(records) == 1
    assert sorted(p.name for p in out.glob("*.png")) == ["00000.png"]


def test_a_failed_run_leaves_out_as_it_was(tmp_path, tiny_sdxl, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier run")

    def broken(self, *args, **kwargs):
        raise RuntimeError("the device went away")

    monkeypatch.setattr(ShardedPipeline, "generate_array", broken)
    with pytest.raises(RuntimeError, match="went away"):
        _run(tmp_path, tiny_sdxl, ["a red circle"], "--overwrite")
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (
        out / "keep.txt"
    ).read_text() == "an earlier run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "prompts.txt"]  # the staging folder is gone


@pytest.mark.slow
def test_two_processes_write_the_same_images(single_run, tiny_sdxl, tmp_path, jax_processes):
    out = tmp_path / "out"
    argv = ["-m", "sdaccel.tpu.generate", "--model", str(tiny_sdxl), "--prompts", write_prompts(tmp_path)]
    argv += ["--out", str(out), "--batch", "4", *COMMON]
    jax_processes(argv, timeout=240, xla_flags="--xla_force_host_platform_device_count=2")
    timing = json.loads((out / "timing.json").read_text())
    assert (timing["process_count"], timing["device_count"], timing["batches"]) == (2, 4, 2)
    # batch 4 on 4 devices of 2 hosts against batch 8 on this process's devices: same pixels
    for two, one in zip(load_images(out, 5), load_images(single_run, 5), strict=True):
        assert np.abs(two - one).max() <= 1  # uint8 rounding of float noise at most
