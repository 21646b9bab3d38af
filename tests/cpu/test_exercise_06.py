"""Exercises 06.2 (notebook 06) and 06b.2 (appendix 06b) on the tiny SD 1.5 checkpoint.

06.2 of notebook 06, whose answer is the lesson's OpenVINO code: the UNet reshaped to static shapes, compiled with
``{"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}``, one warm-up call, then the
median of timed calls. The notebook's setup cell exports the UNet as the benchmark does when it is
missing, the solution passes its check, the attendee's copy (solution stripped) is "not answered
yet", and wrong answers are "not quite".

06b.2 of the appendix 06b: DeepCache's two IRs cut at the last layer (``export_deepcache(..., cut="layer")``) on the
toy's static pipeline, a full UNet call every second call; the check draws the same picture and
refuses the block cut, another interval, another seed and no cache."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ov = pytest.importorskip("openvino")

from sdaccel.course import exercises as ex  # noqa: E402
from sdaccel.cpu.precision_timing import precision_name  # noqa: E402

NB06 = Path(__file__).resolve().parents[2] / "notebooks" / "06_cpu_benchmark_and_comparison.ipynb"
#: the appendix, which holds exercise 06b.2 beside the stacks it builds on
NB06B = NB06.with_name("06b_cpu_stacks_and_quality.ipynb")


def cells(exercise: str, path: Path = NB06) -> dict[str, str]:
    """The cell before the task of ``exercise`` (06.2's setup in notebook 06) in the notebook at ``path``, its
    solution, the attendee's stub and its check."""
    nb = json.loads(path.read_text())
    (found,) = [e for e in ex.exercises(nb, path.name) if e.id == exercise]
    return {
        "before": nb["cells"][found.task - 1],
        "solution": ex.source(nb["cells"][found.solution]),
        "stub": ex.source(ex.attendee_copy(nb, path.name)["cells"][found.solution]),
        "check": ex.source(nb["cells"][found.check]),
    }


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def exercise(tiny_sd15, tmp_path_factory):
    """The notebook's namespace after the setup cell, as with BENCH_JSON (no IR of the benchmark
    here, so the cell exports it), and the exercise's cells."""
    out = tmp_path_factory.mktemp("nb06")
    code = cells("06.2")
    setup = code.pop("before")
    assert setup["cell_type"] == "code" and not ex.tags(setup), "an untagged setup cell before the task"
    code["setup"] = ex.source(setup)
    ns = {
        "ov": ov,
        "out": out,
        "model_key": tiny_sd15.name,
        "MODEL_ID": str(tiny_sd15),
        "bench": {"settings": {"batch": 2}},
        "results": {"latent": 8},
    }
    run(code["setup"], ns, "06.2 setup")
    assert ns["unet_xml"] == out / "ir" / tiny_sd15.name / "unet_fp16.xml" and ns["unet_xml"].is_file()
    assert ns["sample"]["sample"].shape == (2, 4, 8, 8)
    return ns, code


def test_exercise_06_2_timing_solution_passes_and_the_stub_is_not_answered(exercise, capsys):
    ns, code = exercise
    ns = run(code["solution"], dict(ns), "06.2 timing solution")
    run(code["check"], ns, "06.2 timing check")  # right: no exception
    assert "Exercise 06.2: right" in capsys.readouterr().out
    compiled, times, median_s = ns["unet_timing"]
    assert precision_name(compiled.get_property("INFERENCE_PRECISION_HINT")) == "f32"
    assert len(times) >= 3 and median_s == statistics.median(times) > 0

    stub = run(code["stub"], {})
    with pytest.raises(ex.ExerciseNotDone, match="06.2: not answered yet"):
        run(code["check"], stub)


def test_exercise_06_2_timing_wrong_answers_fail(exercise):
    ns, code = exercise
    ns = dict(ns)
    core, sample = ov.Core(), ns["sample"]

    def compiled_with(config, shapes=True):
        model = core.read_model(ns["unet_xml"])
        if shapes:
            model.reshape(
                {
                    name: list(value.shape) if shapes is True else shapes[name]
                    for name, value in sample.items()
                }
            )
        return core.compile_model(model, "CPU", config)

    right_config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    right = compiled_with(right_config)
    request = right.create_infer_request()
    request.infer(sample)
    times = []
    for _ in range(3):
        request.infer(sample)
        times.append(request.latency / 1e3)  # ms -> s, OpenVINO's own clock
    median_s = statistics.median(times)
    ns["unet_timing"] = (right, times, median_s)
    run(code["check"], ns, "right, timed by OpenVINO's clock")  # the check's own timing agrees

    smaller = {
        name: [1, *value.shape[1:]] if value.ndim > 1 else list(value.shape) for name, value in sample.items()
    }
    wrong = {
        "throughput hint": (  # (no hint at all is LATENCY on the CPU plugin: not told apart)
            compiled_with({"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT"}),
            times,
            median_s,
        ),
        "dynamic shapes (not reshaped)": (compiled_with(right_config, shapes=False), times, median_s),
        "reshaped to batch 1": (compiled_with(right_config, shapes=smaller), times, median_s),
        "the model, not compiled": (core.read_model(ns["unet_xml"]), times, median_s),
        "the mean, not the median": (right, [median_s, 2 * median_s, 6 * median_s], 3 * median_s),
        "two timed calls": (right, times[:2], statistics.median(times[:2])),
        "milliseconds": (right, [1e3 * t for t in times], 1e3 * median_s),
        "timed nothing": (right, [1e-7] * 3, 1e-7),
        "a negative time": (right, [-median_s] * 3, -median_s),
        "the median alone": median_s,
        "not a triple": (right, median_s),
    }
    default = compiled_with({"PERFORMANCE_HINT": "LATENCY"})
    if precision_name(default.get_property("INFERENCE_PRECISION_HINT")) != "f32":  # bf16 (or f16) by default
        wrong["precision hint missing"] = (default, times, median_s)
        wrong["bf16 asked"] = (
            compiled_with({"INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY"}),
            times,
            median_s,
        )
    for name, answer in wrong.items():
        ns["unet_timing"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="06.2: not quite"):
            run(code["check"], ns, name)


# ----------------------------------------------------------------------------------------------
# Exercise 06b.2 of the appendix 06b: DeepCache cut at the last layer, on the toy's static pipeline
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layer_exercise(tiny_sd15, tmp_path_factory):
    """The namespace exercise 06b.2 finds in the notebook (the toy's f32 export, its static
    pipeline, DeepCache, a prompt, few steps) and the exercise's solution, stub and check."""
    from sdaccel.cpu.deepcache import DeepCache
    from sdaccel.cpu.export import checkpoint_defaults, export_pipeline, text_to_image_components
    from sdaccel.cpu.pipeline import OVPipeline

    code = cells("06b.2", NB06B)
    del code["before"]
    export = export_pipeline(
        tiny_sd15,
        tmp_path_factory.mktemp("nb06-ex2") / "export",
        components=text_to_image_components(tiny_sd15),
    )
    size = checkpoint_defaults(tiny_sd15).height
    ns = {
        "quality_checkpoint": tiny_sd15,
        "stack_export": export,
        "stack_pipe": OVPipeline.from_pretrained(export, precision="f32", static=(1, size, size)),
        "DeepCache": DeepCache,
        "prompt": "a red circle on a blue background, center",
        "STEPS": 5,
    }
    return ns, code


def test_exercise_06b_2_solution_passes_and_the_stub_is_not_answered(layer_exercise, capsys):
    ns, code = layer_exercise
    ns = run(code["solution"], dict(ns), "06b.2 solution")
    run(code["check"], ns, "06b.2 check")
    assert "Exercise 06b.2: right" in capsys.readouterr().out
    folder, calls, _ = ns["layer_cut"]
    assert folder.name == "unet_deepcache_layer" and calls["full"] == calls["shallow"] + (
        sum(calls.values()) % 2
    )

    stub = run(code["stub"], {})
    with pytest.raises(ex.ExerciseNotDone, match="06b.2: not answered yet"):
        run(code["check"], {**ns, **stub})


def test_exercise_06b_2_wrong_answers_fail(layer_exercise):
    from sdaccel.cpu.deepcache import DeepCache, export_deepcache

    ns, code = layer_exercise
    ns = run(code["solution"], dict(ns), "06b.2 solution")
    layer, calls, picture = ns["layer_cut"]
    pipe, export, prompt, steps = ns["stack_pipe"], ns["stack_export"], ns["prompt"], ns["STEPS"]

    def drawn(folder, interval, seed=0):
        cache = DeepCache.load(folder, pipe, interval=interval)
        return cache.calls, pipe([prompt], seed=seed, steps=steps, deepcache=cache).images[0]

    block = export_deepcache(ns["quality_checkpoint"], export)  # the cut at the block
    block_calls, block_picture = drawn(block, 2)
    every_third_calls, every_third_picture = drawn(layer, 3)
    _, other_seed = drawn(layer, 2, seed=1)
    wrong = {
        "the block cut's IRs": (block, block_calls, block_picture),
        "the block cut's picture": (layer, calls, block_picture),
        "every third step": (layer, every_third_calls, every_third_picture),
        "another seed": (layer, calls, other_seed),
        "no cache: the export's own UNet": (layer, calls, pipe([prompt], seed=0, steps=steps).images[0]),
        "not a triple": (layer, calls),
        "the folder alone": layer,
    }
    for name, answer in wrong.items():
        ns["layer_cut"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="06b.2: not quite"):
            run(code["check"], ns, name)
