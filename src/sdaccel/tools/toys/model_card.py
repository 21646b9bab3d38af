"""The model card of a distilled LCM-LoRA: the ``README.md`` written beside the adapter.

:func:`write_readme` fills :data:`README` (``model_card.md`` beside this module) from the run's
config and log (``distill_log.json``): what the adapter is, its adherence table against the base
model (:mod:`sdaccel.tools.toys.distill_eval`), the steps sweep in every pipeline when one was run
(:mod:`sdaccel.toy.steps_report`), how to use it, the command that remakes it and, for a shipped
adapter, the recipes tried and not kept (:func:`recipes_tried`: ``recipes_tried/<folder>.md``). :func:`refresh_readme` writes it again from a finished folder, which is
what ``python -m sdaccel.tools.toys.distill BASE OUT --readme-only`` does.

The trained base checkpoints' own READMEs (``checkpoints/tiny-shapes-*/README.md``) are written by
hand; :mod:`sdaccel.tools.toys.train` writes no card.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

from sdaccel.core.checkpoint import read_json
from sdaccel.core.staging import replace_text
from sdaccel.tools.toys.distill_config import TARGET_MODULES, WEIGHT_NAME, DistillConfig
from sdaccel.tools.toys.distill_eval import adherence_table
from sdaccel.toy.steps_report import format_table, pipeline_verdicts

#: The card, filled in by :func:`readme_text`.
README = resources.files(__package__).joinpath("model_card.md").read_text(encoding="utf-8")


def recipes_tried(folder: str) -> str:
    """What was tried for the shipped checkpoint ``folder`` (an adapter or a tiny autoencoder) and
    not kept, for its card: ``recipes_tried/<folder>.md`` beside this module, or nothing. It says
    what was measured, so that the next attempt starts from there."""
    text = resources.files(__package__).joinpath("recipes_tried", f"{folder}.md")
    return text.read_text(encoding="utf-8") if text.is_file() else ""


def target_verdict(rows: list[dict], base_steps: int, prompts: int) -> str:
    """The issue's target in one sentence: the adapter at 4 steps within 5 points of the base
    model at ``base_steps``."""
    base = next(r for r in rows if not r["lora"] and r["steps"] == base_steps)
    lcm = next((r for r in rows if r["lora"] and r["steps"] == 4), None)
    if lcm is None:
        return "The adapter was not evaluated at 4 steps."
    gap = 100 * (base["score"] - lcm["score"])
    met = "met" if gap <= 5 else "**missed**"
    return (
        f"Target: the adapter at 4 steps within 5 points of the base model at {base_steps} steps. "
        f"On these {prompts} prompts through diffusers: {lcm['score']:.3f} against "
        f"{base['score']:.3f} ({abs(gap):.1f} points {'below' if gap > 0 else 'above'}): {met}."
    )


def steps_section(steps_result: dict | None, checkpoint: Path, dst: Path) -> str:
    """The sweep of :mod:`sdaccel.toy.adherence_steps` (JAX, OpenVINO f32, INT8), when it was run."""
    command = (
        f"`python -m sdaccel.toy.adherence_steps {checkpoint} --lora {dst} --prompts 96 "
        f"--out benchmarks/results/steps_adherence_{checkpoint.name}.json`"
    )
    if steps_result is None:
        return f"The sweep over 1 to 20 steps in the JAX, OpenVINO f32 and INT8 pipelines: {command}."
    c = steps_result["config"]
    int8 = ""
    if any(r["pipeline"] not in ("jax_fp32", "ov_f32") for r in steps_result["rows"]):
        int8 = (
            "; the INT8 UNets are quantized after the fusion and calibrated on training captions "
            "with their own sampler"
        )
    else:  # the sweep was run without INT8 rows
        command = command.replace(" --out ", " --int8 --out ")
    return (
        "### Against steps, in every pipeline\n\n"
        f"{command}: {c['prompts']} held-out prompts, the same noise in every row, score (colour and "
        f"shape right); base: the checkpoint's sampler at guidance {c['base_guidance']:g}; LCM-LoRA: "
        f"LCM, guidance {c['lcm_guidance']:g}, fused into the weights (JAX `fuse_lora`, OpenVINO at "
        f"export{int8}). JAX "
        f"{steps_result['versions']['jax']}, OpenVINO {steps_result['versions']['openvino'].split('-')[0]}, NNCF "
        f"{steps_result['versions']['nncf']}.\n\n" + format_table(steps_result["rows"]) + "\n\n"
        "The target in each pipeline (the adapter at 4 steps against the base sampler at its most "
        "steps): " + "; ".join(pipeline_verdicts(steps_result["rows"])) + "."
    )


def remake_command(checkpoint: Path, dst: Path, config: DistillConfig) -> str:
    """The command line that remakes the adapter: every number that is not the default."""
    command = f"nice -n 5 python -m sdaccel.tools.toys.distill {checkpoint} {dst}"
    defaults = DistillConfig()
    for field in dataclasses.fields(DistillConfig):
        value = getattr(config, field.name)
        if value != getattr(defaults, field.name) and not isinstance(value, tuple):
            command += f" --{field.name.replace('_', '-')} {value}"
    return command


def target_network(config: DistillConfig) -> str:
    """What the student is matched against: the EMA of its LoRA weights, or itself."""
    if config.ema_decay > 0:
        return (
            f"an exponential moving average of the student's LoRA weights, decay {config.ema_decay:g}, "
            "without gradient; that average is the adapter written"
        )
    return "the student without gradient"


def readme_text(
    weight_bytes: int,
    dst: Path,
    checkpoint: Path,
    config: DistillConfig,
    log: dict,
    steps_result: dict | None = None,
) -> str:
    """:data:`README` filled in for the adapter ``dst`` (``weight_bytes`` its file's size) made from
    ``checkpoint`` with ``config``; ``log`` is its ``distill_log.json``, with the evaluation."""
    import diffusers
    import torch

    rows = log["adherence"]["rows"]
    skip = 1000 // config.num_ddim_timesteps  # DDIMSolver's skip over the 1000 training timesteps
    return README.format(
        # 1. What the adapter is, and how it draws
        name=dst.name,
        base=checkpoint.name,
        base_path=str(checkpoint),
        path=str(dst),
        weights=WEIGHT_NAME,
        kb=weight_bytes / 1e3,
        rank=config.rank,
        params=log["lora_parameters"],
        minutes=log["wall_s"]["train"] / 60,
        base_steps=config.base_steps,
        base_sampler=rows[0]["sampler"],
        base_guidance=config.base_guidance_scale,
        lcm_guidance=config.lcm_guidance_scale,
        # 2. Its adherence, and the steps sweep
        prompts=log["adherence"]["prompts"],
        diffusers=diffusers.__version__,
        torch=torch.__version__.split("+")[0],
        table=adherence_table(rows),
        verdict=target_verdict(rows, config.base_steps, log["adherence"]["prompts"]),
        pipelines=steps_section(steps_result, checkpoint, dst),
        # 3. How it was made
        w_min=config.w_min,
        w_max=config.w_max,
        g_min=config.w_min + 1,
        g_max=config.w_max + 1,
        command=remake_command(checkpoint, dst, config),
        config_list="Config (`DistillConfig`): "
        + ", ".join(f"`{k}={v}`" for k, v in dataclasses.asdict(config).items()),
        modules=", ".join(f"`{m}`" for m in TARGET_MODULES),
        batch=config.batch,
        images=log["data"]["images"],
        ddim=config.num_ddim_timesteps,
        grid=f"{skip - 1}, {2 * skip - 1}, ..., {config.num_ddim_timesteps * skip - 1}",
        skip=skip,
        target=target_network(config),
        huber_c=config.huber_c,
        lr=config.lr,
        warmup=config.warmup_steps,
        steps=config.steps,
        # 4. The run's times, and the recipes tried before
        train_s=log["wall_s"]["train"],
        done=log["steps_done"],
        stopped=", stopped by the time cap" if log["stopped_by_time"] else "",
        eval_s=log["wall_s"].get("evaluation", 0.0),
        cpu=log["cpu"],
        tried=recipes_tried(dst.name),
    )


def write_readme(
    stage: Path,
    dst: Path,
    checkpoint: Path,
    config: DistillConfig,
    log: dict,
    steps_result: dict | None = None,
) -> None:
    """``stage/README.md``: the card of the adapter in ``stage``, which will be published as ``dst``."""
    weight_bytes = (stage / WEIGHT_NAME).stat().st_size
    replace_text(stage / "README.md", readme_text(weight_bytes, dst, checkpoint, config, log, steps_result))


def config_from_log(log: dict) -> DistillConfig:
    """The :class:`DistillConfig` a ``distill_log.json`` recorded (lists back to tuples)."""
    fields = {f.name for f in dataclasses.fields(DistillConfig)}
    return DistillConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in log["config"].items() if k in fields}
    )


def refresh_readme(folder: str | Path, steps_json: str | Path | None = None) -> Path:
    """Write ``folder``'s README.md again from its ``distill_log.json``, with the sweep of
    :mod:`sdaccel.toy.adherence_steps` from ``steps_json`` (default
    ``benchmarks/results/steps_adherence_<base>.json`` when it exists)."""
    folder = Path(folder)
    log = read_json(folder / "distill_log.json")
    checkpoint = Path(log["checkpoint"])
    config = config_from_log(log)
    steps_json = Path(steps_json or f"benchmarks/results/steps_adherence_{checkpoint.name}.json")
    steps_result = read_json(steps_json) if steps_json.is_file() else None
    write_readme(folder, folder, checkpoint, config, log, steps_result)
    return folder / "README.md"
