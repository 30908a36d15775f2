"""Discrete processes against brute force on K = 3 tokens, length 2: forward marginals as the matrix exponential
of each process's generator, reverse rates and few-step samplers as the exact Bayes reversal (enumerated
independently of the code under test, with scipy's ``expm``), and the reverse steps that the samplers' many-step
tests cannot see (a Gaussian reverse variance, the marginal-transition posterior)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.linalg import expm
from scipy.stats import chisquare
from test_wright_fisher import ExactPairDenoiser  # the exact length-2 posterior, shared with the Wright-Fisher tests

from gencore.discrete import (
    ExactDenoiser,
    MarginalTransitionDiffusion,
    MaskedDiffusion,
    UniformDiffusion,
    WrightFisherDiscrete,
    WrightFisherGaussian,
    WrightFisherSimplex,
    sequence_index,
)
from gencore.discrete.command import plot_samples
from gencore.discrete.tasks import make_task
from gencore.errors import ConfigError, InputError

K, L = 3, 2
SEQS = np.array(list(itertools.product(range(K), repeat=L)))  # the 9 sequences, last position fastest
P = np.array([0.20, 0.02, 0.08, 0.05, 0.25, 0.01, 0.10, 0.04, 0.25])
P = P / P.sum()
PI3 = np.array([0.5, 0.3, 0.2])


def uniform_generator() -> np.ndarray:
    """Per-position noising generator of uniform diffusion per unit of ``int sigma``: rate ``1/K`` to each token."""
    q = np.full((K, K), 1.0 / K)
    return q - np.diag(q.sum(1))


def masked_generator() -> np.ndarray:
    """Clean token -> mask (state ``K``) at unit rate, the mask absorbing."""
    q = np.zeros((K + 1, K + 1))
    q[:K, K] = 1.0
    return q - np.diag(q.sum(1))


def alpha(process, t: float) -> float:
    return float(process.schedule.alpha(torch.tensor(t, dtype=torch.float64)))


def transition(generator: np.ndarray, keep: float) -> np.ndarray:
    """``exp(S Q)`` with ``S = -log keep`` the integrated rate (``keep = 0``: the stationary limit)."""
    return expm(-math.log(keep) * generator) if keep > 0 else expm(60.0 * generator)


def factorised_chain_law(init: np.ndarray, step_rows) -> np.ndarray:
    """Law over the 9 sequences after the steps ``step_rows(x) -> [L, K]`` (per-position next-state laws)."""
    law = init
    for rows in step_rows:
        trans = np.zeros((len(SEQS), len(SEQS)))
        for a, x in enumerate(SEQS):
            per = rows(x)
            trans[a] = np.prod([per[i][SEQS[:, i]] for i in range(L)], axis=0)
        law = law @ trans
    return law


def clean_posterior(q_t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Exact ``p(x0_i = c | x_t = x)`` ``[L, K]`` for the data law ``P`` and per-position likelihood ``q_t[c, v]``."""
    w = P * np.prod([q_t[SEQS[:, i], x[i]] for i in range(L)], axis=0)
    w = w / w.sum()
    return np.stack([np.bincount(SEQS[:, i], weights=w, minlength=K) for i in range(L)])


def bayes_step(q_s: np.ndarray, back: np.ndarray, post: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per-position ``sum_c p(c | x_t) q(x_s = j | x_t, x0 = c)``, ``q(j | v, c) ∝ q_s(j | c) back[j, v]``."""
    rows = []
    for i in range(L):
        joint = q_s * back[:, x[i]][None, :]  # [c, j]
        rows.append(post[i] @ (joint / joint.sum(1, keepdims=True)))
    return rows


def counts_of(tokens: torch.Tensor) -> np.ndarray:
    return torch.bincount(sequence_index(tokens, K), minlength=K**L).numpy()


# ------------------------------------------------------------------------------ forward marginals
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_forward_marginals_are_the_exponential_of_each_generator(schedule):
    """Masked, uniform and marginal-transition marginals at ``t`` equal ``expm(-log(alpha_t) Q)`` run from data."""
    masked, uniform = MaskedDiffusion(K, schedule), UniformDiffusion(K, schedule)
    m = np.array([0.6, 0.3, 0.1])
    marginal = MarginalTransitionDiffusion(torch.tensor(m), schedule)
    towards_m = np.ones((K, 1)) * m[None, :]
    towards_m -= np.diag(towards_m.sum(1))
    clean = torch.arange(K)[:, None]
    for t in (0.05, 0.3, 0.7, 0.95):
        a = alpha(masked, t)
        ours = masked.marginal(clean, t)[:, 0].double().numpy()
        np.testing.assert_allclose(ours, transition(masked_generator(), a)[:K], atol=1e-6)
        ours = uniform.marginal(clean, t)[:, 0].double().numpy()
        np.testing.assert_allclose(ours, transition(uniform_generator(), a), atol=1e-6)
        ours = marginal.forward_probs(torch.arange(K), t).numpy()
        np.testing.assert_allclose(ours, transition(towards_m, a), atol=1e-12)


# ------------------------------------------------------------------------------ uniform diffusion
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_uniform_reverse_intensities_are_the_exact_time_reversal(schedule):
    """With the Bayes denoiser the frozen reverse rate to ``y`` is ``(sigma_t / K) q_t(y) / q_t(x)`` for every state."""
    process = UniformDiffusion(K, schedule)
    model = ExactDenoiser(torch.tensor(P), K, L, process.clean_log_likelihood)
    states = torch.tensor(SEQS)
    for t, s in ((0.2, 0.3), (0.6, 0.65), (0.9, 0.95)):
        a_t, a_s = alpha(process, t), alpha(process, s)
        q_t = transition(uniform_generator(), a_t)
        q_state = (P[:, None] * np.prod([q_t[SEQS[:, None, i], SEQS[None, :, i]] for i in range(L)], axis=0)).sum(0)
        probs = torch.softmax(model(process.features(states), torch.full((len(SEQS),), t)).double(), -1)
        ours = process.reverse_intensity(probs, states, a_t, a_s).numpy() * K / math.log(a_s / a_t)
        for a, x in enumerate(SEQS):
            for i in range(L):
                for j in range(K):
                    if j == x[i]:
                        continue
                    y = x.copy()
                    y[i] = j
                    exact = q_state[int(y @ K ** np.arange(L - 1, -1, -1))] / q_state[a]
                    assert ours[a, i, j] == pytest.approx(exact, rel=1e-5), (t, x, i, j)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_few_step_uniform_ancestral_sampler_is_the_exact_bayes_chain(schedule):
    """Three ancestral steps with the Bayes denoiser draw from the chain of exact per-position Bayes posteriors
    (chi-square), which is far from the data law: only the step size, not the step, is approximate."""
    process = UniformDiffusion(K, schedule)
    steps, n = 3, 40000
    grid = np.linspace(0.0, 1.0, steps + 1)
    alphas = [alpha(process, t) for t in grid]

    def rows(k):
        q_t, q_s = transition(uniform_generator(), alphas[k]), transition(uniform_generator(), alphas[k + 1])
        back = transition(uniform_generator(), alphas[k] / alphas[k + 1])  # q(x_t | x_s): [j, v]
        if k == steps - 1:
            return lambda x: clean_posterior(q_t, x)  # the last step draws x_1 from p(x0 | x_t)
        return lambda x: bayes_step(q_s, back, clean_posterior(q_t, x), x)

    law = factorised_chain_law(np.full(len(SEQS), 1.0 / len(SEQS)), [rows(k) for k in range(steps)])
    model = ExactDenoiser(torch.tensor(P), K, L, process.clean_log_likelihood)
    out = process.sample(model, n, L, steps=steps, generator=torch.Generator().manual_seed(1))
    counts = counts_of(out.tokens)
    assert chisquare(counts, law * n).pvalue > 1e-3
    assert 0.5 * np.abs(law - P).sum() > 0.1 and chisquare(counts, P * n).pvalue < 1e-12


# ------------------------------------------------------------------------------ Wright-Fisher
def test_few_step_wf_discrete_sampler_is_the_exact_bayes_chain():
    """Three reverse steps of the mutation chain plus the likelihood decoder, with the exact denoiser, draw from the
    enumerated chain of exact Bayes posteriors built from ``expm(tau L)`` (non-uniform ``pi``, ``psi = 1.5``)."""
    psi, steps, n = 1.5, 3, 40000
    process = WrightFisherDiscrete(K, stationary=torch.tensor(PI3), psi=psi)
    mutation = 0.5 * psi * (np.ones((K, 1)) * PI3[None, :] - np.eye(K))
    taus = [float(process.tau(torch.tensor(t))) for t in np.linspace(0.0, 1.0, steps + 1)]

    def rows(k):
        q_t, q_s = expm(taus[k] * mutation), expm(taus[k + 1] * mutation)
        back = expm((taus[k] - taus[k + 1]) * mutation)
        return lambda x: bayes_step(q_s, back, clean_posterior(q_t, x), x)

    q_min = expm(taus[-1] * mutation)
    decoder = q_min / q_min.sum(0, keepdims=True)  # p(b | x) ∝ q(x | b), [b, x]
    prior = np.prod([PI3[SEQS[:, i]] for i in range(L)], axis=0)
    law = factorised_chain_law(prior, [*(rows(k) for k in range(steps)), lambda x: decoder[:, x].T])
    out = process.sample(
        ExactPairDenoiser(torch.tensor(P).view(K, K)), n, L, steps=steps, generator=torch.Generator().manual_seed(2)
    )
    counts = counts_of(out.tokens)
    assert chisquare(counts, law * n).pvalue > 1e-3
    assert 0.5 * np.abs(law - P).sum() > 0.1 and chisquare(counts, P * n).pvalue < 1e-12


@pytest.mark.parametrize("psi", [2.0, 0.7])
def test_wf_gaussian_reverse_step_with_a_known_token_keeps_the_forward_marginal(psi):
    """One coarse reverse step from ``z_t ~ q_t(. | x0)`` given the clean token lands on ``q_s(. | x0)``: the WF mean
    and the variance ``sigma_inf^2 (1 - e^{-psi tau_s})``. The samplers' many-step tests pass with a wrong reverse
    variance (``s2_ts`` instead of ``s2_s s2_ts / s2_t`` leaves them green), this does not."""
    process = WrightFisherGaussian(K, stationary=torch.tensor(PI3), psi=psi)
    n = 40000
    tau_t, tau_s = torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.3, dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    x0 = torch.full((n, 1), 1)
    z_t = process.forward_sample(x0, process.t_of_tau(tau_t).expand(n), generator=g)
    known = torch.log(torch.nn.functional.one_hot(x0, K).double().clamp_min(1e-300))
    z_s = process._reverse_step(z_t, known, tau_t, tau_s, g)[:, 0]
    keep = math.exp(-0.5 * psi * float(tau_s))
    mean = torch.tensor(PI3 + keep * (np.eye(K)[1] - PI3))
    var = float((PI3 * (1 - PI3)).sum()) / (K * (psi + 1)) * (1 - math.exp(-psi * float(tau_s)))
    assert bool(((z_s.mean(0) - mean).abs() < 4.5 * math.sqrt(var / n)).all())
    assert bool(((z_s.var(0) / var - 1).abs() < 4.5 * math.sqrt(2 / n)).all()), (z_s.var(0), var)


@pytest.mark.parametrize("cls", [WrightFisherDiscrete, WrightFisherGaussian, WrightFisherSimplex])
def test_wf_forward_sample_takes_a_scalar_time_and_checks_the_tokens(cls):
    """A scalar ``t`` (as ``corrupt`` of masked / uniform takes) is one time for every sequence. The chain used to
    index its ``[K, K]`` transition with the batch index and return ``[B]`` draws over positions (token ``3`` of
    ``K = 3`` at ``t = 1``); negative tokens wrapped around to the last row."""
    process = cls(K)
    x0 = torch.tensor([[2, 2, 2, 2], [0, 1, 2, 0]])
    for t in (1.0, 0.4):
        scalar = process.forward_sample(x0, t, generator=torch.Generator().manual_seed(4))
        batch = process.forward_sample(
            x0, torch.full((2,), t, dtype=torch.float64), generator=torch.Generator().manual_seed(4)
        )
        assert torch.equal(scalar, batch)
    if cls is WrightFisherDiscrete:  # at the data end the chain keeps the clean tokens (tau_min = 1e-4)
        assert torch.equal(process.forward_sample(x0, 1.0, generator=torch.Generator().manual_seed(5)), x0)
    with pytest.raises(InputError, match="tokens must lie"):
        process.forward_sample(torch.tensor([[-1, 0]]), 0.5)
    with pytest.raises(InputError, match="one time per sequence"):
        process.forward_sample(x0, torch.full((3,), 0.5))


# ------------------------------------------------------------------------------ marginal transitions
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_marginal_transition_posterior_is_the_exact_bayes_posterior(schedule):
    """``posterior_probs`` with the exact ``p(c | x_t)`` is ``p(x_s | x_t)`` of the enumerated joint, row-normalised."""
    m = np.array([0.6, 0.3, 0.1])
    data = np.array([0.1, 0.2, 0.7])
    process = MarginalTransitionDiffusion(torch.tensor(m), schedule)
    towards_m = np.ones((K, 1)) * m[None, :]
    towards_m -= np.diag(towards_m.sum(1))
    for t, s in ((0.0, 0.25), (0.3, 0.7), (0.8, 1.0)):
        a_t, a_s = alpha(process, t), alpha(process, s)
        q_s = transition(towards_m, a_s)  # [c, j]
        back = transition(towards_m, a_t / a_s)  # q(x_t = v | x_s = j): [j, v]
        joint = (data[:, None, None] * q_s[:, :, None] * back[None, :, :]).sum(0)  # p(x_s = j, x_t = v)
        exact = (joint / joint.sum(0, keepdims=True)).T  # [v, j]
        q_t = transition(towards_m, a_t)
        p_clean = data[None, :] * q_t.T  # [v, c] ∝ p(c | x_t = v)
        ours = process.posterior_probs(torch.arange(K), torch.tensor(p_clean), t, s).numpy()
        np.testing.assert_allclose(ours, exact, atol=1e-12)


def test_marginal_transition_refuses_times_outside_the_unit_interval():
    """``s > 1`` made ``alpha_s > 1`` and negative "probabilities" (a multinomial traceback downstream)."""
    process = MarginalTransitionDiffusion(torch.tensor([0.6, 0.3, 0.1]), "linear")
    for t, s in ((0.5, 1.2), (-0.1, 0.5), (0.5, 0.5)):
        with pytest.raises(ConfigError, match="0 <= t < s <= 1"):
            process.posterior_probs(torch.tensor([0]), torch.ones(1, 3), t, s)


# ------------------------------------------------------------------------------ figures
def test_digit_mosaic_is_drawn_from_fewer_than_sixteen_samples(tmp_path):
    """``--n-samples`` below 16 on digits used to crash the figure (a reshape traceback) after training."""
    task = make_task("digits")
    path = tmp_path / "samples.png"
    plot_samples({"masked": task.test[:5]}, task, path)
    assert path.is_file() and path.stat().st_size > 0
