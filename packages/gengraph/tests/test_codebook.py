"""The hyperbolic VQ codebook: k-means initialisation, Frechet-mean EMA updates on the ball, dead-code restart."""

from __future__ import annotations

import pytest
import torch

from gengraph.hyperbolic import BallGeometry, EuclideanGeometry
from gengraph.models.codebook import ManifoldCodebook


def _points(n: int = 200, scale: float = 2.0, seed: int = 0) -> tuple[BallGeometry, torch.Tensor]:
    g = BallGeometry(3)
    gen = torch.Generator().manual_seed(seed)
    return g, g.expmap0(torch.randn(n, 3, generator=gen) * scale)


def test_frechet_mean_is_stationary() -> None:
    g = BallGeometry(3).double()
    x = g.expmap0(torch.randn(30, 3, dtype=torch.float64))
    w = torch.rand(1, 30, dtype=torch.float64)
    mu = g.frechet_mean(x, w, x[:1], iters=60)
    grad = (w[0, :, None] * g.manifold.logmap(mu.expand(30, -1), x)).sum(0)
    assert float(grad.norm()) < 1e-8
    e = EuclideanGeometry(3).double()
    torch.testing.assert_close(e.frechet_mean(x, w, x[:1]), (w @ x) / w.sum())


def test_kmeans_init_and_updates_stay_on_the_ball() -> None:
    g, z = _points(scale=6.0)  # most points hug the float32 boundary
    cb = ManifoldCodebook(g, 16, decay=0.5)
    gen = torch.Generator().manual_seed(0)
    cb.update(z, gen)
    assert bool(cb.initialised) and (cb.codes.norm(dim=-1) < 1).all()
    for s in range(20):
        _, z = _points(scale=6.0, seed=s + 1)
        cb.update(z, gen)
        assert torch.isfinite(cb.codes).all() and (cb.codes.norm(dim=-1) < 1).all()
    zq, idx, commit = cb(z)
    torch.testing.assert_close(zq, cb.codes[idx], rtol=1e-4, atol=1e-4)  # straight-through forward = the code
    assert (commit >= 0).all()


def test_ema_step_moves_a_code_along_the_geodesic() -> None:
    g = BallGeometry(2).double()
    cb = ManifoldCodebook(g, 1, decay=0.75).double()
    cb.codes.copy_(torch.tensor([[0.5, 0.0]]))
    cb.initialised.fill_(True)
    target = torch.tensor([[-0.3, 0.6]], dtype=torch.float64)
    before = g.manifold.dist(cb.codes[0], target[0])
    cb.ema_update(target, torch.zeros(1, dtype=torch.long))
    after = g.manifold.dist(cb.codes[0], target[0])
    moved = g.manifold.dist(torch.tensor([0.5, 0.0], dtype=torch.float64), cb.codes[0])
    torch.testing.assert_close(after, 0.75 * before)
    torch.testing.assert_close(moved, 0.25 * before)


def test_dead_codes_restart_on_batch_latents() -> None:
    g, z = _points()
    z = z[z[:, 2] < 0]  # the lower half of the ball
    cb = ManifoldCodebook(g, 8, decay=0.5, dead_threshold=0.5)
    cb.codes.copy_(z[:8])
    cb.codes[3] = torch.tensor([0.0, 0.0, 0.99])  # near the top of the boundary: no point is nearest to it
    cb.initialised.fill_(True)
    unused = cb.codes[3].clone()
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        cb.update(z, gen)
        if not torch.equal(cb.codes[3], unused):
            break
    else:
        pytest.fail("the unused code was never restarted")
    # on the step it dies, the code is put on one of the batch latents (later EMA steps move it to its cluster's mean)
    assert float(torch.cdist(cb.codes[3:4], g.projx(z)).min()) < 1e-6
    assert float(cb.usage[3]) == pytest.approx(1 / 8)


@pytest.mark.parametrize("kind", ["ball", "euclidean"])
def test_cluster_means_equal_the_dense_frechet_means(kind: str) -> None:
    """The per-point cluster means (what the codebook uses) are ``frechet_mean`` with one-hot weights, empty
    clusters included (they return ``init``)."""
    g = (BallGeometry(3) if kind == "ball" else EuclideanGeometry(3)).double()
    gen = torch.Generator().manual_seed(0)
    x = g.expmap0(torch.randn(60, 3, generator=gen, dtype=torch.float64) * 1.5)
    assign = torch.randint(0, 4, (60,), generator=gen)  # cluster 4 of 5 stays empty
    init = g.expmap0(torch.randn(5, 3, generator=gen, dtype=torch.float64))
    onehot = torch.nn.functional.one_hot(assign, 5).T.to(torch.float64)
    dense = g.frechet_mean(x, onehot, init)
    torch.testing.assert_close(g.cluster_means(x, assign, 5, init), dense, atol=1e-10, rtol=0)
    torch.testing.assert_close(dense[4], init[4])


def _two_rank_updates(split: int) -> dict[str, torch.Tensor]:
    """On each rank: its share of the points updates the codebook twice; generators differ between ranks."""
    from gencore.train import setup, teardown

    info = setup("cpu")
    try:
        g, z = _points(40, seed=3)
        cb = ManifoldCodebook(g, 6, decay=0.5, dead_threshold=0.9)  # a high threshold: restarts happen
        gen = torch.Generator().manual_seed(100 + info.rank)
        mine = z[:split] if info.rank == 0 else z[split:]
        for _ in range(2):
            cb.update(mine, gen)
        return {"codes": cb.codes.clone(), "usage": cb.usage.clone()}
    finally:
        teardown(info)


@pytest.mark.distributed
def test_ddp_updates_see_every_ranks_latents_and_keep_one_codebook() -> None:
    from gencore.train import launch

    two = launch(_two_rank_updates, 17, nproc=2)  # ranks hold 17 and 23 latents
    g, z = _points(40, seed=3)
    one = ManifoldCodebook(g, 6, decay=0.5, dead_threshold=0.9)
    gen = torch.Generator().manual_seed(100)  # rank 0's stream: its result is the one broadcast
    for _ in range(2):
        one.update(z, gen)
    for rank in (0, 1):
        assert torch.equal(two[rank]["codes"], one.codes) and torch.equal(two[rank]["usage"], one.usage)


def test_decay_outside_the_unit_interval_is_refused() -> None:
    """With ``decay = 1.5`` the EMA step ``geodesic(e, mu, 1 - decay)`` moved each code *away* from its cluster's
    Frechet mean, silently; the codebook and GGBall's config now refuse it."""
    from gencore.errors import ConfigError
    from gengraph.models.ggball import GGBallConfig

    g, z = _points(40)
    book = ManifoldCodebook(g, 4, decay=0.5)
    book.kmeans_init(z, torch.Generator().manual_seed(0))
    before = book.codes.clone()
    assign = book.assign(z)
    means = g.cluster_means(z, assign, 4, before)
    book.ema_update(z, assign)
    moved = assign.unique()
    assert (g.manifold.dist(book.codes[moved], means[moved]) <= g.manifold.dist(before[moved], means[moved])).all()
    for bad in (1.5, 1.0, -0.1):
        with pytest.raises(ConfigError, match="decay"):
            ManifoldCodebook(g, 4, decay=bad)
        with pytest.raises(ConfigError, match="codebook_decay"):
            GGBallConfig(codebook_decay=bad).validate()
    with pytest.raises(ConfigError, match="size"):
        ManifoldCodebook(g, 0)
    with pytest.raises(ConfigError, match="laplacian_pe"):
        GGBallConfig(laplacian_pe=-1).validate()


def test_quantiser_uses_the_geodesic_nearest_code_commitment_and_tangent_straight_through() -> None:
    """Against brute force on the ball: each latent goes to the code of least ``manifold.dist`` (the Euclidean
    nearest code differs for most of these latents), the commitment is that distance squared with its gradient
    reaching ``z`` only, and the straight-through output is the code with the gradient
    ``J_log0(z)^T J_exp0(log_0 e)^T`` (the tangent straight-through of the module docstring)."""
    g = BallGeometry(3).double()
    gen = torch.Generator().manual_seed(0)
    cb = ManifoldCodebook(g, 16).double()
    cb.codes.copy_(g.expmap0(1.5 * torch.randn(16, 3, generator=gen, dtype=torch.float64)))
    z = g.expmap0(1.5 * torch.randn(60, 3, generator=gen, dtype=torch.float64)).requires_grad_()
    zq, idx, commit = cb(z)
    dist = g.manifold.dist(z.detach()[:, None].expand(-1, 16, -1), cb.codes[None].expand(60, -1, -1))
    assert torch.equal(idx, dist.argmin(1))
    assert (torch.cdist(z.detach(), cb.codes).argmin(1) != idx).float().mean() > 0.3  # the test can tell them apart
    torch.testing.assert_close(commit, dist[torch.arange(60), idx] ** 2)
    torch.testing.assert_close(zq, cb.codes[idx])
    assert not cb.codes.requires_grad
    i, w = 7, torch.tensor([0.3, -1.2, 0.8], dtype=torch.float64)
    e = cb.codes[idx[i]]
    (grad,) = torch.autograd.grad(commit[i], z, retain_graph=True)
    x = z.detach()[i].clone().requires_grad_()
    (expected,) = torch.autograd.grad(g.manifold.dist(x, e) ** 2, x)
    torch.testing.assert_close(grad[i], expected)
    (grad,) = torch.autograd.grad((zq[i] * w).sum(), z)
    j_exp = torch.autograd.functional.jacobian(g.expmap0, g.logmap0(e))
    j_log = torch.autograd.functional.jacobian(g.logmap0, z.detach()[i])
    torch.testing.assert_close(grad[i], j_log.T @ j_exp.T @ w)
    assert grad[torch.arange(60) != i].abs().max() == 0


def test_kmeans_init_puts_one_code_on_the_frechet_mean_of_each_separated_cluster() -> None:
    """Four tight clusters (geodesic radius ~0.35), far apart and placed without symmetry on the ball: k-means++
    seeding with squared geodesic distances puts one seed in each, and the Lloyd iterations move each code onto
    its cluster's Frechet mean (a long Karcher iteration as the oracle). Assigning to the farthest code, seeding
    uniformly (two seeds in one cluster) or skipping the Lloyd iterations leaves a code off its cluster's mean."""
    g = BallGeometry(2).double()
    gen = torch.Generator().manual_seed(0)
    directions = torch.tensor([[2.5, 0.0], [-1.2, 1.6], [0.4, -2.2], [-2.0, -1.0]], dtype=torch.float64)
    centres = g.expmap0(directions)
    clusters = []
    for c in centres:  # Euclidean offsets of ~0.3 / lambda_c: ~0.3 in geodesic distance
        u = 0.3 * torch.randn(25, 2, generator=gen, dtype=torch.float64) / g.lambda_x(c)
        clusters.append(g.manifold.expmap(c.expand(25, -1), u))
    z = torch.cat(clusters)
    ones = torch.ones(1, 25, dtype=torch.float64)
    means = torch.stack([g.frechet_mean(x, ones, x[:1], iters=100)[0] for x in clusters])
    cb = ManifoldCodebook(g, 4).double()
    cb.kmeans_init(z, torch.Generator().manual_seed(1))
    nearest = g.pairwise_dist(means, cb.codes).argmin(-1)
    assert sorted(nearest.tolist()) == [0, 1, 2, 3]  # one code per cluster
    assert float(g.manifold.dist(cb.codes[nearest], means).max()) < 1e-6
    assert torch.equal(cb.assign(z), nearest.repeat_interleave(25))


def test_usage_is_an_ema_of_the_code_shares_and_dead_codes_fall_below_the_threshold_share() -> None:
    """``usage <- decay usage + (1 - decay) counts / M``, and a code dies when its usage falls below
    ``dead_threshold / K``: with K = 4, decay 0.5 and threshold 0.3 (0.075), two unused codes go 0.25 -> 0.125
    (alive, untouched) -> 0.0625 (restarted at a batch latent, usage back to 1 / K)."""
    g = BallGeometry(2).double()
    cb = ManifoldCodebook(g, 4, decay=0.5, dead_threshold=0.3).double()
    cb.codes.copy_(torch.tensor([[0.2, 0.0], [-0.2, 0.0], [0.0, 0.9], [0.0, -0.9]], dtype=torch.float64))
    cb.initialised.fill_(True)
    z = torch.tensor([[0.21, 0.0], [0.19, 0.01], [0.2, -0.01], [-0.2, 0.0]], dtype=torch.float64)
    assign = torch.tensor([0, 0, 0, 1])
    far = cb.codes[2:].clone()
    cb.ema_update(z, assign, torch.Generator().manual_seed(0))
    torch.testing.assert_close(cb.usage, torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64))
    assert torch.equal(cb.codes[2:], far)
    cb.ema_update(z, assign, torch.Generator().manual_seed(0))
    torch.testing.assert_close(cb.usage, torch.tensor([0.625, 0.25, 0.25, 0.25], dtype=torch.float64))
    assert float(torch.cdist(cb.codes[2:], z).min(-1).values.max()) < 1e-12


def test_usage_shares_are_divided_by_the_batch_size_not_the_codebook_size() -> None:
    """``counts / M`` with ``M`` (6 latents) unequal to ``K`` (2 codes): from uniform usage, decay 0.5 gives
    ``0.5 * 0.5 + 0.5 * 4 / 6`` and ``0.5 * 0.5 + 0.5 * 2 / 6``, a distribution again."""
    g = BallGeometry(2).double()
    cb = ManifoldCodebook(g, 2, decay=0.5, dead_threshold=0.0).double()
    cb.codes.copy_(torch.tensor([[0.3, 0.0], [-0.3, 0.0]], dtype=torch.float64))
    cb.initialised.fill_(True)
    z = torch.tensor([[0.3, 0.01], [0.29, 0.0], [0.31, 0.0], [0.3, -0.01], [-0.3, 0.0], [-0.29, 0.0]])
    cb.ema_update(z.double(), torch.tensor([0, 0, 0, 0, 1, 1]))
    torch.testing.assert_close(cb.usage, torch.tensor([0.25 + 2 / 6, 0.25 + 1 / 6], dtype=torch.float64))
