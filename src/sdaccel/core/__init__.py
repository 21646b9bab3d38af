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

from sdaccel.core.names import lazy_names

#: Public name -> the module of ``sdaccel.core`` that defines it: imported on first use, so that
#: ``import sdaccel.core`` (and every room's lazy table, which uses :func:`lazy_names`) stays light.
PUBLIC_NAMES = {
    "GenerationResult": "contract",
    "Defaults": "contract",
    "Request": "contract",
    "TIMING_KEYS": "contract",
    "SCHEDULER_NAMES": "contract",
    "GUIDANCE_BY_PIPELINE": "contract",
    "DEFAULT_STEPS": "contract",
    "SEED_LIMIT": "contract",
    "check_inputs": "contract",
    "check_seed": "contract",
    "normalize_prompts": "contract",
    "normalize_negative_prompts": "contract",
    "scheduler_class_name": "contract",
    "size_multiple": "contract",
    "vae_scale_factor": "contract",
    "make_timings": "contract",
    "unscale_latents": "contract",
    "to_pil": "contract",
    "image_grid": "contract",
    "CheckpointError": "checkpoint",
    "resolve_checkpoint": "checkpoint",
    "shown_path": "checkpoint",
    "allow_patterns": "checkpoint",
    "read_json": "checkpoint",
    "read_config": "checkpoint",
    "read_defaults": "checkpoint",
    "WeightFile": "checkpoint",
    "WeightReader": "checkpoint",
    "open_weights": "checkpoint",
    "torch_key": "checkpoint",
    "check_safetensors": "checkpoint",
    "check_weight_files": "checkpoint",
    "refetch_hint": "checkpoint",
    "resolve_tiny_vae": "checkpoint",
    "check_tiny_vae_compatible": "checkpoint",
    "resolve_lora": "checkpoint",
    "TINY_VAE_FILES": "checkpoint",
    "LORA_FILES": "checkpoint",
    "LoraError": "lora_files",
    "LoraAdapter": "lora_files",
    "LoraLayer": "lora_files",
    "read_lora": "lora_files",
    "save_kohya": "lora_files",
    "sgm_names": "lora_files",
    "check_scale": "lora_files",
    "resolve_adapters": "lora_files",
    "check_writable": "staging",
    "staged_folder": "staging",
    "publish_folder": "staging",
    "link_tree": "staging",
    "replace_text": "staging",
    "replace_json": "staging",
    "writer_lock": "staging",
    "lock_path": "staging",
    "clear_leftovers": "staging",
    "leftover_patterns": "staging",
    "free_bytes": "staging",
    "nearest_existing": "staging",
    "require_free_space": "staging",
    "fault_point": "faults",
    "parse_fault": "faults",
    "FAULT_ENV": "faults",
    "FAULT_KINDS": "faults",
    "ChildRun": "processes",
    "run_with_memory_limit": "processes",
    "anon_bytes": "processes",
    "memory_status": "processes",
    "MemoryStatus": "processes",
    "return_freed_memory": "processes",
    "package_versions": "env",
    "PACKAGES": "env",
    "summary": "env",
    "cpu_model": "env",
    "cpu_features": "env",
    "CPU_FLAGS": "env",
    "cpu_source": "env",
    "features_from_cpuinfo": "env",
    "features_from_sysctl": "env",
    "architecture": "env",
    "X86_FLAGS": "env",
    "ARM_FLAGS": "env",
    "time_calls": "timing",
    "Timing": "timing",
    "median": "timing",
    "cost_per_image": "timing",
    "markdown_table": "tables",
    "lazy_names": "names",
}

#: The modules of the room, importable as ``from sdaccel.core import env``.
MODULES = (
    "checkpoint",
    "contract",
    "env",
    "faults",
    "lora_files",
    "names",
    "processes",
    "staging",
    "tables",
    "timing",
)

__all__ = list(PUBLIC_NAMES)

__getattr__, __dir__ = lazy_names(__name__, PUBLIC_NAMES, MODULES)
