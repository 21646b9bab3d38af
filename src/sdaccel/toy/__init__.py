"""The toy world: a data set of coloured shapes, and the prompt-adherence numbers that say whether an
optimised pipeline still draws what it is asked of the tiny checkpoints trained on it (those
checkpoints are made by :mod:`sdaccel.tools.toys`).

Importing the package imports none of its modules: several of them run PyTorch, diffusers,
OpenVINO or JAX when called. The public names below are listed with their module; :data:`__all__`
lists them and :data:`PUBLIC_NAMES` says each one's module, so that ``from sdaccel.toy import make_dataset``
imports :mod:`~sdaccel.toy.dataset` then. A name that several modules define (each study's
``measure`` and ``format_table``), or that is also a module's name (``dataset.adherence``), is
reached through its module (:data:`SHARED_NAMES`): ``from sdaccel.toy import deepcache_quality``, then
``deepcache_quality.measure``. Their public API, by topic:

## The shapes data set

- ``dataset.make_dataset``, ``dataset.render``, ``dataset.caption``: images and captions, seeded.
- ``dataset.prompts``, ``dataset.heldout_prompts``, ``dataset.heldout_combinations``,
  ``dataset.all_combinations``: the prompts, and the combinations never trained on.
- ``dataset.adherence``, ``dataset.classify``, ``dataset.parse_prompt``, ``dataset.read_back``,
  ``dataset.is_caption``, ``dataset.ATTRIBUTES``:
  reading an image back, and the score of a batch against its prompts.

## Adherence

- ``comparison.paired_latents``, ``comparison.uint8_images``: what the pipelines of a comparison
  share, the same initial noise in and uint8 images out.
- ``adherence.evaluate``, ``adherence.format_table``, ``adherence.vae_decoder_quality``: every
  pipeline and INT8 recipe, side by side (``python -m sdaccel.toy.adherence``).
- ``int8_unets.quantize_unet``, ``int8_unets.float_group_ignored``,
  ``int8_unets.FLOAT_GROUP_VARIANTS``, ``int8_unets.FLOAT_GROUP_RECIPES``: the toy's INT8 UNets,
  each recipe calibrated on training captions, and full INT8 with one more layer group in float.
- ``adherence_steps.adherence_vs_steps``, ``adherence_steps.plot_adherence``: adherence against
  steps, base sampler and LCM-LoRA (``python -m sdaccel.toy.adherence_steps``);
  ``adherence_steps.openvino_pipe``, ``adherence_steps.openvino_runner``,
  ``adherence_steps.jax_runner``: each of its pipelines, for a sampler, an adapter and a decoder.
- ``whole_image_quality.measure``, ``whole_image_quality.format_table``: each recipe of the
  whole-image tables (20 steps; 4 LCM steps with INT8 and the tiny autoencoder) on the trained toy
  of its layout, its adherence and PSNR against f32, keyed as the benchmark's rows
  (``python -m sdaccel.toy.whole_image_quality``).
- ``steps_report.format_table``, ``steps_report.pipeline_verdicts``: what such a sweep says.
- ``calibration.calibrate_on_training_captions``: INT8 calibration data from training captions.
- ``deepcache_quality.measure``, ``deepcache_quality.format_table``: DeepCache's cost in adherence
  (``python -m sdaccel.toy.deepcache_quality``); ``deepcache_quality.configurations``: the
  pipelines it compares, by name.
- ``tome_quality.measure``, ``tome_quality.format_table``: token merging's
  (``python -m sdaccel.toy.tome_quality``).
- ``sensitivity_quality.measure``, ``sensitivity_quality.format_tables``: the layer groups ranked
  by what full INT8 costs each, and the recipe that keeps the k costliest in float
  (``python -m sdaccel.toy.sensitivity_quality``).
- ``accuracy_control.measure``, ``accuracy_control.format_table``,
  ``accuracy_control.AdherenceValidation``, ``accuracy_control.split_heldout``,
  ``accuracy_control.replay_row``, ``accuracy_control.replayed_search``: NNCF's
  accuracy-controlled INT8 within an adherence bound, and its result replayed as an ignored
  scope (the real-size benchmark's recipe), judged on held-out prompts the search never saw
  (``python -m sdaccel.toy.accuracy_control``).
- ``replayed_recipes.knobs``, ``replayed_recipes.check``, ``replayed_recipes.found_file``,
  ``replayed_recipes.read_found``, ``replayed_recipes.title``, ``replayed_recipes.kept_in_float``,
  ``replayed_recipes.is_replayed``, ``replayed_recipes.kind``, ``replayed_recipes.NAMES``,
  ``replayed_recipes.RECIPE``: what the search and the ranking found on the toy, replayed as the
  ignored scope of full INT8 on a real-size UNet of the same layout (the benchmarks' recipes).
- ``stack_quality.measure``, ``stack_quality.format_table``, ``stack_quality.fastest_within``,
  ``stack_quality.stack_names``, ``stack_quality.recipe_patterns``, ``stack_quality.FLOAT_GROUPS``:
  static shapes, INT8, token merging and DeepCache stacked one by one, each stack's adherence and
  PSNR against f32, and the fastest within a quality bound (``python -m sdaccel.toy.stack_quality``).
- ``runner.score``, ``runner.adherence_row``, ``runner.seeded_row``, ``runner.paired_images``,
  ``runner.seeded_images``, ``runner.format_table``, ``runner.Column``, ``runner.seeded_columns``,
  ``runner.UNET_COLUMNS``: the quality runner every study above calls: one scoring loop over a
  table of named configurations (each makes its images), scored in adherence and PSNR against the
  reference, and the one table writer of their results; ``runner.item_score``,
  ``runner.PSNR_WEIGHT``, ``runner.PSNR_CAP_DB``: one image's adherence plus a capped PSNR term
  (the accuracy-controlled search's validation, notebook 05).
- ``report.finish``: how each of those commands ends: the machine and the command recorded, the
  JSON written whole, the table printed.
"""

from sdaccel.core.names import lazy_names

#: Each public name, under the docstring's headings: name -> the module of the room that defines it.
PUBLIC_NAMES = {
    # The shapes data set
    "make_dataset": "dataset",
    "render": "dataset",
    "caption": "dataset",
    "prompts": "dataset",
    "heldout_prompts": "dataset",
    "heldout_combinations": "dataset",
    "all_combinations": "dataset",
    "classify": "dataset",
    "parse_prompt": "dataset",
    "read_back": "dataset",
    "is_caption": "dataset",
    "ATTRIBUTES": "dataset",
    # Adherence
    "paired_latents": "comparison",
    "uint8_images": "comparison",
    "evaluate": "adherence",
    "vae_decoder_quality": "adherence",
    "quantize_unet": "int8_unets",
    "float_group_ignored": "int8_unets",
    "FLOAT_GROUP_VARIANTS": "int8_unets",
    "FLOAT_GROUP_RECIPES": "int8_unets",
    "adherence_vs_steps": "adherence_steps",
    "plot_adherence": "adherence_steps",
    "openvino_pipe": "adherence_steps",
    "openvino_runner": "adherence_steps",
    "jax_runner": "adherence_steps",
    "pipeline_verdicts": "steps_report",
    "calibrate_on_training_captions": "calibration",
    "configurations": "deepcache_quality",
    "format_tables": "sensitivity_quality",
    "AdherenceValidation": "accuracy_control",
    "split_heldout": "accuracy_control",
    "replay_row": "accuracy_control",
    "replayed_search": "accuracy_control",
    "knobs": "replayed_recipes",
    "check": "replayed_recipes",
    "found_file": "replayed_recipes",
    "read_found": "replayed_recipes",
    "title": "replayed_recipes",
    "kept_in_float": "replayed_recipes",
    "is_replayed": "replayed_recipes",
    "kind": "replayed_recipes",
    "NAMES": "replayed_recipes",
    "RECIPE": "replayed_recipes",
    "fastest_within": "stack_quality",
    "stack_names": "stack_quality",
    "recipe_patterns": "stack_quality",
    "FLOAT_GROUPS": "stack_quality",
    "finish": "report",
    "score": "runner",
    "adherence_row": "runner",
    "seeded_row": "runner",
    "paired_images": "runner",
    "seeded_images": "runner",
    "Column": "runner",
    "seeded_columns": "runner",
    "UNET_COLUMNS": "runner",
    "item_score": "runner",
    "PSNR_WEIGHT": "runner",
    "PSNR_CAP_DB": "runner",
}

#: Public names that several modules define, or that are a module's name too: name -> the modules
#: that define it, each reached through its module (``deepcache_quality.measure``).
SHARED_NAMES = {
    "adherence": ("dataset",),
    "measure": (
        "deepcache_quality",
        "whole_image_quality",
        "tome_quality",
        "sensitivity_quality",
        "accuracy_control",
        "stack_quality",
    ),
    "format_table": (
        "adherence",
        "whole_image_quality",
        "steps_report",
        "deepcache_quality",
        "tome_quality",
        "accuracy_control",
        "stack_quality",
        "runner",
    ),
}

#: The room's modules, each reached as a module too (``from sdaccel.toy import dataset``).
MODULES = (
    "accuracy_control",
    "adherence",
    "adherence_steps",
    "calibration",
    "comparison",
    "dataset",
    "deepcache_quality",
    "int8_unets",
    "replayed_recipes",
    "report",
    "runner",
    "sensitivity_quality",
    "stack_quality",
    "steps_report",
    "tome_quality",
    "whole_image_quality",
)

__all__ = list(PUBLIC_NAMES)
__getattr__, __dir__ = lazy_names(__name__, PUBLIC_NAMES, MODULES)
