"""The toy MDP's analytic return law, and the distribution-error metrics."""

from __future__ import annotations

import numpy as np

from genrl.toy_mdp import BimodalChain, cdf_errors


def test_analytic_law_matches_monte_carlo_returns() -> None:
    chain = BimodalChain(length=3, sigma=0.1, discount=0.9)
    ds = chain.dataset(4000, seed=1)
    start = ds.episode_starts
    # discounted return from each episode's first state, with the convention Z = r + discount * (1 - term) * Z'
    disc = chain.discount ** np.arange(chain.length)
    mc = np.stack([ds.rewards[s : s + chain.length] for s in start]) @ disc
    obs = ds.observations[start]
    mu, s = chain.return_law(obs)
    np.testing.assert_allclose(s, 0.81 * 0.1)
    np.testing.assert_allclose(mu, 0.81 * (0.5 + obs[:, 1]), rtol=1e-6)
    # probability integral transform of the Monte-Carlo returns under the analytic CDF is uniform
    u = np.array([chain.return_cdf(o[None], np.array([[z]]))[0, 0] for o, z in zip(obs, mc)])
    hist = np.histogram(u, bins=10, range=(0, 1))[0] / len(u)
    assert np.abs(hist - 0.1).max() < 0.025
    np.testing.assert_allclose(chain.return_variance(obs).mean(), (mc**2).mean(), rtol=0.05)


def test_law_is_bimodal_and_scaled_by_steps_to_go() -> None:
    chain = BimodalChain()
    obs = chain.observation(np.array([0, 2]), np.array([0.5, 0.5]))
    mu, _ = chain.return_law(obs)
    np.testing.assert_allclose(mu, [0.81, 1.0])
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
