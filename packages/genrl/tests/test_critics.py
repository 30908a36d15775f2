"""Distributional critics trained on the toy MDP move toward its analytic bimodal return law,
and the C51 projection is exact where it can be."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gencore.errors import ConfigError
from genrl.critics import C51Critic, CriticConfig
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
