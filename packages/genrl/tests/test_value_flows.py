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
