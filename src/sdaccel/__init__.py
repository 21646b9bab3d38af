"""sdaccel: the helper package behind the "Making Stable Diffusion fast" notebooks.

- ``sdaccel.core.checkpoint``: find a diffusers checkpoint and read its safetensors without PyTorch.
- ``sdaccel.tpu.models``: SDXL / SD 1.x / 2.x in Flax NNX (UNet, VAE, CLIP text encoders).
- ``sdaccel.tpu.schedulers``: Euler and DDIM schedulers as pure JAX functions.
- ``sdaccel.toy.random_checkpoints``: random-weight tiny checkpoints in the diffusers layout, for tests and smoke runs.
"""

__version__ = "0.1.0"
