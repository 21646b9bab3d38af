"""A local stand-in for the Hugging Face hub: every hub id the notebooks' defaults read, in a real
hub cache, with random weights.

    python -m sdaccel.tools.workshop.hub_cache build/hf-home                 # real sizes: about 12 GB, a benchmark step
    python -m sdaccel.tools.workshop.hub_cache build/hf-home --scale tiny    # the same files, small configs (tests)
    HF_HUB_OFFLINE=1 HF_HOME=build/hf-home python -m sdaccel.tools.workshop.run_notebooks --profile rehearsal

**The weights are random.** Every picture made from this cache is noise, and every adherence or
CLIP score measured on it means nothing: use it to rehearse the code, the memory and the time of
the full profile, never to judge a picture. The ``rehearsal`` profile
(:mod:`sdaccel.course.run_profiles`) points the notebooks' kernels at it.

What it writes, into ``<HF_HOME>/hub`` (the folder ``HF_HOME`` names, or ``--cache-dir`` for a hub
cache itself, the folder ``HF_HUB_CACHE`` names): for each hub id of :data:`STAND_INS` (the models
of :data:`sdaccel.course.resources.MODELS` that the downloader fetches, and TAESDXL), the layout
``huggingface_hub`` itself writes, ``models--org--name/{blobs, snapshots/<revision>, refs/main}``,
so that ``from_pretrained("org/name")``, ``snapshot_download(..., local_files_only=True)``,
``scan_cache_dir``, :func:`sdaccel.core.checkpoint.resolve_checkpoint`, the downloader's plan and
the doctor's "models" check all find it, offline, through the code users run. Each repository has:

- the real architecture: every config from ``sdaccel/reference_configs`` (``--scale tiny``: the
  same classes and levels with small widths, :func:`tiny_configs`), built by
  :func:`sdaccel.tools.toys.random_checkpoints.build_random_checkpoint`;
- the real file names: ``model_index.json`` as the hub's (SD 1.5's names its safety checker and
  feature extractor, whose configs are there and whose weights are not, as in a cache the
  downloader fills), ``scheduler/scheduler_config.json``, the tokenizer folders (the small CLIP
  vocabulary of the toys), ``unet/diffusion_pytorch_model[.fp16].safetensors``,
  ``text_encoder/model[.fp16].safetensors``; the LCM-LoRAs' ``pytorch_lora_weights.safetensors``
  in the hub files' kohya layout (``lora_unet_<module>.lora_down.weight``, ``.lora_up.weight``,
  ``.alpha``) over the layers the LCM-LoRA script adapts; TAESD's ``config.json`` and weights;
  CLIP's ``config.json``, ``model.safetensors``, tokenizer and preprocessor files;
- weights in the dtype of the real files: fp32 in the default files, fp16 in the ``fp16`` variant
  and the LoRAs. ``--weights read`` (the default) writes the files the notebooks read, the variant
  each model of :data:`sdaccel.course.resources.MODELS` names (SDXL's fp16 files, SD 1.5's fp32
  ones), exactly as ``python -m sdaccel.tools.workshop.download`` would fetch them: a loader that reaches
  for another file fails here as it would for a reader. ``--weights all`` writes both, as the hub
  repositories hold them (SDXL then takes 14 GB more).

Each repository is built in a hidden staging folder beside it and renamed into place when whole
(:func:`sdaccel.core.staging.staged_folder`): a killed run leaves no half-written snapshot (the
next run removes its staging folder; until then ``scan_cache_dir`` warns about it). A repository
already built at the same scale and weights is kept (``--force`` rebuilds it). A repository that
this module did not write (a real download) is never touched: point ``HF_HOME`` elsewhere.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from importlib import resources as package_files
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from sdaccel.core.checkpoint import LORA_FILES, TINY_VAE_IDS
from sdaccel.core.faults import fault_point
from sdaccel.core.staging import disk_bytes, require_free_space, staged_folder
from sdaccel.course import resources
from sdaccel.tools.toys import random_checkpoints
from sdaccel.tools.toys.distill_config import TARGET_MODULES

SCALES = ("real", "tiny")
WEIGHTS = ("read", "all")
#: The file beside ``blobs/`` and ``snapshots/`` that marks a repository this module wrote.
MARKER = ".sdaccel-stand-in.json"


class StandInError(RuntimeError):
    """The stand-in cannot be written here (a real download in the way, an unknown id, no disk)."""


@dataclass(frozen=True)
class StandIn:
    """One hub repository of the stand-in: its id, what kind of repository it is (``pipeline``,
    ``lora``, ``tiny_vae``, ``clip``), the architecture it belongs to (``sdxl``, ``sd15``), the
    weight variant the notebooks read (``None``: the default files), and the size of those files
    at real scale, in GiB (for the disk check)."""

    repo_id: str
    kind: str
    architecture: str | None = None
    variant: str | None = None
    read_gib: float = 0.0


def _from_resources(name: str, kind: str, architecture: str | None = None) -> StandIn:
    model = resources.MODELS[name]
    return StandIn(model.repo_id, kind, architecture, model.variant, model.download_gib)


#: The hub ids of the stand-in, by the downloader's short names (``--ids``).
STAND_INS = {
    "sdxl": _from_resources("sdxl", "pipeline", "sdxl"),
    "sd15": _from_resources("sd15", "pipeline", "sd15"),
    "clip": _from_resources("clip", "clip"),
    "lcm-lora-sdxl": _from_resources("lcm-lora-sdxl", "lora", "sdxl"),
    "lcm-lora-sd15": _from_resources("lcm-lora-sd15", "lora", "sd15"),
    "taesd": _from_resources("taesd", "tiny_vae", "sd15"),
    # 07's FAST_VAE for SDXL, and vae="tiny" of an SDXL pipeline (sdaccel.core.checkpoint.TINY_VAE_IDS)
    "taesdxl": StandIn(TINY_VAE_IDS["StableDiffusionXLPipeline"], "tiny_vae", "sdxl", None, 0.01),
}

#: ``model_index.json`` of the hub repositories (``_diffusers_version`` is this install's).
MODEL_INDEX = {
    "sdxl": {
        "_class_name": "StableDiffusionXLPipeline",
        "force_zeros_for_empty_prompt": True,
        "add_watermarker": None,
        **{name: list(lib_cls) for name, lib_cls in random_checkpoints.SDXL_COMPONENTS.items()},
    },
    "sd15": {
        "_class_name": "StableDiffusionPipeline",
        "feature_extractor": ["transformers", "CLIPImageProcessor"],
        "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"],
        **{name: list(lib_cls) for name, lib_cls in random_checkpoints.SD15_COMPONENTS.items()},
    },
}

#: The LCM-LoRAs' rank on the hub, and a small one for ``--scale tiny``.
LORA_RANK = {"real": 64, "tiny": 4}


# ----------------------------------------------------------------------------------------------
# Configs: the reference architectures, and their tiny versions
# ----------------------------------------------------------------------------------------------


def reference_configs(architecture: str) -> dict[str, dict]:
    """Component -> config of a published architecture (``sdaccel/reference_configs``)."""
    folder = random_checkpoints.REFERENCE_ARCHITECTURES[architecture]
    root = package_files.files("sdaccel").joinpath("reference_configs", folder)
    return {
        p.name.removesuffix(".json"): json.loads(p.read_text())
        for p in root.iterdir()
        if p.name.endswith(".json")
    }


def tiny_configs(architecture: str) -> dict[str, dict]:
    """The reference configs of ``architecture`` with the widths and depths of the toys (32-64
    channels, 2 layers), and everything else kept: the classes, the number of levels and their
    block types, SDXL's added time conditioning, the VAE's scaling factor and ``force_upcast``."""
    configs = reference_configs(architecture)
    levels = len(configs["unet"]["block_out_channels"])
    widths = [32, *[64] * (levels - 1)]
    if architecture == "sdxl":
        configs["unet"].update(
            block_out_channels=widths,
            transformer_layers_per_block=[1, *[1] * (levels - 2), 2],
            attention_head_dim=[2, *[4] * (levels - 1)],
            cross_attention_dim=64,  # the two encoders' hidden states side by side: 32 + 32
            addition_time_embed_dim=8,
            projection_class_embeddings_input_dim=6 * 8 + 32,  # six time ids + the pooled projection
        )
    else:
        configs["unet"].update(block_out_channels=widths, attention_head_dim=8, cross_attention_dim=32)
    configs["unet"].update(layers_per_block=1, norm_num_groups=8, sample_size=8)
    for name in (c for c in configs if c.startswith("text_encoder")):
        configs[name].update(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            projection_dim=32,
        )
    configs["vae"].update(
        block_out_channels=[8, 16, 16, 16], layers_per_block=1, norm_num_groups=4, sample_size=32
    )
    return configs


def configs_for(architecture: str, scale: str) -> dict[str, dict]:
    return reference_configs(architecture) if scale == "real" else tiny_configs(architecture)


# ----------------------------------------------------------------------------------------------
# The files of each kind of repository, written into a plain folder
# ----------------------------------------------------------------------------------------------


def weight_files(stand_in: StandIn, weights: str) -> dict[str | None, str]:
    """Variant -> dtype of the weight files of a pipeline: the variant the notebooks read
    (``weights="read"``), or the default fp32 files and the fp16 variant (``"all"``)."""
    if weights == "all":
        return {None: "fp32", "fp16": "fp16"}
    return {stand_in.variant: "fp16" if stand_in.variant == "fp16" else "fp32"}


def write_pipeline(folder: Path, stand_in: StandIn, scale: str, weights: str) -> None:
    """A diffusers pipeline: the components of
    :func:`~sdaccel.tools.toys.random_checkpoints.build_random_checkpoint`, the hub's ``model_index.json``,
    and for SD 1.5 the configs of its safety checker and feature extractor."""
    import diffusers

    arch = stand_in.architecture
    configs = None if scale == "real" else tiny_configs(arch)
    random_checkpoints.build_random_checkpoint(
        arch, str(folder), configs=configs, variants=weight_files(stand_in, weights)
    )
    index = {**MODEL_INDEX[arch], "_diffusers_version": diffusers.__version__}
    (folder / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    if arch == "sd15":
        _write_safety_checker_configs(folder)


def _write_safety_checker_configs(folder: Path) -> None:
    """SD 1.5's ``safety_checker/config.json`` (a CLIP ViT-L/14 vision tower) and
    ``feature_extractor/preprocessor_config.json``: the configs every download fetches; its
    weights no loader here reads (and the downloader never fetches)."""
    from transformers import CLIPConfig, CLIPImageProcessor

    vision = dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16, num_hidden_layers=24)
    config = CLIPConfig(vision_config={**vision, "patch_size": 14}, projection_dim=768)
    config.architectures = ["StableDiffusionSafetyChecker"]
    config.save_pretrained(folder / "safety_checker")
    CLIPImageProcessor(crop_size=224, size={"shortest_edge": 224}).save_pretrained(
        folder / "feature_extractor"
    )


def lora_targets(architecture: str, scale: str) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Module name -> (down shape, up shape) of an LCM-LoRA of the UNet of ``architecture``: each
    Linear and Conv2d that the LCM-LoRA script adapts (:data:`sdaccel.tools.toys.distill_config.TARGET_MODULES`),
    found on a UNet built on the ``meta`` device (no memory)."""
    import torch
    from diffusers import UNet2DConditionModel

    rank = LORA_RANK[scale]
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(configs_for(architecture, scale)["unet"])
    shapes = {}
    for name, module in unet.named_modules():
        if not any(name == t or name.endswith("." + t) for t in TARGET_MODULES):
            continue
        if isinstance(module, torch.nn.Linear):
            shapes[name] = ((rank, module.in_features), (module.out_features, rank))
        elif isinstance(module, torch.nn.Conv2d):
            shapes[name] = (
                (rank, module.in_channels, *module.kernel_size),
                (module.out_channels, rank, 1, 1),
            )
    return shapes


def write_lora(folder: Path, stand_in: StandIn, scale: str, weights: str, seed: int = 0) -> None:
    """An LCM-LoRA of the UNet, fp16, in the kohya layout of the hub's files:
    ``lora_unet_<module, _ for .>.lora_down.weight`` / ``.lora_up.weight`` / ``.alpha``."""

    rng = np.random.default_rng(seed)
    tensors = {}
    for module, (down, up) in lora_targets(stand_in.architecture, scale).items():
        key = "lora_unet_" + module.replace(".", "_")
        fan_in = int(np.prod(down[1:]))
        tensors[f"{key}.lora_down.weight"] = (rng.standard_normal(down, np.float32) / fan_in**0.5).astype(
            np.float16
        )
        tensors[f"{key}.lora_up.weight"] = (rng.standard_normal(up, np.float32) * 1e-3).astype(np.float16)
        tensors[f"{key}.alpha"] = np.asarray(down[0], np.float16)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / LORA_FILES[0]))


def write_tiny_vae(folder: Path, stand_in: StandIn, scale: str, weights: str, seed: int = 0) -> None:
    """TAESD / TAESDXL: diffusers' ``AutoencoderTiny`` (its defaults are the published config),
    fp32, ``config.json`` and ``diffusion_pytorch_model.safetensors`` at the repository's top."""
    import torch
    from diffusers import AutoencoderTiny

    small = {"encoder_block_out_channels": (8,) * 4, "decoder_block_out_channels": (8,) * 4}
    torch.manual_seed(seed)
    AutoencoderTiny(**(small if scale == "tiny" else {})).eval().save_pretrained(folder)


def write_clip(folder: Path, stand_in: StandIn, scale: str, weights: str, seed: int = 0) -> None:
    """CLIP ViT-B/32 (transformers' ``CLIPConfig`` defaults are its config), fp32, with what
    ``CLIPProcessor`` reads: the toys' tokenizer files and the 224-pixel image processor."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    config = CLIPConfig()
    if scale == "tiny":
        small = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=2)
        config = CLIPConfig(text_config=small, vision_config=small, projection_dim=32)
    torch.manual_seed(seed)
    CLIPModel(config).eval().save_pretrained(folder)
    # the hub repository's files: the processor's two halves saved apart (preprocessor_config.json
    # and the tokenizer's), which CLIPProcessor.from_pretrained reads as one
    random_checkpoints.write_random_tokenizer(folder, pad_token="<|endoftext|>", model_max_length=77)
    CLIPImageProcessor().save_pretrained(folder)


WRITERS = {"pipeline": write_pipeline, "lora": write_lora, "tiny_vae": write_tiny_vae, "clip": write_clip}


# ----------------------------------------------------------------------------------------------
# The hub cache layout
# ----------------------------------------------------------------------------------------------


def repo_folder(cache: Path, repo_id: str) -> Path:
    """The folder of the model repository ``repo_id`` in the hub cache ``cache``."""
    return cache / f"models--{repo_id.replace('/', '--')}"


def revision_of(repo_id: str, scale: str, weights: str) -> str:
    """The stand-in's commit hash (40 hex digits, as the hub's): the same for the same build."""
    return hashlib.sha1(f"sdaccel stand-in {repo_id} {scale} {weights}".encode()).hexdigest()


def _blob_name(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def into_cache_layout(files: Path, repo: Path, revision: str) -> None:
    """Move the plain folder ``files`` into the repository folder ``repo`` as huggingface_hub lays
    out a download: each file in ``blobs/`` under its content hash (identical files once),
    ``snapshots/<revision>/<path>`` a relative link to it, and ``refs/main`` naming the revision
    (written last)."""
    blobs, snapshot = repo / "blobs", repo / "snapshots" / revision
    blobs.mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        blob = blobs / _blob_name(path)
        if blob.exists():
            path.unlink()
        else:
            path.rename(blob)
        link = snapshot / path.relative_to(files)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    shutil.rmtree(files)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)


def built(repo: Path, scale: str, weights: str) -> bool:
    """Whether ``repo`` is a whole stand-in of this scale and weights. Raises
    :class:`StandInError` for a repository this module did not write (a real download)."""
    if not repo.exists():
        return False
    marker = repo / MARKER
    if not marker.is_file():
        raise StandInError(
            f"{repo} holds a download of the real model, not a stand-in: it is left alone. Point the "
            "stand-in at another folder (HF_HOME=build/hf-home), or delete that folder first."
        )
    found = json.loads(marker.read_text())
    return (
        found.get("scale") == scale and found.get("weights") == weights and (repo / "refs" / "main").is_file()
    )


def build_repo(cache: Path, name: str, scale: str, weights: str, force: bool = False) -> Path:
    """Write the stand-in :data:`STAND_INS` ``[name]`` into the hub cache ``cache`` unless a whole
    one of this scale and weights is there; return its snapshot folder.

    1. Build the files in a plain folder inside a staging folder beside the repository.
    2. Lay them out as the cache does (:func:`into_cache_layout`) and mark the repository as a stand-in.
    3. Rename the staging folder into place (:func:`sdaccel.core.staging.staged_folder`).
    """
    stand_in = STAND_INS[name]
    repo = repo_folder(cache, stand_in.repo_id)
    revision = revision_of(stand_in.repo_id, scale, weights)
    if built(repo, scale, weights) and not force:
        return repo / "snapshots" / revision
    with staged_folder(repo) as stage:
        WRITERS[stand_in.kind](stage / "files", stand_in, scale, weights)
        into_cache_layout(stage / "files", stage, revision)
        fault_point("hub_cache.laid-out")
        marker = {"repo_id": stand_in.repo_id, "scale": scale, "weights": weights, "revision": revision}
        (stage / MARKER).write_text(json.dumps({**marker, "weights_are_random": True}, indent=1))
    return repo / "snapshots" / revision


# ----------------------------------------------------------------------------------------------
# The whole stand-in
# ----------------------------------------------------------------------------------------------


def need_gib(names: list[str], scale: str, weights: str) -> float:
    """Disk the stand-in of ``names`` takes at ``scale``, in GiB (an estimate; tiny: 0.1)."""
    if scale == "tiny":
        return 0.1
    total = 0.0
    for name in names:
        s = STAND_INS[name]
        factor = (3.0 if s.variant == "fp16" else 1.5) if (weights == "all" and s.kind == "pipeline") else 1.0
        total += s.read_gib * factor
    return total


def choose(ids: list[str] | None) -> list[str]:
    """The :data:`STAND_INS` names of ``ids`` (short names or hub ids); all of them for none."""
    if not ids:
        return list(STAND_INS)
    by_repo = {s.repo_id: name for name, s in STAND_INS.items()}
    unknown = [i for i in ids if i not in STAND_INS and i not in by_repo]
    if unknown:
        raise StandInError(
            f"No stand-in for {unknown}: choose from {', '.join(STAND_INS)} (or their hub ids)."
        )
    return [i if i in STAND_INS else by_repo[i] for i in ids]


def build_hub_cache(
    cache: str | os.PathLike,
    ids: list[str] | None = None,
    scale: str = "real",
    weights: str = "read",
    force: bool = False,
    out=print,
) -> dict[str, Path]:
    """Write the stand-in of ``ids`` (default: every one of :data:`STAND_INS`) into the hub cache
    folder ``cache`` (``<HF_HOME>/hub``); return hub id -> snapshot folder. Checks the disk first."""
    if scale not in SCALES or weights not in WEIGHTS:
        raise StandInError(
            f"scale must be one of {SCALES} and weights one of {WEIGHTS}; got {scale!r}, {weights!r}."
        )
    cache = Path(cache)
    names = choose(ids)
    cache.mkdir(parents=True, exist_ok=True)
    require_free_space(cache, int(need_gib(names, scale, weights) * 2**30), "the hub stand-in")
    snapshots = {}
    for name in names:
        snapshot = build_repo(cache, name, scale, weights, force)
        repo = snapshot.parent.parent
        snapshots[STAND_INS[name].repo_id] = snapshot
        out(
            f"{STAND_INS[name].repo_id:45s} {snapshot.name[:12]}  {disk_bytes(repo / 'blobs') / 2**30:7.2f} GiB"
        )
    return snapshots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "hf_home", type=Path, help="the folder HF_HOME will name (the cache goes to its hub/)"
    )
    parser.add_argument(
        "--cache-dir", action="store_true", help="the folder is a hub cache itself (HF_HUB_CACHE)"
    )
    parser.add_argument("--ids", nargs="*", help=f"only these ({' '.join(STAND_INS)}, or their hub ids)")
    parser.add_argument("--scale", choices=SCALES, default="real", help="real sizes, or the toys' (tests)")
    parser.add_argument(
        "--weights", choices=WEIGHTS, default="read", help="the files the notebooks read, or all"
    )
    parser.add_argument("--force", action="store_true", help="rebuild what is there")
    args = parser.parse_args(argv)
    cache = args.hf_home if args.cache_dir else args.hf_home / "hub"
    try:
        build_hub_cache(cache, args.ids, args.scale, args.weights, args.force)
    except (StandInError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    where = f"HF_HUB_CACHE={cache}" if args.cache_dir else f"HF_HOME={args.hf_home}"
    print(f"Random weights (pictures are noise, scores mean nothing). Use: HF_HUB_OFFLINE=1 {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
