"""Exercise 02.1, one device's share of the noise: ``device_noise(seed, device, per_device)`` draws
the starting noise of that device's images, image ``k`` of the global batch from
``fold_in(key(seed), k)``. The notebook's solution passes its check, the attendee's copy (solution
stripped) is "not answered yet", and the answers a learner would give instead are "not quite": one
key split per device, the same key for every image, ``fold_in`` of the device's index or of the
image's index on its device, the key and the index the wrong way round. No pipeline is built: the
check compares with :func:`sdaccel.tpu.pipeline.initial_noise`, the noise ``pipe.inputs`` places."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdaccel.course import exercises as ex
from sdaccel.tpu.pipeline import initial_noise

NB02 = Path(__file__).resolve().parents[2] / "notebooks" / "02_sharding_across_cores.ipynb"
SHAPE = (4, 4, 4)


def namespace() -> dict:
    """What the notebook holds at the exercise: JAX and the latents' shape."""
    return {"jax": jax, "jnp": jnp, "latent_shape": SHAPE}


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def normal(key):
    return jax.random.normal(key, SHAPE)


def per_image(key_of):
    """``device_noise`` drawing image ``j`` of ``device`` from ``key_of(seed, device, per_device, j)``."""

    def device_noise(seed, device, per_device):
        return jnp.stack([normal(key_of(seed, device, per_device, j)) for j in range(per_device)])

    return device_noise


def global_index(device, per_device, j):
    return device * per_device + j


def test_exercise_02_1_solution_passes_and_the_stub_is_not_answered(capsys):
    solution, stub, check = ex.exercise_cells(NB02, "02.1")
    ns = run(solution, namespace(), "02.1 solution")
    run(check, ns, "02.1 check")
    assert "Exercise 02.1: right" in capsys.readouterr().out
    # device 2's share is rows 4 and 5 of the noise of the whole batch, as pipe.inputs draws it
    whole = initial_noise(3, jnp.arange(8), SHAPE)
    np.testing.assert_array_equal(ns["device_noise"](3, 2, 2), whole[4:6])

    with pytest.raises(ex.ExerciseNotDone, match="02.1: not answered yet"):
        run(check, run(stub, namespace()))


def test_exercise_02_1_wrong_answers_fail():
    _, _, check = ex.exercise_cells(NB02, "02.1")
    key = jax.random.key
    fold = jax.random.fold_in
    wrong = {
        "one key split per device": per_image(lambda s, d, p, j: jax.random.split(key(s), p)[j]),
        "the same key for every image": per_image(lambda s, d, p, j: key(s)),
        "fold_in of the device's index": per_image(lambda s, d, p, j: fold(key(s), d)),
        "fold_in of the image's index on its device": per_image(lambda s, d, p, j: fold(key(s), j)),
        "fold_in of the device, then of the image on it": per_image(
            lambda s, d, p, j: fold(fold(key(s), d), j)
        ),
        "seed and index the wrong way round": per_image(
            lambda s, d, p, j: fold(key(global_index(d, p, j)), s)
        ),
        "the seed as the key, no fold_in": per_image(lambda s, d, p, j: key(s + global_index(d, p, j))),
        "one draw for the device's whole share": lambda s, d, p: jax.random.normal(
            fold(key(s), d), (p, *SHAPE)
        ),
        "the noise itself, not a function": initial_noise(0, jnp.arange(2), SHAPE),
        "a function of other arguments": lambda seed, indices: initial_noise(seed, indices, SHAPE),
        "the batch flattened": lambda s, d, p: initial_noise(
            s, jnp.arange(d * p, (d + 1) * p), SHAPE
        ).ravel(),
    }
    for name, answer in wrong.items():
        ns = {**namespace(), "device_noise": answer}
        with pytest.raises(ex.ExerciseNotDone, match="02.1: not quite"):
            run(check, ns, name)
            pytest.fail(f"a wrong answer passed: {name}")

    right = per_image(lambda s, d, p, j: fold(key(s), global_index(d, p, j)))  # written another way
    run(check, {**namespace(), "device_noise": right}, "right")
