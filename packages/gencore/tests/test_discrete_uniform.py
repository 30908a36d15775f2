"""Uniform-noise CTMC: forward marginals, the closed-form ELBO against brute force and exact likelihoods, samplers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gencore.discrete import (
    ExactDenoiser,
    TokenDenoiser,
    UniformDiffusion,
    all_sequences,
    uniform_elbo_integrand,
)
from gencore.discrete.enumeration import empirical_tv, product_space_elbo_integrand
from gencore.errors import ConfigError

K, L = 3, 2


def joint() -> torch.Tensor:
    p = torch.tensor([0.20, 0.02, 0.08, 0.05, 0.25, 0.01, 0.10, 0.04, 0.25], dtype=torch.float64)
    return p / p.sum()


def tv(tokens: torch.Tensor, p: torch.Tensor) -> float:
    return empirical_tv(tokens, p, K)


def expected_integrand(process: UniformDiffusion, posterior: torch.Tensor, x0: torch.Tensor, t: float) -> torch.Tensor:
    """``E_{x_t ~ q_t(.|x0)}`` of the closed-form integrand by enumerating all ``K^L`` noisy states."""
    states = all_sequences(K, L)
    tt = torch.tensor(t, dtype=torch.float64)
    alpha, alpha_prime = process.schedule.alpha(tt), process.schedule.alpha_prime(tt)
    n = states.shape[0]
    out = torch.zeros(x0.shape[0], dtype=torch.float64)
    for b, seq in enumerate(x0):
        q = process.marginal(seq[None], t).double()[0]
        weight = q[torch.arange(L), states].prod(-1)
        terms = uniform_elbo_integrand(posterior, states, seq.expand(n, L), alpha.expand(n), alpha_prime.expand(n))
        out[b] = (weight * terms).sum()
    return out


def exact_posterior_table(process: UniformDiffusion, model, t: float) -> torch.Tensor:
    states = all_sequences(K, L)
    return torch.softmax(model(process.features(states), torch.full((states.shape[0],), t)).double(), -1)


def test_forward_marginals_match_closed_form():
    process = UniformDiffusion(4, "cosine")
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 4, (4000, 50), generator=g)
    for t in (0.1, 0.5, 0.9):
        x_t = process.corrupt(x0, t, generator=g)
        alpha = float(process.schedule.alpha(torch.tensor(t)))
        same = alpha + (1 - alpha) / 4
        se = math.sqrt(same * (1 - same) / x0.numel())
        assert abs(float((x_t == x0).double().mean()) - same) < 5 * se
        shifted = float((x_t == (x0 + 1) % 4).double().mean())
        assert abs(shifted - (1 - alpha) / 4) < 5 * math.sqrt((1 - alpha) / 4 / x0.numel())
        q = process.marginal(x0[:2], t)
        torch.testing.assert_close(q.sum(-1), torch.ones(2, 50))


def test_cosine_schedule_is_accurate_in_float32_near_the_noise_end():
    # 1 - cos(pi t / 2) is exactly 0 in float32 for t < 1.7e-4, where alpha' / alpha then made the ELBO NaN
    process = UniformDiffusion(K, "cosine")
    t = torch.tensor([1e-5, 1e-4, 1.6e-4, 1e-3, 0.5], dtype=torch.float32)
    torch.testing.assert_close(
        process.schedule.alpha(t).double(), 1 - torch.cos(math.pi * t.double() / 2), rtol=1e-6, atol=0
    )
    model = ExactDenoiser(joint(), K, L, process.clean_log_likelihood)
    x0 = all_sequences(K, L).repeat(50, 1)
    terms = process.elbo_terms(model, x0, torch.full((x0.shape[0],), 1e-4), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(terms).all()


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_closed_form_integrand_matches_generic_ctmc_elbo_by_brute_force(schedule):
    """UDLM-style closed form == the Girsanov CTMC ELBO on the 9-state product space, for an arbitrary denoiser."""
    process = UniformDiffusion(K, schedule)
    g = torch.Generator().manual_seed(1)
    posterior = torch.softmax(torch.randn(K**L, L, K, generator=g, dtype=torch.float64), -1)
    x0 = all_sequences(K, L)
    for t in (0.05, 0.4, 0.8, 0.97):
        tt = torch.tensor(t, dtype=torch.float64)
        alpha, alpha_prime = process.schedule.alpha(tt), process.schedule.alpha_prime(tt)
        rate = (alpha_prime / alpha / K) * (torch.ones(K, K) - torch.eye(K)).double()
        marginal = alpha * torch.eye(K).double() + (1 - alpha) / K
        reference = product_space_elbo_integrand(x0, rate, marginal, posterior)
        torch.testing.assert_close(
            expected_integrand(process, posterior, x0, t), reference, rtol=1e-6, atol=1e-9
        )  # marginals in float32
        assert bool((reference > 0).all())


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_elbo_is_tight_with_the_true_posterior(schedule):
    """With the Bayes denoiser the reverse CTMC is the exact reversal and the prior is exact: NELBO(x) = -log p(x)."""
    process = UniformDiffusion(K, schedule)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    x0 = all_sequences(K, L)
    # u = alpha_t on Gauss-Legendre nodes in (0, 1); the integral is schedule-free in alpha
    nodes, weights = np.polynomial.legendre.leggauss(200)
    total = torch.zeros(x0.shape[0], dtype=torch.float64)
    for u, w in zip((nodes + 1) / 2, weights / 2):
        t = float(torch.tensor(u) if schedule == "linear" else torch.arccos(torch.tensor(1.0 - u)) * 2 / math.pi)
        tt = torch.tensor(t, dtype=torch.float64)
        dt_du = 1.0 / float(process.schedule.alpha_prime(tt))
        total += w * dt_du * expected_integrand(process, exact_posterior_table(process, model, t), x0, t)
    torch.testing.assert_close(total, -p.log(), rtol=0, atol=5e-3)


def test_elbo_of_a_context_free_model_exceeds_the_entropy():
    process = UniformDiffusion(K)
    p = joint()
    marg = p.view(K, K)
    marginals = torch.stack([marg.sum(1), marg.sum(0)])
    x0 = all_sequences(K, L)
    nodes, weights = np.polynomial.legendre.leggauss(100)
    total = torch.zeros(x0.shape[0], dtype=torch.float64)
    for t, w in zip((nodes + 1) / 2, weights / 2):
        total += w * expected_integrand(process, marginals.expand(K**L, L, K), x0, float(t))
    entropy = float(-(p * p.log()).sum())
    assert float((p * total).sum()) > entropy + 0.05


def test_monte_carlo_bound_is_unbiased():
    process = UniformDiffusion(K)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    x0 = all_sequences(K, L).repeat_interleave(600, 0)
    bound = process.nll_bound(model, x0, n_time=8, generator=torch.Generator().manual_seed(3)) * L
    per_x = bound.view(K**L, 600)
    se = per_x.std(1) / math.sqrt(600)
    assert bool(((per_x.mean(1) + p.log()).abs() < 4 * se + 1e-2).all())
    loss, metrics = process.loss(model, x0[:64], generator=torch.Generator().manual_seed(4))
    assert loss.dim() == 0 and math.isfinite(metrics["nelbo"])


def test_ancestral_step_is_the_exact_posterior_for_a_known_clean_token():
    """With ``p_theta = delta_c`` the step is Bayes: q(x_s = j | x_t = v, x0 = c) ∝ q_s(j | c) q(v | j; t <- s)."""
    process = UniformDiffusion(K)
    a_t, a_s = 0.3, 0.7
    for c in range(K):
        for v in range(K):
            probs = torch.nn.functional.one_hot(torch.tensor([[c]]), K).double()
            ours = process.ancestral_probs(probs, torch.tensor([[v]]), a_t, a_s)[0, 0]
            q_s = a_s * torch.eye(K)[c].double() + (1 - a_s) / K
            r = a_t / a_s
            q_v_given_j = r * torch.eye(K)[:, v].double() + (1 - r) / K
            bayes = q_s * q_v_given_j
            torch.testing.assert_close(ours / ours.sum(), bayes / bayes.sum())
            q_t_v = a_t * float(v == c) + (1 - a_t) / K
            assert float(ours.sum()) == pytest.approx(q_t_v / q_t_v, rel=1e-12)  # already normalised


@pytest.mark.parametrize(("method", "steps"), [("ancestral", 64), ("tau-leaping", 128), ("euler", 128)])
def test_samplers_recover_the_target_and_count_nfe(method, steps):
    process = UniformDiffusion(K, sampler=method)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    out = process.sample(model, 20000, L, steps=steps, generator=torch.Generator().manual_seed(5))
    assert out.nfe == steps and out.tokens.shape == (20000, L)
    assert tv(out.tokens, p) < 0.03


def test_few_step_ancestral_sampler_is_not_exact():
    """The factorised posterior is exact only in the limit: two steps give a visibly wrong law."""
    process = UniformDiffusion(K)
    p = joint()
    model = ExactDenoiser(p, K, L, process.clean_log_likelihood)
    out = process.sample(model, 30000, L, steps=2, generator=torch.Generator().manual_seed(6))
    assert tv(out.tokens, p) > 0.05


def test_configuration_errors():
    with pytest.raises(ConfigError):
        UniformDiffusion(1)
    with pytest.raises(ConfigError):
        UniformDiffusion(3, sampler="gibbs")
    with pytest.raises(ConfigError):
        UniformDiffusion(3, t_range=(0.0, 1.0))


def test_a_denoiser_of_the_wrong_width_is_refused():
    """K + 1 logits used to be scored as a (K + 1)-token process: a finite, meaningless bound."""
    process = UniformDiffusion(K)
    torch.manual_seed(0)
    wide = TokenDenoiser(process.input_dim, K + 1, L, hidden=8, depth=1, heads=2)
    x0 = all_sequences(K, L)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ConfigError, match="logits of shape"):
        process.nll_bound(wide, x0, n_time=2, generator=g)
    with pytest.raises(ConfigError, match="logits of shape"):
        process.sample(wide, 4, L, steps=2, generator=g)
