"""Exercise 00.1, whose answer is the lesson's JAX code (``jax.device_put`` with a ``NamedSharding``
and a two-entry ``PartitionSpec``): the notebook's solution passes its check, the attendee's copy
(solution stripped) is "not answered yet", and arrays placed any other way are "not quite"."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.course import exercises as ex

NB00 = Path(__file__).resolve().parents[2] / "notebooks" / "00_environment_and_devices.ipynb"
N = jax.device_count()

pytestmark = pytest.mark.skipif(N < 2, reason=f"needs 2 devices or more, JAX started with {N}")


def namespace() -> dict:
    """What the notebook holds at the exercise: the lesson's one-axis mesh over every device."""
    return {
        "jax": jax,
        "jnp": jnp,
        "NamedSharding": NamedSharding,
        "P": P,
        "n": N,
        "mesh": jax.make_mesh((N,), ("data",)),
    }


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def test_exercise_00_1_rows_over_data_columns_replicated(capsys):
    solution, stub, check = ex.exercise_cells(NB00, "00.1")
    ns = run(solution, namespace(), "00.1 solution")
    run(check, ns, "00.1 check")  # right: no exception
    assert "Exercise 00.1: right" in capsys.readouterr().out
    placed, shard_shape = ns["rows_split"]
    assert placed.sharding.spec == P("data", None) and shard_shape == (2, 8)

    with pytest.raises(ex.ExerciseNotDone, match="00.1: not answered yet"):
        run(check, run(stub, namespace()))

    grid = jnp.arange(2 * N * 8.0).reshape(2 * N, 8)
    mesh = jax.make_mesh((N,), ("data",))
    half = jax.make_mesh((N // 2,), ("data",), devices=jax.devices()[: N // 2])
    right = jax.device_put(grid, NamedSharding(mesh, P("data", None)))
    wrong = {
        "columns split, rows whole": (
            jax.device_put(grid, NamedSharding(mesh, P(None, "data"))),
            (2 * N, 8 // N),
        ),
        "replicated": (jax.device_put(grid, NamedSharding(mesh, P())), (2 * N, 8)),
        "a numpy array": (np.asarray(grid), (2, 8)),
        "left where jnp made it": (grid, (2, 8)),
        "over half the devices": (jax.device_put(grid, NamedSharding(half, P("data", None))), (4, 8)),
        "another array": (jax.device_put(jnp.zeros_like(grid), NamedSharding(mesh, P("data", None))), (2, 8)),
        "the shape of the whole array": (right, (2 * N, 8)),
        "the array alone": right,
        "the shard shape alone": (2, 8),
    }
    for name, answer in wrong.items():
        ns["rows_split"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="00.1: not quite"):
            run(check, ns, name)

    # the same placement written otherwise is right: P("data") leaves the columns whole too, and
    # a fresh mesh of every device on a "data" axis is the lesson's mesh
    for name, spec in {"P('data')": P("data"), "P(('data',), None)": P(("data",), None)}.items():
        fresh = jax.make_mesh((N,), ("data",))
        ns["rows_split"] = (jax.device_put(grid, NamedSharding(fresh, spec)), (2, 8))
        run(check, ns, name)
