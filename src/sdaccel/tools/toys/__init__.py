"""Making the tiny checkpoints: random weights in the real layouts, a tiny model trained on the
shapes data set, and the LCM-LoRA and the tiny autoencoder distilled from it. Each module is a
command line too (``python -m sdaccel.tools.toys.<module>``); importing the package imports none
of them.

## Tiny checkpoints

- ``random_checkpoints.ensure_tiny``, ``random_checkpoints.build_tiny_sdxl``,
  ``random_checkpoints.build_tiny_sd15``, ``random_checkpoints.BUILDERS``: random-weight
  checkpoints in the exact diffusers layout (command line: ``python -m sdaccel.tools.toys.random_checkpoints``).
- ``random_checkpoints.write_clip_tokenizer_files``, ``random_checkpoints.clip_text_encoder``,
  ``random_checkpoints.write_model_index``, ``random_checkpoints.bytes_to_unicode``: their pieces.
- ``random_checkpoints.SDXL_COMPONENTS``, ``random_checkpoints.SD15_COMPONENTS``,
  ``random_checkpoints.SD_NOISE_SCHEDULE``: what the layouts hold.

## Training and distillation

- ``train.train``, ``train.TrainConfig``, ``train.SMOKE``, ``train.LAYOUTS``: a real tiny model
  trained on the shapes (``python -m sdaccel.tools.toys.train``).
- ``train.encode_prompts``, ``train.encode_images``, ``train.sdxl_time_ids``,
  ``train.build_scheduler``, ``train.warmup_cosine``, ``train.write_tokenizer``, ``train.generate``:
  its conditioning, schedules and sampling.
- ``distill.run``, ``distill.distill``, ``distill.DDIMSolver``, ``distill.boundary_scalings``:
  the LCM-LoRA distillation (``python -m sdaccel.tools.toys.distill``).
- ``distill_config.DistillConfig``, ``distill_config.TARGET_MODULES``,
  ``distill_config.WEIGHT_NAME``: its knobs, the layers it adapts and the file it writes;
  ``distill_config.add_config_flags``, ``distill_config.config_from_args``: a config's numbers as
  command-line flags and back (both distillations' commands).
- ``distill_eval.evaluate``, ``distill_eval.adherence_table``, ``distill_eval.plot_samples``:
  the adapter's adherence through diffusers.
- ``model_card.write_readme``, ``model_card.refresh_readme``, ``model_card.readme_text``: the
  adapter's README (its template: model_card.md beside the module); ``model_card.recipes_tried``: what
  each shipped checkpoint's card says was tried and not kept (recipes_tried/<folder>.md).
- ``distill_taesd.run``, ``distill_taesd.build_parser``: a tiny autoencoder (TAESD's
  architecture) distilled from a trained checkpoint's VAE, and its quality against that VAE
  (``python -m sdaccel.tools.toys.distill_taesd``).
- ``taesd_config.TaesdConfig``, ``taesd_config.tiny_config``, ``taesd_config.checkpoint_vae``,
  ``taesd_config.check_destination``: its knobs, the autoencoder's arguments, and the inputs'
  checks.
- ``taesd_train.training_data``, ``taesd_train.train``, ``taesd_train.decoder_parameters``: its
  data (the VAE's latents and decodes) and training loop.
- ``taesd_eval.evaluate``, ``taesd_eval.evaluation_table``: the same latents through both
  decoders.
- ``taesd_card.readme_text``, ``taesd_card.refresh_readme``: its README (its template:
  taesd_card.md beside the module).
"""
