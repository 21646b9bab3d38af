"""Exercise 07.3, the first LCM step as a function ``lcm_step(state, x, eps, noise)``: the notebook's
solution passes its check, the attendee's copy (solution stripped) is "not answered yet", and wrong
steps are "not quite", the step without the boundary scalings ``c_skip``/``c_out`` among them (at
the lesson's t = 999, c_skip is 2.5e-9 and c_out 1 to float32 precision, so only a schedule where
they count tells it apart). The schedule is the library's ``LCMScheduler``, the latents random:
no UNet is run."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdaccel.course import exercises as ex
from sdaccel.tpu.schedulers import LCMScheduler

NB07 = Path(__file__).resolve().parents[2] / "notebooks" / "07_fewer_steps.ipynb"


def namespace() -> dict:
    """What the notebook holds at the exercise: the 4-step LCM schedule, the first step's latents,
    its noise prediction and its fresh noise (random here)."""
    scheduler = LCMScheduler()
    keys = jax.random.split(jax.random.key(0), 3)
    shape = (1, 8, 8, 4)
    return {
        "jnp": jnp,
        "lcm_scheduler": scheduler,
        "lcm_state": scheduler.set_timesteps(4),
        "step_latents": jax.random.normal(keys[0], shape),
        "eps": jax.random.normal(keys[1], shape),
        "step_noise": jax.random.normal(keys[2], shape),
    }


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def step(c_out, c_skip, renoise):
    """An LCM step with the given boundary condition and re-noising, read from the state."""

    def lcm_step(state, x, eps, noise):
        a, a_next = state.alpha_prod[0], state.alpha_prod_prev[0]
        x0 = (x - jnp.sqrt(1 - a) * eps) / jnp.sqrt(a)
        denoised = c_out(state) * x0 + c_skip(state) * x
        return renoise(denoised, noise, a, a_next)

    return lcm_step


C_OUT, C_SKIP = (lambda s: s.c_out[0]), (lambda s: s.c_skip[0])
NEXT_LEVEL = lambda d, noise, a, a_next: jnp.sqrt(a_next) * d + jnp.sqrt(1 - a_next) * noise  # noqa: E731


def test_exercise_07_3_solution_passes_and_the_stub_is_not_answered(capsys):
    solution, stub, check = ex.exercise_cells(NB07, "07.3")
    ns = run(solution, namespace(), "07.3 solution")
    run(check, ns, "07.3 check")
    assert "Exercise 07.3: right" in capsys.readouterr().out
    expected = ns["lcm_scheduler"].step(ns["lcm_state"], ns["eps"], 0, ns["step_latents"], ns["step_noise"])
    np.testing.assert_allclose(ns["next_latents"], expected, rtol=1e-5, atol=1e-5)

    with pytest.raises(ex.ExerciseNotDone, match="07.3: not answered yet"):
        run(check, run(stub, namespace()))


def test_exercise_07_3_wrong_steps_fail():
    _, _, check = ex.exercise_cells(NB07, "07.3")
    ns = namespace()
    state = ns["lcm_state"]
    assert float(state.c_skip[0]) < 1e-8 and float(state.c_out[0]) == 1.0  # why t = 999 alone cannot tell
    one = lambda s: 1.0  # noqa: E731
    zero = lambda s: 0.0  # noqa: E731
    closed_over = step(lambda s: state.c_out[0], lambda s: state.c_skip[0], NEXT_LEVEL)
    wrong = {
        "no boundary scalings (denoised = x0)": step(one, zero, NEXT_LEVEL),
        "c_out only, no c_skip": step(C_OUT, zero, NEXT_LEVEL),
        "c_skip and c_out swapped": step(C_SKIP, C_OUT, NEXT_LEVEL),
        "the scalings of lcm_state, not of the state given": closed_over,
        "no re-noising (the last step's rule)": step(C_OUT, C_SKIP, lambda d, noise, a, a_next: d),
        "re-noised to the current level": step(
            C_OUT, C_SKIP, lambda d, noise, a, a_next: jnp.sqrt(a) * d + jnp.sqrt(1 - a) * noise
        ),
        "noise weights swapped": step(
            C_OUT, C_SKIP, lambda d, noise, a, a_next: jnp.sqrt(1 - a_next) * d + jnp.sqrt(a_next) * noise
        ),
        "the latents, not a function": step(C_OUT, C_SKIP, NEXT_LEVEL)(
            state, ns["step_latents"], ns["eps"], ns["step_noise"]
        ),
        "a function of other arguments": lambda state, x: x,
    }
    for name, answer in wrong.items():
        ns["lcm_step"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="07.3: not quite"):
            run(check, ns, name)
            pytest.fail(f"a wrong answer passed: {name}")

    ns["lcm_step"] = step(C_OUT, C_SKIP, NEXT_LEVEL)  # the same step written here: right
    run(check, ns, "right")
