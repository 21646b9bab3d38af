"""Running the course: what the notebooks call, what a profile changes, what each notebook needs before a
workshop and the report code of notebooks 06 and 07.

The names below are this room's public API, listed by the module that defines them. Importing
``sdaccel.course`` imports none of its modules: most of them are command lines too
(``python -m sdaccel.course.<module>``), and some load JAX, PyTorch or OpenVINO when called. Import
a name from its module, as the notebooks do (``from sdaccel.course.run_profiles import start``), or
from the room, which imports its module then. :data:`__all__` lists the names, :data:`PUBLIC_NAMES` each
one's module; a module is reached as a module too (``from sdaccel.course import whole_image``).

## In a notebook

- :func:`~sdaccel.course.run_profiles.start` (:mod:`~sdaccel.course.run_profiles`): the cell after the
  parameters cell; applies the active profile's overrides and says which devices run the notebook.
- :class:`~sdaccel.course.notebook.Results` (:mod:`~sdaccel.course.notebook`): writes what a notebook
  measured to ``OUTPUT_DIR/results.json`` as soon as it is measured; :func:`~sdaccel.course.notebook.quiet`
  silences the libraries' known noise; :func:`~sdaccel.course.notebook.repository_root` finds the
  repository's ``benchmarks/`` (notebook 06 runs them).
- :func:`~sdaccel.course.exercises.check` (:mod:`~sdaccel.course.exercises`): checks an exercise's answer;
  :class:`~sdaccel.course.exercises.ExerciseNotDone` is what it raises for a missing or wrong one;
  :func:`~sdaccel.course.exercises.right_f16`, :func:`~sdaccel.course.exercises.right_second_lora` and
  :func:`~sdaccel.course.exercises.right_lcm_step` are the checks of exercises 04.3, 07.2 and 07.3, which
  compile or run the learner's answer, and
  :func:`~sdaccel.course.exercises.right_unet_timing` exercise 06.2's, which times the learner's UNet, and
  :func:`~sdaccel.course.exercises.right_fastest_stack` the appendix 06b's 06b.1;
  :func:`~sdaccel.course.exercises.right_timing_loop` exercise 03.1's, which times stand-ins with the
  learner's loop, and :func:`~sdaccel.course.exercises.right_static_unet` exercise 04.2's, which reads
  the learner's compiled static UNet;
  :func:`~sdaccel.course.exercises.right_device_noise` is exercise 02.1's, which draws the learner's
  ``fold_in`` noise;
  :func:`~sdaccel.course.exercises.same` is its comparison (numbers within a tolerance, sequences
  item by item), for a check that tests an answer of its own (``check(..., test=...)``).
- :func:`~sdaccel.course.colab.install` (:mod:`~sdaccel.course.colab`): what the first code cell,
  :data:`~sdaccel.course.notebook.SETUP_CELL`, fetches and runs where ``sdaccel`` is not installed: on
  Colab it installs the course and restarts the runtime when it must; anywhere else it names the
  README's steps and changes nothing (``python -m sdaccel.course.colab``).

## Running the notebooks

- :func:`~sdaccel.course.run_profiles.overrides` and :data:`~sdaccel.course.run_profiles.KERNEL_ENV`: what
  a profile changes (``python -m sdaccel.course.run_profiles lab`` starts Jupyter with it).
- :func:`~sdaccel.course.exercises.strip`: the attendee copies, solutions removed
  (``python -m sdaccel.course.exercises strip``).

## Before a workshop

- :data:`~sdaccel.course.resources.NOTEBOOKS`, :data:`~sdaccel.course.resources.MODELS`,
  :func:`~sdaccel.course.resources.models_for`, :func:`~sdaccel.course.resources.totals`,
  :func:`~sdaccel.course.resources.disk_shortfall` (:mod:`~sdaccel.course.resources`): what each
  notebook needs (memory, disk, hub files), read by both.

## Reports of notebooks 06 and 07

- :mod:`~sdaccel.course.whole_image` (notebook 06, ``benchmarks/bench_whole_image.py``):
  :func:`~sdaccel.course.whole_image.time_calls`, :func:`~sdaccel.course.whole_image.summarize`,
  :func:`~sdaccel.course.whole_image.compose`, :func:`~sdaccel.course.whole_image.read_table`,
  :func:`~sdaccel.course.whole_image.reference_files`, :func:`~sdaccel.course.whole_image.findings`,
  :func:`~sdaccel.course.whole_image.segments`, :func:`~sdaccel.course.whole_image.format_table`,
  :func:`~sdaccel.course.whole_image.read_quality` (each recipe's adherence on the trained toy, beside
  its seconds), :func:`~sdaccel.course.whole_image.heading`, :func:`~sdaccel.course.whole_image.describe`,
  :func:`~sdaccel.course.whole_image.model_name`, :func:`~sdaccel.course.whole_image.markdown_table`
  (how the notebook reads a table out); the benchmark's rows are :data:`~sdaccel.course.whole_image_rows.ROWS`, a recipe's
  key :func:`~sdaccel.course.whole_image_rows.recipe_key`.
- :mod:`~sdaccel.course.cpu_benchmark` (notebook 06's steps, one call each):
  :func:`~sdaccel.course.cpu_benchmark.benchmark_command` and :func:`~sdaccel.course.cpu_benchmark.run_benchmark`
  (the per-step benchmark, run quietly), :func:`~sdaccel.course.cpu_benchmark.step_table`,
  :func:`~sdaccel.course.cpu_benchmark.claimed_and_measured` and :func:`~sdaccel.course.cpu_benchmark.amx_int8_gain`
  (the Intel post beside the committed runs), :func:`~sdaccel.course.cpu_benchmark.baseline_spread` and
  :func:`~sdaccel.course.cpu_benchmark.spread_sentence` (PyTorch fp32 across the committed runs),
  :func:`~sdaccel.course.cpu_benchmark.price_report` (images per dollar, one table per job); the
  whole-image files of notebook 06 and of its appendix 06b: :data:`~sdaccel.course.whole_image.CORE_FILES`,
  :data:`~sdaccel.course.whole_image.APPENDIX_FILES`.
- :mod:`~sdaccel.course.stack_report` (notebook 06b): :func:`~sdaccel.course.stack_report.join`,
  :func:`~sdaccel.course.stack_report.fastest`, :func:`~sdaccel.course.stack_report.markdown`: each
  stack of levers with its adherence on the trained toy beside its seconds per step on a real UNet;
  :func:`~sdaccel.course.stack_report.join_runs`: several chains of levers in one table;
  :func:`~sdaccel.course.stack_report.reference_run`: the repository's measured run on the reader's ISA tier.
- :mod:`~sdaccel.course.few_steps` (notebook 07): :func:`~sdaccel.course.few_steps.time_images`,
  :func:`~sdaccel.course.few_steps.speed_rows`, :func:`~sdaccel.course.few_steps.format_speed`,
  :func:`~sdaccel.course.few_steps.lever_costs`, :func:`~sdaccel.course.few_steps.format_costs`,
  :func:`~sdaccel.course.few_steps.decoder_cost`, :func:`~sdaccel.course.few_steps.faster`;
  :func:`~sdaccel.course.few_steps.parameters`, :func:`~sdaccel.course.few_steps.shapes_toy`,
  :func:`~sdaccel.course.few_steps.use_scheduler` (the pipelines it times);
  :func:`~sdaccel.course.few_steps.adapter_rows`, :func:`~sdaccel.course.few_steps.adapter_gain`,
  :func:`~sdaccel.course.few_steps.format_adapter_gain` (what the LCM-LoRA adds to the LCM sampler).

## The demo of notebook 07

- :class:`~sdaccel.course.demo.Demo`, :func:`~sdaccel.course.demo.settings_for`,
  :func:`~sdaccel.course.demo.app`, :func:`~sdaccel.course.demo.launch`,
  :class:`~sdaccel.course.demo.Settings`, :func:`~sdaccel.course.demo.enlarged` (:mod:`~sdaccel.course.demo`):
  type a prompt, choose the steps, INT8, LCM-LoRA and TAESD, and see the picture and its seconds on the
  OpenVINO pipeline; a gradio app served on this machine (``python -m sdaccel.course.demo``) or inline
  in the notebook (Jupyter and Colab).
"""

from sdaccel.core.names import lazy_names

#: Each public name, under the docstring's headings: name -> the module of the room that defines it.
PUBLIC_NAMES = {
    # In a notebook
    "start": "run_profiles",
    "Results": "notebook",
    "quiet": "notebook",
    "repository_root": "notebook",
    "check": "exercises",
    "ExerciseNotDone": "exercises",
    "same": "exercises",
    "right_f16": "exercises",
    "right_lcm_step": "exercises",
    "right_device_noise": "exercises",
    "right_timing_loop": "exercises",
    "right_static_unet": "exercises",
    "right_second_lora": "exercises",
    "right_unet_timing": "exercises",
    "right_fastest_stack": "exercises",
    "install": "colab",
    "SETUP_CELL": "notebook",
    # Running the notebooks
    "overrides": "run_profiles",
    "KERNEL_ENV": "run_profiles",
    "strip": "exercises",
    # Before a workshop
    "NOTEBOOKS": "resources",
    "MODELS": "resources",
    "models_for": "resources",
    "totals": "resources",
    "disk_shortfall": "resources",
    # Reports of notebooks 06 and 07
    "time_calls": "whole_image",
    "summarize": "whole_image",
    "compose": "whole_image",
    "read_table": "whole_image",
    "reference_files": "whole_image",
    "findings": "whole_image",
    "segments": "whole_image",
    "format_table": "whole_image",
    "read_quality": "whole_image",
    "heading": "whole_image",
    "describe": "whole_image",
    "model_name": "whole_image",
    "markdown_table": "whole_image",
    "CORE_FILES": "whole_image",
    "APPENDIX_FILES": "whole_image",
    "benchmark_command": "cpu_benchmark",
    "run_benchmark": "cpu_benchmark",
    "step_table": "cpu_benchmark",
    "claimed_and_measured": "cpu_benchmark",
    "amx_int8_gain": "cpu_benchmark",
    "baseline_spread": "cpu_benchmark",
    "spread_sentence": "cpu_benchmark",
    "price_report": "cpu_benchmark",
    "ROWS": "whole_image_rows",
    "recipe_key": "whole_image_rows",
    "join": "stack_report",
    "fastest": "stack_report",
    "markdown": "stack_report",
    "join_runs": "stack_report",
    "reference_run": "stack_report",
    "time_images": "few_steps",
    "speed_rows": "few_steps",
    "format_speed": "few_steps",
    "lever_costs": "few_steps",
    "format_costs": "few_steps",
    "decoder_cost": "few_steps",
    "faster": "few_steps",
    "parameters": "few_steps",
    "shapes_toy": "few_steps",
    "use_scheduler": "few_steps",
    "adapter_rows": "few_steps",
    "adapter_gain": "few_steps",
    "format_adapter_gain": "few_steps",
    # The demo of notebook 07
    "Demo": "demo",
    "settings_for": "demo",
    "app": "demo",
    "launch": "demo",
    "Settings": "demo",
    "enlarged": "demo",
}

#: The room's modules, each reached as a module too (``from sdaccel.course import whole_image``).
MODULES = (
    "colab",
    "cpu_benchmark",
    "demo",
    "exercises",
    "few_steps",
    "notebook",
    "resources",
    "run_profiles",
    "stack_report",
    "whole_image",
    "whole_image_rows",
)

__all__ = list(PUBLIC_NAMES)
__getattr__, __dir__ = lazy_names(__name__, PUBLIC_NAMES, MODULES)
