"""LoRA adapter files: read them from safetensors (diffusers/peft and kohya layouts), write kohya files.

A LoRA (low-rank adaptation) changes a weight matrix ``W`` (out x in) by a product of two thin
ones, ``up`` (out x r) and ``down`` (r x in), of rank ``r`` far below ``in`` and ``out``::

    W' = W + scale * (alpha / r) * up @ down
SDXL-Lightning, LCM-LoRA and most community fine-tunes ship as such files. A convolution's LoRA
has a ``down`` of shape (r, in, kh, kw) and a 1x1 ``up`` (out, r, 1, 1); its update is
``(up.flatten(1) @ down.flatten(1))`` reshaped to (out, in, kh, kw), as peft computes it.

Two file layouts are read, for the UNet and the text encoders:

- **diffusers / peft**: ``unet.<module>.lora_A.weight`` (down) and ``.lora_B.weight`` (up), with
  ``text_encoder.`` / ``text_encoder_2.`` prefixes; ``alpha`` comes from ``<module>.alpha`` keys or
  from the ``lora_adapter_metadata`` that ``save_lora_weights`` writes (peft's ``lora_alpha``,
  ``alpha_pattern``, ``use_rslora``), else ``alpha = r``. The older diffusers names
  (``attn1.processor.to_q_lora.down.weight``, ``proj_in.lora.down.weight``,
  ``mlp.fc1.lora_linear_layer.down.weight``) are read too.
- **kohya** (sd-scripts, most files on civitai): ``lora_unet_<module with _ for .>.lora_down.weight``,
  ``.lora_up.weight`` and ``.alpha``; ``lora_te_`` / ``lora_te1_`` / ``lora_te2_`` for the text
  encoders. The underscores make the names ambiguous, so they are resolved against the module
  names of the model they are fused into: diffusers' names, and, for SDXL files trained on the
  original UNet, its SGM names (``input_blocks_4_1_transformer_blocks_0_attn1_to_q``).

:func:`read_lora` returns a :class:`LoraAdapter` in one internal layout: component
(``unet``, ``text_encoder``, ``text_encoder_2``) -> module name -> :class:`LoraLayer`. Module names
are diffusers' (``down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q``), which are our NNX
paths (:func:`sdaccel.core.checkpoint.torch_key`); kohya names stay flattened until :func:`fuse_lora`
resolves them against the pipeline.

This module knows no framework: :mod:`sdaccel.tpu.lora` fuses adapters into the JAX pipeline's
weights, :mod:`sdaccel.cpu.lora_export` into the PyTorch modules before export.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from sdaccel.core.checkpoint import WeightFile

COMPONENTS = ("unet", "text_encoder", "text_encoder_2")

#: The file names that diffusers (``save_lora_weights``) and peft (``save_pretrained``) write.
WEIGHT_NAMES = ("pytorch_lora_weights.safetensors", "adapter_model.safetensors")

_KOHYA_PREFIX = {"lora_unet_": "unet", "lora_te_": "text_encoder", "lora_te1_": "text_encoder"}
_KOHYA_PREFIX["lora_te2_"] = "text_encoder_2"
#: A kohya name is kept as ``KOHYA + flattened name`` until it is resolved against a model.
KOHYA = "kohya:"

# Key suffix -> role, for the diffusers/peft layouts (newest first). Old diffusers attention
# processors name the projection in the suffix (``to_q_lora``): see _OLD_PROCESSOR.
_SUFFIXES = (
    (".lora_A.weight", "down"),
    (".lora_B.weight", "up"),
    (".lora.down.weight", "down"),
    (".lora.up.weight", "up"),
    (".lora_linear_layer.down.weight", "down"),
    (".lora_linear_layer.up.weight", "up"),
    (".alpha", "alpha"),
)
_OLD_PROCESSOR = re.compile(
    r"^(?P<head>.*?)(?:\.processor)?\.(?P<proj>to_q|to_k|to_v|to_out)_lora\.(?P<role>down|up)\.weight$"
)
#: Old diffusers text-encoder processors used the UNet's names for CLIP's projections.
_CLIP_PROJ = {"to_q": "q_proj", "to_k": "k_proj", "to_v": "v_proj", "to_out": "out_proj"}
_UNSUPPORTED = ("lora_magnitude_vector", "dora_scale", ".hada_", ".lokr_", ".diff", ".diff_b", ".oft_")


class LoraError(ValueError):
    """A LoRA file that cannot be read, or an adapter that does not fit the model."""


@dataclasses.dataclass(frozen=True)
class LoraLayer:
    """One module's low-rank update, in PyTorch layout.

    down: (r, in) for a linear layer, (r, in, kh, kw) for a convolution.
    up: (out, r), or (out, r, 1, 1) for a convolution.
    alpha: the update is scaled by ``alpha / r`` (``alpha / sqrt(r)`` with ``rslora``).
    """

    down: np.ndarray
    up: np.ndarray
    alpha: float
    rslora: bool = False

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])

    @property
    def scale(self) -> float:
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the weight it updates, in PyTorch layout: (out, in[, kh, kw])."""
        return (int(self.up.shape[0]), *(int(d) for d in self.down.shape[1:]))

    def delta(self, scale: float = 1.0) -> np.ndarray:
        """``scale * alpha / r * up @ down`` in float32, PyTorch layout (out, in[, kh, kw])."""
        up = np.asarray(self.up, np.float32).reshape(self.up.shape[0], -1)
        down = np.asarray(self.down, np.float32).reshape(self.rank, -1)
        return (np.float32(scale * self.scale) * (up @ down)).reshape(self.shape)


@dataclasses.dataclass(frozen=True)
class LoraAdapter:
    """A LoRA file in one layout: ``layers[component][module] = LoraLayer``.

    ``layout`` is ``"diffusers"`` or ``"kohya"``. Kohya module names are ``"kohya:<flat name>"``
    until :meth:`resolve` maps them to module names (``fuse_lora`` does that).
    """

    layers: dict[str, dict[str, LoraLayer]]
    layout: str
    source: str = ""

    def __len__(self) -> int:
        return sum(len(v) for v in self.layers.values())

    def resolve(self, modules: dict[str, dict[str, tuple[int, ...]]]) -> LoraAdapter:
        """The same adapter with every module name one of ``modules[component]`` (module name ->
        weight shape in PyTorch layout), checked: raises :class:`LoraError` listing every module
        that is missing or has another shape, before anything is changed."""
        problems, foreign, resolved = [], 0, {}
        for component, layers in self.layers.items():
            if component not in modules:
                raise LoraError(
                    f"{self.source}: the adapter has {len(layers)} {component} layers, but the pipeline has no "
                    f"{component} (it has {sorted(modules)}). The adapter was made for another base model "
                    "(a text_encoder_2 means SDXL); use a LoRA made for this one."
                )
            known = modules[component]
            aliases = _aliases(component, known)
            out = {}
            for name, layer in layers.items():
                target = _match(name, known, aliases)
                if target is None:
                    foreign += 1
                    problems.append(f"{component}: {name.removeprefix(KOHYA)} matches no module of the model")
                elif tuple(known[target]) != layer.shape:
                    foreign += 1
                    problems.append(
                        f"{component}.{target}: the adapter updates a {layer.shape} weight, the model's is "
                        f"{tuple(known[target])}"
                    )
                elif target in out:
                    problems.append(f"{component}.{target}: two entries of the adapter update it")
                else:
                    out[target] = layer
            resolved[component] = out
        if problems:
            total = len(self)
            hint = (
                f"{foreign} of its {total} layers do not fit this model: the adapter was made for another "
                "base model (for example an SD 1.5 LoRA on SDXL, or the reverse). Use a LoRA made for "
                "this checkpoint."
                if foreign
                else "Fix the file."
            )
            shown = "\n  ".join(problems[:8]) + (
                f"\n  ... and {len(problems) - 8} more" if len(problems) > 8 else ""
            )
            raise LoraError(f"{self.source}: {hint}\n  {shown}")
        return dataclasses.replace(self, layers=resolved)


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


def _weight_file(path: Path) -> tuple[Path, dict]:
    """The safetensors file of ``path`` (a file, or a folder that diffusers or peft wrote) and
    the peft config of a peft folder (``adapter_config.json``), if any."""
    if path.is_dir():
        found = [path / n for n in WEIGHT_NAMES if (path / n).is_file()]
        if not found:
            raise LoraError(
                f"{path} is a folder without {' or '.join(WEIGHT_NAMES)}: pass the LoRA's .safetensors file."
            )
        config = path / "adapter_config.json"
        return found[0], (json.loads(config.read_text()) if config.is_file() else {})
    if not path.is_file():
        raise LoraError(f"No LoRA file at {path}: check the path.")
    if path.suffix != ".safetensors":
        raise LoraError(
            f"{path} is not a .safetensors file. This reader reads safetensors only (never pickles): "
            "convert the file, e.g. `safetensors.torch.save_file(torch.load(p), 'lora.safetensors')`."
        )
    return path, {}


def _peft_alpha(config: dict, module: str, rank: int) -> tuple[float, bool]:
    """alpha for ``module`` from a peft LoraConfig dict (``alpha_pattern`` first, as peft does)."""
    for pattern, alpha in (config.get("alpha_pattern") or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return float(alpha), bool(config.get("use_rslora"))
    alpha = config.get("lora_alpha")
    return (float(alpha) if alpha is not None else float(rank)), bool(config.get("use_rslora"))


def _split_diffusers(key: str) -> tuple[str, str, str]:
    """``unet.a.b.lora_A.weight`` -> (component, module, role)."""
    component = next((c for c in COMPONENTS if key.startswith(c + ".")), None)
    body = key[len(component) + 1 :] if component else key
    body = body.removeprefix("base_model.model.")  # peft's save_pretrained
    component = component or "unet"  # the oldest diffusers files hold the UNet only, unprefixed
    old = _OLD_PROCESSOR.match(body)
    if old:
        proj = old["proj"]
        if component != "unet":
            return component, f"{old['head']}.{_CLIP_PROJ[proj]}", old["role"]
        return component, f"{old['head']}.{'to_out.0' if proj == 'to_out' else proj}", old["role"]
    for suffix, role in _SUFFIXES:
        if body.endswith(suffix):
            return component, body[: -len(suffix)], role
    raise LoraError(f"Unknown LoRA key {key!r}: not a lora_A/lora_B/lora_down/lora_up/alpha tensor.")


def read_lora(path: str | os.PathLike, component: str | None = None) -> LoraAdapter:
    """Read a LoRA ``.safetensors`` file (or the folder diffusers/peft saved it in).

    ``component`` names the model of a peft folder whose keys carry no component prefix
    (``base_model.model.<module>``); default ``unet``. Raises :class:`LoraError` naming the key
    when the file holds tensors that are not LoRA factors (DoRA, LoHa, LoKr, full diffs).
    """
    path = Path(path).expanduser()
    file, peft_config = _weight_file(path)
    weights = WeightFile(file)
    keys = weights.keys()
    if not keys:
        raise LoraError(f"{file} holds no tensors.")
    odd = [k for k in keys if any(s in k for s in _UNSUPPORTED)]
    if odd:
        raise LoraError(
            f"{file} holds tensors of an adapter kind other than plain LoRA (DoRA, LoHa, LoKr or full "
            f"weight diffs), for example {odd[:3]}; this reader fuses plain LoRA (down/up/alpha) only."
        )
    if all(k.startswith(tuple(_KOHYA_PREFIX)) for k in keys):
        return _read_kohya(weights, str(file))
    if any(k.startswith(tuple(_KOHYA_PREFIX)) for k in keys):
        mixed = [k for k in keys if not k.startswith(tuple(_KOHYA_PREFIX))][:3]
        raise LoraError(
            f"{file} mixes kohya keys (lora_unet_...) with others, e.g. {mixed}: not a LoRA file we read."
        )
    metadata = json.loads(weights.metadata.get("lora_adapter_metadata", "{}"))
    parts: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for key in keys:
        comp, module, role = _split_diffusers(key)
        if component and not key.startswith(COMPONENTS):
            comp = component
        parts.setdefault((comp, module), {})[role] = weights.get(key)
    layers: dict[str, dict[str, LoraLayer]] = {}
    for (comp, module), found in parts.items():
        if "down" not in found or "up" not in found:
            raise LoraError(
                f"{file}: {comp}.{module} has {sorted(found)} but needs both down and up (lora_A, lora_B)."
            )
        rank = int(found["down"].shape[0])
        config = peft_config or {
            k[len(comp) + 1 :]: v for k, v in metadata.items() if k.startswith(comp + ".")
        }
        alpha, rslora = _peft_alpha(config, module, rank)
        if "alpha" in found:
            alpha = float(np.asarray(found["alpha"], np.float32))
        if config.get("use_dora"):
            raise LoraError(f"{file}: {comp} is a DoRA adapter; this reader fuses plain LoRA only.")
        layers.setdefault(comp, {})[module] = _layer(
            found["down"], found["up"], alpha, rslora, f"{file}: {comp}.{module}"
        )
    return LoraAdapter(layers, "diffusers", str(file))


def _read_kohya(weights: WeightFile, source: str) -> LoraAdapter:
    parts: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for key in weights.keys():
        name, _, role = key.partition(".")
        role = {"lora_down.weight": "down", "lora_up.weight": "up", "alpha": "alpha"}.get(role)
        if role is None:
            raise LoraError(
                f"Unknown kohya LoRA key {key!r}: expected .lora_down.weight, .lora_up.weight or .alpha."
            )
        prefix = next(p for p in _KOHYA_PREFIX if name.startswith(p))
        parts.setdefault((_KOHYA_PREFIX[prefix], name[len(prefix) :]), {})[role] = weights.get(key)
    layers: dict[str, dict[str, LoraLayer]] = {}
    for (comp, flat), found in parts.items():
        if "down" not in found or "up" not in found:
            raise LoraError(f"{source}: {flat} has {sorted(found)} but needs both lora_down and lora_up.")
        alpha = (
            float(np.asarray(found["alpha"], np.float32))
            if "alpha" in found
            else float(found["down"].shape[0])
        )
        layers.setdefault(comp, {})[KOHYA + flat] = _layer(
            found["down"], found["up"], alpha, False, f"{source}: {flat}"
        )
    return LoraAdapter(layers, "kohya", source)


def _layer(down, up, alpha, rslora, where) -> LoraLayer:
    down, up = np.asarray(down), np.asarray(up)
    ok = (
        down.ndim == up.ndim
        and down.ndim in (2, 4)
        and up.shape[1] == down.shape[0]
        and (down.ndim == 2 or tuple(up.shape[2:]) == (1, 1))
    )
    if not ok:
        raise LoraError(
            f"{where}: down {tuple(down.shape)} and up {tuple(up.shape)} are not LoRA factors "
            "(down (r, in[, kh, kw]) and up (out, r[, 1, 1]))."
        )
    if not math.isfinite(alpha):
        raise LoraError(f"{where}: alpha is {alpha}.")
    return LoraLayer(down, up, alpha, rslora)


# ----------------------------------------------------------------------------------------------
# Resolving names: diffusers, kohya's flattened diffusers names, and SGM (original SDXL) names
# ----------------------------------------------------------------------------------------------


def _flat(name: str) -> str:
    return name.replace(".", "_")


def _match(name: str, known: dict, aliases: dict[str, str | None]) -> str | None:
    if not name.startswith(KOHYA):
        for candidate in (name, name.removeprefix("text_model.")):
            if candidate in known:
                return candidate
        return None
    return aliases.get(name[len(KOHYA) :])  # None when unknown or ambiguous


def _aliases(component: str, known: dict) -> dict[str, str | None]:
    """Flattened name -> module, for kohya files: the diffusers name (with ``text_model.`` for
    the text encoders, as transformers' hub checkpoints name them), and the SGM name of SDXL's
    UNet. A flattened name that two modules share maps to None (ambiguous: refused)."""
    table: dict[str, str | None] = {}

    def add(flat, module):
        table[flat] = module if table.get(flat, module) == module else None

    for module in known:
        add(_flat(module), module)
        if component != "unet":
            add(_flat("text_model." + module), module)
    if component == "unet":
        for module, sgm in sgm_names(known).items():
            add(_flat(sgm), module)
    return table


_RESNET_SGM = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "time_emb_proj": "emb_layers.1",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "conv_shortcut": "skip_connection",
}
_TOP_SGM = {
    "conv_in": "input_blocks.0.0",
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "add_embedding.linear_1": "label_emb.0.0",
    "add_embedding.linear_2": "label_emb.0.2",
    "conv_norm_out": "out.0",
    "conv_out": "out.2",
}


def sgm_names(modules: Iterable[str]) -> dict[str, str]:
    """Diffusers UNet module name -> its name in the original (SGM/LDM) UNet, the naming of
    kohya's SDXL LoRAs: ``down_blocks.b.resnets.j`` is ``input_blocks.{1 + b (L+1) + j}.0``
    (``L`` = layers per block), its attentions ``.1``, its downsampler
    ``input_blocks.{(b+1)(L+1)}.0.op``; ``up_blocks.b`` (L+1 layers each) are ``output_blocks``
    likewise, the upsampler after the layer's attention; ``mid_block`` is ``middle_block.0/1/2``.
    The same layout as diffusers' ``_maybe_map_sgm_blocks_to_diffusers``."""
    modules = list(modules)
    layers = 1 + max(
        (int(m.split(".")[3]) for m in modules if re.match(r"down_blocks\.0\.resnets\.\d+\.", m)), default=0
    )
    up_attention = {int(m.split(".")[1]) for m in modules if re.match(r"up_blocks\.\d+\.attentions\.", m)}
    out = {}
    for module in modules:
        parts = module.split(".")
        head = None
        if module in _TOP_SGM:
            out[module] = _TOP_SGM[module]
            continue
        if parts[0] == "down_blocks":
            b, kind = int(parts[1]), parts[2]
            if kind == "downsamplers":
                head, rest = f"input_blocks.{(b + 1) * (layers + 1)}.0", ["op", *parts[5:]]
            else:
                j = int(parts[3])
                head, rest = (
                    f"input_blocks.{1 + b * (layers + 1) + j}.{0 if kind == 'resnets' else 1}",
                    parts[4:],
                )
        elif parts[0] == "mid_block":
            index = {("resnets", "0"): 0, ("attentions", "0"): 1, ("resnets", "1"): 2}.get(
                (parts[1], parts[2])
            )
            if index is not None:
                head, rest, kind = f"middle_block.{index}", parts[3:], parts[1]
        elif parts[0] == "up_blocks":
            b, kind = int(parts[1]), parts[2]
            if kind == "upsamplers":
                slot = 2 if b in up_attention else 1
                head, rest = f"output_blocks.{b * (layers + 1) + layers}.{slot}", parts[4:]
            else:
                j = int(parts[3])
                head, rest = (
                    f"output_blocks.{b * (layers + 1) + j}.{0 if kind == 'resnets' else 1}",
                    parts[4:],
                )
        if head is None:
            continue
        if kind == "resnets" and rest and rest[0] in _RESNET_SGM:
            rest = [_RESNET_SGM[rest[0]], *rest[1:]]
        out[module] = ".".join([head, *rest])
    return out


# ----------------------------------------------------------------------------------------------
# Writing the kohya layout (for tools that read only kohya files, and for the tests)
# ----------------------------------------------------------------------------------------------


def save_kohya(
    adapter: LoraAdapter, path: str | os.PathLike, sdxl: bool, unet_modules: Iterable[str] | None = None
) -> Path:
    """Write a resolved (diffusers-named) adapter as a kohya file: ``lora_unet_<flat>``,
    ``lora_te_`` (SD 1.x/2.x) or ``lora_te1_`` / ``lora_te2_`` (SDXL) with ``text_model.``, and
    an ``.alpha`` per module. With ``unet_modules`` (every module name of the UNet, e.g.
    ``lora_targets(pipeline)["unet"]``) the UNet is written with its SGM names, as kohya's
    sd-scripts do for SDXL. The file is written whole to a temporary name, then renamed."""

    if adapter.layout != "diffusers":
        raise LoraError(
            "save_kohya needs diffusers module names: pass an adapter read from a diffusers file."
        )
    prefixes = {
        "unet": "lora_unet_",
        "text_encoder": "lora_te1_" if sdxl else "lora_te_",
        "text_encoder_2": "lora_te2_",
    }
    tensors = {}
    for component, layers in adapter.layers.items():
        rename = sgm_names(unet_modules) if (component == "unet" and unet_modules is not None) else {}
        for module, layer in layers.items():
            if component == "unet":
                full = rename.get(module, module)
            else:  # hub text encoders hold the transformer under text_model., the projection beside it
                full = module if module.startswith("text_projection") else "text_model." + module
            name = prefixes[component] + _flat(full)
            tensors[f"{name}.lora_down.weight"] = np.ascontiguousarray(layer.down)
            tensors[f"{name}.lora_up.weight"] = np.ascontiguousarray(layer.up)
            alpha = layer.alpha * (math.sqrt(layer.rank) if layer.rslora else 1.0)  # kohya has no rslora
            tensors[f"{name}.alpha"] = np.asarray(alpha, np.float32)
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------------------------
# Fusing into a JAX pipeline
# ----------------------------------------------------------------------------------------------


#: What each pipeline has fused, in order: [(resolved adapter, scale), ...].
def check_scale(scale) -> float:
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise LoraError(f"A LoRA scale must be a finite number, got {scale!r}.")
    return float(scale)


def resolve_adapters(adapters, targets: dict, caller: str) -> list[tuple[LoraAdapter, float]]:
    """Read every ``(adapter or path, scale)`` of ``adapters`` and resolve it against ``targets``
    (component -> module -> weight shape); raise :class:`LoraError` naming what does not fit, or a
    call that is not a list of pairs (``caller`` names the function in the message)."""
    if isinstance(adapters, LoraAdapter | str | os.PathLike) or not isinstance(adapters, Sequence):
        raise LoraError(
            f"{caller} takes a list of (adapter or path, scale) pairs, e.g. [('lcm.safetensors', 1.0)]."
        )
    checked = []
    for item in adapters:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise LoraError(f"{caller} takes (adapter or path, scale) pairs; got {item!r}.")
        adapter, scale = item
        scale = check_scale(scale)
        adapter = adapter if isinstance(adapter, LoraAdapter) else read_lora(adapter)
        checked.append((adapter.resolve(targets), scale))
    return checked
