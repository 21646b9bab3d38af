"""Which parts of the UNet lose the picture under full INT8: a sensitivity ranking by layer group.

Full INT8 (:func:`sdaccel.cpu.quantize.quantize_full`) puts a ``FakeQuantize`` on the input and
the weight of every Convolution and MatMul. Their errors are not equal: on the shapes toys, the
ResNets' quantizers cost the colours and the attention ones almost nothing (notebook 05). Rather
than guess, measure each group of layers alone:

1. quantize once, with every quantizer kept as a ``FakeQuantize`` (:func:`quantize_for_ranking`:
   the weights are not folded into INT8 constants, and bias correction is off, so taking a
   quantizer out gives back exactly the float layer);
2. for each group (one ResNet, one attention block, one sampler: :func:`group_of`), keep only
   that group's quantizers (:func:`only_group`) and measure what the UNet loses: the relative
   error of its output against the float UNet on held-out inputs, and, when given, a score of
   the images (adherence on the toys);
3. the groups that cost most are the ones to keep in float: :func:`float_group_patterns` gives
   the ignored patterns of the recipe "full INT8, the k most sensitive groups in float".

Why not revert quantizers with ``nncf.quantize_with_accuracy_control``: its restorer puts back
the original weights of a reverted MatMul, but SmoothQuant has already divided that MatMul's
input by its per-channel scale, so a reverted MatMul computes a wrong product. On the SDXL-layout
toy with SmoothQuant on, the first reverted group took the adherence drop from 25 to 71 points.
Taking out only the ``FakeQuantize`` leaves SmoothQuant's pair of scales, which cancel exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from sdaccel.core.tables import markdown_table
from sdaccel.cpu import quality, quantize

#: One group: a ResNet, an attention block (its projections, attention and feed-forward) or a
#: sampler of a down/up block, or one of the mid block's ResNets and attention blocks; matched
#: anywhere in an OpenVINO node name (``__module.unet.down_blocks.0.resnets.1.conv1/...``).
GROUP = re.compile(
    r"(?:down_blocks|up_blocks)\.\d+\.(?:resnets|attentions|downsamplers|upsamplers)\.\d+"
    r"|mid_block\.(?:resnets|attentions)\.\d+"
)
#: The group of quantizers that feed no grouped layer (the embeddings, ``conv_in`` and the like,
#: when they are quantized at all).
OTHER = "other"


def group_of(name: str) -> str:
    """The group of an operation, by its name (``down_blocks.0.resnets.1``), or :data:`OTHER`."""
    found = GROUP.search(name)
    return found.group(0) if found else OTHER


def _quantizers(model) -> list:
    return [op for op in model.get_ops() if op.get_type_name() == "FakeQuantize"]


def _quantizer_group(fake_quantize) -> str:
    """A quantizer belongs to the group of the operations it feeds (the first grouped one)."""
    for target in fake_quantize.output(0).get_target_inputs():
        group = group_of(target.get_node().get_friendly_name())
        if group != OTHER:
            return group
    return OTHER


def quantizer_groups(quantized) -> dict[str, list[str]]:
    """``{group: [FakeQuantize names]}`` of a model from :func:`quantize_for_ranking`, groups in
    the order of the model. A model with no ``FakeQuantize`` is refused: quantize it first."""
    quantizers = _quantizers(quantized)
    if not quantizers:
        raise ValueError(
            "The model has no FakeQuantize to rank: pass the model that quantize_for_ranking() returns."
        )
    groups: dict[str, list[str]] = {}
    for fq in quantizers:
        groups.setdefault(_quantizer_group(fq), []).append(fq.get_friendly_name())
    return groups


def quantize_for_ranking(model, calibration_data, subset_size: int = 200, **knobs):
    """Full INT8 as :func:`sdaccel.cpu.quantize.quantize_full` makes it (same ignored layers,
    SmoothQuant), with every quantizer left as a ``FakeQuantize`` on f32 weights and bias
    correction off: a model to rank, not to run fast. ``knobs`` go to ``quantize_full``."""
    for knob in ("fold_weights", "bias_correction"):
        if knob in knobs:
            raise ValueError(
                f"{knob} is fixed when quantizing for a ranking (every quantizer must come out exactly)."
            )
    return quantize.quantize_full(
        model, calibration_data, subset_size, fold_weights=False, bias_correction=False, **knobs
    )


def only_group(quantized, group: str | None):
    """A copy of ``quantized`` where only ``group``'s quantizers remain (``None``: none, which is
    the float UNet again); every other ``FakeQuantize`` is bypassed. ``quantized`` is unchanged."""
    groups = quantizer_groups(quantized)
    if group is not None and group not in groups:
        raise ValueError(f"No quantizer in group {group!r}; the groups are {list(groups)}.")
    model = quantized.clone()
    for fq in _quantizers(model):
        if group is None or _quantizer_group(fq) != group:
            fq.output(0).replace(fq.input_value(0))
    return model


def rank_groups(
    reference,
    quantized,
    inputs: Iterable[Mapping[str, np.ndarray]],
    score: Callable[[object], float] | None = None,
    groups: Sequence[str] | None = None,
    progress: bool = True,
) -> list[dict]:
    """The cost of quantizing each group alone, most costly first.

    Args:
        reference: the float UNet (an ``ov.Model``, a compiled model or an IR path).
        quantized: its :func:`quantize_for_ranking` model.
        inputs: held-out UNet input dicts (not the calibration ones), e.g. from
            :func:`sdaccel.cpu.calibration.collect_unet_inputs` on other prompts.
        score: optional, ``score(compiled_unet) -> float`` where higher is better (the adherence
            of images generated with that UNet); rows are then ordered by it first.
        groups: only these groups (default: every group of :func:`quantizer_groups`); an unknown
            name is refused before anything is measured.

    Returns one row per group: ``{"group", "quantizers", "error", "score"}``; ``error`` is the
    median relative error of the UNet's output (:func:`sdaccel.cpu.quality.unet_relative_error`),
    ``score`` ``None`` without ``score``.
    """

    inputs = list(inputs)
    if not inputs:
        raise ValueError("rank_groups needs at least one UNet input dict to measure the error on.")
    found = quantizer_groups(quantized)
    unknown = [g for g in groups or () if g not in found]
    if unknown:
        raise ValueError(f"No quantizer in group(s) {unknown}; the groups are {list(found)}.")
    ref = reference if hasattr(reference, "create_infer_request") else quality.compile_f32(reference)
    rows = []
    chosen = {g: found[g] for g in (groups or found)}
    for group, names in tqdm(chosen.items(), desc="groups", disable=not progress, leave=False):
        compiled = quality.compile_f32(only_group(quantized, group))
        errors = quality.unet_relative_error(ref, compiled, inputs)
        rows.append(
            {
                "group": group,
                "quantizers": len(names),
                "error": float(np.median(errors)),
                "score": None if score is None else float(score(compiled)),
            }
        )
    if score is None:
        return sorted(rows, key=lambda r: -r["error"])
    return sorted(rows, key=lambda r: (r["score"], -r["error"]))


def float_group_patterns(ranking: Sequence[Mapping], k: int) -> list[str]:
    """The ignored-scope patterns that keep the ``k`` most costly groups of ``ranking`` in float:
    ``quantize_full(..., ignored=[*SENSITIVE_LAYER_PATTERNS, *float_group_patterns(ranking, k)])``
    is the recipe "full INT8, the k most sensitive groups in float". :data:`OTHER` has no pattern
    of its own and is skipped."""
    groups = [row["group"] for row in ranking if row["group"] != OTHER]
    if not 0 <= k <= len(groups):
        raise ValueError(f"k must be between 0 and the {len(groups)} ranked groups, got {k}.")
    return [rf".*\b{re.escape(group)}\b.*" for group in groups[:k]]


def format_table(ranking: Sequence[Mapping], score_name: str = "score") -> str:
    """The ranking as a Markdown table, most costly group first."""
    has_score = any(row["score"] is not None for row in ranking)
    header = ["group", "quantizers", "UNet output error", *([score_name] if has_score else [])]
    rows = [
        [
            row["group"],
            row["quantizers"],
            f"{row['error']:.2%}",
            *([f"{row['score']:.3f}"] if has_score else []),
        ]
        for row in ranking
    ]
    return markdown_table(header, rows, align="lrr" + "r" * has_score)


def plot_ranking(ranking: Sequence[Mapping], ax=None):
    """Horizontal bars of each group's output error, most costly at the top; returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.3 * len(ranking) + 1))
    names = [row["group"] for row in ranking][::-1]
    ax.barh(names, [100 * row["error"] for row in ranking][::-1], color="tab:red")
    ax.set_xlabel("relative error of the UNet output with only this group in INT8 (%)")
    ax.set_title("Sensitivity of each layer group to full INT8")
    return ax
