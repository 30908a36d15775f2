"""The agents' units on a spec with observation statistics (the shared SPEC has none, so a learner that skipped
the standardisation passed every other test), the acting flag and critic, and the Value Flows loss weights,
each against a computation by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import SMALL, small_batch

from gencore.errors import InputError
from genrl.agents import AGENTS, EnvSpec, load_agent, make_agent
from genrl.dataset import OfflineDataset
from genrl.value_flow_critic import bcfm_target, dcfm_target

STATS = EnvSpec(
    obs_dim=3,
    action_dim=2,
    action_low=(-2.0, 0.0),
    action_high=(2.0, 1.0),
    obs_mean=(1.0, -2.0, 0.5),
    obs_std=(0.5, 3.0, 2.0),
    reward_scale=0.25,
)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_update_standardises_observations_and_next_observations_as_act_does(name: str) -> None:
    agent = make_agent(name, STATS, SMALL)
    raw = small_batch()
    b = agent.prepare(raw)
    mean, std = np.asarray(STATS.obs_mean, np.float32), np.asarray(STATS.obs_std, np.float32)
    for key in ("observations", "next_observations"):
        np.testing.assert_allclose(b[key].numpy(), (raw[key].numpy() - mean) / std, rtol=1e-6, atol=1e-6)
    # act feeds the policy the very same numbers for the same raw observations
    seen = []
    original = agent.policy
    agent.policy = lambda o, deterministic: seen.append(o.clone()) or original(o, deterministic)
    agent.act(raw["observations"].numpy())
    torch.testing.assert_close(seen[-1], b["observations"])


def test_a_loaded_agent_keeps_the_statistics_in_its_spec_and_acts_as_the_saved_one(tmp_path) -> None:
    agent = make_agent("fql", STATS, SMALL)
    agent.update(small_batch())
    agent.save(tmp_path / "a")
    back = load_agent(tmp_path / "a")
    assert back.spec == STATS
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    agent.generator.manual_seed(3)
    back.generator.manual_seed(3)
    np.testing.assert_array_equal(back.act(obs, deterministic=False), agent.act(obs, deterministic=False))


def test_reward_scale_from_a_data_set_is_one_over_the_largest_absolute_reward() -> None:
    def spec_for(rewards: list[float]) -> EnvSpec:
        n = len(rewards)
        obs = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
        ds = OfflineDataset(
            observations=obs,
            actions=np.zeros((n, 1)),
            rewards=np.asarray(rewards),
            terminals=np.arange(n) == n - 1,
            truncations=np.zeros(n, bool),
            next_observations=obs + 1,
            episode_starts=[0],
        )
        return EnvSpec.from_dataset(ds, {})

    assert spec_for([0.5, -4.0, 2.0]).reward_scale == pytest.approx(0.25)  # the largest |r| is a negative one
    assert spec_for([0.0, 0.0, 0.0]).reward_scale == 1.0  # no reward at all: nothing to scale


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_act_draws_its_noise_when_not_deterministic_and_repeats_itself_with_the_same_seed(name: str) -> None:
    agent = make_agent(name, STATS, SMALL)
    obs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    agent.generator.manual_seed(11)
    first = agent.act(obs, deterministic=False)
    agent.generator.manual_seed(11)
    np.testing.assert_array_equal(agent.act(obs, deterministic=False), first)
    # the same draws by hand: env units of the stochastic policy at the standardised observations
    agent.generator.manual_seed(11)
    with torch.no_grad():
        by_hand = agent.env_action(agent.policy(agent.norm_obs(torch.from_numpy(obs)), False)).numpy()
    np.testing.assert_array_equal(first, by_hand)
    if name != "value-flows":  # best-of-n draws its candidates even when deterministic
        assert not np.allclose(first, agent.act(obs, deterministic=True))


@pytest.mark.parametrize("name", ["fql", "iqn", "value-flows"])
def test_best_of_n_scores_its_candidates_with_the_online_critic_not_the_target(name: str) -> None:
    agent = make_agent(name, STATS, SMALL | {"n_candidates": 6})
    agent.use_extraction("best-of-n")
    agent.update(small_batch())
    with torch.no_grad():  # a target far from the critic: choosing by it would pick other candidates
        for p in agent.target_critic.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    obs = torch.randn(4, 3, generator=torch.Generator().manual_seed(2))
    state = agent.generator.get_state()
    chosen = agent.policy(obs, True)
    agent.generator.set_state(state)
    obs_n = obs.repeat_interleave(6, 0)
    with torch.no_grad():
        cand = agent.flow_actions(obs_n, agent.noise(24, 2))
        q = agent.q_value(agent.critic, obs_n, cand).reshape(4, 6)
        agent.generator.set_state(state)
        agent.noise(24, 2)
        q_target = agent.q_value(agent.target_critic, obs_n, cand).reshape(4, 6)
    assert (q.argmax(1) != q_target.argmax(1)).any()  # otherwise the check below could not tell them apart
    torch.testing.assert_close(chosen, cand.reshape(4, 6, 2)[torch.arange(4), q.argmax(1)])


@pytest.mark.parametrize(("bcfm_weight", "dcfm_weight"), [(1.0, 0.0), (0.0, 1.0), (0.3, 2.0)])
def test_value_flows_critic_loss_weights_each_flow_matching_term_by_its_own_setting(
    bcfm_weight: float, dcfm_weight: float
) -> None:
    agent = make_agent("value-flows", STATS, SMALL | {"bcfm_weight": bcfm_weight, "dcfm_weight": dcfm_weight})
    critic, target = agent.critic, agent.target_critic
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.05)
    b = agent.prepare(small_batch())
    na = agent.next_actions(b["next_observations"])
    g = torch.Generator().manual_seed(4)
    loss, _ = critic.loss(b, na, target, 0.9, g)
    g.manual_seed(4)  # the same draws by hand, in the loss's order: Jacobian noise, eps, t
    obs, act, nobs = b["observations"], b["actions"], b["next_observations"]
    r, gm = b["rewards"][:, None], 0.9 * b["masks"][:, None]
    with torch.no_grad():
        _, jac = target.flow(torch.randn(16, 1, generator=g), obs, act, jacobian=True)
        w = torch.sigmoid(-0.3 / jac.abs().squeeze(-1)) + 0.5
        eps, t = torch.randn(16, 1, generator=g), torch.rand(16, 1, generator=g)
        terms = []
        for target_fn in (bcfm_target, dcfm_target):
            z, u = target_fn(target, r, gm, eps, t, nobs, na)
            terms.append(((critic.fields(z, t.squeeze(-1), obs, act) - u[None]) ** 2).sum(0).squeeze(-1))
    expected = (w * (bcfm_weight * terms[0] + dcfm_weight * terms[1])).mean()
    torch.testing.assert_close(loss.detach(), expected)


def test_actions_beyond_the_box_are_clipped_to_its_bounds_both_ways() -> None:
    # data actions a rounding error outside the Box (check_action_bounds lets them through) and policy outputs
    # beyond [-1, 1] must land on the bounds, not outside them
    agent = make_agent("flow-bc", STATS, SMALL)
    outside = torch.tensor([[2.0 + 1e-6, -1e-6], [-2.5, 1.5]])
    torch.testing.assert_close(agent.norm_action(outside), torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
    torch.testing.assert_close(agent.env_action(torch.tensor([[3.0, -3.0]])), torch.tensor([[2.0, 0.0]]))


@pytest.mark.parametrize("name", ["flow-bc", "fql", "sac"])
def test_update_refuses_an_empty_batch_in_one_sentence(name: str) -> None:
    agent = make_agent(name, STATS, SMALL)
    with pytest.raises(InputError, match="at least one transition"):
        agent.update({k: v[:0] for k, v in small_batch().items()})
