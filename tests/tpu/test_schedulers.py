"""The JAX schedulers against diffusers' EulerDiscreteScheduler, DDIMScheduler,
EulerAncestralDiscreteScheduler and LCMScheduler.

For every spacing and prediction type: the timesteps and sigmas of a full run, then a whole
sampling loop driven by the same random "model outputs", step by step, in float32. The two
stochastic samplers are also given the same per-step noise: diffusers draws it with
``randn_tensor`` inside ``step``, which the tests replace by a function returning ours.
"""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdaccel.tpu import schedulers

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SPACINGS = ["leading", "trailing", "linspace"]
PREDICTIONS = ["epsilon", "v_prediction"]
REFERENCE = Path(schedulers.__file__).parents[1] / "reference_configs"


def _euler_config(spacing, prediction, **extra):
    return {
        "_class_name": "EulerDiscreteScheduler",
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "steps_offset": 1,
        "timestep_spacing": spacing,
        "prediction_type": prediction,
        **extra,
    }


def _ddim_config(spacing, prediction, **extra):
    return {
        "_class_name": "DDIMScheduler",
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "steps_offset": 1,
        "clip_sample": False,
        "set_alpha_to_one": False,
        "timestep_spacing": spacing,
        "prediction_type": prediction,
        **extra,
    }


def _ancestral_config(spacing, prediction, **extra):
    return _euler_config(spacing, prediction, _class_name="EulerAncestralDiscreteScheduler", **extra)


def _lcm_config(prediction, **extra):
    return {
        "_class_name": "LCMScheduler",
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "prediction_type": prediction,
        **extra,
    }


def _rel_err(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-12)


def _run_both(config, num_steps, seed=0, monkeypatch=None):
    """Run diffusers and ours over the same random model outputs (and, for a stochastic scheduler,
    the same noise at every step); return both sample sequences."""
    ref = getattr(diffusers, config["_class_name"]).from_config(config)
    ref.set_timesteps(num_steps)
    if hasattr(ref, "set_begin_index"):
        ref.set_begin_index(0)  # as the pipelines do
    ours = schedulers.from_config(config)
    state = ours.set_timesteps(num_steps)
    rng = np.random.default_rng(seed)
    shape = (2, 4, 8, 8)
    noise = rng.standard_normal(shape).astype(np.float32)
    outputs = rng.standard_normal((num_steps, *shape)).astype(np.float32)
    step_noise = rng.standard_normal((num_steps, *shape)).astype(np.float32)
    drawn = []
    if ours.stochastic:
        module = type(ref).__module__

        def randn_tensor(shape_, generator=None, device=None, dtype=None, **_):
            """The noise of step ``len(drawn)``: diffusers draws once per step that uses noise."""
            assert tuple(shape_) == shape
            drawn.append(len(drawn))
            return torch.from_numpy(step_noise[drawn[-1]]).to(dtype)

        monkeypatch.setattr(f"{module}.randn_tensor", randn_tensor)

    x_ref = torch.from_numpy(noise) * ref.init_noise_sigma
    x_ours = jnp.asarray(noise) * state.init_noise_sigma
    if ours.stochastic:
        step = jax.jit(lambda s, x, i, out, n: ours.step(s, out, i, x, noise=n))
    else:
        step = jax.jit(lambda s, x, i, out, n: ours.step(s, out, i, x))
    scale = jax.jit(ours.scale_model_input)
    seq_ref, seq_ours, scaled_ref, scaled_ours = [], [], [], []
    for i, t in enumerate(ref.timesteps):
        scaled_ref.append(ref.scale_model_input(x_ref, t).numpy())
        scaled_ours.append(np.asarray(scale(state, x_ours, i)))
        out = outputs[i]
        x_ref = ref.step(torch.from_numpy(out), t, x_ref).prev_sample
        x_ours = step(state, x_ours, jnp.int32(i), jnp.asarray(out), jnp.asarray(step_noise[i]))
        seq_ref.append(x_ref.numpy())
        seq_ours.append(np.asarray(x_ours))
    if ours.stochastic:  # every step drew noise, except LCM's last, which returns the denoised latent
        last = isinstance(ours, schedulers.LCMScheduler)
        assert len(drawn) == num_steps - last
    return ref, state, (seq_ref, seq_ours), (scaled_ref, scaled_ours)


@pytest.mark.parametrize("num_steps", [1, 7, 20, 50])
@pytest.mark.parametrize("spacing", SPACINGS)
def test_euler_timesteps_and_sigmas(spacing, num_steps):
    config = _euler_config(spacing, "epsilon")
    ref = diffusers.EulerDiscreteScheduler.from_config(config)
    ref.set_timesteps(num_steps)
    state = schedulers.from_config(config).set_timesteps(num_steps)
    assert state.timesteps.shape == (num_steps,) and state.sigmas.shape == (num_steps + 1,)
    np.testing.assert_allclose(np.asarray(state.timesteps), ref.timesteps.numpy(), rtol=0, atol=1e-4)
    assert _rel_err(state.sigmas, ref.sigmas.numpy()) < 1e-6
    assert abs(float(state.init_noise_sigma) - float(ref.init_noise_sigma)) < 1e-5 * float(
        ref.init_noise_sigma
    )


@pytest.mark.parametrize("num_steps", [1, 7, 20, 50])
@pytest.mark.parametrize("spacing", SPACINGS)
def test_ddim_timesteps(spacing, num_steps):
    config = _ddim_config(spacing, "epsilon")
    ref = diffusers.DDIMScheduler.from_config(config)
    ref.set_timesteps(num_steps)
    state = schedulers.from_config(config).set_timesteps(num_steps)
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref.timesteps.numpy())
    assert float(state.init_noise_sigma) == ref.init_noise_sigma == 1.0


@pytest.mark.parametrize("prediction", PREDICTIONS)
@pytest.mark.parametrize("spacing", SPACINGS)
def test_euler_step_sequence(spacing, prediction):
    _, _, (seq_ref, seq_ours), (scaled_ref, scaled_ours) = _run_both(_euler_config(spacing, prediction), 20)
    for i, (a, b) in enumerate(zip(scaled_ours, scaled_ref, strict=True)):
        assert _rel_err(a, b) < 1e-5, f"scale_model_input differs at step {i}"
    for i, (a, b) in enumerate(zip(seq_ours, seq_ref, strict=True)):
        assert _rel_err(a, b) < 1e-5, f"step {i}: rel err {_rel_err(a, b):.2e}"


@pytest.mark.parametrize("clip_sample", [False, True])
@pytest.mark.parametrize("prediction", PREDICTIONS)
@pytest.mark.parametrize("spacing", SPACINGS)
def test_ddim_step_sequence(spacing, prediction, clip_sample):
    config = _ddim_config(spacing, prediction, clip_sample=clip_sample)
    _, _, (seq_ref, seq_ours), (scaled_ref, scaled_ours) = _run_both(config, 20)
    for a, b in zip(scaled_ours, scaled_ref, strict=True):
        assert _rel_err(a, b) < 1e-5  # DDIM does not scale its input
    for i, (a, b) in enumerate(zip(seq_ours, seq_ref, strict=True)):
        assert _rel_err(a, b) < 1e-5, f"step {i}: rel err {_rel_err(a, b):.2e}"


@pytest.mark.parametrize(
    "extra",
    [
        {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02},
        {"beta_schedule": "squaredcos_cap_v2"},
        {"trained_betas": np.linspace(1e-4, 2e-2, 1000).tolist()},
        {"set_alpha_to_one": True},
        {"prediction_type": "sample"},
    ],
    ids=["linear", "cosine", "trained_betas", "alpha_to_one", "sample_pred"],
)
def test_ddim_other_schedules(extra):
    _, _, (seq_ref, seq_ours), _ = _run_both(_ddim_config("leading", "epsilon", **extra), 10)
    for a, b in zip(seq_ours, seq_ref, strict=True):
        assert _rel_err(a, b) < 1e-5


@pytest.mark.parametrize(
    "extra",
    [
        {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02},
        {"beta_schedule": "squaredcos_cap_v2"},
        {"use_karras_sigmas": True},
        {"use_karras_sigmas": True, "timestep_spacing": "linspace"},
        {"final_sigmas_type": "sigma_min"},
        {"prediction_type": "sample"},
    ],
    ids=["linear", "cosine", "karras", "karras_linspace", "sigma_min", "sample_pred"],
)
def test_euler_other_options(extra):
    ref, state, (seq_ref, seq_ours), _ = _run_both(_euler_config("leading", "epsilon") | extra, 12)
    np.testing.assert_allclose(np.asarray(state.timesteps), ref.timesteps.numpy(), rtol=1e-5, atol=1e-4)
    assert _rel_err(state.sigmas, ref.sigmas.numpy()) < 1e-6
    for a, b in zip(seq_ours, seq_ref, strict=True):
        assert _rel_err(a, b) < 1e-5


@pytest.mark.parametrize("num_steps", [1, 4, 7, 20])
@pytest.mark.parametrize("spacing", SPACINGS)
def test_ancestral_timesteps_and_sigmas(spacing, num_steps):
    config = _ancestral_config(spacing, "epsilon")
    ref = diffusers.EulerAncestralDiscreteScheduler.from_config(config)
    ref.set_timesteps(num_steps)
    state = schedulers.from_config(config).set_timesteps(num_steps)
    np.testing.assert_allclose(np.asarray(state.timesteps), ref.timesteps.numpy(), rtol=0, atol=1e-4)
    assert _rel_err(state.sigmas, ref.sigmas.numpy()) < 1e-6 and float(state.sigmas[-1]) == 0.0
    assert float(state.init_noise_sigma) == pytest.approx(float(ref.init_noise_sigma), rel=1e-6)


@pytest.mark.parametrize("prediction", PREDICTIONS)
@pytest.mark.parametrize("spacing", SPACINGS)
def test_ancestral_step_sequence(spacing, prediction, monkeypatch):
    config = _ancestral_config(spacing, prediction)
    _, _, (seq_ref, seq_ours), (scaled_ref, scaled_ours) = _run_both(config, 12, monkeypatch=monkeypatch)
    for i, (a, b) in enumerate(zip(scaled_ours, scaled_ref, strict=True)):
        assert _rel_err(a, b) < 1e-5, f"scale_model_input differs at step {i}"
    for i, (a, b) in enumerate(zip(seq_ours, seq_ref, strict=True)):
        assert _rel_err(a, b) < 1e-5, f"step {i}: rel err {_rel_err(a, b):.2e}"


@pytest.mark.parametrize(
    "extra",
    [
        {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02},
        {"beta_schedule": "squaredcos_cap_v2"},
        {"trained_betas": np.linspace(1e-4, 2e-2, 1000).tolist()},
    ],
    ids=["linear", "cosine", "trained_betas"],
)
def test_ancestral_other_schedules(extra, monkeypatch):
    _, _, (seq_ref, seq_ours), _ = _run_both(
        _ancestral_config("trailing", "epsilon", **extra), 4, 1, monkeypatch
    )
    for a, b in zip(seq_ours, seq_ref, strict=True):
        assert _rel_err(a, b) < 1e-5


def test_ancestral_noise_matters():
    """The step noise enters with sigma_up: other noise, other latents (but not at the last step,
    whose target sigma is 0)."""
    sched = schedulers.from_config(_ancestral_config("trailing", "epsilon"))
    state = sched.set_timesteps(4)
    x, out = jnp.ones((1, 4, 4, 4)), jnp.full((1, 4, 4, 4), 0.5)
    a = sched.step(state, out, 0, x, noise=jnp.zeros_like(x))
    b = sched.step(state, out, 0, x, noise=jnp.ones_like(x))
    sigma, sigma_to = float(state.sigmas[0]), float(state.sigmas[1])
    sigma_up = (sigma_to**2 * (sigma**2 - sigma_to**2) / sigma**2) ** 0.5
    np.testing.assert_allclose(np.asarray(b - a), sigma_up, rtol=1e-5)
    last = [sched.step(state, out, 3, x, noise=n) for n in (jnp.zeros_like(x), jnp.ones_like(x))]
    np.testing.assert_array_equal(np.asarray(last[0]), np.asarray(last[1]))


@pytest.mark.parametrize("original", [50, 4])
@pytest.mark.parametrize("num_steps", [1, 2, 4])
def test_lcm_timesteps(num_steps, original):
    config = _lcm_config("epsilon", original_inference_steps=original)
    ref = diffusers.LCMScheduler.from_config(config)
    ref.set_timesteps(num_steps)
    state = schedulers.from_config(config).set_timesteps(num_steps)
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref.timesteps.numpy())
    assert float(state.init_noise_sigma) == ref.init_noise_sigma == 1.0
    for t, c_skip, c_out in zip(ref.timesteps, state.c_skip, state.c_out, strict=True):
        expected = ref.get_scalings_for_boundary_condition_discrete(t)
        np.testing.assert_allclose([float(c_skip), float(c_out)], [float(e) for e in expected], rtol=1e-6)


def test_lcm_ignores_timestep_spacing():
    """diffusers' LCM schedule is its own: timestep_spacing is read, and changes nothing."""
    runs = {
        spacing: np.asarray(
            schedulers.from_config(_lcm_config("epsilon", timestep_spacing=spacing))
            .set_timesteps(4)
            .timesteps
        )
        for spacing in SPACINGS
    }
    ref = diffusers.LCMScheduler.from_config(_lcm_config("epsilon"))
    ref.set_timesteps(4)
    for timesteps in runs.values():
        np.testing.assert_array_equal(timesteps, ref.timesteps.numpy())
    np.testing.assert_array_equal(runs["leading"], [999, 759, 499, 259])


@pytest.mark.parametrize("clip_sample", [False, True])
@pytest.mark.parametrize("prediction", ["epsilon", "v_prediction", "sample"])
def test_lcm_step_sequence(prediction, clip_sample, monkeypatch):
    config = _lcm_config(prediction, clip_sample=clip_sample)
    _, state, (seq_ref, seq_ours), (scaled_ref, scaled_ours) = _run_both(config, 6, monkeypatch=monkeypatch)
    for a, b in zip(scaled_ours, scaled_ref, strict=True):
        assert _rel_err(a, b) < 1e-5  # LCM does not scale its input
    for i, (a, b) in enumerate(zip(seq_ours, seq_ref, strict=True)):
        assert _rel_err(a, b) < 1e-5, f"step {i}: rel err {_rel_err(a, b):.2e}"


@pytest.mark.parametrize(
    "extra",
    [
        {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02},
        {"set_alpha_to_one": False, "original_inference_steps": 8},
        {"timestep_scaling": 1.0},
    ],
    ids=["linear", "original_8", "scaling_1"],
)
def test_lcm_other_options(extra, monkeypatch):
    _, _, (seq_ref, seq_ours), _ = _run_both(_lcm_config("epsilon", **extra), 4, 2, monkeypatch)
    for a, b in zip(seq_ours, seq_ref, strict=True):
        assert _rel_err(a, b) < 1e-5


def test_short_names_and_kind_override():
    sdxl = json.loads((REFERENCE / "sdxl-base-1.0/scheduler.json").read_text())
    for kind, cls in [
        ("euler_a", schedulers.EulerAncestralDiscreteScheduler),
        ("Euler_Ancestral", schedulers.EulerAncestralDiscreteScheduler),
        ("EulerAncestralDiscreteScheduler", schedulers.EulerAncestralDiscreteScheduler),
        ("lcm", schedulers.LCMScheduler),
        ("LCMScheduler", schedulers.LCMScheduler),
    ]:
        sched = schedulers.from_config(sdxl, kind=kind)
        assert type(sched) is cls and sched.stochastic
        ref = getattr(diffusers, cls.__name__).from_config(sdxl)
        for field in ("beta_schedule", "beta_start", "beta_end", "steps_offset", "timestep_spacing"):
            assert getattr(sched.config, field) == ref.config[field], (kind, field)
    assert (
        not schedulers.from_config(sdxl).stochastic
        and not schedulers.from_config(sdxl, kind="ddim").stochastic
    )
    lcm = schedulers.from_config({"_class_name": "LCMScheduler"})
    assert isinstance(lcm, schedulers.LCMScheduler) and lcm.config.original_inference_steps == 50


def test_reference_configs_load():
    """The published scheduler configs of SDXL, SD 2.1 (DDIM, v-prediction) and SD 1.5 (PNDM)."""
    sdxl = json.loads((REFERENCE / "sdxl-base-1.0/scheduler.json").read_text())
    assert isinstance(schedulers.from_config(sdxl), schedulers.EulerDiscreteScheduler)
    sd21 = schedulers.from_config(json.loads((REFERENCE / "sd-2.1/scheduler.json").read_text()))
    assert isinstance(sd21, schedulers.DDIMScheduler) and sd21.config.prediction_type == "v_prediction"
    sd15 = json.loads((REFERENCE / "sd-1.5/scheduler.json").read_text())
    with pytest.warns(UserWarning, match="PNDMScheduler is not implemented.*EulerDiscreteScheduler"):
        fallback = schedulers.from_config(sd15)
    assert isinstance(fallback, schedulers.EulerDiscreteScheduler)
    assert (fallback.config.beta_schedule, fallback.config.steps_offset) == ("scaled_linear", 1)


def test_kind_override_matches_diffusers_swap():
    """``kind`` behaves like diffusers' ``DDIMScheduler.from_config(other.config)``."""
    sd15 = json.loads((REFERENCE / "sd-1.5/scheduler.json").read_text())
    ours = schedulers.from_config(sd15, kind="ddim")
    ref = diffusers.DDIMScheduler.from_config(diffusers.PNDMScheduler.from_config(sd15).config)
    for field in ("beta_schedule", "set_alpha_to_one", "clip_sample", "steps_offset", "timestep_spacing"):
        assert getattr(ours.config, field) == ref.config[field], field


def test_runs_inside_fori_loop():
    """The step index may be a traced integer: a whole run compiles as one loop."""
    sched = schedulers.from_config(_euler_config("leading", "epsilon"))
    state = sched.set_timesteps(10)

    @jax.jit
    def run(state, x):
        def body(i, x):
            return sched.step(state, sched.scale_model_input(state, x, i) * 0.1, i, x)

        return jax.lax.fori_loop(0, state.timesteps.shape[0], body, x)

    x = jnp.ones((1, 4, 4, 4))
    expected = x
    for i in range(10):
        expected = sched.step(state, sched.scale_model_input(state, expected, i) * 0.1, i, expected)
    np.testing.assert_allclose(np.asarray(run(state, x)), np.asarray(expected), rtol=1e-6)


def test_errors():
    with pytest.raises(NotImplementedError, match="use_exponential_sigmas"):
        schedulers.from_config(_euler_config("leading", "epsilon", use_exponential_sigmas=True))
    with pytest.raises(NotImplementedError, match="thresholding"):
        schedulers.from_config(_ddim_config("leading", "epsilon", thresholding=True))
    with pytest.raises(ValueError, match="prediction_type"):
        schedulers.from_config(_euler_config("leading", "flow"))
    with pytest.raises(ValueError, match="Unknown scheduler kind"):
        schedulers.from_config(_euler_config("leading", "epsilon"), kind="heun")
    with pytest.raises(ValueError, match="num_inference_steps"):
        schedulers.from_config(_euler_config("leading", "epsilon")).set_timesteps(0)
    with pytest.raises(ValueError, match="Unknown scheduler kind 'dpm'.*'euler_a'.*'lcm'"):
        schedulers.from_config(_euler_config("leading", "epsilon"), kind="dpm")
    with pytest.raises(ValueError, match="prediction_type 'sample'.*'epsilon' or 'v_prediction'"):
        schedulers.from_config(_ancestral_config("leading", "sample"))
    with pytest.raises(NotImplementedError, match="rescale_betas_zero_snr"):
        schedulers.from_config(_ancestral_config("leading", "epsilon", rescale_betas_zero_snr=True))
    with pytest.raises(NotImplementedError, match="thresholding"):
        schedulers.from_config(_lcm_config("epsilon", thresholding=True))
    with pytest.raises(ValueError, match="num_inference_steps must be in 1..50"):
        schedulers.from_config(_lcm_config("epsilon")).set_timesteps(51)
    state = schedulers.from_config(_lcm_config("epsilon")).set_timesteps(4)
    x = jnp.zeros((1, 4, 4, 4))
    for kind, st in (
        ("lcm", state),
        ("euler_a", schedulers.from_config({}, kind="euler_a").set_timesteps(4)),
    ):
        with pytest.raises(ValueError, match="needs noise="):
            schedulers.from_config({}, kind=kind).step(st, x, 0, x)
