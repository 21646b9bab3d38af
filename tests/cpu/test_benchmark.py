"""The measuring pieces of the OpenVINO track (``sdaccel.cpu.benchmark``, what
``benchmarks/bench_openvino.py`` runs): inputs of the real architectures, the wall/CPU timer, and
the assembly of a run's results (the child processes themselves are exercised by the benchmarks)."""

from __future__ import annotations

import pytest

from sdaccel.core.processes import ChildRun
from sdaccel.cpu import benchmark as B


@pytest.mark.parametrize(
    ("model", "context", "extra"), [("sd15", 768, set()), ("sdxl", 2048, {"text_embeds", "time_ids"})]
)
def test_unet_inputs_of_the_real_architectures(model, context, extra):
    inputs = B.unet_inputs(model, batch=2, latent=16, timestep=7)
    assert set(inputs) == {"sample", "timestep", "encoder_hidden_states"} | extra
    assert inputs["sample"].shape == (2, 4, 16, 16) and inputs["timestep"].tolist() == [7]
    assert inputs["encoder_hidden_states"].shape == (2, 77, context)
    if extra:
        assert inputs["time_ids"].tolist() == [[128, 128, 0, 0, 128, 128]] * 2
    # seeded: the same call gives the same inputs
    again = B.unet_inputs(model, batch=2, latent=16, timestep=7)
    assert (again["sample"] == inputs["sample"]).all()


def test_models_and_labels(tiny_sd15):
    assert B.checkpoint_folder("sd15") is None and B.label("sd15") == "sd15"
    assert B.checkpoint_folder(str(tiny_sd15)) == tiny_sd15 and B.label(str(tiny_sd15)) == tiny_sd15.name
    assert B.unet_config(str(tiny_sd15))["sample_size"] == B.unet_config(str(tiny_sd15))["sample_size"]
    assert B.vae_latents("sd15", 8, 3).shape == (3, 4, 8, 8)


def test_time_wall_and_cpu_times_after_the_untimed_calls():
    calls = []
    times, cpu_times = B.time_wall_and_cpu(lambda: calls.append(1), iters=3, warmup=2)
    assert len(calls) == 5 and len(times) == len(cpu_times) == 3
    assert all(t >= 0 for t in times + cpu_times)
    B.time_wall_and_cpu(lambda: calls.append(1), iters=1, warmup=0)
    assert len(calls) == 6


def test_summarize_run_adds_the_medians_and_the_failure():
    run = ChildRun(
        result={"times": [3.0, 1.0, 2.0], "cpu_times": [6.0, 2.0, 4.0], "precision": "f32"},
        peak_rss_bytes=3 * 2**30,
        peak_anon_bytes=2**30,
        seconds=12.34,
        ok=True,
        samples=[2**30] * 100,
    )
    out = B.summarize_run(run, {"size_bytes": 10})
    assert out["ok"] and out["peak_rss_gb"] == 3.0 and out["peak_anon_gb"] == 1.0 and out["wall_s"] == 12.3
    assert out["s_per_step"] == 2.0 and out["cpu_s_per_step"] == 4.0 and out["size_bytes"] == 10
    assert out["rss_timeline_gb"] == [1.0] * 50  # the max of every 100 // 40 = 2 samples
    failed = B.summarize_run(ChildRun(error="stopped above the limit"))
    assert not failed["ok"] and failed["error"] == "stopped above the limit" and "s_per_step" not in failed


def test_speedups_and_seconds_per_image():
    row = {"ok": True}
    result = {
        "variants": {
            "torch_fp32": {**row, "s_per_step": 4.0, "cpu_s_per_step": 8.0},
            "ov_bf16": {**row, "s_per_step": 2.0, "cpu_s_per_step": 4.0},
            "full_int8": {**row, "s_per_step": 1.0, "cpu_s_per_step": 2.0},
        },
        "best_float": {"chosen": "bf16", "variant": "ov_bf16"},
        "levers": {
            "vae_int8": {
                "rows": {
                    "torch_fp32": {**row, "s_per_step": 3.0},
                    "bf16": {**row, "s_per_step": 1.0},
                    "full_int8": {**row, "s_per_step": 0.5},
                }
            }
        },
    }
    B.add_speedups(result)
    assert result["speedup"]["full_int8"]["vs_torch_fp32"] == 4.0
    assert result["speedup"]["full_int8"]["vs_best_float"] == 2.0
    assert result["speedup"]["full_int8"]["cpu_vs_ov_bf16"] == 2.0
    B.add_whole_image(result, steps=10)
    rows = result["whole_image"]["rows"]
    assert rows["torch_fp32"]["s_per_image"] == 43.0 and rows["ov_bf16"]["s_per_image"] == 21.0
    assert rows["full_int8 + vae full_int8"]["s_per_image"] == 10.5
    assert rows["full_int8"]["vs_best_float"] == 21.0 / 11.0


def test_the_results_table_has_a_row_per_variant_and_the_composed_images():
    row = {"ok": True}
    result = {
        "variants": {
            "torch_fp32": {**row, "s_per_step": 4.0, "cpu_s_per_step": 8.0, "precision": "f32"},
            "ov_bf16": {**row, "s_per_step": 2.0, "cpu_s_per_step": 4.0, "precision": "bf16"},
        },
        "quantization": {"full_int8": {"ok": False, "error": "stopped above the limit"}},
        "best_float": {"chosen": "bf16", "variant": "ov_bf16", "why": "measured"},
    }
    B.add_speedups(result)
    lines = B.results_table({"models": {"sd15": result}}).splitlines()
    assert "wall clock, median" in lines[0] and lines[1].split()[:4] == ["model", "variant", "prec", "s/step"]
    assert lines[3].split()[:6] == ["sd15", "ov_bf16", "bf16", "2.00", "2.00", "1.00"]
    assert "sd15       full_int8                      quantization failed: stopped above the limit" in lines
    assert lines[-1] == "sd15       best float: bf16 (measured)"
    assert B.fmt(None, 5) == "    -" and B.fmt(1.234, 6, 1) == "   1.2"


def _arm(s: float, cpu: float) -> dict:
    return {"s_per_call": s, "cpu_s_per_call": cpu}


STACK_ARMS = {
    "full": _arm(4.0, 8.0),
    "shallow": _arm(2.0, 4.0),
    "merged": _arm(3.0, 6.0),
    "merged shallow": _arm(1.0, 2.0),
}


def test_the_stack_composes_each_step_from_the_unets_timed_side_by_side():
    rows = B.compose_stack(STACK_ARMS, 0.5, [2, 3], torch_fp32={"s_per_step": 12.0, "cpu_s_per_step": 16.0})
    assert list(rows) == [
        "static shapes",
        "+ DeepCache N=2",
        "+ DeepCache N=3",
        "+ token merging 0.5",
        "+ token merging 0.5 + DeepCache N=2",
        "+ token merging 0.5 + DeepCache N=3",
    ]
    assert rows["static shapes"] == {
        "levers": ["static shapes"],
        "s_per_step": 4.0,
        "cpu_s_per_step": 8.0,
        "x_best_float": 1.0,
        "cpu_x_best_float": 1.0,
        "x_torch_fp32": 3.0,
        "cpu_x_torch_fp32": 2.0,
    }
    assert rows["+ DeepCache N=2"]["s_per_step"] == 3.0  # (4 + 2) / 2
    assert rows["+ token merging 0.5 + DeepCache N=3"]["levers"] == [
        "static shapes",
        "token merging 0.5",
        "DeepCache N=3",
    ]
    assert rows["+ token merging 0.5 + DeepCache N=3"]["cpu_s_per_step"] == 10.0 / 3  # (6 + 2 * 2) / 3
    assert rows["+ token merging 0.5 + DeepCache N=3"]["cpu_x_best_float"] == 8.0 / (10.0 / 3)
    without_torch = B.compose_stack(STACK_ARMS, 0.5, [2])
    assert "x_torch_fp32" not in without_torch["static shapes"]
    with pytest.raises(ValueError, match=r"missing \['merged shallow'\]"):
        B.compose_stack({k: v for k, v in STACK_ARMS.items() if k != "merged shallow"}, 0.5, [2])


def test_the_stack_adds_int8_alone_and_with_deepcache_when_both_int8_arms_were_timed():
    arms = {**STACK_ARMS, "int8": _arm(2.0, 5.0), "int8 shallow": _arm(1.0, 3.0)}
    rows = B.compose_stack(arms, 0.5, [2, 3])
    assert list(rows)[-3:] == ["+ INT8", "+ INT8 + DeepCache N=2", "+ INT8 + DeepCache N=3"]
    assert rows["+ INT8"]["levers"] == ["static shapes", "INT8"]
    assert rows["+ INT8"]["cpu_x_best_float"] == 8.0 / 5.0
    assert rows["+ INT8 + DeepCache N=3"]["levers"] == ["static shapes", "INT8", "DeepCache N=3"]
    assert rows["+ INT8 + DeepCache N=3"]["cpu_s_per_step"] == (5.0 + 2 * 3.0) / 3
    assert not any("INT8" in name for name in B.compose_stack(STACK_ARMS, 0.5, [2]))
    with pytest.raises(ValueError, match=r"need the arms \['int8', 'int8 shallow'\]; got only \['int8'\]"):
        B.compose_stack({**STACK_ARMS, "int8": _arm(2.0, 5.0)}, 0.5, [2])


def test_the_stack_adds_the_layer_cut_where_its_shallow_unets_were_timed():
    arms = {
        **STACK_ARMS,
        "int8": _arm(2.0, 4.0),
        "int8 shallow": _arm(1.2, 2.4),
        "layer shallow": _arm(0.5, 1.0),
    }
    rows = B.compose_stack(arms, 0.5, [2, 3])
    layer = rows["+ INT8 + DeepCache N=2 (layer cut)"]
    assert layer["levers"] == ["static shapes", "INT8", "DeepCache N=2 (layer cut)"]
    # the INT8 UNet on full steps, the layer cut's float shallow UNet between them
    assert layer["cpu_s_per_step"] == pytest.approx((4.0 + 1.0) / 2)
    assert rows["+ DeepCache N=3 (layer cut)"]["cpu_s_per_step"] == pytest.approx(
        (STACK_ARMS["full"]["cpu_s_per_call"] + 2 * 1.0) / 3
    )
    # without the INT8 arms the layer cut is timed in float only
    float_only = B.compose_stack({**STACK_ARMS, "layer shallow": _arm(0.5, 1.0)}, 0.5, [2])
    assert "+ DeepCache N=2 (layer cut)" in float_only and not any("INT8" in n for n in float_only)


def test_the_stack_has_its_lines_in_the_table():
    rows = B.compose_stack(STACK_ARMS, 0.5, [2])
    stack = {"ok": True, "precision_asked": "f32", "rounds": 2, "latent": 64, "rows": rows}
    lines = B.stack_lines("sd15", stack)
    assert lines[0].startswith("sd15       lever stack (f32, 2 rounds, 64x64 latents")
    assert lines[-1].split() == [
        "+", "token", "merging", "0.5", "+", "DeepCache", "N=2", "2.000", "s", "cpu", "4.000", "s",
        "x", "2.00", "best", "float", "(cpu)",
    ]  # fmt: skip
    assert B.stack_lines("sd15", {"ok": False, "error": "export failed"}) == [
        "sd15       lever stack: failed: export failed"
    ]
    assert B.stack_lines("sd15", None) == []


def test_the_machine_is_described_in_one_line_with_its_isa_tier():
    machine = {
        "cpu": "AMD EPYC",
        "logical_cores": 2,
        "physical_cores": 1,
        "cpu_flags": {"avx2": True, "avx512f": True, "avx512_vnni": True, "avx512_bf16": True},
        "memory_gb": 23.5,
        "openvino": "2026.4.1-22982-e213a147257-releases/2026/4",
        "nncf": "3.4.0",
        "torch": "2.13.0+cpu",
        "python": "3.11.7",
    }
    assert B.describe_machine(machine) == (
        "AMD EPYC, AVX-512 VNNI + BF16, no AMX, 2 logical cores (1 physical), 23.5 GiB; "
        "OpenVINO 2026.4.1, NNCF 3.4.0, PyTorch 2.13.0+cpu, Python 3.11.7"
    )
    assert B.describe_machine(B.machine_info()).startswith(B.machine_info()["cpu"])  # the real one reads too
