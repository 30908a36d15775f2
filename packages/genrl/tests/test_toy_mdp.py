"""The toy MDP's analytic return law, and the distribution-error metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.solvers import solve_ode
from genrl.toy_mdp import RANDOMNESS, BimodalChain, ExactReturnField, cdf_errors


@pytest.mark.parametrize("randomness", RANDOMNESS)
def test_analytic_law_matches_monte_carlo_returns(randomness: str) -> None:
    chain = BimodalChain(length=3, sigma=0.1, discount=0.9, randomness=randomness)
    ds = chain.dataset(4000, seed=1)
    start = ds.episode_starts
    # discounted return from each episode's first state, with the convention Z = r + discount * (1 - term) * Z'
    disc = chain.discount ** np.arange(chain.length)
    mc = np.stack([ds.rewards[s : s + chain.length] for s in start]) @ disc
    obs = ds.observations[start]
    centres, s = chain.return_modes(obs)
    np.testing.assert_allclose(s, 0.81 * 0.1)
    np.testing.assert_allclose(centres, 0.81 * (0.5 + obs[:, 1:2]) * [-1, 1], rtol=1e-6)
    # probability integral transform of the Monte-Carlo returns under the analytic CDF is uniform
    u = np.array([chain.return_cdf(o[None], np.array([[z]]))[0, 0] for o, z in zip(obs, mc)])
    hist = np.histogram(u, bins=10, range=(0, 1))[0] / len(u)
    assert np.abs(hist - 0.1).max() < 0.025
    np.testing.assert_allclose(chain.return_variance(obs).mean(), (mc**2).mean(), rtol=0.05)


def test_law_is_bimodal_and_scaled_by_steps_to_go() -> None:
    chain = BimodalChain()
    obs = chain.observation(np.array([0, 2]), np.array([0.5, 0.5]))
    centres, _ = chain.return_modes(obs)
    np.testing.assert_allclose(centres[:, 1], [0.81, 1.0])
    z = np.linspace(-2, 2, 4001)[None].repeat(2, 0)
    density = np.gradient(chain.return_cdf(obs, z), z[0], axis=1)
    centre = density[:, 2000]  # at z = 0, between the modes
    assert (density.max(1) > 50 * centre).all()


def test_cdf_errors_on_exact_and_shifted_samples() -> None:
    chain = BimodalChain()
    rng = np.random.default_rng(0)
    obs = chain.observation(np.array([0, 1, 2]), np.array([0.1, 0.5, 0.9]))
    grid = np.linspace(-3, 3, 6001)
    cdf = chain.return_cdf(obs, np.broadcast_to(grid, (3, grid.size)))
    exact = cdf_errors(chain.sample_returns(obs, 20000, rng), cdf, grid)
    assert exact["w1"] < 0.02
    assert abs(exact["crps"] - exact["crps_floor"]) < 1e-3
    shifted = cdf_errors(chain.sample_returns(obs, 20000, rng) + 0.3, cdf, grid)
    assert abs(shifted["w1"] - 0.3) < 0.02  # W1 of a translation is the shift
    assert shifted["crps"] > exact["crps"] + 0.01


def test_random_transition_moves_the_draw_from_the_reward_to_the_state() -> None:
    rw, tr = BimodalChain(), BimodalChain(randomness="transition")
    a, b = rw.dataset(200, seed=4), tr.dataset(200, seed=4)
    # the same draws: equal rewards, actions and first two observation entries
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.observations, b.observations[:, :2])
    last = b.terminals
    # the last reward is shown by the state it is paid in, and by the transition into it; 0 everywhere before
    np.testing.assert_array_equal(b.observations[last, 2], b.rewards[last])
    np.testing.assert_array_equal(b.next_observations[np.roll(last, -1), 2], b.rewards[last])
    assert (b.observations[~last, 2] == 0).all()
    # every state before the last has the reward variant's law; the last state's return is the point mass at w
    c_rw, s_rw = rw.return_modes(a.observations[~last])
    c_tr, s_tr = tr.return_modes(b.observations[~last])
    np.testing.assert_array_equal(c_rw, c_tr)
    np.testing.assert_array_equal(s_rw, s_tr)
    obs_last = b.observations[last]
    centres, sd = tr.return_modes(obs_last)
    np.testing.assert_array_equal(centres, np.repeat(obs_last[:, 2:3], 2, 1))
    assert (sd == 0).all() and (tr.return_variance(obs_last) == 0).all()
    z = obs_last[:, 2:3] + np.array([[-1e-9, 0.0]])
    np.testing.assert_array_equal(tr.return_cdf(obs_last, z), np.broadcast_to([0.0, 1.0], z.shape))
    np.testing.assert_array_equal(tr.sample_returns(obs_last, 5, np.random.default_rng(0)), np.repeat(z[:, 1:], 5, 1))


def test_exact_field_of_the_random_transition_chain_flows_to_its_law() -> None:
    chain = BimodalChain(randomness="transition")
    obs = torch.from_numpy(chain.observation(np.array([2, 2, 1]), np.array([0.2, 0.7, 0.5]), np.array([0.6, -1.3, 0])))
    eps = torch.randn(3, 4000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    field = ExactReturnField(chain)
    o = obs.repeat_interleave(4000, 0)

    def flow(method: str, steps: int) -> np.ndarray:
        return solve_ode(lambda z, t: field(z, t, o, None), eps.reshape(-1, 1), steps=steps, method=method).x

    # the point masses are reached exactly by Euler (the field (w - z) / (1 - t) lands on w at the last step)
    z = flow("euler", 10).reshape(3, -1).numpy()
    np.testing.assert_allclose(z[:2], np.broadcast_to([[0.6], [-1.3]], (2, 4000)), atol=1e-12)
    # before the last state the flow is the quantile map F^-1(Phi(eps)) of the reward variant's mixture law
    grid = np.linspace(-2, 2, 400001)
    cdf = BimodalChain().return_cdf(obs.numpy()[2:, :2], grid[None])[0]
    quantile_map = np.interp(0.5 * (1 + torch.erf(eps[2] / 2**0.5)).numpy(), cdf, grid)
    rk4 = flow("rk4", 20).reshape(3, -1).numpy()
    assert np.abs(rk4[2] - quantile_map).mean() < 2e-3
    assert np.isfinite(rk4).all()  # rk4 evaluates the point masses' singular field at t = 1 too


def test_unknown_randomness_and_a_too_short_chain_are_refused() -> None:
    with pytest.raises(ConfigError, match="randomness"):
        BimodalChain(randomness="action")
    with pytest.raises(ConfigError, match="length"):
        BimodalChain(length=1, randomness="transition")


def test_a_negative_sigma_and_an_empty_chain_are_refused() -> None:
    # sigma < 0 made return_cdf a point mass while sample_returns drew a Gaussian of sd |sigma|
    with pytest.raises(ConfigError, match="sigma"):
        BimodalChain(sigma=-0.1)
    with pytest.raises(ConfigError, match="length"):
        BimodalChain(length=0)


def test_cdf_errors_refuses_mismatched_shapes_and_a_bad_grid() -> None:
    chain = BimodalChain()
    obs = chain.observation(np.array([0, 1, 2]), np.array([0.1, 0.5, 0.9]))
    grid = np.linspace(-3, 3, 601)
    cdf = chain.return_cdf(obs, np.broadcast_to(grid, (3, grid.size)))
    samples = chain.sample_returns(obs, 100, np.random.default_rng(0))
    # one state's samples used to be broadcast silently against all three states' CDFs
    with pytest.raises(InputError, match="cdf_true must have shape"):
        cdf_errors(samples[:1], cdf, grid)
    with pytest.raises(InputError, match="samples must have shape"):
        cdf_errors(samples[0], cdf, grid)
    with pytest.raises(InputError, match="grid"):
        cdf_errors(samples, cdf[:, ::-1], grid[::-1])


def test_cdf_errors_count_samples_beyond_the_grid() -> None:
    """Samples outside the grid used to be dropped: a shift by 3 on the +-2.5 grid the toy scores use read as a W1
    of 2.29 (and a CRPS short by 0.34). W1 against SciPy's on a large sample of the law; the Cramer distance
    ``crps - crps_floor`` against ``int (F_model - F)^2`` on a grid wide enough to hold every sample."""
    from scipy.stats import wasserstein_distance

    chain = BimodalChain()
    rng = np.random.default_rng(0)
    obs = chain.observation(np.array([0, 1, 2]), np.array([0.1, 0.5, 0.9]))
    grid = np.linspace(-2.5, 2.5, 2001)
    cdf = chain.return_cdf(obs, np.broadcast_to(grid, (3, grid.size)))
    samples = chain.sample_returns(obs, 4000, rng) + np.array([[3.0], [-3.5], [0.2]])
    samples[2, :40] = 6.0  # a few outliers far above the grid
    law = chain.sample_returns(obs, 400_000, rng)
    w1_scipy = np.mean([wasserstein_distance(s, x) for s, x in zip(samples, law)])
    wide = np.linspace(-12.0, 12.0, 48_001)
    f_true = chain.return_cdf(obs, np.broadcast_to(wide, (3, wide.size)))
    f_model = np.stack([np.searchsorted(np.sort(s), wide, side="right") / s.size for s in samples])
    cramer = np.trapezoid((f_model - f_true) ** 2, wide, axis=1).mean()
    got = cdf_errors(samples, cdf, grid)
    assert got["w1"] == pytest.approx(w1_scipy, abs=5e-3)
    assert got["crps"] - got["crps_floor"] == pytest.approx(cramer, abs=2e-3)
