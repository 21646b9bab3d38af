"""The Euler and DDIM samplers of diffusers, as pure JAX functions that run inside ``jax.jit``.

A diffusers scheduler is a stateful object: ``set_timesteps`` fills arrays, and every ``step``
advances a hidden counter. That does not fit in a compiled loop, so here the two halves are split:

1. ``scheduler.set_timesteps(n)`` runs once on the host, in numpy (the schedule depends only on
   ``n`` and the config), and returns a frozen *state*: a small pytree of arrays, one entry per
   step (the timesteps the UNet sees, the noise levels).
2. ``scheduler.scale_model_input(state, sample, i)`` and ``scheduler.step(state, model_output, i,
   sample)`` are pure functions of the state and the step *index* ``i``, which may be a traced
   integer from ``jax.lax.fori_loop``. Nothing is mutated; the loop carries only the latents.

The scheduler objects are frozen dataclasses around their config, hashable, so they can be closed
over (or passed as static arguments) by a jitted function. Both reproduce diffusers (same float32
arithmetic, in the same order); ``tests/test_schedulers.py`` checks them against
``diffusers.EulerDiscreteScheduler`` and ``diffusers.DDIMScheduler``.

The noise schedule both share: ``betas`` (the variance added per training step) give
``alphas_cumprod[t] = prod(1 - betas[:t+1])``, the fraction of signal left at timestep ``t``; a
noisy latent is ``x_t = sqrt(alphas_cumprod[t]) x_0 + sqrt(1 - alphas_cumprod[t]) noise``.

- Euler (SDXL's default) works with ``sigma_t = sqrt((1 - a_t) / a_t)``, the noise-to-signal
  ratio, on the rescaled latent ``x_t / sqrt(a_t) = x_0 + sigma_t noise``; one step is one Euler
  step of the probability-flow ODE ``dx/dsigma = (x - x_0) / sigma``.
- DDIM (with ``eta = 0``) predicts ``x_0`` and the noise, then re-noises ``x_0`` to the previous
  timestep's level deterministically.

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
            "interpolation_type": (self.interpolation_type, "linear"),
            "use_exponential_sigmas": (self.use_exponential_sigmas, False),
            "use_beta_sigmas": (self.use_beta_sigmas, False),
            "timestep_type": (self.timestep_type, "discrete"),
            "rescale_betas_zero_snr": (self.rescale_betas_zero_snr, False),
        }
        for name, (value, supported) in unsupported.items():
            if value != supported:
                raise NotImplementedError(
                    f"EulerDiscreteScheduler: {name}={value!r} is not implemented in sdaccel (only {supported!r}). "
                    "Set it to the default in the scheduler config, or use diffusers for this option."
                )
        if self.prediction_type not in ("epsilon", "v_prediction", "sample"):
            raise ValueError(
                f"prediction_type {self.prediction_type!r}: use 'epsilon', 'v_prediction' or 'sample'."
            )
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


@dataclasses.dataclass(frozen=True)
class EulerDiscreteScheduler:
    """Euler's method on the probability-flow ODE of the diffusion (k-diffusion's ``sample_euler``).

    With ``d = (x - x0_pred) / sigma`` (for epsilon prediction, ``d`` is the predicted noise),
    one step is ``x <- x + d * (sigma_next - sigma)``. The UNet sees ``x / sqrt(sigma**2 + 1)``,
    which is the DDPM-scaled latent it was trained on.
    """

    config: EulerDiscreteConfig = EulerDiscreteConfig()
    order = 1

    @classmethod
    def from_config(cls, d: dict) -> EulerDiscreteScheduler:
        return cls(_config_from_dict(EulerDiscreteConfig, d))

    def set_timesteps(self, num_inference_steps: int) -> EulerState:
        """The state for a run of ``num_inference_steps`` steps (host-side numpy, then arrays)."""
        cfg = self.config
        _check_steps(cfg, num_inference_steps)
        ac = alphas_cumprod(cfg)
        train_sigmas = ((1 - ac) / ac) ** 0.5  # float32, one per training timestep
        timesteps = _spaced_timesteps(cfg, num_inference_steps).astype(np.float32)
        sigmas = np.interp(timesteps, np.arange(len(train_sigmas)), train_sigmas)
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
        sigmas = np.concatenate([sigmas, [final]]).astype(np.float32)
        max_sigma = sigmas.max()
        init = max_sigma if cfg.timestep_spacing in ("linspace", "trailing") else (max_sigma**2 + 1) ** 0.5
        return EulerState(jnp.asarray(timesteps), jnp.asarray(sigmas), jnp.asarray(init, jnp.float32))

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
        if self.config.prediction_type == "epsilon":
            pred_original = sample - sigma * model_output
        elif self.config.prediction_type == "v_prediction":
            pred_original = model_output * (-sigma / (sigma**2 + 1) ** 0.5) + sample / (sigma**2 + 1)
        else:  # "sample"
            pred_original = model_output
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
        for name in ("thresholding", "rescale_betas_zero_snr"):
            if getattr(self, name):
                raise NotImplementedError(
                    f"DDIMScheduler: {name}=True is not implemented in sdaccel. Set it to false in the "
                    "scheduler config, or use diffusers for this option."
                )
        if self.prediction_type not in ("epsilon", "v_prediction", "sample"):
            raise ValueError(
                f"prediction_type {self.prediction_type!r}: use 'epsilon', 'v_prediction' or 'sample'."
            )
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
# Choosing a scheduler from a config
# ----------------------------------------------------------------------------------------------

Scheduler = EulerDiscreteScheduler | DDIMScheduler

SCHEDULERS: dict[str, type] = {
    "EulerDiscreteScheduler": EulerDiscreteScheduler,
    "DDIMScheduler": DDIMScheduler,
}
_SHORT_NAMES = {"euler": "EulerDiscreteScheduler", "ddim": "DDIMScheduler"}

#: What runs in place of a scheduler that sdaccel does not implement. Euler is SDXL's default
#: and a good first-order sampler at 20-50 steps; the betas, prediction type, spacing and
#: offset of the original config are kept.
FALLBACK = "EulerDiscreteScheduler"


def from_config(config: dict, kind: str | None = None) -> Scheduler:
    """The scheduler a ``scheduler_config.json`` describes, or ``kind`` with that config's betas.

    Args:
      config: the dict of ``scheduler/scheduler_config.json``; its ``_class_name`` picks the class.
      kind: override the class: ``"euler"``, ``"ddim"`` or a diffusers class name. As with
        diffusers' ``NewScheduler.from_config(old.config)``, the fields the new class knows are
        taken from ``config`` and the others keep the new class's defaults.

    A class that is not implemented (for example ``PNDMScheduler``, which SD 1.5 ships, or
    ``DPMSolverMultistepScheduler``) falls back to ``FALLBACK`` (Euler) with a warning.
    """
    name = kind or config.get("_class_name") or FALLBACK
    name = _SHORT_NAMES.get(name.lower(), name)
    if name not in SCHEDULERS:
        if kind is not None:
            raise ValueError(
                f"Unknown scheduler kind {kind!r}; choose 'euler', 'ddim' or one of {sorted(SCHEDULERS)}."
            )
        warnings.warn(
            f"{name} is not implemented in sdaccel; running {FALLBACK} with the same betas "
            f"({config.get('beta_schedule', 'linear')}, {config.get('beta_start')}..{config.get('beta_end')}), "
            f"prediction type and timestep spacing instead, so images differ from diffusers' {name}. "
            "Pass kind='euler' or kind='ddim' to choose explicitly and silence this warning.",
            stacklevel=2,
        )
        name = FALLBACK
    return SCHEDULERS[name].from_config(config)
