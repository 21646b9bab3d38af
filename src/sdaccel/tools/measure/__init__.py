"""Measuring the OpenVINO track beside the course: the pieces that ``benchmarks/bench_openvino.py``
(and the other CPU benchmarks) run, each timing or export in a child process of its own. The UNet
they measure, its inputs and its export are :mod:`sdaccel.cpu.random_unet` (notebook 06 uses them);
the machine record is :mod:`sdaccel.cpu.machine`. Importing the package imports none of its modules.

## Models and exports

- ``models.label``, ``models.vae_config``, ``models.vae_latents``, ``models.synthetic_calibration``,
  ``models.PIPELINE_PARTS``, ``models.VAE_VARIANTS``, ``models.FLOAT_VARIANTS``: what is measured
  beside the UNet.
- ``exports.export_deepcache_shallow``, ``exports.export_tome_ir``, ``exports.export_vae_decoder``,
  ``exports.export_random_component``, ``exports.ir_parameters``: the exports (children).

## Timing (children)

- ``timing.time_wall_and_cpu``, ``timing.time_torch``, ``timing.time_openvino``, ``timing.time_tome``,
  ``timing.choose_unet_precision``, ``timing.time_lever``, ``timing.time_vae``,
  ``timing.time_torch_vae``, ``timing.quality_levers``.

## Running children, and the results

- ``children.run_child``, ``children.summarize_run``, ``children.wait_for_memory``,
  ``children.free_gb``, ``children.quantize_vae_child``, ``children.choose_precision_child``.
- ``speedups.add_speedups``, ``speedups.add_whole_image``, ``speedups.compose_stack``,
  ``speedups.STACK_ARMS``, ``speedups.STACK_INT8_ARMS``, ``speedups.STACK_LAYER_ARM``: the results
  composed.
- ``tables.results_table``, ``tables.lever_lines``, ``tables.tome_lines``, ``tables.stack_lines``,
  ``tables.quality_lines``, ``tables.fmt``: the results as a text table.

## The TPU plan (the JAX track)

- ``tpu_plan``: the command line ``python -m sdaccel.tools.measure.tpu_plan`` that compiles many
  cases for Cloud TPU slices and writes the committed plan files (``benchmarks/results/tpu_plan_*``):
  ``tpu_plan.main``, ``tpu_plan.parse_args``, ``tpu_plan.cases``, ``tpu_plan.finished_rows``,
  ``tpu_plan.plan_row``, ``tpu_plan.journal_path``, ``tpu_plan.save_row``, ``tpu_plan.saved_rows``,
  ``tpu_plan.COMMAND``.
- ``tpu_plan_table.COLUMNS``, ``tpu_plan_table.table_row``, ``tpu_plan_table.markdown``,
  ``tpu_plan_table.print_table``: its table, printed and written as Markdown.
"""
