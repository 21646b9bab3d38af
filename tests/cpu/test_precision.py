"""Precision by measurement (sdaccel.cpu.precision): the decision, the record, the cache, and
``OVPipeline(precision="auto")`` on the trained tiny SD 1.5-layout checkpoint."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from sdaccel.core.checkpoint import read_defaults  # noqa: E402
from sdaccel.cpu import precision as prec  # noqa: E402
from sdaccel.cpu import precision_timing  # noqa: E402
from sdaccel.cpu.export import export_pipeline, text_to_image_components  # noqa: E402
from sdaccel.cpu.pipeline import OVPipeline  # noqa: E402
from sdaccel.cpu.precision import (  # noqa: E402
    CHOICE_FILE,
    MIN_MARGIN,
    ComponentChoice,
    PrecisionChoice,
    choose_precision,
    decide,
)
from sdaccel.cpu.precision_timing import Measurement  # noqa: E402

SD15 = Path(__file__).resolve().parents[2] / "checkpoints" / "tiny-shapes-sd15"
PROMPTS = ["a red circle", "a blue square"]
#: two candidates on every CPU: bf16 is timed even where the plugin runs it as f32
BOTH = ("f32", "bf16")


def _has(capability: str) -> bool:
    return capability in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


@pytest.fixture(scope="module")
def export(ov_exports):
    """The text-to-image export of tiny-shapes-sd15, in the session folder that test_deepcache.py
    also exports it to (a run of both exports once)."""
    if not (SD15 / "model_index.json").is_file():
        pytest.skip(f"{SD15} is not there (trained by sdaccel.tools.toys.train)")
    return export_pipeline(
        SD15, ov_exports / SD15.name, components=text_to_image_components(SD15), progress=False
    )


@pytest.fixture
def folder(export, tmp_path):
    """A private copy of the export (a few MB), so that cache files do not leak between tests."""
    copy = shutil.copytree(export, tmp_path / "export")
    (copy / CHOICE_FILE).unlink(missing_ok=True)
    return copy


@pytest.fixture(scope="module")
def measured(export, tmp_path_factory):
    """One measurement of every component in f32 and bf16 (not cached in the shared export)."""
    return choose_precision(export, candidates=BOTH, iters=3, warmup=1, cache=False)


def _m(precision, times, reported=None):
    return Measurement(precision, reported or precision, {"f32": 1}, list(times), 0.1)


# ----------------------------------------------------------------------------------------------
# The decision and the record
# ----------------------------------------------------------------------------------------------


def test_decide_keeps_the_default_unless_beaten_beyond_the_margin_in_three_rounds_of_four():
    # round by round, bf16 took 1.5x, 1.4x and 8x f32's time: beyond 10% in every round
    assert decide({"f32": _m("f32", [1, 1, 1.1]), "bf16": _m("bf16", [1.5, 1.4, 9.0])}, "bf16") == "f32"
    # 1.05x is within the 10% margin: the default stays, whichever way the difference goes
    assert decide({"f32": _m("f32", [1.0, 1.0]), "bf16": _m("bf16", [1.05, 1.05])}, "bf16") == "bf16"
    assert decide({"f32": _m("f32", [1.05, 1.05]), "bf16": _m("bf16", [1.0, 1.0])}, "f32") == "f32"
    # the default slowed 1.5x and 1.6x in two rounds of four (load): noise, kept
    f32, bf16 = _m("f32", [1.0, 1.0, 1.0, 1.0]), _m("bf16", [1.0, 1.5, 1.0, 1.6])
    assert decide({"f32": f32, "bf16": bf16}, "bf16") == "bf16"
    # bf16 asked, f32 ran (no BF16 on the CPU): faster by noise, but not a real alternative
    assert decide({"f32": _m("f32", [1.0]), "bf16": _m("bf16", [0.5], reported="f32")}, "bf16") == "f32"
    assert (
        decide({"f32": _m("f32", [2.0]), "bf16": _m("bf16", [1.0]), "f16": _m("f16", [0.5])}, "bf16") == "f16"
    )
    assert (
        decide({"bf16": _m("bf16", [1.0]), "f32": _m("f32", [1.0])}, "bf16") == "bf16"
    )  # a tie: the default
    assert decide({"bf16": _m("bf16", [1.0]), "f32": _m("f32", [1.0])}) == "f32"


class NoisyRequest:
    """A fake infer request whose call lasts its true cost times a drifting load (1x to 2x over
    100 s of calls) times per-call noise: up to 4%, and a quarter of the calls slowed by up to 60%
    more (another process taking a core)."""

    def __init__(self, clock, cost, rng):
        self.clock, self.cost, self.rng = clock, cost, rng

    def infer(self, inputs):
        drift = 1 + min(self.clock.now / 100.0, 1.0)
        spike = self.rng.uniform(0, 0.6) if self.rng.random() < 0.25 else 0.0
        self.clock.now += self.cost * drift * (1 + self.rng.uniform(0, 0.04) + spike)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeCompiled:
    """What ``measure`` reads of a compiled model: the precision it reports, no runtime layers, and
    its infer request."""

    def __init__(self, precision, request):
        self.precision, self.request = precision, request

    def get_property(self, name):
        return self.precision

    def get_runtime_model(self):
        return SimpleNamespace(get_ordered_ops=lambda: [])

    def create_infer_request(self):
        return self.request


def _noisy_choice(costs: dict[str, float], default: str, seed: int, iters: int = 3) -> str:
    """What ``choose_component`` decides for requests of these true costs on the noisy fake machine:
    the same ``measure`` (interleaved rounds, more rounds before a change), then ``decide``."""
    rng, clock = np.random.default_rng(seed), FakeClock()
    requests = {p: NoisyRequest(clock, cost, rng) for p, cost in costs.items()}
    measurements = precision_timing.measure(
        lambda p: FakeCompiled(p, requests[p]),
        {},
        tuple(costs),
        iters,
        warmup=1,
        timer=clock,
        settled=partial(prec.settled, default=default),
    )
    return decide(measurements, default)


@pytest.mark.parametrize("cost", [0.001, 0.05, 2.0], ids=["1 ms", "50 ms", "2 s"])
def test_noise_alone_never_moves_the_choice_and_a_real_difference_does(cost):
    """Two precisions of the same true cost, timed through a noisy, drifting fake machine: over 300
    runs the default is kept every time, whatever the default is (so 04, 05 and 06 choose alike on
    one machine). One that is really 1.5x faster is chosen in at least 90% of the runs."""
    for default, other in (("bf16", "f32"), ("f32", "bf16")):
        same = [_noisy_choice({"f32": cost, "bf16": cost}, default, seed) for seed in range(300)]
        assert same == [default] * 300, (default, same.count(other))
        faster = [_noisy_choice({default: cost * 1.5, other: cost}, default, seed) for seed in range(300)]
        # this much noise may hide a real difference sometimes (the default stays): 9 runs in 10 see it
        assert faster.count(other) >= 270, (default, faster.count(default))


def test_summary_states_the_measured_ratio():
    choice = PrecisionChoice(
        key={"device": "CPU"},
        machine={"cpu": "Some CPU", "cpu_flags": {"avx2": True, "amx_tile": False}, "openvino": "x"},
        offered=["f32", "bf16"],
        components={
            "unet": ComponentChoice(
                {}, {"f32": _m("f32", [1.0, 1.0]), "bf16": _m("bf16", [1.5])}, "f32", default="bf16"
            ),
            "vae_decoder": ComponentChoice(
                {}, {"f32": _m("f32", [2.0]), "bf16": _m("bf16", [0.5])}, "bf16", default="bf16"
            ),
            "text_encoder": ComponentChoice(
                {}, {"f32": _m("f32", [1.0]), "bf16": _m("bf16", [1.0], reported="f32")}, "f32"
            ),
            "text_encoder_2": ComponentChoice(
                {}, {"f32": _m("f32", [1.0, 1.1]), "bf16": _m("bf16", [1.04, 1.36])}, "bf16", default="bf16"
            ),
        },
    )
    assert choice.chosen == {
        "unet": "f32",
        "vae_decoder": "bf16",
        "text_encoder": "f32",
        "text_encoder_2": "bf16",
    }
    assert choice.summary("unet") == (
        "f32 chosen for the UNet on this CPU: 1.50x faster than bf16, the plugin's default "
        "(more than 10% faster in three rounds of four)"
    )
    assert choice.summary("vae_decoder") == (
        "bf16 kept for the VAE decoder (the plugin's default) on this CPU: 4.00x faster than f32"
    )
    assert choice.summary("text_encoder") == (
        "f32 kept for the text encoder (the plugin's default) on this CPU: bf16 runs as f32 on this CPU "
        "(the plugin offers no BF16)"
    )
    assert choice.summary("text_encoder_2") == (  # rounds: 1.04x and 1.24x, the median 1.14x
        "bf16 kept for the second text encoder (the plugin's default) on this CPU: f32 was 1.14x "
        f"faster in the median round, not more than {MIN_MARGIN:.0%} faster in three rounds of four"
    )
    table = choice.table()
    assert "CPU: Some CPU (avx2)" in table and choice.summary("unet") in table
    assert PrecisionChoice.from_json(json.loads(json.dumps(choice.to_json()))) == choice
    single = PrecisionChoice({"device": "CPU"}, {}, ["f32"], {"unet": ComponentChoice({}, {}, "f32")})
    assert single.summary("unet") == (
        "f32 chosen for the UNet: the only precision the CPU plugin offers on this CPU "
        "(no BF16 or FP16 in its OPTIMIZATION_CAPABILITIES; not timed)"
    )
    with pytest.raises(ValueError, match="schema"):
        PrecisionChoice.from_json(choice.to_json() | {"schema": 0})


def test_chooser_times_every_component_and_candidate(measured):
    """Every component, both candidates, positive times; what the plugin reports; the real input
    shapes of a guided 32x32 image (the export's default size; VAE factor 4, so 8x8 latents)."""
    assert list(measured.components) == ["text_encoder", "unet", "vae_decoder"]
    assert measured.offered == [
        "f32",
        *(["bf16"] if _has("BF16") else []),
        *(["f16"] if _has("FP16") else []),
    ]
    for component, entry in measured.components.items():
        assert list(entry.measurements) == list(BOTH), component
        for p, m in entry.measurements.items():
            assert len(m.times) == len(m.cpu_times) >= 3 and m.compile_s > 0
            assert all(t > 0 for t in m.times) and all(t >= 0 for t in m.cpu_times)
            assert m.reported == ("bf16" if p == "bf16" and _has("BF16") else "f32")
            assert sum(m.runtime.values()) > 0  # the heavy layers were found in the runtime model
            if m.honoured:
                assert set(m.runtime) == {p}, (component, m.runtime)  # they computed in that precision
        assert entry.default == ("bf16" if _has("BF16") else "f32")
        assert entry.chosen == decide(entry.measurements, entry.default)
        # calls of milliseconds: timed in interleaved rounds until each has run 0.3 s (or 30 rounds)
        assert len(entry.measurements["f32"].times) == len(entry.measurements["bf16"].times)
    shapes = {c: e.shapes for c, e in measured.components.items()}
    assert shapes["text_encoder"] == {"input_ids": [2, 77]}
    assert shapes["unet"] == {"sample": [2, 4, 8, 8], "timestep": [1], "encoder_hidden_states": [2, 77, 32]}
    assert shapes["vae_decoder"] == {"latent_sample": [1, 4, 8, 8]}
    assert measured.machine["cpu_flags"] == prec.cpu_features() and measured.choosing_s > 0


def test_injected_timer_decides(folder, monkeypatch):
    """A clock that makes every bf16 call 2 s and every f32 call 1 s (the request that runs tells
    which precision it is): f32 is chosen everywhere, beyond the margin, with those times recorded."""
    clock = FakeClock()
    real_time_rounds = precision_timing.time_rounds

    class Timed:
        def __init__(self, request, precision):
            self.request, self.step = request, 2.0 if precision == "bf16" else 1.0

        def infer(self, inputs):
            self.request.infer(inputs)
            clock.now += self.step

    def time_rounds(requests, inputs, iters, warmup, timer):
        return real_time_rounds({p: Timed(r, p) for p, r in requests.items()}, inputs, iters, warmup, timer)

    monkeypatch.setattr(precision_timing, "time_rounds", time_rounds)
    choice = choose_precision(folder, candidates=BOTH, iters=3, warmup=0, cache=False, timer=clock)
    for entry in choice.components.values():
        f32, bf16 = (entry.measurements[p].times for p in BOTH)
        # where bf16 is the plugin's default, a change away from it is timed for 3 more rounds
        rounds = 6 if entry.default == "bf16" else 3
        assert (f32, bf16) == ([1.0] * rounds, [2.0] * rounds)
        assert entry.chosen == "f32"


# ----------------------------------------------------------------------------------------------
# What the plugin offers: an ARM CPU with FP16, faked
# ----------------------------------------------------------------------------------------------

#: OPTIMIZATION_CAPABILITIES of the CPU plugin on an ARM CPU with FP16 arithmetic (Apple M2,
#: Graviton 3), and on x86 CPUs with and without bf16.
ARM_FP16 = ["FP32", "FP16", "INT8", "BIN", "EXPORT_IMPORT"]
X86_BF16 = ["BF16", "WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"]
X86_AVX2 = ["WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"]


class FakeCore:
    """An ``ov.Core`` whose plugin reports the given capabilities."""

    def __init__(self, capabilities):
        self.capabilities = capabilities

    def get_property(self, device, name):
        assert (device, name) == ("CPU", "OPTIMIZATION_CAPABILITIES")
        return list(self.capabilities)


def test_the_candidates_are_what_the_plugin_lists_f16_included():
    assert prec.offered_precisions(FakeCore(ARM_FP16)) == ("f32", "f16")
    assert prec.offered_precisions(FakeCore(X86_BF16)) == ("f32", "bf16")
    assert prec.offered_precisions(FakeCore(X86_AVX2)) == ("f32",)
    assert prec.precisions_for(["FP32", "BF16", "FP16"]) == ("f32", "bf16", "f16")
    assert prec.device_capabilities(FakeCore(ARM_FP16)) == tuple(ARM_FP16)
    assert [prec.default_precision(c) for c in (ARM_FP16, X86_BF16, X86_AVX2)] == ["f16", "bf16", "f32"]
    real = prec.device_capabilities(ov.Core())
    assert "FP32" in real and prec.offered_precisions(ov.Core()) == prec.precisions_for(real)


def test_on_a_faked_arm_cpu_the_chooser_times_f16(folder, monkeypatch):
    """With the plugin faked to list FP16 (an ARM CPU), f16 is a candidate and timed beside f32; on
    a CPU whose real plugin does not run f16 it is recorded as not honoured (it runs in the plugin's
    default there: bf16 or f32) and f32 is chosen."""
    monkeypatch.setattr(prec, "device_capabilities", lambda core, device="CPU": tuple(ARM_FP16))
    choice = choose_precision(folder, iters=1, warmup=0, cache=False)
    assert choice.offered == ["f32", "f16"] and choice.key["candidates"] == ["f32", "f16"]
    for name, entry in choice.components.items():
        assert list(entry.measurements) == ["f32", "f16"], name
        f16 = entry.measurements["f16"]
        if not _has("FP16"):
            assert not f16.honoured and f16.reported in ("f32", "bf16") and entry.chosen == "f32"
            expected = f"f16 runs as {f16.reported} on this CPU (the plugin offers no FP16)"
            assert expected in choice.summary(name)


# ----------------------------------------------------------------------------------------------
# The cache
# ----------------------------------------------------------------------------------------------


def test_cache_is_reused_when_the_key_matches_and_remeasured_when_the_cpu_differs(folder, monkeypatch):
    first = choose_precision(folder, candidates=BOTH, iters=1, warmup=0)
    path = folder / CHOICE_FILE
    assert not first.cached and path.is_file()
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]  # written atomically
    again = choose_precision(folder, candidates=BOTH, iters=1, warmup=0)
    assert again.cached and again == first  # the same recorded times: nothing was measured
    other_size = choose_precision(folder, candidates=BOTH, iters=1, warmup=0, height=64, width=64)
    assert not other_size.cached and other_size.components["unet"].shapes["sample"] == [2, 4, 16, 16]

    real = prec.machine_key
    monkeypatch.setattr(prec, "machine_key", lambda: real() | {"cpu": "Another CPU"})
    elsewhere = choose_precision(folder, height=64, width=64, candidates=BOTH, iters=1, warmup=0)
    assert not elsewhere.cached and elsewhere.key["cpu"] == "Another CPU"
    assert (
        elsewhere.components["unet"].measurements["f32"].times
        != other_size.components["unet"].measurements["f32"].times
    )
    keys = [entry["key"] for entry in json.loads(path.read_text())["choices"]]
    assert keys == [first.key, other_size.key, elsewhere.key]  # one entry per key, none lost
    monkeypatch.undo()  # back on this CPU
    assert choose_precision(folder, candidates=BOTH, iters=1, warmup=0).cached  # the first is still there

    path.write_text("{not json")  # a broken cache file is measured over, not trusted
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())
    assert not choose_precision(folder, candidates=BOTH, iters=1, warmup=0, height=64, width=64).cached


def test_bad_arguments_are_refused_before_measuring(folder, tmp_path):
    with pytest.raises(ValueError, match="candidates"):
        choose_precision(folder, candidates=["int8"])
    with pytest.raises(ValueError, match="iters"):
        choose_precision(folder, iters=0)
    with pytest.raises(prec.CheckpointError, match="No OpenVINO export"):
        choose_precision(tmp_path / "nowhere")
    assert not (folder / CHOICE_FILE).exists()


# ----------------------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------------------


def test_auto_is_the_default_and_compiles_each_component_in_its_choice(folder):
    pipe = OVPipeline.from_pretrained(folder)
    choice = pipe.precision_choice
    assert choice is not None and set(choice.chosen) == {"text_encoder", "unet", "vae_decoder"}
    assert pipe.precisions == choice.chosen  # every choice is honoured by construction
    assert all(pipe.compile_config_for(c)["INFERENCE_PRECISION_HINT"] == p for c, p in choice.chosen.items())
    assert (folder / CHOICE_FILE).is_file()
    assert OVPipeline.from_pretrained(folder).precision_choice.cached  # the next load reads it


def test_auto_with_a_mixed_choice_equals_the_same_precisions_set_explicitly(folder, monkeypatch):
    """Whatever the measurement picks, the pipeline compiles each component with it, and gives
    the images of the same per-component precisions set by hand. A mixed choice is forced (the
    CPU may offer only f32), through the cache file the chooser reads."""
    measured = choose_precision(folder, candidates=BOTH, iters=1, warmup=0)
    mixed = {"text_encoder": "bf16", "unet": "f32", "vae_decoder": "bf16"}
    for name, p in mixed.items():
        measured.components[name].chosen = p
    offered = prec.offered_precisions(ov.Core())
    monkeypatch.setattr(prec, "offered_precisions", lambda core, device="CPU": BOTH)
    size = read_defaults(folder, "vae_decoder")
    shape = prec.StaticShape(1, size.height, size.width, True)
    measured.key = prec.choice_key(folder, shape, False, "CPU", {}, BOTH, BOTH, tuple(mixed))
    prec.store_choice(folder / CHOICE_FILE, measured)
    auto = OVPipeline.from_pretrained(folder, precision="auto")
    assert auto.precision_choice.cached and auto.precision_choice.chosen == mixed
    runs = {c: (p if p in offered else "f32") for c, p in mixed.items()}
    assert auto.precisions == runs
    explicit = OVPipeline.from_pretrained(folder, precision=mixed)
    assert explicit.precisions == runs and explicit.precision_choice is None
    a = auto(PROMPTS, steps=4, seed=3).array
    b = explicit(PROMPTS, steps=4, seed=3).array
    assert a.std() > 0.05  # real pictures, not a flat field
    np.testing.assert_array_equal(a, b)


def test_other_precisions_still_work_and_bad_ones_fail_before_compiling(folder):
    class NoCompile:
        def __getattr__(self, name):
            raise AssertionError(f"core.{name} used before the precision was checked")

    for bad in ("int8", "BF16", "", {"unet": "int8"}, {"unet": "auto"}, {}, ["f32"]):
        with pytest.raises(ValueError, match="precision must be one of"):
            OVPipeline.from_pretrained(folder, precision=bad, core=NoCompile())
    with pytest.raises(ValueError, match="does not run"):
        OVPipeline.from_pretrained(folder, precision={"text_encoder_2": "f32"}, core=NoCompile())
    f32 = OVPipeline.from_pretrained(folder, precision="f32")
    assert set(f32.precisions.values()) == {"f32"} and f32.precision_choice is None
    plugin = OVPipeline.from_pretrained(folder, precision=None)
    assert plugin.precision == ("bf16" if _has("BF16") else "f32")
    assert not (folder / CHOICE_FILE).exists()  # only "auto" measures


def test_genai_takes_the_same_default_and_the_unets_choice(folder, monkeypatch):
    """GenAI takes one set of properties for every model: with "auto" (its default too, as the
    contract wants) it gets the UNet's choice, from the measurement OVPipeline caches."""
    from sdaccel.cpu.genai import GenAIPipeline

    with pytest.raises(ValueError, match="precision must be 'auto'"):
        GenAIPipeline(folder / "no-such-export", precision="int8")  # refused before the folder is read
    ours = OVPipeline.from_pretrained(folder)
    genai = GenAIPipeline(folder)
    assert genai.precision_choice.cached  # the same measurement, read back
    assert genai.precision == ours.precision_choice.chosen["unet"]
    monkeypatch.setattr(prec, "offered_precisions", lambda core, device="CPU": BOTH)
    forced = choose_precision(folder, candidates=BOTH, iters=1, warmup=0)
    forced.components["unet"].chosen = "bf16"
    prec.store_choice(folder / CHOICE_FILE, forced)
    assert GenAIPipeline(folder).precision == "bf16"
    assert GenAIPipeline(folder, precision=None).precision is None


def test_the_pipelines_refuse_an_ir_that_an_interrupted_save_left(folder):
    """A ``.tmp.xml`` beside the UNet's IR: a save killed between its two renames (the new
    ``.bin`` beside the old ``.xml``). Neither the precision choice, nor OVPipeline, nor GenAI
    reads such a pair; the message names the fix."""
    unfinished = folder / "unet" / "openvino_model.tmp.xml"
    shutil.copy2(folder / "unet" / "openvino_model.xml", unfinished)
    match = r"openvino_model\.tmp\.xml.*interrupted.*force=True"
    with pytest.raises(prec.CheckpointError, match=match):
        OVPipeline.from_pretrained(folder)  # precision "auto": the choice reads the IRs first
    with pytest.raises(prec.CheckpointError, match=match):
        OVPipeline.from_pretrained(folder, precision="f32")
    pytest.importorskip("openvino_genai")
    from sdaccel.cpu.genai import GenAIPipeline

    with pytest.raises(prec.CheckpointError, match=match):
        GenAIPipeline(folder, precision="f32")
    assert not (folder / CHOICE_FILE).exists()


def test_an_activation_quantized_model_gets_bf16_for_f16_on_x86_only():
    """quantized_hint: f16 -> bf16 for a model holding FakeQuantize where the plugin offers BF16
    (x86); every other hint, model or CPU (ARM: FP16 without BF16) is left as it was."""
    import openvino.opset13 as ops

    from sdaccel.cpu.precision import quantized_hint

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    low, high = np.float32(-1), np.float32(1)
    quantized = ov.Model([ops.relu(ops.fake_quantize(x, low, high, low, high, 256))], [x], "q")
    plain = ov.Model([ops.relu(x)], [x], "plain")
    x86, arm = ("FP32", "BF16", "FP16", "INT8"), ("FP32", "FP16", "INT8")
    assert quantized_hint("f16", quantized, x86) == "bf16"
    assert quantized_hint("f16", quantized, arm) == "f16"
    assert quantized_hint("f16", plain, x86) == "f16"
    assert [quantized_hint(h, quantized, x86) for h in ("f32", "bf16", None)] == ["f32", "bf16", None]


def test_quantized_hint_reads_an_ir_only_where_its_rule_can_apply(tmp_path):
    """Given the path of an IR, quantized_hint reads it where f16 meets BF16 (and decides as for the
    model), and nowhere else: a path that holds no IR is not touched on ARM or for another hint."""
    import openvino.opset13 as ops

    from sdaccel.cpu.precision import quantized_hint

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    low, high = np.float32(-1), np.float32(1)
    xml = tmp_path / "q.xml"
    ov.save_model(ov.Model([ops.relu(ops.fake_quantize(x, low, high, low, high, 256))], [x], "q"), xml)
    x86, arm = ("FP32", "BF16", "FP16", "INT8"), ("FP32", "FP16", "INT8")
    assert quantized_hint("f16", xml, x86) == quantized_hint("f16", str(xml), x86) == "bf16"
    nowhere = tmp_path / "no" / "such.xml"
    assert quantized_hint("f16", nowhere, arm) == "f16"
    assert quantized_hint("f32", nowhere, x86) == "f32"
    with pytest.raises(prec.CheckpointError):  # read where the rule applies: a missing IR is named
        quantized_hint("f16", nowhere, x86)
