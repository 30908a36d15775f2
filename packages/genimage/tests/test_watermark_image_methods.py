"""Watermark guidance, MOLM and the regeneration attack against analytic answers, on linear and VP runs.

The runs here are exact: a Bayes-optimal "network" for Gaussian data (or for one fixed image) on the run's own
path, so what a sampler, a noising step or a one-step clean prediction must give is known in closed form.
"""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError, StorageError
from genimage.runs import LoadedRun
from genimage.task import make_path
from genimage.watermark import molm
from genimage.watermark.generators import GaussianFlowGenerator, RunGenerator
from genimage.watermark.guidance import GaussianNull, guided_generate
from genimage.watermark.hidden import HiddenConfig, HiddenModel, train_hidden

SCALE = 0.5  # data ~ N(0, SCALE^2 I)


class GaussianOracle(torch.nn.Module):
    """The exact prediction (velocity on the linear path, noise on VP) for data ``N(0, SCALE^2 I)``."""

    def __init__(self, objective: str) -> None:
        super().__init__()
        self.path, self.prediction, _ = make_path(objective)
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x, t, y=None):
        _, c = self.path.coefficients(t, x)
        denom = c.alpha**2 * SCALE**2 + c.sigma**2
        x1, eps = c.alpha * SCALE**2 * x / denom, c.sigma * x / denom
        return eps if self.prediction == "noise" else c.d_alpha * x1 + c.d_sigma * eps


def _run(objective: str, model: torch.nn.Module | None = None, shape=(1, 2, 2)) -> LoadedRun:
    _, prediction, t_end = make_path(objective)
    config = {"prediction": prediction, "objective": objective, "image_shape": list(shape),
              "sample_shape": list(shape), "t_end": t_end, "num_classes": None}  # fmt: skip
    return LoadedRun.from_parts(model or GaussianOracle(objective), config)


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_regeneration_noises_on_the_runs_own_path(objective):
    """Data noised to time ``s`` on the run's path and solved back is again a draw of the data law: images of
    ``N(0, SCALE^2)`` keep their spread. The linear ``s z + (1 - s) eps`` on a VP run gives the network states
    with far too little noise (sigma 0.2 instead of 0.58 at s = 0.8; at s = 0.5, 0.5 instead of 0.96), and
    the sample's spread collapses."""
    gen = RunGenerator(_run(objective), steps=40, solver="heun")
    images = SCALE * torch.randn(4000, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    for strength in (0.5, 0.2):
        out = gen.regenerate(images, strength, torch.Generator().manual_seed(1))
        assert float(out.std()) == pytest.approx(SCALE, rel=0.04), (strength, float(out.std()))
        # the start state is the path's marginal at s: alpha_s z + sigma_s eps with the generator's own eps
        seen = {}
        solve = gen._solve

        def spy(x, start, end, steps=None, solve=solve, seen=seen):
            seen["x"] = x
            return solve(x, start, end, steps)

        gen._solve = spy
        gen.regenerate(images[:8], strength, torch.Generator().manual_seed(2))
        del gen._solve
        eps = torch.randn(8, 1, 2, 2, generator=torch.Generator().manual_seed(2))
        _, c = gen.run.path.coefficients(torch.tensor(1.0 - strength), images[:8])
        torch.testing.assert_close(seen["x"], c.alpha * images[:8] + c.sigma * eps)


def test_regeneration_refuses_a_strength_outside_0_1():
    gen = GaussianFlowGenerator(torch.zeros(1, 2, 2), torch.ones(1, 2, 2), steps=4)
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ConfigError, match=r"regeneration strength must lie in \(0, 1\]"):
            gen.regenerate(torch.zeros(2, 1, 2, 2), bad)


class _FixedImageOracle(torch.nn.Module):
    """The exact prediction of the run's path when every data point is the one image ``c``."""

    def __init__(self, objective: str, c: torch.Tensor) -> None:
        super().__init__()
        self.path, self.prediction, _ = make_path(objective)
        self.c, self.dummy = c, torch.nn.Parameter(torch.zeros(()))

    def forward(self, x, t, y=None):
        _, co = self.path.coefficients(t, x)
        eps = (x - co.alpha * self.c) / co.sigma
        return eps if self.prediction == "noise" else co.d_alpha * self.c + co.d_sigma * eps


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_molm_joint_phase_reads_the_exact_clean_prediction_on_the_runs_path(objective):
    """With an exact network the one-step clean prediction the extractor reads is the data itself, whatever the
    path; a VP run's noise prediction read as a velocity on linear-path points missed it by up to 3."""
    c = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8
    path, prediction, t_end = make_path(objective)
    seen = []

    def to_image(x):
        seen.append(x.detach().clone())
        return x

    net = _FixedImageOracle(objective, c)
    molm.train_molm(net, c.expand(16, -1, -1, -1).clone(), bits=4, steps=4, batch_size=8, progress=False,
                    to_image=to_image, path=path, prediction=prediction, t_end=t_end)  # fmt: skip
    assert len(seen) == 5  # the channel probe, then one prediction per step
    for x in seen[1:]:
        torch.testing.assert_close(x, c.expand_as(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_molm_build_trains_on_the_runs_path(objective, monkeypatch):
    from genimage.models.dit import DiT

    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=1, hidden=16, heads=2)
    run = _run(objective, net, (1, 8, 8))
    seen = {}

    class Stop(Exception):
        pass

    def spy(model, states, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(molm, "train_molm", spy)
    with pytest.raises(Stop):
        molm.MOLMScheme.build(RunGenerator(run, steps=2), message_bits=2, steps=1, progress=False)
    assert seen["path"] is run.path and seen["prediction"] == run.prediction and seen["t_end"] == run.t_end


def test_guidance_steps_are_the_normalised_decoder_gradient_at_the_clean_prediction():
    """Two Euler steps of an exact flow with a linear decoder: at each, x <- x + h (v - scale g / rms(g)) with
    x1 = x + (1 - t) v the clean prediction and g = W^T (sigmoid(W x1 + b) - m) the gradient of the summed BCE
    there (the velocity is the analytic one of N(mu, s^2) data)."""
    gen = GaussianFlowGenerator(torch.full((1, 4, 4), 0.1), torch.full((1, 4, 4), 0.3), steps=2)
    torch.manual_seed(0)
    dec = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 5)).requires_grad_(False)
    w, b = dec[1].weight.double(), dec[1].bias.double()
    m = torch.tensor([1, 0, 1, 1, 0])
    noise = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    for scale in (0.0, 0.5, 2.0):
        x = noise.double()
        for t in (0.0, 0.5):
            v = gen._velocity(x, torch.tensor(t, dtype=torch.float64))
            x1 = x + (1 - t) * v
            grad = ((torch.sigmoid(x1.flatten(1) @ w.T + b) - m.double()) @ w).reshape(x1.shape)
            rms = grad.flatten(1).pow(2).mean(1).sqrt()[:, None, None, None]
            x = x + 0.5 * (v - scale * grad / rms)
        out = guided_generate(gen, noise, dec, m, scale=scale, augmentations=("identity",))
        torch.testing.assert_close(out.double(), x.clamp(-1, 1), atol=1e-5, rtol=0)


def test_guidance_refuses_unknown_augmentations_and_non_binary_messages():
    gen = GaussianFlowGenerator(torch.zeros(1, 4, 4), torch.full((1, 4, 4), 0.3), steps=2)
    dec = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    noise, msg = torch.randn(2, 1, 4, 4), torch.tensor([1, 0, 1])
    for bad in (("identity", "blurr"), (), "jpeg"):  # a misspelt name used to run as the identity
        with pytest.raises(ConfigError, match="guidance augmentations must be a non-empty list of identity"):
            guided_generate(gen, noise, dec, msg, augmentations=bad)
    with pytest.raises(InputError, match=r"message must be a 1-D tensor of 0/1 bits, got shape \(3,\)"):
        guided_generate(gen, noise, dec, 2 * msg - 1)  # +-1 signs: BCE would push every bit to 0
    with pytest.raises(ConfigError, match="guidance scale must be a finite number"):
        guided_generate(gen, noise, dec, msg, scale=float("nan"))


def test_gaussian_null_needs_two_finite_scores():
    for bad in (torch.tensor([0.3]), torch.tensor([0.1, float("nan"), 0.2])):
        with pytest.raises(InputError, match="Gaussian null needs at least 2 finite unmarked scores"):
            GaussianNull(bad)


def test_hidden_config_and_training_refuse_bad_settings(tmp_path):
    for kw, field in (({"hidden": 30}, "hidden"), ({"message_bits": 0}, "message_bits"), ({"strength": 0.0},
                      "strength"), ({"lr": float("nan")}, "lr"), ({"mse_weight": -1.0}, "mse_weight")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"HiddenConfig.{field} must be"):
            HiddenConfig(**kw)
    with pytest.raises(InputError, match=r"HiDDeN trains on images \[N >= 1, 1, H, W\]"):
        train_hidden(torch.zeros(4, 3, 8, 8), HiddenConfig(channels=1, steps=1), progress=False)
    model = HiddenModel(HiddenConfig(message_bits=4, hidden=8))
    model.save_pretrained(tmp_path / "h")
    cfg = tmp_path / "h" / "config.json"
    cfg.write_text(cfg.read_text().replace('"hidden": 8', '"hidden": 6'))
    with pytest.raises(StorageError, match=r"config.json' does not describe a HiddenModel \(HiddenConfig.hidden must"):
        HiddenModel.from_pretrained(tmp_path / "h")


def test_molm_phases_refuse_no_steps():
    gen = GaussianFlowGenerator(torch.zeros(1, 8, 8), torch.ones(1, 8, 8), steps=2)
    ext = torch.nn.Linear(1, 1)
    with pytest.raises(ConfigError, match="MOLM's steps through the sampler must be"):
        molm.train_through_sampler(gen, torch.nn.Linear(1, 1), ext, bits=2, steps=0, progress=False)
    with pytest.raises(ConfigError, match="check_every must be"):
        molm.train_extractor(ext, torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2, 1),
                             steps=1, check_every=0, progress=False)  # fmt: skip
