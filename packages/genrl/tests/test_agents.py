"""The agent contract, shared by every agent: update, act, save/load; and the actor step's isolation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError
from genrl.agents import AGENTS, EnvSpec, load_agent, make_agent
from genrl.training import ReplayBuffer

SPEC = EnvSpec(obs_dim=3, action_dim=2, action_low=(-2.0, 0.0), action_high=(2.0, 1.0), reward_scale=0.5)
SMALL = {"hidden": 32, "depth": 2, "batch_size": 16}


def _batch(seed: int = 0, n: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low, high = torch.tensor(SPEC.action_low), torch.tensor(SPEC.action_high)
    return {
        "observations": torch.randn(n, 3, generator=g),
        "actions": low + (high - low) * torch.rand(n, 2, generator=g),
        "rewards": torch.randn(n, generator=g),
        "terminals": torch.rand(n, generator=g) < 0.2,
        "next_observations": torch.randn(n, 3, generator=g),
    }


@pytest.fixture(params=sorted(AGENTS))
def agent(request):
    return make_agent(request.param, SPEC, SMALL)


def test_update_returns_finite_metrics_and_changes_weights(agent) -> None:
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    for step in range(3):
        metrics = agent.update(_batch(step))
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


def test_save_load_round_trip(agent, tmp_path) -> None:
    agent.update(_batch())
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
    agent.update(_batch())
    state = g.get_state()
    assert agent.to("cpu").generator is g and agent.float().generator is g
    assert torch.equal(agent.generator.get_state(), state) and agent.device == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_agent_on_cuda_updates_acts_and_saves(agent, tmp_path) -> None:
    agent.update(_batch(1))  # optimiser state made on the CPU moves with the agent
    agent.to("cuda")
    assert agent.device.type == "cuda" and agent.generator.device.type == "cuda"
    metrics = agent.update(_batch())  # a CPU batch: update moves it
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
    b = agent.prepare(_batch())
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
    b = agent.prepare(_batch())
    agent.zero_grad(set_to_none=True)
    agent.bc_flow_loss = lambda obs, act: torch.zeros((), requires_grad=True)
    loss, _ = agent.actor_loss(b)
    loss.backward()
    bias_grad = agent.actor_onestep.body.net[-1].bias.grad
    assert bias_grad is not None and (bias_grad > 0).all()  # descent lowers the output towards [-1, 1]


def test_terminal_mask_and_reward_scale_in_prepare() -> None:
    agent = make_agent("fql", SPEC, SMALL)
    raw = _batch()
    b = agent.prepare(raw)
    torch.testing.assert_close(b["masks"], 1.0 - raw["terminals"].float())
    torch.testing.assert_close(b["rewards"], 0.5 * raw["rewards"])
    assert b["actions"].min() >= -1 and b["actions"].max() <= 1
    torch.testing.assert_close(agent.env_action(b["actions"]), raw["actions"])


def test_fql_critic_target_uses_discount_and_mask() -> None:
    agent = make_agent("fql", SPEC, {**SMALL, "discount": 0.9})
    b = agent.prepare(_batch())
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
