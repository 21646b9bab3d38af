"""The workshop's operations: running the notebooks, checking a machine, fetching the hub files,
the hub stand-in for a rehearsal at real size, and the docs site. Each module is a command line
(``python -m sdaccel.tools.workshop.<module>``); importing the package imports none of them.

## Running the notebooks

- :func:`~sdaccel.tools.workshop.run_notebooks.run_all`, :func:`~sdaccel.tools.workshop.run_notebooks.main`
  (:mod:`~sdaccel.tools.workshop.run_notebooks`): execute the notebooks with papermill under a profile
  (``python -m sdaccel.tools.workshop.run_notebooks``).
- :func:`~sdaccel.tools.workshop.discovery.discover`, :func:`~sdaccel.tools.workshop.discovery.select`,
  :func:`~sdaccel.tools.workshop.discovery.needed_tiny_checkpoints`,
  :data:`~sdaccel.tools.workshop.discovery.PROFILE_ENV` (:mod:`~sdaccel.tools.workshop.discovery`): which
  notebooks run, in which order, and the kernels' environment per profile.
- :func:`~sdaccel.tools.workshop.execute.execute`, :func:`~sdaccel.tools.workshop.execute.profile_parameters`,
  :class:`~sdaccel.tools.workshop.execute.NotebookFailed`, :class:`~sdaccel.tools.workshop.execute.Run`
  (:mod:`~sdaccel.tools.workshop.execute`): one notebook through papermill, and a failure that names the cell
  (:func:`~sdaccel.tools.workshop.execute.failed_cell`: the cell that raised, or the last one started when its
  kernel died).
- :class:`~sdaccel.tools.workshop.run_files.RunFiles`, :func:`~sdaccel.tools.workshop.run_files.settle_run`,
  :func:`~sdaccel.tools.workshop.run_files.guard_run`,
  :func:`~sdaccel.tools.workshop.run_files.fresh_output_dir`,
  :func:`~sdaccel.tools.workshop.run_files.found_from_earlier` (:mod:`~sdaccel.tools.workshop.run_files`):
  where a run writes, and a run stopped half-way that leaves the last finished one in place.
- :func:`~sdaccel.tools.workshop.output_checks.noisy_outputs`,
  :func:`~sdaccel.tools.workshop.output_checks.machine_paths`,
  :func:`~sdaccel.tools.workshop.output_checks.banned_phrases`,
  :func:`~sdaccel.tools.workshop.output_checks.cells_without_figures`
  (:mod:`~sdaccel.tools.workshop.output_checks`): what an executed copy shows that a reader would have to
  ignore.
- :func:`~sdaccel.tools.workshop.widget_state.drop_widget_state`,
  :func:`~sdaccel.tools.workshop.widget_state.saved_widget_state`
  (:mod:`~sdaccel.tools.workshop.widget_state`): executed copies without ipywidgets state, each bar as its
  final text.

## Before a workshop

- :func:`~sdaccel.tools.workshop.doctor.run_checks` (:mod:`~sdaccel.tools.workshop.doctor`): the pre-flight check of a
  machine (``python -m sdaccel.tools.workshop.doctor``).
- :func:`sdaccel.tools.workshop.download.download` (:mod:`~sdaccel.tools.workshop.download`): fetches exactly the hub
  files the chosen notebooks read (``python -m sdaccel.tools.workshop.download``). It is not a name of the
  package, whose ``download`` is that module.

## The docs site

- :func:`~sdaccel.tools.workshop.docs_site.build`, :func:`~sdaccel.tools.workshop.docs_site.stage`
  (:mod:`~sdaccel.tools.workshop.docs_site`): the Sphinx site from the executed smoke notebooks
  (``python -m sdaccel.tools.workshop.docs_site``).

## How much the notebooks reach

- :func:`~sdaccel.tools.workshop.reach.reach` (:mod:`~sdaccel.tools.workshop.reach`): the lines of
  every ``sdaccel`` module the notebooks' code reaches, read with ``ast``
  (``python -m sdaccel.tools.workshop.reach``).

## Rehearsing the full profile

- :func:`~sdaccel.tools.workshop.hub_cache.build_hub_cache`, :data:`~sdaccel.tools.workshop.hub_cache.STAND_INS`,
  :func:`~sdaccel.tools.workshop.hub_cache.tiny_configs` (:mod:`~sdaccel.tools.workshop.hub_cache`): a local stand-in
  for the hub, every hub id the notebooks read in a real Hugging Face cache, with the real
  architectures and files and random weights (``python -m sdaccel.tools.workshop.hub_cache``); the
  ``rehearsal`` profile (:data:`~sdaccel.course.run_profiles.REHEARSAL`) runs the notebooks on it.
- :class:`~sdaccel.tools.workshop.memory_watch.MemoryWatch`,
  :class:`~sdaccel.tools.workshop.memory_watch.MemoryPeaks`,
  :func:`~sdaccel.tools.workshop.memory_watch.cell_peaks` (:mod:`~sdaccel.tools.workshop.memory_watch`) and
  :func:`~sdaccel.tools.workshop.run_summary.write_summary`,
  :func:`~sdaccel.tools.workshop.run_summary.format_summary` (:mod:`~sdaccel.tools.workshop.run_summary`):
  each run's wall time and the peak memory of its kernel and of the processes it starts, in
  ``build/<profile>/summary.json`` and ``summary.md``.
"""
