"""Tests of the learnable forward process (FLDD) and its fixed-masking baseline.

Tiny enumerable problems (length 2, K = 3, so 4 states per position and 16 state configurations)
let every expectation over ``z`` be computed exactly: the T-step bound, the model's distribution over
sequences and the exact gradient of the bound with respect to the forward parameters.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from gencore.discrete.learnable_forward import (
    LearnableForwardProcess,
    masking_marginals,
    maximum_coupling_posterior,
)
from gencore.discrete.network import TokenDenoiser
from gencore.errors import ConfigError, InputError

K, L = 3, 2
S = K + 1


def _configs(values: int, length: int = L) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(values), repeat=length)), dtype=torch.long)


STATES = _configs(S)  # [16, 2] all state configurations (mask = 3)
TOKENS = _configs(K)  # [9, 2] all token configurations


def _random_process(steps: int, seed: int, learnable: bool = True) -> LearnableForwardProcess:
    """Inner marginals set to random logits of unit scale (every state has non-negligible mass)."""
    proc = LearnableForwardProcess(K, L, steps=steps, learnable=learnable)
    if learnable:
        logits = torch.randn(proc.raw.shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            proc.raw.copy_((logits - proc.init_logits) / proc.logit_scale)
    return proc


def _tiny_model(seed: int) -> TokenDenoiser:
    torch.manual_seed(seed)
    return TokenDenoiser(S, K, L, hidden=16, depth=1, heads=2)


def _q_configs(proc: LearnableForwardProcess, x: torch.Tensor, step: int) -> torch.Tensor:
    """``q_phi(z_s = config | x)`` for every state configuration ``[16]`` (differentiable)."""
    marg = proc.marginals()[step]  # [L, K, S]
    prob = torch.ones(STATES.shape[0])
    for i in range(L):
        prob = prob * marg[i, x[i], STATES[:, i]]
    return prob


def _exact_bound(proc: LearnableForwardProcess, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Enumerated T-step bound of one sequence ``x`` ``[L]`` in nats per position (differentiable in phi)."""
    total = torch.zeros(())
    xs = x[None].expand(STATES.shape[0], -1)
    for s in range(1, proc.steps + 1):
        terms = proc.step_terms(model, xs, STATES, s)
        total = total + (_q_configs(proc, x, s) * terms).sum()
    return total / L


def _model_distribution(proc: LearnableForwardProcess, model: nn.Module) -> torch.Tensor:
    """Exact distribution of the reverse chain over the 9 token sequences, by enumerating all paths."""
    with torch.no_grad():
        dist = torch.zeros(STATES.shape[0])
        dist[(STATES == K).all(1).nonzero().item()] = 1.0
        for s in range(proc.steps, 0, -1):
            per_pos = proc.reverse_probs(model, STATES, s)  # [16, L, S]
            trans = torch.ones(STATES.shape[0], STATES.shape[0])
            for i in range(L):
                trans = trans * per_pos[:, i, STATES[:, i]]
            dist = dist @ trans
        tokens_only = (STATES < K).all(1)
        assert torch.allclose(dist[~tokens_only].sum(), torch.zeros(()), atol=1e-6)
        return dist[tokens_only]  # STATES order restricted to tokens == TOKENS order


class ExactDenoiser(nn.Module):
    """Looks up the optimal logits ``log q(x^i | z_s) - log q(z_s^i | x^i)`` for a data law ``pi`` over 9 sequences."""

    def __init__(self, proc: LearnableForwardProcess, pi: torch.Tensor) -> None:
        super().__init__()
        self.steps = proc.steps
        marg = proc.marginals().detach()
        table = torch.zeros(proc.steps + 1, STATES.shape[0], L, K)
        for s in range(1, proc.steps + 1):
            for c, z in enumerate(STATES):
                joint = pi.clone()  # pi(x) q(z_s = z | x) over TOKENS
                for i in range(L):
                    joint = joint * marg[s, i, TOKENS[:, i], z[i]]
                if joint.sum() <= 0:  # a state the forward process never visits: any finite logits do
                    continue
                post = joint / joint.sum()
                for i in range(L):
                    lik = marg[s, i, torch.arange(K), z[i]]
                    px = torch.zeros(K).index_add_(0, TOKENS[:, i], post)
                    table[s, c, i] = torch.log(px.clamp_min(1e-30)) - torch.log(lik.clamp_min(1e-30))
        self.register_buffer("table", table)

    def forward(self, features: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        z = features.argmax(-1)
        config = z[:, 0] * S + z[:, 1]
        step = torch.round((1 - t) * self.steps).long()
        return self.table[step, config]


# --------------------------------------------------------------------------- maximum coupling
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    states=st.integers(2, 6),
    zeros_a=st.integers(0, 2),
    zeros_b=st.integers(0, 2),
)
def test_maximum_coupling_posterior_is_valid_marginal_preserving_and_maximal(seed, states, zeros_a, zeros_b):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(states, generator=g, dtype=torch.float64)
    b = torch.rand(states, generator=g, dtype=torch.float64)
    a[torch.randperm(states, generator=g)[: min(zeros_a, states - 1)]] = 0
    b[torch.randperm(states, generator=g)[: min(zeros_b, states - 1)]] = 0
    a, b = a / a.sum(), b / b.sum()
    post = maximum_coupling_posterior(a, b)  # [k (z_s), j (z_{s-1})]
    assert (post >= 0).all()
    torch.testing.assert_close(post.sum(-1), torch.ones(states, dtype=torch.float64))
    # sum_k q(z_s = k) q(z_{s-1} = j | z_s = k) = q(z_{s-1} = j)
    torch.testing.assert_close(b @ post, a)
    # P(z_{s-1} = z_s) equals the largest value any coupling can reach, sum_k min(a_k, b_k)
    torch.testing.assert_close((b * post.diagonal()).sum(), torch.minimum(a, b).sum())


def test_maximum_coupling_posterior_of_equal_marginals_is_identity():
    a = torch.tensor([0.2, 0.5, 0.3, 0.0])
    torch.testing.assert_close(maximum_coupling_posterior(a, a), torch.eye(4))


def test_maximum_coupling_posterior_rejects_mismatched_shapes():
    with pytest.raises(InputError):
        maximum_coupling_posterior(torch.ones(3) / 3, torch.ones(4) / 4)


# --------------------------------------------------------------------------- fixed masking baseline
@pytest.mark.parametrize("steps", [2, 5])
def test_fixed_marginals_are_the_masking_schedule_and_posterior_unmasks_with_prob_one_over_s(steps):
    proc = LearnableForwardProcess(K, L, steps=steps, learnable=False)
    marg, _, post = proc.tables()
    assert list(proc.parameters()) == []
    for s in range(steps + 1):
        for k in range(K):
            expected = torch.zeros(S)
            expected[k] = 1 - s / steps
            expected[K] += s / steps
            torch.testing.assert_close(marg[s, 0, k], expected)
    for s in range(1, steps + 1):
        for k in range(K):
            row_mask = post[s - 1, 1, k, K]  # from a masked state at step s
            expected = torch.zeros(S)
            expected[k] = 1 / s
            expected[K] = 1 - 1 / s
            torch.testing.assert_close(row_mask, expected)
            torch.testing.assert_close(post[s - 1, 1, k, k], torch.eye(S)[k])  # unmasked tokens stay
    torch.testing.assert_close(marg, masking_marginals(K, L, steps))


def test_learnable_marginals_pin_the_endpoints_and_start_near_masking():
    proc = _random_process(steps=4, seed=0)
    marg = proc.marginals()
    torch.testing.assert_close(marg[0], torch.eye(K, S).expand(L, K, S))
    torch.testing.assert_close(marg[-1], torch.eye(S)[K].expand(L, K, S))
    torch.testing.assert_close(marg.sum(-1), torch.ones(5, L, K))
    fresh = LearnableForwardProcess(K, L, steps=4)
    assert (fresh.marginals() - masking_marginals(K, L, 4)).abs().max() < 3e-3


# --------------------------------------------------------------------------- exact bound vs exact likelihood
@pytest.mark.parametrize(("steps", "learnable"), [(2, True), (3, True), (3, False)])
def test_exact_bound_is_above_exact_nll_for_every_sequence(steps, learnable):
    proc = _random_process(steps, seed=steps, learnable=learnable)
    model = _tiny_model(steps)
    p_model = _model_distribution(proc, model)
    torch.testing.assert_close(p_model.sum(), torch.ones(()))
    with torch.no_grad():
        for x, px in zip(TOKENS, p_model):
            bound = _exact_bound(proc, model, x)
            nll = -torch.log(px) / L
            assert bound >= nll - 1e-5, (x.tolist(), float(bound), float(nll))
            assert bound < nll + 5.0  # a finite, non-degenerate gap


def test_nll_bound_estimator_matches_the_enumerated_bound():
    proc = _random_process(3, seed=7)
    model = _tiny_model(7)
    x = TOKENS[[0, 4, 7]]
    with torch.no_grad():
        exact = torch.stack([_exact_bound(proc, model, xi) for xi in x])
        draws = torch.stack(
            [proc.nll_bound(model, x, n_time=200, generator=torch.Generator().manual_seed(r)) for r in range(10)]
        )
    se = draws.std(0) / math.sqrt(draws.shape[0])
    assert ((draws.mean(0) - exact).abs() <= 4 * se + 1e-4).all(), (draws.mean(0), exact, se)


def _correlated_pi(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(TOKENS.shape[0], generator=g), 0)


def test_exact_denoiser_on_factorised_data_recovers_the_data_law_and_sampler_matches():
    g = torch.Generator().manual_seed(3)
    p1, p2 = torch.softmax(torch.randn(K, generator=g), 0), torch.softmax(torch.randn(K, generator=g), 0)
    pi = (p1[TOKENS[:, 0]] * p2[TOKENS[:, 1]]).float()
    proc = _random_process(3, seed=11)
    model = ExactDenoiser(proc, pi)
    # positions independent: the factorised reverse model can represent the true reverse target exactly
    torch.testing.assert_close(_model_distribution(proc, model), pi, atol=1e-5, rtol=1e-4)
    n = 20_000
    out = proc.sample(model, n, L, steps=3, generator=torch.Generator().manual_seed(0))
    assert out.nfe == 3
    hist = torch.bincount(out.tokens[:, 0] * K + out.tokens[:, 1], minlength=K * K).float() / n
    tv = 0.5 * (hist - pi).abs().sum()
    assert tv < 0.02  # sampling noise of 20k draws over 9 cells is ~0.01


@pytest.mark.parametrize("learnable", [True, False])
def test_exact_denoiser_sampler_matches_the_model_law_and_bound_dominates(learnable):
    pi = _correlated_pi(5)
    proc = _random_process(2, seed=12, learnable=learnable)
    model = ExactDenoiser(proc, pi)
    p_model = _model_distribution(proc, model)
    n = 20_000
    out = proc.sample(model, n, L, steps=2, generator=torch.Generator().manual_seed(1))
    hist = torch.bincount(out.tokens[:, 0] * K + out.tokens[:, 1], minlength=K * K).float() / n
    assert 0.5 * (hist - p_model).abs().sum() < 0.02
    with torch.no_grad():
        bounds = torch.stack([_exact_bound(proc, model, x) for x in TOKENS])
    cross_entropy = -(pi * torch.log(p_model)).sum() / L
    expected_bound = (pi * bounds).sum()
    assert expected_bound >= cross_entropy - 1e-5
    # the data entropy lower-bounds the cross entropy of any model
    assert cross_entropy >= -(pi * torch.log(pi)).sum() / L - 1e-6


# --------------------------------------------------------------------------- gradient estimators
def test_reinforce_gradient_is_unbiased_for_the_enumerated_bound():
    proc = _random_process(3, seed=21)
    model = _tiny_model(21)
    proc.update_schedule(1.0)
    assert proc.phase == "reinforce"
    weights = torch.full((TOKENS.shape[0],), 1.0 / TOKENS.shape[0])
    exact = sum(w * _exact_bound(proc, model, x) for w, x in zip(weights, TOKENS))
    (grad_exact,) = torch.autograd.grad(exact, proc.raw)
    copies = 150
    batch = TOKENS.repeat_interleave(copies, dim=0)  # uniform over the 9 sequences
    estimates = []
    for r in range(24):
        loss, metrics = proc.loss(model, batch, generator=torch.Generator().manual_seed(100 + r))
        assert metrics["reinforce"] == 1.0
        (grad,) = torch.autograd.grad(loss, proc.raw)
        estimates.append(grad)
    est = torch.stack(estimates)
    mean, se = est.mean(0), est.std(0) / math.sqrt(est.shape[0])
    z = (mean - grad_exact).abs() / (se + 1e-9)
    assert z.max() < 4.5, (z.max(), mean.flatten()[:6], grad_exact.flatten()[:6])
    # the estimate carries signal: it points along the exact gradient
    cos = torch.nn.functional.cosine_similarity(mean.flatten(), grad_exact.flatten(), dim=0)
    assert cos > 0.9


def test_bound_is_differentiable_at_the_initial_marginals_and_autograd_gives_its_gradient():
    # the warm-up releases phi exactly at the initial marginals; consecutive inner marginals that tie on a
    # state put the maximum coupling on its kink, where autograd's value is neither one-sided derivative
    proc = LearnableForwardProcess(K, L, steps=3)
    proc.update_schedule(1.0)
    model = _tiny_model(21)

    def bound() -> torch.Tensor:
        return sum(_exact_bound(proc, model, x) for x in TOKENS) / TOKENS.shape[0]

    (grad,) = torch.autograd.grad(bound(), proc.raw_position)
    h = 1e-3
    for s, i in itertools.product(range(proc.steps - 1), range(L)):
        with torch.no_grad():
            centre = float(bound())
            proc.raw_position[s, i] += h
            up = float(bound())
            proc.raw_position[s, i] -= 2 * h
            down = float(bound())
            proc.raw_position[s, i] += h
        forward, backward = (up - centre) / h, (centre - down) / h
        assert abs(forward - backward) < 3e-3, (s, i, forward, backward)  # no kink
        assert abs(float(grad[s, i]) - 0.5 * (forward + backward)) < 3e-3, (s, i, float(grad[s, i]), forward)


def test_loss_value_is_an_unbiased_estimate_of_the_bound_and_model_gradient_is_unbiased():
    proc = _random_process(2, seed=31, learnable=False)
    model = _tiny_model(31)
    x = TOKENS[[2, 5]]
    exact = 0.5 * (_exact_bound(proc, model, x[0]) + _exact_bound(proc, model, x[1]))
    params = [p for p in model.parameters() if p.requires_grad]
    grad_exact = torch.autograd.grad(exact, params[-1])[0]  # output bias
    batch = x.repeat_interleave(400, dim=0)
    values, grads = [], []
    for r in range(20):
        loss, metrics = proc.loss(model, batch, generator=torch.Generator().manual_seed(r))
        values.append(metrics["bound"])
        grads.append(torch.autograd.grad(loss, params[-1])[0])
    values_t, grads_t = torch.tensor(values), torch.stack(grads)
    se = values_t.std() / math.sqrt(len(values))
    assert abs(values_t.mean() - float(exact.detach())) < 4 * se + 1e-4
    z = (grads_t.mean(0) - grad_exact).abs() / (grads_t.std(0) / math.sqrt(len(grads)) + 1e-9)
    assert z.max() < 4.5


def test_gumbel_phase_gives_phi_gradients_and_temperature_anneals_geometrically():
    proc = LearnableForwardProcess(K, L, steps=3, gumbel_fraction=0.4, tau_start=2.0, tau_end=0.5)
    proc.update_schedule(0.0)
    assert proc.phase == "gumbel" and proc.temperature == pytest.approx(2.0)
    proc.update_schedule(0.2)
    assert proc.temperature == pytest.approx(1.0)  # geometric mean of 2.0 and 0.5 halfway through
    proc.update_schedule(0.39)
    assert proc.phase == "gumbel" and 0.5 < proc.temperature < 0.55
    loss, metrics = proc.loss(_tiny_model(0), TOKENS, generator=torch.Generator().manual_seed(0))
    loss.backward()
    assert metrics["temperature"] == pytest.approx(proc.temperature)
    assert proc.raw.grad is not None and proc.raw.grad.abs().sum() > 0
    temps = []
    for p in torch.linspace(0, 0.39, 8):
        proc.update_schedule(float(p))
        temps.append(proc.temperature)
    assert all(a > b for a, b in itertools.pairwise(temps))
    proc.update_schedule(0.4)
    assert proc.phase == "reinforce"
    with pytest.raises(InputError):
        proc.update_schedule(1.5)


def test_warmup_phase_holds_the_forward_process_and_trains_only_the_reverse_model():
    proc = LearnableForwardProcess(K, L, steps=3, warmup_fraction=0.5, gumbel_fraction=0.2, tau_start=2.0)
    model = _tiny_model(0)
    proc.update_schedule(0.25)
    assert proc.phase == "warmup"
    loss, metrics = proc.loss(model, TOKENS, generator=torch.Generator().manual_seed(0))
    loss.backward()
    assert proc.raw.grad is None and proc.raw_position.grad is None  # phi untouched
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert metrics["reinforce"] == 0.0 and metrics["temperature"] == 0.0
    assert not proc.marginals().requires_grad  # the marginals are constants for this phase's loss
    proc.update_schedule(0.5)  # the Gumbel phase starts after the warm-up, at the start temperature
    assert proc.phase == "gumbel" and proc.temperature == pytest.approx(2.0)
    proc.update_schedule(0.7)
    assert proc.phase == "reinforce"


# --------------------------------------------------------------------------- API
def test_sample_returns_tokens_with_nfe_equal_to_steps_and_checks_arguments():
    proc = LearnableForwardProcess(4, 6, steps=5)
    model = TokenDenoiser(proc.input_dim, 4, 6, hidden=16, depth=1, heads=2)
    out = proc.sample(model, 7, 6, steps=5, generator=torch.Generator().manual_seed(0))
    assert out.nfe == 5 and out.tokens.shape == (7, 6)
    model.nfe_per_call = 2  # what a classifier-free-guided model costs per call
    assert proc.sample(model, 2, 6, steps=5).nfe == 10
    del model.nfe_per_call
    assert out.tokens.dtype == torch.long and int(out.tokens.min()) >= 0 and int(out.tokens.max()) < 4
    with pytest.raises(ConfigError):
        proc.sample(model, 2, 6, steps=3)
    with pytest.raises(ConfigError):
        proc.sample(model, 2, 5, steps=5)
    with pytest.raises(InputError):
        proc.loss(model, torch.full((2, 6), 4))
    with pytest.raises(ConfigError, match="logits of shape"):  # K + 1 outputs: the input width, not the output's
        proc.sample(TokenDenoiser(proc.input_dim, 5, 6, hidden=16, depth=1, heads=2), 2, 6, steps=5)
    with pytest.raises(ConfigError):
        LearnableForwardProcess(4, 6, steps=0)
    with pytest.raises(ConfigError):
        LearnableForwardProcess(4, 6, reinforce_samples=1)


def test_class_conditioning_passes_through_loss_bound_and_sampler():
    proc = LearnableForwardProcess(2, 5, steps=2)
    proc.update_schedule(0.9)
    model = TokenDenoiser(proc.input_dim, 2, 5, hidden=16, depth=1, heads=2, num_classes=3)
    x = torch.randint(0, 2, (6, 5), generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    loss, _ = proc.loss(model, x, generator=torch.Generator().manual_seed(0), y=y)
    loss.backward()
    assert torch.isfinite(loss)
    assert proc.nll_bound(model, x, n_time=3, y=y).shape == (6,)
    assert proc.sample(model, 6, 5, steps=2, y=y).tokens.shape == (6, 5)


def test_short_joint_training_lowers_the_bound():
    g = torch.Generator().manual_seed(0)
    pi = _correlated_pi(9)
    data = TOKENS[torch.multinomial(pi, 512, replacement=True, generator=g)]
    proc = LearnableForwardProcess(K, L, steps=2, gumbel_fraction=0.3)
    model = _tiny_model(1)
    opt = torch.optim.AdamW([*model.parameters(), *proc.parameters()], lr=3e-3)
    with torch.no_grad():
        before = float(proc.nll_bound(model, data[:128], n_time=4, generator=g).mean())
    steps = 150
    for step in range(steps):
        proc.update_schedule(step / steps)
        loss, _ = proc.loss(model, data[torch.randint(0, 512, (128,), generator=g)], generator=g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = float(proc.nll_bound(model, data[:128], n_time=4, generator=g).mean())
    entropy = float(-(pi * torch.log(pi)).sum() / L)
    assert after < before - 0.1 and after > entropy - 0.05


def test_an_ordering_forward_process_makes_the_factorised_reverse_exact_where_masking_is_not():
    """T = 2 marginals that reveal position 0 and hide position 1 at step 1: the reverse chain is
    ``p(x^0) p(x^1 | x^0)``, so with the exact denoiser the model is the data law and the bound is tight;
    the fixed masking schedule's bound keeps a gap on the same correlated data."""
    pi = _correlated_pi(17)
    entropy = float(-(pi * torch.log(pi)).sum() / L)
    ordered = LearnableForwardProcess(K, L, steps=2)
    target = torch.full(ordered.raw.shape, -30.0)
    target[0, 0, torch.arange(K), torch.arange(K)] = 30.0  # position 0 keeps its token
    target[0, 1, :, K] = 30.0  # position 1 is masked
    with torch.no_grad():
        ordered.raw.copy_((target - ordered.init_logits) / ordered.logit_scale)
    masked = LearnableForwardProcess(K, L, steps=2, learnable=False)
    results = {}
    for name, proc in (("ordered", ordered), ("masked", masked)):
        model = ExactDenoiser(proc, pi)
        p_model = _model_distribution(proc, model)
        with torch.no_grad():
            bound = float(sum(p * _exact_bound(proc, model, x) for p, x in zip(pi, TOKENS)))
        results[name] = (p_model, bound)
    torch.testing.assert_close(results["ordered"][0], pi, atol=1e-5, rtol=1e-4)
    assert results["ordered"][1] == pytest.approx(entropy, abs=1e-4)
    assert results["masked"][1] > entropy + 0.02
