"""Cut an OpenVINO UNet IR into consecutive parts at block boundaries, and stitch parts back.

Quantizing the whole SDXL UNet at once needs about twice the model in memory: NNCF builds an f32
copy of the graph to collect statistics while the source stays mapped. Quantized one part at a
time, the peak follows the largest part instead (:func:`sdaccel.cpu.quantize_parts.quantize_in_parts`).
This module is the graph surgery that makes that possible, and nothing else:

* :func:`units` names the blocks of a UNet in the order they run: every ResNet, attention
  (transformer), down- and up-sampler of ``down_blocks``, ``mid_block`` and ``up_blocks``, read
  from the OpenVINO node names that ``openvino.convert_model`` keeps from the PyTorch modules
  (``__module.down_blocks.1.attentions.0.proj_in/aten::_convolution/Convolution``).
* :func:`plan_parts` groups consecutive blocks into ``parts`` groups with about the same weight
  bytes each (the quantity that sets the memory of a quantization).
* :func:`cut` turns the model into one ``ov.Model`` per part. Every operation goes to the part of
  its block; operations outside any block (the timestep embedding, ``conv_in``, shape arithmetic,
  ``conv_out``) go to the earliest part their inputs allow. A tensor made in one part and read in
  a later one "crosses" the cut: it becomes a ``Result`` of the part that makes it and a
  ``Parameter`` of every later part that reads it. The UNet's skip connections cross several cuts
  (a down block's output is read by the matching up block), and so do the timestep embedding and
  the text embeddings, which every block reads. Each crossing tensor gets a short name
  (``x0``, ``x1``...) as its tensor name on both sides.
* :func:`stitch` joins the (quantized) parts back into one model with the original inputs and
  outputs: each part's ``Parameter`` is replaced by the tensor of that name from an earlier part.
  One model, not a chain of parts run one after the other: the CPU plugin compiles it as it would
  the one-shot result (one infer request, no copies between parts, the same fusions across the
  cuts), and every pipeline loads it as it loads any UNet.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

#: A UNet block in an OpenVINO node name: group 1 is its diffusers module path.
UNIT = re.compile(
    r"(?:^|[./])((?:down|up)_blocks\.\d+\.(?:resnets|attentions|downsamplers|upsamplers)\.\d+"
    r"|mid_block\.(?:resnets|attentions)\.\d+)(?=[./]|$)"
)


def unit_of(name: str) -> str | None:
    """The block (diffusers module path such as ``down_blocks.1.attentions.0``) that an OpenVINO
    node name belongs to, or ``None`` outside every block."""
    match = UNIT.search(name)
    return match.group(1) if match else None


def _is_constant(node) -> bool:
    return node.get_type_name() == "Constant"


def _constant_bytes(node) -> int:
    return int(np.prod(node.get_output_shape(0), dtype=np.int64)) * node.get_output_element_type(0).size


def units(model) -> list[str]:
    """The UNet's blocks in the order they run (first appearance in topological order)."""
    seen: dict[str, None] = {}
    for op in model.get_ordered_ops():
        unit = unit_of(op.get_friendly_name())
        if unit is not None:
            seen.setdefault(unit, None)
    return list(seen)


def unit_weight_bytes(model) -> dict[str, int]:
    """Bytes of the constants each block reads (weights and biases, as stored in the IR); each
    constant is counted once, for the first block that reads it. Constants read outside every block
    (``conv_in``, the time embedding, ``conv_out``) are counted under ``""``."""
    sizes: dict[str, int] = {"": 0, **{u: 0 for u in units(model)}}
    counted: set[str] = set()
    for op in model.get_ordered_ops():
        if _is_constant(op):
            continue
        unit = unit_of(op.get_friendly_name()) or ""
        for value in op.input_values():
            node = value.get_node()
            if _is_constant(node) and node.get_name() not in counted:
                counted.add(node.get_name())
                sizes[unit] += _constant_bytes(node)
    return sizes


def balanced_groups(weights: Sequence[int], parts: int) -> list[int]:
    """Split ``weights`` (in order) into ``parts`` consecutive non-empty groups whose largest sum is
    as small as possible (the classic linear partition, by dynamic programming). Returns the index
    where each group after the first starts (``parts - 1`` indices)."""
    n = len(weights)
    if not 1 <= parts <= n:
        raise ValueError(f"Cannot split {n} blocks into {parts} parts: choose 1 to {n} parts.")
    prefix = np.concatenate([[0], np.cumsum(weights, dtype=np.float64)])
    # best[k][i]: the smallest largest-group sum for the first i items in k groups.
    best = np.full((parts + 1, n + 1), np.inf)
    split = np.zeros((parts + 1, n + 1), dtype=np.int64)
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], split[k][i] = cost, j
    starts, i = [], n
    for k in range(parts, 1, -1):
        i = int(split[k][i])
        starts.append(i)
    return sorted(starts)


@dataclass
class PartPlan:
    """Which blocks go to which part, and the weight bytes of each part."""

    blocks: list[list[str]]
    weight_bytes: list[int]
    #: Tensors crossing into each part (names ``x<n>``, or an original input name).
    inputs: list[list[str]] = field(default_factory=list)
    #: Tensors each part makes for later parts, plus the model's own outputs in the last one.
    outputs: list[list[str]] = field(default_factory=list)

    @property
    def parts(self) -> int:
        return len(self.blocks)

    def as_dict(self) -> dict:
        return {
            "parts": self.parts,
            "blocks": self.blocks,
            "weight_bytes": self.weight_bytes,
            "inputs": self.inputs,
            "outputs": self.outputs,
        }


def plan_parts(model, parts: int) -> PartPlan:
    """Group the UNet's blocks into ``parts`` consecutive parts of about equal weight bytes. The
    weights outside every block (``conv_in``, the embeddings, ``conv_out``: a few MB) count with
    the first part."""
    order = units(model)
    if not order:
        raise ValueError(
            "No UNet block (down_blocks.N / mid_block / up_blocks.N) in the node names of this model: "
            "quantization in parts needs an IR converted from a diffusers UNet2DConditionModel "
            "(sdaccel.cpu.export); quantize it in one piece (parts=1) instead."
        )
    sizes = unit_weight_bytes(model)
    weights = [sizes[u] for u in order]
    weights[0] += sizes[""]
    starts = [0, *balanced_groups(weights, parts), len(order)]
    return PartPlan(
        blocks=[order[a:b] for a, b in pairwise(starts)],
        weight_bytes=[int(sum(weights[a:b])) for a, b in pairwise(starts)],
    )


def cut(model, plan: PartPlan) -> list:
    """The parts of ``model`` (an ``ov.Model``, rewired in place: read it afresh to use it whole
    again) as a list of ``ov.Model``, following ``plan`` (:func:`plan_parts`). Fills
    ``plan.inputs`` and ``plan.outputs`` with the names of the tensors that cross the cuts."""
    import openvino as ov

    part_of_unit = {u: k for k, blocks in enumerate(plan.blocks) for u in blocks}
    # Nodes are keyed by their unique name: the Python objects are new wrappers on every call.
    original_inputs = {p.get_name(): p.get_friendly_name() for p in model.get_parameters()}
    # -1: an original input, which every part that reads it gets as a Parameter of its own.
    part: dict[str, int] = {}
    rewire = []  # (consumer op, input index, producer Output, consumer part)
    for op in model.get_ordered_ops():
        key = op.get_name()
        if _is_constant(op):
            continue
        if key in original_inputs:
            part[key] = -1
            continue
        sources = [v.get_node().get_name() for v in op.input_values() if not _is_constant(v.get_node())]
        unit = unit_of(op.get_friendly_name())
        own = part_of_unit.get(unit, 0) if unit is not None else 0
        part[key] = max([own, *(part[s] for s in sources)])
        for index, value in enumerate(op.input_values()):
            node = value.get_node()
            if not _is_constant(node) and part[node.get_name()] < part[key]:
                rewire.append((op, index, value, part[key]))

    names: dict[tuple[str, int], str] = {}

    def name_of(value) -> str:
        node = value.get_node().get_name()
        if (node, value.get_index()) not in names:
            crossing = sum(1 for key in names if key[0] not in original_inputs)
            names[node, value.get_index()] = original_inputs.get(node) or f"x{crossing}"
        return names[node, value.get_index()]

    parameters: list[dict[str, object]] = [{} for _ in plan.blocks]
    made: list[dict[str, object]] = [{} for _ in plan.blocks]
    for op, index, value, consumer in rewire:
        name = name_of(value)
        if name not in parameters[consumer]:
            parameter = ov.opset13.parameter(value.get_partial_shape(), value.get_element_type(), name=name)
            parameter.output(0).get_tensor().set_names({name})
            parameters[consumer][name] = parameter
        producer = part[value.get_node().get_name()]
        if producer >= 0 and name not in made[producer]:
            value.get_tensor().add_names({name})
            made[producer][name] = value
        op.input(index).replace_source_output(parameters[consumer][name].output(0))

    models = []
    for k in range(len(plan.blocks)):
        results = [ov.opset13.result(value) for value in made[k].values()]
        for result, name in zip(results, made[k], strict=True):
            result.set_friendly_name(name)
        # The model's own outputs go with the part that makes them.
        results += [r for r in model.get_results() if part[r.get_name()] == k]
        if not results:
            raise ValueError(f"Part {k} of the cut makes nothing for a later part: choose fewer parts.")
        inputs = sorted(parameters[k].values(), key=lambda p: _order(p.get_friendly_name()))
        models.append(ov.Model(results, inputs, f"{model.get_friendly_name()}_part{k}"))
        plan.inputs.append([p.get_friendly_name() for p in inputs])
        plan.outputs.append([tensor_name(r.output(0)) for r in results])
    return models


def _order(name: str) -> tuple[int, int | str]:
    """Original inputs first (by name), then crossing tensors by number."""
    return (1, int(name[1:])) if re.fullmatch(r"x\d+", name) else (0, name)


def _crossing_name(value) -> str | None:
    """The ``x<n>`` name :func:`cut` gave a tensor, or ``None``."""
    found = [n for n in value.get_names() if re.fullmatch(r"x\d+", n)]
    return found[0] if found else None


def tensor_name(value) -> str:
    """The name a part's input or output goes by: the ``x<n>`` that :func:`cut` gave a crossing
    tensor (which may carry other names too), or the model's own input or output name."""
    return _crossing_name(value) or value.get_any_name()


def stitch(parts: Sequence, input_names: Sequence[str], name: str = "unet"):
    """One ``ov.Model`` from ``parts`` (in order, as :func:`cut` made them, possibly quantized
    since): each part's ``Parameter`` named like an original input (``input_names``) becomes that
    input of the stitched model, every other one is replaced by the output of that name of an
    earlier part. The outputs are the parts' outputs that no later part reads (the model's own)."""
    import openvino as ov

    inputs: dict[str, object] = {}
    made: dict[str, object] = {}
    final = []
    for k, part in enumerate(parts):
        for parameter in part.get_parameters():
            tensor = _crossing_name(parameter.output(0)) or parameter.get_friendly_name()
            if tensor in input_names:
                if tensor not in inputs:
                    inputs[tensor] = ov.opset13.parameter(
                        parameter.get_partial_shape(), parameter.get_element_type(), name=tensor
                    )
                    inputs[tensor].output(0).get_tensor().set_names(set(parameter.output(0).get_names()))
                source = inputs[tensor].output(0)
            elif tensor in made:
                source = made[tensor]
            else:
                raise ValueError(
                    f"Part {k} reads {tensor!r}, which no earlier part makes: parts out of order?"
                )
            parameter.output(0).replace(source)
        for result in part.get_results():
            tensor = _crossing_name(result.input_value(0))
            if tensor is not None:
                made[tensor] = result.input_value(0)
            else:
                final.append(result)
    missing = [n for n in input_names if n not in inputs]
    if missing:
        raise ValueError(f"No part reads the input(s) {missing}: these parts are not one whole model.")
    return ov.Model(final, [inputs[n] for n in input_names], name)
