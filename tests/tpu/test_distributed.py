"""Multi-process JAX for real: two local CPU processes (gloo collectives) against one process.

Each worker process has 2 CPU devices, so the two form a 4-device global mesh; each contributes
only its own rows of the global batch, runs the same jitted program and gathers the result.
The gathered images must equal what a single process computes.
"""

from __future__ import annotations

import json
import textwrap

import jax
import numpy as np
import pytest

from sdaccel.tpu import distributed as dist
from sdaccel.tpu import sharding as sh

WORKER = textwrap.dedent(
    """
    import json, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    import numpy as np
    from sdaccel.tpu import distributed as dist
    from sdaccel.tpu import sharding as sh

    out_dir = sys.argv[1]
    assert dist.initialize(), "the environment should make this a multi-process run"
    mesh = sh.make_mesh()  # every device of both processes on "data"
    rows = dist.process_rows(sh.batch_sharding(mesh), 8)
    local = {"indices": rows.astype(np.int32), "cond": np.stack([np.full(4, float(i)) for i in rows]).astype(np.float32)}
    inputs = dist.global_batch(local, mesh, 8)
    params = {"w": np.eye(4, dtype=np.float32)}
    run = jax.jit(
        STAND_IN,
        in_shardings=(sh.tree_shardings(params, mesh), sh.tree_shardings(inputs, mesh, "inputs")),
        out_shardings={"images": sh.batch_sharding(mesh)},
    )
    out = run(params, inputs)
    on_zero = dist.gather(out, to="process0")
    on_all = dist.gather(out, to="all")
    pid = jax.process_index()
    np.save(f"{out_dir}/all_{pid}.npy", on_all["images"])
    if on_zero is not None:
        np.save(f"{out_dir}/zero_{pid}.npy", on_zero["images"])
    from_main = dist.broadcast_from_main(np.array([pid, 7])).tolist()
    try:  # each process at a barrier of its own name
        dist.barrier(f"process {pid}")
        mismatch = ""
    except RuntimeError as e:
        mismatch = str(e)
    info = {"pid": pid, "rows": rows.tolist(), "devices": jax.device_count(), "local": jax.local_device_count(),
            "shard_rows": sorted({s.data.shape[0] for s in out["images"].addressable_shards}),
            "from_main": from_main, "barrier_mismatch": mismatch}
    with open(f"{out_dir}/info_{pid}.json", "w") as f:
        json.dump(info, f)
    dist.barrier("done")
    dist.shutdown()
    """
)

STAND_IN = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    from sdaccel.tpu.pipeline import initial_noise

    def STAND_IN(params, inputs):
        x = initial_noise(3, inputs["indices"], (4, 4))
        for _ in range(3):
            x = jnp.tanh(x @ params["w"] + inputs["cond"][:, None, :])
        return {"images": x}
    """
)


# ----------------------------------------------------------------------------------------------


def test_settings_from_env():
    assert dist.settings_from_env(env={}) is None
    explicit = {
        "SDACCEL_COORDINATOR_ADDRESS": "h0:1234",
        "SDACCEL_NUM_PROCESSES": "4",
        "SDACCEL_PROCESS_ID": "2",
    }
    assert dist.settings_from_env(env=explicit) == dist.Settings("h0:1234", 4, 2)
    indexed = {
        "SDACCEL_COORDINATOR_ADDRESS": "h0:1234",
        "SDACCEL_NUM_PROCESSES": "4",
        "JOB_COMPLETION_INDEX": "3",
    }
    assert dist.settings_from_env(env=indexed).process_id == 3
    assert dist.settings_from_env("x:1", 2, 1, env={}) == dist.Settings("x:1", 2, 1)
    with pytest.raises(ValueError, match="SDACCEL_PROCESS_ID"):
        dist.settings_from_env(env={"SDACCEL_COORDINATOR_ADDRESS": "h0:1", "SDACCEL_NUM_PROCESSES": "2"})
    with pytest.raises(ValueError, match="outside"):
        dist.settings_from_env("h0:1", 2, 5, env={})
    assert dist.settings_from_env(env={"TPU_WORKER_HOSTNAMES": "a,b,c,d"}).auto
    assert dist.settings_from_env(env={"TPU_WORKER_HOSTNAMES": "a"}) is None
    assert dist.initialize(env={}) is False


def test_single_process_helpers():
    mesh = sh.make_mesh(1)
    assert dist.process_rows(sh.batch_sharding(mesh), 5).tolist() == [0, 1, 2, 3, 4]
    assert dist.local_share(["a", "b"], mesh) == ["a", "b"]
    arrays = dist.global_batch({"x": np.arange(6).reshape(3, 2)}, mesh, 3)
    assert arrays["x"].shape == (3, 2) and arrays["x"].sharding.spec == sh.P("data")
    assert dist.gather(arrays, to="process0")["x"].tolist() == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="process0"):
        dist.gather(arrays, to="rank0")


@pytest.mark.slow
def test_two_processes_match_one(tmp_path, jax_processes):
    script = tmp_path / "worker.py"
    script.write_text(STAND_IN + WORKER)
    jax_processes([str(script), str(tmp_path)])
    infos = [json.loads((tmp_path / f"info_{i}.json").read_text()) for i in range(2)]
    assert [i["devices"] for i in infos] == [4, 4] and [i["local"] for i in infos] == [2, 2]
    assert [i["from_main"] for i in infos] == [[0, 7], [0, 7]]  # process 0's value on both
    assert all("reached a different one" in i["barrier_mismatch"] for i in infos)
    assert sorted(infos[0]["rows"] + infos[1]["rows"]) == list(range(8))  # each row from one process
    assert infos[0]["shard_rows"] == [2]
    assert (tmp_path / "zero_0.npy").exists() and not (tmp_path / "zero_1.npy").exists()

    namespace: dict = {}
    exec(STAND_IN, namespace)  # the same function, one process, one device
    idx = np.arange(8, dtype=np.int32)
    inputs = {"indices": idx, "cond": np.repeat(idx[:, None].astype(np.float32), 4, axis=1)}
    reference = np.asarray(
        jax.jit(namespace["STAND_IN"])({"w": np.eye(4, dtype=np.float32)}, inputs)["images"]
    )
    for name in ("zero_0", "all_0", "all_1"):
        np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), reference, atol=1e-6, rtol=0)
