"""Stable Diffusion on CPU with OpenVINO: the room's public API, module by module.

Importing ``sdaccel.cpu`` is cheap: it imports none of its modules (and so neither OpenVINO nor
PyTorch). Every name below is public, listed by the module that defines it: import it from the room
(``from sdaccel.cpu import export_pipeline`` imports :mod:`export` then) or from its module
(``from sdaccel.cpu.export import export_pipeline``); a module is reached as a module too
(``from sdaccel.cpu import quality``, then ``quality.compare_images``). ``__all__`` lists the names
(:data:`PUBLIC_NAMES` says each one's module). ``VARIANTS``, which :mod:`quantize` (the INT8 recipes)
and :mod:`accuracy_control` (those it can run) both define, is reached through its module
(:data:`SHARED_NAMES`).

## Export
- :mod:`export`: ``export_pipeline``, ``default_export_dir``, ``is_complete``, ``reshape_static``,
  ``StaticShape``, ``text_to_image_components``, ``pipeline_class``, ``checkpoint_defaults``,
  ``vae_scale_factor_of``, ``estimate_export_bytes``, ``export_sizes``, ``MODEL_XML``, ``MANIFEST``,
  ``PIPELINE_COMPONENTS``
- :mod:`convert`: ``convert_unet``, ``convert_text_encoder``, ``convert_vae_decoder``,
  ``convert_vae_encoder``, ``convert_tokenizer``
- :mod:`ir_files`: ``save_ir``, ``read_ir``, ``check_ir``
- :mod:`torch_modules`: ``TextEncoder``, ``UNet``, ``VAEDecoder``, ``VAEEncoder``, ``UNetPieces``,
  ``DeepCacheFull``, ``DeepCacheShallow`` (imports torch: the exporters import it when they convert)
- :mod:`lora_export`: ``check_lora``, ``fuse_into_torch``, ``save_genai_adapter``, ``lora_settings``

## Pipelines
- :mod:`pipeline`: ``OVPipeline``, ``run_diffusers``, ``diffusers_schedulers``
- :mod:`genai`: ``GenAIPipeline``, ``check_genai_scheduler``

## Precision
- :mod:`precision`: ``choose_precision``, ``PrecisionChoice``, ``offered_precisions``,
  ``CANDIDATES``, ``device_capabilities``, ``precisions_for``, ``default_precision``,
  ``quantized_hint``
- :mod:`precision_timing`: ``precision_name``

## INT8
- :mod:`quantize`: ``quantize_variant``, ``quantize_full``, ``quantize_hybrid``, ``compress_weights_int8``,
  ``time_unet``, ``ir_size_bytes``, ``SENSITIVE_LAYER_PATTERNS``, ``matching_layers``,
  ``unmatched_patterns``, ``ignored_layers``, ``weighted_matmul_and_gather_names``, ``describe_ir``,
  ``no_progress_bars``, ``ignored_scope_of``, ``smooth_quant_parameters``,
  ``reshaped_pointwise_convolutions``
- :mod:`quantize_parts`: ``quantize_ir``, ``quantize_in_parts``, ``default_budget_gb``, ``estimate_peak_gb``,
  ``parts_for_budget``
- :mod:`calibration`: ``collect_unet_inputs``, ``CalibrationSet``, ``read_prompts``
- :mod:`ir_parts`: ``plan_parts``, ``PartPlan``, ``cut``, ``stitch``
- :mod:`quantize_vae`: ``quantize_vae_decoder``, ``decoder_inputs``, ``decode``
- :mod:`sensitivity`: ``OTHER``, ``quantize_for_ranking``, ``rank_groups``, ``only_group``,
  ``quantizer_groups``, ``group_of``, ``float_group_patterns``, ``format_table``, ``plot_ranking``
- :mod:`accuracy_control`: ``quantize_with_accuracy_control``, ``check_request``, ``checked_result``,
  ``activation_quantizers``, ``recording_search``, ``quantizable_operations``, ``estimate_search_s``,
  ``replay_ignored``, ``check_replay``, ``reverted``

## Speed-ups
- :mod:`deepcache`: ``DeepCache``, ``export_deepcache``, ``quantize_deepcache``, ``compile_parts``,
  ``CUTS``, ``check_cut``, ``folder_name``, ``lever_name``, ``cached_shape``
- :mod:`tome`: ``export_tome``, ``convert_tome_unet``, ``convert_tome_deepcache``, ``token_merging``,
  ``tome_folder``
- :mod:`tiny_vae`: ``export_tiny_decoder``, ``with_tiny_decoder``, ``check_tiny_vae``
- :mod:`levers`: ``time_arms``, ``Arm``, ``runtime_arms``, ``STATIC_ARMS``, ``GUIDANCE_ARMS``

## Quality
- :mod:`quality`: ``psnr``, ``ssim``, ``compare_images``, ``unet_relative_error``, ``clip_score``,
  ``comparison_grid``, ``compile_f32``

## Measuring
- :mod:`random_unet`: ``MODELS``, ``unet_inputs``, ``export_ir``, ``build_torch_unet``, ``unet_config``,
  ``checkpoint_folder`` (the UNet the CPU benchmark measures; its timing is in ``sdaccel.tools.measure``)
- :mod:`machine`: ``machine_info``, ``describe_machine`` (the machine a result file records)
- :mod:`families`: ``reference``, ``family_of``, ``reference_table``, ``markdown``, ``isa_tier``,
  ``arm_tier``, ``tier_note``, ``tier_info``, ``Tier``, ``TIERS``, ``recipe_outlook``, ``Outlook``,
  ``RECIPES``, ``VERDICTS``, ``vendor``
"""

from sdaccel.core.names import lazy_names

#: Each public name, under the docstring's headings: name -> the module of the room that defines it.
PUBLIC_NAMES = {
    # Export
    "export_pipeline": "export",
    "default_export_dir": "export",
    "is_complete": "export",
    "reshape_static": "export",
    "StaticShape": "export",
    "text_to_image_components": "export",
    "pipeline_class": "export",
    "checkpoint_defaults": "export",
    "vae_scale_factor_of": "export",
    "estimate_export_bytes": "export",
    "export_sizes": "export",
    "MODEL_XML": "export",
    "MANIFEST": "export",
    "PIPELINE_COMPONENTS": "export",
    "convert_unet": "convert",
    "convert_text_encoder": "convert",
    "convert_vae_decoder": "convert",
    "convert_vae_encoder": "convert",
    "convert_tokenizer": "convert",
    "save_ir": "ir_files",
    "read_ir": "ir_files",
    "check_ir": "ir_files",
    "TextEncoder": "torch_modules",
    "UNet": "torch_modules",
    "VAEDecoder": "torch_modules",
    "VAEEncoder": "torch_modules",
    "UNetPieces": "torch_modules",
    "DeepCacheFull": "torch_modules",
    "DeepCacheShallow": "torch_modules",
    "check_lora": "lora_export",
    "fuse_into_torch": "lora_export",
    "save_genai_adapter": "lora_export",
    "lora_settings": "lora_export",
    # Pipelines
    "OVPipeline": "pipeline",
    "run_diffusers": "pipeline",
    "diffusers_schedulers": "pipeline",
    "GenAIPipeline": "genai",
    "check_genai_scheduler": "genai",
    # Precision
    "choose_precision": "precision",
    "PrecisionChoice": "precision",
    "offered_precisions": "precision",
    "precision_name": "precision_timing",
    "CANDIDATES": "precision",
    "device_capabilities": "precision",
    "precisions_for": "precision",
    "default_precision": "precision",
    "quantized_hint": "precision",
    # INT8
    "quantize_variant": "quantize",
    "quantize_full": "quantize",
    "quantize_hybrid": "quantize",
    "compress_weights_int8": "quantize",
    "time_unet": "quantize",
    "ir_size_bytes": "quantize",
    "SENSITIVE_LAYER_PATTERNS": "quantize",
    "matching_layers": "quantize",
    "unmatched_patterns": "quantize",
    "ignored_layers": "quantize",
    "weighted_matmul_and_gather_names": "quantize",
    "describe_ir": "quantize",
    "no_progress_bars": "quantize",
    "ignored_scope_of": "quantize",
    "smooth_quant_parameters": "quantize",
    "reshaped_pointwise_convolutions": "quantize",
    "quantize_ir": "quantize_parts",
    "quantize_in_parts": "quantize_parts",
    "default_budget_gb": "quantize_parts",
    "estimate_peak_gb": "quantize_parts",
    "parts_for_budget": "quantize_parts",
    "collect_unet_inputs": "calibration",
    "CalibrationSet": "calibration",
    "read_prompts": "calibration",
    "plan_parts": "ir_parts",
    "PartPlan": "ir_parts",
    "cut": "ir_parts",
    "stitch": "ir_parts",
    "quantize_vae_decoder": "quantize_vae",
    "decoder_inputs": "quantize_vae",
    "decode": "quantize_vae",
    "OTHER": "sensitivity",
    "quantize_for_ranking": "sensitivity",
    "rank_groups": "sensitivity",
    "only_group": "sensitivity",
    "quantizer_groups": "sensitivity",
    "group_of": "sensitivity",
    "float_group_patterns": "sensitivity",
    "format_table": "sensitivity",
    "plot_ranking": "sensitivity",
    "quantize_with_accuracy_control": "accuracy_control",
    "check_request": "accuracy_control",
    "checked_result": "accuracy_control",
    "activation_quantizers": "accuracy_control",
    "recording_search": "accuracy_control",
    "quantizable_operations": "accuracy_control",
    "estimate_search_s": "accuracy_control",
    "replay_ignored": "accuracy_control",
    "check_replay": "accuracy_control",
    "reverted": "accuracy_control",
    # Speed-ups
    "DeepCache": "deepcache",
    "export_deepcache": "deepcache",
    "quantize_deepcache": "deepcache",
    "compile_parts": "deepcache",
    "CUTS": "deepcache",
    "check_cut": "deepcache",
    "folder_name": "deepcache",
    "lever_name": "deepcache",
    "cached_shape": "deepcache",
    "export_tome": "tome",
    "convert_tome_unet": "tome",
    "convert_tome_deepcache": "tome",
    "token_merging": "tome",
    "tome_folder": "tome",
    "export_tiny_decoder": "tiny_vae",
    "with_tiny_decoder": "tiny_vae",
    "check_tiny_vae": "tiny_vae",
    "time_arms": "levers",
    "Arm": "levers",
    "runtime_arms": "levers",
    "STATIC_ARMS": "levers",
    "GUIDANCE_ARMS": "levers",
    # Quality
    "psnr": "quality",
    "ssim": "quality",
    "compare_images": "quality",
    "unet_relative_error": "quality",
    "clip_score": "quality",
    "comparison_grid": "quality",
    "compile_f32": "quality",
    # Measuring
    "MODELS": "random_unet",
    "unet_inputs": "random_unet",
    "export_ir": "random_unet",
    "build_torch_unet": "random_unet",
    "unet_config": "random_unet",
    "checkpoint_folder": "random_unet",
    "machine_info": "machine",
    "describe_machine": "machine",
    "reference": "families",
    "family_of": "families",
    "reference_table": "families",
    "markdown": "families",
    "isa_tier": "families",
    "arm_tier": "families",
    "tier_note": "families",
    "tier_info": "families",
    "Tier": "families",
    "TIERS": "families",
    "recipe_outlook": "families",
    "Outlook": "families",
    "RECIPES": "families",
    "VERDICTS": "families",
    "vendor": "families",
}

#: The room's modules, each reached as a module too (``from sdaccel.cpu import quality``).
MODULES = (
    "accuracy_control",
    "calibration",
    "convert",
    "deepcache",
    "export",
    "families",
    "genai",
    "ir_files",
    "ir_parts",
    "levers",
    "lora_export",
    "machine",
    "pipeline",
    "precision",
    "precision_timing",
    "quality",
    "quantize",
    "quantize_parts",
    "quantize_vae",
    "random_unet",
    "sensitivity",
    "tiny_vae",
    "tome",
    "torch_modules",
)

#: Names that several modules define alike, reached through their module (``quantize.VARIANTS``, the
#: INT8 recipes' names; ``accuracy_control.VARIANTS``, those that accuracy control can run).
SHARED_NAMES = {"VARIANTS": ("quantize", "accuracy_control")}

__all__ = list(PUBLIC_NAMES)
__getattr__, __dir__ = lazy_names(__name__, PUBLIC_NAMES, MODULES)
