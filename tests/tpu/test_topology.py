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
