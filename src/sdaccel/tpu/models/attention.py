"""Scaled dot-product attention, shared by the UNet, the VAE and the CLIP text encoders.

Every attention module carries its own choice, an :class:`AttentionImpl` (a static attribute, so
it is part of the module's ``nnx`` graph definition and therefore of what a compiled program is
keyed on). Nothing is read from a module global while tracing. The choices:

* ``"xla"`` (the default): ``jax.nn.dot_product_attention`` lowered to plain XLA ops. It builds the
  whole (q_len, kv_len) score matrix: for SDXL's 4096-token self-attention at 1024x1024, batch 2,
  10 heads, that is 1.3 GiB of temporary memory.
* ``"cudnn"``: the same call with cuDNN's fused kernel (NVIDIA GPUs only).
* ``"splash"``: the Pallas TPU splash-attention kernel
  (``jax.experimental.pallas.ops.tpu.splash_attention``), which streams blocks of K and V through
  the chip's on-core memory and never writes the score matrix to HBM. It is used for unmasked
  attention whose query and key lengths are multiples of 128 (the UNet's and the VAE's
  self-attention); everything else (the 77-token cross-attention, CLIP's causal attention) stays
  XLA. Mosaic kernels cannot be partitioned by XLA, so on a mesh the kernel runs under
  ``jax.shard_map``: the batch split over the ``"data"`` axis and, when the heads divide evenly,
  the heads over the ``"model"`` axis. Off TPU it runs in the Pallas interpreter (slow; for tests).

:func:`use` sets the choice on every attention module of a model; :func:`default_for` names the
best choice for a platform. XLA's cost model cannot see inside the kernel:
:func:`splash_flops` counts what it computes.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.extend.core import jaxprs_in_params
from jax.sharding import PartitionSpec as P

#: The implementations :func:`use` accepts.
IMPLEMENTATIONS = ("xla", "cudnn", "splash")

#: Splash attention is used only when the kernel's smallest block divides both lengths.
SPLASH_BLOCK = 128

#: Largest block the kernel is given (a multiple of SPLASH_BLOCK that divides the length).
SPLASH_MAX_BLOCK = 512

#: The name of the ``jax.jit`` that wraps every splash call: :func:`splash_flops` finds it by name.
SPLASH_SCOPE = "splash_attention"


@dataclasses.dataclass(frozen=True)
class AttentionImpl:
    """How one attention module computes ``softmax(q k^T / sqrt(d)) v``.

    name: ``"xla"``, ``"cudnn"`` or ``"splash"``.
    mesh: for splash, the mesh the program is sharded over (``None``: the mesh set with
      ``jax.set_mesh`` while tracing, if any; none at all: a single device, no ``shard_map``).
    interpret: for splash, run the kernel in the Pallas interpreter (any backend; for checking it).
    batch_axis, head_axis: the mesh axes that split the batch and the heads under ``shard_map``.
    """

    name: str = "xla"
    mesh: jax.sharding.Mesh | jax.sharding.AbstractMesh | None = None
    interpret: bool = False
    batch_axis: str = "data"
    head_axis: str = "model"

    def __post_init__(self):
        if self.name not in IMPLEMENTATIONS:
            raise ValueError(f"Unknown attention implementation {self.name!r}: use one of {IMPLEMENTATIONS}.")


XLA = AttentionImpl()


def default_for(platform: str) -> str:
    """The implementation to compile for ``platform`` (``"tpu"``, ``"gpu"``/``"cuda"``, ``"cpu"``):
    splash on TPU, cuDNN on NVIDIA GPUs, XLA elsewhere."""
    return {"tpu": "splash", "gpu": "cudnn", "cuda": "cudnn"}.get(platform, "xla")


def mesh_platform(mesh) -> str:
    """The platform of a concrete mesh's devices (``"tpu"`` for compile-only TPU devices too)."""
    return mesh.devices.flat[0].platform


def use(model, name: str, *, mesh=None, interpret: bool | None = None, **axes):
    """Set attention implementation ``name`` on every attention module of ``model`` (any ``nnx``
    module tree: a UNet, a VAE, a text encoder), in place; return ``model``.

    For ``"splash"``, ``interpret`` defaults to whether the program is compiled for something other
    than a TPU: the platform of ``mesh``'s devices, or JAX's default backend when there is no mesh.
    (Compile-only TPU devices on a CPU machine count as TPU.) ``axes`` may rename ``batch_axis`` and
    ``head_axis``. A model built afterwards from the same graph definition keeps the choice: a
    pipeline that split its models must split them again.
    """
    from flax import nnx

    if interpret is None:
        platform = mesh_platform(mesh) if isinstance(mesh, jax.sharding.Mesh) else jax.default_backend()
        interpret = name == "splash" and platform != "tpu"
    impl = AttentionImpl(name, mesh, bool(interpret), **axes)
    for _, module in nnx.iter_graph(model):
        if isinstance(module, nnx.Module) and hasattr(module, "attention_impl"):
            module.attention_impl = impl
    return model


def implementations(model) -> set[str]:
    """The names of the implementations the attention modules of ``model`` use."""
    from flax import nnx

    return {
        module.attention_impl.name
        for _, module in nnx.iter_graph(model)
        if isinstance(module, nnx.Module) and hasattr(module, "attention_impl")
    }


def splash_applies(q_len: int, kv_len: int, mask=None, is_causal: bool = False) -> bool:
    """Whether :func:`attention` with ``"splash"`` runs the kernel for these lengths (else XLA)."""
    return mask is None and not is_causal and q_len % SPLASH_BLOCK == 0 and kv_len % SPLASH_BLOCK == 0


def attention(
    q, k, v, *, impl: AttentionImpl = XLA, is_causal: bool = False, mask=None, upcast: bool = False
):
    """q: (batch, q_len, heads, head_dim); k, v: (batch, kv_len, heads, head_dim) -> like q.

    ``upcast`` computes the softmax in float32 (diffusers' ``upcast_attention``), which SD 2.x
    needs in half precision; the splash kernel always accumulates and normalises in float32.
    """
    if impl.name == "splash" and splash_applies(q.shape[1], k.shape[1], mask, is_causal):
        return _splash_sharded(q, k, v, impl)
    dtype = q.dtype
    if upcast:
        q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
    implementation = "cudnn" if impl.name == "cudnn" else "xla"
    out = jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=is_causal, implementation=implementation)
    return out.astype(dtype)


# ----------------------------------------------------------------------------------------------
# Splash attention
# ----------------------------------------------------------------------------------------------


def _block(length: int) -> int:
    """The largest multiple of SPLASH_BLOCK up to SPLASH_MAX_BLOCK that divides ``length``."""
    return max(b for b in range(SPLASH_BLOCK, SPLASH_MAX_BLOCK + 1, SPLASH_BLOCK) if length % b == 0)


def _splash_kernel(heads: int, q_len: int, kv_len: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    bq, bkv = _block(q_len), _block(kv_len)
    mask = masks.MultiHeadMask([masks.FullMask((q_len, kv_len)) for _ in range(heads)])
    blocks = kernel.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv)  # forward only
    # Made in the trace that uses it (its block tables become constants of that program): a
    # kernel cached across traces would hold another trace's values.
    return kernel.make_splash_mha(
        mask, block_sizes=blocks, head_shards=1, q_seq_shards=1, interpret=interpret
    )


def _splash_local(q, k, v, interpret: bool):
    """The kernel on one device's (batch, len, heads, head_dim) arrays."""
    heads = q.shape[2]
    run = _splash_kernel(heads, q.shape[1], k.shape[1], interpret)
    q = q * jnp.asarray(q.shape[-1] ** -0.5, q.dtype)  # the kernel does not scale the scores
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))  # (B, H, L, D)
    return jax.vmap(run)(q, k, v).transpose(0, 2, 1, 3)


def _splash_sharded(q, k, v, impl: AttentionImpl):
    mesh = impl.mesh if impl.mesh is not None else jax.sharding.get_abstract_mesh()
    local = functools.partial(_splash_local, interpret=impl.interpret)
    if mesh is None or mesh.empty or mesh.size == 1:
        return _scoped(local)(q, k, v)
    names = mesh.axis_names
    batch = (
        impl.batch_axis
        if impl.batch_axis in names and q.shape[0] % mesh.shape[impl.batch_axis] == 0
        else None
    )
    heads = (
        impl.head_axis if impl.head_axis in names and q.shape[2] % mesh.shape[impl.head_axis] == 0 else None
    )
    spec = P(batch, None, heads)
    # check_vma=False: with abstract (ShapeDtypeStruct) inputs the default check fails on the
    # kernel's outputs ("manual_axis_type ... must not be None"); the specs above are exact.
    sharded = jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    return _scoped(sharded)(q, k, v)


def _scoped(fn):
    """``fn`` as a ``jax.jit`` named :data:`SPLASH_SCOPE` (XLA inlines it), so that
    :func:`splash_flops` finds each kernel call, with its global shapes, in a traced program."""

    def splash_attention(q, k, v):
        return fn(q, k, v)

    return jax.jit(splash_attention)


def attention_flops(batch: int, q_len: int, kv_len: int, heads: int, head_dim: int) -> float:
    """Multiply-adds x 2 of ``q k^T`` and ``p v``: ``4 * B * H * Lq * Lkv * D``."""
    return 4.0 * batch * heads * q_len * kv_len * head_dim


def splash_flops(jaxpr) -> float:
    """FLOPs of every splash-attention call in a traced program (``jax.jit(f).trace(...).jaxpr`` or
    ``jax.make_jaxpr``), each counted once as XLA counts a loop body once. XLA's cost analysis
    sees a Mosaic kernel as an opaque custom call and counts (almost) nothing for it."""
    total = 0.0
    for eqn in _eqns(getattr(jaxpr, "jaxpr", jaxpr)):
        if eqn.primitive.name in ("jit", "pjit") and eqn.params.get("name") == SPLASH_SCOPE:
            q, k, _ = (x.aval.shape for x in eqn.invars[-3:])  # constants (mask info) come first
            total += attention_flops(q[0], q[1], k[1], q[2], q[3])
    return total


def _eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name in ("jit", "pjit") and eqn.params.get("name") == SPLASH_SCOPE:
            continue
        for sub in jaxprs_in_params(eqn.params):
            yield from _eqns(sub)
