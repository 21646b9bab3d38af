"""Placing SDXL on many chips: a device mesh, one table of sharding rules, and data parallelism.

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
   or leaves the pipeline has the batch first and is split over ``"data"``.
3. **Sharded inputs into a jitted function**: the pipeline's one pure denoise-and-decode function
   is jitted from the outside with ``in_shardings``/``out_shardings`` from the rules
   (:class:`ShardedPipeline`; :func:`data_parallel` does the same for any ``fn(params, inputs)``).
   Each device then runs the whole UNet on its share of the batch, with no communication at all.

Same images on any number of devices: the pipeline draws each image's starting noise from
``jax.random.fold_in(key, global_index)``. The key of image ``i`` depends on ``i`` alone, not on
which device holds row ``i``, so a global batch gives the same images on 1, 4 or 8 devices
(:func:`example_noise` is that recipe).

A batch that the ``"data"`` axis does not divide cannot be split evenly; :func:`check_batch` says
so and names the fixes (another batch size, or :func:`pad_batch`, which repeats the last row and
whose extra outputs the caller drops). Nothing is ever padded silently.

The mesh uses ``AxisType.Auto`` axes: the shardings we give at the jit boundary are propagated
by the compiler through the UNet, so the model code stays free of sharding annotations.
(``jax.make_mesh`` defaults to ``Explicit`` axes, where shardings are part of every array's type,
``jax.typeof(x)`` prints them as ``float32[8@data,...]``, and each ambiguous op must say how to
shard its result: see :func:`make_mesh`'s ``explicit`` argument to try it.)
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
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
            f"{batch}, or pad with sdaccel.sharding.pad_batch (which repeats the last row; drop the "
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
    from flax import nnx

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
# 4. Data parallelism
# ----------------------------------------------------------------------------------------------


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Batch first, split over ``"data"``, replicated over ``"model"``."""
    return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def shard_batch(inputs: dict[str, Any], mesh: Mesh, rules: Sequence[Rule] = RULES) -> dict[str, jax.Array]:
    """Place a dict of host arrays (batch first) on the mesh, as ``inputs/<name>``.

    In a multi-process run every process passes only its own rows: see
    ``sdaccel.distributed.global_batch``, which builds the same global arrays.
    """
    return {k: jax.device_put(v, tree_shardings(v, mesh, f"inputs/{k}", rules)) for k, v in inputs.items()}


def data_parallel(
    fn: Callable, mesh: Mesh, params, inputs: dict, rules: Sequence[Rule] = RULES, **jit_kwargs
):
    """``jax.jit(fn)`` with ``in_shardings``/``out_shardings`` from the rules, for ``fn(params, inputs)``.

    ``params`` and ``inputs`` may be arrays or ``jax.ShapeDtypeStruct``: only their shapes are
    read. Outputs follow the rule of ``outputs/<name>`` (batch split over ``"data"``). The result
    is an ordinary jitted function: call it, or ``.lower(...).compile()`` it ahead of time.
    """
    param_shardings = tree_shardings(params, mesh, "", rules)
    input_shardings = {k: tree_shardings(v, mesh, f"inputs/{k}", rules) for k, v in inputs.items()}
    out_shape = jax.eval_shape(fn, params, inputs)
    out_shardings = tree_shardings(out_shape, mesh, "outputs", rules)
    return jax.jit(
        fn, in_shardings=(param_shardings, input_shardings), out_shardings=out_shardings, **jit_kwargs
    )


def example_noise(key: jax.Array, indices: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """Gaussian noise of ``shape`` for each global example index: row ``i`` comes from
    ``fold_in(key, indices[i])``, so it does not depend on the batch size or on the device that
    computes it. Under ``jit`` with ``indices`` split over ``"data"``, each device draws its rows only."""
    return jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), tuple(shape), dtype))(indices)


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


# ----------------------------------------------------------------------------------------------
# 6. The SDXL pipeline on a mesh
# ----------------------------------------------------------------------------------------------

#: Components whose weights stay on this process's first device: the text encoders are small and
#: run per process on its own prompts (so that, across hosts, each encodes only its share).
LOCAL_COMPONENTS = ("text_encoder", "text_encoder_2")


def _checkpoint_shape(reader, path: tuple) -> tuple[int, ...] | None:
    """Shape of parameter ``path`` in our layout, read from the safetensors header (no data)."""
    from sdaccel.checkpoint import torch_key

    key = torch_key(path)
    if key not in reader:
        return None
    shape = tuple(reader.shape(key))
    if str(path[-1]) == "kernel" and len(shape) == 4:  # conv OIHW -> HWIO
        return shape[2], shape[3], shape[1], shape[0]
    if str(path[-1]) == "kernel" and len(shape) == 2:  # linear (out, in) -> (in, out)
        return shape[::-1]
    return shape


def pipeline_sharding_fn(
    folder, mesh: Mesh, rules: Sequence[Rule] = RULES, min_shard_size: int = MIN_SHARD_SIZE
):
    """The ``sharding`` argument of ``Pipeline.from_pretrained``: ``(component, path) -> Sharding``.

    UNet and VAE weights follow the rules under the prefix ``unet/`` or ``vae/``; the text encoders
    stay on this process's first device. The ``"model"`` rules need each weight's shape, which is
    read from the checkpoint's safetensors header (a weight not found there, under a renamed key,
    stays replicated). Ask the loader to pass the shape instead, and this lookup goes away.
    """
    from sdaccel.checkpoint import open_weights

    readers: dict[str, Any] = {}
    local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def sharding(component: str, path: tuple):
        if component in LOCAL_COMPONENTS:
            return local
        name = f"{component}/{path_string(path)}"
        shape: tuple[int, ...] | None = ()  # only the "model" rules look at the shape
        if match_rule(name, rules).spec == LARGEST and axis_size(mesh, MODEL) > 1:
            if component not in readers:
                readers[component] = open_weights(folder, component, "fp16")
            shape = _checkpoint_shape(readers[component], path)
        if shape is None:
            return NamedSharding(mesh, P())
        return NamedSharding(mesh, spec_for(name, shape, mesh, rules, min_shard_size))

    return sharding


class ShardedPipeline:
    """A :class:`sdaccel.pipeline.Pipeline` whose denoise-and-decode runs over a mesh.

    The pipeline's pure function is jitted from the outside with ``in_shardings`` (weights as
    placed by the rules, scheduler state and guidance scale replicated, conditioning and noise
    split over ``"data"``) and ``out_shardings`` (images split over ``"data"``), and compiled
    ahead of time once per (batch, height, width, steps, guidance on/off).

    Across several processes, :meth:`generate` takes the *global* list of prompts on every
    process; each process encodes and draws noise only for its own rows, and the returned images
    are a global array (gather them with ``sdaccel.distributed.gather``).
    """

    def __init__(
        self, pipeline, mesh: Mesh, rules: Sequence[Rule] = RULES, min_shard_size: int = MIN_SHARD_SIZE
    ):
        self.pipeline = pipeline
        self.mesh = mesh
        self.rules, self.min_shard_size = tuple(rules), min_shard_size
        if not _on_mesh(pipeline.params, mesh):  # loaded without shardings: place the weights now
            pipeline.params = {
                name: jax.device_put(state, tree_shardings(state, mesh, name, rules, min_shard_size))
                for name, state in pipeline.params.items()
            }
        self.param_shardings = jax.tree.map(lambda x: x.sharding, pipeline.params)
        self._jitted = jax.jit(
            pipeline.denoise_and_decode,
            in_shardings=(
                self.param_shardings,
                replicated(mesh),
                batch_sharding(mesh),
                batch_sharding(mesh),
                replicated(mesh),
            ),
            out_shardings=batch_sharding(mesh),
        )
        self.compiled: dict[tuple, Any] = {}

    @classmethod
    def from_pretrained(
        cls,
        path_or_id,
        mesh: Mesh | None = None,
        dtype=jnp.bfloat16,
        rules: Sequence[Rule] = RULES,
        min_shard_size: int = MIN_SHARD_SIZE,
        progress: bool = True,
        **kwargs,
    ) -> ShardedPipeline:
        """Load a checkpoint with every weight going straight to its place on ``mesh`` (default:
        all devices on ``"data"``). ``kwargs`` go to ``Pipeline.from_pretrained``."""
        from sdaccel.checkpoint import resolve_checkpoint
        from sdaccel.pipeline import Pipeline

        mesh = make_mesh() if mesh is None else mesh
        folder = resolve_checkpoint(path_or_id, variant=kwargs.get("variant"))
        place = pipeline_sharding_fn(folder, mesh, rules, min_shard_size)
        pipeline = Pipeline.from_pretrained(folder, dtype=dtype, sharding=place, progress=progress, **kwargs)
        return cls(pipeline, mesh, rules, min_shard_size)

    def to_mesh(self, mesh: Mesh, rules: Sequence[Rule] | None = None, min_shard_size: int | None = None):
        """The same pipeline on another mesh (fewer devices, or a ``"model"`` axis).

        The weights go through host memory, so no chip ever holds the old and the new copy at
        once (SDXL's 7 GB twice would not fit a 16 GB v5e chip). This object must not be used
        afterwards: it shares the underlying pipeline, whose weights have moved.
        """
        host = jax.device_get(self.pipeline.params)
        self.pipeline.params = host  # the device copies are freed here
        self.compiled.clear()
        rules = self.rules if rules is None else rules
        return ShardedPipeline(
            self.pipeline, mesh, rules, self.min_shard_size if min_shard_size is None else min_shard_size
        )

    def bytes_per_device(self) -> dict[str, int]:
        """Bytes of UNet and VAE weights that each device holds (the text encoders live apart)."""
        out: dict[str, int] = {}
        for x in jax.tree.leaves(self.pipeline.params):
            for shard in x.addressable_shards:
                out[str(shard.device)] = out.get(str(shard.device), 0) + shard.data.nbytes
        return out

    # ------------------------------------------------------------------------------------------

    def inputs(
        self,
        prompts: Sequence[str],
        negative_prompts: str | Sequence[str] | None,
        steps: int,
        guidance_scale: float,
        height: int,
        width: int,
        seed: int,
        start_index: int = 0,
    ) -> tuple:
        """The global arguments of the denoise-and-decode function, with this process encoding
        and drawing noise only for its rows. Image ``k`` of the batch uses noise index
        ``start_index + k`` (so a prompt file cut into batches gives each prompt its own noise)."""
        from sdaccel import distributed
        from sdaccel.pipeline import initial_noise

        pipe, batch = self.pipeline, len(prompts)
        check_batch(batch, self.mesh)
        rows = distributed.process_rows(batch_sharding(self.mesh), batch)
        local_prompts = [prompts[i] for i in rows]
        local_negatives = negative_prompts
        if negative_prompts is not None and not isinstance(negative_prompts, str):
            local_negatives = [negative_prompts[i] for i in rows]
        cond = pipe.conditioning(local_prompts, local_negatives, guidance_scale, height, width)
        noise = initial_noise(seed, jnp.asarray(start_index + rows), pipe.latent_shape(height, width))
        cond, noise = distributed.global_batch((cond, noise), self.mesh, batch)
        state, guidance = distributed.replicated_global(
            (pipe.scheduler.set_timesteps(steps), np.float32(guidance_scale)), self.mesh
        )
        return pipe.params, state, cond, noise, guidance

    def compile(self, args: tuple):
        """The AOT-compiled executable (a :class:`sdaccel.bench.Compiled`) for these arguments'
        shapes, compiled under ``jax.set_mesh`` on first use."""
        from sdaccel import bench

        _, state, cond, noise, _ = args
        key = (tuple(noise.shape), int(state.timesteps.shape[0]), tuple(cond.prompt_embeds.shape[:2]))
        if key not in self.compiled:
            with jax.set_mesh(self.mesh):
                self.compiled[key] = bench.aot_compile(self._jitted, *args)
        return self.compiled[key]

    def flops(self, args: tuple) -> dict:
        """FLOPs of one call as XLA counts them, all devices together.

        XLA's cost model counts the body of the sampling loop once, so the compiled program's
        count holds one UNet pass; ``steps - 1`` more come from the cost of one UNet call at the
        guidance batch (B * G), taken from its lowering (nothing extra is compiled).
        """
        from flax import nnx

        params, state, cond, noise, _ = args
        pipe, steps = self.pipeline, int(state.timesteps.shape[0])
        program = self.compile(args).flops
        if program is None:
            return {"total": None, "unet_step": None, "program_as_counted": None}
        batch, groups = cond.prompt_embeds.shape[:2]

        def unet_call(unet_params, x, t, context, text_embeds, time_ids):
            return nnx.merge(pipe._unet_graphdef, unet_params)(x, t, context, text_embeds, time_ids)

        def folded(x):
            return None if x is None else jax.ShapeDtypeStruct((batch * groups, *x.shape[2:]), x.dtype)

        x = jax.ShapeDtypeStruct((batch * groups, *noise.shape[1:]), noise.dtype)
        t = jax.ShapeDtypeStruct((), state.timesteps.dtype)
        lowered = jax.jit(unet_call).lower(
            params["unet"], x, t, folded(cond.prompt_embeds), folded(cond.text_embeds), folded(cond.time_ids)
        )
        unet_step = float(lowered.cost_analysis()["flops"])
        program_total = program * self.mesh.size  # the compiled count is one device's share
        return {
            "total": program_total + (steps - 1) * unet_step,
            "unet_step": unet_step,
            "program_as_counted": program_total,
        }

    def warm(self, batch: int, height: int, width: int, steps: int, guidance_scale: float = 5.0):
        """Compile the program for one shape (a resolution bucket) before the first request."""
        return self.compile(self.inputs([""] * batch, None, steps, guidance_scale, height, width, 0))

    def generate(
        self,
        prompts: Sequence[str],
        negative_prompts: str | Sequence[str] | None = None,
        steps: int = 20,
        guidance_scale: float = 5.0,
        height: int | None = None,
        width: int | None = None,
        seed: int = 0,
        start_index: int = 0,
    ) -> tuple[jax.Array, dict]:
        """``(images, timings)``: images is the global (B, H, W, 3) float32 array split over
        ``"data"``; timings keep compile apart from run (encode + denoise + decode) and add
        throughput. For FLOPs, see :meth:`flops`."""
        default_h, default_w = self.pipeline.default_size()
        height, width = height or default_h, width or default_w
        encode_compile = self.pipeline._encode.compile_s
        start = time.perf_counter()
        args = self.inputs(
            list(prompts), negative_prompts, steps, guidance_scale, height, width, seed, start_index
        )
        jax.block_until_ready(args[2:4])
        encoded = time.perf_counter()
        compiled = self.compile(args)
        compiled_at = time.perf_counter()
        images = jax.block_until_ready(compiled(*args))
        end = time.perf_counter()
        encode_compile = self.pipeline._encode.compile_s - encode_compile
        batch, devices = len(prompts), self.mesh.size
        run_s = (encoded - start - encode_compile) + (end - compiled_at)
        return images, {
            "compile_s": encode_compile + (compiled_at - encoded),
            "run_s": run_s,
            "encode_s": encoded - start - encode_compile,
            "denoise_decode_s": end - compiled_at,
            "per_image_s": run_s / batch,
            "images_per_s": batch / run_s,
            "batch": batch,
            "devices": devices,
            "processes": jax.process_count(),
            "steps": steps,
            "height": height,
            "width": width,
        }


def _on_mesh(tree, mesh: Mesh) -> bool:
    """Whether every array of ``tree`` is already placed on ``mesh`` (host arrays are not)."""
    leaves = jax.tree.leaves(tree)
    return bool(leaves) and all(
        isinstance(getattr(x, "sharding", None), NamedSharding)
        and x.sharding.mesh.devices.tolist() == mesh.devices.tolist()
        for x in leaves
    )
