"""Compiling for Cloud TPU on a machine without one: compile-only TPU devices and what a compiled
program says about itself.

``pip install libtpu`` (or ``jax[tpu]``) beside the CPU jaxlib gives JAX the TPU compiler. With
``JAX_PLATFORMS=cpu`` the default backend stays the CPU, and
``jax.experimental.topologies.get_topology_desc`` still describes a TPU slice whose devices can
be put in a mesh and compiled for (not run on). ``TPU_SKIP_MDS_QUERY=1`` stops libtpu from asking
the cloud metadata server, which is not there.

From the compiled program:

* ``memory_analysis()``: per-chip bytes of arguments, outputs, temporaries and generated code;
* ``cost_analysis()["flops"]``: XLA's FLOP count, per chip, a loop body counted once
  (``Lowered.cost_analysis()`` is ``None`` on TPU: always ask the compiled program);
* ``as_text()``: the optimised HLO, where collectives and Pallas (Mosaic) kernels can be counted.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re

GiB = 2**30

#: The HLO opcodes of cross-chip communication (their asynchronous ``-start`` forms count as one).
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")
_COLLECTIVE = re.compile(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")

#: The custom-call target of a Pallas kernel compiled by Mosaic for TPU.
PALLAS_TARGET = "tpu_custom_call"


@dataclasses.dataclass(frozen=True)
class Topology:
    """A Cloud TPU slice: its name in ``get_topology_desc``, its chips per host, and one chip's
    HBM and peak bf16 FLOP/s (datasheet figures)."""

    name: str
    topology_name: str
    chips_per_host_bounds: tuple[int, int, int]
    hbm_bytes: int
    peak_flops: float

    @property
    def chips(self) -> int:
        x, y, z = self.chips_per_host_bounds
        return x * y * z


TOPOLOGIES: dict[str, Topology] = {
    t.name: t
    for t in (
        Topology("v5e-1", "v5e:1x1", (1, 1, 1), 16 * GiB, 197e12),
        Topology("v5e-4", "v5e:2x2", (2, 2, 1), 16 * GiB, 197e12),
        Topology("v5e-8", "v5e:2x4", (2, 4, 1), 16 * GiB, 197e12),
        Topology("v6e-1", "v6e:1x1", (1, 1, 1), 32 * GiB, 918e12),
        Topology("v6e-4", "v6e:2x2", (2, 2, 1), 32 * GiB, 918e12),
    )
}


def topology(name: str) -> Topology:
    if name not in TOPOLOGIES:
        raise ValueError(f"Unknown TPU topology {name!r}: choose one of {sorted(TOPOLOGIES)}.")
    return TOPOLOGIES[name]


#: libtpu's settings off a TPU VM. The accelerator type only silences a warning: the topology
#: compiled for comes from ``get_topology_desc``, not from it.
OFF_CLOUD_ENV = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",
}


class CompilerMissing(RuntimeError):
    """libtpu, the TPU compiler, is not installed in this Python."""


@functools.cache
def tpu_devices(name: str) -> list:
    """Compile-only devices of the TPU slice ``name`` (``"v5e-4"``...). Needs libtpu installed.
    Off a TPU VM it sets, when unset, what libtpu would otherwise ask the cloud metadata server
    for (``TPU_SKIP_MDS_QUERY``, ``TPU_WORKER_HOSTNAMES``, ``TPU_ACCELERATOR_TYPE``: without them it
    prints warnings, then compiles all the same); and ``ALLOW_MULTIPLE_LIBTPU_LOAD=1``."""
    import jax

    topo = topology(name)
    if jax.default_backend() != "tpu":
        for key, value in OFF_CLOUD_ENV.items():
            os.environ.setdefault(key, value)
    # libtpu keeps other processes out with /tmp/libtpu_lockfile (a killed process leaves it
    # behind); compiling touches no chip, so several compiling processes may share it.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        import libtpu  # noqa: F401
    except ImportError:
        raise CompilerMissing(
            "Compiling for TPU needs libtpu, which exists for Linux on x86-64 only: there, "
            "pip install -r requirements-cpu.txt (it pins libtpu) or pip install 'jax[tpu]==0.10.2'. "
            "On macOS, Windows and ARM, the TPU-plan cells are skipped."
        ) from None
    from jax.experimental import topologies

    desc = topologies.get_topology_desc(
        platform="tpu",
        topology_name=topo.topology_name,
        chip_config_name="default",
        chips_per_host_bounds=topo.chips_per_host_bounds,
        num_slices=1,
        wrap=(False, False, False),
    )
    return list(desc.devices)


def memory(compiled) -> dict[str, int]:
    """Per-chip bytes: arguments, outputs, aliased (donated) bytes, temporaries, generated code,
    and ``peak = arguments + outputs - aliased + temp + code`` (everything live at once)."""
    stats = compiled.memory_analysis()
    out = {
        "argument": int(stats.argument_size_in_bytes),
        "output": int(stats.output_size_in_bytes),
        "alias": int(stats.alias_size_in_bytes),
        "temp": int(stats.temp_size_in_bytes),
        "code": int(stats.generated_code_size_in_bytes),
    }
    out["peak"] = out["argument"] + out["output"] - out["alias"] + out["temp"] + out["code"]
    return out


def flops(compiled) -> float | None:
    """XLA's FLOPs of one call of a compiled program, per chip, loop bodies once (``None`` when
    the backend has no cost model)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    value = (analysis or {}).get("flops")
    return float(value) if value is not None and value >= 0 else None


def collectives(hlo_text: str) -> dict[str, int]:
    """``{opcode: count}`` of the cross-chip collectives in optimised HLO text (zero counts omitted)."""
    counts: dict[str, int] = {}
    for match in _COLLECTIVE.finditer(hlo_text):
        counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts


_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) \(")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition)=%([\w.\-]+)")
_CALLED_LISTS = re.compile(r"\b(?:branch_computations|called_computations)=\{([^}]*)\}")
_WHILE = re.compile(r"\swhile\(.*?\bbody=%([\w.\-]+).*?op_name=\"([^\"]*)\"")


def loop_collectives(hlo_text: str) -> dict[str, dict[str, int]]:
    """``{op name: {opcode: count}}`` for each ``while`` of optimised HLO text, in program order:
    the collectives of one trip, in its body and every computation the body calls. The op name is
    the one JAX gave the loop (``jit(f)/while``, ``jit(f)/vae_decode/while`` under a named scope).
    :func:`collectives` counts the whole program, where each loop's body appears once."""
    computations: dict[str, list[str]] = {}
    current = None
    for line in hlo_text.splitlines():
        if match := _COMPUTATION.match(line):
            current = computations.setdefault(match.group(1), [])
        elif line.startswith("}"):
            current = None
        elif current is not None:
            current.append(line)

    def called(name: str, seen: set[str]) -> set[str]:
        seen.add(name)
        text = "\n".join(computations.get(name, ()))
        names = set(_CALLED.findall(text))
        names |= {n.strip().lstrip("%") for group in _CALLED_LISTS.findall(text) for n in group.split(",")}
        for other in names - seen:
            called(other, seen)
        return seen

    out: dict[str, dict[str, int]] = {}
    for body, op_name in _WHILE.findall(hlo_text):
        text = "\n".join("\n".join(computations.get(name, ())) for name in sorted(called(body, set())))
        name, k = op_name, 2
        while name in out:  # two loops under one name: number the second
            name, k = f"{op_name} #{k}", k + 1
        out[name] = collectives(text)
    return out


def pallas_calls(hlo_text: str) -> int:
    """How many Pallas (Mosaic) kernel calls the optimised HLO holds."""
    return hlo_text.count(f'custom_call_target="{PALLAS_TARGET}"')
