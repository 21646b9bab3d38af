"""The downloader, against a faked hub: exactly the loaders' files, one variant, no duplicates,
the size printed before anything is fetched, and a clear stop when the disk is too small."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from sdaccel.core.checkpoint import allow_patterns
from sdaccel.course import resources
from sdaccel.tools.workshop import download

MB = 2**20

#: A hub listing shaped like stabilityai/stable-diffusion-xl-base-1.0's: several copies of each model.
SDXL_FILES = {
    "model_index.json": 1,
    "sd_xl_base_1.0.safetensors": 6900,
    "sd_xl_base_1.0_0.9vae.safetensors": 6900,
    "scheduler/scheduler_config.json": 1,
    "text_encoder/config.json": 1,
    "text_encoder/model.safetensors": 490,
    "text_encoder/model.fp16.safetensors": 245,
    "text_encoder/model.onnx": 490,
    "text_encoder/flax_model.msgpack": 490,
    "text_encoder_2/config.json": 1,
    "text_encoder_2/model.safetensors": 2780,
    "text_encoder_2/model.fp16.safetensors": 1390,
    "tokenizer/vocab.json": 1,
    "tokenizer/merges.txt": 1,
    "tokenizer_2/vocab.json": 1,
    "unet/config.json": 1,
    "unet/diffusion_pytorch_model.safetensors": 10270,
    "unet/diffusion_pytorch_model.fp16.safetensors": 5135,
    "unet/diffusion_pytorch_model.fp16.bin": 5135,
    "vae/config.json": 1,
    "vae/diffusion_pytorch_model.safetensors": 335,
    "vae/diffusion_pytorch_model.fp16.safetensors": 167,
    "vae_1_0/diffusion_pytorch_model.fp16.safetensors": 167,
}
SD15_FILES = {
    "model_index.json": 1,
    "v1-5-pruned.safetensors": 7700,
    "feature_extractor/preprocessor_config.json": 1,
    "safety_checker/config.json": 1,
    "safety_checker/model.safetensors": 1220,
    "scheduler/scheduler_config.json": 1,
    "text_encoder/config.json": 1,
    "text_encoder/model.safetensors": 492,
    "text_encoder/model.fp16.safetensors": 246,
    "tokenizer/vocab.json": 1,
    "unet/config.json": 1,
    "unet/diffusion_pytorch_model.safetensors": 3440,
    "unet/diffusion_pytorch_model.non_ema.safetensors": 3440,
    "unet/diffusion_pytorch_model.fp16.safetensors": 1720,
    "vae/config.json": 1,
    "vae/diffusion_pytorch_model.safetensors": 335,
}
CLIP_FILES = {
    "config.json": 1,
    "model.safetensors": 600,
    "pytorch_model.bin": 600,
    "tokenizer.json": 2,
    "vocab.json": 1,
}


class FakeHub:
    def __init__(self):
        self.repos = {
            resources.MODELS["sdxl"].repo_id: SDXL_FILES,
            resources.MODELS["sd15"].repo_id: SD15_FILES,
            resources.MODELS["clip"].repo_id: CLIP_FILES,
            resources.MODELS["lcm-lora-sdxl"].repo_id: {"pytorch_lora_weights.safetensors": 394},
            resources.MODELS["lcm-lora-sd15"].repo_id: {"pytorch_lora_weights.safetensors": 135},
            resources.MODELS["taesd"].repo_id: {"config.json": 1, "diffusion_pytorch_model.safetensors": 10},
        }
        self.events = []

    def model_info(self, repo_id, files_metadata=False):
        assert files_metadata, "the sizes come from the files' metadata"
        self.events.append(("info", repo_id))
        siblings = [SimpleNamespace(rfilename=f, size=mb * MB) for f, mb in self.repos[repo_id].items()]
        return SimpleNamespace(sha="0" * 40, siblings=siblings)

    def snapshot_download(self, repo_id, revision, allow_patterns, cache_dir):
        self.events.append(("fetch", repo_id, revision, tuple(allow_patterns), cache_dir))
        return str(cache_dir)


def run(tmp_path, free=10**15, **kwargs):
    hub, printed = FakeHub(), []

    def out(line):
        printed.append(line)
        hub.events.append(("print", line))

    plans = download.download(
        dest=tmp_path / "cache",
        api=hub,
        fetch=hub.snapshot_download,
        free_bytes=lambda p: free,
        out=out,
        **kwargs,
    )
    return plans, hub, "\n".join(printed)


def test_sdxl_notebooks_fetch_the_fp16_pipeline_files_only(tmp_path):
    plans, hub, printed = run(tmp_path, notebooks=["00", "01", "02", "03"])
    assert [p.name for p in plans] == ["sdxl"]  # four notebooks, one model: listed once
    files = set(plans[0].files)
    weights = {f for f in files if f.endswith(".safetensors")}
    assert weights == {
        "text_encoder/model.fp16.safetensors",
        "text_encoder_2/model.fp16.safetensors",
        "unet/diffusion_pytorch_model.fp16.safetensors",
        "vae/diffusion_pytorch_model.fp16.safetensors",
    }
    assert {
        "model_index.json",
        "scheduler/scheduler_config.json",
        "tokenizer/vocab.json",
        "unet/config.json",
    } <= files
    assert plans[0].total_bytes == (245 + 1390 + 5135 + 167 + 9) * MB
    # the same patterns as the loader's own call (Pipeline.from_pretrained -> resolve_checkpoint)
    assert plans[0].patterns == allow_patterns(None, "fp16")


def test_cpu_notebooks_fetch_sd15_fp32_without_the_safety_checker(tmp_path):
    plans, _, _ = run(tmp_path, notebooks=["04", "05", "06"], models=["sd15"])
    files = set(plans[0].files)
    assert {f for f in files if f.endswith(".safetensors")} == {
        "text_encoder/model.safetensors",
        "unet/diffusion_pytorch_model.safetensors",
        "vae/diffusion_pytorch_model.safetensors",
    }
    assert "safety_checker/model.safetensors" not in files


def test_notebook_00_alone_reads_only_the_text_encoder(tmp_path):
    plans, _, _ = run(tmp_path, notebooks=["00"])
    weights = {f for f in plans[0].files if f.endswith(".safetensors")}
    assert weights == {"text_encoder/model.fp16.safetensors"}


def test_size_is_printed_before_the_first_fetch_and_the_fetch_is_pinned(tmp_path):
    plans, hub, printed = run(tmp_path)
    assert [p.name for p in plans] == ["sdxl", "sd15", "clip", "lcm-lora-sdxl", "lcm-lora-sd15", "taesd"]
    first_fetch = next(i for i, e in enumerate(hub.events) if e[0] == "fetch")
    size_line = next(i for i, e in enumerate(hub.events) if e[0] == "print" and e[1].startswith("model "))
    assert size_line < first_fetch
    total = sum(p.total_bytes for p in plans)
    assert f"{total / 2**30:.2f} GiB" in printed
    fetches = [e for e in hub.events if e[0] == "fetch"]
    assert [f[1] for f in fetches] == [p.repo_id for p in plans]
    assert all(f[2] == "0" * 40 and f[4] == str(tmp_path / "cache") for f in fetches)
    assert "export HF_HUB_CACHE=" in printed


def test_too_little_disk_stops_before_any_fetch(tmp_path):
    hub = FakeHub()
    with pytest.raises(download.DownloadError, match="Not enough disk"):
        download.download(
            ["01"],
            dest=tmp_path / "c",
            api=hub,
            fetch=hub.snapshot_download,
            free_bytes=lambda p: MB,
            out=lambda s: None,
        )
    assert not any(e[0] == "fetch" for e in hub.events)
    assert not (tmp_path / "c").exists()


def test_cached_files_are_not_counted_again(tmp_path, monkeypatch):
    cached = {"unet/diffusion_pytorch_model.fp16.safetensors"}
    monkeypatch.setattr(
        "huggingface_hub.try_to_load_from_cache",
        lambda repo_id, path, cache_dir=None, revision=None: str(tmp_path / path) if path in cached else None,
    )
    plans, _, printed = run(tmp_path, notebooks=["01"])
    assert plans[0].cached == cached
    assert plans[0].missing_bytes == plans[0].total_bytes - 5135 * MB


def test_bad_names_fail_before_the_hub_is_asked(tmp_path):
    hub = FakeHub()
    with pytest.raises(ValueError, match="No notebook '42'"):
        download.download(["42"], api=hub, fetch=hub.snapshot_download)
    with pytest.raises(ValueError, match="Unknown model"):
        download.download(None, ["sd3"], api=hub, fetch=hub.snapshot_download)
    with pytest.raises(download.DownloadError, match="read none"):
        download.download(["01"], ["sd15"], api=hub, fetch=hub.snapshot_download)
    assert hub.events == []


def test_hub_error_names_the_fix(tmp_path):
    class Gated(FakeHub):
        def model_info(self, repo_id, files_metadata=False):
            raise RuntimeError("401 Client Error: access to model is restricted")

    hub = Gated()
    with pytest.raises(download.DownloadError, match="hf auth login"):
        download.download(["01"], dest=tmp_path, api=hub, fetch=hub.snapshot_download)


def test_disk_probe_walks_up_to_an_existing_folder(tmp_path):
    seen = []
    download.check_disk(tmp_path / "a" / "b", 1, lambda p: seen.append(p) or 10)
    assert seen == [Path(tmp_path)]


def test_main_is_pointed_at_the_revision_once_it_is_fetched(tmp_path):
    """huggingface_hub writes no ``refs/main`` for a download by commit hash: the downloader does,
    after the fetch, so that a load by hub id (offline too) finds the files."""
    plans, hub, _ = run(tmp_path, notebooks=["04"], models=["sd15"])
    ref = tmp_path / "cache" / f"models--{plans[0].repo_id.replace('/', '--')}" / "refs" / "main"
    assert ref.read_text() == plans[0].revision
    assert [e[0] for e in hub.events if e[0] in ("fetch", "info")] == ["info", "fetch"]


def test_unfinished_files_of_a_killed_download_go_but_not_those_of_a_live_one(tmp_path):
    import threading

    import filelock

    repo = resources.MODELS["sd15"].repo_id
    blobs = download.repo_cache(tmp_path, repo) / "blobs"
    blobs.mkdir(parents=True)
    dead, live = blobs / "aa11.0a0a0a0a.incomplete", blobs / "bb22.0b0b0b0b.incomplete"
    dead.write_bytes(b"x" * MB)
    live.write_bytes(b"y" * MB)
    said, freed = [], []
    # huggingface_hub holds this lock while it writes the file; the cleaner runs in another thread,
    # since filelock's locks are re-entrant within one
    with filelock.FileLock(tmp_path / ".locks" / blobs.parent.name / "bb22.lock"):
        cleaner = threading.Thread(
            target=lambda: freed.append(download.clear_unfinished(tmp_path, repo, said.append))
        )
        cleaner.start()
        cleaner.join()
    assert freed == [MB] and not dead.exists() and live.exists()
    assert said == [f"Removed 1 unfinished file(s) of an interrupted download of {repo} (1.0 MiB freed)."]
