"""Many hosts, one program: JAX's multi-controller model, for batch generation.

A TPU slice larger than one host (a v5e-16 is four hosts of four chips) runs one Python process
per host. Each process sees every device of the slice in ``jax.devices()`` but holds only its own
in ``jax.local_devices()``; all processes run the *same* jitted program, and XLA moves data
between hosts inside it. Three things change against a single process:

1. **Start-up** (:func:`initialize`): the processes find each other through a coordinator
   (process 0's address). ``jax.distributed.initialize`` does this; on Cloud TPU and GKE TPU
   slices it finds every setting by itself, elsewhere it takes them from arguments, which
   :func:`settings_from_env` reads from ``SDACCEL_COORDINATOR_ADDRESS``,
   ``SDACCEL_NUM_PROCESSES`` and ``SDACCEL_PROCESS_ID`` (or a Kubernetes indexed Job's
   ``JOB_COMPLETION_INDEX``).
2. **Inputs** (:func:`global_batch`): each process contributes only the rows of the global batch
   that its own devices hold (:func:`process_rows` says which), and
   ``jax.make_array_from_process_local_data`` stitches them into one global ``jax.Array``.
3. **Outputs** (:func:`gather`): a global array's rows live on many hosts; a jitted identity
   whose output sharding is replicated (``P()``) brings the whole array to every device (every
   process must call it), and we keep it on all processes or only on process 0.

Every collective here waits until it has finished on *each* local device before it returns, not
only on the one whose copy it reads. ``jax.experimental.multihost_utils`` reads the first local
device's copy and leaves the others running; a process that then shuts down can leave its peer
waiting for ever on a connection that will not come (two CPU processes of two devices each hung
so, about one run in ten on two busy cores).

On one process every function here is a no-op or a plain ``device_put``, so the same code runs
everywhere.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.tpu.sharding import batch_sharding, check_batch

ENV_COORDINATOR = "SDACCEL_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "SDACCEL_NUM_PROCESSES"
ENV_PROCESS_ID = "SDACCEL_PROCESS_ID"


@dataclass(frozen=True)
class Settings:
    """How to call ``jax.distributed.initialize``: explicit values, or ``auto`` (let JAX detect
    the cluster: Cloud TPU VMs, GKE TPU slices, SLURM, Open MPI...)."""

    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    auto: bool = False


def settings_from_env(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings | None:
    """The distributed settings from arguments first, then the environment; ``None`` for a single
    process.

    - A coordinator address (argument or ``SDACCEL_COORDINATOR_ADDRESS``) means explicit
      settings: the number of processes is required, the process id comes from the argument,
      ``SDACCEL_PROCESS_ID`` or ``JOB_COMPLETION_INDEX``.
    - Otherwise, ``TPU_WORKER_HOSTNAMES`` naming several hosts (GKE sets it on each pod of a
      multi-host TPU slice) means ``auto``.
    """
    env = os.environ if env is None else env
    coordinator_address = coordinator_address or env.get(ENV_COORDINATOR) or None
    if coordinator_address:
        num_processes = num_processes if num_processes is not None else _int(env, ENV_NUM_PROCESSES)
        if process_id is None:
            process_id = _int(env, ENV_PROCESS_ID)
        if process_id is None:
            process_id = _int(env, "JOB_COMPLETION_INDEX")
        if num_processes is None or process_id is None:
            raise ValueError(
                f"A coordinator address ({coordinator_address}) is set but not the "
                f"{'number of processes' if num_processes is None else 'process id'}: set "
                f"{ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} (or run as a Kubernetes indexed Job), "
                "or pass --num-processes/--process-id."
            )
        if not 0 <= process_id < num_processes:
            raise ValueError(f"Process id {process_id} is outside 0..{num_processes - 1}.")
        return Settings(coordinator_address, num_processes, process_id)
    if len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        return Settings(auto=True)
    return None


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    return int(value) if value not in (None, "") else None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    env: Mapping[str, str] | None = None,
) -> bool:
    """Join the other processes when the arguments or the environment say there are several;
    return whether this is a multi-process run. Safe to call twice. Must run before anything
    else touches JAX's devices."""
    settings = settings_from_env(coordinator_address, num_processes, process_id, env)
    if settings is None:
        return False
    if not jax.distributed.is_initialized():
        if settings.auto:
            jax.distributed.initialize()
        else:
            jax.distributed.initialize(
                settings.coordinator_address, settings.num_processes, settings.process_id
            )
    return jax.process_count() > 1


def is_main_process() -> bool:
    return jax.process_index() == 0


def process_rows(sharding: NamedSharding, global_size: int) -> np.ndarray:
    """The global row indices (batch dimension) that this process's devices hold, in the order that
    ``make_array_from_process_local_data`` expects the process's local rows."""
    index_map = sharding.addressable_devices_indices_map((global_size,))
    spans = sorted(
        {(s[0].start or 0, global_size if s[0].stop is None else s[0].stop) for s in index_map.values()}
    )
    return np.concatenate([np.arange(a, b) for a, b in spans]) if spans else np.zeros(0, np.int64)


def local_share(items: Sequence, mesh: Mesh):
    """This process's share of a global batch ``items`` (prompts, indices...), as a list."""
    check_batch(len(items), mesh)
    return [items[i] for i in process_rows(batch_sharding(mesh), len(items))]


def global_batch(local, mesh: Mesh, global_size: int):
    """Global arrays, batch split over ``"data"``, from each process's own rows.

    ``local`` is a pytree (a dict, a dataclass...) whose arrays hold this process's rows
    (``process_rows`` of them, in that order); every result has ``global_size`` rows. On a single
    process this is a ``device_put`` (device arrays stay on the devices); across processes,
    ``jax.make_array_from_process_local_data`` assembles the pieces.
    """
    check_batch(global_size, mesh)
    sharding = batch_sharding(mesh)
    if jax.process_count() == 1:
        return jax.device_put(local, sharding)

    def one(rows):
        rows = np.asarray(rows)
        return jax.make_array_from_process_local_data(sharding, rows, (global_size, *rows.shape[1:]))

    return jax.tree.map(one, local)


def replicated_global(tree, mesh: Mesh):
    """The same host values on every device of ``mesh`` (every process must pass equal values):
    the scheduler's tables, the guidance scale."""
    sharding = NamedSharding(mesh, P())
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x), np.shape(x)), tree
    )


def _identity(x):
    return x


def _on_every_process(x: jax.Array) -> np.ndarray:
    """The whole of the global array ``x`` as a host array on every process: one collective,
    waited for on every local device (see the module's docstring) before the first copy is read."""
    if not isinstance(x, jax.Array) or not isinstance(x.sharding, NamedSharding):
        raise TypeError(
            f"gather takes global jax.Arrays laid out with a NamedSharding (what jax.jit with "
            f"out_shardings returns), got {type(x).__name__}."
        )
    replicated = jax.jit(_identity, out_shardings=NamedSharding(x.sharding.mesh, P()))(x)
    replicated.block_until_ready()
    return np.asarray(replicated.addressable_data(0))


def _stack_processes(x: np.ndarray) -> np.ndarray:
    """Every process's ``x`` (same shape and dtype everywhere), stacked in process order, on every
    process."""
    x = np.asarray(x)
    devices = np.array(jax.devices()).reshape(jax.process_count(), jax.local_device_count())
    by_process = NamedSharding(Mesh(devices, ("processes", "local")), P("processes"))
    stacked = jax.make_array_from_process_local_data(by_process, x[None], (jax.process_count(), *x.shape))
    return _on_every_process(stacked)


def gather(tree, to: str = "all"):
    """Host numpy copies of the global arrays in ``tree``: on every process (``to="all"``), or on
    process 0 only (``to="process0"``: the others get ``None``). Every process must call it."""
    if to not in ("all", "process0"):
        raise ValueError(f"gather(to={to!r}): use 'all' or 'process0'.")
    if jax.process_count() == 1:
        host = jax.tree.map(np.asarray, tree)
    else:
        host = jax.tree.map(_on_every_process, tree)
    return host if to == "all" or is_main_process() else None


def broadcast_from_main(x: np.ndarray) -> np.ndarray:
    """Process 0's value of ``x`` on every process (``x`` must have the same shape and dtype
    everywhere); on one process, ``x`` itself."""
    if jax.process_count() == 1:
        return np.asarray(x)
    return _stack_processes(x)[0]


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier called ``name`` (no-op on one process); two
    processes at barriers of different names is an error."""
    if jax.process_count() > 1:
        names = _stack_processes(np.uint32(zlib.crc32(name.encode())))
        if len(set(names.tolist())) > 1:
            raise RuntimeError(
                f"Process {jax.process_index()} reached barrier {name!r} while another process "
                "reached a different one: the processes no longer run the same program."
            )


def shutdown() -> None:
    if jax.distributed.is_initialized():
        jax.distributed.shutdown()
