"""pi-Flow: the closed-form GMM policy velocity against an independent score-based reference, rollouts,
and the imitation loss."""

from __future__ import annotations

import itertools

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.flowmaps import (
    GaussianMixture,
    PiFlow,
    PolicyNet,
    gmm_velocity_reference,
    policy_rollout,
    policy_velocity,
    sample_policy,
)
from gencore.solvers import solve_ode

WEIGHTS = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
MEANS = torch.tensor([[2.0, 0.0], [-1.0, 1.5], [0.5, -2.0]], dtype=torch.float64)
STD = 0.3


def teacher(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The exact velocity of the linear-path flow N(0, I) -> GMM, one time per sample allowed."""
    t = torch.as_tensor(t, dtype=x.dtype).expand(x.shape[0])
    return torch.cat([gmm_velocity_reference(x[i : i + 1], float(t[i]), WEIGHTS, MEANS, STD) for i in range(len(x))])


def exact_posterior(x_src: torch.Tensor, t_src: float) -> GaussianMixture:
    """p(x1 | x_{t_src}) of the GMM data law by Bayes' rule: again a GMM (per sample)."""
    lik_prec = t_src**2 / (1.0 - t_src) ** 2
    prec = 1.0 / STD**2 + lik_prec
    means = (MEANS[None] / STD**2 + (t_src / (1.0 - t_src) ** 2) * x_src[:, None, :]) / prec
    marg_var = t_src**2 * STD**2 + (1.0 - t_src) ** 2
    logits = torch.log(WEIGHTS)[None] - 0.5 * (x_src[:, None, :] - t_src * MEANS[None]).square().sum(-1) / marg_var
    log_var = torch.full_like(logits, -torch.log(torch.tensor(prec, dtype=torch.float64)).item())
    return GaussianMixture(logits, means, log_var)


def _x(n: int = 32, seed: int = 0) -> torch.Tensor:
    return 1.5 * torch.randn(n, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("t", [0.05, 0.3, 0.6, 0.9, 0.97])
def test_policy_with_the_true_mixture_is_the_exact_gmm_velocity(t: float) -> None:
    x = _x()
    mix = GaussianMixture.shared(WEIGHTS, MEANS, STD, x.shape[0])
    v = policy_velocity(mix, x, t, torch.zeros_like(x), 0.0)  # at t_src = 0, x_src does not matter
    torch.testing.assert_close(v, gmm_velocity_reference(x, t, WEIGHTS, MEANS, STD), rtol=1e-9, atol=1e-9)
    v_other_src = policy_velocity(mix, x, t, _x(seed=9), 0.0)
    torch.testing.assert_close(v_other_src, v, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("t_src", "t"), [(0.2, 0.2), (0.2, 0.5), (0.5, 0.9), (0.7, 0.75)])
def test_policy_from_the_exact_posterior_reproduces_the_teacher_later(t_src: float, t: float) -> None:
    x_src = _x(seed=1)
    mix = exact_posterior(x_src, t_src)
    x_t = _x(seed=2)  # any later state, not only the one on x_src's trajectory
    v = policy_velocity(mix, x_t, t, x_src, t_src)
    torch.testing.assert_close(v, gmm_velocity_reference(x_t, t, WEIGHTS, MEANS, STD), rtol=1e-8, atol=1e-8)


def test_policy_rollout_converges_to_the_exact_ode_solution() -> None:
    x0 = _x(16, seed=3)
    mix = GaussianMixture.shared(WEIGHTS, MEANS, STD, x0.shape[0])
    t_end = 0.95  # the reference solver evaluates at its end point, where 1 - t must stay away from 0
    exact = solve_ode(
        lambda x, t: gmm_velocity_reference(x, float(t), WEIGHTS, MEANS, STD),
        x0,
        grid=torch.linspace(1e-6, t_end, 801, dtype=torch.float64),
        method="rk4",
    ).x
    errors = []
    for n in (50, 100, 200, 400):
        x, _, _ = policy_rollout(mix, x0, 0.0, t_end, n)
        errors.append(float((x - exact).norm(dim=1).max()))
    for a, b in itertools.pairwise(errors):
        assert 1.6 < a / b < 2.4  # Euler: first order
    assert errors[-1] < 5e-3


def test_rollout_trajectory_and_times_line_up() -> None:
    x0 = _x(4)
    mix = GaussianMixture.shared(WEIGHTS, MEANS, STD, 4)
    x, traj, times = policy_rollout(mix, x0, 0.25, 0.75, 5, return_trajectory=True)
    assert traj.shape == (5, 4, 2) and times.shape == (5,)
    torch.testing.assert_close(traj[0], x0)
    torch.testing.assert_close(times, torch.tensor([0.25, 0.35, 0.45, 0.55, 0.65], dtype=torch.float64))
    step = traj[-1] + 0.1 * policy_velocity(mix, traj[-1], times[-1], x0, 0.25)
    torch.testing.assert_close(x, step)


@pytest.mark.parametrize("nfe", [1, 2])
def test_imitation_loss_vanishes_for_the_exact_policy_and_sampling_follows_the_teacher(nfe: int) -> None:
    x0 = _x(16, seed=4)
    distill = PiFlow(teacher, substeps=16, points=3)
    loss = distill.loss(exact_posterior, x0, nfe=nfe, generator=torch.Generator().manual_seed(0))
    assert float(loss) < 1e-16
    wrong = PiFlow(lambda x, t: teacher(x, t) + 0.1, substeps=16, points=3)
    assert float(wrong.loss(exact_posterior, x0, nfe=nfe)) == pytest.approx(0.02, rel=1e-6)  # |(0.1, 0.1)|^2


def test_policy_net_gradients_and_sampling() -> None:
    torch.manual_seed(0)
    net = PolicyNet(2, components=4, hidden=32, depth=2).double()
    distill = PiFlow(teacher, substeps=8, points=2)
    loss = distill.loss(net, _x(8), nfe=2, generator=torch.Generator().manual_seed(0))
    loss.backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in net.parameters())
    assert sample_policy(net, _x(8), 2, substeps=8).shape == (8, 2)


def test_bad_inputs_raise_suite_errors() -> None:
    with pytest.raises(InputError):
        GaussianMixture(torch.zeros(2, 3), torch.zeros(2, 4, 2), torch.zeros(2, 3))
    mix = GaussianMixture.shared(WEIGHTS, MEANS, STD, 2)
    with pytest.raises(ConfigError):
        policy_rollout(mix, _x(2), 0.5, 0.25, 4)
    with pytest.raises(ConfigError):
        PiFlow(teacher, substeps=0)


UNEQUAL_STD = torch.tensor([0.2, 0.6, 1.1], dtype=torch.float64)


def _unequal_velocity(x: torch.Tensor, t: float) -> torch.Tensor:
    """Velocity of N(0, I) -> sum_k w_k N(mu_k, sigma_k^2 I) with per-component sigma_k, by Tweedie on the
    autograd score of the marginal ``sum_k w_k N(t mu_k, (t^2 sigma_k^2 + (1 - t)^2) I)``."""
    var = t**2 * UNEQUAL_STD**2 + (1.0 - t) ** 2
    y = x.detach().requires_grad_(True)
    sq = (y[:, None, :] - t * MEANS[None]).square().sum(-1)
    logp = torch.logsumexp(torch.log(WEIGHTS)[None] - 0.5 * sq / var - 0.5 * x.shape[1] * torch.log(var), dim=1)
    (score,) = torch.autograd.grad(logp.sum(), y)
    return ((x + (1.0 - t) ** 2 * score) / t - x) / (1.0 - t)


@pytest.mark.parametrize(("t_src", "t"), [(0.0, 0.3), (0.0, 0.9), (0.3, 0.5), (0.6, 0.95)])
def test_policy_with_unequal_component_variances_is_the_exact_velocity(t_src: float, t: float) -> None:
    """Components of different widths: the log-determinant term ``-D/2 log(sigma_k^2 P_k)`` of the posterior
    weights differs between components and matters (with equal widths it cancels in the softmax)."""
    x_src, x_t = _x(seed=5), _x(seed=6)
    if t_src == 0.0:
        mix = GaussianMixture.shared(WEIGHTS, MEANS, UNEQUAL_STD, x_src.shape[0])
    else:  # the exact posterior p(x1 | x_{t_src}) by Bayes' rule, per sample
        prec = 1.0 / UNEQUAL_STD**2 + t_src**2 / (1.0 - t_src) ** 2  # [K]
        means = (MEANS / UNEQUAL_STD[:, None] ** 2 + (t_src / (1.0 - t_src) ** 2) * x_src[:, None, :]) / prec[:, None]
        marg_var = t_src**2 * UNEQUAL_STD**2 + (1.0 - t_src) ** 2
        sq = (x_src[:, None, :] - t_src * MEANS[None]).square().sum(-1)
        logits = torch.log(WEIGHTS)[None] - 0.5 * sq / marg_var - torch.log(marg_var)  # D = 2
        mix = GaussianMixture(logits, means, (-torch.log(prec))[None].expand(x_src.shape[0], 3))
    v = policy_velocity(mix, x_t, t, x_src, t_src)
    torch.testing.assert_close(v, _unequal_velocity(x_t, t), rtol=1e-9, atol=1e-9)


def test_sampling_with_the_exact_posterior_policy_is_one_euler_rollout_of_the_true_flow_for_any_nfe() -> None:
    """Each segment's policy, issued at its own start ``(x_a, a)``, reproduces the true velocity: splitting the
    same Euler grid into 1, 2 or 4 policy generations gives the same samples."""
    x0 = _x(16, seed=7)
    one, _, _ = policy_rollout(GaussianMixture.shared(WEIGHTS, MEANS, STD, 16), x0, 0.0, 1.0, 64)
    for nfe in (1, 2, 4):
        torch.testing.assert_close(sample_policy(exact_posterior, x0, nfe, substeps=64), one, rtol=1e-8, atol=1e-8)


def test_imitation_compares_velocities_at_rollout_states_at_their_own_times() -> None:
    """A teacher equal to the true velocity plus ``x - X(t)``, with ``X`` the exact policy's own Euler rollout,
    has zero imitation loss only if each compared state is paired with the time at which the rollout held it."""
    x0 = _x(8, seed=8)
    substeps = 8
    _, traj, _ = policy_rollout(exact_posterior(x0, 0.0), x0, 0.0, 1.0, substeps, return_trajectory=True)

    def shifted_teacher(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        step = torch.round(t * substeps).long()
        rollout_state = traj[step, torch.arange(x.shape[0]) % x0.shape[0]]
        return teacher(x, t) + (x - rollout_state)

    distill = PiFlow(shifted_teacher, substeps=substeps, points=4)
    assert float(distill.loss(exact_posterior, x0, nfe=1, generator=torch.Generator().manual_seed(0))) < 1e-16


def test_bad_step_counts_raise_one_config_error() -> None:
    mix = GaussianMixture.shared(WEIGHTS, MEANS, STD, 2)
    distill = PiFlow(teacher, substeps=4, points=1)
    for nfe in (0, -1, 1.5):  # 0 divided by zero, -1 silently returned a zero loss
        with pytest.raises(ConfigError, match="nfe"):
            distill.loss(exact_posterior, _x(2), nfe=nfe)
    with pytest.raises(ConfigError, match="substeps"):
        policy_rollout(mix, _x(2), 0.0, 0.5, 2.5)
    with pytest.raises(ConfigError, match="substeps"):
        sample_policy(exact_posterior, _x(2), 1, substeps=0)


@pytest.mark.parametrize("t", [0.0, 0.3, 0.6])
def test_float32_velocity_of_the_narrowest_components_matches_the_float64_reference(t: float) -> None:
    """At PolicyNet's smallest variance (std 2.5e-3) the posterior log-weights held two terms of size
    ``|mu|^2 / sigma^2 ~ 6e5`` that cancel: in float32 the velocity was off by 0.04 (of 5); now ~1e-6."""
    from gencore.flowmaps.piflow import LOG_VAR_RANGE

    std = float(torch.exp(torch.tensor(LOG_VAR_RANGE[0] / 2)))
    x = _x()
    mix = GaussianMixture.shared(WEIGHTS.float(), MEANS.float(), std, x.shape[0])
    v = policy_velocity(mix, x.float(), t, torch.zeros(x.shape, dtype=torch.float32), 0.0)
    ref = gmm_velocity_reference(x, t, WEIGHTS, MEANS, std)
    torch.testing.assert_close(v.double(), ref, rtol=1e-5, atol=1e-4)


def test_reference_velocity_normalises_unnormalised_weights_at_t0_as_it_does_later() -> None:
    x = _x(8)
    unnormalised = 4.0 * WEIGHTS
    at_zero = gmm_velocity_reference(x, 0.0, unnormalised, MEANS, STD)
    torch.testing.assert_close(at_zero, gmm_velocity_reference(x, 0.0, WEIGHTS, MEANS, STD), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(at_zero, gmm_velocity_reference(x, 1e-7, unnormalised, MEANS, STD), rtol=0, atol=1e-5)


def test_policy_velocity_refuses_times_outside_its_range() -> None:
    x = _x(4)
    mix = GaussianMixture.shared(WEIGHTS, MEANS, STD, 4)
    # t = 1 divided by zero; t < t_src made the precision a + 1/sigma^2 negative (NaN log-weights)
    for t, t_src in ((1.0, 0.0), (0.2, 0.5), (0.5, -0.1), (float("nan"), 0.0)):
        with pytest.raises(InputError, match="t_src <= t < 1"):
            policy_velocity(mix, x, t, x, t_src)
    with pytest.raises(InputError):
        policy_velocity(mix, x, torch.tensor([0.5, 0.5, 1.0, 0.5], dtype=torch.float64), x, 0.0)
    assert bool(torch.isfinite(policy_velocity(mix, x, 0.5, x, 0.5)).all())  # t = t_src is allowed


def test_non_integer_substeps_or_points_are_refused_not_truncated() -> None:
    for kwargs in ({"substeps": 2.5}, {"points": 1.5}, {"points": 0}):
        with pytest.raises(ConfigError, match=next(iter(kwargs))):
            PiFlow(teacher, **kwargs)


def test_trained_policy_net_saves_and_loads_like_every_suite_model(tmp_path) -> None:
    """PolicyNet kept its constructor settings in ``config`` but had no ``save_pretrained``: a trained pi-Flow
    student could not be written or read back."""
    torch.manual_seed(0)
    student = PolicyNet(2, components=3, hidden=16, depth=2).double()
    student.save_pretrained(tmp_path / "policy")
    loaded = PolicyNet.from_pretrained(tmp_path / "policy").double()
    assert loaded.config == student.config
    z = _x(1, seed=4)
    torch.testing.assert_close(
        sample_policy(loaded, z, 2, substeps=8), sample_policy(student, z, 2, substeps=8), rtol=0, atol=0
    )


def test_imitation_points_are_drawn_uniformly_from_every_substep_of_each_segment() -> None:
    """``points`` states per sample, uniform over the ``substeps // nfe`` substeps of each segment's rollout:
    a recording teacher sees each substep time about equally often (chi-square, 0.1 % critical value 24.3 for
    7 degrees of freedom). Comparing only at the segment's start would still give the exact policy zero loss."""
    seen: list[torch.Tensor] = []

    def recording_teacher(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        seen.append(t.detach().clone())
        return torch.zeros_like(x)

    x0 = _x(500, seed=9)
    for nfe in (1, 2):
        seen.clear()
        PiFlow(recording_teacher, substeps=8, points=16).loss(
            exact_posterior, x0, nfe=nfe, generator=torch.Generator().manual_seed(1)
        )
        t = torch.cat(seen)
        assert t.shape == (500 * 16 * nfe,)
        counts = torch.bincount((t * 8).round().long(), minlength=8).double()
        assert counts.shape == (8,)  # never the end time 1
        expected = t.shape[0] / 8
        assert float(((counts - expected) ** 2 / expected).sum()) < 24.3
