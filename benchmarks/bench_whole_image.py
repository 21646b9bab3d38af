"""Whole-image time, prompt to PIL image, of every CPU configuration beside PyTorch fp32, in one run.

    python benchmarks/bench_whole_image.py sd15 --reuse --out benchmarks/results/whole_image_sd15.json
    python benchmarks/bench_whole_image.py sd15 --quick          # a short self-check on a tiny model
    python benchmarks/bench_whole_image.py sd15 --rows torch_fp32_20 ov_float_20 --runs 3
    python benchmarks/bench_whole_image.py sdxl --quick --compose   # the SDXL paths on a tiny SDXL
    python benchmarks/bench_whole_image.py sdxl --compose --tpu --runs 1 --warmup-steps 1 \\
        --out benchmarks/results/whole_image_sdxl.json

The model is a *real architecture with random weights* (``sd15``: SD 1.5 at 512x512; ``sdxl``:
SDXL base at 1024x1024, both text encoders, weights stored fp16 on disk and upcast on load; built
by ``sdaccel.tools.toys.random_checkpoints.build_random_checkpoint``): time depends on the shapes, not on the values. One
image (one prompt) per call. Each row is one configuration, loaded and run in its own child
process (``sdaccel.core.processes``), one after the other; in it, one untimed warm-up call, then
``--runs`` timed calls (:func:`sdaccel.course.whole_image.time_calls`); the row keeps the median:

====================== ============================================================================
row                    what runs
====================== ============================================================================
``torch_fp32_20``      diffusers' own pipeline in PyTorch f32, 20 steps, default guidance (CFG: the
                       UNet sees a batch of 2); the baseline of every ratio
``ov_float_20``        ``OVPipeline`` in the precision ``sdaccel.cpu.precision`` measures fastest
``ov_<variant>_20``    the same with the UNet quantized: ``int8_weights``, ``hybrid``, ``full_int8``,
                       ``full_int8_float_resnets`` (full INT8, the ResNets kept in float);
                       ``full_int8_accuracy_control`` and ``full_int8_sensitive_4`` (SD 1.5 only):
                       full INT8 with the layers the SD 1.5-layout toy's accuracy control gave back
                       to float, or its 4 most sensitive groups, in float (the toy's recipes
                       replayed, ``sdaccel.toy.replayed_recipes``; ``--accuracy-control-json``
                       names the search; their picture is the toy's)
``ov_stack_20``        the levers stacked that keep the toy's picture (``sdaccel.toy.stack_quality``,
                       whose recipe it imports): the pipeline compiled static, and every step run by
                       DeepCache at ``--stack-interval`` (3) from its two UNets, both quantized full
                       INT8 with the ResNets in float; always run whole, never composed
``ov_stack_layer_20``  the same with DeepCache cut at the last up block's last layer (the DeepCache
                       paper's default branch, ``cut="layer"``), at ``--stack-layer-interval`` (2);
                       only its full UNet is quantized (the shallow one is one layer, kept in float)
``lcm4_lora_int8``     4 steps, LCM scheduler, an LCM-LoRA-shaped adapter (random, rank 64, every
                       UNet layer LCM-LoRA adapts) fused at export, guidance off (UNet batch 1), the
                       fused f32 UNet quantized with ``--lcm-variant``; the export's VAE decoder.
                       Each further ``--lcm-variant`` adds the rows ``lcm4_lora_<variant>`` and
                       ``lcm4_lora_<variant>_taesd`` (``--lcm-variant int8_weights full_int8``)
`` lcm4_lora_int8_taesd`` the same with a tiny autoencoder (TAESD layout, random; TAESDXL for SDXL:
                       the same layout) as decoder
``lcm4_lora_int8_static`` the two rows above with the pipeline compiled static for one image
``..._static_taesd``   without guidance (``OVPipeline.from_pretrained(..., static=...)``: the same
                       IRs, reshaped to their one shape, UNet batch 1), as the stack compiles its own
``jax_fp32_20``        our JAX ``JaxPipeline`` on the CPU, f32, 20 steps Euler with CFG
``jax_lcm4_lora_taesd`` the same with LCM, the LoRA fused, TAESD, 4 steps, no CFG
====================== ============================================================================

``sdxl`` runs by default every row but ``ov_int8_weights_20`` and ``ov_hybrid_20`` (full INT8 was
the fastest INT8 recipe of SD 1.5; ``--rows`` names any), the stack and the replayed recipes
(found on an SD 1.5-layout toy: SDXL's UNet lacks their layers, and ``--rows`` refuses them). SDXL's VAE config says ``force_upcast``
(its activations overflow float16): no row here runs it in float16 (PyTorch and JAX in f32,
OpenVINO in f32 or bf16, which has f32's range). ``--reuse`` is for ``sd15`` only.

Composed rows (``--compose [A B]``, default 1 2): a 20-step SDXL image with CFG takes about an hour
in PyTorch on two cores, so the rows of ``--steps`` steps (PyTorch, OpenVINO, JAX) time, after the
warm-up, ``--runs`` calls of A steps and ``--runs`` calls of B steps instead; one step costs their
difference over B - A, and the whole image is the call of A steps plus ``--steps`` - A such steps
(:func:`sdaccel.course.whole_image.compose`, in wall time and in CPU seconds). Such a row says so: its
title ends in "(composed from calls of A and B steps)", its JSON holds ``composed: {"from_steps":
[A, B]}`` beside the calls themselves, and the findings never present it as run end to end. The
few-step rows always run whole. A row whose call of B steps was not slower than its call of A fails
with that error (the step is below the timer's noise): ``sdxl --quick`` runs at 128x128 and
composes from 1 and 3 steps, where the tiny SDXL's step is above it.

The SDXL run (the second command above) needs, by estimate, not measured: about 45 GB of disk
in ``--workdir`` and ``build/checkpoints`` (the random checkpoint 6.9 GB in fp16, two f32 exports of
about 14 GB each, the full INT8 UNet and the fused LoRA UNet in INT8 about 2.7 GB each, the LoRA
about 0.8 GB), about 20 GiB of RAM at the peak (the export, the PyTorch row, the JAX rows: the f32
weights are 14 GB; hence ``--memory-limit-gb`` 22 by default for ``sdxl``), and on two cores at
about 150 CPU seconds per UNet call of one latent at 1024x1024 about 8 to 10 hours: building and
exporting 1 hour, calibration and the two quantizations 1 hour, PyTorch composed about 20 minutes,
OpenVINO INT8 composed 15 minutes, the two 4-step OpenVINO rows 30 minutes, and most of the rest
the JAX rows (JAX on the CPU took 2 to 4 times OpenVINO's time on SD 1.5: composed with CFG about 2
hours with its two compilations, 4 steps LCM about 1.5 hours). ``--resume`` goes on after a stop.

Each timed call records its wall time and the CPU seconds of the row's process during it (every
thread: ``time.process_time``); where other work shares the cores, the wall time grows with it and
the CPU seconds much less, so the table gives the ratio to PyTorch fp32 in both.

Split: encode / denoise / decode where the front-end reports it (diffusers: timed around its
``encode_prompt`` and ``vae.decode``; OpenVINO: ``result.timings``; JAX: encode and the one
denoise-and-decode program). JAX's compile time (first call) is reported apart and excluded.

Artifacts (exports, INT8 UNets, the LoRA file, the tiny VAE) go to ``--workdir`` (default
``benchmarks/build/whole_image/<model>``, git-ignored); ``--reuse`` takes the export and INT8
UNets that ``bench_memory.py sd15`` left in ``build/bench/memory/sd15`` instead (the JSON names
what was reused and the command that made it).

TPU (``--tpu``): the FLOPs and the time floor at the v5e's bf16 peak of the 4-step SDXL program
(LCM: no CFG, one image at 1024x1024): the UNet's FLOPs per call from XLA's cost analysis recorded
in ``benchmarks/results/tpu_plan_*.json``, the VAE decode's from the cost analysis of its CPU
lowering (abstract weights; nothing is compiled).

Results: a markdown table on stdout and JSON at ``--out`` (written atomically after every row).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench_whole_image_measure import measure
from bench_whole_image_prepare import prepare
from bench_whole_image_results import Bench
from bench_whole_image_settings import (
    COMPOSE,
    DEFAULT_ROWS,
    MEMORY_LIMIT_GB,
    QUANT_VARIANTS,
    QUICK_CHECKPOINT,
    QUICK_SIZE,
    REPLAYED,
    RESULTS,
    REUSE,
    SIZE,
    replayed_file,
)
from bench_whole_image_tpu import tpu_section

from sdaccel.course.whole_image import ROWS, format_table
from sdaccel.course.whole_image_rows import LCM_ROWS, lcm_row_key, ov_row_key
from sdaccel.toy import replayed_recipes

#: The flags that must be at least 1.
AT_LEAST_ONE = (
    "runs",
    "warmup_steps",
    "steps",
    "few_steps",
    "calib_samples",
    "stack_interval",
    "stack_layer_interval",
)


# ----------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # 1. The flags, in groups (in this order: the JSON's settings keep it)
    _add_row_arguments(parser.add_argument_group("the rows and their timing"))
    _add_quantization_arguments(parser.add_argument_group("quantization"))
    _add_run_arguments(parser.add_argument_group("the run: memory, artifacts, --resume, --quick"))
    _add_report_arguments(parser.add_argument_group("the report: TPU floor, the toy's quality"))
    _add_file_arguments(parser.add_argument_group("files"))
    args = parser.parse_args(argv)
    # 2. Each value alone
    _check_values(parser, args)
    # 3. The defaults that depend on the model and --quick
    _fill_defaults(args)
    # 4. The rows, --reuse and --compose against the model and the steps
    _check_replayed(parser, args)
    _check_reuse(parser, args)
    _compose_steps(parser, args)
    return args


def _add_row_arguments(group) -> None:
    group.add_argument("model", choices=sorted(SIZE), help="the real architecture, random weights")
    group.add_argument(
        "--rows", nargs="+", default=None, choices=ROWS, help="the rows, in order (default: the model's)"
    )
    group.add_argument(
        "--compose",
        nargs="*",
        type=int,
        default=None,
        metavar="N",
        help="compose the rows of --steps steps from calls of A and B steps (default 1 2; --quick 1 3); "
        "few-step rows still run whole",
    )
    group.add_argument("--runs", type=int, default=2, help="timed calls per row, after one warm-up call")
    group.add_argument(
        "--warmup-steps", type=int, default=2, help="steps of the warm-up call (OpenVINO, PyTorch)"
    )
    group.add_argument("--steps", type=int, default=20)
    group.add_argument(
        "--stack-interval", type=int, default=3, help="DeepCache's interval N in the ov_stack_20 row"
    )
    group.add_argument(
        "--stack-layer-interval",
        type=int,
        default=2,
        help="DeepCache's interval N in the ov_stack_layer_20 row (cut at the last layer)",
    )
    group.add_argument("--few-steps", type=int, default=4)
    group.add_argument(
        "--size", type=int, default=None, help=f"image side (default: {SIZE}; --quick: {QUICK_SIZE})"
    )
    group.add_argument(
        "--lcm-variant",
        nargs="+",
        default=["int8_weights"],
        choices=QUANT_VARIANTS,
        help="INT8 recipe(s) of the fused UNet: the lcm4 rows run once per recipe",
    )


def _add_quantization_arguments(group) -> None:
    group.add_argument("--calib-samples", type=int, default=2, help="calibration samples (hybrid, full INT8)")
    group.add_argument(
        "--accuracy-control-json",
        default=None,
        help="the accuracy-control search that ov_full_int8_accuracy_control_20 replays (default: "
        f"{replayed_recipes.found_file(replayed_recipes.ACCURACY_CONTROL, 'benchmarks/results')})",
    )
    group.add_argument("--quant-memory-gb", type=float, default=8.0, help="max_memory_gb of quantize_ir")
    group.add_argument(
        "--quant-parts",
        type=int,
        default=None,
        help="parts of hybrid / full INT8 (default: as many as --quant-memory-gb needs by estimate)",
    )


def _add_run_arguments(group) -> None:
    group.add_argument(
        "--memory-limit-gb",
        type=float,
        default=None,
        help=f"watchdog of each child (default {MEMORY_LIMIT_GB})",
    )
    group.add_argument("--min-free-gb", type=float, default=0.0)
    group.add_argument(
        "--reuse",
        action="store_true",
        help=f"sd15: reuse what bench_memory.py left in {REUSE['sd15']['root']}",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows --out already holds (same settings; --lcm-variant may add recipes after "
        "the ones it had); run the rest",
    )
    group.add_argument("--quick", action="store_true", help="a short self-check on a tiny checkpoint")
    group.add_argument(
        "--quick-checkpoint", default=None, help=f"the checkpoint of --quick (default: {QUICK_CHECKPOINT})"
    )


def _add_report_arguments(group) -> None:
    group.add_argument(
        "--tpu", action="store_true", help="add the TPU FLOPs and floor of the 4-step SDXL program"
    )
    group.add_argument("--tpu-steps", type=int, default=4, help="steps of the TPU program")
    group.add_argument("--tpu-plans", default="benchmarks/results", help="folder of the tpu_plan_*.json")
    group.add_argument(
        "--quality",
        default=None,
        help="each recipe's adherence on the trained toy, as two columns of the table: a "
        "`python -m sdaccel.toy.whole_image_quality` JSON or a folder of them (default: benchmarks/results "
        "beside this script; 'none': leave them out)",
    )


def _add_file_arguments(group) -> None:
    group.add_argument("--random-root", default="build/checkpoints")
    group.add_argument("--workdir", default=None, help="default benchmarks/build/whole_image/<model>[-quick]")
    group.add_argument(
        "--out", default=None, help="JSON (default benchmarks/build/whole_image_<model>[-quick].json)"
    )


def _check_values(parser, args) -> None:
    """Each value refused alone: the counts, --quality's path, a recipe named twice, --size."""
    if args.quant_parts is not None and args.quant_parts < 1:
        parser.error("--quant-parts must be at least 1")
    if args.quality is not None and args.quality.lower() == "none":
        args.quality = "none"
    elif args.quality is not None and not Path(args.quality).exists():
        parser.error(f"--quality: no file or folder {args.quality} (or 'none' to leave the columns out)")
    for flag in AT_LEAST_ONE:
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if len(set(args.lcm_variant)) != len(args.lcm_variant):
        parser.error(f"--lcm-variant names a recipe twice: {args.lcm_variant}")
    if args.size is not None and (args.size < 8 or args.size % 8):
        parser.error(f"--size must be a positive multiple of 8 (the VAE's factor), got {args.size}")


def _fill_defaults(args) -> None:
    """The model's defaults, and --quick's fewer steps and smaller image."""
    tag = args.model + ("-quick" if args.quick else "")
    if args.quick:
        args.steps, args.few_steps, args.warmup_steps = min(args.steps, 3), min(args.few_steps, 2), 1
        if args.size is None:
            args.size = QUICK_SIZE[args.model]
    args.size = args.size or SIZE[args.model]
    args.rows = args.rows or list(DEFAULT_ROWS[args.model])
    args.memory_limit_gb = args.memory_limit_gb or MEMORY_LIMIT_GB[args.model]
    args.quick_checkpoint = args.quick_checkpoint or QUICK_CHECKPOINT[args.model]
    args.workdir = args.workdir or f"benchmarks/build/whole_image/{tag}"
    args.out = args.out or f"benchmarks/build/whole_image_{tag}.json"


def _check_replayed(parser, args) -> None:
    """A replayed row, refused before anything is built: the layers, then the file they come from."""
    for name in REPLAYED:
        if ov_row_key(name) not in args.rows:
            continue
        if args.model != "sd15":
            parser.error(
                f"{ov_row_key(name)} replays layers found on the SD 1.5-layout toy; {args.model}'s UNet "
                "has other layers: leave the row out"
            )
        try:
            replayed_recipes.knobs(name, replayed_file(name, args))
        except (OSError, ValueError) as error:
            parser.error(f"{ov_row_key(name)}: {error}")


def _check_reuse(parser, args) -> None:
    if args.quick and args.reuse:
        parser.error("--quick builds its own small artifacts: leave out --reuse")
    if args.reuse and args.model not in REUSE:
        parser.error(
            f"--reuse takes what `{REUSE['sd15']['command']}` left; nothing of the kind is made for "
            f"{args.model}: leave out --reuse (the run makes its own artifacts in --workdir)"
        )


def _compose_steps(parser, args) -> None:
    """--compose's two step counts A < B (none given: the default), within --steps."""
    if args.compose is None:
        return
    if args.compose == []:
        args.compose = [1, args.steps] if args.quick else list(COMPOSE)
    if len(args.compose) != 2:
        parser.error(f"--compose takes two step counts A B (or none: {COMPOSE}), got {args.compose}")
    a, b = args.compose
    if not 1 <= a < b <= args.steps:
        parser.error(
            f"--compose {a} {b}: need 1 <= A < B <= --steps ({args.steps}): the step time is the "
            "difference of the calls of A and B steps over B - A"
        )


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


def row_keys(args) -> list[str]:
    """Every row key the run measures, in order: ``--rows``, each ``lcm4_lora_int8*`` row once per
    ``--lcm-variant`` (:func:`sdaccel.course.whole_image_rows.lcm_row_key`)."""
    keys = []
    for key in args.rows:
        if key in LCM_ROWS:
            keys += [lcm_row_key(key, i, v) for i, v in enumerate(args.lcm_variant)]
        else:
            keys.append(key)
    return keys


def main(argv=None) -> dict:
    from sdaccel.core.staging import check_writable

    args = parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the JAX rows run on this CPU; children inherit it
    check_writable(Path(args.out).parent)
    bench = Bench(args)
    bench.save()
    try:
        # 1. The artifacts the rows need
        paths = prepare(bench, args)
        # 2. The TPU section first: it takes a minute, the rows take hours
        if args.tpu:
            tpu_section(bench, args)
        # 3. The rows, each timed in its child
        measure(bench, args, paths)
    except KeyboardInterrupt:  # the running child was killed on the way out (sdaccel.core.processes)
        print(
            f"\nInterrupted: the step that was running stopped, and its child process with it. {args.out} "
            "holds what was measured before (written whole after every row): run the same command with "
            "--resume to go on from there.",
            file=sys.stderr,
            flush=True,
        )
        raise
    # 4. What is missing, and the table
    rows = bench.results["rows"]
    bench.results["missing_rows"] = [k for k in row_keys(args) if not rows.get(k, {}).get("ok")]
    bench.results["complete"] = not bench.results["missing_rows"]
    quality = args.quality or RESULTS  # the toy's committed results
    bench.results["table"] = format_table(bench.results, quality=None if quality == "none" else quality)
    bench.save()
    print(bench.results["table"])
    # 5. The table as markdown beside the JSON
    md = write_markdown(bench.results, Path(args.out).with_suffix(".md"))
    print(f"wrote {args.out} and {md}")
    return bench.results


def write_markdown(results: dict, md: Path) -> Path:
    """The table at ``md`` (atomically), after the command(s) that made it."""
    tmp = md.with_name(md.name + ".partial")
    commands = results.get("commands") or [results["command"]]  # --resume: every run of it
    made = " then ".join(f"`{c}`" for c in commands)
    tmp.write_text(f"# Whole-image time\n\nMade with {made}.\n\n{results['table']}\n")
    os.replace(tmp, md)
    return md


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(130)
