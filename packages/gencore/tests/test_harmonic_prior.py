"""The harmonic prior (gencore.paths.harmonic): covariance, analytic distances, padding, errors."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.paths import harmonic_noise, harmonic_noise_transform

D = torch.float64


PATH6 = [(i, i + 1) for i in range(5)]
CYCLE5 = [(i, (i + 1) % 5) for i in range(5)]
TREE7 = [(0, 1), (0, 2), (1, 3), (1, 4), (2, 5), (2, 6)]  # binary tree of depth 2
K4 = [(i, j) for i in range(4) for j in range(i + 1, 4)]


def nodes(edges: list[tuple[int, int]]) -> int:
    return 1 + max(max(e) for e in edges)


def adjacency_of(edges: list[tuple[int, int]], n: int | None = None) -> torch.Tensor:
    n = n or nodes(edges)
    a = torch.zeros(n, n, dtype=D)
    for i, j in edges:
        a[i, j] = a[j, i] = 1.0
    return a


def centring(n: int) -> torch.Tensor:
    return torch.eye(n, dtype=D) - torch.full((n, n), 1.0 / n, dtype=D)


@pytest.mark.parametrize("graph", [PATH6, CYCLE5, TREE7, K4])
@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_centred_covariance_is_the_pseudo_inverse_of_the_scaled_laplacian(graph, alpha):
    n = nodes(graph)
    adj = adjacency_of(graph)
    a = harmonic_noise_transform(adj[None], torch.ones(1, n), alpha=alpha)[0]
    lap = torch.diag(adj.sum(1)) - adj
    c = centring(n)
    torch.testing.assert_close(c @ a @ a.T @ c, torch.linalg.pinv(alpha * lap), atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(a, a.T)  # the symmetric square root


def test_squared_distances_follow_the_effective_resistance():
    """E|x_i - x_j|^2 = d R_ij / alpha: on a path R_ij = |i - j| (sampled, within 4 standard errors)."""
    n, alpha, dim, draws = 7, 2.0, 3, 20_000
    adj = adjacency_of([(i, i + 1) for i in range(n - 1)])[None].expand(draws, n, n)
    x = harmonic_noise(adj, torch.ones(draws, n), dim, alpha=alpha, generator=torch.Generator().manual_seed(0))
    for i, j in [(0, 1), (2, 3), (0, 3), (1, 6)]:
        sq = (x[:, i] - x[:, j]).pow(2).sum(-1)
        expected = dim * abs(i - j) / alpha
        # |x_i - x_j|^2 is (expected / d) times a chi-square with d degrees of freedom: sd = expected sqrt(2 / d)
        se = expected * (2 / dim) ** 0.5 / draws**0.5
        assert abs(sq.mean().item() - expected) < 4 * se


def test_free_directions_get_the_free_variance():
    """Two components: each component's mean has variance free_std^2 / n_c per coordinate, the
    within-component part follows its own Laplacian."""
    g = [(0, 1), (1, 2), (3, 4)]  # a 3-path and a 2-path
    free = 3.0
    a = harmonic_noise_transform(adjacency_of(g)[None], torch.ones(1, 5), alpha=1.0, free_std=free)[0]
    cov = a @ a.T
    ones3 = torch.tensor([1, 1, 1, 0, 0], dtype=D) / 3
    ones2 = torch.tensor([0, 0, 0, 1, 1], dtype=D) / 2
    torch.testing.assert_close(ones3 @ cov @ ones3, torch.tensor(free**2 / 3, dtype=D))
    torch.testing.assert_close(ones2 @ cov @ ones2, torch.tensor(free**2 / 2, dtype=D))
    torch.testing.assert_close(ones3 @ cov @ ones2, torch.tensor(0.0, dtype=D), atol=1e-12, rtol=0)
    diff = torch.tensor([0, 0, 0, 1, -1], dtype=D)
    torch.testing.assert_close(diff @ cov @ diff, torch.tensor(1.0, dtype=D))  # one bond: R = 1


def test_padding_leaves_the_real_points_unchanged():
    g = TREE7
    n = nodes(g)
    small = harmonic_noise_transform(adjacency_of(g)[None], torch.ones(1, n), alpha=1.5)[0]
    adj = adjacency_of(g, n + 3)
    adj[n, n + 1] = adj[n + 1, n] = 1.0  # edges to padded points are ignored
    adj[0, n + 2] = adj[n + 2, 0] = 1.0
    mask = torch.cat([torch.ones(n), torch.zeros(3)])[None]
    big = harmonic_noise_transform(adj[None], mask, alpha=1.5)[0]
    torch.testing.assert_close(big[:n, :n], small)
    assert big[n:].abs().max() == 0 and big[:, n:].abs().max() == 0


def test_rejects_bad_input():
    adj = torch.zeros(1, 3, 3)
    with pytest.raises(ConfigError, match="alpha"):
        harmonic_noise_transform(adj, torch.ones(1, 3), alpha=0.0)
    with pytest.raises(InputError, match="mask"):
        harmonic_noise_transform(adj, torch.ones(1, 4))
    with pytest.raises(InputError, match=r"\[B, N, N\]"):
        harmonic_noise_transform(torch.zeros(3, 3), torch.ones(3))
    with pytest.raises(InputError, match="non-negative"):
        harmonic_noise_transform(-torch.ones(1, 3, 3), torch.ones(1, 3))


def test_same_generator_same_noise_and_default_dtype():
    adj = adjacency_of([(0, 1), (1, 2), (2, 3)]).float()[None]
    x1 = harmonic_noise(adj, torch.ones(1, 4), generator=torch.Generator().manual_seed(3))
    x2 = harmonic_noise(adj, torch.ones(1, 4), generator=torch.Generator().manual_seed(3))
    assert x1.dtype == torch.float32 and x1.shape == (1, 4, 3)
    torch.testing.assert_close(x1, x2)


def test_rejects_non_finite_settings_and_weights_and_bad_dim():
    adj = adjacency_of(PATH6)[None]
    mask = torch.ones(1, 6)
    for kwargs in ({"alpha": float("inf")}, {"free_std": float("inf")}, {"alpha": float("nan")}):
        with pytest.raises(ConfigError, match="finite"):
            harmonic_noise_transform(adj, mask, **kwargs)
    bad = adj.clone()
    bad[0, 2, 3] = float("nan")
    with pytest.raises(InputError, match="finite"):
        harmonic_noise_transform(bad, mask)  # was a LinAlgError from eigh
    for dim in (0, -1, 2.5):
        with pytest.raises(ConfigError, match="dim"):
            harmonic_noise(adj, mask, dim)  # was an empty draw or a RuntimeError


def test_one_sided_edges_are_symmetrised_and_self_loops_ignored():
    """The documented symmetrisation: an upper-triangular edge list (each bond once, weight 1) is the graph with
    weight 1/2 on each bond, and the diagonal does not enter the Laplacian."""
    n, alpha = nodes(TREE7), 1.5
    full = adjacency_of(TREE7)
    one_sided = torch.triu(full) + 4.0 * torch.eye(n, dtype=D)
    a = harmonic_noise_transform(one_sided[None], torch.ones(1, n), alpha=alpha)[0]
    lap = torch.diag(full.sum(1)) - full
    c = centring(n)
    torch.testing.assert_close(c @ a @ a.T @ c, torch.linalg.pinv(0.5 * alpha * lap), atol=1e-10, rtol=1e-8)
