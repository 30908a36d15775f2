"""The training objectives of :class:`genimage.task.ImageTask` (flow-matching velocity target, VP noise
target, label dropout for classifier-free guidance) and guidance at sampling, checked against formulas
written out here, with non-zero models so that a wrong target or a swapped branch changes the numbers."""

from __future__ import annotations

import math

import pytest
import torch

from genimage.config import ImageTrainConfig
from genimage.models import DiT
from genimage.runs import LoadedRun
from genimage.sampling import generate
from genimage.task import VP_T_EPS, ImageTask, make_path

SEED = 1234


class Recorder(torch.nn.Module):
    """Returns a fixed random tensor plus a linear term in ``x_t`` and records every call's inputs."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.out = torch.randn(shape, generator=torch.Generator().manual_seed(7))
        self.dummy = torch.nn.Parameter(torch.zeros(()))  # sampling reads the device from the parameters
        self.calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def forward(self, x, t, y=None):
        self.calls.append((x.detach().clone(), torch.as_tensor(t).detach().clone(), None if y is None else y.clone()))
        return self.out[: x.shape[0]] + 0.3 * x


def _task(objective: str, label_dropout: float = 0.0, num_classes: int | None = None) -> ImageTask:
    cfg = ImageTrainConfig(objective=objective, label_dropout=label_dropout).validate()
    return ImageTask(cfg, torch.nn.Identity(), num_classes)


def _draws(task: ImageTask, x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """The task's own draws from ``SEED``: the noise ``x0`` first, then the times (the generator is returned
    positioned after them)."""
    g = torch.Generator().manual_seed(SEED)
    x0 = torch.randn(x1.shape, generator=g)
    t = task.time_sampler(x1.shape[0], generator=g, dtype=x1.dtype)
    return x0, t, g


def _one_loss(objective: str):
    """``(x1, recording model, loss, x0, t)`` of one loss of the task on a fixed batch, its draws replayed."""
    task = _task(objective)
    x1 = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1
    model = Recorder(x1.shape)
    loss, _ = task.loss(model, (x1,), torch.Generator().manual_seed(SEED))
    x0, t, _ = _draws(task, x1)
    return x1, model, loss, x0, t


def test_flow_loss_regresses_the_velocity_x1_minus_x0_on_the_linear_path() -> None:
    x1, model, loss, x0, t = _one_loss("flow")
    tb = t.view(-1, 1, 1, 1)
    x_t = tb * x1 + (1 - tb) * x0
    ((seen_x, seen_t, seen_y),) = model.calls
    assert torch.allclose(seen_t, t) and seen_y is None
    assert torch.allclose(seen_x, x_t, atol=1e-6)
    pred = model.out + 0.3 * x_t
    expected = (pred - (x1 - x0)).square().mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert float(loss) != pytest.approx(float((pred + (x1 - x0)).square().mean()), rel=1e-2)  # a negated target


def test_vp_loss_regresses_the_noise_on_the_vp_path() -> None:
    x1, model, loss, x0, t = _one_loss("vp")
    t = t * (1 - VP_T_EPS)
    # VP schedule (beta_min 0.1, beta_max 20) on diffusion time s = 1 - t, written out
    s = 1 - t.double()
    integral = 0.1 * s + 0.5 * (20.0 - 0.1) * s * s
    alpha = torch.exp(-0.5 * integral).float().view(-1, 1, 1, 1)
    sigma = torch.sqrt(1 - torch.exp(-integral)).float().view(-1, 1, 1, 1)
    x_t = alpha * x1 + sigma * x0
    ((seen_x, seen_t, _),) = model.calls
    assert torch.allclose(seen_t, t, atol=1e-6)
    assert torch.allclose(seen_x, x_t, atol=1e-5)
    pred = model.out + 0.3 * x_t
    expected = (pred - x0).square().mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-4)
    for wrong in (x1, -x0, (x1 - x0)):  # data or velocity-like targets must not match
        assert float(loss) != pytest.approx(float((pred - wrong).square().mean()), rel=1e-2)


def test_label_dropout_uses_the_null_class_at_rate_p_and_keeps_the_other_labels() -> None:
    n, classes, p = 4000, 5, 0.3
    task = _task("flow", label_dropout=p, num_classes=classes)
    x1 = torch.zeros(n, 1, 1, 1)
    y = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(3))
    model = Recorder(x1.shape)
    task.loss(model, (x1, y), torch.Generator().manual_seed(SEED))
    ((_, _, seen_y),) = model.calls
    dropped = seen_y == classes  # the null class is index num_classes
    assert bool(((seen_y >= 0) & (seen_y <= classes)).all())
    assert torch.equal(seen_y[~dropped], y[~dropped])  # labels not dropped are untouched
    frac = float(dropped.float().mean())
    assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / n), frac
    # the mask is the task's own third draw: rand(b) < p after the noise and the times
    _, _, g = _draws(task, x1)
    assert torch.equal(dropped, torch.rand(n, generator=g) < p)


def test_no_label_dropout_when_the_rate_is_zero_nor_at_sampling() -> None:
    classes = 4
    y = torch.arange(8) % classes
    task = _task("flow", label_dropout=0.0, num_classes=classes)
    model = Recorder((8, 1, 2, 2))
    task.loss(model, (torch.zeros(8, 1, 2, 2), y), torch.Generator().manual_seed(SEED))
    assert torch.equal(model.calls[0][2], y)
    config = {"prediction": "velocity", "objective": "flow", "image_shape": [1, 2, 2], "sample_shape": [1, 2, 2]}
    run = LoadedRun.from_parts(Recorder((8, 1, 2, 2)), config | {"t_end": 1.0, "num_classes": classes})
    generate(run, torch.zeros(8, 1, 2, 2), y, nfe=4)
    assert len(run.model.calls) == 4 and all(torch.equal(c[2], y) for c in run.model.calls)


def _perturbed_conditional_dit() -> DiT:
    torch.manual_seed(0)
    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=1, hidden=32, heads=2, num_classes=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return net.eval()


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_classifier_free_guidance_is_uncond_plus_w_times_cond_minus_uncond(objective: str) -> None:
    net = _perturbed_conditional_dit()
    prediction, t_end = ("velocity", 1.0) if objective == "flow" else ("noise", 1 - VP_T_EPS)
    config = {"prediction": prediction, "objective": objective, "image_shape": [1, 8, 8], "sample_shape": [1, 8, 8]}
    run = LoadedRun.from_parts(net, config | {"t_end": t_end, "num_classes": 3})
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    t, y, w = torch.tensor([0.2, 0.5, 0.8]), torch.tensor([0, 1, 2]), 2.5
    with torch.no_grad():
        v_cond = run.velocity(x, t, y)
        v_uncond = run.velocity(x, t, torch.full_like(y, 3))
        guided = run.velocity(x, t, y, cfg_scale=w)
    assert float((v_cond - v_uncond).abs().max()) > 1e-3  # the branches differ
    assert torch.allclose(guided, v_uncond + w * (v_cond - v_uncond), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(guided, v_cond + w * (v_uncond - v_cond), atol=1e-4)  # swapped branches


class _GaussianPosterior(torch.nn.Module):
    """The Bayes-optimal prediction on the objective's path for data ``N(mean, diag(var))``, in the suite's time
    (the convention the sampler integrates), optionally scaled by ``gain`` or evaluated at the reversed time."""

    def __init__(self, objective: str, mean: torch.Tensor, var: torch.Tensor, gain: float = 1.0, flip: bool = False):
        super().__init__()
        self.path, self.prediction, _ = make_path(objective)
        self.mean, self.var, self.gain, self.flip = mean, var, gain, flip

    def forward(self, x, t, y=None):
        _, c = self.path.coefficients(1 - t if self.flip else t, x)
        centred = (x - c.alpha * self.mean) / (c.alpha**2 * self.var + c.sigma**2)
        x1, eps = self.mean + c.alpha * self.var * centred, c.sigma * centred
        out = eps if self.prediction == "noise" else c.d_alpha * x1 + c.d_sigma * eps
        return self.gain * out


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_the_model_the_sampler_integrates_exactly_minimises_the_training_loss(objective: str) -> None:
    """The loss and the sampler share one path and one time convention (``t = 0`` noise, ``t = 1`` data): the
    posterior-mean prediction that generates the Gaussian data law exactly (test_sampling) minimises the task's
    loss on draws of that law; scaling it by 0.9 or 1.1, or running it with time reversed, costs loss."""
    mean = torch.tensor([0.3, -0.2, 0.1, 0.5]).view(1, 2, 2)
    var = torch.tensor([0.04, 0.09, 0.16, 0.01]).view(1, 2, 2)
    x1 = mean + var.sqrt() * torch.randn(20000, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    task = _task(objective)
    losses = {}
    for name, kw in {"exact": {}, "0.9": {"gain": 0.9}, "1.1": {"gain": 1.1}, "reversed": {"flip": True}}.items():
        loss, _ = task.loss(_GaussianPosterior(objective, mean, var, **kw), (x1,), torch.Generator().manual_seed(1))
        losses[name] = float(loss)
    assert losses["exact"] < min(losses["0.9"], losses["1.1"]), losses
    assert losses["reversed"] > 2 * losses["exact"], losses


def test_vp_sampling_stays_on_the_trained_times_and_ends_with_one_clean_estimate() -> None:
    """The VP loss trains on ``t in [0, t_end)``; sampling evaluates the network on ``[0, t_end]`` only: the grid of
    ``nfe`` evaluations up to ``t_end`` and one more at ``t_end`` for the clean estimate."""
    config = {"prediction": "noise", "objective": "vp", "image_shape": [1, 2, 2], "sample_shape": [1, 2, 2]}
    run = LoadedRun.from_parts(Recorder((3, 1, 2, 2)), config | {"t_end": 1 - VP_T_EPS, "num_classes": None})
    generate(run, torch.zeros(3, 1, 2, 2), nfe=8, solver="heun")
    times = [float(c[1]) for c in run.model.calls]
    assert len(times) == 8 + 1 and times[0] == 0.0
    assert max(times) == pytest.approx(1 - VP_T_EPS, abs=1e-7) and times[-1] == pytest.approx(1 - VP_T_EPS, abs=1e-7)
    model = Recorder((4096, 1, 1, 1))
    _task("vp").loss(model, (torch.zeros(4096, 1, 1, 1),), torch.Generator().manual_seed(SEED))
    train_t = model.calls[0][1]
    assert float(train_t.min()) >= 0.0 and 0.99 < float(train_t.max()) < 1 - VP_T_EPS


def test_an_unknown_time_sampler_is_refused_before_a_latent_run_trains_its_vae(tmp_path) -> None:
    """The time sampler was only built by the backbone's task, so a latent run with a misspelt one trained its
    KL-VAE and wrote ``vae/`` before the error."""
    from gencore.errors import ConfigError
    from genimage.training import train

    cfg = ImageTrainConfig(
        data="digits", latent=True, time_sampler="logit-normal", vae_steps=2, steps=2, batch_size=8, vae_width=8,
        warmup_steps=0, progress=False,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"unknown time sampler 'logit-normal'; expected one of: uniform, "):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "vae").exists()


@pytest.mark.parametrize("name", ["vae_scale_weight", "vae_beta", "layersync_weight"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.1])
def test_loss_weights_must_be_non_negative_and_finite(name, value) -> None:
    """A NaN vae_scale_weight passed `< 0` and silently turned the scale-consistency term off; a NaN vae_beta made
    the VAE's loss NaN."""
    from gencore.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"{name} must be a non-negative finite number, got {value}"):
        ImageTrainConfig(**{name: value}).validate()
