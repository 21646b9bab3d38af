"""The Euler, DDIM, Euler ancestral and LCM samplers of diffusers, as pure JAX functions that run
inside ``jax.jit``.

A diffusers scheduler is a stateful object: ``set_timesteps`` fills arrays, and every ``step``
advances a hidden counter. That does not fit in a compiled loop, so here the two halves are split:

1. ``scheduler.set_timesteps(n)`` runs once on the host, in numpy (the schedule depends only on
   ``n`` and the config), and returns a frozen *state*: a small pytree of arrays, one entry per
   step (the timesteps the UNet sees, the noise levels).
2. ``scheduler.scale_model_input(state, sample, i)`` and ``scheduler.step(state, model_output, i,
   sample)`` are pure functions of the state and the step *index* ``i``, which may be a traced
   integer from ``jax.lax.fori_loop``. Nothing is mutated; the loop carries only the latents.

The scheduler objects are frozen dataclasses around their config, hashable, so they can be closed
over (or passed as static arguments) by a jitted function. All reproduce diffusers (same float32
arithmetic, in the same order); ``tests/tpu/test_schedulers.py`` checks them step by step against
``diffusers.EulerDiscreteScheduler``, ``DDIMScheduler``, ``EulerAncestralDiscreteScheduler`` and
``LCMScheduler``.

Two of them are *stochastic*: Euler ancestral (SDXL-Turbo's sampler) and LCM add fresh noise at
every step. Their ``step`` takes that noise as an argument, ``step(state, out, i, sample,
noise=...)``, rather than a random key, so that the caller decides how it is drawn: the
pipelines draw it per image index, as the initial noise (:func:`sdaccel.tpu.pipeline.step_noise`),
so that an image does not depend on how a batch is split. ``scheduler.stochastic`` says which.

The noise schedule both share: ``betas`` (the variance added per training step) give
``alphas_cumprod[t] = prod(1 - betas[:t+1])``, the fraction of signal left at timestep ``t``; a
noisy latent is ``x_t = sqrt(alphas_cumprod[t]) x_0 + sqrt(1 - alphas_cumprod[t]) noise``.

- Euler (SDXL's default) works with ``sigma_t = sqrt((1 - a_t) / a_t)``, the noise-to-signal
  ratio, on the rescaled latent ``x_t / sqrt(a_t) = x_0 + sigma_t noise``; one step is one Euler
  step of the probability-flow ODE ``dx/dsigma = (x - x_0) / sigma``.
- DDIM (with ``eta = 0``) predicts ``x_0`` and the noise, then re-noises ``x_0`` to the previous
  timestep's level deterministically.
- Euler ancestral takes a smaller Euler step, then adds fresh noise back up to the next level.
- LCM (latent consistency) predicts the clean latent at every step and re-noises it with fresh
  noise to the next timestep's level: 2-8 steps with a consistency-distilled UNet.

``from_config`` picks the class from a ``scheduler_config.json``; schedulers that are not
implemented here (SD 1.5 ships ``PNDMScheduler``) fall back to Euler with the same betas, with a
warning that names what runs.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from sdaccel.core.contract import scheduler_class_name

# ----------------------------------------------------------------------------------------------
# The training noise schedule (shared)
# ----------------------------------------------------------------------------------------------


def _cosine_betas(num_train_timesteps: int, max_beta: float = 0.999) -> np.ndarray:
    """``squaredcos_cap_v2``: the betas of the cosine schedule of "Improved DDPM" (Nichol & Dhariwal)."""

    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    steps = range(num_train_timesteps)
    betas = [
        min(1 - alpha_bar((i + 1) / num_train_timesteps) / alpha_bar(i / num_train_timesteps), max_beta)
        for i in steps
    ]
    return np.asarray(betas, np.float32)


def make_betas(config) -> np.ndarray:
    """The ``num_train_timesteps`` betas of a config, in float32 as diffusers computes them."""
    n = config.num_train_timesteps
    if config.trained_betas is not None:
        return np.asarray(config.trained_betas, np.float32)
    if config.beta_schedule == "linear":
        return np.linspace(config.beta_start, config.beta_end, n).astype(np.float32)
    if config.beta_schedule == "scaled_linear":  # linear in sqrt(beta): the latent-diffusion schedule
        return np.linspace(config.beta_start**0.5, config.beta_end**0.5, n).astype(np.float32) ** 2
    if config.beta_schedule == "squaredcos_cap_v2":
        return _cosine_betas(n)
    raise NotImplementedError(
        f"beta_schedule {config.beta_schedule!r} is not implemented; use 'linear', 'scaled_linear', "
        "'squaredcos_cap_v2' or trained_betas."
    )


def alphas_cumprod(config) -> np.ndarray:
    """``prod(1 - beta)`` up to each training timestep (float32): the signal fraction left at ``t``."""
    return np.cumprod(1.0 - make_betas(config), dtype=np.float32)


def _config_from_dict(cls, d: dict):
    """Build a config dataclass from a ``scheduler_config.json`` dict, ignoring unknown keys
    (``_class_name``, fields of other schedulers) so that any diffusers config can be read."""
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in d.items() if k in names}
    if kwargs.get("trained_betas") is not None:
        kwargs["trained_betas"] = tuple(float(b) for b in kwargs["trained_betas"])
    config = cls(**kwargs)
    config.validate()
    return config


def _spaced_timesteps(config, n: int) -> np.ndarray:
    """The ``n`` training timesteps to visit, from noisiest to cleanest, as float64.

    ``timestep_spacing`` follows Table 2 of "Common Diffusion Noise Schedules and Sample Steps are
    Flawed" (Lin et al.), with N = num_train_timesteps:

    - ``leading``: ``0, N//n, 2N//n, ...`` reversed, plus ``steps_offset`` (SD and SDXL use 1).
      The first step is 1000 - N//n + 1, so the noisiest timestep is never visited.
    - ``trailing``: ``N-1, N-1-N/n, ...`` rounded: starts at the noisiest timestep.
    - ``linspace``: ``n`` evenly spaced values from ``N-1`` to 0 (not rounded for Euler).
    """
    N = config.num_train_timesteps
    if config.timestep_spacing == "linspace":
        return np.linspace(0, N - 1, n)[::-1].copy()
    if config.timestep_spacing == "leading":
        return (np.arange(0, n) * (N // n)).round()[::-1].astype(np.float64) + config.steps_offset
    if config.timestep_spacing == "trailing":
        return np.arange(N, 0, -N / n).round() - 1
    raise ValueError(
        f"timestep_spacing {config.timestep_spacing!r}: use 'linspace', 'leading' or 'trailing'."
    )


def _check_steps(config, n: int) -> None:
    if not 1 <= n <= config.num_train_timesteps:
        raise ValueError(f"num_inference_steps must be in 1..{config.num_train_timesteps}, got {n}.")


# ----------------------------------------------------------------------------------------------
# Euler (EulerDiscreteScheduler)
# ----------------------------------------------------------------------------------------------


def _check_options(scheduler: str, config, unsupported: dict, predictions: tuple[str, ...]) -> None:
    """Refuse what sdaccel does not implement: ``unsupported`` maps a config field to the only value
    implemented; ``predictions`` are the prediction types the scheduler supports."""
    for name, supported in unsupported.items():
        value = getattr(config, name)
        if value != supported:
            raise NotImplementedError(
                f"{scheduler}: {name}={value!r} is not implemented in sdaccel (only {supported!r}). "
                "Set it to the default in the scheduler config, or use diffusers for this option."
            )
    if config.prediction_type not in predictions:
        raise ValueError(
            f"{scheduler}: prediction_type {config.prediction_type!r}: use "
            + " or ".join(repr(p) for p in predictions)
            + "."
        )


@dataclasses.dataclass(frozen=True)
class EulerDiscreteConfig:
    """The fields of diffusers' ``EulerDiscreteScheduler`` config, with its defaults."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.0001
    beta_end: float = 0.02
    beta_schedule: str = "linear"
    trained_betas: tuple[float, ...] | None = None
    prediction_type: str = "epsilon"
    interpolation_type: str = "linear"
    use_karras_sigmas: bool = False
    use_exponential_sigmas: bool = False
    use_beta_sigmas: bool = False
    sigma_min: float | None = None
    sigma_max: float | None = None
    timestep_spacing: str = "linspace"
    timestep_type: str = "discrete"
    steps_offset: int = 0
    rescale_betas_zero_snr: bool = False
    final_sigmas_type: str = "zero"

    def validate(self) -> None:
        unsupported = {
            "interpolation_type": "linear",
            "use_exponential_sigmas": False,
            "use_beta_sigmas": False,
            "timestep_type": "discrete",
            "rescale_betas_zero_snr": False,
        }
        _check_options("EulerDiscreteScheduler", self, unsupported, ("epsilon", "v_prediction", "sample"))
        if self.final_sigmas_type not in ("zero", "sigma_min"):
            raise ValueError(f"final_sigmas_type {self.final_sigmas_type!r}: use 'zero' or 'sigma_min'.")
        make_betas(self)  # fails early on an unknown beta_schedule


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EulerState:
    """The schedule of one Euler run of ``n`` steps (all float32).

    timesteps: (n,) the timestep the UNet is told at each step (fractional for ``linspace``).
    sigmas: (n + 1,) the noise level at each step, then the final one (0).
    init_noise_sigma: () the standard deviation of the initial latents: pure noise at
      ``sigmas[0]``, i.e. ``sigma`` for ``linspace``/``trailing`` and ``sqrt(sigma**2 + 1)``
      for ``leading`` (diffusers' convention, kept for parity).
    """

    timesteps: jax.Array
    sigmas: jax.Array
    init_noise_sigma: jax.Array


def _sigma_to_t(sigmas: np.ndarray, log_sigmas: np.ndarray) -> np.ndarray:
    """The fractional training timesteps of arbitrary ``sigmas`` (linear in log sigma)."""
    log_sigma = np.log(np.maximum(sigmas, 1e-10))
    dists = log_sigma[None, :] - log_sigmas[:, None]
    low = np.cumsum(dists >= 0, axis=0).argmax(axis=0).clip(max=log_sigmas.shape[0] - 2)
    w = np.clip((log_sigmas[low] - log_sigma) / (log_sigmas[low] - log_sigmas[low + 1]), 0, 1)
    return (1 - w) * low + w * (low + 1)


def _interpolated_sigmas(config, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(timesteps, sigmas, train_sigmas)`` of an ``n``-step Euler-family run: the spaced
    timesteps (float32) and their noise levels, linearly interpolated between the training ones."""
    _check_steps(config, n)
    ac = alphas_cumprod(config)
    train_sigmas = ((1 - ac) / ac) ** 0.5  # float32, one per training timestep
    timesteps = _spaced_timesteps(config, n).astype(np.float32)
    return timesteps, np.interp(timesteps, np.arange(len(train_sigmas)), train_sigmas), train_sigmas


def _euler_state(config, timesteps: np.ndarray, sigmas: np.ndarray, final: float) -> EulerState:
    """The state of an Euler-family run: ``final`` appended to the sigmas, and the initial noise
    scale by diffusers' convention (see :class:`EulerState`)."""
    sigmas = np.concatenate([sigmas, [final]]).astype(np.float32)
    max_sigma = sigmas.max()
    init = max_sigma if config.timestep_spacing in ("linspace", "trailing") else (max_sigma**2 + 1) ** 0.5
    return EulerState(jnp.asarray(timesteps), jnp.asarray(sigmas), jnp.asarray(init, jnp.float32))


def _predicted_original(prediction_type: str, model_output, sample, sigma):
    """``x0`` predicted from a model output at noise level ``sigma`` (Euler's rescaled latents)."""
    if prediction_type == "epsilon":
        return sample - sigma * model_output
    if prediction_type == "v_prediction":
        return model_output * (-sigma / (sigma**2 + 1) ** 0.5) + sample / (sigma**2 + 1)
    return model_output  # "sample"


@dataclasses.dataclass(frozen=True)
class EulerDiscreteScheduler:
    """Euler's method on the probability-flow ODE of the diffusion (k-diffusion's ``sample_euler``).

    With ``d = (x - x0_pred) / sigma`` (for epsilon prediction, ``d`` is the predicted noise),
    one step is ``x <- x + d * (sigma_next - sigma)``. The UNet sees ``x / sqrt(sigma**2 + 1)``,
    which is the DDPM-scaled latent it was trained on.
    """

    config: EulerDiscreteConfig = EulerDiscreteConfig()
    order = 1
    stochastic = False  # step() takes no noise

    @classmethod
    def from_config(cls, d: dict) -> EulerDiscreteScheduler:
        return cls(_config_from_dict(EulerDiscreteConfig, d))

    def set_timesteps(self, num_inference_steps: int) -> EulerState:
        """The state for a run of ``num_inference_steps`` steps (host-side numpy, then arrays)."""
        cfg = self.config
        timesteps, sigmas, train_sigmas = _interpolated_sigmas(cfg, num_inference_steps)
        if cfg.use_karras_sigmas:
            # Karras et al. (EDM): sigmas evenly spaced in sigma**(1/7), denser near sigma_min.
            # The timesteps given to the UNet follow from the sigmas, by interpolation.
            sigma_min = cfg.sigma_min if cfg.sigma_min is not None else float(sigmas[-1])
            sigma_max = cfg.sigma_max if cfg.sigma_max is not None else float(sigmas[0])
            rho = 7.0
            ramp = np.linspace(0, 1, num_inference_steps)
            sigmas = (
                sigma_max ** (1 / rho) + ramp * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))
            ) ** rho
            timesteps = _sigma_to_t(sigmas, np.log(train_sigmas)).astype(np.float32)
        final = train_sigmas[0] if cfg.final_sigmas_type == "sigma_min" else 0.0
        return _euler_state(cfg, timesteps, sigmas, final)

    def scale_model_input(self, state: EulerState, sample: jax.Array, step: int | jax.Array) -> jax.Array:
        """``sample / sqrt(sigma**2 + 1)``: the latent at the scale the UNet was trained on."""
        sigma = state.sigmas[step]
        return sample / ((sigma**2 + 1) ** 0.5).astype(sample.dtype)

    def step(
        self, state: EulerState, model_output: jax.Array, step: int | jax.Array, sample: jax.Array
    ) -> jax.Array:
        """One Euler step from ``sigmas[step]`` to ``sigmas[step + 1]``, computed in float32.

        Returns the float32 latents of the next step (diffusers casts back to the UNet dtype;
        keeping the loop's latents in float32 is the more accurate choice in bfloat16).
        """
        sample = sample.astype(jnp.float32)
        model_output = model_output.astype(jnp.float32)
        sigma, sigma_next = state.sigmas[step], state.sigmas[step + 1]
        pred_original = _predicted_original(self.config.prediction_type, model_output, sample, sigma)
        derivative = (sample - pred_original) / sigma
        return sample + derivative * (sigma_next - sigma)


# ----------------------------------------------------------------------------------------------
# DDIM (DDIMScheduler, eta = 0)
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DDIMConfig:
    """The fields of diffusers' ``DDIMScheduler`` config, with its defaults."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.0001
    beta_end: float = 0.02
    beta_schedule: str = "linear"
    trained_betas: tuple[float, ...] | None = None
    clip_sample: bool = True
    set_alpha_to_one: bool = True
    steps_offset: int = 0
    prediction_type: str = "epsilon"
    thresholding: bool = False
    dynamic_thresholding_ratio: float = 0.995
    clip_sample_range: float = 1.0
    sample_max_value: float = 1.0
    timestep_spacing: str = "leading"
    rescale_betas_zero_snr: bool = False

    def validate(self) -> None:
        unsupported = {"thresholding": False, "rescale_betas_zero_snr": False}
        _check_options("DDIMScheduler", self, unsupported, ("epsilon", "v_prediction", "sample"))
        make_betas(self)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DDIMState:
    """The schedule of one DDIM run of ``n`` steps.

    timesteps: (n,) int32, the timestep the UNet is told at each step.
    alpha_prod: (n,) float32, ``alphas_cumprod`` at each step's timestep.
    alpha_prod_prev: (n,) float32, the same at the timestep the step lands on,
      ``t - num_train_timesteps // n`` (diffusers' rule, for every spacing), or the final
      ``alphas_cumprod`` (1 with ``set_alpha_to_one``, else ``alphas_cumprod[0]``) past 0.
    init_noise_sigma: () 1: DDIM works on the DDPM-scaled latents directly.
    """

    timesteps: jax.Array
    alpha_prod: jax.Array
    alpha_prod_prev: jax.Array
    init_noise_sigma: jax.Array


@dataclasses.dataclass(frozen=True)
class DDIMScheduler:
    """Denoising Diffusion Implicit Models (Song et al.), deterministic (``eta = 0``).

    From the model output it predicts the clean latent ``x0`` and the noise ``eps``, then lands on
    the previous timestep ``t'`` as ``sqrt(a_t') x0 + sqrt(1 - a_t') eps``.
    """

    config: DDIMConfig = DDIMConfig()
    order = 1
    stochastic = False

    @classmethod
    def from_config(cls, d: dict) -> DDIMScheduler:
        return cls(_config_from_dict(DDIMConfig, d))

    def set_timesteps(self, num_inference_steps: int) -> DDIMState:
        cfg = self.config
        _check_steps(cfg, num_inference_steps)
        ac = alphas_cumprod(cfg)
        if cfg.timestep_spacing == "linspace":
            timesteps = _spaced_timesteps(cfg, num_inference_steps).round().astype(np.int64)
        else:
            timesteps = _spaced_timesteps(cfg, num_inference_steps).astype(np.int64)
        prev = timesteps - cfg.num_train_timesteps // num_inference_steps
        final = np.float32(1.0) if cfg.set_alpha_to_one else ac[0]
        alpha_prod_prev = np.where(prev >= 0, ac[np.maximum(prev, 0)], final).astype(np.float32)
        return DDIMState(
            jnp.asarray(timesteps, jnp.int32),
            jnp.asarray(ac[timesteps]),
            jnp.asarray(alpha_prod_prev),
            jnp.asarray(1.0, jnp.float32),
        )

    def scale_model_input(self, state: DDIMState, sample: jax.Array, step: int | jax.Array) -> jax.Array:
        """DDIM needs no input scaling."""
        return sample

    def step(
        self, state: DDIMState, model_output: jax.Array, step: int | jax.Array, sample: jax.Array
    ) -> jax.Array:
        """One deterministic DDIM step, computed and returned in float32."""
        cfg = self.config
        sample = sample.astype(jnp.float32)
        model_output = model_output.astype(jnp.float32)
        alpha_prod_t, alpha_prod_prev = state.alpha_prod[step], state.alpha_prod_prev[step]
        beta_prod_t = 1 - alpha_prod_t
        if cfg.prediction_type == "epsilon":
            pred_original = (sample - beta_prod_t**0.5 * model_output) / alpha_prod_t**0.5
            pred_epsilon = model_output
        elif cfg.prediction_type == "v_prediction":
            pred_original = alpha_prod_t**0.5 * sample - beta_prod_t**0.5 * model_output
            pred_epsilon = alpha_prod_t**0.5 * model_output + beta_prod_t**0.5 * sample
        else:  # "sample"
            pred_original = model_output
            pred_epsilon = (sample - alpha_prod_t**0.5 * pred_original) / beta_prod_t**0.5
        if cfg.clip_sample:
            pred_original = jnp.clip(pred_original, -cfg.clip_sample_range, cfg.clip_sample_range)
        return alpha_prod_prev**0.5 * pred_original + (1 - alpha_prod_prev) ** 0.5 * pred_epsilon


# ----------------------------------------------------------------------------------------------
# Euler ancestral (EulerAncestralDiscreteScheduler)
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EulerAncestralDiscreteConfig:
    """The fields of diffusers' ``EulerAncestralDiscreteScheduler`` config, with its defaults."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.0001
    beta_end: float = 0.02
    beta_schedule: str = "linear"
    trained_betas: tuple[float, ...] | None = None
    prediction_type: str = "epsilon"
    timestep_spacing: str = "linspace"
    steps_offset: int = 0
    rescale_betas_zero_snr: bool = False

    def validate(self) -> None:
        # diffusers implements no other prediction type for this scheduler
        _check_options(
            "EulerAncestralDiscreteScheduler",
            self,
            {"rescale_betas_zero_snr": False},
            ("epsilon", "v_prediction"),
        )
        make_betas(self)


@dataclasses.dataclass(frozen=True)
class EulerAncestralDiscreteScheduler:
    """Euler ancestral sampling (k-diffusion's ``sample_euler_ancestral``), SDXL-Turbo's sampler.

    Each step splits the way from ``sigma`` to ``sigma_next`` in two: a deterministic Euler step
    down to ``sigma_down = sqrt(sigma_next**2 - sigma_up**2)``, then fresh noise of standard
    deviation ``sigma_up = sigma_next * sqrt(1 - sigma_next**2 / sigma**2)`` back up to
    ``sigma_next``. So part of the noise is *replaced* at every step rather than followed: the
    result depends on the noise of every step, not only on the initial latents.

    The state is Euler's (:class:`EulerState`, the same timesteps and sigmas); ``step`` takes
    the step's standard-normal ``noise`` (the pipelines draw it per image, see
    :func:`sdaccel.tpu.pipeline.step_noise`).
    """

    config: EulerAncestralDiscreteConfig = EulerAncestralDiscreteConfig()
    order = 1
    stochastic = True  # step() adds the noise it is given

    @classmethod
    def from_config(cls, d: dict) -> EulerAncestralDiscreteScheduler:
        return cls(_config_from_dict(EulerAncestralDiscreteConfig, d))

    def set_timesteps(self, num_inference_steps: int) -> EulerState:
        """The state for a run of ``num_inference_steps`` steps: Euler's schedule, final sigma 0."""
        timesteps, sigmas, _ = _interpolated_sigmas(self.config, num_inference_steps)
        return _euler_state(self.config, timesteps, sigmas, 0.0)

    def scale_model_input(self, state: EulerState, sample: jax.Array, step: int | jax.Array) -> jax.Array:
        """``sample / sqrt(sigma**2 + 1)``, as Euler."""
        sigma = state.sigmas[step]
        return sample / ((sigma**2 + 1) ** 0.5).astype(sample.dtype)

    def step(
        self,
        state: EulerState,
        model_output: jax.Array,
        step: int | jax.Array,
        sample: jax.Array,
        noise: jax.Array | None = None,
    ) -> jax.Array:
        """One ancestral step from ``sigmas[step]`` to ``sigmas[step + 1]``, in float32.

        ``noise``: standard-normal, the shape of ``sample``; it enters as ``noise * sigma_up``
        (0 at the last step, whose target sigma is 0).
        """
        if noise is None:
            raise ValueError(
                "EulerAncestralDiscreteScheduler.step needs noise= (standard normal, the shape of the "
                "sample): it adds fresh noise at every step."
            )
        sample = sample.astype(jnp.float32)
        model_output = model_output.astype(jnp.float32)
        sigma, sigma_to = state.sigmas[step], state.sigmas[step + 1]
        pred_original = _predicted_original(self.config.prediction_type, model_output, sample, sigma)
        sigma_up = (sigma_to**2 * (sigma**2 - sigma_to**2) / sigma**2) ** 0.5
        sigma_down = (sigma_to**2 - sigma_up**2) ** 0.5
        derivative = (sample - pred_original) / sigma
        prev = sample + derivative * (sigma_down - sigma)
        return prev + noise.astype(jnp.float32) * sigma_up


# ----------------------------------------------------------------------------------------------
# Latent consistency (LCMScheduler)
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LCMConfig:
    """The fields of diffusers' ``LCMScheduler`` config, with its defaults.

    ``timestep_spacing`` is read but unused, as in diffusers: the LCM schedule is its own.
    """

    num_train_timesteps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: str = "scaled_linear"
    trained_betas: tuple[float, ...] | None = None
    original_inference_steps: int = 50
    clip_sample: bool = False
    clip_sample_range: float = 1.0
    set_alpha_to_one: bool = True
    steps_offset: int = 0
    prediction_type: str = "epsilon"
    thresholding: bool = False
    dynamic_thresholding_ratio: float = 0.995
    sample_max_value: float = 1.0
    timestep_spacing: str = "leading"
    timestep_scaling: float = 10.0
    rescale_betas_zero_snr: bool = False

    def validate(self) -> None:
        unsupported = {"thresholding": False, "rescale_betas_zero_snr": False}
        _check_options("LCMScheduler", self, unsupported, ("epsilon", "v_prediction", "sample"))
        if not 1 <= self.original_inference_steps <= self.num_train_timesteps:
            raise ValueError(
                f"LCMScheduler: original_inference_steps must be in 1..{self.num_train_timesteps}, got "
                f"{self.original_inference_steps}."
            )
        make_betas(self)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LCMState:
    """The schedule of one LCM run of ``n`` steps.

    timesteps: (n,) int32, the timestep the UNet is told at each step.
    alpha_prod: (n,) float32, ``alphas_cumprod`` at each step's timestep.
    alpha_prod_prev: (n,) float32, the same at the next step's timestep (the last step, which
      adds no noise, repeats its own).
    c_skip, c_out: (n,) float32, the consistency model's boundary-condition scalings: the
      denoised latent is ``c_out * x0_pred + c_skip * sample``.
    init_noise_sigma: () 1: LCM works on the DDPM-scaled latents directly.
    """

    timesteps: jax.Array
    alpha_prod: jax.Array
    alpha_prod_prev: jax.Array
    c_skip: jax.Array
    c_out: jax.Array
    init_noise_sigma: jax.Array


@dataclasses.dataclass(frozen=True)
class LCMScheduler:
    """Latent consistency model sampling (Luo et al.), for LCM-distilled UNets and LCM-LoRA.

    A consistency model maps a noisy latent at any timestep straight to a clean one. Each step
    predicts it (``denoised``), then, except at the last step, noises it again to the next
    timestep's level with fresh noise: ``sqrt(a_next) denoised + sqrt(1 - a_next) noise``. The
    timesteps are ``num_inference_steps`` evenly picked (by index) from the
    ``original_inference_steps`` of the distillation schedule, ``k - 1, 2k - 1, ..., 999``
    (``k = num_train_timesteps // original_inference_steps``), noisiest first.

    ``step`` takes the step's standard-normal ``noise`` (see :func:`sdaccel.tpu.pipeline.step_noise`).
    """

    config: LCMConfig = LCMConfig()
    order = 1
    stochastic = True

    @classmethod
    def from_config(cls, d: dict) -> LCMScheduler:
        return cls(_config_from_dict(LCMConfig, d))

    def set_timesteps(self, num_inference_steps: int) -> LCMState:
        cfg = self.config
        original = cfg.original_inference_steps
        if not 1 <= num_inference_steps <= original:
            raise ValueError(
                f"LCMScheduler: num_inference_steps must be in 1..{original} (original_inference_steps: the "
                f"steps are picked from that distillation schedule), got {num_inference_steps}."
            )
        k = cfg.num_train_timesteps // original
        origin = (np.arange(1, original + 1) * k - 1)[::-1]
        picked = np.floor(np.linspace(0, len(origin), num=num_inference_steps, endpoint=False))
        timesteps = origin[picked.astype(np.int64)]
        ac = alphas_cumprod(cfg)
        prev = np.concatenate([timesteps[1:], timesteps[-1:]])
        scaled = timesteps.astype(np.float32) * np.float32(cfg.timestep_scaling)
        sigma_data2 = np.float32(0.5**2)  # sigma_data = 0.5, as in diffusers
        c_skip = sigma_data2 / (scaled**2 + sigma_data2)
        c_out = scaled / (scaled**2 + sigma_data2) ** np.float32(0.5)
        return LCMState(
            jnp.asarray(timesteps, jnp.int32),
            jnp.asarray(ac[timesteps]),
            jnp.asarray(ac[prev]),
            jnp.asarray(c_skip, jnp.float32),
            jnp.asarray(c_out, jnp.float32),
            jnp.asarray(1.0, jnp.float32),
        )

    def scale_model_input(self, state: LCMState, sample: jax.Array, step: int | jax.Array) -> jax.Array:
        """LCM needs no input scaling."""
        return sample

    def step(
        self,
        state: LCMState,
        model_output: jax.Array,
        step: int | jax.Array,
        sample: jax.Array,
        noise: jax.Array | None = None,
    ) -> jax.Array:
        """One LCM step, in float32: the denoised latent, re-noised to the next timestep except at
        the last step (which returns the denoised latent itself). ``noise``: standard-normal, the
        shape of ``sample``."""
        if noise is None:
            raise ValueError(
                "LCMScheduler.step needs noise= (standard normal, the shape of the sample): it re-noises "
                "the denoised latent at every step but the last."
            )
        cfg = self.config
        sample = sample.astype(jnp.float32)
        model_output = model_output.astype(jnp.float32)
        alpha_prod_t, alpha_prod_prev = state.alpha_prod[step], state.alpha_prod_prev[step]
        beta_prod_t = 1 - alpha_prod_t
        if cfg.prediction_type == "epsilon":
            pred_original = (sample - beta_prod_t**0.5 * model_output) / alpha_prod_t**0.5
        elif cfg.prediction_type == "v_prediction":
            pred_original = alpha_prod_t**0.5 * sample - beta_prod_t**0.5 * model_output
        else:  # "sample"
            pred_original = model_output
        if cfg.clip_sample:
            pred_original = jnp.clip(pred_original, -cfg.clip_sample_range, cfg.clip_sample_range)
        denoised = state.c_out[step] * pred_original + state.c_skip[step] * sample
        renoised = alpha_prod_prev**0.5 * denoised + (1 - alpha_prod_prev) ** 0.5 * noise.astype(jnp.float32)
        return jnp.where(step == state.timesteps.shape[0] - 1, denoised, renoised)


# ----------------------------------------------------------------------------------------------
# Choosing a scheduler from a config
# ----------------------------------------------------------------------------------------------

Scheduler = EulerDiscreteScheduler | DDIMScheduler | EulerAncestralDiscreteScheduler | LCMScheduler

SCHEDULERS: dict[str, type] = {
    "EulerDiscreteScheduler": EulerDiscreteScheduler,
    "DDIMScheduler": DDIMScheduler,
    "EulerAncestralDiscreteScheduler": EulerAncestralDiscreteScheduler,
    "LCMScheduler": LCMScheduler,
}

#: What runs in place of a scheduler that sdaccel does not implement. Euler is SDXL's default
#: and a good first-order sampler at 20-50 steps; the betas, prediction type, spacing and
#: offset of the original config are kept.
FALLBACK = "EulerDiscreteScheduler"


def from_config(config: dict, kind: str | None = None) -> Scheduler:
    """The scheduler a ``scheduler_config.json`` describes, or ``kind`` with that config's betas.

    Args:
      config: the dict of ``scheduler/scheduler_config.json``; its ``_class_name`` picks the class.
      kind: override the class: ``"euler"``, ``"ddim"``, ``"euler_a"`` (or ``"euler_ancestral"``),
        ``"lcm"`` or one of those diffusers class names (:data:`SCHEDULERS`), the names every
        front-end takes (:data:`sdaccel.core.contract.SCHEDULER_NAMES`). As with
        diffusers' ``NewScheduler.from_config(old.config)``, the fields the new class knows are
        taken from ``config`` and the others keep the new class's defaults.

    A class that is not implemented (for example ``PNDMScheduler``, which SD 1.5 ships, or
    ``DPMSolverMultistepScheduler``) falls back to ``FALLBACK`` (Euler) with a warning.
    """
    if kind is not None:
        name = scheduler_class_name(kind, SCHEDULERS)
    else:
        name = config.get("_class_name") or FALLBACK
    if name not in SCHEDULERS:
        warnings.warn(
            f"{name} is not implemented in sdaccel; running {FALLBACK} with the same betas "
            f"({config.get('beta_schedule', 'linear')}, {config.get('beta_start')}..{config.get('beta_end')}), "
            f"prediction type and timestep spacing instead, so images differ from diffusers' {name}. "
            "Pass kind='euler' (or 'ddim', 'euler_a', 'lcm') to choose explicitly and silence this warning.",
            stacklevel=2,
        )
        name = FALLBACK
    return SCHEDULERS[name].from_config(config)
