"""Exercise 01.2, a new seed costs no compile: ``(compile_s, max_abs_diff)`` of the same prompts
generated again with seed ``SEED + 1``. The check compares both numbers with a run of its own, so
any ``(0, x > 0.05)`` no longer passes. The pipeline is a stand-in (the JAX pipeline's ``generate``
contract: images in [0, 1] drawn from the seed, ``compile_s`` 0 once a shape has compiled), so the
test runs in a second; notebook 01 runs the real one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sdaccel.course import exercises as ex

NB01 = Path(__file__).resolve().parents[2] / "notebooks" / "01_sdxl_in_jax.ipynb"


class StandIn:
    """``generate(prompts, negative, **kwargs)``: one image per prompt from the seed, and a compile
    the first time a shape is asked for (the seed is not part of it)."""

    def __init__(self):
        self.compiled = set()

    def generate(self, prompts, negative_prompt, *, steps, guidance_scale, height, width, seed):
        shape = (len(prompts), height, width, steps, guidance_scale)
        compile_s = 0.0 if shape in self.compiled else 12.5
        self.compiled.add(shape)
        array = np.random.default_rng(seed).random((len(prompts), height, width, 3), dtype=np.float32)
        return SimpleNamespace(array=array, timings={"compile_s": compile_s, "per_image_s": 0.1})


def namespace() -> dict:
    """What the notebook holds at the exercise: the pipeline, its kwargs, and the first and second
    calls with seed SEED."""
    pipe, prompts = StandIn(), ["a red circle on a blue background"] * 2
    kwargs = dict(steps=2, guidance_scale=5.0, height=16, width=16, seed=0)
    first = pipe.generate(prompts, None, **kwargs)
    second = pipe.generate(prompts, None, **kwargs)
    return dict(
        np=np,
        pipe=pipe,
        prompts=prompts,
        NEGATIVE_PROMPT=None,
        kwargs=kwargs,
        SEED=0,
        first=first,
        second=second,
    )


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def test_exercise_01_2_solution_passes_and_the_stub_is_not_answered(capsys):
    solution, stub, check = ex.exercise_cells(NB01, "01.2")
    ns = run(solution, namespace(), "01.2 solution")
    run(check, ns, "01.2 check")
    assert "Exercise 01.2: right" in capsys.readouterr().out
    compile_s, diff = ns["new_seed"]
    assert compile_s == 0 and 0.5 < diff <= 1

    with pytest.raises(ex.ExerciseNotDone, match="01.2: not answered yet"):
        run(check, run(stub, namespace()))


def test_exercise_01_2_wrong_answers_fail():
    _, _, check = ex.exercise_cells(NB01, "01.2")
    ns = namespace()
    other = ns["pipe"].generate(ns["prompts"], None, **{**ns["kwargs"], "seed": 1})
    diff = np.abs(other.array - ns["second"].array)
    right = (0.0, float(diff.max()))
    wrong = {
        "any (0, x > 0.05)": (0, 0.1),
        "a guessed full range": (0, 1.0),
        "the same seed again: no difference": (0, 0.0),
        "the first call's compile": (ns["first"].timings["compile_s"], right[1]),
        "the mean difference, not the largest": (0, float(diff.mean())),
        "in 0..255, not 0..1": (0, 255 * right[1]),
        "the call timed by hand, not its compile": (0.8, right[1]),
        "swapped": (right[1], 0.0),
        "the difference alone": right[1],
    }
    for name, answer in wrong.items():
        ns["new_seed"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="01.2: not quite"):
            run(check, ns, name)
            pytest.fail(f"a wrong answer passed: {name}")

    for name, answer in {"a tuple": right, "a list": list(right), "numpy numbers": np.array(right)}.items():
        ns["new_seed"] = answer
        run(check, ns, name)
