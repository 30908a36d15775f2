"""Second pass over the flow agents against their papers: the pieces a plausible slip would leave every other test
passing on (action clipping of the BC flow and the one-step policy, the stop-gradient on FQL's Q normaliser, the
ensemble mean in FQL's TD target, the target field behind Value Flows' confidence weights, SAC's deterministic
action and its log-std bounds) and the batch / spec checks in front of them."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import SMALL, SPEC, small_batch
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from gencore.errors import InputError
from genrl.agents import EnvSpec, make_agent
from genrl.critics import CriticConfig
from genrl.networks import Ensemble
from genrl.value_flow_critic import FlowReturnCritic


class _ConstantField(torch.nn.Module):
    """The BC velocity ``(x - a) / (1 - t)``: Euler integration from any noise lands exactly on ``x``."""

    def __init__(self, x: float) -> None:
        super().__init__()
        self.x = x

    def forward(self, a_t: torch.Tensor, t: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return (self.x - a_t) / (1 - torch.as_tensor(t).reshape(-1, 1))


@pytest.mark.parametrize("shape", [(16, 2, 1), (16, 1, 2)])
@pytest.mark.parametrize("name", ["flow-bc", "fql", "sac"])
def test_update_refuses_actions_with_an_extra_axis(name: str, shape: tuple[int, ...]) -> None:
    # the shape check flattened the actions like the observations, so [B, A, 1] passed it and then failed inside a
    # network with a RuntimeError ("Tensors must have same number of dimensions")
    agent = make_agent(name, SPEC, SMALL)
    batch = small_batch()
    with pytest.raises(InputError, match=r"'actions' must have shape \[16, 2\]"):
        agent.update({**batch, "actions": batch["actions"].reshape(shape)})


def test_env_spec_refuses_a_non_finite_observation_mean() -> None:
    # a NaN mean passed the spec and turned every standardised observation, and every loss, into NaN
    base = {"obs_dim": 2, "action_dim": 1, "action_low": (-1.0,), "action_high": (1.0,)}
    for bad in (float("nan"), float("inf")):
        with pytest.raises(InputError, match="'obs_mean' must be finite"):
            EnvSpec(**base, obs_mean=(0.0, bad))


@pytest.mark.parametrize("name", ["flow-bc", "fql", "value-flows"])
def test_bc_flow_actions_and_best_of_n_candidates_are_clipped_to_the_action_box(name: str) -> None:
    # FQL clips the Euler-integrated BC action (its distillation target and best-of-n candidates); a field that
    # carries the noise to +-3 must come out at +-1 (env_action's own clamp would hide a missing clip in act())
    agent = make_agent(name, SPEC, SMALL)
    obs = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    a0 = torch.randn(6, 2, generator=torch.Generator().manual_seed(1))
    for x in (3.0, -3.0):
        agent.actor_flow = _ConstantField(x)
        torch.testing.assert_close(agent.flow_actions(obs, a0), torch.full((6, 2), math.copysign(1.0, x)))
    if name != "flow-bc":
        agent.actor_flow = _ConstantField(3.0)
        torch.testing.assert_close(agent.best_of_n(obs, 4), torch.ones(6, 2))


@pytest.mark.parametrize("name", ["fql", "c51", "value-flows"])
def test_one_step_actions_are_clipped_where_the_critic_reads_them(name: str) -> None:
    # the critic's bootstrap actions a' and the acting policy take clip(mu(s, eps)): a one-step output beyond the
    # bounds must reach Q(s', a') at the bound, not outside the box the critic was trained on
    agent = make_agent(name, SPEC, SMALL | {"extraction": "one-step"})
    with torch.no_grad():
        agent.actor_onestep.body.net[-1].bias.copy_(torch.tensor([5.0, -5.0]))
        agent.actor_onestep.body.net[-1].weight.zero_()
    nobs = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    expected = torch.tensor([1.0, -1.0]).expand(5, 2)
    torch.testing.assert_close(agent.next_actions(nobs), expected)
    for deterministic in (True, False):
        torch.testing.assert_close(agent.policy(nobs, deterministic), expected)


def test_fql_q_normaliser_is_a_stop_gradient() -> None:
    # lam = 1 / mean|Q| is a constant in FQL (jax.lax.stop_gradient): the Q term's gradient is -lam * grad mean(Q).
    # Differentiating through lam as well makes the term -mean(Q) / mean|Q| = -1 when every Q > 0: no gradient at all
    agent = make_agent("fql", SPEC, SMALL | {"alpha": 0.0})
    with torch.no_grad():
        for net in agent.critic.nets:
            net.net[-1].bias.fill_(50.0)  # every Q positive
    agent.bc_flow_loss = lambda obs, act: torch.zeros((), requires_grad=True)
    b = agent.prepare(small_batch())
    bias = agent.actor_onestep.body.net[-1].bias
    state = agent.generator.get_state()
    loss, _ = agent.actor_loss(b)
    (grad,) = torch.autograd.grad(loss, bias)
    agent.generator.set_state(state)  # replay: the BC term draws nothing here, so eps is the next draw
    eps = agent.noise(16, 2)
    q = agent.critic.q(b["observations"], agent.actor_onestep(b["observations"], eps).clamp(-1.0, 1.0))
    assert (q > 0).all()
    (expected,) = torch.autograd.grad(-q.mean() / q.abs().mean().item(), bias)
    assert expected.abs().max() > 1e-4  # the Q term does push the one-step policy
    torch.testing.assert_close(grad, expected)


def test_fql_td_target_is_the_mean_of_the_target_ensemble() -> None:
    # FQL's q_agg = 'mean' (the module docstring): r + discount * mask * mean_k Q_target_k(s', a'), members read one
    # by one (a min over the ensemble, SAC's choice, is a different target)
    agent = make_agent("fql", SPEC, SMALL | {"discount": 0.9, "ensemble": 3})
    with torch.no_grad():
        for k, net in enumerate(agent.target_critic.nets):
            net.net[-1].bias.add_(float(k))  # members that disagree, so mean != min != max
    b = agent.prepare(small_batch())
    na = agent.next_actions(b["next_observations"])
    with torch.no_grad():
        x = torch.cat([b["next_observations"], na], -1)
        members = torch.stack([net(x).squeeze(-1) for net in agent.target_critic.nets])
        y = b["rewards"] + 0.9 * b["masks"] * members.mean(0)
        x0 = torch.cat([b["observations"], b["actions"]], -1)
        q = torch.stack([net(x0).squeeze(-1) for net in agent.critic.nets])
    assert (members.max(0).values - members.min(0).values).min() > 0.5
    loss, _ = agent.critic.loss(b, na, agent.target_critic, 0.9)
    torch.testing.assert_close(loss, ((q - y) ** 2).mean())


class _GaussianField(torch.nn.Module):
    """The straight-path field from N(0, 1) to N(0, sd^2): ``v(z, t) = (sd - 1) z / (1 - t + t sd)``."""

    def __init__(self, sd: float) -> None:
        super().__init__()
        self.sd = sd

    def forward(self, z, t, obs, act):
        t = torch.as_tensor(t, dtype=z.dtype).reshape(-1, 1)
        return (self.sd - 1) * z / (1 - t + t * self.sd)


def test_value_flows_confidence_weights_come_from_the_target_field() -> None:
    # Value Flows computes w = sigmoid(-temp / |dz_1/deps|) + 1/2 with the *target* return field (reference code:
    # target_critic_flow), without gradient; an online critic that disagrees with its target must not change them
    cfg = CriticConfig(hidden=8, depth=1, ensemble=1, flow_steps=50)
    critic, target = FlowReturnCritic(1, 1, cfg), FlowReturnCritic(1, 1, cfg)
    critic.fields, target.fields = Ensemble([_GaussianField(0.05)]), Ensemble([_GaussianField(2.0)])
    obs = torch.zeros(32, 1, dtype=torch.float64)
    batch = {"observations": obs, "actions": obs, "next_observations": obs, "rewards": obs[:, 0], "masks": obs[:, 0]}
    _, m = critic.loss(batch, obs, target, 0.9, torch.Generator().manual_seed(0))
    torch.testing.assert_close(m["return_std"], torch.tensor(2.0, dtype=torch.float64), rtol=1e-6, atol=0)
    expected = torch.sigmoid(torch.tensor(-0.3 / 2.0, dtype=torch.float64)) + 0.5
    torch.testing.assert_close(m["confidence_weight"], expected, rtol=1e-6, atol=0)


def test_sac_deterministic_action_is_the_squashed_mean() -> None:
    agent = make_agent("sac", SPEC, SMALL)
    obs = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        agent.actor.net[-1].bias[:2].fill_(1.5)  # means beyond 1: tanh(mean), not a clamp of the mean
        mean = agent.actor(obs)[:, :2]
        assert (mean.abs() > 1).any()
        torch.testing.assert_close(agent.policy(obs, True), torch.tanh(mean))


@pytest.mark.parametrize("log_std", [-20.0, 10.0])
def test_sac_log_density_uses_the_bounded_log_std(log_std: float) -> None:
    # the Gaussian's log-std is clamped to [log_std_min, log_std_max] before sampling and in the density; checked
    # against torch.distributions' tanh-transformed Normal at the clamped std
    agent = make_agent("sac", SPEC, SMALL | {"log_std_min": -4.0, "log_std_max": 1.0})
    obs = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        agent.actor.net[-1].weight[2:].zero_()
        agent.actor.net[-1].bias[2:].fill_(log_std)
        state = agent.generator.get_state()
        a, logp = agent.sample(obs)
        agent.generator.set_state(state)
        mean = agent.actor(obs)[:, :2].double()
        std = math.exp(min(max(log_std, -4.0), 1.0))
        u = mean + std * agent.noise(6, 2).double()
        law = TransformedDistribution(Normal(mean, std), [TanhTransform()])
    torch.testing.assert_close(a.double(), torch.tanh(u), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logp.double(), law.log_prob(torch.tanh(u)).sum(-1), rtol=1e-4, atol=1e-4)
