"""Tests of the Wright-Fisher processes (discrete, Gaussian, simplicial) and the Jacobi baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from gencore.discrete.enumeration import all_sequences, empirical_tv
from gencore.discrete.network import TokenDenoiser
from gencore.discrete.simplex import (
    GRIFFITHS_SWITCH,
    JacobiDirichletSDE,
    WrightFisherSimplex,
    euler_maruyama_wf,
    griffiths_moments,
    lineage_log_pmf,
    lineage_nodes,
    sample_log_gamma,
    wf_moments,
)
from gencore.discrete.wright_fisher import WrightFisherDiscrete, WrightFisherGaussian
from gencore.errors import ConfigError

PROCESSES = (WrightFisherDiscrete, WrightFisherGaussian, WrightFisherSimplex)
PI3 = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)


def t_of_tau(proc, tau: float, n: int) -> torch.Tensor:
    t = proc.t_of_tau(tau)
    torch.testing.assert_close(proc.tau(t), torch.tensor(tau, dtype=torch.float64))
    return t.repeat(n)


def mixture_moments(tau: float, psi: float, pi: torch.Tensor, x0: int):
    """Mean and variance per coordinate of the Dirichlet mixture sum_m q_m Dir(psi pi + m e_x0)."""
    m, logw = lineage_nodes(torch.tensor([tau], dtype=torch.float64), psi)
    w, m = logw.exp()[0], m[0]
    alpha = psi * pi[None, :] + m[:, None] * torch.nn.functional.one_hot(torch.tensor(x0), pi.shape[0])
    a0 = alpha.sum(-1, keepdim=True)
    mean = (w[:, None] * alpha / a0).sum(0)
    second = (w[:, None] * alpha * (alpha + 1) / (a0 * (a0 + 1))).sum(0)
    return mean, second - mean**2


# ---------------------------------------------------------------------- forward marginals
@pytest.mark.parametrize("tau", [1e-3, 0.3, 2.0, 9.0])
def test_discrete_transition_is_matrix_exponential(tau):
    proc = WrightFisherDiscrete(3, stationary=PI3, psi=1.5)
    expected = torch.linalg.matrix_exp(tau * proc.generator_matrix())
    torch.testing.assert_close(proc.transition(torch.tensor(tau, dtype=torch.float64)), expected, atol=1e-12, rtol=0)


def test_discrete_forward_sample_frequencies():
    proc = WrightFisherDiscrete(3, stationary=PI3)
    g = torch.Generator().manual_seed(0)
    n, tau = 40000, 0.4
    x = proc.forward_sample(torch.full((n, 1), 2), t_of_tau(proc, tau, n), generator=g)[:, 0]
    freq = torch.bincount(x, minlength=3).double() / n
    expected = proc.transition(torch.tensor(tau, dtype=torch.float64))[2]
    se = (expected * (1 - expected) / n).sqrt()
    assert bool(((freq - expected).abs() < 4.5 * se).all()), (freq, expected)


@pytest.mark.parametrize("tau", [0.1, 0.5, 2.0, 9.0])
@pytest.mark.parametrize("psi", [0.5, 2.0, 4.0])
def test_lineage_series_is_a_pmf_with_the_wf_mean(tau, psi):
    log_q = lineage_log_pmf(torch.tensor([tau]), psi)[0]
    q = log_q.exp()
    m = torch.arange(q.shape[0], dtype=torch.float64)
    assert abs(float(q.sum()) - 1) < 1e-12 and bool((q >= 0).all())
    # E[x_tau,x0] = E[m / (psi + m)] must equal the WF mean exp(-psi tau / 2)
    assert abs(float((q * m / (psi + m)).sum()) - math.exp(-psi * tau / 2)) < 1e-8


@pytest.mark.parametrize("tau", [1e-4, 1e-3, 1e-2])
def test_griffiths_regime_matches_wf_mean_and_asymptotics(tau):
    psi = 2.0
    m, logw = lineage_nodes(torch.tensor([tau]), psi)
    w = logw.exp()[0]
    assert abs(float(w.sum()) - 1) < 1e-12
    # Griffiths' approximation error in the mean identity is O(tau); 1e-4 covers tau <= 0.01
    assert abs(float((w * m[0] / (psi + m[0])).sum()) - math.exp(-psi * tau / 2)) < 1e-4
    mean, var = griffiths_moments(torch.tensor([tau]), psi)
    assert abs(float(mean) * tau / 2 - 1) < tau  # E[A_inf(tau)] ~ 2 / tau
    assert abs(float(var) * 3 * tau / 2 - 1) < 2 * tau  # Var ~ 2 / (3 tau)


def test_griffiths_mean_close_to_series_at_the_switch():
    psi = 2.0
    tau = torch.tensor([GRIFFITHS_SWITCH + 0.02])
    q = lineage_log_pmf(tau, psi)[0].exp()
    series_mean = float((q * torch.arange(q.shape[0])).sum())
    assert abs(float(griffiths_moments(tau, psi)[0]) / series_mean - 1) < 0.02


@pytest.mark.parametrize("tau", [0.15, 0.6, 3.0])
def test_dirichlet_mixture_moments_equal_wf_moment_odes(tau):
    psi = 1.5
    mean, var = mixture_moments(tau, psi, PI3, 1)
    ode_mean, ode_cov = wf_moments(1, tau, psi, PI3)
    torch.testing.assert_close(mean, ode_mean, atol=1e-8, rtol=0)
    torch.testing.assert_close(var, ode_cov.diag(), atol=1e-8, rtol=0)


def test_gamma_sampler_moments():
    g = torch.Generator().manual_seed(1)
    for shape in (0.3, 2.5, 400.0):
        x = sample_log_gamma(torch.full((40000,), shape), generator=g).exp()
        assert abs(float(x.mean()) - shape) < 4.5 * math.sqrt(shape / 40000)
        assert abs(float(x.var()) / shape - 1) < 0.05


@pytest.mark.parametrize("tau", [2e-3, 0.5])
def test_exact_sampler_moments(tau):
    proc = WrightFisherSimplex(3, stationary=PI3, psi=1.5)
    g = torch.Generator().manual_seed(2)
    n = 20000
    x = proc.forward_sample(torch.zeros(n, 1, dtype=torch.long), t_of_tau(proc, tau, n), generator=g).exp()[:, 0]
    assert bool(torch.isfinite(x).all()) and bool((x >= 0).all())
    torch.testing.assert_close(x.sum(-1), torch.ones(n, dtype=torch.float64))
    mean, cov = wf_moments(0, tau, proc.psi, PI3)
    se_mean = x.std(0) / math.sqrt(n)
    se_var = ((x - x.mean(0)) ** 2).std(0) / math.sqrt(n)
    assert bool(((x.mean(0) - mean).abs() < 4.5 * se_mean).all())
    assert bool(((x.var(0) - cov.diag()).abs() < 4.5 * se_var).all())


def test_exact_sampler_and_euler_maruyama_match_the_closed_form_moments():
    """Exact sampler, fine-step Euler-Maruyama and the moment ODEs agree where EM is unbiased.

    ``psi = 20`` keeps the path off the faces of the simplex, where EM's clip-and-renormalise step is
    inactive. At ``psi = 1.5`` (``Dirichlet(0.75, 0.45, 0.3)``, mass on the faces) the clipping biases the EM
    mean by about 4 standard errors of this sample size at 500 steps (0.011 in the first coordinate), so
    EM is no reference there.
    """
    tau, n, psi = 0.5, 12000, 20.0
    proc = WrightFisherSimplex(3, stationary=PI3, psi=psi)
    g = torch.Generator().manual_seed(3)
    x0 = torch.zeros(n, 1, dtype=torch.long)
    exact = proc.forward_sample(x0, t_of_tau(proc, tau, n), generator=g).exp()[:, 0]
    em = euler_maruyama_wf(x0, torch.full((n,), tau), psi, PI3, 500, generator=g)[:, 0]
    mean, cov = wf_moments(0, tau, psi, PI3)
    se = (exact.var(0) / n + em.var(0) / n).sqrt()
    assert bool(((exact.mean(0) - em.mean(0)).abs() < 4.5 * se).all())
    dev_e, dev_m = (exact - exact.mean(0)) ** 2, (em - em.mean(0)) ** 2
    se_var = (dev_e.var(0) / n + dev_m.var(0) / n).sqrt()
    assert bool(((dev_e.mean(0) - dev_m.mean(0)).abs() < 4.5 * se_var).all())
    for x in (exact, em):
        assert bool(((x.mean(0) - mean).abs() < 4.5 * x.std(0) / math.sqrt(n)).all())
        dev = (x - mean) ** 2
        assert bool(((dev.mean(0) - cov.diag()).abs() < 4.5 * dev.std(0) / math.sqrt(n)).all())


def test_stationary_law_is_dirichlet_of_the_mutation_rates():
    """With parent-independent mutation the WF stationary law is ``Dirichlet(psi pi)``: mean ``pi``, covariance
    ``(diag(pi) - pi pi^T) / (psi + 1)``, reached by the moment ODEs, the lineage mixture and the prior."""
    psi = 1.5
    dirichlet_cov = (torch.diag(PI3) - torch.outer(PI3, PI3)) / (psi + 1)
    mean, cov = wf_moments(1, 60.0, psi, PI3)
    torch.testing.assert_close(mean, PI3, atol=1e-12, rtol=0)
    torch.testing.assert_close(cov, dirichlet_cov, atol=1e-12, rtol=0)
    mix_mean, mix_var = mixture_moments(40.0, psi, PI3, 1)
    torch.testing.assert_close(mix_mean, PI3, atol=1e-12, rtol=0)
    torch.testing.assert_close(mix_var, dirichlet_cov.diag(), atol=1e-12, rtol=0)
    proc = WrightFisherSimplex(3, stationary=PI3, psi=psi)
    n = 40000
    x = proc._prior_sample(n, 1, torch.Generator().manual_seed(15)).exp()[:, 0]
    assert bool(((x.mean(0) - PI3).abs() < 4.5 * x.std(0) / math.sqrt(n)).all())
    dev = (x - PI3) ** 2
    assert bool(((dev.mean(0) - dirichlet_cov.diag()).abs() < 4.5 * dev.std(0) / math.sqrt(n)).all())


def test_three_domains_share_the_wf_mean():
    tau, n = 0.7, 30000
    g = torch.Generator().manual_seed(4)
    expected = wf_moments(2, tau, 2.0, PI3)[0]
    for cls in PROCESSES:
        proc = cls(3, stationary=PI3)
        state = proc.forward_sample(torch.full((n, 1), 2), t_of_tau(proc, tau, n), generator=g)
        if cls is WrightFisherDiscrete:
            state = nn.functional.one_hot(state, 3).double()
        elif cls is WrightFisherSimplex:
            state = state.exp()
        x = state[:, 0]
        assert bool(((x.mean(0) - expected).abs() < 4.5 * x.std(0) / math.sqrt(n)).all()), cls.name


# ---------------------------------------------------------------------- features, numerics
@pytest.mark.parametrize("cls", (*PROCESSES, JacobiDirichletSDE))
def test_features_shape_and_simplex(cls):
    proc = cls(4)
    assert proc.input_dim == 4 and proc.vocab_size == 4
    g = torch.Generator().manual_seed(5)
    x0 = torch.randint(0, 4, (6, 5), generator=g)
    t = torch.linspace(0, 1, 6, dtype=torch.float64)
    f = proc.features(proc.forward_sample(x0, t, generator=g), t)
    assert f.shape == (6, 5, 4) and f.dtype == torch.float32
    torch.testing.assert_close(f.sum(-1), torch.ones(6, 5), atol=1e-5, rtol=0)
    if cls is not JacobiDirichletSDE:  # near the data the sufficient statistic identifies the token
        assert bool((f[-1].argmax(-1) == x0[-1]).all())


@pytest.mark.parametrize("cls", PROCESSES)
def test_no_nan_in_loss_or_gradients_at_small_tau(cls):
    proc = cls(4)
    torch.manual_seed(0)
    model = TokenDenoiser(4, 4, 12, hidden=32, depth=1, heads=2)
    g = torch.Generator().manual_seed(6)
    x0 = torch.randint(0, 4, (16, 12), generator=g)
    for tau in (1e-4, 1e-3, 0.07, 0.09, 5.0):
        model.zero_grad()
        term = proc._diffusion_term(model, x0, t_of_tau(proc, tau, 16), g, {})
        assert bool(torch.isfinite(term).all()) and bool((term >= 0).all()), (cls.name, tau)
        term.mean().backward()
        assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    loss, metrics = proc.loss(model, x0, generator=g)
    assert math.isfinite(float(loss.detach())) and math.isfinite(metrics["loss"])


def test_jacobi_baseline_fails_at_small_tau_but_not_at_large():
    proc = JacobiDirichletSDE(4)
    torch.manual_seed(0)
    model = TokenDenoiser(4, 4, 12, hidden=32, depth=1, heads=2)
    g = torch.Generator().manual_seed(7)
    x0 = torch.randint(0, 4, (16, 12), generator=g)
    small = JacobiDirichletSDE(4, tau_min=1e-4, tau_max=1e-3)
    large = JacobiDirichletSDE(4, tau_min=0.5, tau_max=10.0)
    assert not math.isfinite(float(small.loss(model, x0, generator=g)[0].detach()))
    assert math.isfinite(float(large.loss(model, x0, generator=g)[0].detach()))
    assert proc.name == "dirichlet-sde"


# ---------------------------------------------------------------------- exact denoisers
class ExactPairDenoiser(nn.Module):
    """Exact posterior for length-2 sequences with joint law ``joint [K, K]`` in the hollow form."""

    def __init__(self, joint: torch.Tensor) -> None:
        super().__init__()
        self.joint = joint

    def forward(self, features, t, **cond):
        lik = features.double().clamp_min(1e-300)
        f1 = (self.joint @ lik[:, 1, :, None]).squeeze(-1)
        f2 = (self.joint.T @ lik[:, 0, :, None]).squeeze(-1)
        return torch.stack([f1, f2], 1).log()


class PriorDenoiser(nn.Module):
    """Exact posterior for one position: constant prior logits (the likelihood is added by the process)."""

    def __init__(self, probs: torch.Tensor) -> None:
        super().__init__()
        self.logits = probs.log()

    def forward(self, features, t, **cond):
        return self.logits.expand(features.shape[0], features.shape[1], -1)


JOINT = torch.tensor([[0.30, 0.05, 0.05], [0.02, 0.25, 0.03], [0.10, 0.05, 0.15]], dtype=torch.float64)


def _exact_denoiser_bound(proc, seed: int, reps: int = 150):
    """Per-sequence mean and standard error of the Monte Carlo bound with the exact pair denoiser, the exact
    NLL (nats per position), and the JOINT-weighted gap with its standard error."""
    seqs = torch.cartesian_prod(torch.arange(3), torch.arange(3))
    x0 = seqs.repeat_interleave(reps, 0)
    g = torch.Generator().manual_seed(seed)
    bound = proc.nll_bound(ExactPairDenoiser(JOINT), x0, n_time=32, generator=g).double().reshape(9, reps)
    exact = -JOINT.flatten().log() / 2
    mean, se = bound.mean(1), bound.std(1) / math.sqrt(reps)
    weights = JOINT.flatten()
    gap, gap_se = float((weights * (mean - exact)).sum()), float((weights**2 * se**2).sum().sqrt())
    return mean, se, exact, gap, gap_se


@pytest.mark.parametrize("cls", PROCESSES)
def test_bound_with_exact_denoiser_is_above_and_close_to_exact_nll(cls):
    mean, se, exact, gap, gap_se = _exact_denoiser_bound(cls(3), seed=8)
    assert bool((mean > exact - 4 * se).all()), (mean, exact)
    # with the exact posterior the model's reverse process is the true one, so the expected bound
    # equals the exact NLL up to the (tiny) prior and decoder slack
    assert -4 * gap_se < gap < 0.005 + 4 * gap_se, (gap, gap_se)


@pytest.mark.parametrize("cls", PROCESSES)
def test_bound_with_exact_denoiser_is_tight_for_a_non_uniform_stationary_law(cls):
    """As above with ``pi = PI3``: the bound stays tight per sequence, so no uniform-``pi`` shortcut hides."""
    mean, se, exact, gap, gap_se = _exact_denoiser_bound(cls(3, stationary=PI3), seed=13)
    assert bool(((mean - exact).abs() < 0.005 + 4 * se).all()), (mean - exact, se)
    assert -4 * gap_se < gap < 0.005 + 4 * gap_se, (gap, gap_se)


def gauss_legendre(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    nodes, weights = np.polynomial.legendre.leggauss(n)
    return torch.tensor((nodes + 1) / 2), torch.tensor(weights / 2)


def exact_discrete_bound(proc: WrightFisherDiscrete, model: nn.Module, n_nodes: int = 64) -> torch.Tensor:
    """The bound of every length-2 sequence (nats per position) with no Monte Carlo.

    Prior KL and decoder NLL are deterministic for the chain; the diffusion integral is Gauss-Legendre in
    ``t`` of ``|dtau/dt| E_{x ~ q(. | x0)}[KL rate]``, the expectation by enumerating all 9 noisy states.
    """
    states = all_sequences(3, 2)
    n = states.shape[0]
    total = proc._prior_kl(states, generator=None).mean(1) + proc._decoder_nll(states, generator=None).mean(1)
    for t, w in zip(*gauss_legendre(n_nodes)):
        tt = t.expand(n)
        tau = proc.tau(tt)
        q = proc.transition(tau[0])  # [x0, x]
        log_post = proc.posterior(model, states, tt)
        for b, x0 in enumerate(states):
            weight = q[x0[0], states[:, 0]] * q[x0[1], states[:, 1]]  # q(x | x0) for every noisy state
            rate = proc._kl_rate(log_post, x0.expand(n, 2), states, tau).mean(1)
            total[b] += w * proc.dtau_dt(t) * (weight * rate).sum()
    return total


@pytest.mark.parametrize("stationary", [None, PI3], ids=["uniform", "pi3"])
def test_discrete_bound_with_exact_denoiser_is_tight_by_enumeration(stationary):
    """Quadrature + enumeration: the chain's bound equals -log p(x0) per sequence to the decoder slack.

    The residual (|.| < 1e-3 here) is the ``O(tau_min log)`` mismatch of the uniform-prior decoder at
    ``tau_min = 1e-4``; a wrong rate, prior KL or likelihood moves the bound by far more.
    """
    proc = WrightFisherDiscrete(3, stationary=stationary)
    bound = exact_discrete_bound(proc, ExactPairDenoiser(JOINT))
    exact = -JOINT.flatten().log() / 2
    torch.testing.assert_close(bound, exact, rtol=0, atol=2e-3)
    assert float((JOINT.flatten() * (bound - exact)).sum()) > -1e-5  # the expected bound is above the entropy


def test_bound_is_loose_for_a_wrong_denoiser():
    proc = WrightFisherSimplex(3)
    g = torch.Generator().manual_seed(9)
    x0 = torch.cartesian_prod(torch.arange(3), torch.arange(3)).repeat_interleave(20, 0)
    weights = JOINT.flatten()

    def expected_bound(joint):  # expectation over the data law JOINT
        bound = proc.nll_bound(ExactPairDenoiser(joint), x0, n_time=16, generator=g).double().reshape(9, 20)
        return float((weights * bound.mean(1)).sum())

    independent = JOINT.sum(1, keepdim=True) * JOINT.sum(0, keepdim=True)  # ignores the correlation
    assert expected_bound(independent) > expected_bound(JOINT) + 0.05


@pytest.mark.parametrize("cls", PROCESSES)
def test_sampler_recovers_target_categorical(cls):
    target = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    proc = cls(3)
    g = torch.Generator().manual_seed(10)
    n = 6000
    out = proc.sample(PriorDenoiser(target), n, 1, steps=100, generator=g)
    assert out.nfe == 100 and out.tokens.shape == (n, 1)
    guided_like = PriorDenoiser(target)
    guided_like.nfe_per_call = 2  # what a classifier-free-guided model costs per call
    assert proc.sample(guided_like, 2, 1, steps=5).nfe == 10
    freq = torch.bincount(out.tokens[:, 0], minlength=3).double() / n
    assert 0.5 * float((freq - target).abs().sum()) < 0.03


@pytest.mark.parametrize("cls", PROCESSES)
def test_sampler_recovers_a_correlated_pair_with_the_exact_denoiser(cls):
    """Length 2, non-uniform ``pi``: the exact hollow denoiser makes the sampler reproduce JOINT and its correlation."""
    proc = cls(3, stationary=PI3)
    g = torch.Generator().manual_seed(14)
    n = 3000
    out = proc.sample(ExactPairDenoiser(JOINT), n, 2, steps=40, generator=g)
    assert out.nfe == 40 and out.tokens.shape == (n, 2)
    independent = (JOINT.sum(1, keepdim=True) * JOINT.sum(0, keepdim=True)).flatten()  # TV 0.358 from JOINT
    assert empirical_tv(out.tokens, JOINT.flatten(), 3) < 0.045 < 0.3 < empirical_tv(out.tokens, independent, 3)


def test_reverse_simplex_steps_stay_on_the_simplex():
    target = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    proc = WrightFisherSimplex(3)
    model = PriorDenoiser(target)
    g = torch.Generator().manual_seed(11)
    n, steps = 500, 40
    state = proc._prior_sample(n, 1, g)
    grid = torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64)
    for i in range(steps):
        t = torch.full((n,), float(grid[i]), dtype=torch.float64)
        log_post = proc.posterior(model, state, t)
        state = proc._reverse_step(state, log_post, proc.tau(grid[i]), proc.tau(grid[i + 1]), g)
        x = state.exp()
        assert bool(torch.isfinite(state).all()) and bool((x >= 0).all())
        torch.testing.assert_close(x.sum(-1), torch.ones(n, 1, dtype=torch.float64))
    assert float(state.exp().max(-1).values.median()) > 0.99  # ends near a vertex at tau_min


def test_conditioning_is_passed_to_the_network():
    proc = WrightFisherSimplex(4)
    torch.manual_seed(0)
    model = TokenDenoiser(4, 4, 8, hidden=32, depth=1, heads=2, num_classes=3)
    g = torch.Generator().manual_seed(12)
    x0 = torch.randint(0, 4, (4, 8), generator=g)
    loss, _ = proc.loss(model, x0, generator=g, y=torch.tensor([0, 1, 2, 0]))
    loss.backward()
    assert model.class_embed.weight.grad is not None and float(model.class_embed.weight.grad.abs().sum()) > 0
    bound = proc.nll_bound(model, x0, n_time=4, generator=g, y=torch.tensor([0, 1, 2, 0]))
    assert bound.shape == (4,) and bool(torch.isfinite(bound).all())


@pytest.mark.parametrize("cls", PROCESSES)
def test_a_denoiser_of_the_wrong_width_is_refused(cls):
    proc = cls(3)
    x0 = torch.zeros(2, 2, dtype=torch.long)
    wide = PriorDenoiser(torch.full((4,), 0.25, dtype=torch.float64))  # K + 1 logits per position
    with pytest.raises(ConfigError, match="logits of shape"):
        proc.nll_bound(wide, x0, n_time=1, generator=torch.Generator().manual_seed(0))
