"""Timing candidates fairly (sdaccel.cpu.precision_timing): interleaved rounds, more of them for
short calls, a second set of rounds before a change, one model at a time where memory is short."""

from __future__ import annotations

from types import SimpleNamespace

from sdaccel.cpu import precision_timing
from sdaccel.cpu.precision_timing import (
    MAX_ROUNDS,
    Measurement,
    compiled_at_once,
    ir_weight_bytes,
    measure,
    precision_name,
    time_rounds,
)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Request:
    def __init__(self, name, cost, clock, order):
        self.name, self.cost, self.clock, self.order = name, cost, clock, order

    def infer(self, inputs):
        self.order.append(self.name)
        self.clock.now += self.cost


class Compiled:
    def __init__(self, precision, request, alive):
        self.precision, self.request, self.alive = precision, request, alive
        alive.add(precision)

    def __del__(self):
        self.alive.discard(self.precision)

    def get_property(self, name):
        assert name == "INFERENCE_PRECISION_HINT"
        return self.precision

    def get_runtime_model(self):
        return SimpleNamespace(get_ordered_ops=lambda: [])

    def create_infer_request(self):
        return self.request


def test_time_rounds_interleaves_and_keeps_short_calls_going():
    clock, order = FakeClock(), []

    def request(name, cost):
        return Request(name, cost, clock, order)

    timed = time_rounds({"a": request("a", 1.0), "b": request("b", 1.0)}, {}, iters=3, warmup=1, timer=clock)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warmups, then rotating rounds
    assert [len(t) for t, _ in timed.values()] == [3, 3] and timed["a"][0] == [1.0, 1.0, 1.0]
    order.clear()
    short = time_rounds({"a": request("a", 0.001)}, {}, iters=3, warmup=0, timer=clock)
    assert len(short["a"][0]) == MAX_ROUNDS  # 3 ms is no measurement: 30 calls
    order.clear()
    enough = time_rounds({"a": request("a", 0.11)}, {}, iters=1, warmup=0, timer=clock)
    assert len(enough["a"][0]) == 3  # until it has run MIN_TIMED_S (0.3 s)


def _measure(costs, together, settled=None, peak=None):
    clock, order, alive = FakeClock(), [], set()
    requests = {p: Request(p, cost, clock, order) for p, cost in costs.items()}

    def compile_model(precision):
        if peak is not None:
            peak.append(len(alive) + 1)
        return Compiled(precision, requests[precision], alive)

    got = measure(compile_model, {}, tuple(costs), 3, 1, clock, together, settled)
    return got, order


def test_measure_interleaves_together_and_times_one_model_at_a_time_otherwise():
    peak: list[int] = []
    together, order = _measure({"f32": 1.0, "bf16": 2.0}, True, peak=peak)
    assert order[:4] == ["f32", "bf16", "f32", "bf16"] and max(peak) == 2  # warmups, then rounds
    assert together["f32"] == Measurement("f32", "f32", {}, [1.0] * 3, 0.0, together["f32"].cpu_times)
    assert together["bf16"].times == [2.0] * 3 and together["bf16"].honoured
    peak.clear()
    alone, order = _measure({"f32": 1.0, "bf16": 2.0}, False, peak=peak)
    assert order == ["f32"] * 4 + ["bf16"] * 4 and max(peak) == 1  # compiled and released in turn
    assert {p: m.times for p, m in alone.items()} == {p: m.times for p, m in together.items()}


def test_an_unsettled_result_gets_more_rounds_and_a_settled_one_does_not():
    asked = []
    more, _ = _measure({"f32": 1.0, "bf16": 2.0}, True, settled=lambda m: asked.append(m) or False)
    assert [len(m.times) for m in more.values()] == [6, 6] and len(asked) == 1
    enough, _ = _measure({"f32": 1.0, "bf16": 2.0}, True, settled=lambda m: True)
    assert [len(m.times) for m in enough.values()] == [3, 3]


def test_memory_decides_whether_the_candidates_are_compiled_at_once(tmp_path):
    assert compiled_at_once(1_000, 2, available=8_000) and not compiled_at_once(1_000, 3, available=8_000)
    xml = tmp_path / "openvino_model.xml"
    xml.write_text("<net/>")
    assert ir_weight_bytes(xml) == 0
    xml.with_suffix(".bin").write_bytes(b"0" * 123)
    assert ir_weight_bytes(xml) == 123


def test_precision_names():
    assert [precision_name(t) for t in ("float32", "bfloat16", "float16", "u8")] == [
        "f32",
        "bf16",
        "f16",
        "u8",
    ]
    assert precision_timing.MIN_TIMED_S > 0
