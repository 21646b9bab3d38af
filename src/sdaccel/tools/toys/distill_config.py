"""What an LCM-LoRA distillation run is given and what it writes: :class:`DistillConfig` (every knob,
recorded in ``distill_log.json``), the layers it adapts (:data:`TARGET_MODULES`) and the adapter's
file name (:data:`WEIGHT_NAME`). :func:`add_config_flags` and :func:`config_from_args` turn such a
config dataclass into command-line flags and back (both distillations' commands use them).

Its own module, below the training (:mod:`sdaccel.tools.toys.distill`), the evaluation
(:mod:`sdaccel.tools.toys.distill_eval`) and the model card (:mod:`sdaccel.tools.toys.model_card`), which all
read it; light: no torch here.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

#: The adapter's file in the output folder (the diffusers LoRA layout's name).
WEIGHT_NAME = "pytorch_lora_weights.safetensors"

#: The layers the diffusers LCM-LoRA script adapts (suffixes of module names, as peft matches them).
TARGET_MODULES = (
    "to_q",
    "to_k",
    "to_v",
    "to_out.0",
    "proj_in",
    "proj_out",
    "ff.net.0.proj",
    "ff.net.2",
    "conv1",
    "conv2",
    "conv_shortcut",
    "downsamplers.0.conv",
    "upsamplers.0.conv",
    "time_emb_proj",
)


@dataclass
class DistillConfig:
    """Every knob of a distillation run (recorded in ``distill_log.json``)."""

    seed: int = 0
    threads: int = 1
    minutes: float = 25.0  # wall-time cap of the training loop
    steps: int = 1000  # optimizer steps (the learning rate follows a cosine over them)
    batch: int = 32
    lr: float = 2e-3
    warmup_steps: int = 50
    rank: int = 4
    w_min: float = 3.0  # guidance w of the teacher: x0 = cond + w (cond - uncond)
    w_max: float = 7.0
    num_ddim_timesteps: int = 50
    timestep_scaling: float = 10.0
    huber_c: float = 0.001
    ema_decay: float = 0.0  # > 0: an EMA of the LoRA weights is the target network and the adapter
    train_images: int = 0  # 0: as many as the base model was trained on; else n (same seed)
    # evaluation with diffusers' pipeline (held-out prompts)
    eval_prompts: int = 64
    eval_steps: tuple[int, ...] = (1, 2, 4, 8)
    lcm_guidance_scale: float = 1.0  # the adapter runs without classifier-free guidance
    base_steps: int = 20
    base_guidance_scale: float = 6.0

    def check(self) -> None:
        """Raise, naming the fix, on a value that cannot work."""
        if not self.minutes > 0:
            raise ValueError(f"--minutes must be > 0, got {self.minutes}.")
        if self.train_images < 0:
            raise ValueError(f"--train-images must be >= 0 (0: all), got {self.train_images}.")
        for name in ("steps", "batch", "rank", "num_ddim_timesteps", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if not 0 <= self.w_min <= self.w_max:
            raise ValueError(f"Need 0 <= --w-min <= --w-max, got {self.w_min} and {self.w_max}.")
        if not self.lr > 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}.")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"--ema-decay must be in [0, 1) (0: no EMA), got {self.ema_decay}.")


def add_config_flags(parser: argparse.ArgumentParser, config_class: type) -> None:
    """A ``--flag`` for each number of the dataclass ``config_class`` (``steps_max`` becomes
    ``--steps-max``), its default the field's; other fields have no flag."""
    for field in dataclasses.fields(config_class):
        # the type as written (a string where annotations are postponed, as in this package)
        kind = {"int": int, "float": float, int: int, float: float}.get(field.type)
        if kind is not None:
            flag = "--" + field.name.replace("_", "-")
            parser.add_argument(flag, type=kind, default=field.default, help=f"default {field.default}")


def config_from_args(args: argparse.Namespace, config_class: type):
    """The ``config_class`` the flags of :func:`add_config_flags` describe (fields without a flag
    keep their defaults)."""
    fields = dataclasses.fields(config_class)
    return config_class(**{f.name: getattr(args, f.name) for f in fields if hasattr(args, f.name)})
