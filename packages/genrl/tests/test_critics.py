"""Distributional critics trained on the toy MDP move toward its analytic bimodal return law,
and the C51 projection is exact where it can be."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from gencore.errors import ConfigError
from genrl.critics import C51Critic, CriticConfig, IQNCritic, ScalarCritic
from genrl.toy_experiment import ToyCriticConfig, parse_solver, train_toy_critic

SMALL = {"hidden": 64, "batch_size": 128, "n_episodes": 500, "n_eval_samples": 400, "lr": 2e-3}


@pytest.mark.parametrize("name", ["c51", "iqn", "value-flows"])
def test_toy_critic_converges_toward_the_analytic_law(name: str) -> None:
    _, before = train_toy_critic(name, ToyCriticConfig(steps=0, **SMALL))
    _, after = train_toy_critic(name, ToyCriticConfig(steps=400, **SMALL))
    assert after["w1"] < 0.5 * before["w1"]
    assert after["w1"] < 0.25
    assert after["crps"] - after["crps_floor"] < 0.5 * (before["crps"] - before["crps_floor"])
    # the learned variance ranks states like the true variance (sample variance for Value Flows)
    assert after.get("var_corr_samples", after["var_corr"]) > 0.9


def test_c51_projection_keeps_mass_and_mean() -> None:
    cfg = CriticConfig(n_atoms=11, return_min=-5.0, return_max=5.0, ensemble=1)
    c = C51Critic(1, 1, cfg)
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(32, 11, generator=g), -1)
    r = torch.rand(32, generator=g) * 0.4 - 0.2
    factor = torch.full((32,), 0.9)
    m = c.project(r, factor, probs)
    torch.testing.assert_close(m.sum(-1), torch.ones(32))
    # no clipping happens here (|r + 0.9 z| <= 4.7 < 5), so the projection preserves the mean exactly
    torch.testing.assert_close((m * c.atoms).sum(-1), r + 0.9 * (probs * c.atoms).sum(-1))
    # a reward landing exactly on an atom with factor 0 puts all mass there
    m0 = c.project(torch.tensor([2.0]), torch.tensor([0.0]), probs[:1])
    torch.testing.assert_close(m0, torch.nn.functional.one_hot(torch.tensor([7]), 11).float())


@pytest.mark.parametrize(("lo", "hi", "n"), [(-5.0, 100.0, 51), (-50.0, 3.0, 101)])
def test_c51_projection_of_a_return_above_the_support_lands_on_the_last_atom(lo: float, hi: float, n: int) -> None:
    # (hi - lo) / ((hi - lo) / (n - 1)) rounds just above n - 1 for these ranges: the clipped return must still
    # go to the last atom (it raised an index error)
    c = C51Critic(1, 1, CriticConfig(n_atoms=n, return_min=lo, return_max=hi, ensemble=1))
    probs = torch.full((2, n), 1.0 / n)
    m = c.project(torch.tensor([hi + 1.0, lo - 1.0]), torch.zeros(2), probs)
    torch.testing.assert_close(m, torch.nn.functional.one_hot(torch.tensor([n - 1, 0]), n).float())


def test_learning_curve_scores_do_not_perturb_training_and_carry_the_floor() -> None:
    cfg = ToyCriticConfig(steps=30, **SMALL)
    _, full = train_toy_critic("c51", replace(cfg, eval_at=(0, 15, 30)))
    _, short = train_toy_critic("c51", replace(cfg, steps=15))
    assert [p["step"] for p in full["curve"]] == [0, 15, 30]
    # scoring after 15 updates and training on gives the same critic as never scoring
    assert full["curve"][1]["w1"] == short["w1"] and full["curve"][2]["w1"] == full["w1"]
    assert full["curve"][0]["w1"] > full["w1"]
    # the floor is the W1 of exact samples: it falls like 1 / sqrt(samples per state)
    _, more = train_toy_critic("c51", replace(cfg, steps=0, n_eval_samples=16 * SMALL["n_eval_samples"]))
    assert 0.15 < more["w1_floor"] / full["w1_floor"] < 0.4
    assert 0 < full["w1_floor"] < full["w1"]
    assert len(full["w1_by_steps_to_go"]) == 3


def test_flow_solver_specs_are_checked() -> None:
    assert parse_solver("midpoint:20") == ("midpoint", 20)
    for bad in ("euler", "euler:0", "leapfrog:10", "rk4:x"):
        with pytest.raises(ConfigError):
            parse_solver(bad)


def test_cosine_schedule_decays_the_learning_rate_after_the_first_update() -> None:
    cfg = ToyCriticConfig(steps=1, **SMALL)
    _, const1 = train_toy_critic("c51", cfg)
    _, cos1 = train_toy_critic("c51", replace(cfg, lr_schedule="cosine"))
    assert cos1["lr_schedule"] == "cosine" and const1["lr_schedule"] == "constant"
    assert cos1["w1"] == const1["w1"]  # the first update is taken at the full learning rate
    _, const2 = train_toy_critic("c51", replace(cfg, steps=2))
    _, cos2 = train_toy_critic("c51", replace(cfg, steps=2, lr_schedule="cosine"))
    assert cos2["w1"] != const2["w1"]  # the second at half of it
    with pytest.raises(ConfigError, match="schedule"):
        train_toy_critic("c51", replace(cfg, lr_schedule="linear"))


@pytest.mark.parametrize("name", ["iqn", "value-flows"])
def test_toy_critic_converges_on_the_random_transition_chain(name: str) -> None:
    cfg = ToyCriticConfig(steps=0, randomness="transition", **SMALL)
    _, before = train_toy_critic(name, cfg)
    _, after = train_toy_critic(name, replace(cfg, steps=400))
    assert after["randomness"] == "transition" and len(after["w1_by_steps_to_go"]) == 3
    assert after["w1"] < 0.5 * before["w1"]
    assert after["w1"] < 0.25
    with pytest.raises(ConfigError, match="randomness"):
        train_toy_critic(name, replace(cfg, randomness="action"))


def _transitions(b: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "observations": torch.randn(b, 2, generator=g),
        "actions": torch.randn(b, 1, generator=g),
        "rewards": 2 * torch.randn(b, generator=g),
        "masks": (torch.arange(b) % 3 != 0).float(),  # every third transition terminal
        "next_observations": torch.randn(b, 2, generator=g),
    }


def test_c51_loss_is_the_cross_entropy_to_the_projected_bellman_target_by_brute_force() -> None:
    cfg = CriticConfig(hidden=16, depth=1, ensemble=2, n_atoms=9, return_min=-4.0, return_max=4.0)
    critic, target = C51Critic(2, 1, cfg), C51Critic(2, 1, cfg)
    b, na = _transitions(), torch.randn(6, 1, generator=torch.Generator().manual_seed(1))
    loss, _ = critic.loss(b, na, target, 0.9)
    with torch.no_grad():
        p_next = target.probs(b["next_observations"], na).double()
        logp = critic.logits(b["observations"], b["actions"]).log_softmax(-1).double()
    z, dz = critic.atoms.double(), 1.0
    expected = 0.0
    for i in range(6):  # each next atom's mass split between the two atoms around its clipped image (a hat kernel)
        tz = (b["rewards"][i] + 0.9 * b["masks"][i] * z).clamp(-4.0, 4.0)
        m = (p_next[i, :, None] * (1 - (tz[:, None] - z[None]).abs() / dz).clamp_min(0)).sum(0)
        expected -= (m * logp[:, i]).sum() / (2 * 6)
    assert loss.item() == pytest.approx(float(expected), rel=1e-5)


def test_scalar_critic_loss_is_the_td_error_to_the_target_ensemble_mean_by_brute_force() -> None:
    cfg = CriticConfig(hidden=8, depth=1, ensemble=3)
    critic, target = ScalarCritic(2, 1, cfg), ScalarCritic(2, 1, cfg)
    b, na = _transitions(), torch.randn(6, 1, generator=torch.Generator().manual_seed(1))
    loss, _ = critic.loss(b, na, target, 0.9)
    expected = 0.0
    with torch.no_grad():
        for i in range(6):
            s2, a2 = b["next_observations"][i : i + 1], na[i : i + 1]
            q_next = sum(float(net(torch.cat([s2, a2], -1))) for net in target.nets) / 3  # target mean, not min
            y = float(b["rewards"][i]) + (0.0 if i % 3 == 0 else 0.9 * q_next)  # no bootstrap past a terminal
            s, a = b["observations"][i : i + 1], b["actions"][i : i + 1]
            expected += sum((float(net(torch.cat([s, a], -1))) - y) ** 2 for net in critic.nets) / (3 * 6)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_iqn_loss_is_the_quantile_huber_loss_by_brute_force() -> None:
    cfg = CriticConfig(hidden=8, depth=2, ensemble=2, n_quantiles=4, huber_kappa=0.7)
    critic, target = IQNCritic(2, 1, cfg), IQNCritic(2, 1, cfg)
    b, na = _transitions(3), torch.randn(3, 1, generator=torch.Generator().manual_seed(1))
    loss, _ = critic.loss(b, na, target, 0.9, torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(2)  # replay: target quantile fractions first, then the critic's
    tau_next, tau = torch.rand(3, 4, generator=g), torch.rand(3, 4, generator=g)
    with torch.no_grad():
        z_next = target.quantiles(b["next_observations"], na, tau_next).mean(0)
        z = critic.quantiles(b["observations"], b["actions"], tau)
    total = 0.0
    for k, i, j, jn in itertools.product(range(2), range(3), range(4), range(4)):
        u = float(b["rewards"][i] + 0.9 * b["masks"][i] * z_next[i, jn] - z[k, i, j])  # TD error
        huber = 0.5 * u * u if abs(u) <= 0.7 else 0.7 * (abs(u) - 0.35)
        # sum over the critic's fractions, mean over the target samples, members and transitions
        total += abs(float(tau[i, j]) - (u < 0)) * huber / 0.7 / (4 * 2 * 3)
    assert loss.item() == pytest.approx(total, rel=1e-5)


def test_iqn_q_is_the_midpoint_rule_over_quantile_fractions() -> None:
    critic = IQNCritic(2, 1, CriticConfig(hidden=8, depth=2, ensemble=2, n_quantiles=5))
    b = _transitions()
    with torch.no_grad():
        tau = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9]).expand(6, 5)
        expected = critic.quantiles(b["observations"], b["actions"], tau).mean((0, 2))
        torch.testing.assert_close(critic.q(b["observations"], b["actions"]), expected)


def test_critic_variance_of_c51_is_the_variance_of_its_atom_law() -> None:
    """The C51 read-out is the centred second moment of the predicted categorical law (a law with a non-zero mean,
    so that the raw second moment differs)."""
    from genrl.toy_experiment import critic_variance

    critic = C51Critic(2, 1, CriticConfig(n_atoms=5, return_min=-1.0, return_max=3.0, ensemble=1))
    obs, act = torch.randn(3, 2, generator=torch.Generator().manual_seed(0)), torch.zeros(3, 1)
    p = critic.probs(obs, act).detach().double()
    atoms = critic.atoms.double()
    mean = (p * atoms).sum(-1)
    expected = (p * atoms.square()).sum(-1) - mean.square()
    assert mean.abs().min() > 0.1
    with torch.no_grad():  # as the scoring calls it
        got = critic_variance(critic, obs, act, torch.Generator().manual_seed(0))
    assert torch.allclose(torch.as_tensor(got, dtype=torch.float64), expected, atol=1e-5)


def test_eval_states_show_both_modes_of_the_last_transition() -> None:
    """With random transitions the evaluation states carry ``w = -m(c), +m(c)`` alternately at the last position
    (both modes of the drawn reward), and 0 elsewhere."""
    from genrl.toy_experiment import eval_states

    chain = ToyCriticConfig(randomness="transition").chain()
    s = eval_states(chain)
    assert s.shape == (8 * chain.length, 3)
    last = s[:, 0] == 1.0
    w, c = s[last, 2], s[last, 1]
    assert (s[~last, 2] == 0).all()
    assert torch.allclose(torch.from_numpy(abs(w)), torch.from_numpy(chain.mode_offset(c)).float())
    assert (w[0::2] < 0).all() and (w[1::2] > 0).all()


def test_exact_field_scores_count_each_solvers_field_evaluations() -> None:
    """``nfe`` is steps times the solver's evaluations per step (Euler 1, midpoint and Heun 2, RK4 4)."""
    from genrl.toy_experiment import score_exact_field

    cfg = ToyCriticConfig(n_eval_samples=20, flow_solvers=("midpoint:3", "heun:2", "rk4:2"))
    scores = score_exact_field(cfg)
    assert {k: v["nfe"] for k, v in scores.items() if k != next(iter(scores))} == {
        "midpoint:3": 6,
        "heun:2": 4,
        "rk4:2": 8,
    }
    first = next(iter(scores))
    assert first.startswith("euler:") and scores[first]["nfe"] == int(first.split(":")[1])
