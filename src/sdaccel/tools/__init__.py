"""What runs beside the course, not what it teaches: measuring (:mod:`sdaccel.tools.measure`: the
benchmarks' timings in child processes, their speed-ups and tables, the TPU plan's command line),
making the tiny checkpoints (:mod:`sdaccel.tools.toys`), and the workshop's operations (:mod:`sdaccel.tools.workshop`: the notebook
runner, the pre-flight doctor, the downloads, the hub stand-in and the docs site).

The notebooks import nothing from here, and the API pages leave it out. Nothing in the course's
rooms (``core``, ``tpu``, ``cpu``, ``toy``, ``course``) imports it: the arrows point from here down
(pyproject.toml's import-linter contracts).
"""
