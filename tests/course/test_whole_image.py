"""sdaccel.course.whole_image: timing whole images, composing them from parts; and
benchmarks/bench_whole_image.py, which measures them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdaccel.core.contract import GenerationResult
from sdaccel.course import whole_image

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """A clock that each call of the fake front-end advances by a known amount."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _front_end(clock, seconds, timings):
    calls = []

    def call():
        calls.append(len(calls))
        clock.now += seconds[len(calls) - 1]
        return GenerationResult([], None, dict(timings[len(calls) - 1]))

    return call, calls


def test_time_calls_warms_up_once_and_splits_each_run():
    clock = Clock()
    timings = [
        {"compile_s": 3.0, "encode_s": 0.5, "denoise_decode_s": 1.5, "vae_decoder_s": 0.4},  # warm-up
        {"compile_s": 0.0, "encode_s": 0.2, "denoise_decode_s": 1.6, "vae_decoder_s": 0.5},
        {"compile_s": 0.0, "encode_s": 0.3, "denoise_decode_s": 1.8, "vae_decoder_s": 0.6},
    ]
    call, calls = _front_end(clock, [5.0, 2.0, 2.25], timings)
    times = whole_image.time_calls(call, 2, clock=clock)
    assert len(calls) == 3
    assert times["warmup_s"] == pytest.approx(5.0)
    assert times["image_s"] == pytest.approx([2.0, 2.25])
    assert times["encode_s"] == pytest.approx([0.2, 0.3])
    assert times["decode_s"] == pytest.approx([0.5, 0.6])
    assert times["denoise_s"] == pytest.approx([1.1, 1.2])
    assert times["denoise_decode_s"] == pytest.approx([1.6, 1.8])
    summary = whole_image.summarize(times, baseline_s=10.0)
    assert summary["image_s"] == pytest.approx(2.125)
    assert summary["encode_s"] == pytest.approx(0.25)
    assert summary["decode_s"] == pytest.approx(0.55)
    assert summary["ratio"] == pytest.approx(10.0 / 2.125)
    assert summary["runs"] == 2


def test_time_calls_excludes_compile_time_and_keeps_missing_parts_missing():
    clock = Clock()
    timings = [{}, {"compile_s": 4.0, "encode_s": 0.1, "denoise_decode_s": 0.9}]
    call, _ = _front_end(clock, [1.0, 5.0], timings)
    warm = []
    times = whole_image.time_calls(call, 1, warmup=lambda: warm.append(call()), clock=clock)
    assert len(warm) == 1
    assert times["image_s"] == pytest.approx([1.0])  # 5 s wall less 4 s compiling
    assert times["compile_s"] == pytest.approx([4.0])
    assert times["decode_s"] == [None] and times["denoise_s"] == [None]  # JAX: one program
    summary = whole_image.summarize(times)
    assert summary["decode_s"] is None and summary["ratio"] is None
    assert summary["denoise_decode_s"] == pytest.approx(0.9)


def test_time_calls_counts_the_cpu_seconds_of_each_call_apart_from_its_wall_time():
    clock, cpu = Clock(), Clock()

    def call():  # 2 s of wall time, of which the process computed 0.5 s (and waited the rest)
        clock.now += 2.0
        cpu.now += 0.5
        return GenerationResult([], None, {})

    times = whole_image.time_calls(call, 3, clock=clock, cpu_clock=cpu)
    assert times["image_s"] == pytest.approx([2.0] * 3)
    assert times["cpu_s"] == pytest.approx([0.5] * 3)  # the warm-up's CPU is not in it
    summary = whole_image.summarize(times, baseline_s=8.0, baseline_cpu_s=4.0)
    assert summary["cpu_s"] == pytest.approx(0.5)
    assert summary["ratio"] == pytest.approx(4.0) and summary["cpu_ratio"] == pytest.approx(8.0)
    # without a CPU baseline, or from runs that did not record CPU seconds: no CPU ratio
    assert whole_image.summarize(times, baseline_s=8.0)["cpu_ratio"] is None
    old = {k: v for k, v in times.items() if k != "cpu_s"}
    assert whole_image.summarize(old, baseline_cpu_s=4.0)["cpu_s"] is None


def test_the_default_cpu_clock_does_not_count_waiting():
    import time

    times = whole_image.time_calls(lambda: time.sleep(0.3), 1, warmup=lambda: None)
    assert times["image_s"][0] >= 0.3
    assert times["cpu_s"][0] < 0.1  # asleep: the process computed almost nothing


def test_time_calls_refuses_no_runs():
    with pytest.raises(ValueError, match="runs must be at least 1"):
        whole_image.time_calls(lambda: None, 0)


def test_composed_seconds():
    assert whole_image.composed_seconds(1.5, 40.0, 20, 30.0) == pytest.approx(831.5)
    with pytest.raises(ValueError, match="steps >= 1"):
        whole_image.composed_seconds(1.0, 2.0, 0, 3.0)


def _linear_front_end(encode, step, decode, rest, cpu_fixed, cpu_step):
    """A front-end whose call of n steps takes encode + n x step + decode + rest of wall time and
    cpu_fixed + n x cpu_step CPU seconds, and reports its parts as the OpenVINO loop does."""
    clock, cpu = Clock(), Clock()

    def call(n):
        clock.now += encode + n * step + decode + rest
        cpu.now += cpu_fixed + n * cpu_step
        return GenerationResult(
            [],
            None,
            {"encode_s": encode, "vae_decoder_s": decode, "denoise_decode_s": n * step + decode + rest},
        )

    def times(n, runs=2):
        return whole_image.time_calls(lambda: call(n), runs, clock=clock, cpu_clock=cpu)

    return times


def test_compose_rebuilds_the_whole_image_of_a_linear_front_end():
    times = _linear_front_end(encode=0.5, step=3.0, decode=2.0, rest=0.25, cpu_fixed=1.5, cpu_step=5.5)
    out = whole_image.compose(times(1), times(3), 1, 3, 20)
    # what one call of 20 steps would have taken, to the float
    assert out["image_s"] == pytest.approx([0.5 + 20 * 3.0 + 2.0 + 0.25])
    assert out["cpu_s"] == pytest.approx([1.5 + 20 * 5.5])
    assert out["encode_s"] == pytest.approx([0.5]) and out["decode_s"] == pytest.approx([2.0])
    assert out["denoise_decode_s"] == pytest.approx([20 * 3.0 + 2.0 + 0.25])
    assert out["denoise_s"] == pytest.approx([20 * 3.0 + 0.25])
    meta = out["composed"]
    assert meta["from_steps"] == [1, 3] and meta["steps"] == 20 and meta["runs"] == 2
    assert meta["step_s"] == pytest.approx(3.0) and meta["step_cpu_s"] == pytest.approx(5.5)
    assert meta["rest_s"] == pytest.approx(0.25)
    assert meta["calls"]["3"]["image_s"] == pytest.approx(0.5 + 9.0 + 2.0 + 0.25)
    # composed_seconds of the parts, plus the rest of a call
    parts = whole_image.composed_seconds(0.5, meta["step_s"], 20, 2.0)
    assert out["image_s"][0] == pytest.approx(parts + meta["rest_s"])
    # summarize reads it as a row of its own, and keeps the label and the runs behind it
    summary = whole_image.summarize(out, baseline_s=125.0, baseline_cpu_s=223.0)
    assert summary["image_s"] == pytest.approx(62.75) and summary["ratio"] == pytest.approx(125.0 / 62.75)
    assert summary["cpu_ratio"] == pytest.approx(2.0)
    assert summary["composed"]["from_steps"] == [1, 3] and summary["runs"] == 2
    assert "composed" not in whole_image.summarize(times(2))


def test_compose_of_a_front_end_without_a_decode_split():
    # a JAX pipeline: encode, then one program for denoise and decode
    clock = Clock()

    def times(n):
        def call():
            clock.now += 0.5 + 4.0 * n + 6.0
            return GenerationResult([], None, {"encode_s": 0.5, "denoise_decode_s": 4.0 * n + 6.0})

        return whole_image.time_calls(call, 1, clock=clock, cpu_clock=lambda: 0.0)

    out = whole_image.compose(times(1), times(2), 1, 2, 20)
    assert out["image_s"] == pytest.approx([0.5 + 80.0 + 6.0])
    assert out["decode_s"] == [None] and out["denoise_s"] == [None]
    assert out["denoise_decode_s"] == pytest.approx([86.0])


def test_compose_refuses_what_it_cannot_compose():
    times = _linear_front_end(encode=0.5, step=3.0, decode=2.0, rest=0.0, cpu_fixed=1.0, cpu_step=1.0)
    with pytest.raises(ValueError, match="1 <= a < b"):
        whole_image.compose(times(2), times(1), 2, 1, 20)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        whole_image.compose(times(1), times(2), 1, 2, 0)
    flat = _linear_front_end(encode=0.5, step=0.0, decode=2.0, rest=0.0, cpu_fixed=1.0, cpu_step=0.0)
    with pytest.raises(ValueError, match="not slower than the call of 1"):  # no step time to scale
        whole_image.compose(flat(1), flat(2), 1, 2, 20)


def test_calls_in_turns_keep_the_step_time_of_a_machine_whose_load_goes_away():
    # a call of n steps takes (1 + 0.1 n) s, four times that during the first three calls
    clock, log = Clock(), []

    def call(n):
        load = 4.0 if len(log) < 3 else 1.0
        log.append(n)
        clock.now += (1.0 + 0.1 * n) * load
        return GenerationResult([], None, {})

    calls = {1: lambda: call(1), 3: lambda: call(3)}
    one_after_the_other = {
        n: whole_image.time_calls(f, 3, warmup=lambda: None, clock=clock, cpu_clock=lambda: 0.0)
        for n, f in calls.items()
    }
    with pytest.raises(ValueError, match="not slower than the call of 1"):
        whole_image.compose(one_after_the_other[1], one_after_the_other[3], 1, 3, 20)
    log.clear()
    turns = whole_image.time_in_turns(calls, 3, clock=clock, cpu_clock=lambda: 0.0)
    assert log == [1, 3, 1, 3, 1, 3, 1, 3]  # each warmed up by a call of its own, then in turns
    assert [len(turns[n]["image_s"]) for n in (1, 3)] == [3, 3]
    assert turns[1]["warmup_s"] == pytest.approx(4.4) and turns[3]["warmup_s"] == pytest.approx(5.2)
    assert turns[1]["image_s"] == pytest.approx([4.4, 1.1, 1.1]) and turns[3]["image_s"] == pytest.approx(
        [1.3] * 3
    )
    assert whole_image.compose(turns[1], turns[3], 1, 3, 20)["composed"]["step_s"] == pytest.approx(0.1)
    # a warm-up given per length, or none
    log.clear()
    whole_image.time_in_turns(calls, 1, {1: lambda: call(2), 3: None}, clock=clock)
    assert log == [2, 1, 3]
    with pytest.raises(ValueError, match="runs must be at least 1"):
        whole_image.time_in_turns(calls, 0)


def test_composed_label():
    assert whole_image.composed_label({"from_steps": [1, 2]}) == " (composed from calls of 1 and 2 steps)"
    assert whole_image.composed_label(None) == ""


# ----------------------------------------------------------------------------------------------
# benchmarks/bench_whole_image.py
# ----------------------------------------------------------------------------------------------

SCRIPT = ROOT / "benchmarks" / "bench_whole_image.py"


def bench(*args: str, timeout: float = 1800):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def in_script(code: str, *argv: str):
    """Runs ``code`` in a child started in benchmarks/, where ``import bench_whole_image`` (and its
    parts, ``bench_whole_image_*``) works, with ``argv`` as ``sys.argv[1:]``; the finished process."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=SCRIPT.parent, capture_output=True, text=True, timeout=120
    )


def last_json(run):
    """The JSON a child of :func:`in_script` printed last."""
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sd15", "--runs", "0"], "--runs must be at least 1"),
        (["sd15", "--quick", "--reuse"], "leave out --reuse"),
        (["sd15", "--rows", "nope"], "invalid choice"),
        (["sdxl", "--reuse"], "leave out --reuse"),
        (["sdxl", "--compose", "2", "1"], "need 1 <= A < B <= --steps (20)"),
        (["sdxl", "--compose", "0", "2"], "need 1 <= A < B <= --steps (20)"),
        (["sdxl", "--compose", "1", "21"], "need 1 <= A < B <= --steps (20)"),
        (["sdxl", "--quick", "--compose", "1", "4"], "need 1 <= A < B <= --steps (3)"),
        (["sdxl", "--compose", "1", "2", "3"], "--compose takes two step counts"),
        (["sdxl", "--compose", "5"], "--compose takes two step counts"),
        (["sdxl", "--compose", "one", "two"], "invalid int value"),
        (["sdxl", "--size", "1020"], "multiple of 8"),
        (["sd15", "--lcm-variant", "full_int8", "full_int8"], "names a recipe twice"),
        (["sd15", "--lcm-variant", "int4"], "invalid choice"),
        (["sdxl", "--quant-parts", "0"], "--quant-parts must be at least 1"),
        (["sd15", "--quality", "no/such/folder"], "--quality: no file or folder no/such/folder"),
        (
            ["sdxl", "--rows", "ov_full_int8_accuracy_control_20"],
            "replays layers found on the SD 1.5-layout toy",
        ),
        (["sdxl", "--rows", "ov_full_int8_sensitive_4_20"], "sdxl's UNet has other layers"),
        (
            ["sd15", "--rows", "ov_full_int8_accuracy_control_20", "--accuracy-control-json", "no/such.json"],
            "no/such.json, which is not there: make it with `python -m sdaccel.toy.accuracy_control",
        ),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, message):
    out = tmp_path / "out.json"
    run = bench(*args, "--out", str(out), "--workdir", str(tmp_path / "work"), timeout=120)
    assert run.returncode == 2
    assert message in run.stderr
    assert not out.exists() and not (tmp_path / "work").exists()


def test_quality_none_is_read_in_any_case():
    code = "import sys; import bench_whole_image as b; print(b.parse_args(sys.argv[1:]).quality)"
    assert in_script(code, "sd15", "--quality", "None").stdout.split() == ["none"]
    assert in_script(code, "sd15").stdout.split() == ["None"]  # the default: benchmarks/results


def test_each_lcm_recipe_gets_its_own_rows():
    def keys(*argv):  # row_keys(parse_args(argv))
        code = "import json, sys; import bench_whole_image as b; print(json.dumps(b.row_keys(b.parse_args(sys.argv[1:]))))"
        run = in_script(code, *argv)
        assert run.returncode == 0, run.stderr[-2000:]
        return last_json(run)

    rows = ["--rows", "torch_fp32_20", "lcm4_lora_int8", "lcm4_lora_int8_taesd", "jax_fp32_20"]
    assert keys("sd15", *rows, "--lcm-variant", "int8_weights", "full_int8") == [
        "torch_fp32_20",
        "lcm4_lora_int8",
        "lcm4_lora_full_int8",
        "lcm4_lora_int8_taesd",
        "lcm4_lora_full_int8_taesd",
        "jax_fp32_20",
    ]
    # one recipe: the keys as before, whatever the recipe (its title names it)
    assert keys("sd15", "--rows", "lcm4_lora_int8_taesd", "--lcm-variant", "hybrid") == [
        "lcm4_lora_int8_taesd"
    ]


def test_resume_adds_int8_recipes_after_the_ones_measured_and_refuses_others(tmp_path):
    out = tmp_path / "out.json"
    common = ["sd15", "--out", str(out), "--workdir", str(tmp_path / "work"), "--resume"]
    code = (
        "import json, sys; import bench_whole_image as b; from bench_whole_image_results import Bench; "
        "print(json.dumps(sorted(Bench(b.parse_args(sys.argv[1:])).results['rows'])))"
    )

    def resume(*extra):
        return in_script(code, *common, *extra)

    first = in_script(
        "import json, sys; import bench_whole_image as b; print(json.dumps(vars(b.parse_args(sys.argv[1:]))))",
        *common,
    )
    settings = last_json(first)
    settings["lcm_variant"] = "int8_weights"  # as files made before several recipes were possible
    rows = {"torch_fp32_20": {"ok": True, "median": {"image_s": 1.0}}, "ov_float_20": {"ok": False}}
    out.write_text(json.dumps({"settings": settings, "rows": rows, "command": "python bench"}))
    added = resume("--lcm-variant", "int8_weights", "full_int8")
    assert added.returncode == 0, added.stderr[-2000:]
    assert last_json(added) == ["torch_fp32_20"]  # the failed row runs again
    other = resume("--lcm-variant", "full_int8")
    assert other.returncode != 0 and "measured with other settings" in other.stderr
    assert "lcm_variant" in other.stderr
    assert json.loads(out.read_text())["rows"] == rows  # a refused resume leaves the file as it was


def test_resume_keeps_the_record_of_an_artifact_the_earlier_run_made(tmp_path):
    out, lora = tmp_path / "out.json", tmp_path / "work" / "lora.safetensors"
    lora.parent.mkdir()
    lora.write_bytes(b"x")
    made = {"path": str(lora), "reused": False, "ok": True, "wall_s": 12.5, "peak_rss_gb": 1.2}
    args = ["sd15", "--out", str(out), "--workdir", str(tmp_path / "work")]
    code = (
        "import json, sys; import bench_whole_image as b; from bench_whole_image_results import Bench; "
        "bench = Bench(b.parse_args(sys.argv[1:])); "
        f"assert bench.artifact('lora', 'make it', print, path={str(lora)!r}); "
        f"assert bench.artifact('tiny_vae', 'make it', print, path={str(lora)!r}); "
        "print(json.dumps(bench.results['artifacts']))"
    )

    def artifacts(*extra):
        settings = {"model": "sd15", "size": 512, "steps": 20, "few_steps": 4, "quick": False, "runs": 2}
        settings.update(warmup_steps=2, lcm_variant=["int8_weights"], compose=None)
        out.write_text(
            json.dumps(
                {"settings": settings, "rows": {}, "command": "python bench", "artifacts": {"lora": made}}
            )
        )
        run = in_script(code, *args, *extra)
        assert run.returncode == 0, run.stderr[-2000:]
        return last_json(run)

    kept = artifacts("--resume")
    assert kept["lora"] == made  # what the run that made it measured stays on record
    assert kept["tiny_vae"]["reused"] and kept["tiny_vae"]["made_by"].startswith("an earlier run")
    fresh = artifacts()  # without --resume nothing earlier is read: the file is only found reusable
    assert fresh["lora"] == {"path": str(lora), "reused": True, "made_by": kept["tiny_vae"]["made_by"]}


def test_the_toys_accuracy_control_replays_on_the_sd15_layout(tmp_path):
    """The replayed row end to end on the quick checkpoint, the SD 1.5-layout toy the search ran
    on: its UNet quantized full INT8 with the search's operations in float, then timed; beside it,
    from the same calibration, full INT8 with the ResNets in float."""
    import openvino as ov

    from sdaccel.toy.int8_unets import float_group_ignored

    out = tmp_path / "out.json"
    run = bench(
        "sd15", "--quick", "--rows", "ov_full_int8_accuracy_control_20", "ov_full_int8_float_resnets_20",
        "--runs", "1", "--quality", "none", "--out", str(out), "--workdir", str(tmp_path / "work"), timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    made = result["artifacts"]["unet_full_int8_accuracy_control"]
    found = json.loads((ROOT / "benchmarks" / "results" / made["found_on"]).read_text())
    assert made["ok"] and made["recipe"] == "full_int8" and made["smooth_quant"] is False
    assert len(made["kept_in_float"]) == len(found["search"]["reverted"])
    row = result["rows"]["ov_full_int8_accuracy_control_20"]
    assert row["ok"] and row["unet_layers"].get("i8", 0) > 0  # INT8 ran, and the float layers beside it
    n = len(found["search"]["reverted"])
    assert row["title"].startswith(f"OpenVINO full INT8, accuracy control's {n} operations in float")
    # the ResNets' recipe: the toy's list of float layers; no operation of a ResNet reads a
    # quantized activation, while the attentions still do; INT8 ran
    resnets = result["artifacts"]["unet_full_int8_float_resnets"]
    assert resnets["ok"] and resnets["recipe"] == "full_int8_float_resnets"
    assert resnets["kept_in_float"] == float_group_ignored("full_int8_float_resnets")
    quantizers = {  # each activation quantizer -> the operations it feeds
        op.get_friendly_name(): [t.get_node().get_friendly_name() for out in op.outputs() for t in out.get_target_inputs()]
        for op in ov.Core().read_model(resnets["path"]).get_ops()
        if op.get_type_name() == "FakeQuantize"
    }  # fmt: skip
    assert sum("attentions" in name for name in quantizers) > 10
    assert [q for q, fed in quantizers.items() if any("resnets" in f for f in fed)] == []
    row = result["rows"]["ov_full_int8_float_resnets_20"]
    assert row["ok"] and row["unet_layers"].get("i8", 0) > 0
    assert row["title"].startswith("OpenVINO full_int8 UNet, ResNets in float, 3 steps")


def test_the_stack_with_deepcache_cut_at_the_last_layer_runs_whole(tmp_path):
    """The layer cut's stack end to end on the quick checkpoint: its own DeepCache IRs next to the
    block cut's folder name, both quantized by the stack's recipe, and a static pipeline that runs
    the full UNet on every second step."""
    out = tmp_path / "out.json"
    run = bench(
        "sd15", "--quick", "--rows", "ov_stack_layer_20", "--runs", "1", "--quality", "none",
        "--out", str(out), "--workdir", str(tmp_path / "work"), timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["artifacts"]["deepcache_layer"]["path"].endswith("unet_deepcache_layer")
    assert result["artifacts"]["deepcache_layer_int8"]["ok"] and "deepcache" not in result["artifacts"]
    row = result["rows"]["ov_stack_layer_20"]
    steps = result["settings"]["steps"]
    assert row["ok"] and row["title"].startswith(
        "OpenVINO static + full INT8 (ResNets in float) + DeepCache N=2 (layer cut)"
    )
    assert row["deepcache"]["cut"] == "layer" and row["deepcache"]["interval"] == 2
    full = -(-steps // 2)
    assert row["deepcache"]["unet_calls_per_image"] == {"full": full, "shallow": steps - full}


def test_the_few_step_rows_compiled_static_run_whole(tmp_path):
    """The static few-step rows end to end on the quick checkpoint: the pipeline compiled for one
    image without guidance (its UNet's every input of one shape, batch 1), with the VAE and with the
    tiny autoencoder, beside the dynamic row of the same recipe."""
    out = tmp_path / "out.json"
    run = bench(
        "sd15", "--quick", "--rows", "lcm4_lora_int8", "lcm4_lora_int8_static", "lcm4_lora_int8_static_taesd",
        "--lcm-variant", "int8_weights", "--runs", "1", "--quality", "none",
        "--out", str(out), "--workdir", str(tmp_path / "work"), timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert list(rows) == ["lcm4_lora_int8", "lcm4_lora_int8_static", "lcm4_lora_int8_static_taesd"]
    assert all(row["ok"] and row["unet_batch"] == 1 for row in rows.values())
    assert [row["unet_static"] for row in rows.values()] == [False, True, True]
    assert rows["lcm4_lora_int8_static"]["title"] == "2 steps LCM + LoRA fused + static + int8_weights UNet"
    assert rows["lcm4_lora_int8_static_taesd"]["title"].endswith("static + int8_weights UNet + TAESD")
