"""The settings of a tiny autoencoder's distillation (:class:`TaesdConfig`) and its inputs, checked
before anything runs: the checkpoint's VAE (:func:`checkpoint_vae`), the destination
(:func:`check_destination`), and the ``AutoencoderTiny`` arguments that follow the VAE
(:func:`tiny_config`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdaccel.core.checkpoint import read_config

#: What the folder holds beside the weights and config diffusers writes.
LOG_NAME = "taesd_log.json"
WEIGHTS = "diffusion_pytorch_model.safetensors"


@dataclass
class TaesdConfig:
    """Every knob of a run (recorded in ``taesd_log.json``)."""

    seed: int = 0
    threads: int = 1
    minutes: float = 20.0  # wall-time cap of the training loop
    steps: int = 2500  # optimizer steps (the learning rate follows a cosine over them)
    batch: int = 32
    lr: float = 5e-3
    warmup_steps: int = 50
    width: int = 16  # channels at every level (TAESD: 64)
    decoder_blocks: int = 3  # blocks per decoder level
    encoder_blocks: int = 1  # blocks per encoder level after the first (which has one)
    shape_weight: float = 2.0  # loss weight added on the shape's pixels
    edge_weight: float = 6.0  # and on a one-pixel band either side of its outline
    train_images: int = 0  # 0: as many as the checkpoint was trained on; else n (same seed)
    # evaluation: held-out prompts and data-set images, decoded by both autoencoders
    eval_prompts: int = 64
    base_steps: int = 20
    base_guidance_scale: float = 6.0
    lcm_steps: int = 4
    lcm_guidance_scale: float = 1.0

    def check(self) -> None:
        """Raise, naming the fix, on a value that cannot work."""
        if not self.minutes > 0:
            raise ValueError(f"--minutes must be > 0, got {self.minutes}.")
        if self.train_images < 0:
            raise ValueError(f"--train-images must be >= 0 (0: all), got {self.train_images}.")
        for name in ("steps", "batch", "width", "decoder_blocks", "threads", "eval_prompts", "lcm_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if self.encoder_blocks < 0:
            raise ValueError(f"--encoder-blocks must be >= 0, got {self.encoder_blocks}.")
        if not self.lr > 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}.")
        if self.shape_weight < 0 or self.edge_weight < 0:
            raise ValueError(
                f"--shape-weight and --edge-weight must be >= 0, got {self.shape_weight} and {self.edge_weight}."
            )


def checkpoint_vae(folder: str | Path) -> dict:
    """The config of ``folder``'s VAE (an ``AutoencoderKL`` of at least two levels); a clear error
    for a folder that is no diffusers checkpoint, or whose VAE a tiny autoencoder cannot follow."""
    folder = Path(folder)
    if not (folder / "model_index.json").is_file():
        raise FileNotFoundError(
            f"{folder}: no model_index.json; pass a trained diffusers checkpoint folder "
            "(e.g. checkpoints/tiny-shapes-sdxl)."
        )
    if not (folder / "vae" / "config.json").is_file():
        raise FileNotFoundError(
            f"{folder} has no vae/config.json: a tiny autoencoder is distilled from its VAE."
        )
    vae = read_config(folder, "vae")
    if vae.get("_class_name") != "AutoencoderKL":
        raise ValueError(
            f"{folder}/vae is a {vae.get('_class_name')!r}; the tiny autoencoder learns an AutoencoderKL's decodes."
        )
    if len(vae["block_out_channels"]) < 2:
        raise ValueError(f"{folder}'s VAE has one level; a tiny autoencoder needs at least 2.")
    return vae


def check_destination(dst: str | Path, overwrite: bool) -> Path:
    """``dst`` as a path, unless it exists and ``overwrite`` is not set (then a clear error)."""
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists; pass --overwrite to replace it, or choose another folder.")
    return dst


def tiny_config(vae: dict, config: TaesdConfig) -> dict:
    """The ``AutoencoderTiny`` arguments for the VAE config ``vae``: its latent channels, one level
    per level of it (so the same image-to-latent scale), ``config.width`` channels everywhere;
    ``scaling_factor`` 1.0 (it decodes the diffusion latents as they are) and TAESD's
    ``latent_magnitude`` / ``latent_shift`` (used only to store latents in 8 bits)."""
    levels = len(vae["block_out_channels"])
    return {
        "in_channels": vae.get("in_channels", 3),
        "out_channels": vae.get("out_channels", 3),
        "latent_channels": vae.get("latent_channels", 4),
        "encoder_block_out_channels": (config.width,) * levels,
        "decoder_block_out_channels": (config.width,) * levels,
        "num_encoder_blocks": (1, *[config.encoder_blocks] * (levels - 1)),
        "num_decoder_blocks": (config.decoder_blocks,) * levels,
        "act_fn": "relu",
        "upsample_fn": "nearest",
        "upsampling_scaling_factor": 2,
        "latent_magnitude": 3,
        "latent_shift": 0.5,
        "force_upcast": False,
        "scaling_factor": 1.0,
    }
