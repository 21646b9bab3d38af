"""Placing SDXL on many chips: a device mesh and one table of sharding rules.

JAX spreads one program over many devices through *shardings*: every array says which slice of it
lives on which device, and ``jax.jit`` compiles one program for the whole mesh (XLA's SPMD
partitioner inserts the communication). For SDXL inference the recipe is short:

1. **A mesh** (:func:`make_mesh`): the devices laid out on named axes. ``"data"`` splits the batch;
   an optional ``"model"`` axis splits big weights, for a model that does not fit one chip (a TPU
   v5e chip has 16 GB of HBM; SDXL's ~7 GB of bf16 weights fit, so data parallelism is the
   default and the ``"model"`` axis is the fallback).
2. **One table of rules** (:data:`RULES`): a regular expression on an array's path picks its
   ``PartitionSpec``. Parameters are replicated, except under a ``"model"`` axis, where big kernels
   are split along their largest dimension that the axis divides; every activation that enters
   or leaves the pipeline has the batch first and is split over ``"data"``
   (:func:`tree_shardings`, :func:`param_sharding_fn`).
3. **Sharded inputs into a jitted function**: the pipeline's one pure denoise-and-decode function
   is jitted from the outside with ``in_shardings``/``out_shardings`` from the rules
   (``sdaccel.tpu.sharded_pipeline.ShardedPipeline``). Each device then runs the whole UNet on its share of the
   batch, with no communication at all.

Same images on any number of devices: the pipeline draws each image's starting noise from
``jax.random.fold_in(key, global_index)`` (``sdaccel.tpu.pipeline.initial_noise``). The key of image
``i`` depends on ``i`` alone, not on which device holds row ``i``, so a global batch gives the
same images on 1, 4 or 8 devices.

A batch that the ``"data"`` axis does not divide cannot be split evenly; :func:`check_batch` says
so and names the fixes (another batch size, or :func:`pad_batch`, which repeats the last row and
whose extra outputs the caller drops).

The mesh uses ``AxisType.Auto`` axes: the shardings we give at the jit boundary are propagated
by the compiler through the UNet, so the model code stays free of sharding annotations.
(``jax.make_mesh`` defaults to ``Explicit`` axes, where shardings are part of every array's type,
``jax.typeof(x)`` prints them as ``float32[8@data,...]``, and each ambiguous op must say how to
shard its result: see :func:`make_mesh`'s ``explicit`` argument to try it.)

This module knows nothing of pipelines: ``sdaccel.tpu.sharded_pipeline`` drives the pipeline on a mesh.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

DATA = "data"
MODEL = "model"

#: The marker of a rule that splits a parameter's largest dimension divisible by the ``"model"``
#: axis (and replicates it when there is no such axis, or no such dimension).
LARGEST = "largest-divisible-dim"

#: Parameters with fewer elements than this stay replicated even under a ``"model"`` axis: the
#: all-gather of a small bias costs more than the memory it would save. 2**20 elements is 2 MB in
#: bf16; SDXL's attention and feed-forward kernels (1280x1280 = 1.6 M, 1280x10240 = 13 M) are
#: above it, norms and biases far below.
MIN_SHARD_SIZE = 2**20


# ----------------------------------------------------------------------------------------------
# 1. The mesh
# ----------------------------------------------------------------------------------------------


def parse_mesh(spec: str | None, device_count: int | None = None) -> tuple[int, int]:
    """``"8"`` -> (8, 1); ``"4x2"`` -> data 4, model 2; ``"auto"``/``None``/``""`` -> all devices on ``"data"``."""
    device_count = jax.device_count() if device_count is None else device_count
    if spec in (None, "", "auto"):
        return device_count, 1
    parts = spec.lower().replace(",", "x").split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"Mesh {spec!r} is not 'DATA' or 'DATAxMODEL' (for example '8' or '4x2').") from None
    if len(sizes) > 2 or any(s < 1 for s in sizes):
        raise ValueError(f"Mesh {spec!r} is not 'DATA' or 'DATAxMODEL' with positive sizes.")
    data, model = (sizes + [1])[:2]
    return data, model


def make_mesh(
    data: int | None = None,
    model: int = 1,
    *,
    devices: Sequence[jax.Device] | None = None,
    explicit: bool = False,
) -> Mesh:
    """A mesh with a ``"data"`` axis and, when ``model > 1``, a ``"model"`` axis.

    ``data=None`` uses every device left after ``model``. ``devices`` picks a subset (the device
    sweep builds meshes of 1, 2, 4, ... devices this way). ``jax.make_mesh`` orders the devices
    to follow the chips' physical interconnect.
    """
    devices = list(jax.devices() if devices is None else devices)
    if model < 1:
        raise ValueError(f"The 'model' axis must have at least one device, not {model}.")
    data = len(devices) // model if data is None else data
    if data < 1 or data * model > len(devices):
        raise ValueError(
            f"A {data}x{model} mesh needs {data * model} devices but {len(devices)} are available "
            f"({devices[0].platform}). On CPU, simulate more with "
            "XLA_FLAGS=--xla_force_host_platform_device_count=8 set before JAX starts."
        )
    shape, names = ((data, model), (DATA, MODEL)) if model > 1 else ((data,), (DATA,))
    kind = AxisType.Explicit if explicit else AxisType.Auto
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(shape), devices=devices[: data * model])


def axis_size(mesh: Mesh, name: str) -> int:
    """Size of ``name`` in ``mesh``; 1 for an axis the mesh does not have."""
    return int(mesh.shape.get(name, 1))


# ----------------------------------------------------------------------------------------------
# 2. One table of rules
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """``pattern`` is searched in the ``/``-joined path (``unet/down_blocks/0/resnets/1/conv1/kernel``
    or ``inputs/latents``); the first rule that matches decides. ``spec`` is a ``PartitionSpec``
    or :data:`LARGEST`."""

    name: str
    pattern: str
    spec: Any


#: Activations are named ``inputs/<name>`` and ``outputs/<name>``; parameters by their module path.
RULES: tuple[Rule, ...] = (
    Rule("batch", r"^(inputs|outputs)/", P(DATA)),
    Rule("model-parallel kernels", r"/(kernel|embedding)$", LARGEST),
    Rule("replicated", r"", P()),
)


class ShardingError(ValueError):
    """An array cannot be laid out on the mesh as the rules ask (for example, a batch the
    ``"data"`` axis does not divide)."""


def path_string(path: Sequence[Any]) -> str:
    """``('down_blocks', 0, 'conv1', 'kernel')`` or a jax key path -> ``down_blocks/0/conv1/kernel``.

    A key path through an ``nnx.State`` ends in the variable's ``.value``; that last step is dropped
    so that the rules see the parameter's own name.
    """
    if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and path[-1].name == "value":
        path = path[:-1]
    parts = []
    for p in path:
        for attr in ("key", "name", "idx"):  # DictKey / GetAttrKey / SequenceKey
            if hasattr(p, attr):
                p = getattr(p, attr)
                break
        parts.append(str(p))
    return "/".join(parts)


def match_rule(path: str, rules: Sequence[Rule] = RULES) -> Rule:
    for rule in rules:
        if re.search(rule.pattern, path):
            return rule
    raise ShardingError(
        f"No rule matches {path!r}; end the rules with a catch-all such as Rule('replicated', '', P())."
    )


def check_batch(batch: int, mesh: Mesh) -> None:
    """Raise :class:`ShardingError` unless the ``"data"`` axis divides ``batch``."""
    n = axis_size(mesh, DATA)
    if batch % n:
        up = -(-batch // n) * n
        raise ShardingError(
            f"A batch of {batch} cannot be split over the {n} devices of the 'data' axis. "
            f"Use a batch that is a multiple of {n} (for example {up}), a mesh whose 'data' axis divides "
            f"{batch}, or pad with sdaccel.tpu.sharding.pad_batch (which repeats the last row; drop the "
            "extra outputs afterwards)."
        )


def pad_batch(rows: np.ndarray | Sequence, mesh: Mesh):
    """Repeat the last row until the ``"data"`` axis divides the batch.

    Returns ``(padded, n_real)``: keep only the first ``n_real`` outputs. Used by the batch entry
    point for the last, partial batch of a prompt file.
    """
    n = axis_size(mesh, DATA)
    n_real = len(rows)
    extra = (-n_real) % n
    if isinstance(rows, np.ndarray):
        padded = np.concatenate([rows, np.repeat(rows[-1:], extra, axis=0)]) if extra else rows
    else:
        padded = list(rows) + [rows[-1]] * extra
    return padded, n_real


def spec_for(
    path: str,
    shape: Sequence[int],
    mesh: Mesh,
    rules: Sequence[Rule] = RULES,
    min_shard_size: int = MIN_SHARD_SIZE,
) -> P:
    """The ``PartitionSpec`` that ``rules`` give an array of ``shape`` at ``path`` on ``mesh``.

    Axes that the mesh does not have are dropped (a ``"data"``-only mesh replicates what a rule
    would split over ``"model"``); a batch the ``"data"`` axis does not divide raises.
    """
    rule = match_rule(path, rules)
    if rule.spec == LARGEST:
        n = axis_size(mesh, MODEL)
        if n == 1 or math.prod(shape) < min_shard_size:
            return P()
        for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
            if shape[dim] % n == 0:
                return P(*[MODEL if d == dim else None for d in range(len(shape))])
        return P()  # no dimension divisible: replicate rather than pad
    entries = [e if e is None or all(a in mesh.shape for a in _axes(e)) else None for e in rule.spec]
    if entries and entries[0] is not None and DATA in _axes(entries[0]) and len(shape):
        check_batch(shape[0], mesh)
    return P(*entries[: len(shape)])


def _axes(entry) -> tuple[str, ...]:
    return entry if isinstance(entry, tuple) else (entry,)


def tree_shardings(
    tree, mesh: Mesh, prefix: str = "", rules: Sequence[Rule] = RULES, min_shard_size=MIN_SHARD_SIZE
):
    """A pytree of ``NamedSharding`` matching ``tree`` (arrays or ``ShapeDtypeStruct``), one per
    leaf, chosen by the rules from each leaf's path below ``prefix``."""

    def one(path, leaf):
        name = "/".join(p for p in (prefix, path_string(path)) if p)
        return NamedSharding(mesh, spec_for(name, np.shape(leaf), mesh, rules, min_shard_size))

    return jax.tree_util.tree_map_with_path(one, tree)


def explain(tree, mesh: Mesh, prefix: str = "", rules: Sequence[Rule] = RULES, min_shard_size=MIN_SHARD_SIZE):
    """Rows ``(path, shape, rule name, spec)`` for every leaf: the table that notebook 02 prints."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    rows = []
    for path, leaf in leaves:
        name = "/".join(p for p in (prefix, path_string(path)) if p)
        shape = tuple(np.shape(leaf))
        rows.append(
            (name, shape, match_rule(name, rules).name, spec_for(name, shape, mesh, rules, min_shard_size))
        )
    return rows


# ----------------------------------------------------------------------------------------------
# 3. Flax NNX models on the mesh
# ----------------------------------------------------------------------------------------------


def _param_items(model):
    return [(path, var) for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))]


def param_sharding_fn(
    model, mesh: Mesh, prefix: str = "", rules: Sequence[Rule] = RULES, min_shard_size: int = MIN_SHARD_SIZE
) -> Callable[[tuple], NamedSharding]:
    """The ``sharding`` callable of ``load_unet/load_vae/load_text_encoder`` and ``load_weights``:
    parameter path tuple -> ``NamedSharding``. ``model`` may be abstract (``nnx.eval_shape``): only
    the shapes are read, so each tensor goes from the file straight to its devices."""
    shapes = {tuple(path): tuple(var.get_value().shape) for path, var in _param_items(model)}

    def sharding(path: tuple) -> NamedSharding:
        name = "/".join(p for p in (prefix, path_string(path)) if p)
        return NamedSharding(mesh, spec_for(name, shapes[tuple(path)], mesh, rules, min_shard_size))

    return sharding


def shard_model(
    model, mesh: Mesh, prefix: str = "", rules: Sequence[Rule] = RULES, min_shard_size=MIN_SHARD_SIZE
):
    """Move the parameters of a loaded NNX ``model`` onto ``mesh`` as the rules say (in place), and
    return it. For weights already in memory; to load straight onto the mesh, pass
    :func:`param_sharding_fn` to the loader instead."""
    sharding = param_sharding_fn(model, mesh, prefix, rules, min_shard_size)
    for path, var in _param_items(model):
        var.set_value(jax.device_put(var.get_value(), sharding(path)))
    return model


def param_specs(model, prefix: str = "") -> dict[str, P]:
    """``{path: PartitionSpec}`` of every parameter as it is placed now (for asserting the rules)."""
    out = {}
    for path, var in _param_items(model):
        value = var.get_value()
        spec = value.sharding.spec if isinstance(getattr(value, "sharding", None), NamedSharding) else None
        out["/".join(p for p in (prefix, path_string(path)) if p)] = spec
    return out


# ----------------------------------------------------------------------------------------------
# 4. Batch and replicated placements
# ----------------------------------------------------------------------------------------------


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Batch first, split over ``"data"``, replicated over ``"model"``."""
    return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


# ----------------------------------------------------------------------------------------------
# 5. Looking at shardings
# ----------------------------------------------------------------------------------------------


def describe(x: jax.Array) -> str:
    """``float32[8,16,16,4] PartitionSpec('data',) on 8 devices``: type and placement of ``x``.

    ``jax.typeof(x)`` alone shows the sharding only for ``Explicit`` mesh axes; with our
    ``Auto`` axes the placement lives in ``x.sharding``.
    """
    sharding = x.sharding
    spec = sharding.spec if isinstance(sharding, NamedSharding) else sharding
    return f"{jax.typeof(x)} {spec} on {len(sharding.device_set)} devices"


def visualize(x: jax.Array, **kwargs) -> None:
    """Draw which device holds which block of ``x`` (``jax.debug.visualize_array_sharding`` draws
    1-D and 2-D arrays; a higher-rank array is drawn as (first dim, everything else))."""
    if x.ndim <= 2:
        jax.debug.visualize_array_sharding(x, **kwargs)
        return
    spec = x.sharding.spec
    first = spec[0] if len(spec) else None
    rest = [e for e in spec[1:] if e is not None]
    if len(rest) > 1:
        raise ValueError(f"Cannot draw {spec}: more than one trailing dimension is sharded.")
    flat = NamedSharding(x.sharding.mesh, P(first, rest[0] if rest else None))
    jax.debug.visualize_sharding((x.shape[0], math.prod(x.shape[1:])), flat, **kwargs)


def simulate_cpu_devices(count: int) -> None:
    """Make JAX's CPU backend show ``count`` devices, as ``XLA_FLAGS=--xla_force_host_platform_device_count``
    does. It must run before JAX creates its backends (before the first ``jax.devices()``); on a
    TPU or GPU machine it only affects the CPU backend, which the notebooks do not use there."""
    import jax

    if count:
        try:
            jax.config.update("jax_num_cpu_devices", count)
        except RuntimeError as err:  # backends already initialised: say what to do
            raise RuntimeError(
                "JAX has already started its backends, so the number of CPU devices is fixed. "
                "Restart the kernel and run this cell before anything else touches JAX."
            ) from err
