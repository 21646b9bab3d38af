"""What each notebook needs: memory, disk, and which hub files. One table, read by the pre-flight
check (``python -m sdaccel.tools.workshop.doctor``) and the downloader (``python -m sdaccel.tools.workshop.download``).

The hub files are not listed here file by file: each :class:`Model` names a repository, the
pipeline components a notebook loads and the weight variant, and the glob patterns come from
:func:`sdaccel.core.checkpoint.allow_patterns`, the same call the loaders make. So what the downloader
fetches is exactly what the notebooks would fetch themselves.

Memory and disk are per profile. The *smoke* figures cover the tiny checkpoints of this
repository; the *full* figures are estimates for the real models (weights in the precision each
notebook uses, plus the OpenVINO exports and INT8 variants the CPU notebooks write under
``build/``), rounded up. The model downloads are counted once, in :data:`MODELS`, not per notebook.
The *rehearsal* (the full profile on the hub stand-in, ``sdaccel.course.run_profiles``) needs what
the full profile needs: the same models at the same size, and its overrides (fewer steps, a smaller
batch) leave the weights, which dominate these figures, as they are.

:func:`disk_shortfall` reads the free disk and compares it with a need, the one way both the
pre-flight check and the downloader do it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sdaccel.core.checkpoint import LORA_FILES, TINY_VAE_FILES, allow_patterns
from sdaccel.core.staging import free_bytes, nearest_existing

PROFILES = ("smoke", "full", "rehearsal")


@dataclass(frozen=True)
class Model:
    """Files of one hub repository that the notebooks read.

    ``components``: the pipeline components loaded (``None``: every one the pipeline has).
    ``variant``: the weight variant (``"fp16"`` reads ``*.fp16.safetensors``; ``None`` the default files).
    ``patterns``: explicit glob patterns for a repository that is not a diffusers pipeline.
    ``download_gib``: the size of those files on the hub, for planning before any metadata is fetched.
    ``parts``: the components that carry weights, so that a cache can be checked for completeness.
    """

    repo_id: str
    components: tuple[str, ...] | None = None
    variant: str | None = None
    patterns: tuple[str, ...] | None = None
    download_gib: float = 0.0
    parts: tuple[str, ...] = ()  # the components with weights (what a complete download must hold)

    def allow_patterns(self) -> list[str]:
        if self.patterns is not None:
            return list(self.patterns)
        return allow_patterns(self.components, self.variant)


#: The models of the full profile, by short name (``--models`` of the downloader).
MODELS = {
    # SDXL base in fp16: UNet 5.1 GB, text encoders 0.25 + 1.39 GB, VAE 0.17 GB
    "sdxl": Model(
        "stabilityai/stable-diffusion-xl-base-1.0",
        None,
        "fp16",
        download_gib=6.5,
        parts=("text_encoder", "text_encoder_2", "unet", "vae"),
    ),
    # SD 1.5 in fp32 (the OpenVINO export reads the full-precision weights): UNet 3.4 GB, text 0.5, VAE 0.3
    "sd15": Model(
        "stable-diffusion-v1-5/stable-diffusion-v1-5",
        None,
        None,
        download_gib=4.0,
        parts=("text_encoder", "unet", "vae"),
    ),
    # notebook 05's optional CLIP score (sdaccel.cpu.quality.clip_score reads it from the local cache only)
    "clip": Model(
        "openai/clip-vit-base-patch32",
        patterns=(
            "config.json",
            "model.safetensors",
            "preprocessor_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.json",
            "merges.txt",
            "special_tokens_map.json",
        ),
        download_gib=0.6,
    ),
    # notebook 07: the LCM-LoRAs (fused into the base models) and TAESD, the tiny autoencoder of SD 1.x
    "lcm-lora-sdxl": Model("latent-consistency/lcm-lora-sdxl", patterns=tuple(LORA_FILES), download_gib=0.4),
    "lcm-lora-sd15": Model(
        "latent-consistency/lcm-lora-sdv1-5", patterns=tuple(LORA_FILES), download_gib=0.2
    ),
    "taesd": Model("madebyollin/taesd", patterns=tuple(TINY_VAE_FILES), download_gib=0.01),
}


@dataclass(frozen=True)
class Needs:
    """Peak resident memory and disk written (beyond the model downloads), in GiB."""

    ram_gib: float
    disk_gib: float


@dataclass(frozen=True)
class Notebook:
    """One notebook's needs. ``models`` maps a :data:`MODELS` name to the components this notebook
    loads from it (``None``: all of them); the smoke profile reads no hub model at all."""

    stem: str
    accelerator: str
    smoke: Needs
    full: Needs
    models: dict[str, tuple[str, ...] | None]

    def needs(self, profile: str) -> Needs:
        check_profile(profile)
        return self.smoke if profile == "smoke" else self.full  # the rehearsal: the full models


NOTEBOOKS = {
    nb.stem.split("_")[0]: nb
    for nb in (
        Notebook(
            "00_environment_and_devices",
            "any",
            Needs(2.0, 0.1),
            Needs(4.0, 0.1),
            {"sdxl": ("text_encoder", "tokenizer")},
        ),
        # full: the rehearsal measured 19.3 GiB anonymous at most (benchmarks/results/rehearsal.json):
        # the comparison, diffusers' float32 UNet and VAE (its text encoders already released) beside
        # the bf16 JAX pipeline
        Notebook("01_sdxl_in_jax", "TPU v5e", Needs(3.0, 0.1), Needs(20.0, 0.5), {"sdxl": None}),
        # full: the rehearsal measured 13.5 GiB anonymous at most (benchmarks/results/rehearsal.json):
        # the plan cell, which compiles the SDXL program for a v5e-4 on the host
        Notebook(
            "02_sharding_across_cores", "TPU v5e-4/-8", Needs(3.0, 0.1), Needs(14.0, 0.5), {"sdxl": None}
        ),
        # full: the float32 comparison loads a second copy of the weights. The rehearsal (which leaves
        # it out) measured 16.4 GiB anonymous at most (benchmarks/results/rehearsal.json): the buckets
        # cell, after the batch sweep, with the bf16 weights and the programs of every shape so far
        Notebook("03_tpu_performance", "TPU v5e", Needs(3.0, 0.5), Needs(18.0, 2.0), {"sdxl": None}),
        # full: the f32 OpenVINO export of SD 1.5 (about 4 GB) under build/. The rehearsal measured
        # 12.3 GiB anonymous at most (benchmarks/results/rehearsal.json): the parity check, diffusers'
        # f32 pipeline beside OpenVINO's default one
        Notebook("04_openvino_export_and_run", "x86 CPU", Needs(3.0, 0.3), Needs(13.0, 5.0), {"sd15": None}),
        # full: its own export plus the INT8 UNets, each quantized in a child. The rehearsal (run
        # before 05b was split off) measured 13.7 GiB anonymous for the kernel and its children
        # together (benchmarks/results/rehearsal.json): the quality cell, with a quantizing child at
        # 9.2 before it
        Notebook(
            "05_int8_quantization",
            "x86 CPU",
            Needs(3.0, 0.3),
            Needs(16.0, 10.0),
            {"sd15": None, "clip": None},
        ),
        # full: full INT8 in one piece and in parts, then the per-group ranking, which runs one more
        # full INT8 quantization in the kernel beside the f32 pipeline (the rehearsal leaves it out)
        Notebook(
            "05b_int8_under_constraints",
            "x86 CPU",
            Needs(3.0, 0.3),
            Needs(19.0, 10.0),
            {"sd15": None, "clip": None},
        ),
        Notebook(
            "06_cpu_benchmark_and_comparison", "x86 CPU", Needs(3.0, 0.3), Needs(16.0, 8.0), {"sd15": None}
        ),
        Notebook("06b_cpu_stacks_and_quality", "x86 CPU", Needs(3.0, 0.3), Needs(16.0, 8.0), {"sd15": None}),
        # full: SDXL in bf16 for the JAX half (on the host while it loads), then SD 1.5's base and
        # LCM-LoRA exports (f32, about 4.3 GB each) and a hybrid INT8 UNet, quantized within a budget
        Notebook(
            "07_fewer_steps",
            "TPU v5e (JAX half), x86 CPU",
            Needs(3.0, 0.3),
            Needs(16.0, 10.0),
            {"sdxl": None, "lcm-lora-sdxl": None, "sd15": None, "lcm-lora-sd15": None, "taesd": None},
        ),
    )
}


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    return profile


def select(numbers: list[str] | None) -> list[Notebook]:
    """The notebooks named by number (``"01"``) or stem; all of them for ``None`` or ``[]``."""
    if not numbers:
        return list(NOTEBOOKS.values())
    chosen = []
    for key in numbers:
        match = [nb for nb in NOTEBOOKS.values() if nb.stem == key or nb.stem.split("_")[0] == key]
        if not match:
            raise ValueError(f"No notebook {key!r}: choose from {', '.join(NOTEBOOKS)}.")
        chosen += [nb for nb in match if nb not in chosen]
    return chosen


def models_for(notebooks: list[Notebook], only: list[str] | None = None) -> dict[str, Model]:
    """The hub models the notebooks read in the full profile, one entry per repository and
    variant, with the union of the components they load (so no file is listed twice).
    ``only`` keeps the named models (``sdxl``, ``sd15``, ``clip``)."""
    unknown = sorted(set(only or []) - set(MODELS))
    if unknown:
        raise ValueError(f"Unknown model {unknown}: choose from {', '.join(MODELS)}.")
    merged: dict[str, Model] = {}
    for nb in notebooks:
        for name, components in nb.models.items():
            if only and name not in only:
                continue
            base = MODELS[name]
            if name not in merged:
                merged[name] = _with_components(base, components)
                continue
            have = merged[name].components
            union = None if have is None or components is None else tuple(sorted({*have, *components}))
            merged[name] = _with_components(base, union)
    return merged


def _with_components(model: Model, components: tuple[str, ...] | None) -> Model:
    if model.patterns is not None:
        return model
    return replace(model, components=components)


def totals(notebooks: list[Notebook], profile: str) -> Needs:
    """Peak memory (the largest notebook: they run one at a time) and the disk all of them write."""
    needs = [nb.needs(profile) for nb in notebooks]
    return Needs(max((n.ram_gib for n in needs), default=0.0), sum(n.disk_gib for n in needs))


# ----------------------------------------------------------------------------------------------
# Disk: how much is free where the files will go, against how much they need
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Disk:
    """The free bytes of the disk holding ``path`` against the bytes needed there."""

    path: Path
    free_bytes: int
    need_bytes: float

    @property
    def short(self) -> bool:
        """Whether the disk has less free than needed."""
        return self.free_bytes < self.need_bytes

    @property
    def shortfall_bytes(self) -> float:
        """How many more bytes would have to be free (0 when there is enough)."""
        return max(self.need_bytes - self.free_bytes, 0)


def disk_shortfall(
    path: str | os.PathLike, need_bytes: float, read_free: Callable[[Path], int] | None = None
) -> Disk:
    """The free bytes at ``path`` against ``need_bytes``: read on the nearest existing folder by
    ``read_free`` (default: :func:`sdaccel.core.staging.free_bytes`; tests pass a fake), compared in :attr:`Disk.short`."""
    return Disk(Path(path), (read_free or free_bytes)(nearest_existing(path)), need_bytes)
