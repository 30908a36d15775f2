"""Generation, inversion and bits/dim on models whose exact answer is known (Gaussian data)."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError
from gencore.paths import AffineGaussianPath, LinearSchedule, VPSchedule
from genimage.metrics import bits_per_dim
from genimage.models import DiT, ImageBackbone
from genimage.runs import LoadedRun
from genimage.sampling import generate, invert, sample_noise
from genimage.watermark.generators import RunGenerator
from genimage.watermark.guidance import guided_generate

SCALE = 0.5  # data ~ N(0, SCALE^2 I), inside [-1, 1] for almost every pixel


class GaussianOracle(ImageBackbone):
    """Bayes-optimal prediction for data N(0, s^2 I) on an affine path: E[x1 | x_t] = a s^2 x_t / (a^2 s^2 + sig^2)."""

    kind = "gaussian-oracle-test"

    def __init__(self, *, schedule: str, prediction: str) -> None:
        super().__init__()
        self.config = {"schedule": schedule, "prediction": prediction}
        self.num_classes = None
        self.path = AffineGaussianPath(LinearSchedule() if schedule == "linear" else VPSchedule())
        self.prediction = prediction
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x, t, y=None):
        _, c = self.path.coefficients(t, x)
        denom = c.alpha**2 * SCALE**2 + c.sigma**2
        x1, eps = c.alpha * SCALE**2 * x / denom, c.sigma * x / denom  # E[x1 | x_t], E[x0 | x_t]
        if self.prediction == "noise":
            return eps
        return c.d_alpha * x1 + c.d_sigma * eps


def _run(objective: str) -> LoadedRun:
    schedule, prediction, t_end = ("linear", "velocity", 1.0) if objective == "flow" else ("vp", "noise", 1 - 1e-3)
    model = GaussianOracle(schedule=schedule, prediction=prediction)
    config = {
        "prediction": prediction,
        "objective": objective,
        "image_shape": [1, 2, 2],
        "sample_shape": [1, 2, 2],
        "t_end": t_end,
        "num_classes": None,
    }
    return LoadedRun.from_parts(model, config)


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_generate_reaches_the_data_law(objective: str) -> None:
    run = _run(objective)
    x = generate(run, sample_noise(run, 4000, seed=0), nfe=64, solver="heun")
    assert x.shape == (4000, 1, 2, 2)
    assert float(x.std()) == pytest.approx(SCALE, rel=0.05)
    assert abs(float(x.mean())) < 0.03


def test_vp_velocity_is_the_probability_flow_of_its_path() -> None:
    run = _run("vp")
    x, t = torch.randn(8, 1, 2, 2), torch.full((8,), 0.4)
    path = AffineGaussianPath(VPSchedule())
    eps = run.model(x, t)
    assert torch.allclose(run.velocity(x, t), path.convert(eps, x, t, "noise", "velocity"))


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_invert_undoes_generate(objective: str) -> None:
    run = _run(objective)
    noise = 0.5 * sample_noise(run, 64, seed=1)
    images = generate(run, noise, nfe=64, solver="rk4")
    assert float(images.abs().max()) < 1.0 and float((images - noise).abs().max()) > 0.1  # unclamped, moved
    back = invert(run, images, nfe=64, solver="rk4")
    tol = 1e-4 if objective == "flow" else 2e-2  # VP: t_end < 1 and the final clean estimate are not inverted
    assert torch.allclose(back, noise, atol=tol)
    coarse = invert(run, images, nfe=2, solver="euler")
    assert float((coarse - noise).abs().max()) > float((back - noise).abs().max())


def test_dit_run_round_trip_with_guidance() -> None:
    torch.manual_seed(0)
    model = DiT(image_size=4, channels=1, patch_size=2, size="DiT-Mi", num_classes=3).eval()
    config = {"prediction": "velocity", "objective": "flow", "image_shape": [1, 4, 4], "sample_shape": [1, 4, 4]}
    run = LoadedRun.from_parts(model, config | {"t_end": 1.0, "num_classes": 3})
    y = torch.tensor([0, 1, 2])
    v = run.velocity(torch.zeros(3, 1, 4, 4), 0.5, y, cfg_scale=3.0)
    assert torch.count_nonzero(v) == 0  # adaLN-Zero: the untrained DiT is the zero field, guided or not
    x = generate(run, 0.3 * sample_noise(run, 3), y, nfe=4, cfg_scale=3.0)
    assert torch.allclose(x, 0.3 * sample_noise(run, 3))


def test_bits_per_dim_matches_the_analytic_gaussian() -> None:
    run = _run("flow")
    g = torch.Generator().manual_seed(0)
    images = (SCALE * torch.randn(64, 1, 2, 2, generator=g)).clamp(-1, 1)
    bpd = bits_per_dim(run, images, steps=64, method="rk4", divergence="exact", seed=3)
    # the same dequantised points under the exact density N(0, s^2 I)
    from genimage.imageio import to_uint8

    u = torch.from_numpy(to_uint8(images)).permute(0, 3, 1, 2).double()
    y = (u + torch.rand(u.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)) / 127.5 - 1
    d = 4
    logp = (-0.5 * (y / SCALE) ** 2 - math.log(SCALE) - 0.5 * math.log(2 * math.pi)).flatten(1).sum(1)
    expected = float(((-logp + d * math.log(127.5)) / (d * math.log(2))).mean())
    assert bpd == pytest.approx(expected, abs=0.01)
    assert bits_per_dim(_run("vp"), images) is None


def _conditional_run() -> LoadedRun:
    model = DiT(image_size=4, channels=1, patch_size=2, size="DiT-Mi", num_classes=3).eval()
    config = {
        "prediction": "velocity",
        "objective": "flow",
        "image_shape": [1, 4, 4],
        "sample_shape": [1, 4, 4],
        "t_end": 1.0,
        "num_classes": 3,
    }
    return LoadedRun.from_parts(model, config)


def test_labels_and_guidance_on_an_unconditional_run_are_refused() -> None:
    from gencore.errors import ConfigError, InputError

    run = _run("flow")
    noise = sample_noise(run, 4)
    with pytest.raises(InputError, match="unconditional"):
        generate(run, noise, torch.tensor([0, 1, 2, 3]), nfe=2)
    with pytest.raises(ConfigError, match="cfg_scale"):
        generate(run, noise, nfe=2, cfg_scale=3.0)
    with pytest.raises(InputError, match="unconditional"):
        invert(run, noise, torch.tensor([0, 1, 2, 3]), nfe=2)


def test_non_integer_labels_are_refused_not_truncated() -> None:
    from gencore.errors import ConfigError, InputError

    run = _conditional_run()
    noise = sample_noise(run, 3)
    with pytest.raises(InputError, match="integer"):
        generate(run, noise, torch.tensor([0.7, 1.5, 2.2]), nfe=2)
    with pytest.raises(InputError, match="integer class indices, got a bool tensor"):  # was sampled as 1, 0, 1
        generate(run, noise, torch.tensor([True, False, True]), nfe=2)
    with pytest.raises(ConfigError, match="finite"):
        generate(run, noise, torch.tensor([0, 1, 2]), nfe=2, cfg_scale=float("nan"))
    a = generate(run, noise, torch.tensor([0.0, 1.0, 2.0]), nfe=2)  # integral floats are class indices
    torch.testing.assert_close(a, generate(run, noise, torch.tensor([0, 1, 2]), nfe=2))


def test_sampling_arguments_are_checked() -> None:
    from gencore.errors import ConfigError, InputError

    run = _run("flow")
    noise = sample_noise(run, 2)
    with pytest.raises(ConfigError, match="nfe"):
        generate(run, noise, nfe=8.0)
    with pytest.raises(ConfigError, match="non-negative"):
        sample_noise(run, -1)
    with pytest.raises(InputError, match="NaN"):
        generate(run, torch.full_like(noise, float("nan")), nfe=2)
    with pytest.raises(InputError, match="NaN"):
        invert(run, torch.full_like(noise, float("inf")), nfe=2)
    from genimage.sampling import sample_images

    with pytest.raises(ConfigError, match="batch_size"):
        sample_images(run, 2, None, nfe=2, cfg_scale=1.0, solver="euler", seed=0, batch_size=0, progress=False)


def test_bits_per_dim_refuses_images_of_another_shape() -> None:
    from gencore.errors import InputError

    run = _run("flow")
    with pytest.raises(InputError, match="shape"):
        bits_per_dim(run, torch.zeros(3, 1, 4, 4), steps=2)
    with pytest.raises(InputError, match="N >= 1"):
        bits_per_dim(run, torch.zeros(0, 1, 2, 2), steps=2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_periodic_samples_of_a_latent_run_decode_on_the_backbones_device(tmp_path) -> None:
    """The engine trains the backbone on CUDA when there is one, while the trained VAE is kept on the CPU: the
    periodic sample grids decoded CUDA latents with the CPU decoder."""
    from genimage.config import ImageTrainConfig
    from genimage.training import data_summary, fit_backbone, load_training_data, run_record

    cfg = ImageTrainConfig(
        data="digits", image_size=8, latent=True, vae_steps=2, steps=2, batch_size=8, vae_width=8, warmup_steps=1,
        progress=False,
    ).validate()  # fmt: skip
    data = load_training_data(cfg)
    record = run_record(cfg, data_summary(data, 8))
    got = []

    def callback(run: LoadedRun, step: int) -> None:
        got.append(generate(run, sample_noise(run, 4, 1), nfe=2))

    result, vae, _ = fit_backbone(cfg, data, record, tmp_path, {"sample_every": 1}, callback)
    assert next(result.ema.parameters()).device.type == "cuda"
    assert vae.latent_scale.device.type == "cpu"  # the returned VAE stays where it was
    assert len(got) == 2 and all(x.shape == (4, 1, 8, 8) and torch.isfinite(x).all() for x in got)


@pytest.mark.parametrize("objective", ["flow", "vp"])
@pytest.mark.parametrize("solver", ["euler", "heun"])
def test_guidance_follows_the_generators_solver_grid_and_path(objective, solver):
    # without guidance (scale 0) the guided sampler is the generator's own: same solver, grid, end time and
    # (VP) final clean estimate, so a marked image differs from the unmarked one of its noise by the mark alone
    gen = RunGenerator(_run(objective), steps=6, solver=solver)
    noise = torch.randn(5, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    decoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    msg = torch.tensor([1, 0, 1])
    guided = guided_generate(gen, noise, decoder, msg, scale=0.0, augmentations=("identity",))
    torch.testing.assert_close(guided, gen.generate(noise), atol=1e-6, rtol=0)
    assert not torch.allclose(guided_generate(gen, noise, decoder, msg, scale=1.0, augmentations=("identity",)), guided)


def test_run_generator_of_a_loaded_run_runs_where_the_run_is():
    run = _run("flow")
    assert RunGenerator(run, steps=2).device == torch.device("cpu")
    with pytest.raises(ConfigError, match="the given run is on cpu but device='cuda' was asked for"):
        RunGenerator(run, steps=2, device="cuda")


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_predict_clean_is_the_posterior_mean_of_the_runs_path(objective):
    # the oracle's velocity is exact for data N(0, s^2 I): the clean prediction must be E[x1 | x_t]
    run = _run(objective)
    gen = RunGenerator(run, steps=4)
    x = torch.randn(7, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    t = torch.tensor(0.4)
    _, c = run.path.coefficients(t, x)
    expected = c.alpha * SCALE**2 * x / (c.alpha**2 * SCALE**2 + c.sigma**2)
    torch.testing.assert_close(gen.predict_clean(x, t, gen.velocity(x, t)), expected, atol=1e-5, rtol=1e-5)


def test_bits_per_dim_is_a_tight_upper_bound_on_the_exact_discrete_code_length() -> None:
    """For data N(0, s^2 I) the model gives an 8-bit image u the probability P(u) = prod over pixels of the
    Gaussian mass of its bin [u / 127.5 - 1, (u + 1) / 127.5 - 1) (the dequantisation y = (u + U[0, 1)) / 127.5 - 1
    fills exactly that bin). By Jensen the dequantised bits/dim is at least -log2 P(u) / D in expectation over U,
    and for bins this small under a smooth density it exceeds it by ~1e-5 bits/dim only."""
    import numpy as np
    from scipy.special import ndtr

    from genimage.imageio import to_uint8

    run = _run("flow")
    n, d = 4096, 4
    images = (SCALE * torch.randn(n, 1, 2, 2, generator=torch.Generator().manual_seed(0))).clamp(-1, 1)
    bpd = bits_per_dim(run, images, steps=64, method="rk4", divergence="exact", seed=3)
    u = torch.from_numpy(to_uint8(images)).double().numpy()
    lo, hi = u / 127.5 - 1, (u + 1) / 127.5 - 1
    mass = ndtr(hi / SCALE) - ndtr(lo / SCALE)
    discrete = float(-np.log2(mass).sum() / (n * d))
    # the expectation over U, and the Monte-Carlo standard error of the one draw per pixel, are exact here:
    # -log p(y) = y^2 / (2 s^2) + const with y uniform on [lo, hi)
    ey2 = (lo**2 + lo * hi + hi**2) / 3
    var_y2 = (hi**5 - lo**5) / (5 * (hi - lo)) - ey2**2
    const = math.log(SCALE) + 0.5 * math.log(2 * math.pi) + math.log(127.5)
    expected = float((ey2 / (2 * SCALE**2) + const).sum() / (n * d * math.log(2)))
    stderr = float(np.sqrt(var_y2.sum()) / (2 * SCALE**2) / (n * d * math.log(2)))
    assert 0 < expected - discrete < 1e-4  # Jensen's gap of the exact expectation: positive and tiny
    assert 1e-5 < stderr < 1e-4
    assert bpd > discrete - 4 * stderr  # the upper bound, up to the noise of the dequantisation draw
    assert bpd == pytest.approx(expected, abs=4 * stderr + 1e-5)  # ODE and float32 error well below 1e-5
    assert bpd - discrete < 1e-3


def test_nfe_must_be_a_whole_number_of_solver_steps() -> None:
    # nfe 9 with heun ran 8 evaluations while evaluate recorded 9
    from genimage.sampling import time_grid

    run = _run("flow")
    assert time_grid(run, 8, "heun").shape == (5,) and time_grid(run, 12, "rk4").shape == (4,)
    with pytest.raises(ConfigError, match="nfe 9 is not a multiple of the heun solver's 2 evaluations per step; use 8"):
        time_grid(run, 9, "heun")
    with pytest.raises(ConfigError, match="use 4"):
        time_grid(run, 2, "rk4")


def test_sample_images_is_batch_size_invariant_and_checks_its_labels() -> None:
    torch.manual_seed(0)
    model = DiT(image_size=4, channels=1, patch_size=2, size="DiT-Mi", num_classes=3).eval()
    for p in model.parameters():  # a non-zero field, so that the labels matter
        torch.nn.init.normal_(p, std=0.02)
    config = {"prediction": "velocity", "objective": "flow", "image_shape": [1, 4, 4], "sample_shape": [1, 4, 4]}
    run = LoadedRun.from_parts(model, config | {"t_end": 1.0, "num_classes": 3})
    from gencore.errors import InputError
    from genimage.sampling import sample_images

    y = torch.tensor([0, 1, 2, 2, 1])
    kw = {"nfe": 2, "cfg_scale": 1.0, "solver": "euler", "seed": 3, "progress": False}
    whole = sample_images(run, 5, y, batch_size=256, **kw)
    torch.testing.assert_close(sample_images(run, 5, y, batch_size=2, **kw), whole)
    torch.testing.assert_close(whole, generate(run, sample_noise(run, 5, seed=3), y, nfe=2))
    assert not torch.allclose(whole, sample_images(run, 5, y.flip(0), batch_size=2, **kw))
    assert sample_images(run, 0, torch.zeros(0, dtype=torch.long), batch_size=2, **kw).shape == (0, 1, 4, 4)
    for labels in (y[:3], torch.cat([y, y])):  # too few or too many: one sentence naming n
        with pytest.raises(InputError, match=r"labels must be \[5\] class indices"):
            sample_images(run, 5, labels, batch_size=2, **kw)


MEAN = torch.tensor([0.3, -0.2, 0.1, 0.5]).view(1, 2, 2)  # data N(MEAN, diag(VAR)): off zero, per pixel variances
VAR = torch.tensor([0.04, 0.09, 0.16, 0.01]).view(1, 2, 2)


class DiagonalGaussianOracle(GaussianOracle):
    """Bayes-optimal prediction for data ``N(MEAN, diag(VAR))``, computed in float64."""

    def forward(self, x, t, y=None):
        _, c = self.path.coefficients(t, x)
        a, s, da, ds = (v.double() for v in (c.alpha, c.sigma, c.d_alpha, c.d_sigma))
        centred = (x.double() - a * MEAN) / (a**2 * VAR + s**2)
        x1, eps = MEAN + a * VAR * centred, s * centred  # E[x1 | x_t], E[x0 | x_t]
        return (eps if self.prediction == "noise" else da * x1 + ds * eps).float()


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_generate_is_the_exact_gaussian_flow_map_sample_by_sample(objective: str) -> None:
    """For Gaussian data the probability-flow ODE keeps the standardised coordinate
    ``(x_t - alpha_t MEAN) / sqrt(alpha_t^2 VAR + sigma_t^2)`` fixed, so each noise sample has a known image: at
    ``t_end`` the state is known in closed form, and a VP run returns its posterior mean ``E[x1 | x_{t_end}]``.
    A sampler that skipped the VP run's final clean estimate, stopped at another time or integrated another path
    misses it by 1e-3 or more; the moment check of test_generate_reaches_the_data_law cannot see that."""
    run = _run(objective)
    run.model = DiagonalGaussianOracle(schedule=run.model.config["schedule"], prediction=run.prediction)
    schedule = run.path.schedule
    noise = 0.5 * sample_noise(run, 64, seed=1)  # inside [-1, 1] after the map, so the clamp does not act
    start, end = (schedule(torch.tensor(t, dtype=torch.float64)) for t in (0.0, run.t_end))
    standard = (noise - start.alpha * MEAN) / torch.sqrt(start.alpha**2 * VAR + start.sigma**2)
    x_end = end.alpha * MEAN + torch.sqrt(end.alpha**2 * VAR + end.sigma**2) * standard
    expected = MEAN + end.alpha * VAR * (x_end - end.alpha * MEAN) / (end.alpha**2 * VAR + end.sigma**2)
    assert float(expected.abs().max()) < 0.9
    x = generate(run, noise, nfe=1024, solver="rk4")
    torch.testing.assert_close(x, expected.float(), atol=2e-5, rtol=0)


def test_guidance_is_refused_for_a_run_whose_null_class_was_never_trained() -> None:
    """With ``label_dropout`` 0 the null class is never a training label, so the branch guidance subtracts is not
    the unconditional velocity: on digits (DiT-Mi, 400 steps) ``|v_null - mean_y v_y|`` was 1.3 times the spread of
    the class velocities at ``t = 0`` (where the unconditional velocity is exactly their mean), against 0.06 with
    dropout 0.1. Guided sampling of such a run is refused; unguided sampling and fine-tuned runs are not."""
    run = _conditional_run()
    noise = sample_noise(run, 3)
    y = torch.tensor([0, 1, 2])
    run.config = run.config | {"label_dropout": 0.0}
    with pytest.raises(ConfigError, match=r"cfg_scale 2\.0 needs a run trained with label dropout; this run has label"):
        generate(run, noise, y, nfe=2, cfg_scale=2.0)
    with pytest.raises(ConfigError, match="label_dropout 0"):
        invert(run, noise, y, nfe=2, cfg_scale=0.0)
    assert generate(run, noise, y, nfe=2).shape == (3, 1, 4, 4)  # no guidance: fine
    for config in ({"label_dropout": 0.1}, {"label_dropout": 0.0, "init_from": "runs/base"}):
        run.config = run.config | config
        assert generate(run, noise, y, nfe=2, cfg_scale=2.0).shape == (3, 1, 4, 4)


CLASS_MEANS = torch.tensor([-0.2, 0.1, 0.25, 0.05])  # classes 0..2 and the null class (index 3)


class ConditionalGaussianOracle(GaussianOracle):
    """Bayes-optimal prediction for class ``y`` data ``N(CLASS_MEANS[y], diag(VAR))``, the null class included."""

    def forward(self, x, t, y=None):
        _, c = self.path.coefficients(t, x)
        a, s, da, ds = (v.double() for v in (c.alpha, c.sigma, c.d_alpha, c.d_sigma))
        m = CLASS_MEANS.double()[y].view(-1, 1, 1, 1)
        centred = (x.double() - a * m) / (a**2 * VAR + s**2)
        x1, eps = m + a * VAR * centred, s * centred
        return (eps if self.prediction == "noise" else da * x1 + ds * eps).float()


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_guided_generation_is_the_exact_flow_map_of_the_extrapolated_gaussian(objective: str) -> None:
    """Class Gaussians of one covariance have velocities affine in their mean, so the guided velocity
    ``v_null + w (v_y - v_null)`` is the exact velocity of ``N(m_null + w (m_y - m_null), VAR)``: each noise sample has
    a known guided image (``w = 1`` conditional, ``w = 0`` the null class). A sampler that dropped the scale on the
    ODE, the VP run's final clean estimate or the inversion, or swapped the branches, misses it."""
    run = _run(objective)
    run.model = ConditionalGaussianOracle(schedule=run.model.config["schedule"], prediction=run.prediction)
    run.num_classes, run.config = 3, run.config | {"num_classes": 3, "label_dropout": 0.1}
    schedule = run.path.schedule
    noise = 0.5 * sample_noise(run, 48, seed=2)
    y = torch.arange(48) % 3
    start, end = (schedule(torch.tensor(t, dtype=torch.float64)) for t in (0.0, run.t_end))
    for w in (0.0, 1.0, 2.0):
        m = (CLASS_MEANS[3] + w * (CLASS_MEANS[y] - CLASS_MEANS[3])).double().view(-1, 1, 1, 1)
        standard = (noise - start.alpha * m) / torch.sqrt(start.alpha**2 * VAR + start.sigma**2)
        x_end = end.alpha * m + torch.sqrt(end.alpha**2 * VAR + end.sigma**2) * standard
        expected = m + end.alpha * VAR * (x_end - end.alpha * m) / (end.alpha**2 * VAR + end.sigma**2)
        assert float(expected.abs().max()) < 0.95  # the clamp to [-1, 1] does not act
        x = generate(run, noise, y, nfe=512, cfg_scale=w, solver="rk4")
        torch.testing.assert_close(x, expected.float(), atol=2e-5, rtol=0)
        if objective == "flow":  # the guided ODE run backwards returns the noise (a VP image is a clean estimate)
            torch.testing.assert_close(invert(run, x, y, nfe=512, cfg_scale=w, solver="rk4"), noise, atol=1e-4, rtol=0)
    from genimage.sampling import sample_images

    kw = {"nfe": 4, "cfg_scale": 2.0, "solver": "heun", "seed": 2, "progress": False}
    whole = sample_images(run, 48, y, batch_size=256, **kw)
    torch.testing.assert_close(sample_images(run, 48, y, batch_size=5, **kw), whole, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        whole, generate(run, sample_noise(run, 48, seed=2), y, nfe=4, cfg_scale=2.0, solver="heun")
    )


def test_a_latent_runs_decode_undoes_the_latent_scale_of_its_encode() -> None:
    """Training sees ``latent_scale * mean`` (unit-variance latents); sampling must divide the scale out before the
    decoder, so a latent run's ``decode(encode(x))`` is the decoder applied to the posterior mean. (The KL-VAE's own
    decoder starts with a GroupNorm that hides a positive scale, so a scale-sensitive decoder stands in for it.)"""
    from genimage.models.vae import KLVAE

    torch.manual_seed(0)
    vae = KLVAE(channels=1, latent_channels=2, width=8).eval()
    vae.latent_scale.fill_(2.5)
    vae.decoder = torch.nn.Sequential(torch.nn.Upsample(scale_factor=2), torch.nn.Conv2d(2, 1, 1))
    config = {"prediction": "velocity", "objective": "flow", "image_shape": [1, 8, 8], "sample_shape": [2, 4, 4]}
    run = LoadedRun.from_parts(_run("flow").model, config | {"t_end": 1.0, "num_classes": None}, vae)
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        mean = vae.encode(x)[0]
        torch.testing.assert_close(run.encode(x), 2.5 * mean)
        reconstruction = vae.decoder(mean)
        assert float(reconstruction.abs().max()) < 1.0  # the clamp of decode does not act
        torch.testing.assert_close(run.decode(run.encode(x)), reconstruction)
