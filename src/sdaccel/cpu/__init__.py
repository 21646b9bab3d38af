"""Stable Diffusion on CPU with OpenVINO: the room's public API, module by module.

Importing ``sdaccel.cpu`` is cheap: it imports none of its modules (and so neither OpenVINO nor
PyTorch). Import the module you need, e.g. ``from sdaccel.cpu.export import export_pipeline``;
``__all__`` lists the module names.

## Export
- :mod:`export`: ``export_pipeline``, ``default_export_dir``, ``is_complete``, ``reshape_static``,
  ``StaticShape``, ``text_to_image_components``, ``pipeline_class``, ``checkpoint_defaults``,
  ``vae_scale_factor_of``, ``convert_unet``, ``convert_text_encoder``, ``convert_vae_decoder``,
  ``convert_vae_encoder``, ``convert_tokenizer``, ``save_ir``, ``read_ir``, ``check_ir``,
  ``estimate_export_bytes``, ``export_sizes``, ``MODEL_XML``, ``MANIFEST``, ``PIPELINE_COMPONENTS``
- :mod:`torch_modules`: ``TextEncoder``, ``UNet``, ``VAEDecoder``, ``VAEEncoder``, ``UNetPieces``,
  ``DeepCacheFull``, ``DeepCacheShallow`` (imports torch: the exporters import it when they convert)
- :mod:`lora_export`: ``check_lora``, ``fuse_into_torch``, ``save_genai_adapter``, ``lora_settings``

## Pipelines
- :mod:`pipeline`: ``OVPipeline``, ``run_diffusers``, ``diffusers_schedulers``
- :mod:`genai`: ``GenAIPipeline``, ``check_genai_scheduler``

## Precision
- :mod:`precision`: ``choose_precision``, ``PrecisionChoice``, ``offered_precisions``,
  ``precision_name``, ``CANDIDATES``, ``device_capabilities``, ``precisions_for``,
  ``default_precision``, ``quantized_hint``

## INT8
- :mod:`quantize`: ``quantize_ir``, ``quantize_in_parts``, ``quantize_variant``, ``quantize_full``,
  ``quantize_hybrid``, ``compress_weights_int8``, ``collect_unet_inputs``, ``CalibrationSet``,
  ``read_prompts``, ``time_unet``, ``ir_size_bytes``, ``SENSITIVE_LAYER_PATTERNS``,
  ``matching_layers``, ``unmatched_patterns``, ``ignored_layers``, ``weighted_matmul_and_gather_names``, ``describe_ir``,
  ``default_budget_gb``, ``estimate_peak_gb``, ``no_progress_bars``, ``ignored_scope_of``,
  ``smooth_quant_parameters``, ``reshaped_pointwise_convolutions``
- :mod:`ir_parts`: ``plan_parts``, ``PartPlan``, ``cut``, ``stitch``
- :mod:`quantize_vae`: ``quantize_vae_decoder``, ``decoder_inputs``, ``decode``
- :mod:`sensitivity`: ``quantize_for_ranking``, ``rank_groups``, ``only_group``,
  ``quantizer_groups``, ``group_of``, ``float_group_patterns``, ``format_table``, ``plot_ranking``
- :mod:`accuracy_control`: ``quantize_with_accuracy_control``, ``check_request``, ``checked_result``,
  ``activation_quantizers``, ``recording_search``, ``quantizable_operations``, ``estimate_search_s``,
  ``replay_ignored``, ``check_replay``, ``VARIANTS``

## Speed-ups
- :mod:`deepcache`: ``DeepCache``, ``export_deepcache``, ``quantize_deepcache``, ``compile_parts``,
  ``CUTS``, ``check_cut``, ``folder_name``, ``lever_name``, ``cached_shape``
- :mod:`tome`: ``export_tome``, ``convert_tome_unet``, ``convert_tome_deepcache``, ``token_merging``, ``tome_folder``
- :mod:`tiny_vae`: ``export_tiny_decoder``, ``with_tiny_decoder``, ``check_tiny_vae``
- :mod:`levers`: ``time_arms``, ``Arm``, ``runtime_arms``, ``STATIC_ARMS``, ``GUIDANCE_ARMS``

## Quality
- :mod:`quality`: ``psnr``, ``ssim``, ``compare_images``, ``unet_relative_error``, ``clip_score``,
  ``comparison_grid``

## Measuring
- :mod:`benchmark`: ``MODELS``, ``unet_inputs``, ``export_ir``, ``time_openvino``, ``time_torch``,
  ``time_lever``, ``time_tome``, ``run_child``, ``summarize_run``, ``machine_info``, ``describe_machine``,
  ``add_speedups``, ``add_whole_image``, ``compose_stack``, ``results_table`` (what
  ``benchmarks/bench_openvino.py`` runs)
- :mod:`families`: ``reference``, ``family_of``, ``reference_table``, ``markdown``, ``isa_tier``,
  ``arm_tier``, ``tier_note``, ``tier_info``, ``Tier``, ``TIERS``, ``recipe_outlook``, ``Outlook``,
  ``RECIPES``, ``VERDICTS``
"""

__all__ = [
    "accuracy_control",
    "benchmark",
    "deepcache",
    "export",
    "families",
    "genai",
    "ir_parts",
    "levers",
    "lora_export",
    "pipeline",
    "precision",
    "quality",
    "quantize",
    "quantize_vae",
    "sensitivity",
    "tiny_vae",
    "tome",
    "torch_modules",
]
