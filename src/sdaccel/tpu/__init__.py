"""The JAX/TPU track: SDXL and SD 1.5 in Flax NNX, on one device or a mesh of TPU chips.

Importing this package imports JAX and Flax (never PyTorch or OpenVINO). The modules that are also
command lines (``python -m sdaccel.tpu.<name>``: :mod:`~sdaccel.tpu.compilation`,
:mod:`~sdaccel.tpu.generate`), :mod:`~sdaccel.tpu.serving` and :mod:`~sdaccel.tpu.plan` (its command
line is :mod:`sdaccel.tools.measure.tpu_plan`) are not imported here, so that running one does not
import it twice: import them as modules,
``from sdaccel.tpu import plan``, or import one of their names from the room, which imports its
module then (:data:`PUBLIC_NAMES`: name -> module). :data:`__all__` lists every public name, and the
modules a notebook imports as modules.

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
- :func:`spec_for`, :func:`explain`, :func:`param_specs`, :func:`path_string`, :func:`axis_size`,
  :data:`P` (JAX's ``PartitionSpec``, as the rules write it): which rule shards a parameter, and how;
  :func:`describe`, :func:`visualize`: how an array is laid out over the mesh.

## Compiling and measuring

- :func:`aot_compile`, :class:`AOTCache`, :class:`Compiled`, :func:`xla_flops`: ahead-of-time
  compiles and XLA's FLOP count; :func:`platform_compiler_options`: the XLA options they compile
  with on a platform (on the CPU, one float32 copy of a bfloat16 weight at a time).
- :mod:`~sdaccel.tpu.compilation`: the JAX timer (``time_calls``), the chip's peak
  (``device_summary``, ``PEAK_BF16_FLOPS``) and utilisation (``utilisation``), the persistent
  compilation cache (``enable_compilation_cache``) and its probe (``cache_probe``), attention timing
  (``time_attention``, ``attention_implementations``). Cost per image is
  :func:`sdaccel.core.timing.cost_per_image` (no JAX: the CPU track prices its images too).
- :mod:`~sdaccel.tpu.serving`: throughput sweeps (``sweep``) and resolution buckets (``Buckets``).

## Planning for a TPU

- :mod:`~sdaccel.tpu.plan`: compile the real programs for a Cloud TPU slice with no TPU, and read
  off memory, FLOPs, the time floor and communication (``predict``, ``measurement``, ``summary``,
  ``beside``).
- :mod:`~sdaccel.tpu.topology`: the slices (``topology.topology``) and their compile-only devices;
  :class:`CompilerMissing` without libtpu; :func:`collectives`, the communication in a program's HLO,
  and :func:`loop_collectives`, in one trip of each of its loops.

## Command lines

- :mod:`~sdaccel.tpu.generate`: batch generation from a prompt file, on one or many hosts
  (:mod:`~sdaccel.tpu.distributed`).
"""

from __future__ import annotations

from sdaccel.core.names import lazy_names
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
    P,
    ShardingError,
    axis_size,
    check_batch,
    describe,
    explain,
    make_mesh,
    pad_batch,
    param_specs,
    parse_mesh,
    path_string,
    shard_model,
    simulate_cpu_devices,
    spec_for,
    tree_shardings,
    visualize,
)
from sdaccel.tpu.topology import CompilerMissing, collectives, loop_collectives

#: Modules of the room imported by name, never here: the command lines, serving and the plan.
COMMAND_LINE_MODULES = ("compilation", "serving", "plan", "generate")

#: The public names of those modules: name -> its module, imported on first use.
PUBLIC_NAMES = {
    # Compiling and measuring
    "time_calls": "compilation",
    "device_summary": "compilation",
    "PEAK_BF16_FLOPS": "compilation",
    "utilisation": "compilation",
    "enable_compilation_cache": "compilation",
    "cache_probe": "compilation",
    "time_attention": "compilation",
    "attention_implementations": "compilation",
    "sweep": "serving",
    "Buckets": "serving",
    # Planning for a TPU
    "predict": "plan",
    "measurement": "plan",
    "summary": "plan",
    "beside": "plan",
}

#: Public names that are a module's name too, reached through their module (``topology.topology``).
SHARED_NAMES = {"topology": ("topology",)}

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
    "spec_for",
    "explain",
    "param_specs",
    "path_string",
    "axis_size",
    "P",
    "describe",
    "visualize",
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
    "collectives",
    "loop_collectives",
    # Command lines
    "generate",
    "distributed",
    # The command lines' names, imported on first use
    *PUBLIC_NAMES,
]
__getattr__, __dir__ = lazy_names(__name__, PUBLIC_NAMES, COMMAND_LINE_MODULES)
