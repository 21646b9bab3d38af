"""Whole-image time: prompt to PIL image, for any front-end of :mod:`sdaccel.core.contract`.

A step time hides what the rest of the call costs (the text encoders, the VAE decode, the
scheduler), and few-step recipes (LCM, a tiny VAE) change exactly that rest. So the unit here is
one call, ``generate(prompt) -> PIL image``, timed from outside by the wall clock, and by the CPU
seconds the process spent in it (all its threads: on a CPU that other work shares, the wall time
of a call grows with that work, its CPU seconds much less):

- :func:`time_calls` runs an untimed warm-up call, then ``runs`` timed calls
  (:func:`sdaccel.core.timing.time_calls`), and keeps for each
  the whole time and its split into encode / denoise / decode where the front-end reports it
  (``result.timings``: ``encode_s``; ``vae_decoder_s`` in the OpenVINO loop; a JAX pipeline
  reports ``denoise_decode_s`` as one piece). Compile time (``compile_s``, JAX) is excluded
  from the whole time and kept apart.
- :func:`time_in_turns` times calls of several lengths in turns (a, b, a, b, ...), for
  :func:`compose`.
- :func:`summarize` reduces the runs to medians; :func:`composed_seconds` builds a whole-image
  figure from measured parts (encode + steps x one step + decode) where a full run would not fit
  the time, and says so.
  (The FLOPs and time floor of the TPU program, which the script adds to its table, are
  :func:`sdaccel.tpu.plan_floor.unet_row_flops` and :func:`sdaccel.tpu.plan_floor.tpu_floor`.)
- :func:`read_table` reads the JSON that ``benchmarks/bench_whole_image.py`` writes into rows to
  show (the rows' keys and order: :mod:`sdaccel.course.whole_image_rows`, which the script
  imports too), each with its ratio to the PyTorch fp32 row of the same file; :func:`markdown_table`,
  :func:`segments` (the parts of a bar chart) and :func:`findings` (sentences computed from the
  rows) show them, in the script's own table (:func:`format_table`) and in notebook 06.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from sdaccel.core import tables, timing
from sdaccel.course.whole_image_rows import (
    BASELINE,
    FLOAT_RESNETS,
    OV_ACCURACY_CONTROL_20,
    OV_FLOAT_20,
    OV_FLOAT_RESNETS_20,
    OV_SENSITIVE_4_20,
    OV_STACK_LAYER_20,
    STACK_ROWS,
    is_few_step,
    recipe_key,
    row_order,
)
from sdaccel.course.whole_image_rows import ROWS as ROWS  # the tables' rows, read here by the script

#: The parts of a whole image, in call order.
PARTS = ("encode_s", "denoise_s", "decode_s", "denoise_decode_s")


def split_timings(timings: dict) -> dict[str, float | None]:
    """``result.timings`` -> encode / denoise / decode seconds, and denoise + decode (``None`` where
    not reported: a JAX pipeline runs denoise and decode as one program)."""
    encode = timings.get("encode_s")
    decode = timings.get("vae_decoder_s")
    rest = timings.get("denoise_decode_s")
    denoise = None if rest is None or decode is None else rest - decode
    return {"encode_s": encode, "denoise_s": denoise, "decode_s": decode, "denoise_decode_s": rest}


def time_calls(
    call: Callable[[], object],
    runs: int,
    warmup: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
) -> dict:
    """Time ``runs`` calls of ``call()`` (each returns a ``GenerationResult``, or a PIL image /
    anything else when the front-end has no timings), after one untimed ``warmup()`` (default:
    ``call``). Returns ``{"image_s": [...], "cpu_s": [...], "encode_s": [...], "denoise_s": [...],
    "decode_s": [...], "denoise_decode_s": [...], "compile_s": [...], "warmup_s": s}``: per run, the
    wall time of the call minus the compile time it reports (``timings["compile_s"]``), the CPU
    seconds of this process during the call (``cpu_clock``: every thread of it; a call that
    compiles counts its compile here too, so warm up first), and its parts (``None`` where not
    reported)."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}.")
    # 1. The warm-up and the timed calls, each call's result kept for the timings it reports
    timed = timing.time_calls(
        call, repeats=runs, warmup=warmup, keep_results=True, clock=clock, cpu_clock=cpu_clock
    )
    # 2. Each call's whole time less its compile time, and its parts
    out: dict = {"warmup_s": timed.first_s, "image_s": [], "cpu_s": list(timed.cpu_s), "compile_s": []}
    out.update({part: [] for part in PARTS})
    for wall, result in zip(timed.runs_s, timed.results, strict=True):
        timings = dict(getattr(result, "timings", None) or {})
        compile_s = float(timings.get("compile_s", 0.0))
        out["image_s"].append(wall - compile_s)
        out["compile_s"].append(compile_s)
        for part, value in split_timings(timings).items():
            out[part].append(value)
    return out


def time_in_turns(
    calls: dict[int, Callable[[], object]],
    runs: int,
    warmups: dict[int, Callable[[], object] | None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
) -> dict[int, dict]:
    """:func:`time_calls` of each of ``calls`` (by number of steps), the timed calls taken in turns
    (a, b, a, b, ...) after each one's warm-up (``warmups[n]``, default: the call itself; ``None``
    there: none). A machine that slows down or speeds up while it measures then moves every length
    alike, and :func:`compose`, which subtracts them, keeps its sign. Returns ``{n: times}``, each
    shaped as :func:`time_calls`' result."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}.")
    warmups = warmups or {}
    # 1. Each length's untimed warm-up, in order
    first = {}
    for n, call in calls.items():
        start = clock()
        (warmups.get(n, call) or (lambda: None))()
        first[n] = clock() - start
    # 2. The timed calls, one of each length per turn
    turns = [
        {
            n: time_calls(call, 1, warmup=lambda: None, clock=clock, cpu_clock=cpu_clock)
            for n, call in calls.items()
        }
        for _ in range(runs)
    ]
    # 3. Each length's runs, shaped as time_calls' result
    out = {}
    for n in calls:
        keys = [k for k in turns[0][n] if k != "warmup_s"]
        out[n] = {"warmup_s": first[n], **{k: [v for turn in turns for v in turn[n][k]] for k in keys}}
    return out


def summarize(times: dict, baseline_s: float | None = None, baseline_cpu_s: float | None = None) -> dict:
    """Medians of :func:`time_calls`' runs; ``ratio``: ``baseline_s`` / the median whole-image
    time (how many times faster than the baseline; ``None`` without a baseline), and
    ``cpu_ratio`` the same in CPU seconds (``None`` without ``baseline_cpu_s`` or ``cpu_s``)."""
    image = timing.median(times["image_s"])
    if image is None:
        raise ValueError("no timed runs to summarize")
    out = {"image_s": image, "runs": len(times["image_s"])}
    out.update({part: timing.median(times.get(part, [])) for part in PARTS})
    out["cpu_s"] = timing.median(times.get("cpu_s", []))
    out["ratio"] = None if baseline_s is None else baseline_s / image
    out["cpu_ratio"] = None if None in (baseline_cpu_s, out["cpu_s"]) else baseline_cpu_s / out["cpu_s"]
    if times.get("composed"):  # from compose(): one composed figure from `runs` calls of each length
        out["composed"] = times["composed"]
        out["runs"] = times["composed"]["runs"]
    return out


def composed_seconds(encode_s: float, step_s: float, steps: int, decode_s: float) -> float:
    """A whole image composed from measured parts: the encode, ``steps`` times one denoising
    step (UNet call and scheduler), the decode. Label such figures as composed wherever shown."""
    if steps < 1 or min(encode_s, step_s, decode_s) < 0:
        raise ValueError(
            f"need steps >= 1 and non-negative parts, got {encode_s=}, {step_s=}, {steps=}, {decode_s=}."
        )
    return encode_s + steps * step_s + decode_s


def compose(short: dict, long: dict, a: int, b: int, steps: int) -> dict:
    """A whole image of ``steps`` steps composed from :func:`time_calls`' runs of calls of ``a``
    and of ``b`` steps (``1 <= a < b``), where one call of ``steps`` would not fit the time.

    One step (UNet call and scheduler) costs the difference of the two calls over ``b - a``, in
    wall time and in CPU seconds (medians of the runs of each); the encode and the decode are the
    medians over every call (they do not depend on the steps). The whole image is
    :func:`composed_seconds` of them plus the rest of a call of ``a`` steps (scheduler set-up,
    post-processing), which is the call of ``a`` steps plus ``steps - a`` step times. The
    denoise parts are those of the call of ``a`` steps plus ``steps - a`` step times.

    Returns a dict shaped as :func:`time_calls`' (one value per list, so :func:`summarize` reads
    it) with ``composed``: ``{"from_steps": [a, b], "steps", "runs", "step_s", "step_cpu_s",
    "rest_s", "calls": {a: medians, b: medians}}``. Raises ``ValueError`` when the step time is not
    positive (the two calls differ by less than their noise: take ``b`` further from ``a``)."""
    if not 1 <= a < b:
        raise ValueError(f"need 1 <= a < b, got {a=}, {b=}.")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}.")
    med = {
        n: {k: timing.median(t.get(k, [])) for k in ("image_s", "cpu_s", *PARTS)}
        for n, t in ((a, short), (b, long))
    }
    for n in (a, b):
        if med[n]["image_s"] is None:
            raise ValueError(f"no timed calls of {n} steps to compose from")
    step = (med[b]["image_s"] - med[a]["image_s"]) / (b - a)
    if step <= 0:
        raise ValueError(
            f"the call of {b} steps ({med[b]['image_s']:.4g} s) was not slower than the call of {a} "
            f"({med[a]['image_s']:.4g} s): the step time is below the noise; take b further from a."
        )
    cpu_step = None
    if None not in (med[a]["cpu_s"], med[b]["cpu_s"]):
        cpu_step = (med[b]["cpu_s"] - med[a]["cpu_s"]) / (b - a)
    encode = timing.median([*short.get("encode_s", []), *long.get("encode_s", [])])
    decode = timing.median([*short.get("decode_s", []), *long.get("decode_s", [])])
    rest = med[a]["image_s"] - a * step - (encode or 0.0) - (decode or 0.0)
    image = composed_seconds(encode or 0.0, step, steps, decode or 0.0) + rest
    extra = (steps - a) * step
    denoise_decode = None if med[a]["denoise_decode_s"] is None else med[a]["denoise_decode_s"] + extra
    cpu = None if cpu_step is None else med[a]["cpu_s"] + (steps - a) * cpu_step
    compile_s = timing.median([*short.get("compile_s", []), *long.get("compile_s", [])])
    return {
        "image_s": [image],
        "cpu_s": [cpu],
        "encode_s": [encode],
        "denoise_s": [None if None in (denoise_decode, decode) else denoise_decode - decode],
        "decode_s": [decode],
        "denoise_decode_s": [denoise_decode],
        "compile_s": [compile_s],
        "warmup_s": short.get("warmup_s"),
        "composed": {
            "from_steps": [a, b],
            "steps": steps,
            "runs": min(len(short["image_s"]), len(long["image_s"])),
            "step_s": step,
            "step_cpu_s": cpu_step,
            "rest_s": rest,
            "calls": {str(n): med[n] for n in (a, b)},
        },
    }


def composed_label(composed: dict | None) -> str:
    """`` (composed from calls of a and b steps)`` for a composed row, else ``""``."""
    if not composed:
        return ""
    a, b = composed.get("from_steps") or ("?", "?")
    return f" (composed from calls of {a} and {b} steps)"


# ----------------------------------------------------------------------------------------------
# The table of a benchmarks/bench_whole_image.py JSON
# ----------------------------------------------------------------------------------------------

# The rows of ``benchmarks/bench_whole_image.py`` (ROWS, in the order the tables show them) and the
# row every ratio is taken against (BASELINE) are those of sdaccel.course.whole_image_rows.

#: The smallest share of the whole image that :func:`segments` shows as a part of its own ("rest").
REST_SHOWN = 0.01


#: How far above the core count the 1-minute load average of a row may go before the table says
#: that other work shared the CPU: a run alone keeps the cores busy with its rows' threads, and its
#: parent, the watchdog and the artifacts just made push the average a little above the count
#: (2.3 on 2 cores, measured with nothing else running).
SHARED_LOAD_MARGIN = 1.0
#: How the tables name the benchmark's models (``settings["model"]``).
MODEL_NAMES = {"sd15": "SD 1.5", "sdxl": "SDXL"}


def model_name(model: str) -> str:
    """The name a reader knows a benchmark model by: ``"sd15"`` -> ``"SD 1.5"``; any other as given."""
    return MODEL_NAMES.get(model, model)


#: The reference runs kept in ``benchmarks/results`` that notebook 06 opens with, in this order: every
#: configuration of SD 1.5, the levers stacked beside PyTorch fp32 in a run of their own, INT8 with
#: the ResNets in float (20 and 4 steps) in a run of its own, SDXL.
REFERENCE_FILES = (
    "whole_image_sd15.json",
    "whole_image_sd15_stack.json",
    "whole_image_sd15_float_resnets.json",
    "whole_image_sd15_layer_cut.json",
    "whole_image_sdxl.json",
)
#: Notebook 06's tables (one SD 1.5 run, one SDXL run) and its appendix 06b's (the stack, the
#: ResNets recipe, the layer cut).
CORE_FILES = ("whole_image_sd15.json", "whole_image_sdxl.json")
APPENDIX_FILES = tuple(name for name in REFERENCE_FILES if name not in CORE_FILES)
#: Each model's recipes measured for quality on the trained toy of its layout
#: (``python -m sdaccel.toy.whole_image_quality``), as kept in ``benchmarks/results``.
QUALITY_FILES = {
    "sd15": "whole_image_quality_tiny-shapes-sd15.json",
    "sdxl": "whole_image_quality_tiny-shapes-sdxl.json",
}
#: How many adherence points (as a fraction) below PyTorch fp32's a recipe may lose on the toy and
#: still count for "the fastest within the bound" (:func:`findings`).
QUALITY_BOUND = 0.05


def reference_files(results_dir: str | os.PathLike, given=None, names=REFERENCE_FILES) -> list[Path]:
    """The whole-image JSONs to show: ``given`` (one path, or a list of paths), else those of
    ``names`` (:data:`REFERENCE_FILES`, :data:`CORE_FILES`, ...) that ``results_dir`` holds. Raises ``FileNotFoundError`` naming a
    given file that is not there, or when there is none to show."""
    if given is None:
        paths = [Path(results_dir) / name for name in names]
        paths = [p for p in paths if p.is_file()]
    else:
        paths = [Path(p) for p in ([given] if isinstance(given, str | os.PathLike) else given)]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise FileNotFoundError(
                f"no whole-image results at {', '.join(missing)}: make them with `python "
                "benchmarks/bench_whole_image.py sd15 --out <file>` (or `sdxl --compose`), or pass the path of such "
                "a file."
            )
    if not paths:
        raise FileNotFoundError(f"no whole-image results in {results_dir} (looked for {', '.join(names)}).")
    return paths


def heading(table: dict) -> str:
    """What a table is about, for its heading: the model and size (``"SD 1.5 at 512x512"``), and
    what else it timed: the toy's INT8 recipes replayed (:data:`OV_ACCURACY_CONTROL_20`,
    :data:`OV_SENSITIVE_4_20`), full INT8 with the ResNets in float (:data:`OV_FLOAT_RESNETS_20`, or
    a ``--lcm-variant`` of that name), the levers stacked (:data:`STACK_ROWS`), with DeepCache cut at
    the last layer (:data:`OV_STACK_LAYER_20`)."""
    s = table["settings"]
    extra = []
    if {OV_ACCURACY_CONTROL_20, OV_SENSITIVE_4_20} & set(table["rows"]):
        extra.append("the tiny trained model's INT8 recipes replayed")
    few_step = any(is_few_step(key) for key in table["rows"])
    lcm_variants = s.get("lcm_variant") or ()
    if OV_FLOAT_RESNETS_20 in table["rows"] or (few_step and FLOAT_RESNETS in lcm_variants):
        extra.append("INT8 that keeps the ResNets in float")
    if set(STACK_ROWS) & set(table["rows"]):
        extra.append("the speed-ups stacked")
    if OV_STACK_LAYER_20 in table["rows"]:
        extra.append("DeepCache cut at the last layer")
    return f"{model_name(s['model'])} at {s['size']}x{s['size']}" + (
        f", with {' and '.join(extra)}" if extra else ""
    )


def describe(table: dict, name: str, tier: str) -> list[str]:
    """Two sentences that say what :func:`read_table`'s ``table`` (from the file ``name``) is: the
    model, size and runs behind each row, and the CPU it was measured on, with its instruction-set
    ``tier`` (``sdaccel.cpu.families.isa_tier`` of its flags) and the flags."""
    s, m = table["settings"], table["machine"]
    runs = s.get("runs")
    compose = s.get("compose")
    composed = any(r["composed"] for r in table["rows"].values())
    how = f"one warm-up call, then {runs} timed call{'s' if runs != 1 else ''} (the table shows the median)"
    if compose and composed:
        how += f"; rows marked composed timed calls of {compose[0]} and {compose[1]} steps instead"
    flags = m["flags"]
    return [
        f"{name}: {model_name(s['model'])} at {s['size']}x{s['size']}, one image per call; {how}.",
        f"Measured on {m['cpu']}, {m['logical_cores']} logical cores, {tier} "
        f"(flags present: {', '.join(k for k, v in flags.items() if v) or 'none'}; "
        f"absent: {', '.join(k for k, v in flags.items() if not v) or 'none'}).",
    ] + _quality_sentence(table)


def _quality_sentence(table: dict) -> list[str]:
    """What the adherence and PSNR columns are, for a table read with quality."""
    quality = table.get("quality")
    if quality is None:
        return []
    return [
        f"Adherence and PSNR: the same recipe on the tiny trained model {quality['checkpoint']} of this "
        f"layout, {quality['prompts']} held-out prompts, PSNR against its OpenVINO f32 images "
        f"(measured on {quality['isa'] or 'an unrecorded CPU'}); the benchmark's own weights are random, "
        "so the tiny trained model stands in: its numbers show the direction and rough size of a recipe's cost, "
        "not Stable Diffusion's."
    ]


def read_quality(quality: str | os.PathLike | dict | None, model: str) -> dict | None:
    """A ``sdaccel.toy.whole_image_quality`` result: ``quality`` is its JSON (a path or the loaded
    dict), or a folder that holds :data:`QUALITY_FILES`' file for ``model`` (``None`` when it holds
    none), or ``None``."""
    if quality is None or isinstance(quality, dict):
        return quality
    path = Path(quality)
    if path.is_dir():
        name = QUALITY_FILES.get(model)
        path = path / name if name else path
        if not path.is_file():
            return None
    if not path.is_file():
        raise FileNotFoundError(
            f"no quality results at {path}: make them with `python -m sdaccel.toy.whole_image_quality "
            "<trained toy checkpoint> --lora <its LCM-LoRA> --taesd <its tiny autoencoder> --out <file>`."
        )
    result = json.loads(path.read_text())
    if "rows" not in result or "config" not in result:
        raise ValueError(f"{path} is not a sdaccel.toy.whole_image_quality JSON (it has {sorted(result)}).")
    return result


def read_table(source: str | os.PathLike | dict, quality: str | os.PathLike | dict | None = None) -> dict:
    """The rows of a ``bench_whole_image.py`` JSON (a path, or the loaded dict) ready to show.

    Returns ``{"machine": {"cpu", "logical_cores", "flags"}, "settings", "command", "baseline_s",
    "baseline_cpu_s", "has_cpu_s", "shared_cpu", "rows": {key: row}}``, the rows in :data:`ROWS`
    order (further INT8 recipes' few-step rows after the first's, keys it does not know last).
    Each row: ``title``, ``ok``, ``error``, ``steps``, ``image_s``, ``encode_s``, ``denoise_s``, ``decode_s``, ``denoise_decode_s`` (``None`` where not reported),
    ``x_torch_fp32`` (the PyTorch fp32 row's whole-image seconds over this row's, from the
    :data:`BASELINE` row of the same file; ``None`` without it), ``cpu_s`` (the CPU seconds of the
    process during the call; ``None`` in files made before they were recorded) and
    ``x_torch_fp32_cpu`` (the same ratio in CPU seconds), ``precision`` (the UNet's),
    ``unet_batch``, ``compile_s``, ``unet_layers``, ``load_avg``, ``composed`` (``{"from_steps":
    [a, b]}`` for a row whose whole image :func:`compose` made from calls of ``a`` and ``b``
    steps instead of one call of ``steps``, and its title then says so; ``None`` for a row
    measured end to end). A failed row (``ok: false``) is kept with its error and no times.
    ``shared_cpu``: some row ran while the 1-minute load average was more than
    :data:`SHARED_LOAD_MARGIN` above the core count (other work shared the CPU, so the seconds
    run high).

    ``quality`` (:func:`read_quality`: a ``sdaccel.toy.whole_image_quality`` JSON, or the folder
    of :data:`QUALITY_FILES`): each row gets ``adherence`` and ``psnr_vs_f32``, those of its recipe
    on the trained toy (``None`` for a recipe the toy did not run), and the table ``quality``:
    ``{"checkpoint", "prompts", "isa", "command"}`` (``None`` without quality)."""
    # 1. The results, from a path or as given
    source = _load_results(source)
    settings, machine = source["settings"], source["machine"]
    toy = read_quality(quality, settings.get("model"))
    # 2. The baseline every ratio is taken against: the PyTorch fp32 row of the same file
    base_row = source["rows"].get(BASELINE, {})
    base = (base_row.get("median") or {}) if base_row.get("ok") else {}
    baseline_s, baseline_cpu_s = base.get("image_s"), base.get("cpu_s")
    # 3. Each row, in the tables' order
    keys = sorted(source["rows"], key=lambda k: (row_order(k), k))
    rows = {
        key: {
            **_table_row(key, source["rows"][key], settings, baseline_s, baseline_cpu_s),
            **_quality_of(toy, key, settings),
        }
        for key in keys
    }
    # 4. Whether other work shared the CPU while a row ran
    cores = machine.get("logical_cores")
    shared = any(
        row["ok"] and row["load_avg"] and cores and max(row["load_avg"]) > cores + SHARED_LOAD_MARGIN
        for row in rows.values()
    )
    return {
        "machine": {
            "cpu": machine.get("cpu") or "unknown CPU",
            "logical_cores": cores,
            "flags": machine.get("cpu_flags") or {},
        },
        "settings": settings,
        "command": source.get("command"),
        "baseline_s": baseline_s,
        "baseline_cpu_s": baseline_cpu_s,
        "has_cpu_s": any(row["cpu_s"] is not None for row in rows.values()),
        "shared_cpu": bool(shared),
        "quality": _quality_header(toy),
        "rows": rows,
    }


def _load_results(source: str | os.PathLike | dict) -> dict:
    """A ``bench_whole_image.py`` JSON from its path (or as given), refused without its parts."""
    where = "the given dict"
    if not isinstance(source, dict):
        where = str(source)
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(
                f"no whole-image results at {path}: make them with `python benchmarks/bench_whole_image.py "
                "sd15 --out <file>`, or pass the path of such a file."
            )
        source = json.loads(path.read_text())
    missing = [key for key in ("machine", "settings", "rows") if key not in source]
    if missing:
        raise ValueError(
            f"{where} is not a benchmarks/bench_whole_image.py JSON: it has no {missing} "
            f"(it has {sorted(source)})."
        )
    return source


def _table_row(
    key: str, raw: dict, settings: dict, baseline_s: float | None, baseline_cpu_s: float | None
) -> dict:
    """One row of :func:`read_table` from the JSON's ``raw`` row (without its quality columns)."""
    median = raw.get("median") or {}
    ok = bool(raw.get("ok")) and median.get("image_s") is not None
    error = raw.get("error") or (None if ok else "no whole-image time recorded")
    precision = raw.get("precision") or {}
    image_s = median.get("image_s") if ok else None
    cpu_s = median.get("cpu_s") if ok else None
    composed = raw.get("composed") or median.get("composed")
    composed = {"from_steps": list(composed["from_steps"])} if composed else None
    title = raw.get("title") or key
    if composed and "(composed" not in title:
        title += composed_label(composed)
    return {
        "title": title,
        "composed": composed,
        "ok": ok,
        "error": None if ok else error,
        "steps": settings.get("few_steps") if is_few_step(key) else settings.get("steps"),
        "image_s": image_s,
        **{part: (median.get(part) if ok else None) for part in PARTS},
        "x_torch_fp32": None if image_s is None or baseline_s is None else baseline_s / image_s,
        "cpu_s": cpu_s,
        "x_torch_fp32_cpu": None if None in (cpu_s, baseline_cpu_s) else baseline_cpu_s / cpu_s,
        "precision": precision.get("unet", precision.get("all")),
        "unet_batch": raw.get("unet_batch"),
        "compile_s": raw.get("compile_s"),
        "unet_layers": raw.get("unet_layers"),
        "load_avg": raw.get("load_avg"),
    }


def _quality_header(toy: dict | None) -> dict | None:
    """The table's ``quality``: where the toy's adherence columns come from (``None`` without)."""
    if toy is None:
        return None
    return {
        "checkpoint": Path(toy.get("checkpoint", "the toy")).name,
        "prompts": toy["config"].get("prompts"),
        "isa": (toy.get("machine") or {}).get("isa"),
        "command": toy.get("command"),
    }


def _quality_of(toy: dict | None, key: str, settings: dict) -> dict:
    """A row's ``adherence`` and ``psnr_vs_f32`` from the toy's result (``None`` where absent)."""
    if toy is None:
        return {"adherence": None, "psnr_vs_f32": None}
    try:
        found = toy["rows"].get(recipe_key(key, settings.get("lcm_variant"))) or {}
    except ValueError:  # a few-step INT8 row of a run that does not name its recipe
        found = {}
    return {"adherence": found.get("adherence"), "psnr_vs_f32": found.get("psnr_vs_f32")}


def segments(row: dict) -> list[tuple[str, float]]:
    """A row's whole-image seconds as consecutive parts that add up to ``image_s``: ``encode``,
    ``denoise``, ``decode`` (or ``denoise + decode`` where they ran as one program), and ``rest``
    (what the call spent outside the parts: scheduler set-up, post-processing) when above
    :data:`REST_SHOWN` of the whole (below it, timer noise that no chart would show).
    A row with no split is one part, ``whole image``; a failed row has none."""
    if not row["ok"]:
        return []
    image = row["image_s"]
    if row["decode_s"] is not None and row["denoise_s"] is not None:
        middle = [("denoise", row["denoise_s"]), ("decode", row["decode_s"])]
    elif row["denoise_decode_s"] is not None:
        middle = [("denoise + decode", row["denoise_decode_s"])]
    else:
        return [("whole image", image)]
    parts = ([("encode", row["encode_s"])] if row["encode_s"] is not None else []) + middle
    rest = image - sum(s for _, s in parts)
    if rest > REST_SHOWN * image:
        parts.append(("rest", rest))
    return parts


def findings(table: dict, bound: float = QUALITY_BOUND) -> list[str]:
    """One to five sentences that follow from :func:`read_table`'s numbers: the fastest
    configuration against PyTorch fp32, the fastest at the full step count when fewer steps won,
    how much of an image the encode and decode take, when some rows were composed
    (:func:`compose`), that those were not run end to end, and, for a table read with quality,
    the fastest recipe that loses at most ``bound`` of PyTorch fp32's adherence on the toy."""
    ok = {key: row for key, row in table["rows"].items() if row["ok"]}
    if not ok:
        return ["No configuration of this file finished: it holds failed rows only."]
    cpu = table["machine"]["cpu"]
    fastest_key = min(ok, key=lambda k: ok[k]["image_s"])
    fastest = ok[fastest_key]
    base = ok.get(BASELINE)

    def made(row):  # a composed row was not run end to end: its figure is not "made"
        return "comes to an image in" if row["composed"] else "made an image in"

    composed = [r for r in ok.values() if r["composed"]]
    note = []
    if composed:
        pairs = sorted({tuple(r["composed"]["from_steps"]) for r in composed})
        calls = " or ".join(f"{a} and {b}" for a, b in pairs)
        note = [
            f"The {len(composed)} row(s) marked composed were not run end to end: each is a call of "
            f"fewer steps plus the missing steps at one step's time, the difference of calls of {calls} "
            "steps."
        ]
    if base is None:
        return [
            f"On {cpu} the fastest configuration, {fastest['title']}, {made(fastest)} "
            f"{fastest['image_s']:.1f} s (this file has no PyTorch fp32 row to compare it with)."
        ] + note
    base_s = f"{base['image_s']:.1f} s" + (", composed" if base["composed"] else "")
    out = [
        f"On {cpu} the fastest configuration, {fastest['title']}, {made(fastest)} "
        f"{fastest['image_s']:.1f} s: {fastest['x_torch_fp32']:.1f}x faster than PyTorch fp32 at "
        f"{base['steps']} steps ({base_s})."
    ]
    if fastest["x_torch_fp32_cpu"] is not None:
        out[0] = out[0][:-1] + (
            f", and {fastest['x_torch_fp32_cpu']:.1f}x in CPU seconds ({fastest['cpu_s']:.1f} against "
            f"{base['cpu_s']:.1f}), which other work on the same cores changes less than the wall time."
        )
    full = {k: r for k, r in ok.items() if k != BASELINE and r["steps"] == base["steps"]}
    if full and fastest["steps"] != base["steps"]:
        best = min(full.values(), key=lambda r: r["image_s"])
        out.append(
            f"At the same {base['steps']} steps the fastest was {best['title']} "
            f"({best['x_torch_fp32']:.1f}x); {fastest['steps']} steps took it to {fastest['x_torch_fp32']:.1f}x."
        )

    def ends(row):
        if None in (row["encode_s"], row["decode_s"]):
            return None
        return (row["encode_s"] + row["decode_s"]) / row["image_s"]

    split = [r for k, r in ok.items() if k != BASELINE and ends(r) is not None]
    if ends(base) is not None and split:
        most = max(split, key=ends)
        image = "composed image" if base["composed"] else "image"
        text = f"Encode and decode were {ends(base):.0%} of PyTorch fp32's {image} and {ends(most):.0%} of {most['title']}'s"
        least = min(split, key=ends)
        if ends(least) < ends(most) / 2:
            text += f" ({ends(least):.0%} with {least['title']})"
        if ends(most) > 2 * ends(base):
            text += ": with few UNet steps the rest of the call weighs more, which seconds per step leave out"
        out.append(text + ".")
    return out + note + _within_bound(table, ok, bound)


def _within_bound(table: dict, ok: dict, bound: float) -> list[str]:
    """The sentence on the fastest recipe within ``bound`` adherence of PyTorch fp32 on the toy."""
    if table.get("quality") is None:
        return []
    base = ok.get(BASELINE)
    if base is None or base["adherence"] is None:
        return [
            f"The tiny trained model has no PyTorch fp32 adherence to hold the recipes to ({table['quality']['checkpoint']})."
        ]
    floor = base["adherence"] - bound
    kept = {k: r for k, r in ok.items() if r["adherence"] is not None and r["adherence"] >= floor - 1e-9}
    toy = (
        f"on the tiny trained model {table['quality']['checkpoint']} (PyTorch fp32: {base['adherence']:.3f})"
    )
    if not kept:
        return [f"No recipe kept its adherence within {bound * 100:g} points {toy}."]
    best = min(kept.values(), key=lambda r: r["image_s"])
    fastest = min(ok.values(), key=lambda r: r["image_s"])
    best_float = ok.get(OV_FLOAT_20)
    x_float = ""
    if best_float is not None and best is not best_float:  # the other bar the CPU goal sets
        x_float = f" and {best_float['image_s'] / best['image_s']:.2f}x OpenVINO's best float"
        if best_float["steps"] != best["steps"]:  # as "x PyTorch fp32": against the other's steps
            x_float += f" at {best_float['steps']} steps"
    text = (
        f"Within {bound * 100:g} adherence points of PyTorch fp32 {toy}, the fastest is "
        f"{best['title']}: {best['image_s']:.1f} s, {_cell(best['x_torch_fp32'], 1)}x PyTorch fp32{x_float}, "
        f"adherence {best['adherence']:.3f}"
    )
    if fastest is not best and fastest["adherence"] is not None:
        text += f"; the fastest of all, {fastest['title']}, draws {fastest['adherence']:.3f}"
    elif fastest is not best:
        text += f"; the tiny trained model did not run the fastest of all, {fastest['title']}"
    return [text + "."]


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(table: dict, notes: bool = False) -> str:
    """:func:`read_table`'s rows as a markdown table, one line per row (a failed row says so and
    why). ``notes``: add the UNet batch and a notes column (compile time kept apart, the UNet's
    layer precisions, the load average around the row) as the benchmark's own table has them.
    A file that recorded CPU seconds gets two more columns: each row's CPU seconds and its ratio
    to PyTorch fp32 in CPU seconds; a table read with ``quality`` two more: each recipe's adherence
    and PSNR against f32 on the trained toy."""
    # 1. The columns and their alignment (the numbers right-aligned)
    steps = table["settings"].get("steps")
    cpu = table.get("has_cpu_s", False)
    quality = table.get("quality") is not None
    columns = [
        "configuration",
        "whole image s",
        "encode s",
        "denoise s",
        "decode s",
        f"x PyTorch fp32, {steps} steps",
        *(["CPU s", "x PyTorch fp32 (CPU s)"] if cpu else []),
        *(["adherence (tiny trained model)", "PSNR dB vs f32 (tiny trained model)"] if quality else []),
        "precision (UNet)",
    ]
    align = "l" + "r" * (5 + 2 * cpu + 2 * quality) + "l"
    if notes:
        columns += ["UNet batch", "notes"]
        align += "rl"
    # 2. One line per row, through the package's one table writer
    rows = [_table_cells(row, cpu, quality, notes, len(columns)) for row in table["rows"].values()]
    return tables.markdown_table(columns, rows, align)


def _table_cells(row: dict, cpu: bool, quality: bool, notes: bool, width: int) -> list[str]:
    """The cells of one row of :func:`markdown_table` (``width`` of them)."""
    title = row["title"].replace("|", "/")
    if not row["ok"]:
        error = " ".join(str(row["error"]).split()).replace("|", "/")[:80]
        cells = [title, "failed"] + [""] * (width - 2 - (2 if notes else 0))
        cells += ["", error] if notes else []
        if not notes:
            cells[0] = f"{title} (failed: {error})"
        return cells
    if row["decode_s"] is None and row["denoise_decode_s"] is not None:  # JAX: one program
        denoise, decode = f"{_cell(row['denoise_decode_s'])} with the decode", "="
    else:
        denoise, decode = _cell(row["denoise_s"]), _cell(row["decode_s"])
    cells = [
        title,
        _cell(row["image_s"]),
        _cell(row["encode_s"]),
        denoise,
        decode,
        _cell(row["x_torch_fp32"]),
        *([_cell(row["cpu_s"]), _cell(row["x_torch_fp32_cpu"])] if cpu else []),
        *([_cell(row["adherence"], 3), _cell(row["psnr_vs_f32"], 1)] if quality else []),
        row["precision"] or "-",
    ]
    if notes:
        cells += [str(row["unet_batch"] if row["unet_batch"] is not None else "-"), _notes(row)]
    return cells


def _notes(row: dict) -> str:
    """The notes cell: compile time kept apart, the UNet's layer precisions, the load average."""
    extra = []
    if row["compile_s"] is not None:
        extra.append(f"compile {row['compile_s']:.0f} s apart")
    if row["unet_layers"]:
        extra.append("UNet layers " + ", ".join(f"{k}: {v}" for k, v in row["unet_layers"].items()))
    if row["load_avg"]:
        extra.append(f"load {row['load_avg'][0]}-{row['load_avg'][1]}")
    return "; ".join(extra)


def format_table(results: dict, quality: str | os.PathLike | dict | None = None) -> str:
    """The benchmark's own table of a ``bench_whole_image.py`` JSON: a line of settings, the rows
    with their notes, and the TPU floor when the run computed it. ``quality`` (as
    :func:`read_table`'s): each recipe's adherence and PSNR on the trained toy, in two more columns."""
    table = read_table(results, quality)
    s, m = table["settings"], table["machine"]
    lines = [
        f"{s['model']} ({'tiny, quick' if s.get('quick') else 'real architecture, random weights'}), "
        f"{s['size']}x{s['size']}, one image per call; {m['cpu']}, {m['logical_cores']} cores, "
        f"median of {s['runs']} runs after a warm-up"
        + (
            f"; rows marked composed: {s['steps']} steps composed from calls of {s['compose'][0]} and "
            f"{s['compose'][1]} steps, not run end to end"
            if s.get("compose") and any(r["composed"] for r in table["rows"].values())
            else ""
        ),
        "",
        markdown_table(table, notes=True),
    ]
    tpu = results.get("tpu")
    if tpu:
        decode = tpu["decode"]["flops"]
        lines += [
            "",
            f"TPU v5e, {tpu['program']}: {tpu['flops'] / 1e12:.1f} TFLOP per image "
            f"(UNet {tpu['unet_flops'] / 1e12:.1f}, decode {_cell(decode and decode / 1e12, 1)}), "
            f"floor {tpu['floor_s'] * 1e3:.0f} ms at {tpu['peak_flops'] / 1e12:.0f} TFLOP/s",
        ]
    return "\n".join(lines)
