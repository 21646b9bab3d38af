"""The workshop's operations: running the notebooks, checking a machine, fetching the hub files,
the hub stand-in for a rehearsal at real size, and the docs site. Each module is a command line
(``python -m sdaccel.tools.workshop.<module>``); importing the package imports none of them.

## Running the notebooks

- :func:`~sdaccel.tools.workshop.run_notebooks.run_all`, :func:`~sdaccel.tools.workshop.run_notebooks.execute`,
  :func:`~sdaccel.tools.workshop.run_notebooks.discover` (:mod:`~sdaccel.tools.workshop.run_notebooks`): execute the
  notebooks with papermill under a profile (``python -m sdaccel.tools.workshop.run_notebooks``).

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

## Rehearsing the full profile

- :func:`~sdaccel.tools.workshop.hub_cache.build_hub_cache`, :data:`~sdaccel.tools.workshop.hub_cache.STAND_INS`,
  :func:`~sdaccel.tools.workshop.hub_cache.tiny_configs` (:mod:`~sdaccel.tools.workshop.hub_cache`): a local stand-in
  for the hub, every hub id the notebooks read in a real Hugging Face cache, with the real
  architectures and files and random weights (``python -m sdaccel.tools.workshop.hub_cache``); the
  ``rehearsal`` profile (:data:`~sdaccel.course.run_profiles.REHEARSAL`) runs the notebooks on it.
- :class:`~sdaccel.tools.workshop.run_notebooks.MemoryWatch`, :func:`~sdaccel.tools.workshop.run_notebooks.write_summary`:
  each run's wall time and the peak memory of its kernel and of the processes it starts, in
  ``build/<profile>/summary.json`` and ``summary.md``; :func:`~sdaccel.tools.workshop.run_notebooks.failed_cell`:
  where a failed run stopped (the cell that raised, or the last one started when its kernel died).
"""
