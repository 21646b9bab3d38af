"""sdaccel.tools.workshop.hub_cache: the tiny-scale stand-in for the hub, read offline through the code users
run (resolve_checkpoint, snapshot_download, scan_cache_dir, the downloader's plan, the doctor)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sdaccel.core.checkpoint import shown_path
from sdaccel.course import resources
from sdaccel.tools.workshop import doctor, download, hub_cache

#: What a reader's kernel runs, offline, against the stand-in (a child Python: huggingface_hub
#: reads HF_HOME and HF_HUB_OFFLINE when it is imported).
OFFLINE_READER = r"""
import json, sys
from huggingface_hub import snapshot_download
from sdaccel.core.checkpoint import open_weights, read_defaults, resolve_checkpoint, resolve_lora, resolve_tiny_vae
from sdaccel.core.lora_files import read_lora

SDXL, SD15 = "stabilityai/stable-diffusion-xl-base-1.0", "stable-diffusion-v1-5/stable-diffusion-v1-5"
found = {"snapshots": {r: snapshot_download(r, local_files_only=True) for r in sys.argv[1:]}}
sdxl = resolve_checkpoint(SDXL, variant="fp16")  # notebooks 01-03 and 07's JAX half
sd15 = resolve_checkpoint(SD15)  # notebooks 04-07's OpenVINO half: the full-precision files
resolve_checkpoint(SDXL, components=["text_encoder", "tokenizer"], variant="fp16")  # notebook 00
found["folders"] = {SDXL: str(sdxl), SD15: str(sd15)}


def weight_files(folder, component, variant):
    reader = open_weights(folder, component, variant)
    return [f.path.name for f in reader.files] + [str(reader.get(reader.keys()[0]).dtype)]


found["weights"] = {
    f"{name}/{component}": weight_files(folder, component, variant)
    for name, folder, variant in (("sdxl", sdxl, "fp16"), ("sd15", sd15, None))
    for component in ("unet", "vae", "text_encoder")
}
found["defaults"] = read_defaults(SDXL).height
found["loras"] = {r: len(read_lora(resolve_lora(r)).layers["unet"]) for r in ("latent-consistency/lcm-lora-sdxl", "latent-consistency/lcm-lora-sdv1-5")}
found["taesd"] = [str(resolve_tiny_vae(sd15, "madebyollin/taesd")), str(resolve_tiny_vae(sdxl, "tiny"))]

import torch, diffusers
from transformers import CLIPModel, CLIPProcessor
pipe = diffusers.DiffusionPipeline.from_pretrained(sdxl, dtype=torch.float32, variant="fp16")  # 01's comparison
found["diffusers"] = type(pipe).__name__
CLIPModel.from_pretrained("openai/clip-vit-base-patch32", local_files_only=True)
found["clip"] = type(CLIPProcessor.from_pretrained("openai/clip-vit-base-patch32", local_files_only=True)).__name__
print(json.dumps(found))
"""


def build(hf_home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sdaccel.tools.workshop.hub_cache", str(hf_home), "--scale", "tiny", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("stand-in") / "hf-home"
    done = build(home)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Random weights" in done.stdout
    return home


def test_every_hub_id_the_notebooks_read_has_a_stand_in():
    assert {m.repo_id for m in resources.MODELS.values()} <= {s.repo_id for s in hub_cache.STAND_INS.values()}
    assert "weights are random" in hub_cache.__doc__.lower() and "noise" in hub_cache.__doc__


def test_the_cache_has_the_hub_layout(hf_home):
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    info = scan_cache_dir(hf_home / "hub")
    assert not info.warnings
    assert {r.repo_id for r in info.repos} == {s.repo_id for s in hub_cache.STAND_INS.values()}
    for repo in info.repos:
        (revision,) = repo.revisions
        assert revision.refs == {"main"} and len(revision.commit_hash) == 40
        assert all(Path(f.file_path).is_symlink() for f in revision.files), (
            "links into blobs/, as the hub writes"
        )
    sdxl = "stabilityai/stable-diffusion-xl-base-1.0"
    found = try_to_load_from_cache(
        sdxl, "unet/diffusion_pytorch_model.fp16.safetensors", cache_dir=hf_home / "hub"
    )
    assert isinstance(found, str)
    assert (
        try_to_load_from_cache(sdxl, "unet/diffusion_pytorch_model.safetensors", cache_dir=hf_home / "hub")
        is None
    )
    index = json.loads(
        Path(try_to_load_from_cache(sdxl, "model_index.json", cache_dir=hf_home / "hub")).read_text()
    )
    assert (
        index["_class_name"] == "StableDiffusionXLPipeline" and index["force_zeros_for_empty_prompt"] is True
    )
    sd15 = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    index = json.loads(
        Path(try_to_load_from_cache(sd15, "model_index.json", cache_dir=hf_home / "hub")).read_text()
    )
    assert index["safety_checker"] == ["stable_diffusion", "StableDiffusionSafetyChecker"]


def test_the_notebooks_hub_ids_resolve_offline_through_the_users_code(hf_home):
    repos = sorted(s.repo_id for s in hub_cache.STAND_INS.values())
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_READER, *repos], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(Path(p).is_dir() and str(hf_home) in p for p in found["snapshots"].values())
    # what the notebooks print for a resolved hub id: its id and revision, no path of this machine
    for repo, folder in found["folders"].items():
        revision = Path(folder).name
        assert shown_path(folder) == f"hub cache: {repo}, revision {revision[:12]}"
    # variant="fp16" reads the fp16 files in fp16; SD 1.5's default files are float32
    assert found["weights"]["sdxl/unet"] == ["diffusion_pytorch_model.fp16.safetensors", "float16"]
    assert found["weights"]["sdxl/text_encoder"] == ["model.fp16.safetensors", "float16"]
    assert found["weights"]["sd15/unet"] == ["diffusion_pytorch_model.safetensors", "float32"]
    assert found["weights"]["sd15/text_encoder"] == ["model.safetensors", "float32"]
    assert found["defaults"] == 8 * 8, "the tiny UNet's sample_size times the VAE's scale"
    assert all(n > 10 for n in found["loras"].values())
    assert [Path(p).parent.parent.name for p in found["taesd"]] == [
        "models--madebyollin--taesd",
        "models--madebyollin--taesdxl",
    ]
    assert found["diffusers"] == "StableDiffusionXLPipeline" and found["clip"] == "CLIPProcessor"


def doctor_models_check(hf_home: Path, names: list[str] | None = None):
    from huggingface_hub import scan_cache_dir

    models = resources.models_for(resources.select(None), names)
    cached, unfinished = doctor.read_cache(models, scan_cache_dir(hf_home / "hub"))
    return doctor.check_models(models, cached, hub_ok=False, profile="full", unfinished=unfinished)


def test_the_doctor_sees_the_pipelines_clip_and_taesd_cached(hf_home):
    check = doctor_models_check(hf_home, ["sdxl", "sd15", "clip", "taesd"])
    assert check.status == "ok" and check.detail.startswith("cached: "), check


def test_the_doctor_sees_the_lcm_loras_cached(hf_home):
    check = doctor_models_check(hf_home, ["lcm-lora-sdxl", "lcm-lora-sd15"])
    assert check.status == "ok", check


def test_the_doctors_rehearsal_reads_the_stand_in_and_names_its_fix(hf_home, tmp_path, monkeypatch):
    """``doctor --profile rehearsal`` looks for the models in the stand-in the rehearsal's kernels
    read (never the hub): there it finds them; in an empty stand-in they are a blocker whose fix
    writes the stand-in."""
    from sdaccel.course import run_profiles

    monkeypatch.setitem(run_profiles.KERNEL_ENV["rehearsal"], "HF_HOME", str(hf_home))
    assert doctor.rehearsal_cache() == hf_home / "hub"
    checks = {c.name: c for c in doctor.run_checks("rehearsal", ["00", "04"])}
    assert checks["models"].status == "ok", checks["models"]
    assert "hub" not in checks, "the rehearsal asks nothing of the hub"
    full = resources.totals(resources.select(["00", "04"]), "full")
    assert f"{full.ram_gib:.0f} GiB needed (rehearsal)" in checks["memory"].detail

    monkeypatch.setitem(run_profiles.KERNEL_ENV["rehearsal"], "HF_HOME", str(tmp_path / "empty"))
    models = {c.name: c for c in doctor.run_checks("rehearsal", ["04"])}["models"]
    assert models.status == "fail" and models.detail.startswith("not in the hub stand-in: ")
    assert models.fix.startswith("make hub-cache   (python -m sdaccel.tools.workshop.hub_cache ")


def test_the_downloader_finds_nothing_left_to_fetch(hf_home):
    models = resources.models_for(resources.select(None))
    for name, model in models.items():
        snapshot = hub_cache.build_repo(hf_home / "hub", name, "tiny", "read")  # already there: kept
        files = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()]
        api = SimpleNamespace(
            model_info=lambda repo_id, files_metadata, s=snapshot, f=files: SimpleNamespace(
                sha=s.name, siblings=[SimpleNamespace(rfilename=x, size=1) for x in f]
            )
        )
        plan = download.plan_repo(name, model, api, cache_dir=str(hf_home / "hub"))
        assert plan.files and plan.missing_bytes == 0, (name, set(plan.files) - plan.cached)


def test_a_real_download_is_never_overwritten(tmp_path):
    real = hub_cache.repo_folder(tmp_path / "hub", "madebyollin/taesd")
    (real / "snapshots").mkdir(parents=True)
    with pytest.raises(hub_cache.StandInError, match="real model.*HF_HOME=build/hf-home"):
        hub_cache.build_hub_cache(tmp_path / "hub", ["taesd"], scale="tiny")
    with pytest.raises(hub_cache.StandInError, match="No stand-in for \\['nope'\\]"):
        hub_cache.choose(["nope"])
    assert hub_cache.choose(["madebyollin/taesdxl", "sd15"]) == ["taesdxl", "sd15"]


def test_a_killed_build_leaves_no_snapshot_and_the_next_one_finishes(tmp_path):
    home = tmp_path / "hf-home"
    killed = build(home, "--ids", "taesd", env={"SDACCEL_FAULT": "hub_cache.laid-out:kill"})
    assert killed.returncode == -9
    assert not hub_cache.repo_folder(home / "hub", "madebyollin/taesd").exists()
    assert list((home / "hub").glob(".models--madebyollin--taesd.staging-*")), "the killed build's stage"
    again = build(home, "--ids", "taesd")
    assert again.returncode == 0, again.stderr[-2000:]
    assert not list((home / "hub").glob(".models--*")), "the next build removes what the killed one left"
    assert (hub_cache.repo_folder(home / "hub", "madebyollin/taesd") / "refs" / "main").is_file()


def test_tiny_configs_keep_the_reference_architecture():
    for arch in ("sdxl", "sd15"):
        real, tiny = hub_cache.reference_configs(arch), hub_cache.tiny_configs(arch)
        assert tiny.keys() == real.keys()
        for key in ("down_block_types", "up_block_types", "addition_embed_type", "use_linear_projection"):
            assert tiny["unet"].get(key) == real["unet"].get(key), (arch, key)
        assert tiny["vae"].get("scaling_factor") == real["vae"].get("scaling_factor")
        assert max(tiny["unet"]["block_out_channels"]) <= 64


def test_weight_files_follow_the_variant_the_notebooks_read():
    sdxl, sd15 = hub_cache.STAND_INS["sdxl"], hub_cache.STAND_INS["sd15"]
    assert hub_cache.weight_files(sdxl, "read") == {"fp16": "fp16"}
    assert hub_cache.weight_files(sd15, "read") == {None: "fp32"}
    assert hub_cache.weight_files(sd15, "all") == {None: "fp32", "fp16": "fp16"}
    assert 10 < hub_cache.need_gib(list(hub_cache.STAND_INS), "real", "read") < 14
