"""Compile-only TPU topologies (sdaccel.tpu.topology): the slices we know, and what optimised HLO
text says about communication and Pallas kernels (on handwritten HLO: nothing is compiled)."""

from __future__ import annotations

import pytest

from sdaccel.tpu import topology as tpu_topology

#: A few lines of optimised TPU HLO, as ``compiled.as_text()`` prints them.
HLO = """
HloModule jit_step, entry_computation_layout={(f32[8,128]{1,0})->f32[8,128]{1,0}}

ENTRY %main (p0: f32[8,128]) -> f32[8,128] {
  %p0 = f32[8,128]{1,0} parameter(0)
  %all-gather-start = (f32[2,128]{1,0}, f32[8,128]{1,0}) all-gather-start(f32[2,128]{1,0} %p0), dimensions={0}
  %all-gather-done = f32[8,128]{1,0} all-gather-done(%all-gather-start)
  %all-reduce = f32[8,128]{1,0} all-reduce(f32[8,128]{1,0} %all-gather-done), to_apply=%add
  %all-reduce.1 = f32[8,128]{1,0} all-reduce(f32[8,128]{1,0} %all-reduce), to_apply=%add
  %cp = f32[8,128]{1,0} collective-permute(f32[8,128]{1,0} %all-reduce.1), source_target_pairs={{0,1}}
  %k1 = f32[8,128]{1,0} custom-call(f32[8,128]{1,0} %cp), custom_call_target="tpu_custom_call"
  ROOT %k2 = f32[8,128]{1,0} custom-call(f32[8,128]{1,0} %k1), custom_call_target="tpu_custom_call"
}
"""


def test_topologies_and_their_chips():
    v5e4 = tpu_topology.topology("v5e-4")
    assert v5e4.chips == 4 and v5e4.hbm_bytes == 16 * tpu_topology.GiB and v5e4.peak_flops == 197e12
    assert tpu_topology.topology("v5e-8").chips == 8
    assert tpu_topology.topology("v6e-1").hbm_bytes == 32 * tpu_topology.GiB
    for name, topo in tpu_topology.TOPOLOGIES.items():
        assert topo.name == name and topo.chips == int(name.rsplit("-", 1)[1])


def test_an_unknown_topology_names_the_choices():
    with pytest.raises(ValueError, match=r"Unknown TPU topology 'v9-1'.*'v5e-1'"):
        tpu_topology.topology("v9-1")


def test_collectives_counts_each_kind_once_per_op():
    # the asynchronous all-gather counts once (its -start), the -done not at all
    assert tpu_topology.collectives(HLO) == {"all-gather": 1, "all-reduce": 2, "collective-permute": 1}
    assert tpu_topology.collectives("%add = f32[8]{0} add(f32[8]{0} %a, f32[8]{0} %b)") == {}


def test_pallas_calls_counts_the_mosaic_kernels():
    assert tpu_topology.pallas_calls(HLO) == 2
    assert tpu_topology.pallas_calls('custom_call_target="__cudnn$fmha"') == 0


#: Two loops: the first one's body all-reduces, and calls a computation that all-gathers; the second
#: one's body permutes; one more all-reduce outside both.
LOOPS_HLO = """
HloModule jit_f

%add (x: f32[], y: f32[]) -> f32[] {
  ROOT %s = f32[] add(f32[] %x, f32[] %y)
}

%gather (p: f32[2,4]) -> f32[4,4] {
  %p = f32[2,4]{1,0} parameter(0)
  ROOT %g = f32[4,4]{1,0} all-gather(f32[2,4]{1,0} %p), dimensions={0}
}

%body (t: (s32[], f32[4,4])) -> (s32[], f32[4,4]) {
  %r = f32[4,4]{1,0} all-reduce(f32[4,4]{1,0} %x), to_apply=%add
  %c = f32[4,4]{1,0} call(f32[2,4]{1,0} %h), to_apply=%gather
}

%cond (t: (s32[], f32[4,4])) -> pred[] {
  ROOT %lt = pred[] compare(s32[] %i, s32[] %n), direction=LT
}

%body.2 (t: (s32[], f32[4,4])) -> (s32[], f32[4,4]) {
  %cp = f32[4,4]{1,0} collective-permute(f32[4,4]{1,0} %x), source_target_pairs={{0,1}}
}

ENTRY %main (p0: f32[4,4]) -> f32[4,4] {
  %w = (s32[], f32[4,4]) while((s32[], f32[4,4]) %t), condition=%cond, body=%body, metadata={op_name="jit(f)/while"}
  %w.2 = (s32[], f32[4,4]) while((s32[], f32[4,4]) %t2), condition=%cond, body=%body.2, metadata={op_name="jit(f)/decode/while"}
  ROOT %all-reduce.9 = f32[4,4]{1,0} all-reduce(f32[4,4]{1,0} %y), to_apply=%add
}
"""


def test_loop_collectives_counts_one_trip_of_each_loop():
    assert tpu_topology.loop_collectives(LOOPS_HLO) == {
        "jit(f)/while": {"all-reduce": 1, "all-gather": 1},
        "jit(f)/decode/while": {"collective-permute": 1},
    }
    assert tpu_topology.collectives(LOOPS_HLO) == {"all-reduce": 2, "all-gather": 1, "collective-permute": 1}
    assert tpu_topology.loop_collectives(HLO) == {}  # no loop


def test_loop_collectives_of_a_compiled_program():
    """A loop that multiplies by a weight split along the contraction: its trips all-reduce, as
    the whole program's count shows once."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if jax.device_count() < 2:
        pytest.skip("needs 2 devices")
    mesh = jax.make_mesh(
        (2,), ("model",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:2]
    )

    def f(w, x):
        return jax.lax.fori_loop(0, 3, lambda i, y: jnp.tanh(y @ w), x)

    split = jax.jit(f, in_shardings=(NamedSharding(mesh, P("model", None)), NamedSharding(mesh, P())))
    text = split.lower(jnp.ones((8, 8)), jnp.ones((4, 8))).compile().as_text()
    loops = tpu_topology.loop_collectives(text)
    assert list(loops) == ["jit(f)/while"] and loops["jit(f)/while"]
    whole = tpu_topology.collectives(text)
    assert all(n <= whole[kind] for kind, n in loops["jit(f)/while"].items())
