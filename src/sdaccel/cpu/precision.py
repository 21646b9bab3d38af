"""Choose the float precision of each exported model by timing it on this CPU.

OpenVINO's CPU plugin runs the floating-point layers of a model in the precision of its
``INFERENCE_PRECISION_HINT``. Its default is bf16 wherever an x86 CPU has bf16 instructions and
f16 wherever an ARM CPU has FP16 arithmetic (:func:`default_precision`), but whether bf16 is
*faster* depends on the CPU: with AMX tiles it is much faster than f32, with only
AVX-512 BF16 it can be slower (measured: the SD 1.5 UNet 1.5x slower in bf16 than in f32 on a Xeon
without AMX), and a CPU without bf16 instructions runs f32 whatever is asked. So rather than trust
a rule, :func:`choose_precision` measures:

1. **Candidates.** f32 always; bf16 and f16 where the plugin lists ``BF16`` / ``FP16`` in its
   ``OPTIMIZATION_CAPABILITIES`` (a hint the CPU cannot run is silently replaced by f32, so timing
   it would only time f32 again).
2. **Timing.** With more than one candidate, each component (text encoder(s), UNet, VAE decoder)
   is compiled once per candidate, as :class:`~sdaccel.cpu.pipeline.OVPipeline` compiles it (same
   device, properties, static or dynamic shapes), and run ``warmup`` times, on the input shapes of
   one guided image at the pipeline's size: text encoders and UNet at batch 2 (negative and
   positive prompt), VAE decoder at batch 1. Then the candidates are timed in interleaved rounds
   (each round calls every candidate once, in a rotating order), so that a change of load on the
   machine reaches them all alike: at least ``iters`` rounds, and more (up to :data:`MAX_ROUNDS`)
   until each candidate has run :data:`MIN_TIMED_S` seconds, because a call of a millisecond is
   noisy. Where the candidates compiled at once would not fit in memory, each is timed alone, one
   after another.
3. **The decision** (:func:`decide`). The plugin's default (:func:`default_precision`) is kept
   unless another candidate ran faster by more than :data:`MIN_MARGIN` in three rounds of four,
   each round comparing two calls made one after the other (:func:`paired_ratios`): noise that
   slows some calls, or a load that drifts during the measurement, cannot reach that.
   A result that would change the default is timed for another ``iters`` rounds first, and
   decided on all the calls. So two precisions of about the same speed give the default, whatever
   the noise, and the summary says why.
4. **What ran.** For each candidate it records the precision the plugin *reports*
   (``INFERENCE_PRECISION_HINT`` of the compiled model) and the output precision of the
   convolutions and matrix products in the runtime model. A candidate whose reported precision is
   not the one asked for is recorded but cannot be chosen.
5. **Cache.** The result is added (atomically) to ``precision_choice.json`` in the export folder,
   keyed by the CPU model and instruction sets (:mod:`sdaccel.core.env`), the OpenVINO version and the
   plugin's capabilities, the device and compile properties, the input shapes and the models' IR
   (a hash of each ``.xml``). A later call with the same key reads it back instead of measuring;
   any other CPU, version, size or export measures again, and so does a file that is not one
   this module wrote whole (cut short, hand-edited: said in one line), never trusted. Two
   processes choosing for one folder take turns (:func:`sdaccel.core.staging.writer_lock`): the
   second says that it waits, then reads the first one's choice. A process killed while it
   measures leaves the file as it was.

The result, :class:`PrecisionChoice`, has ``.chosen`` (component -> precision), ``.table()`` and
``.summary()`` ("f32 chosen for the UNet: 1.50x faster than bf16, the plugin's default, on this
CPU (the margin: 10%)") and round-trips
through JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import CheckpointError, read_config, read_defaults, read_json
from sdaccel.core.env import cpu_features, cpu_model
from sdaccel.core.faults import fault_point
from sdaccel.core.staging import clear_leftovers, replace_json, writer_lock
from sdaccel.cpu.export import MODEL_XML, StaticShape, reshape_static, vae_scale_factor_of
from sdaccel.cpu.ir_files import check_ir, read_ir
from sdaccel.cpu.precision_timing import (
    Measurement,
    compiled_at_once,
    ir_weight_bytes,
    measure,
)

log = logging.getLogger(__name__)

#: The precisions a choice is made between, in order of preference on a tie.
CANDIDATES = ("f32", "bf16", "f16")
#: The capability (``OPTIMIZATION_CAPABILITIES``) a device must list to run each candidate.
CAPABILITY = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}
#: The file in the export folder that caches the choice.
CHOICE_FILE = "precision_choice.json"
#: Bumped when the cached format or the measurement changes: older files are measured again.
SCHEMA = 3
#: A candidate replaces the plugin's default precision only when it runs faster by more than this
#: fraction in three timed rounds of four.
MIN_MARGIN = 0.10
#: Human names of the components, for summaries.
NAMES = {
    "text_encoder": "text encoder",
    "text_encoder_2": "second text encoder",
    "unet": "UNet",
    "vae_decoder": "VAE decoder",
}


def device_capabilities(core, device: str = "CPU") -> tuple[str, ...]:
    """What ``device``'s plugin lists in its ``OPTIMIZATION_CAPABILITIES`` (``"FP32"``, ``"FP16"``
    on an ARM CPU with FP16 arithmetic, ``"BF16"`` on an x86 CPU with bf16, ``"INT8"``, ...)."""
    return tuple(core.get_property(device, "OPTIMIZATION_CAPABILITIES"))


def precisions_for(capabilities: Iterable[str]) -> tuple[str, ...]:
    """The candidates a device with these ``OPTIMIZATION_CAPABILITIES`` can run: f32, and bf16 /
    f16 where they list ``BF16`` / ``FP16``."""
    capabilities = set(capabilities)
    return tuple(p for p in CANDIDATES if p == "f32" or CAPABILITY[p] in capabilities)


def default_precision(capabilities: Iterable[str]) -> str:
    """The float precision the CPU plugin runs when none is asked for: bf16 where it lists ``BF16``
    (x86), else f16 where it lists ``FP16`` (ARM), else f32."""
    capabilities = set(capabilities)
    return "bf16" if "BF16" in capabilities else "f16" if "FP16" in capabilities else "f32"


def quantized_hint(hint: str | None, model, capabilities: Iterable[str]) -> str | None:
    """The ``INFERENCE_PRECISION_HINT`` to compile ``model`` (an ``ov.Model``, or the path of an
    IR, read only where the rule below can apply) with instead of ``hint``. An activation-quantized model (full INT8, hybrid: it holds ``FakeQuantize``) does not
    run with the f16 hint on an x86 CPU that offers f16 (AVX512-FP16) in OpenVINO 2026.4: its
    compile or first inference fails ("Arguments do not have the same element type", "Convolution
    node ... is not initialized", or an empty output), measured on a Xeon with AMX. Such a CPU offers
    bf16 too (x86: ``BF16`` among the ``capabilities``), and the model's float layers run in bf16
    there. Any other model, hint or CPU (an ARM CPU lists ``FP16`` without ``BF16``) keeps ``hint``;
    weight-only INT8 (no ``FakeQuantize``) runs in f16."""
    if hint != "f16" or "BF16" not in set(capabilities):
        return hint
    if isinstance(model, str | os.PathLike):
        model = read_ir(model)
    if any(op.get_type_name() == "FakeQuantize" for op in model.get_ops()):
        return "bf16"
    return hint


def offered_precisions(core, device: str = "CPU") -> tuple[str, ...]:
    """The candidates ``device`` can run: :func:`precisions_for` of its
    :func:`device_capabilities`."""
    return precisions_for(device_capabilities(core, device))


def pipeline_components(folder: str | os.PathLike) -> tuple[str, ...]:
    """The components of an export folder that a text-to-image call runs, in call order."""
    kind = read_json(Path(folder) / "model_index.json").get("_class_name")
    encoders = (
        ("text_encoder", "text_encoder_2") if kind == "StableDiffusionXLPipeline" else ("text_encoder",)
    )
    return (*encoders, "unet", "vae_decoder")


def check_candidates(candidates: Iterable[str]) -> tuple[str, ...]:
    candidates = tuple(candidates)
    bad = [c for c in candidates if c not in CANDIDATES]
    if not candidates or bad:
        raise ValueError(
            f"precision candidates must be a non-empty subset of {CANDIDATES}, got {candidates!r}."
        )
    return candidates


# ----------------------------------------------------------------------------------------------
# The result
# ----------------------------------------------------------------------------------------------


def paired_ratios(slow: Measurement, fast: Measurement) -> list[float]:
    """Round by round, ``slow``'s call time over ``fast``'s: the two calls of a round ran one after
    the other, so a change of load between rounds cancels in each ratio."""
    return [a / b for a, b in zip(slow.times, fast.times, strict=False) if b > 0]


def speedup(slow: Measurement, fast: Measurement, quantile: float = 0.5) -> float:
    """How much faster ``fast`` ran than ``slow``: a ``quantile`` of :func:`paired_ratios` (the
    median round by default; :func:`decide` uses the lower quartile)."""
    return float(np.quantile(paired_ratios(slow, fast), quantile))


def kept_default(measurements: dict[str, Measurement], default: str) -> str:
    """The precision that stays unless beaten: ``default`` (the plugin's own choice,
    :func:`default_precision`) if it was measured and honoured, else the first honoured of
    :data:`CANDIDATES` (all count if the plugin honoured none)."""
    eligible = [p for p, m in measurements.items() if m.honoured] or list(measurements)
    order = {p: i for i, p in enumerate(CANDIDATES)}
    return default if default in eligible else min(eligible, key=lambda p: order.get(p, len(order)))


def settled(measurements: dict[str, Measurement], default: str) -> bool:
    """Whether :func:`decide` keeps the default: a measurement that would change it is timed for
    more rounds first (:func:`sdaccel.cpu.precision_timing.measure`)."""
    return decide(measurements, default) == kept_default(measurements, default)


def decide(measurements: dict[str, Measurement], default: str = "f32") -> str:
    """The precision to run. Another candidate the plugin honoured replaces :func:`kept_default`
    only if it ran more than :data:`MIN_MARGIN` faster in three rounds of four (the lower quartile
    of :func:`paired_ratios`); of several such, the one with the largest margin. Noise that slows
    some calls cannot reach three rounds of four, and a drift of the load cancels in each pair, so
    noise alone does not move the choice away from the default."""
    eligible = {p: m for p, m in measurements.items() if m.honoured} or dict(measurements)
    keep = kept_default(measurements, default)
    gains = {p: speedup(eligible[keep], m, 0.25) for p, m in eligible.items() if p != keep}
    best = max(gains, key=gains.get, default=keep)
    return best if best != keep and gains[best] > 1 + MIN_MARGIN else keep


@dataclass
class ComponentChoice:
    shapes: dict[str, list[int]]
    measurements: dict[str, Measurement]
    chosen: str
    #: why a candidate was not timed (an activation-quantized model under f16: :func:`quantized_hint`)
    note: str = ""
    #: the precision the plugin runs when none is asked for: kept unless beaten by a margin
    default: str = "f32"


@dataclass
class PrecisionChoice:
    """What :func:`choose_precision` measured and chose, per component.

    ``key`` is what the cache is keyed by; ``machine`` names the CPU, its instruction sets and
    the OpenVINO version; ``offered`` the candidates the device can run; ``choosing_s`` the
    seconds the measurement took (``cached`` is True for a choice read back from the cache).
    """

    key: dict
    machine: dict
    offered: list[str]
    components: dict[str, ComponentChoice]
    choosing_s: float = 0.0
    cached: bool = field(default=False, compare=False)

    @property
    def chosen(self) -> dict[str, str]:
        return {name: c.chosen for name, c in self.components.items()}

    def summary(self, component: str) -> str:
        """One line: the chosen precision and how it compares with the runner-up."""
        entry = self.components[component]
        name = NAMES.get(component, component)
        if len(entry.measurements) < 2:
            if entry.note:
                return f"{entry.chosen} chosen for the {name}: {entry.note}"
            if len(self.offered) > 1:
                return f"{entry.chosen} chosen for the {name}: the only candidate asked for (not timed)"
            lacking = " or ".join(CAPABILITY[p] for p in CANDIDATES if p not in self.offered)
            return (
                f"{entry.chosen} chosen for the {name}: the only precision the {self.key['device']} "
                f"plugin offers on this CPU (no {lacking} in its OPTIMIZATION_CAPABILITIES; not timed)"
            )
        return f"{entry.chosen} {self._verdict(entry, name)}"

    @staticmethod
    def _verdict(entry: ComponentChoice, name: str) -> str:
        """What follows the chosen precision in :meth:`summary`: kept as the plugin's default or
        chosen over it, and the ratio of the fastest calls against each other candidate."""
        best, kept = entry.measurements[entry.chosen], entry.chosen == entry.default
        parts = []
        for other in (m for p, m in entry.measurements.items() if p != entry.chosen):
            if not other.honoured:  # same arithmetic as what it ran: a ratio would be noise
                parts.append(
                    f"{other.requested} runs as {other.reported} on this CPU "
                    f"(the plugin offers no {CAPABILITY[other.requested]})"
                )
            elif kept and (ratio := speedup(best, other)) > 1:  # only the default can lose to a faster run
                parts.append(
                    f"{other.requested} was {ratio:.2f}x faster in the median round, not more than "
                    f"{MIN_MARGIN:.0%} faster in three rounds of four"
                )
            elif other.requested == entry.default:
                parts.append(
                    f"{speedup(other, best):.2f}x faster than {other.requested}, the plugin's default "
                    f"(more than {MIN_MARGIN:.0%} faster in three rounds of four)"
                )
            else:
                parts.append(f"{speedup(other, best):.2f}x faster than {other.requested}")
        if entry.note:
            parts.append(entry.note)
        verb = "kept for the {} (the plugin's default)" if kept else "chosen for the {}"
        return f"{verb.format(name)} on this CPU: {'; '.join(parts)}"

    def table(self) -> str:
        """Per component and candidate: the fastest and the median call, the calls timed, what the plugin reports, what the heavy
        layers ran in, and the choice; then the CPU and the one-line summaries."""
        lines = [
            f"{'component':16} {'asked':6} {'reported':8} {'heavy layers output':24} {'fastest s':>9} "
            f"{'median s':>9} {'calls':>5} {'chosen':>6}"
        ]
        for component, entry in self.components.items():
            for precision, m in entry.measurements.items():
                runtime = ", ".join(f"{k} {v}" for k, v in sorted(m.runtime.items())) or "-"
                mark = "<--" if precision == entry.chosen else ""
                lines.append(
                    f"{component:16} {precision:6} {m.reported:8} {runtime:24} {m.best_s:9.4f} "
                    f"{m.median_s:9.4f} {len(m.times):5} {mark:>6}"
                )
        flags = ", ".join(k for k, v in self.machine.get("cpu_flags", {}).items() if v) or "none of note"
        lines.append(
            f"CPU: {self.machine.get('cpu', '?')} ({flags}); OpenVINO {self.machine.get('openvino')}"
        )
        lines.extend(self.summary(c) for c in self.components)
        if self.cached:
            lines.append(f"(read from the cache; measuring took {self.choosing_s:.1f} s)")
        else:
            lines.append(f"(measuring took {self.choosing_s:.1f} s)")
        return "\n".join(lines)

    __str__ = table

    def to_json(self) -> dict:
        data = asdict(self)
        del data["cached"]  # a property of this copy, not of the measurement
        return {"schema": SCHEMA, **data}

    @classmethod
    def from_json(cls, data: dict) -> PrecisionChoice:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"precision choice schema {data.get('schema')!r}, expected {SCHEMA}.")
        components = {
            name: ComponentChoice(
                shapes=c["shapes"],
                measurements={p: Measurement(**m) for p, m in c["measurements"].items()},
                chosen=c["chosen"],
                note=c.get("note", ""),
                default=c.get("default", "f32"),
            )
            for name, c in data["components"].items()
        }
        return cls(
            key=data["key"],
            machine=data["machine"],
            offered=list(data["offered"]),
            components=components,
            choosing_s=data.get("choosing_s", 0.0),
        )


# ----------------------------------------------------------------------------------------------
# The cache: one file per export folder, one entry per key
# ----------------------------------------------------------------------------------------------


def _cached_entries(path: Path, say: bool = False) -> list[dict]:
    """The entries of a cache file; none when it is missing, from another version of this module
    (another :data:`SCHEMA`) or broken (then it is measured again and rewritten; with ``say``, a
    broken file is named in one line on stderr)."""
    if not path.is_file():
        return []
    try:
        data = read_json(path)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            return []
        return [e for e in data["choices"] if isinstance(e, dict) and "key" in e]
    except (OSError, ValueError, KeyError, TypeError) as error:
        if say:
            print(
                f"Ignoring {path}: not a readable precision choice ({error}); measuring again.",
                file=sys.stderr,
            )
        return []


def cached_choice(path: str | os.PathLike, key: dict) -> PrecisionChoice | None:
    """The choice stored in ``path`` under ``key``, or ``None`` (then it is measured again).

    An entry is trusted only if it reads back whole and chooses, for exactly the components of
    ``key``, one of its candidates; a file or entry that fails is named in one line on stderr."""
    path = Path(path)
    for entry in _cached_entries(path, say=True):
        if entry["key"] != key:
            continue
        try:
            choice = PrecisionChoice.from_json(entry)
            check_choice(choice, key)
        except (ValueError, KeyError, TypeError, statistics.StatisticsError) as error:
            print(
                f"Ignoring {path}: its entry for this CPU and export is broken ({error}); measuring again.",
                file=sys.stderr,
            )
            return None
        choice.cached = True
        return choice
    return None


def check_choice(choice: PrecisionChoice, key: dict) -> None:
    """Raise ``ValueError`` unless ``choice`` chooses one of ``key``'s candidates for each of
    ``key``'s components and no other, each measured one a whole measurement."""
    candidates, components = set(key["candidates"]), set(key["models"])
    if set(choice.components) != components:
        raise ValueError(f"it chooses for {sorted(choice.components)}, not {sorted(components)}")
    for name, entry in choice.components.items():
        if entry.chosen not in candidates or not set(entry.measurements) <= candidates:
            raise ValueError(f"the {name} choice {entry.chosen!r} is not one of {sorted(candidates)}")
        if any(not m.times for m in entry.measurements.values()):
            raise ValueError(f"a {name} measurement has no timed call")


def store_choice(path: str | os.PathLike, choice: PrecisionChoice, keep: int = 16) -> Path:
    """Add ``choice`` to the cache file ``path`` (replacing an entry with the same key; the oldest
    entries beyond ``keep`` are dropped), written atomically: a reader sees the old file or the new
    one. One file holds several keys, so a static and a dynamic pipeline of one export, or two image
    sizes, do not measure over each other's choice."""
    path = Path(path)
    entries = [e for e in _cached_entries(path) if e["key"] != choice.key]
    replace_json(path, {"schema": SCHEMA, "choices": [*entries, choice.to_json()][-keep:]})
    return path


# ----------------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------------


def machine_key() -> dict:
    """The CPU and the OpenVINO version: what a precision's speed depends on besides the model."""
    import openvino as ov

    return {"cpu": cpu_model(), "cpu_flags": cpu_features(), "openvino": ov.get_version()}


def _ir_hash(xml: Path) -> str:
    return hashlib.sha256(xml.read_bytes()).hexdigest()[:16]


def component_inputs(model, shape: StaticShape, vae_scale_factor: int, max_length: int, seed: int = 0):
    """Inputs for one call of an exported component at ``shape`` (as the pipeline makes them:
    batch doubled under guidance for the text encoders and the UNet), from its input names."""
    static = reshape_static(
        model.clone(), **asdict(shape), vae_scale_factor=vae_scale_factor, max_length=max_length
    )
    rng = np.random.default_rng(seed)
    inputs = {}
    for port in static.inputs:
        name, dims = port.get_any_name(), list(port.get_shape())
        dtype = port.get_element_type().to_dtype()
        if name == "input_ids":  # BOS, a few token ids, then EOS padding, as CLIPTokenizer pads
            ids = np.full(dims, 49407, dtype=dtype)
            ids[:, 0] = 49406
            ids[:, 1:8] = rng.integers(300, 40000, (dims[0], 7))
            inputs[name] = ids
        elif name == "timestep":
            inputs[name] = np.full(dims, 500, dtype=dtype)
        elif name == "time_ids":
            row = [shape.height, shape.width, 0, 0, shape.height, shape.width]
            inputs[name] = np.tile(np.array(row, dtype=dtype), (dims[0], 1))
        else:
            inputs[name] = rng.standard_normal(dims).astype(dtype)
    return inputs


def choice_key(
    folder: Path,
    shape: StaticShape,
    static: bool,
    device: str,
    ov_config: dict,
    candidates: tuple[str, ...],
    offered: tuple[str, ...],
    components: tuple[str, ...],
) -> dict:
    """Everything the measured speeds depend on, as JSON-able values."""
    return {
        **machine_key(),
        "device": device,
        "offered": list(offered),
        "candidates": list(candidates),
        "ov_config": {k: str(v) for k, v in sorted(ov_config.items()) if k != "INFERENCE_PRECISION_HINT"},
        "shape": asdict(shape),
        "static": static,
        "models": {c: _ir_hash(folder / c / MODEL_XML) for c in components},
    }


def choose_precision(
    folder: str | os.PathLike,
    *,
    height: int | None = None,
    width: int | None = None,
    batch: int = 1,
    guidance: bool = True,
    static: bool = False,
    device: str = "CPU",
    ov_config: dict | None = None,
    candidates: Iterable[str] | None = None,
    components: Iterable[str] | None = None,
    iters: int = 3,
    warmup: int = 1,
    cache: bool = True,
    core=None,
    timer: Callable[[], float] = time.perf_counter,
) -> PrecisionChoice:
    """Time each component of the export ``folder`` in each candidate precision; pick the fastest.

    Args:
      folder: an export folder (:func:`sdaccel.cpu.export.export_pipeline`).
      height, width: the image size (default: the export's default size); ``batch`` images per
        call, ``guidance`` doubling the batch of the text encoders and the UNet, as in a guided call.
      static: compile the models reshaped to that one shape (as ``OVPipeline(static=...)`` does);
        otherwise compile them with dynamic shapes and time them at that shape.
      device, ov_config: as given to ``OVPipeline.from_pretrained``.
      candidates: the precisions to time (default: :func:`offered_precisions`).
      components: default :func:`pipeline_components`.
      iters, warmup: timed and untimed calls per candidate; the median of ``iters`` decides.
      cache: read ``precision_choice.json`` when its key matches, and write it after measuring.
      timer: the clock (a test can inject one).
    """
    import openvino as ov

    # 1. Check the inputs
    folder = Path(folder)
    components = check_choice_request(folder, components, iters, warmup)
    core = core or ov.Core()
    ov_config = dict(ov_config or {})
    offered = offered_precisions(core, device)
    candidates = check_candidates(candidates if candidates is not None else offered)

    # 2. The shape to time, and what the cache is keyed by
    defaults = read_defaults(folder, "vae_decoder")
    shape = StaticShape(batch, height or defaults.height, width or defaults.width, guidance)
    key = choice_key(folder, shape, static, device, ov_config, candidates, offered, components)

    # 3. One chooser of a folder at a time: a second one waits, then reads the first one's choice
    path = folder / CHOICE_FILE
    with writer_lock(path) if cache else contextlib.nullcontext():
        if cache:
            clear_leftovers(path, [f".{CHOICE_FILE}.*.tmp"])  # what a killed writer of the file left
            if (previous := cached_choice(path, key)) is not None:
                return previous

        # 4. Time each component in each candidate precision
        choice = measure_components(
            folder,
            components,
            candidates,
            key,
            offered,
            core=core,
            shape=shape,
            static=static,
            device=device,
            ov_config=ov_config,
            iters=iters,
            warmup=warmup,
            timer=timer,
        )

        # 5. Cache the choice beside the export
        if cache:
            try:
                store_choice(path, choice)
            except OSError as error:  # a read-only export still gets its choice, only not cached
                log.warning("could not cache the precision choice in %s (%s)", path, error)
    return choice


def measure_components(
    folder: Path,
    components: tuple[str, ...],
    candidates: tuple[str, ...],
    key: dict,
    offered: tuple[str, ...],
    *,
    core,
    shape: StaticShape,
    static: bool,
    device: str,
    ov_config: dict,
    iters: int,
    warmup: int,
    timer: Callable[[], float],
) -> PrecisionChoice:
    """Time each of ``components`` of ``folder`` in each of ``candidates`` (:func:`choose_component`)
    and make the :class:`PrecisionChoice` recorded under ``key``."""
    start = time.perf_counter()
    factor = vae_scale_factor_of(folder)
    max_length = read_config(folder, "text_encoder").get("max_position_embeddings", 77)
    chosen = {}
    for component in components:
        if len(candidates) == 1:  # nothing to choose between: no need to read or time anything
            chosen[component] = ComponentChoice({}, {}, candidates[0])
            continue
        model = read_ir(folder / component / MODEL_XML, core)
        chosen[component] = choose_component(
            model,
            core,
            shape,
            static,
            factor,
            max_length,
            device,
            ov_config,
            candidates,
            iters,
            warmup,
            timer,
            weight_bytes=ir_weight_bytes(folder / component / MODEL_XML),
        )
        del model
        fault_point("precision.component-measured")  # one component timed, the next not yet
    return PrecisionChoice(
        key=key,
        machine=machine_key(),
        offered=list(offered),
        components=chosen,
        choosing_s=time.perf_counter() - start,
    )


def check_choice_request(folder: Path, components, iters: int, warmup: int) -> tuple[str, ...]:
    """The components :func:`choose_precision` times (default :func:`pipeline_components`),
    after checking that ``folder`` is an export holding them and the counts of calls."""
    if not (folder / "model_index.json").is_file():
        raise CheckpointError(
            f"No OpenVINO export at {folder} (missing model_index.json). Export a diffusers "
            "checkpoint first with sdaccel.cpu.export.export_pipeline(src, folder)."
        )
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters must be >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}.")
    components = tuple(components or pipeline_components(folder))
    missing = [c for c in components if not (folder / c / MODEL_XML).is_file()]
    if missing:
        raise CheckpointError(f"{folder} has no {MODEL_XML} for {missing}: export them first.")
    for component in components:  # an IR left by an interrupted save is refused before any timing
        check_ir(folder / component / MODEL_XML)
    return components


def choose_component(
    model,
    core,
    shape: StaticShape,
    static: bool,
    factor: int,
    max_length: int,
    device: str,
    ov_config: dict,
    candidates: tuple[str, ...],
    iters: int,
    warmup: int,
    timer: Callable[[], float],
    weight_bytes: int = 0,
) -> ComponentChoice:
    """Time one component's ``model`` compiled in each of ``candidates`` on inputs of ``shape``
    (reshaped to it first when ``static``); the fastest wins (:func:`decide`). A candidate that
    :func:`quantized_hint` would not compile the model with (f16 for an activation-quantized model
    on an x86 CPU) is not timed, and the choice's ``note`` says so."""
    capabilities = device_capabilities(core, device)
    skipped = [p for p in candidates if quantized_hint(p, model, capabilities) != p]
    candidates = tuple(p for p in candidates if p not in skipped)
    note = (
        f"{' and '.join(skipped)} not timed: OpenVINO cannot run this activation-quantized model "
        f"(it holds FakeQuantize) under the {' or '.join(skipped)} hint on this CPU"
        if skipped
        else ""
    )
    inputs = component_inputs(model, shape, factor, max_length)
    if static:
        model = reshape_static(model, **asdict(shape), vae_scale_factor=factor, max_length=max_length)

    def compile_model(precision):
        return core.compile_model(model, device, ov_config | {"INFERENCE_PRECISION_HINT": precision})

    shapes = {name: list(np.shape(value)) for name, value in inputs.items()}
    together, hint = compiled_at_once(weight_bytes, len(candidates)), default_precision(capabilities)
    measurements = measure(
        compile_model, inputs, candidates, iters, warmup, timer, together, partial(settled, default=hint)
    )
    default = kept_default(measurements, hint)
    return ComponentChoice(shapes, measurements, decide(measurements, default), note, default)
