"""sdaccel: the helper package behind the "Making Stable Diffusion fast" notebooks, in five rooms.

- ``core``: shared ground, no framework: the pipeline contract, checkpoints, LoRA files, timing, tables.
- ``tpu``: the JAX/TPU track: Flax NNX models, samplers, the JAX and sharded pipelines, compiling.
- ``cpu``: the OpenVINO/CPU track: export, the OpenVINO pipelines, precision, INT8, the speed-ups.
- ``toy``: the toy world: the shapes data set, tiny checkpoints (random and trained), adherence.
- ``course``: running the course: run profiles, notebooks, exercises, doctor, downloads, docs site.

Imports flow one way, course -> toy -> (tpu | cpu) -> core, and tpu and cpu never import each other
(the import-linter contracts of pyproject.toml).
"""

__version__ = "0.1.0"
