"""The agent contract, shared by every agent: update, act, save/load; and the actor step's isolation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import SMALL, SPEC, small_batch

from gencore.errors import ConfigError, InputError
from genrl.agents import AGENTS, EnvSpec, load_agent, make_agent
from genrl.training import ReplayBuffer


@pytest.fixture(params=sorted(AGENTS))
def agent(request):
    return make_agent(request.param, SPEC, SMALL)


def test_update_returns_finite_metrics_and_changes_weights(agent) -> None:
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    for step in range(3):
        metrics = agent.update(small_batch(step))
        assert metrics and all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    changed = [k for k, v in agent.state_dict().items() if not torch.equal(v, before[k])]
    assert changed and agent.steps == 3


def test_act_respects_shapes_and_bounds(agent) -> None:
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    for deterministic in (True, False):
        a = agent.act(obs, deterministic=deterministic)
        assert a.shape == (5, 2)
        assert (a >= np.array(SPEC.action_low) - 1e-6).all() and (a <= np.array(SPEC.action_high) + 1e-6).all()
    assert agent.act(obs[0], deterministic=True).shape == (2,)
    assert isinstance(agent.nfe_per_decision, int) and agent.nfe_per_decision >= 1


def test_act_refuses_observations_that_are_not_finite(agent) -> None:
    # before: NaN observations gave NaN actions, and the environment failed far from the cause
    obs = np.zeros((2, 3), dtype=np.float32)
    for bad in (np.nan, np.inf):
        obs[1, 2] = bad
        with pytest.raises(InputError, match="act\\(\\) needs finite observations"):
            agent.act(obs)


def test_save_load_round_trip(agent, tmp_path) -> None:
    agent.update(small_batch())
    agent.save(tmp_path / "a")
    back = load_agent(tmp_path / "a")
    assert type(back) is type(agent) and back.config == agent.config and back.spec == agent.spec
    for k, v in agent.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k
    obs = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    agent.generator.manual_seed(7)
    back.generator.manual_seed(7)
    np.testing.assert_array_equal(agent.act(obs, True), back.act(obs, True))
    assert not any(p.suffix == ".pt" or p.suffix == ".pkl" for p in (tmp_path / "a").iterdir())


def test_moving_within_a_device_type_keeps_the_random_stream(agent) -> None:
    g = agent.generator
    agent.update(small_batch())
    state = g.get_state()
    assert agent.to("cpu").generator is g and agent.float().generator is g
    assert torch.equal(agent.generator.get_state(), state) and agent.device == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_agent_on_cuda_updates_acts_and_saves(agent, tmp_path) -> None:
    agent.update(small_batch(1))  # optimiser state made on the CPU moves with the agent
    agent.to("cuda")
    assert agent.device.type == "cuda" and agent.generator.device.type == "cuda"
    metrics = agent.update(small_batch())  # a CPU batch: update moves it
    assert all(math.isfinite(v) for v in metrics.values())
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    a = agent.act(obs, deterministic=False)
    assert isinstance(a, np.ndarray) and a.shape == (5, 2)
    agent.save(tmp_path / "a")
    back = load_agent(tmp_path / "a")
    assert back.device.type == "cpu"
    for k, v in agent.state_dict().items():
        assert torch.equal(v.cpu(), back.state_dict()[k]), k


@pytest.mark.parametrize("name", ["fql", "c51", "iqn", "value-flows"])
def test_actor_step_freezes_critic_and_detaches_teacher(name: str) -> None:
    agent = make_agent(name, SPEC, SMALL)
    b = agent.prepare(small_batch())
    agent.zero_grad(set_to_none=True)
    loss, _ = agent.actor_loss(b)
    loss.backward()
    assert all(p.grad is None for p in agent.critic.parameters())  # critic frozen in the actor step
    assert all(p.requires_grad for p in agent.critic.parameters())  # ...and unfrozen afterwards
    assert any(p.grad is not None for p in agent.actor_onestep.parameters())
    # without the BC term, no gradient reaches the BC flow: the distillation teacher is detached
    agent.zero_grad(set_to_none=True)
    agent.bc_flow_loss = lambda obs, act: torch.zeros((), requires_grad=True)
    loss, _ = agent.actor_loss(b)
    loss.backward()
    assert all(p.grad is None for p in agent.actor_flow.parameters())


@pytest.mark.parametrize("name", ["fql", "value-flows"])
def test_distillation_pulls_back_a_one_step_output_beyond_the_bounds(name: str) -> None:
    # FQL distils the one-step policy's *unclipped* output (Park et al.'s code clips only for Q): an output
    # beyond [-1, 1] must still be pulled towards the teacher, not be stuck behind a clamp with zero gradient
    agent = make_agent(name, SPEC, SMALL)
    with torch.no_grad():
        agent.actor_onestep.body.net[-1].bias.fill_(5.0)
    b = agent.prepare(small_batch())
    agent.zero_grad(set_to_none=True)
    agent.bc_flow_loss = lambda obs, act: torch.zeros((), requires_grad=True)
    loss, _ = agent.actor_loss(b)
    loss.backward()
    bias_grad = agent.actor_onestep.body.net[-1].bias.grad
    assert bias_grad is not None and (bias_grad > 0).all()  # descent lowers the output towards [-1, 1]


def test_terminal_mask_and_reward_scale_in_prepare() -> None:
    agent = make_agent("fql", SPEC, SMALL)
    raw = small_batch()
    b = agent.prepare(raw)
    torch.testing.assert_close(b["masks"], 1.0 - raw["terminals"].float())
    torch.testing.assert_close(b["rewards"], 0.5 * raw["rewards"])
    assert b["actions"].min() >= -1 and b["actions"].max() <= 1
    torch.testing.assert_close(agent.env_action(b["actions"]), raw["actions"])


def test_fql_critic_target_uses_discount_and_mask() -> None:
    agent = make_agent("fql", SPEC, {**SMALL, "discount": 0.9})
    b = agent.prepare(small_batch())
    na = agent.next_actions(b["next_observations"])
    with torch.no_grad():
        expected = b["rewards"] + 0.9 * b["masks"] * agent.target_critic.q(b["next_observations"], na)
        q = agent.critic.all_q(b["observations"], b["actions"])
    loss, _ = agent.critic.loss(b, na, agent.target_critic, 0.9)
    torch.testing.assert_close(loss, ((q - expected[None]) ** 2).mean())


def test_value_flows_extraction_switch() -> None:
    agent = make_agent("value-flows", SPEC, SMALL)
    assert agent.nfe_per_decision == agent.config.flow_steps + 1
    agent.use_extraction("one-step")
    assert agent.nfe_per_decision == 1 and agent.config.extraction == "one-step"
    obs = torch.zeros(2, 3)
    torch.testing.assert_close(agent.policy(obs, True), agent.onestep_actions(obs, torch.zeros(2, 2)))


@pytest.mark.parametrize("name", ["fql", "iqn", "value-flows"])
def test_best_of_n_acts_with_the_candidate_of_largest_q(name: str) -> None:
    agent = make_agent(name, SPEC, SMALL | {"n_candidates": 5})
    agent.use_extraction("best-of-n")
    assert agent.nfe_per_decision == agent.config.flow_steps + 1
    obs = torch.randn(3, 3, generator=torch.Generator().manual_seed(0))
    state = agent.generator.get_state()
    chosen = agent.policy(obs, True)
    agent.generator.set_state(state)  # replay the same draws by hand
    obs_n = obs.repeat_interleave(5, 0)
    with torch.no_grad():
        cand = agent.flow_actions(obs_n, agent.noise(15, 2)).reshape(3, 5, 2)
        q = agent.q_value(agent.critic, obs_n, cand.reshape(15, 2)).reshape(3, 5)
    assert (q.argmax(1) != 0).any()  # the check below would not catch "always the first candidate" otherwise
    torch.testing.assert_close(chosen, cand[torch.arange(3), q.argmax(1)])


def test_fql_extraction_is_one_step_by_default_and_checked() -> None:
    agent = make_agent("fql", SPEC, SMALL)
    assert agent.config.extraction == "one-step" and agent.nfe_per_decision == 1
    with pytest.raises(ConfigError, match="extraction"):
        make_agent("fql", SPEC, SMALL | {"extraction": "best-of-all"})


def test_replay_buffer_wraps_and_samples(toy_dataset) -> None:
    buf = ReplayBuffer.from_dataset(toy_dataset, extra_capacity=2)
    assert buf.size == len(toy_dataset)
    for _ in range(5):
        buf.add(np.ones(2), np.ones(1), 1.0, False, np.ones(2))
    assert buf.size == buf.capacity == len(toy_dataset) + 2
    s = buf.sample(8, torch.Generator().manual_seed(0))
    assert s["observations"].shape == (8, 2) and s["terminals"].dtype == torch.bool


def test_iqn_agent_passes_its_huber_threshold_to_the_critic() -> None:
    """The agent config had no huber_kappa, so `genrl train --agent iqn` always used the critic's default 1."""
    agent = make_agent("iqn", SPEC, SMALL | {"huber_kappa": 0.25})
    assert agent.critic.cfg.huber_kappa == 0.25 and agent.target_critic.cfg.huber_kappa == 0.25
    assert make_agent("iqn", SPEC, SMALL).critic.cfg.huber_kappa == 1.0
    with pytest.raises(ConfigError, match="huber_kappa"):
        make_agent("iqn", SPEC, SMALL | {"huber_kappa": 0.0})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rewards", torch.zeros(16, 1)),  # a reward column was broadcast against [B] values inside the losses
        ("terminals", torch.zeros(16, 1, dtype=torch.bool)),
        ("rewards", torch.zeros(15)),
        ("observations", torch.zeros(16, 4)),
        ("next_observations", torch.zeros(16, 2)),
        ("actions", torch.zeros(16, 3)),
    ],
)
def test_update_refuses_a_batch_field_of_the_wrong_shape(key: str, value: torch.Tensor) -> None:
    # flow-bc never reads rewards or terminals: a malformed batch used to train it without a word
    for name in ("flow-bc", "fql"):
        agent = make_agent(name, SPEC, SMALL)
        with pytest.raises(InputError, match=f"'{key}' must have shape"):
            agent.update({**small_batch(), key: value})
    # observations may keep their own shape as long as they flatten to obs_dim
    agent = make_agent("fql", EnvSpec(obs_dim=6, action_dim=2, action_low=(-1.0, -1.0), action_high=(1.0, 1.0)), SMALL)
    batch = small_batch()
    batch["observations"] = batch["next_observations"] = torch.randn(16, 2, 3)
    assert math.isfinite(agent.update(batch)["critic_loss"])


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"action_low": (-1.0,)}, "'action_low' must have action_dim = 2 entries"),
        ({"action_high": (1.0, 1.0, 1.0)}, "'action_high' must have action_dim = 2 entries"),
        ({"action_low": (1.0, -1.0)}, "'action_low' must be finite and below 'action_high'"),
        ({"action_high": (float("inf"), 1.0)}, "'action_low' must be finite"),
        ({"obs_mean": (0.0,)}, "'obs_mean' must have obs_dim = 3 entries"),
        ({"obs_std": (1.0, 0.0, 1.0)}, "'obs_std' must be finite and positive"),
        ({"reward_scale": 0.0}, "'reward_scale' must be finite and positive"),
        ({"obs_dim": 0}, "'obs_dim' must be a positive integer"),
    ],
)
def test_env_spec_refuses_bounds_and_statistics_that_do_not_fit(fields: dict, match: str) -> None:
    # a one-entry bound used to be broadcast over every action dimension, and low > high flipped the actions
    base = {"obs_dim": 3, "action_dim": 2, "action_low": (-1.0, -1.0), "action_high": (1.0, 1.0)}
    with pytest.raises(InputError, match=match):
        EnvSpec(**{**base, **fields})


class _ExactBCField(torch.nn.Module):
    """The minimiser of the BC flow loss when each observation has one action ``x``: ``v(a, t) = (x - a) / (1 - t)``
    (on the linear path ``a_t = (1 - t) a_0 + t x`` it equals ``x - a_0`` exactly)."""

    def __init__(self, x: torch.Tensor) -> None:
        super().__init__()
        self.x = x

    def forward(self, a_t: torch.Tensor, t: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return (self.x - a_t) / (1 - torch.as_tensor(t).reshape(-1, 1))


def test_bc_flow_loss_vanishes_at_the_exact_field_and_its_flow_lands_on_the_action() -> None:
    agent = make_agent("flow-bc", SPEC, SMALL)
    b = agent.prepare(small_batch())
    x = b["actions"]
    agent.actor_flow = _ExactBCField(x)
    assert agent.bc_flow_loss(b["observations"], x) < 1e-9
    # the same field integrated from any noise with Euler steps from t = 0 to 1 reaches x at the last step
    a0 = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(agent.flow_actions(b["observations"], a0), x)
    agent.actor_flow = _ExactBCField(torch.zeros_like(x))  # its regression target is -a_0, not x - a_0
    assert agent.bc_flow_loss(b["observations"], x) > 0.1


def test_deterministic_flow_bc_starts_from_zero_noise() -> None:
    agent = make_agent("flow-bc", SPEC, SMALL)
    obs = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    first, second = agent.policy(obs, True), agent.policy(obs, True)
    torch.testing.assert_close(first, second)
    torch.testing.assert_close(first, agent.flow_actions(obs, torch.zeros(4, 2)))
    assert not torch.allclose(agent.policy(obs, False), first)


def test_fql_critic_support_is_the_scaled_return_range() -> None:
    for name in ("fql", "c51", "value-flows"):
        cfg = make_agent(name, SPEC, SMALL | {"discount": 0.8}).critic.cfg
        assert (cfg.return_min, cfg.return_max) == pytest.approx((-5.0, 5.0))  # |r| <= 1: |Z| <= 1 / (1 - 0.8)


@pytest.mark.parametrize("name", ["fql", "c51", "iqn", "value-flows"])
def test_fql_actor_loss_is_bc_plus_alpha_distillation_minus_normalised_q(name: str) -> None:
    agent = make_agent(name, SPEC, SMALL | {"alpha": 3.0})
    b = agent.prepare(small_batch())
    obs = b["observations"]
    state = agent.generator.get_state()
    loss, metrics = agent.actor_loss(b)
    agent.generator.set_state(state)  # replay the draws by hand
    with torch.no_grad():
        bc = agent.bc_flow_loss(obs, b["actions"])
        eps = agent.noise(16, 2)
        distill = ((agent.actor_onestep(obs, eps) - agent.flow_actions(obs, eps)) ** 2).mean()
        q = agent.q_value(agent.critic, obs, agent.onestep_actions(obs, eps))
    torch.testing.assert_close(metrics["bc_flow_loss"], bc)
    torch.testing.assert_close(metrics["distill_loss"], distill)
    torch.testing.assert_close(metrics["q_loss"], -q.mean() / q.abs().mean())
    torch.testing.assert_close(loss.detach(), bc + 3.0 * distill - q.mean() / q.abs().mean())


def test_fql_q_term_is_scale_free_and_rewards_a_larger_q() -> None:
    agent = make_agent("fql", SPEC, SMALL)
    b = agent.prepare(small_batch())
    head = [net.net[-1] for net in agent.critic.nets]
    with torch.no_grad():
        for lin in head:
            lin.bias.fill_(50.0)  # every Q positive: -mean(Q) / mean|Q| = -1, whatever the scale
    state = agent.generator.get_state()
    _, m1 = agent.actor_loss(b)
    with torch.no_grad():
        for lin in head:
            lin.weight.mul_(10.0)
            lin.bias.mul_(10.0)
    agent.generator.set_state(state)
    _, m10 = agent.actor_loss(b)
    torch.testing.assert_close(m1["q_loss"], torch.tensor(-1.0))
    torch.testing.assert_close(m10["q_loss"], torch.tensor(-1.0))


@pytest.mark.parametrize("name", ["fql", "c51", "iqn", "value-flows", "sac"])
def test_target_critic_is_a_polyak_average_of_the_updated_critic(name: str) -> None:
    agent = make_agent(name, SPEC, SMALL | {"tau": 0.3})
    with torch.no_grad():  # a target that differs from the critic, as after some training
        for p in agent.target_critic.parameters():
            p.add_(0.1)
    old = [p.clone() for p in agent.target_critic.parameters()]
    agent.update(small_batch())
    for p_old, p_new, p_src in zip(old, agent.target_critic.parameters(), agent.critic.parameters()):
        torch.testing.assert_close(p_new, 0.3 * p_src + 0.7 * p_old)


@pytest.mark.parametrize("name", ["fql", "c51", "iqn", "value-flows"])
def test_critic_step_bootstraps_from_the_target_critic_at_the_next_observations(name: str) -> None:
    agent = make_agent(name, SPEC, SMALL | {"discount": 0.9})
    with torch.no_grad():
        for p in agent.target_critic.parameters():
            p.add_(0.1)
    raw = small_batch()
    b = agent.prepare(raw)
    state = agent.generator.get_state()
    with torch.no_grad():
        na = agent.next_actions(b["next_observations"])
        expected, _ = agent.critic.loss(b, na, agent.target_critic, 0.9, agent.generator)
    agent.generator.set_state(state)
    metrics = agent.update(raw)
    assert metrics["critic_loss"] == pytest.approx(float(expected), rel=1e-5)


def test_value_flows_bootstraps_from_best_of_n_actions_in_best_of_n_mode() -> None:
    agent = make_agent("value-flows", SPEC, SMALL | {"target_candidates": 3})
    assert (agent.critic.cfg.flow_steps, agent.critic.cfg.confidence_temp) == (10, 0.3)
    nobs = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    for extraction in ("best-of-n", "one-step"):
        agent.use_extraction(extraction)
        state = agent.generator.get_state()
        na = agent.next_actions(nobs)
        agent.generator.set_state(state)
        if extraction == "best-of-n":
            expected = agent.best_of_n(nobs, 3)
        else:
            expected = agent.onestep_actions(nobs, agent.noise(5, 2))
        torch.testing.assert_close(na, expected)
    agent = make_agent("value-flows", SPEC, SMALL | {"critic_flow_steps": 4, "confidence_temp": 0.7})
    assert (agent.critic.cfg.flow_steps, agent.critic.cfg.confidence_temp) == (4, 0.7)
    assert agent.target_critic.cfg.flow_steps == 4


def test_sac_log_density_matches_the_tanh_squashed_gaussian_numerically() -> None:
    agent = make_agent("sac", SPEC, SMALL)
    obs = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        agent.actor.net[-1].bias[2:].fill_(-0.7)  # log-std away from 0, where a dropped log_std would not show
        a, logp = agent.sample(obs)
        mean, log_std = agent.actor(obs).double().chunk(2, -1)
    # density of a = tanh(u), u ~ N(mean, std^2): the derivative of P(A <= a) = Phi((atanh a - mean) / std)
    a, h = a.double(), 1e-6

    def cdf(x: torch.Tensor) -> torch.Tensor:
        return torch.special.ndtr((torch.atanh(x) - mean) / log_std.exp())

    density = (cdf(a + h) - cdf(a - h)) / (2 * h)
    torch.testing.assert_close(logp.double(), density.log().sum(-1), rtol=1e-4, atol=1e-4)


def test_sac_update_follows_the_soft_bellman_target_and_the_temperature_rule() -> None:
    agent = make_agent("sac", SPEC, SMALL | {"discount": 0.9, "init_temperature": 0.5})
    with torch.no_grad():
        for p in agent.target_critic.parameters():  # twin targets that disagree, so min != max != mean
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    raw = small_batch()
    b = agent.prepare(raw)
    log_alpha = agent.log_alpha.item()
    state = agent.generator.get_state()
    with torch.no_grad():
        a2, logp2 = agent.sample(b["next_observations"])
        a, logp = agent.sample(b["observations"])
        soft_v = agent.target_critic.all_q(b["next_observations"], a2).min(0).values - 0.5 * logp2
        y = b["rewards"] + 0.9 * b["masks"] * soft_v
        critic_loss = ((agent.critic.all_q(b["observations"], b["actions"]) - y) ** 2).mean()
    agent.generator.set_state(state)
    metrics = agent.update(raw)
    assert metrics["critic_loss"] == pytest.approx(float(critic_loss), rel=1e-5)
    with torch.no_grad():  # the actor step sees the critic after its own step
        actor_loss = (0.5 * logp - agent.critic.all_q(b["observations"], a).min(0).values).mean()
    assert metrics["actor_loss"] == pytest.approx(float(actor_loss), rel=1e-5)
    # the temperature falls when the policy's entropy -log pi exceeds the target -action_dim, and rises below it;
    # here |E log pi| < action_dim, so the sign of target entropy matters. Adam's first step is lr * sign(grad)
    assert abs(logp.mean().item()) < SPEC.action_dim
    step = agent.log_alpha.item() - log_alpha
    assert step == pytest.approx(agent.config.lr * math.copysign(1.0, logp.mean().item() - SPEC.action_dim), rel=1e-3)
