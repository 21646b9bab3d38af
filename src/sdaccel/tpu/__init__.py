"""The JAX/TPU track: SDXL and SD 1.5 in Flax NNX, on one device or a mesh of TPU chips.

Importing this package imports JAX and Flax (never PyTorch or OpenVINO). The modules that are also
command lines (``python -m sdaccel.tpu.<name>``: :mod:`~sdaccel.tpu.compilation`,
:mod:`~sdaccel.tpu.plan`, :mod:`~sdaccel.tpu.generate`) and :mod:`~sdaccel.tpu.serving` are not
imported here, so that running one does not import it twice: import them as modules,
``from sdaccel.tpu import plan``.

## Pipelines

- :class:`JaxPipeline`: prompt to images on one device (``from_pretrained``, ``generate``).
- :class:`ShardedPipeline`: the same program on a mesh of devices, batch over ``"data"``.
- :func:`initial_noise`: each image's starting noise, from its global index alone.
- :func:`denoising_loop`: the sampling loop, one ``jax.lax.fori_loop`` (scale the input, the UNet on
  the guidance batch, :func:`classifier_free_guidance`, the scheduler's step), as
  ``JaxPipeline.denoise_and_decode`` runs it.
- :func:`describe_unet`: the UNet's blocks and layers, from its config alone.
- :func:`guidance_scale_embedding`: the guidance scale as a guidance-distilled (LCM) UNet's
  ``timestep_cond``, as ``JaxPipeline.denoise_and_decode`` computes it.

## Models and weights

- :mod:`sdaccel.tpu.models`: one file per component (``unet``, ``vae``, ``clip``, ``taesd``,
  ``attention``).
- :func:`load_text_encoder`, :func:`load_weights`, :func:`abstract_model`, :func:`count_params`.

## LoRA

- :func:`fuse_lora`, :func:`unfuse_lora`, :func:`fused_adapters` (reading the files:
  :mod:`sdaccel.core.lora_files`).
- :func:`fuse_layer`: ``W + scale * alpha / r * up @ down`` for one weight, in our layout, as
  ``fuse_lora`` writes it into every layer an adapter names.

## Sharding

- :mod:`~sdaccel.tpu.sharding` (the mesh, the rules, and how to see them), and from it
  :func:`make_mesh`, :func:`parse_mesh`, :func:`simulate_cpu_devices`: the devices on named axes.
- :data:`RULES`, :func:`tree_shardings`, :func:`shard_model`, :func:`check_batch`,
  :func:`pad_batch`, :class:`ShardingError`: one table of sharding rules, and the batch that a mesh
  divides.

## Compiling and measuring

- :func:`aot_compile`, :class:`AOTCache`, :class:`Compiled`, :func:`xla_flops`: ahead-of-time
  compiles and XLA's FLOP count; :func:`platform_compiler_options`: the XLA options they compile
  with on a platform (on the CPU, one float32 copy of a bfloat16 weight at a time).
- :mod:`~sdaccel.tpu.compilation`: the JAX timer (``time_calls``), peaks and utilisation, cost
  per image (``cost_per_image``), the persistent compilation cache and its probe (``cache_probe``),
  attention timing.
- :mod:`~sdaccel.tpu.serving`: throughput sweeps and resolution buckets.

## Planning for a TPU

- :mod:`~sdaccel.tpu.plan`: compile the real programs for a Cloud TPU slice with no TPU, and read
  off memory, FLOPs, the time floor and communication (``predict``, ``beside``, ``tpu_floor``).
- :mod:`~sdaccel.tpu.topology`: the slices (:func:`topology`) and their compile-only devices;
  :class:`CompilerMissing` without libtpu.

## Command lines

- :mod:`~sdaccel.tpu.generate`: batch generation from a prompt file, on one or many hosts
  (:mod:`~sdaccel.tpu.distributed`).
"""

from __future__ import annotations

from sdaccel.tpu import distributed, sharding, topology
from sdaccel.tpu.aot import AOTCache, Compiled, aot_compile, platform_compiler_options, xla_flops
from sdaccel.tpu.lora import fuse_layer, fuse_lora, fused_adapters, unfuse_lora
from sdaccel.tpu.models.clip import load_text_encoder
from sdaccel.tpu.models.unet import guidance_scale_embedding
from sdaccel.tpu.models.weights import abstract_model, count_params, load_weights
from sdaccel.tpu.pipeline import (
    JaxPipeline,
    classifier_free_guidance,
    denoising_loop,
    describe_unet,
    initial_noise,
)
from sdaccel.tpu.sharded_pipeline import ShardedPipeline
from sdaccel.tpu.sharding import (
    RULES,
    ShardingError,
    check_batch,
    make_mesh,
    pad_batch,
    parse_mesh,
    shard_model,
    simulate_cpu_devices,
    tree_shardings,
)
from sdaccel.tpu.topology import CompilerMissing

#: Modules of the room that are command lines too: imported by name, never here.
COMMAND_LINE_MODULES = ("compilation", "serving", "plan", "generate")

__all__ = [
    # Pipelines
    "JaxPipeline",
    "ShardedPipeline",
    "initial_noise",
    "denoising_loop",
    "classifier_free_guidance",
    "describe_unet",
    "guidance_scale_embedding",
    # Models and weights
    "load_text_encoder",
    "load_weights",
    "abstract_model",
    "count_params",
    # LoRA
    "fuse_lora",
    "unfuse_lora",
    "fused_adapters",
    "fuse_layer",
    # Sharding
    "sharding",
    "make_mesh",
    "parse_mesh",
    "simulate_cpu_devices",
    "RULES",
    "tree_shardings",
    "shard_model",
    "check_batch",
    "pad_batch",
    "ShardingError",
    # Compiling and measuring
    "aot_compile",
    "AOTCache",
    "Compiled",
    "xla_flops",
    "platform_compiler_options",
    "compilation",
    "serving",
    # Planning for a TPU
    "plan",
    "topology",
    "CompilerMissing",
    # Command lines
    "generate",
    "distributed",
]
