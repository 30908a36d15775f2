"""Value Flows: the DCFM/BCFM targets against the pushed-forward path (discount convention pinned),
the flow-derivative variance on a Gaussian law, and the critic on the toy MDP."""

from __future__ import annotations

import numpy as np
import torch

from genrl.critics import CriticConfig
from genrl.networks import Ensemble
from genrl.toy_mdp import BimodalChain, ExactReturnField
from genrl.value_flow_critic import FlowReturnCritic, bcfm_target, dcfm_target


class GaussianTarget:
    """An analytic return flow for (s', a'): the linear path from N(0, 1) to N(mu, sd^2),
    ``phi_t(eps) = mu t + (1 - t + t sd) eps``."""

    def __init__(self, mu: float, sd: float) -> None:
        self.mu, self.sd = mu, sd

    def flow(self, eps, obs, act, end_time=None, member=None, jacobian=False):
        t = torch.ones_like(eps) if end_time is None else end_time.reshape(-1, 1)
        z = self.mu * t + (1 - t + t * self.sd) * eps
        return z, ((1 - t + t * self.sd) if jacobian else None)

    def velocity(self, z, t, obs, act):
        t = t.reshape(-1, 1)
        eps = (z - self.mu * t) / (1 - t + t * self.sd)
        return self.mu + (self.sd - 1) * eps

    def path(self, eps, obs, act, t):
        z, _ = self.flow(eps, obs, act, end_time=t)
        return z, self.velocity(z, t, obs, act)


def test_dcfm_velocity_is_the_time_derivative_of_the_pushed_forward_path() -> None:
    target = GaussianTarget(mu=2.0, sd=0.5)
    b = 64
    g = torch.Generator().manual_seed(0)
    eps = torch.randn(b, 1, generator=g, dtype=torch.float64)
    t = torch.rand(b, 1, generator=g, dtype=torch.float64) * 0.9 + 0.05
    r = torch.randn(b, 1, generator=g, dtype=torch.float64)
    discount = 0.9
    mask = (torch.arange(b) % 4 != 0).to(torch.float64)[:, None]  # every 4th transition terminal
    gm = discount * mask
    obs = act = torch.zeros(b, 1, dtype=torch.float64)
    z, u = dcfm_target(target, r, gm, eps, t, obs, act)
    h = 1e-5
    z_plus, _ = dcfm_target(target, r, gm, eps, t + h, obs, act)
    z_minus, _ = dcfm_target(target, r, gm, eps, t - h, obs, act)
    torch.testing.assert_close(u, (z_plus - z_minus) / (2 * h), rtol=1e-6, atol=1e-8)
    # the point itself follows the convention z_t = r + discount * (1 - terminal) * z'_t
    torch.testing.assert_close(z, r + gm * (2.0 * t + (1 - t + 0.5 * t) * eps))
    # a terminal transition's path sits at r and does not move
    assert (u[mask[:, 0] == 0] == 0).all()
    # the reference code's target, v'(z'_t, t) without the factor discount * (1 - terminal), is not that velocity
    live = mask[:, 0] == 1
    z_next = (z[live] - r[live]) / discount
    v_ref = target.velocity(z_next, t[live], None, None)
    torch.testing.assert_close(u[live], discount * v_ref)
    assert (u[live] - v_ref).abs().min() > 1e-3


class _Linear(torch.nn.Module):
    def __init__(self, a: float) -> None:
        super().__init__()
        self.a = a

    def forward(self, z, t, obs, act):
        return self.a * z


def test_dcfm_velocity_of_an_ensemble_is_the_derivative_of_its_mean_path() -> None:
    # members v_1 = z and v_2 = -z: phi^k_t(eps) = eps e^(+-t), the mean path eps cosh t moves at eps sinh t, while
    # the mean field at the mean point, (z - z) / 2, is 0 (the velocity the target had for an ensemble)
    critic = FlowReturnCritic(1, 1, CriticConfig(hidden=8, depth=1, ensemble=2, flow_steps=4000))
    critic.fields = Ensemble([_Linear(1.0), _Linear(-1.0)])
    eps = torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    t = torch.tensor([[0.3], [0.6], [0.9]], dtype=torch.float64)
    r, obs = torch.tensor([[0.5], [0.0], [-1.0]], dtype=torch.float64), torch.zeros(3, 1, dtype=torch.float64)
    gm = torch.tensor([[0.9], [0.9], [0.0]], dtype=torch.float64)  # the last transition terminal
    z, u = dcfm_target(critic, r, gm, eps, t, obs, obs)
    torch.testing.assert_close(z, r + gm * eps * torch.cosh(t), rtol=0, atol=1e-3)
    torch.testing.assert_close(u, gm * eps * torch.sinh(t), rtol=0, atol=1e-3)


def test_bcfm_target_bootstraps_with_discount_and_mask() -> None:
    target = GaussianTarget(mu=3.0, sd=0.0)  # deterministic next return 3
    eps = torch.zeros(4, 1)
    t = torch.full((4, 1), 0.5)
    r = torch.tensor([[1.0], [1.0], [0.0], [-1.0]])
    gm = 0.99 * torch.tensor([[1.0], [0.0], [1.0], [1.0]])  # second transition terminal
    z, u = bcfm_target(target, r, gm, eps, t, None, None)
    torch.testing.assert_close(u, torch.tensor([[1.0 + 0.99 * 3], [1.0], [0.99 * 3], [-1.0 + 0.99 * 3]]))
    torch.testing.assert_close(z, 0.5 * u)


def test_flow_derivative_ode_recovers_the_std_of_an_affine_flow() -> None:
    critic = FlowReturnCritic(1, 1, CriticConfig(hidden=8, depth=1, ensemble=1, flow_steps=200, q_noises=20000))
    target = GaussianTarget(mu=1.0, sd=0.3)
    for f in critic.fields:  # replace the network by the analytic field of N(1, 0.3^2)
        f.forward = lambda z, t, obs, act: target.velocity(z, t, obs, act)
    obs = torch.zeros(16, 1)
    var = critic.return_variance(obs, obs, n=4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(var, torch.full((16,), 0.09), rtol=0.02, atol=0.0)
    q = critic.q(obs, obs, torch.Generator().manual_seed(1))
    # eps + v(eps, 0) = mu + sd * eps: its average over 20,000 noises is the mean return within 4 standard errors
    assert (q - 1.0).abs().max() < 4 * 0.3 / 20000**0.5


def test_exact_toy_field_flows_to_the_law_and_solvers_read_it_at_their_own_accuracy() -> None:
    chain = BimodalChain()
    critic = FlowReturnCritic(2, 1, CriticConfig(hidden=8, depth=1, ensemble=1, return_min=-5.0, return_max=5.0))
    critic.fields = Ensemble([ExactReturnField(chain)])
    obs_np = chain.observation(np.array([2]), np.array([0.5]))  # last step: 1/2 N(-1, 0.1^2) + 1/2 N(1, 0.1^2)
    obs = torch.from_numpy(obs_np)
    n = 4000
    eps = torch.randn(n, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    # the monotone map F^-1(Phi(eps)) from the analytic CDF
    grid = np.linspace(-2.0, 2.0, 400001)
    cdf = chain.return_cdf(obs_np, grid[None])[0]
    u = 0.5 * (1 + torch.erf(eps / 2**0.5)).numpy()[:, 0]
    exact = torch.from_numpy(np.interp(u, cdf, grid))[None]

    def read(method: str, steps: int) -> torch.Tensor:
        return critic.sample(obs, obs[:, :1], n, torch.Generator().manual_seed(0), steps=steps, method=method)

    def err(z: torch.Tensor) -> float:
        return float((z - exact).abs().mean())

    # the flow of the exact field is the quantile map: a 4th-order solver reproduces it sample by sample
    rk4 = err(read("rk4", 20))
    assert rk4 < 2e-3
    # 10 Euler steps miss it by far more: the last step lands on the posterior mean of the mode, so the modes
    # come out too narrow; Euler's error shrinks with the step count
    z10 = read("euler", 10)
    assert err(z10) > 10 * rk4
    assert z10[z10 > 0].std() < 0.9 * exact[exact > 0].std()
    assert err(read("euler", 50)) < 0.5 * err(z10)
    # the default read-out is the configured number of Euler steps
    torch.testing.assert_close(critic.sample(obs, obs[:, :1], n, torch.Generator().manual_seed(0)), z10)


class _Field(torch.nn.Module):
    """A return field given by a function ``f(z, t [B, 1], obs, act)``, in place of a network."""

    def __init__(self, f) -> None:
        super().__init__()
        self.f = f

    def forward(self, z, t, obs, act):
        return self.f(z, torch.as_tensor(t, dtype=z.dtype).reshape(-1, 1).expand_as(z), obs, act)


def _critic_with(f, **cfg) -> FlowReturnCritic:
    critic = FlowReturnCritic(1, 1, CriticConfig(hidden=8, depth=1, ensemble=1, **cfg))
    critic.fields = Ensemble([_Field(f)])
    return critic


def test_bcfm_point_lies_on_the_straight_line_from_the_noise_to_the_target() -> None:
    target = GaussianTarget(mu=1.5, sd=0.5)
    g = torch.Generator().manual_seed(0)
    eps, t, r = (torch.randn(32, 1, generator=g), torch.rand(32, 1, generator=g), torch.randn(32, 1, generator=g))
    gm = torch.full((32, 1), 0.9)
    z, u = bcfm_target(target, r, gm, eps, t, None, None)
    y = r + 0.9 * (1.5 + 0.5 * eps)
    torch.testing.assert_close(z, t * y + (1 - t) * eps)  # z_0 = eps (the source), z_1 = y
    torch.testing.assert_close(u, y - eps)


def test_flow_to_per_sample_end_times_and_its_jacobian_follow_the_analytic_gaussian_flow() -> None:
    target = GaussianTarget(mu=2.0, sd=0.4)
    critic = _critic_with(lambda z, t, obs, act: target.velocity(z, t, obs, act), flow_steps=400)
    g = torch.Generator().manual_seed(0)
    eps = torch.randn(16, 1, generator=g, dtype=torch.float64)
    end = torch.rand(16, generator=g, dtype=torch.float64) * 0.8 + 0.1
    obs = torch.zeros(16, 1, dtype=torch.float64)
    z, jac = critic.flow(eps, obs, obs, end_time=end, jacobian=True)
    s = (1 - end + end * 0.4)[:, None]  # phi_t(eps) = mu t + (1 - t + t sd) eps, d phi_t / d eps = 1 - t + t sd
    torch.testing.assert_close(z, 2.0 * end[:, None] + s * eps, rtol=0, atol=1e-3)
    torch.testing.assert_close(jac, s, rtol=0, atol=1e-3)


def test_confidence_weight_is_high_where_the_return_spread_of_s_a_is_large() -> None:
    # w = sigmoid(-temp / std) + 1/2 with std = |dz_1 / d eps| at (s, a), from the target field: narrow return laws
    # are down-weighted. The field below is the linear path to N(0, sd^2) with sd given by the observation.
    def gaussian(z, t, obs, act):
        return (obs - 1) * z / (1 - t + t * obs)

    critic = _critic_with(gaussian, flow_steps=200)
    obs = torch.tensor([0.1, 2.0], dtype=torch.float64).repeat_interleave(32)[:, None]
    batch = {"observations": obs, "actions": obs, "next_observations": 3.0 - obs, "rewards": 0 * obs[:, 0]}
    _, m = critic.loss({**batch, "masks": 1 + 0 * obs[:, 0]}, obs, critic, 0.9, torch.Generator().manual_seed(0))
    torch.testing.assert_close(m["return_std"], obs.mean(), rtol=1e-2, atol=0)
    expected = (torch.sigmoid(-0.3 / obs) + 0.5).mean()
    torch.testing.assert_close(m["confidence_weight"], expected, rtol=1e-2, atol=0)


def test_critic_loss_vanishes_at_the_exact_returns_of_a_deterministic_mdp() -> None:
    # Z(s, a) is the point mass at the observation's value q(s) and (s, a) -> (s', a') with q(s) = r + gamma m q(s'):
    # the straight field (q(s) - z) / (1 - t) is then the exact critic, and both BCFM and DCFM targets are met
    # exactly (Euler integrates a straight field without error), terminal transitions included
    critic = _critic_with(lambda z, t, obs, act: (obs - z) / (1 - t), return_min=-10.0, return_max=10.0)
    g = torch.Generator().manual_seed(0)
    r, q_next = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g, dtype=torch.float64)
    masks = (torch.arange(16) % 3 != 0).to(torch.float64)
    obs, nobs = (r + 0.9 * masks * q_next)[:, None], q_next[:, None]
    batch = {"observations": obs, "actions": obs, "next_observations": nobs, "rewards": r, "masks": masks}
    loss, m = critic.loss(batch, nobs, critic, 0.9, g)
    assert m["bcfm_loss"] < 1e-20 and m["dcfm_loss"] < 1e-20 and loss < 1e-20
    # a transition that is wrongly bootstrapped (terminal taken as live) or discounted is not at the fixed point
    for wrong in ({"masks": torch.ones(16, dtype=torch.float64)}, {"rewards": r + 0.1}):
        _, m = critic.loss({**batch, **wrong}, nobs, critic, 0.9, g)
        assert m["bcfm_loss"] > 1e-3 and m["dcfm_loss"] > 1e-3
    _, m = critic.loss(batch, nobs, critic, 0.8, g)
    assert m["bcfm_loss"] > 1e-3 and m["dcfm_loss"] > 1e-3


def test_q_averages_noises_per_state_and_returns_are_clipped_to_the_support() -> None:
    # v(z, 0 | s) = s - z: every noise gives eps + v(eps, 0) = s exactly, so Q(s) = s for each state
    critic = _critic_with(lambda z, t, obs, act: obs - z, q_noises=5, return_min=-3.0, return_max=3.0)
    obs = torch.tensor([[-1.0], [0.5], [2.0], [7.0]])
    q = critic.q(obs, obs, torch.Generator().manual_seed(0))
    torch.testing.assert_close(q, torch.tensor([-1.0, 0.5, 2.0, 3.0]))
    # the straight field s - eps carries every noise to s in one Euler step; s = 7 lies beyond the support
    z = critic.sample(obs, obs, 3, torch.Generator().manual_seed(0), steps=1)
    torch.testing.assert_close(z, torch.tensor([[-1.0], [0.5], [2.0], [3.0]]).expand(4, 3))


def test_flow_jacobian_is_the_derivative_of_the_flow_and_the_variance_its_mean_square() -> None:
    # a nonlinear field: dz_1 / d eps varies with eps (Euler's Jacobian ODE differentiates the Euler map exactly)
    critic = _critic_with(lambda z, t, obs, act: obs * torch.sin(3 * z) + t, flow_steps=20)
    g = torch.Generator().manual_seed(0)
    obs = torch.tensor([[0.5], [1.0]], dtype=torch.float64).repeat_interleave(6, 0)
    eps = torch.randn(12, 1, generator=g, dtype=torch.float64)
    _, jac = critic.flow(eps, obs, obs, jacobian=True)
    h = 1e-6
    fd = (critic.flow(eps + h, obs, obs)[0] - critic.flow(eps - h, obs, obs)[0]) / (2 * h)
    torch.testing.assert_close(jac, fd, rtol=1e-6, atol=1e-8)
    assert jac.std() > 0.1
    var = critic.return_variance(obs[::6], obs[::6], n=6, generator=torch.Generator().manual_seed(1))
    eps = torch.randn(12, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    _, jac = critic.flow(eps, obs, obs, jacobian=True)
    torch.testing.assert_close(var, (jac.reshape(2, 6) ** 2).mean(1))
