"""Masked (absorbing) diffusion: forward marginals, the ELBO against exact likelihoods, the sampler."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from gencore.discrete import (
    CosineDiscreteSchedule,
    ExactDenoiser,
    LinearDiscreteSchedule,
    MaskedDiffusion,
    TokenDenoiser,
    all_sequences,
    ctmc_jump,
    discrete_schedule,
    sample_categorical,
)
from gencore.discrete.enumeration import empirical_tv, product_space_elbo_integrand, sequence_index
from gencore.discrete.masked import masked_elbo_integrand
from gencore.errors import ConfigError, InputError

K, L = 3, 2


def joint() -> torch.Tensor:
    """A correlated law over the 9 sequences of length 2 on 3 tokens."""
    p = torch.tensor([0.20, 0.02, 0.08, 0.05, 0.25, 0.01, 0.10, 0.04, 0.25], dtype=torch.float64)
    return p / p.sum()


def tv(tokens: torch.Tensor, p: torch.Tensor) -> float:
    return empirical_tv(tokens, p, K)


def gauss_legendre(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    nodes, weights = np.polynomial.legendre.leggauss(n)
    return torch.tensor((nodes + 1) / 2), torch.tensor(weights / 2)


def exact_nelbo(process: MaskedDiffusion, model, x0: torch.Tensor, n_nodes: int = 48) -> torch.Tensor:
    """NELBO (nats per sequence) by Gauss-Legendre in t and exact enumeration of every masked state."""
    states = all_sequences(K + 1, L)
    out = torch.zeros(x0.shape[0], dtype=torch.float64)
    for t, w in zip(*gauss_legendre(n_nodes)):
        tt = torch.full((states.shape[0],), float(t))
        alpha, alpha_prime = process.schedule.alpha(tt).double(), process.schedule.alpha_prime(tt).double()
        logits = model(process.features(states), tt.float()).double()
        for b, seq in enumerate(x0):
            q = process.marginal(seq[None], float(t)).double()[0]  # [L, K+1]
            weight = q[torch.arange(L), states].prod(-1)
            keep = weight > 0
            integrand = masked_elbo_integrand(
                logits[keep], states[keep], seq.expand(int(keep.sum()), L), alpha[keep], alpha_prime[keep]
            )
            out[b] += w * (weight[keep] * integrand).sum()
    return out


def test_schedules_endpoints_and_derivatives():
    t = torch.linspace(0.05, 0.95, 19, dtype=torch.float64)
    for name in ("linear", "cosine"):
        s = discrete_schedule(name)
        assert float(s.alpha(torch.tensor(0.0))) == 0.0 and float(s.alpha(torch.tensor(1.0))) == pytest.approx(1.0)
        fd = (s.alpha(t + 1e-6) - s.alpha(t - 1e-6)) / 2e-6
        torch.testing.assert_close(s.alpha_prime(t), fd, rtol=1e-6, atol=1e-6)
    assert isinstance(discrete_schedule("linear"), LinearDiscreteSchedule)
    assert isinstance(discrete_schedule(CosineDiscreteSchedule()), CosineDiscreteSchedule)
    with pytest.raises(ConfigError):
        discrete_schedule("quadratic")


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_forward_marginals_match_closed_form(schedule):
    process = MaskedDiffusion(K, schedule)
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, K, (4000, 50), generator=g)
    for t in (0.1, 0.5, 0.9):
        x_t = process.corrupt(x0, t, generator=g)
        alpha = float(process.schedule.alpha(torch.tensor(t)))
        clean = float((x_t == x0).double().mean())
        masked = float((x_t == K).double().mean())
        se = math.sqrt(alpha * (1 - alpha) / x0.numel())
        assert abs(clean - alpha) < 5 * se and clean + masked == pytest.approx(1.0)
        q = process.marginal(x0[:3], t)
        torch.testing.assert_close(q.sum(-1), torch.ones(3, 50))
        assert float(q[0, 0, x0[0, 0]]) == pytest.approx(alpha, abs=1e-6)


def test_integrand_matches_generic_ctmc_elbo_by_brute_force():
    """Closed-form integrand == the Girsanov CTMC ELBO over the full 16-state product space, any denoiser."""
    process = MaskedDiffusion(K, "cosine")
    g = torch.Generator().manual_seed(1)
    states = all_sequences(K + 1, L)
    posterior = torch.softmax(torch.randn(states.shape[0], L, K, generator=g, dtype=torch.float64), -1)
    x0 = all_sequences(K, L)
    for t in (0.2, 0.55, 0.9):
        alpha = process.schedule.alpha(torch.tensor(t, dtype=torch.float64))
        alpha_prime = process.schedule.alpha_prime(torch.tensor(t, dtype=torch.float64))
        rate = torch.zeros(K + 1, K + 1, dtype=torch.float64)
        rate[:K, K] = alpha_prime / alpha  # clean -> mask at rate alpha'/alpha in noising time
        marginal = torch.cat([alpha * torch.eye(K), (1 - alpha) * torch.ones(K, 1)], dim=1).double()
        reference = product_space_elbo_integrand(x0, rate, marginal, posterior)
        ours = torch.zeros(x0.shape[0], dtype=torch.float64)
        for b, seq in enumerate(x0):
            weight = marginal[seq[None, :], states].prod(-1)
            n = states.shape[0]
            terms = masked_elbo_integrand(
                posterior.log(), states, seq.expand(n, L), alpha.expand(n), alpha_prime.expand(n)
            ).double()
            ours[b] = (weight * terms).sum()
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_elbo_is_exact_with_the_true_posterior(schedule):
    """With the Bayes denoiser the masked ELBO is tight: NELBO(x) = -log p(x) for every x (any schedule)."""
    process = MaskedDiffusion(K, schedule)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    x0 = all_sequences(K, L)
    nelbo = exact_nelbo(process, model, x0)
    torch.testing.assert_close(nelbo, -p.log(), rtol=0, atol=2e-4)


def test_elbo_of_a_wrong_model_bounds_its_own_likelihood():
    """A context-free denoiser (marginals only) models prod_i p_i(x_i): NELBO equals that NLL, and exceeds H(p)."""
    process = MaskedDiffusion(K)
    p = joint()
    marg = p.view(K, K)
    marginals = torch.stack([marg.sum(1), marg.sum(0)])  # [L, K]

    def context_free(features, t, y=None):
        return marginals.log().float().expand(features.shape[0], L, K)

    x0 = all_sequences(K, L)
    nelbo = exact_nelbo(process, context_free, x0)
    model_nll = -(marginals[0, x0[:, 0]].log() + marginals[1, x0[:, 1]].log())
    torch.testing.assert_close(nelbo, model_nll, rtol=0, atol=2e-4)
    assert float((p * nelbo).sum()) > float(-(p * p.log()).sum()) + 0.05


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_monte_carlo_bound_is_unbiased(schedule):
    """``nll_bound`` (stratified times through ``elbo_terms``) averages to -log p(x) with the Bayes denoiser."""
    process = MaskedDiffusion(K, schedule)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    x0 = all_sequences(K, L).repeat_interleave(400, 0)
    bound = process.nll_bound(model, x0, n_time=8, generator=torch.Generator().manual_seed(3)) * L  # nats / sequence
    per_x = bound.view(K**L, 400)
    se = per_x.std(1) / math.sqrt(400)
    assert bool(((per_x.mean(1) - (-p.log())).abs() < 4 * se + 1e-3).all())
    loss, metrics = process.loss(model, x0[:64], generator=torch.Generator().manual_seed(4))
    assert loss.dim() == 0 and math.isfinite(metrics["nelbo"])


def test_sampler_recovers_the_target_and_counts_nfe():
    process = MaskedDiffusion(K)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    out = process.sample(model, 40000, L, steps=100, generator=torch.Generator().manual_seed(5))
    assert out.nfe == 100 and out.tokens.shape == (40000, L) and int(out.tokens.max()) < K
    assert tv(out.tokens, p) < 0.03


def test_cosine_sampler_recovers_the_correlated_target():
    """With the Bayes denoiser and the cosine schedule, 64 unmasking steps reproduce the correlated joint."""
    process = MaskedDiffusion(K, "cosine")
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    out = process.sample(model, 16000, L, steps=64, generator=torch.Generator().manual_seed(13))
    assert out.nfe == 64 and out.tokens.shape == (16000, L) and int(out.tokens.max()) < K
    marg = p.view(K, K)
    product = torch.outer(marg.sum(1), marg.sum(0)).reshape(-1)
    assert tv(out.tokens, p) < 0.03 < 0.3 < tv(out.tokens, product)


def few_step_law(p: torch.Tensor, alphas: list[float]) -> torch.Tensor:
    """Exact output law of the unmasking sampler with the Bayes denoiser for ``L = 2`` on the grid ``alphas``.

    Each position unmasks at step ``k`` independently with probability ``alpha_{k+1} - alpha_k``. Two
    positions unmasked in the same step are drawn from the all-mask marginals (a product law); otherwise
    the second is drawn from its exact conditional given the first (the joint). So the law is
    ``c * product + (1 - c) * p`` with ``c = sum_k (alpha_{k+1} - alpha_k)^2``.
    """
    c = sum((b - a) ** 2 for a, b in itertools.pairwise(alphas))
    marg = p.view(K, K)
    return c * torch.outer(marg.sum(1), marg.sum(0)).reshape(-1) + (1 - c) * p


def test_two_step_cosine_sampler_follows_the_cosine_grid():
    """With 2 steps the output law depends on the schedule: the cosine grid's mixture weight, not the linear one.

    With the Bayes denoiser the masked sampler is schedule-free in the many-step limit, so only a coarse
    grid can tell whether the sampler really unmasks with ``(alpha_s - alpha_t) / (1 - alpha_t)`` on the
    cosine ``alpha`` (``c = (1 - cos(pi/4))^2 + cos(pi/4)^2 = 0.586``) rather than the linear one (``c = 1/2``).
    """
    process = MaskedDiffusion(K, "cosine")
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    n = 40000
    out = process.sample(model, n, L, steps=2, generator=torch.Generator().manual_seed(14))
    assert out.nfe == 2 and int(out.tokens.max()) < K
    cosine = few_step_law(p, [0.0, 1.0 - math.cos(math.pi / 4), 1.0])
    linear = few_step_law(p, [0.0, 0.5, 1.0])
    assert tv(out.tokens, cosine) < 0.02
    # the mixture weight c estimated by projecting the empirical law on the product - joint direction
    counts = torch.bincount(sequence_index(out.tokens, K), minlength=K**L).double() / n
    product = few_step_law(p, [0.0, 1.0])  # c = 1
    direction = (product - p) / (product - p).pow(2).sum()
    c_hat = float(((counts - p) * direction).sum())
    se = math.sqrt(float((cosine * direction**2).sum() - (cosine * direction).sum() ** 2) / n)
    c_cos = (1 - math.cos(math.pi / 4)) ** 2 + math.cos(math.pi / 4) ** 2
    assert abs(c_hat - c_cos) < 4 * se and abs(c_hat - 0.5) > 8 * se, (c_hat, se)
    assert float((cosine - linear).abs().sum()) > 0.05


def test_one_step_sampler_draws_the_product_of_marginals():
    """With one step every position unmasks at once from p(x0_i | all masked): a product law, not the joint."""
    process = MaskedDiffusion(K)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    out = process.sample(model, 40000, L, steps=1, generator=torch.Generator().manual_seed(6))
    marg = p.view(K, K)
    product = torch.outer(marg.sum(1), marg.sum(0)).reshape(-1)
    assert out.nfe == 1
    assert tv(out.tokens, product) < 0.02 < 0.1 < tv(out.tokens, p)


def test_ctmc_utilities():
    g = torch.Generator().manual_seed(7)
    probs = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64).expand(60000, 3)
    draws = sample_categorical(probs, generator=g)
    torch.testing.assert_close(torch.bincount(draws, minlength=3).double() / 60000, probs[0], atol=0.01, rtol=0)
    x = torch.zeros(60000, dtype=torch.long)
    intensity = torch.tensor([[9.0, 0.2, 0.1]]).expand(60000, 3)  # entry of the current value is ignored
    tau = torch.bincount(ctmc_jump(x, intensity, generator=g), minlength=3).double() / 60000
    stay = math.exp(-0.3)
    torch.testing.assert_close(
        tau, torch.tensor([stay, (1 - stay) * 2 / 3, (1 - stay) / 3]).double(), atol=0.01, rtol=0
    )
    euler = torch.bincount(ctmc_jump(x, intensity, generator=g, method="euler"), minlength=3).double() / 60000
    torch.testing.assert_close(euler, torch.tensor([0.7, 0.2, 0.1]).double(), atol=0.01, rtol=0)
    with pytest.raises(InputError):
        ctmc_jump(x, -intensity, generator=g)
    with pytest.raises(ConfigError):
        ctmc_jump(x, intensity, method="leapfrog")


def test_bad_inputs_raise_one_sentence_errors():
    process = MaskedDiffusion(K)
    with pytest.raises(InputError):
        process.corrupt(torch.tensor([[0, 3]]), 0.5)
    with pytest.raises(InputError):
        process.sample(lambda f, t: f[..., :K], 2, L, steps=0)
    with pytest.raises(ConfigError):
        MaskedDiffusion(0)


def test_a_denoiser_of_the_wrong_width_is_refused_not_scored_zero():
    """K + 1 logits (the input width) used to pass: no position counted as masked, so loss and bound were
    exactly 0 nats and the sampler emitted the mask token as data."""
    process = MaskedDiffusion(K)
    torch.manual_seed(0)
    wide = TokenDenoiser(process.input_dim, K + 1, L, hidden=8, depth=1, heads=2)
    x0 = all_sequences(K, L)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ConfigError, match="logits of shape"):
        process.nll_bound(wide, x0, n_time=2, generator=g)
    with pytest.raises(ConfigError, match="logits of shape"):
        process.loss(wide, x0, generator=g)
    with pytest.raises(ConfigError, match="logits of shape"):
        process.sample(wide, 4, L, steps=2, generator=g)
