"""The shared ground of both tracks: what the JAX/TPU track (:mod:`sdaccel.tpu`), the OpenVINO/CPU
track (:mod:`sdaccel.cpu`) and everything above them use, with no deep-learning framework (no JAX,
PyTorch or OpenVINO: numpy and safetensors only), so that both tracks' environments can import it.

Every name below can be imported from ``sdaccel.core`` or from its module.

## The pipeline contract

:mod:`sdaccel.core.contract`: how every text-to-image front-end is called and what it returns.

- :class:`GenerationResult`, :class:`Defaults`, :class:`Request`; :data:`TIMING_KEYS`,
  :data:`SCHEDULER_NAMES`, :data:`GUIDANCE_BY_PIPELINE`, :data:`DEFAULT_STEPS`, :data:`SEED_LIMIT`
- :func:`check_inputs`, :func:`check_seed`, :func:`normalize_prompts`,
  :func:`normalize_negative_prompts`, :func:`scheduler_class_name`, :func:`size_multiple`,
  :func:`vae_scale_factor`
- :func:`make_timings`, :func:`unscale_latents`, :func:`to_pil`, :func:`image_grid`

## Checkpoints

:mod:`sdaccel.core.checkpoint`: find a diffusers checkpoint (a folder or a hub id) and read its
safetensors without PyTorch.

- :class:`CheckpointError`; :func:`resolve_checkpoint`, :func:`shown_path`, :func:`allow_patterns`,
  :func:`read_json`, :func:`read_config`, :func:`read_defaults`
- :class:`WeightFile`, :class:`WeightReader`, :func:`open_weights`, :func:`torch_key`,
  :func:`check_safetensors`, :func:`check_weight_files`, :func:`refetch_hint`
- :func:`resolve_tiny_vae`, :func:`check_tiny_vae_compatible`, :func:`resolve_lora`;
  :data:`TINY_VAE_FILES`, :data:`LORA_FILES`

## LoRA files

:mod:`sdaccel.core.lora_files`: read LoRA adapters (diffusers/peft and kohya layouts) into one
layout, write kohya files.

- :class:`LoraError`, :class:`LoraAdapter`, :class:`LoraLayer`
- :func:`read_lora`, :func:`save_kohya`, :func:`sgm_names`, :func:`check_scale`,
  :func:`resolve_adapters`

## Writing safely

:mod:`sdaccel.core.staging`: a folder is published whole or not at all, a file replaced at once.

- :func:`check_writable`, :func:`staged_folder`, :func:`publish_folder`, :func:`link_tree`
- :func:`replace_text`, :func:`replace_json`
- :func:`writer_lock`, :func:`lock_path`, :func:`clear_leftovers`, :func:`leftover_patterns`
- :func:`free_bytes`, :func:`nearest_existing`, :func:`require_free_space`

:mod:`sdaccel.core.faults`: named points where a test injects a fault from outside (a kill, an
interrupt, a full disk) into a long write.

- :func:`fault_point`, :func:`parse_fault`; :data:`FAULT_ENV`, :data:`FAULT_KINDS`

## Child processes

:mod:`sdaccel.core.processes`: run a function in a fresh process, measure its peak memory, stop it
at a limit.

- :class:`ChildRun`, :func:`run_with_memory_limit`, :func:`anon_bytes` (a process's anonymous RSS),
  :func:`memory_status` and :class:`MemoryStatus` (its peak, resident and anonymous bytes in one read),
  :func:`return_freed_memory` (the C heap's free pages back to the system after a large ``del``)

## The environment

:mod:`sdaccel.core.env`: what is installed and what CPU this is (one reading of it).

- :func:`package_versions`, :data:`PACKAGES`; :func:`summary` (Python, OS, CPU, cores and memory,
  in one dict)
- :func:`cpu_model`, :func:`cpu_features`, :data:`CPU_FLAGS`
- :func:`cpu_source`, :func:`features_from_cpuinfo`, :func:`features_from_sysctl`,
  :func:`architecture`, :data:`X86_FLAGS`, :data:`ARM_FLAGS` (the one reading, x86, ARM and macOS)

## Measuring and reporting

:mod:`sdaccel.core.timing` and :mod:`sdaccel.core.tables`: the one call timer and the one Markdown
table writer.

- :func:`time_calls`, :class:`Timing`, :func:`median`
- :func:`cost_per_image`: dollars per image at an hourly price, on either track
- :func:`markdown_table`

## A room's public names

:mod:`sdaccel.core.names`: every room lists its public names in a table, name -> module, and
imports a module when one of its names is first used.

- :func:`lazy_names`
"""

from __future__ import annotations

from sdaccel.core.checkpoint import (
    LORA_FILES,
    TINY_VAE_FILES,
    CheckpointError,
    WeightFile,
    WeightReader,
    allow_patterns,
    check_safetensors,
    check_tiny_vae_compatible,
    check_weight_files,
    open_weights,
    read_config,
    read_defaults,
    read_json,
    refetch_hint,
    resolve_checkpoint,
    resolve_lora,
    resolve_tiny_vae,
    shown_path,
    torch_key,
)
from sdaccel.core.contract import (
    DEFAULT_STEPS,
    GUIDANCE_BY_PIPELINE,
    SCHEDULER_NAMES,
    SEED_LIMIT,
    TIMING_KEYS,
    Defaults,
    GenerationResult,
    Request,
    check_inputs,
    check_seed,
    image_grid,
    make_timings,
    normalize_negative_prompts,
    normalize_prompts,
    scheduler_class_name,
    size_multiple,
    to_pil,
    unscale_latents,
    vae_scale_factor,
)
from sdaccel.core.env import (
    ARM_FLAGS,
    CPU_FLAGS,
    PACKAGES,
    X86_FLAGS,
    architecture,
    cpu_features,
    cpu_model,
    cpu_source,
    features_from_cpuinfo,
    features_from_sysctl,
    package_versions,
    summary,
)
from sdaccel.core.faults import FAULT_ENV, FAULT_KINDS, fault_point, parse_fault
from sdaccel.core.lora_files import (
    LoraAdapter,
    LoraError,
    LoraLayer,
    check_scale,
    read_lora,
    resolve_adapters,
    save_kohya,
    sgm_names,
)
from sdaccel.core.names import lazy_names
from sdaccel.core.processes import (
    ChildRun,
    MemoryStatus,
    anon_bytes,
    memory_status,
    return_freed_memory,
    run_with_memory_limit,
)
from sdaccel.core.staging import (
    check_writable,
    clear_leftovers,
    free_bytes,
    leftover_patterns,
    link_tree,
    lock_path,
    nearest_existing,
    publish_folder,
    replace_json,
    replace_text,
    require_free_space,
    staged_folder,
    writer_lock,
)
from sdaccel.core.tables import markdown_table
from sdaccel.core.timing import Timing, cost_per_image, median, time_calls

__all__ = [
    # The pipeline contract
    "GenerationResult",
    "Defaults",
    "Request",
    "TIMING_KEYS",
    "SCHEDULER_NAMES",
    "GUIDANCE_BY_PIPELINE",
    "DEFAULT_STEPS",
    "SEED_LIMIT",
    "check_inputs",
    "check_seed",
    "normalize_prompts",
    "normalize_negative_prompts",
    "scheduler_class_name",
    "size_multiple",
    "vae_scale_factor",
    "make_timings",
    "unscale_latents",
    "to_pil",
    "image_grid",
    # Checkpoints
    "CheckpointError",
    "resolve_checkpoint",
    "shown_path",
    "allow_patterns",
    "read_json",
    "read_config",
    "read_defaults",
    "WeightFile",
    "WeightReader",
    "open_weights",
    "torch_key",
    "check_safetensors",
    "check_weight_files",
    "refetch_hint",
    "resolve_tiny_vae",
    "check_tiny_vae_compatible",
    "resolve_lora",
    "TINY_VAE_FILES",
    "LORA_FILES",
    # LoRA files
    "LoraError",
    "LoraAdapter",
    "LoraLayer",
    "read_lora",
    "save_kohya",
    "sgm_names",
    "check_scale",
    "resolve_adapters",
    # Writing safely
    "check_writable",
    "staged_folder",
    "publish_folder",
    "link_tree",
    "replace_text",
    "replace_json",
    "writer_lock",
    "lock_path",
    "clear_leftovers",
    "leftover_patterns",
    "free_bytes",
    "nearest_existing",
    "require_free_space",
    "fault_point",
    "parse_fault",
    "FAULT_ENV",
    "FAULT_KINDS",
    # Child processes
    "ChildRun",
    "run_with_memory_limit",
    "anon_bytes",
    "memory_status",
    "MemoryStatus",
    "return_freed_memory",
    # The environment
    "package_versions",
    "PACKAGES",
    "summary",
    "cpu_model",
    "cpu_features",
    "CPU_FLAGS",
    "cpu_source",
    "features_from_cpuinfo",
    "features_from_sysctl",
    "architecture",
    "X86_FLAGS",
    "ARM_FLAGS",
    # Measuring and reporting
    "time_calls",
    "Timing",
    "median",
    "cost_per_image",
    "markdown_table",
    # A room's public names
    "lazy_names",
]
