"""The model card of a distilled tiny autoencoder: the ``README.md`` written beside it.

:func:`readme_text` fills :data:`README` (``taesd_card.md`` beside this module) from the run's
``taesd_log.json``: what it is, its table against the VAE
(:func:`sdaccel.tools.toys.taesd_eval.evaluation_table`), how to use it and the command that remakes
it. :func:`refresh_readme` writes it again from a finished folder, which is what
``python -m sdaccel.tools.toys.distill_taesd BASE OUT --readme-only`` does.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

from sdaccel.core.checkpoint import read_json
from sdaccel.core.staging import replace_text
from sdaccel.tools.toys.model_card import recipes_tried
from sdaccel.tools.toys.taesd_config import LOG_NAME, TaesdConfig
from sdaccel.tools.toys.taesd_eval import evaluation_table

#: The card, filled in by :func:`readme_text`.
README = resources.files(__package__).joinpath("taesd_card.md").read_text(encoding="utf-8")


#: What a shipped tiny autoencoder is used for, per output folder: the card says so.
USED_BY = {
    "tiny-shapes-sdxl-taesd": ", and is what notebook 07's smoke run\ndecodes with when it adds TAESD",
    "tiny-shapes-sd15-taesd": (
        ", and is what the SD 1.5 rows of the\nwhole-image quality table "
        "(`sdaccel.toy.whole_image_quality`) decode with when they add TAESD"
    ),
}

#: Where a shipped tiny autoencoder's decode is timed in OpenVINO, per output folder.
MEASURED_IN = {
    "tiny-shapes-sdxl-taesd": " Notebook 07\nmeasures it in OpenVINO, beside the whole image.",
}


def remake_command(checkpoint: Path, dst: Path, config: TaesdConfig, lora: Path | None) -> str:
    """The command line that makes this folder again (the flags that differ from the defaults)."""
    default = TaesdConfig()
    flags = [
        f"--{f.name.replace('_', '-')} {getattr(config, f.name)}"
        for f in dataclasses.fields(TaesdConfig)
        if f.type in ("int", "float") and getattr(config, f.name) != getattr(default, f.name)
    ]
    if lora is not None:
        flags.insert(0, f"--lora {lora}")
    return " ".join(["python -m sdaccel.tools.toys.distill_taesd", str(checkpoint), str(dst), *flags])


def readme_text(dst: Path, log: dict) -> str:
    """:data:`README` filled in from a run's ``log`` for the folder ``dst``."""
    import diffusers
    import torch

    config = TaesdConfig(**log["config"])
    checkpoint = Path(log["checkpoint"])
    lora = Path(log["lora"]) if log.get("lora") else None
    rows = log["evaluation"]["rows"]
    times = log["evaluation"]["decode_ms_per_image"]
    tiny = log["tiny_config"]
    return README.format(
        name=dst.name,
        base=checkpoint.name,
        base_path=str(checkpoint),
        path=str(dst),
        decoder_params=log["decoder_parameters"]["TAESD"],
        vae_params=log["decoder_parameters"]["VAE"],
        ratio=log["decoder_parameters"]["VAE"] / log["decoder_parameters"]["TAESD"],
        minutes=log["wall_s"]["train"] / 60,
        last=rows[-1]["latents"],
        images=rows[0]["images"],
        diffusers=diffusers.__version__,
        torch=torch.__version__.split("+")[0],
        table=evaluation_table(rows),
        cpu=log["cpu"],
        threads="one torch thread" if config.threads == 1 else f"{config.threads} torch threads",
        decode_images=times["images"],
        vae_ms=times["VAE"],
        tiny_ms=times["TAESD"],
        speed=times["VAE"] / times["TAESD"],
        command=remake_command(checkpoint, dst, config, lora),
        config_list="Config (`TaesdConfig`): "
        + ", ".join(f"`{k}={v}`" for k, v in dataclasses.asdict(config).items()),
        train_images=log["data"]["images"],
        scaling=log["vae_scaling_factor"],
        shape_weight=config.shape_weight,
        edge_weight=config.edge_weight,
        lr=config.lr,
        warmup=config.warmup_steps,
        steps=config.steps,
        batch=config.batch,
        width=config.width,
        levels=len(tiny["num_decoder_blocks"]),
        decoder_blocks=config.decoder_blocks,
        encoder_blocks=config.encoder_blocks,
        train_s=log["wall_s"]["train"],
        done=log["steps_done"],
        stopped=", stopped by the time cap" if log["stopped_by_time"] else "",
        data_s=log["wall_s"]["data"],
        eval_s=log["wall_s"].get("evaluation", 0.0),
        tried=recipes_tried(dst.name),
        used_by=USED_BY.get(dst.name, ""),
        measured_in=MEASURED_IN.get(dst.name, ""),
    )


def refresh_readme(folder: str | Path) -> Path:
    """Write ``folder``'s README.md again from its ``taesd_log.json`` (what ``--readme-only`` does)."""
    folder = Path(folder)
    replace_text(folder / "README.md", readme_text(folder, read_json(folder / LOG_NAME)))
    return folder / "README.md"
