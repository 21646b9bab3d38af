"""Exercise 07.2, a second LoRA at half weight: ``with_second_lora(pipe, lora)`` fuses ``lora`` at
0.5, generates with it, unfuses it and returns the images. The notebook's solution passes its check,
the attendee's copy (solution stripped) is "not answered yet", and the wrong answers a learner gives
are "not quite": the weight 1.0, fused but never unfused, unfused twice, the wrong adapter, the
images made after unfusing. The pipeline here is a stand-in that keeps what is fused (its images
say so) and refuses what the real one refuses; tests/tpu/test_lesson_code_07.py runs the same
cells on the tiny trained model's JAX pipeline."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sdaccel.core.lora_files import LoraAdapter, LoraError, LoraLayer
from sdaccel.course import exercises as ex

NB07 = Path(__file__).resolve().parents[2] / "notebooks" / "07_fewer_steps.ipynb"
KEY = "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q"


class Pipe:
    """What a pipeline's LoRA calls do, in small: ``fuse_lora`` takes a list of (adapter, scale)
    pairs, ``unfuse_lora`` takes out all of them and says how many, and ``generate`` draws images
    whose pixels are the sum of the fused scales."""

    def __init__(self):
        self.fused = []

    def fuse_lora(self, adapters):
        if not isinstance(adapters, list | tuple) or not all(
            isinstance(a, tuple | list) and len(a) == 2 for a in adapters
        ):
            raise LoraError("fuse_lora takes a list of (adapter or path, scale) pairs")
        self.fused += [tuple(a) for a in adapters]
        return [a for a, _ in adapters]

    def unfuse_lora(self):
        removed, self.fused = len(self.fused), []
        return removed

    def generate(self, prompts, **kwargs):
        level = sum(scale for _, scale in self.fused)
        images = [np.full((4, 4, 3), 100 + 100 * level, np.float32) for _ in prompts]
        return SimpleNamespace(images=images)


def namespace() -> dict:
    layer = LoraLayer(down=np.ones((4, 8), np.float32), up=np.ones((8, 4), np.float32), alpha=4.0)
    adapter = LoraAdapter({"unet": {KEY: layer, "other": layer}}, "diffusers")
    ns = {
        "LoraAdapter": LoraAdapter,
        "adapter": adapter,  # the LCM-LoRA, read in "One layer fused by hand"
        "key": KEY,
        "layer": layer,
        "pipe": Pipe(),
        "PROMPTS": ["a red circle", "a blue square"],
        "lcm_call": {"steps": 4, "guidance_scale": 1.0, "seed": 42},
        "JAX_LORA": "latent-consistency/lcm-lora-sdxl",
    }
    return run(SECOND_LORA, ns, "the second adapter")


#: The notebook's line that makes the exercise's second adapter (in the cell that unfuses the LCM-LoRA).
(SECOND_LORA,) = [
    line
    for line in ex.code_cell(NB07, "second_lora = LoraAdapter(").splitlines()
    if line.startswith("second_lora = ")
]


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def test_exercise_07_2_solution_passes_and_the_stub_is_not_answered(capsys):
    solution, stub, check = ex.exercise_cells(NB07, "07.2")
    assert "fuse_lora" not in stub and "unfuse_lora" not in stub, "the attendee writes the calls"
    ns = run(solution, namespace(), "07.2 solution")
    assert list(ns["second_lora"].layers["unet"]) == [KEY]  # one layer of the LCM-LoRA, an adapter of its own
    assert "LoraAdapter(" not in solution, "made before the exercise: the attendee's stub runs alone"
    run(check, ns, "07.2 check")
    assert "Exercise 07.2: right" in capsys.readouterr().out
    assert ns["pipe"].fused == [], "the check leaves the base weights"
    images = ns["with_second_lora"](ns["pipe"], ns["second_lora"])
    assert float(images[0].mean()) == 150.0 and ns["pipe"].fused == []  # drawn at 0.5, then unfused

    with pytest.raises(ex.ExerciseNotDone, match="07.2: not answered yet"):
        run(check, run(stub, namespace()))


def answer(body: str) -> str:
    """A wrong answer, written as the function the exercise asks for."""
    lines = "".join(f"    {line}\n" for line in body.strip().splitlines())
    return f"def with_second_lora(pipe, lora):\n{lines}"


FUSE, DRAW, UNFUSE = (
    "pipe.fuse_lora([(lora, 0.5)])",
    "images = pipe.generate(PROMPTS, **lcm_call).images",
    "pipe.unfuse_lora()",
)
WRONG = {
    "weight 1.0": f"pipe.fuse_lora([(lora, 1.0)])\n{DRAW}\n{UNFUSE}\nreturn images",
    "fused but never unfused": f"{FUSE}\n{DRAW}\nreturn images",
    "unfused twice": f"{FUSE}\n{DRAW}\n{UNFUSE}\n{UNFUSE}\nreturn images",
    "the wrong adapter (the LCM-LoRA read before)": f"pipe.fuse_lora([(adapter, 0.5)])\n{DRAW}\n{UNFUSE}\nreturn images",
    "the wrong adapter (the LCM-LoRA's hub id)": f"pipe.fuse_lora([(JAX_LORA, 0.5)])\n{DRAW}\n{UNFUSE}\nreturn images",
    "both adapters": f"pipe.fuse_lora([(adapter, 1.0), (lora, 0.5)])\n{DRAW}\n{UNFUSE}\nreturn images",
    "the pair not in a list": f"pipe.fuse_lora((lora, 0.5))\n{DRAW}\n{UNFUSE}\nreturn images",
    "the images made after unfusing": f"{FUSE}\n{UNFUSE}\n{DRAW}\nreturn images",
    "the pipeline's result, not its images": f"{FUSE}\nresult = pipe.generate(PROMPTS, **lcm_call)\n{UNFUSE}\nreturn result",
    "nothing returned": f"{FUSE}\n{DRAW}\n{UNFUSE}",
}


@pytest.mark.parametrize("why", sorted(WRONG))
def test_exercise_07_2_wrong_answers_fail_and_leave_the_base_weights(why):
    solution, stub, check = ex.exercise_cells(NB07, "07.2")
    ns = run(answer(WRONG[why]), run(stub, namespace()), why)
    with pytest.raises(ex.ExerciseNotDone, match="07.2: not quite"):
        run(check, ns, why)
        pytest.fail(f"a wrong answer passed: {why}")
    assert ns["pipe"].fused == [], f"{why}: the check unfuses what the answer left fused"


def test_exercise_07_2_takes_the_adapter_as_given_however_it_is_written():
    """A right answer in other words: the scale as a fraction, a tuple of pairs, a list pair."""
    _, stub, check = ex.exercise_cells(NB07, "07.2")
    for body in (
        f"pipe.fuse_lora([(lora, 1 / 2)])\n{DRAW}\nremoved = pipe.unfuse_lora()\nreturn images",
        f"pipe.fuse_lora(((lora, 0.5),))\nresult = pipe.generate(PROMPTS, **lcm_call)\n{UNFUSE}\nreturn result.images",
        f"pipe.fuse_lora([[lora, 0.5]])\n{DRAW}\n{UNFUSE}\nreturn list(images)",
    ):
        run(check, run(answer(body), run(stub, namespace())), body)
