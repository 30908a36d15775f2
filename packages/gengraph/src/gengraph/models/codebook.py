"""A vector-quantisation codebook on the Poincare ball (or in flat space for the ablation).

GGBall's hyperbolic codebook ("GGBall: Graph Generative Model on Poincare Ball", ICLR 2026;
VQ-VAE: van den Oord et al. 2017; EMA codebooks: Razavi et al. 2019):

- quantisation: each latent goes to its nearest code in geodesic distance;
- initialisation: Riemannian k-means on the first training batch (k-means++ seeding with geodesic distances,
  Lloyd iterations whose centre update is the Frechet mean of the cluster);
- update: an exponential moving average *on the manifold*. With ``mu_k`` the Frechet mean of the latents
  assigned to code ``k`` in this batch, the code moves along the geodesic towards it,
  ``e_k <- exp_{e_k}((1 - decay) log_{e_k}(mu_k))``, i.e. to the weighted Frechet mean of the old code
  (weight ``decay``) and ``mu_k`` (weight ``1 - decay``); codes therefore never leave the ball;
- dead codes: a code whose EMA usage falls below ``dead_threshold`` times the uniform share is restarted at a
  random latent of the batch;
- straight-through gradients in the tangent space at the origin: ``z_q = exp_0(log_0 z + sg(log_0 e - log_0 z))``.

In a multi-process run (DDP) every update sees the latents of all ranks (``all_gather_rows``) and rank 0's
result is broadcast, so the replicas keep one codebook, fitted to the global batch.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.errors import ConfigError
from gencore.train import all_gather_rows, broadcast_state
from gengraph.hyperbolic.geometry import Geometry

__all__ = ["ManifoldCodebook"]


class ManifoldCodebook(nn.Module):
    """``size`` codes of width ``geometry.dim``; buffers ``codes [K, d]``, ``usage [K]``, ``initialised``."""

    def __init__(
        self, geometry: Geometry, size: int, *, decay: float = 0.9, dead_threshold: float = 0.03, kmeans_iters: int = 10
    ) -> None:
        super().__init__()
        if size < 1:
            raise ConfigError(f"the codebook size must be a positive integer, got {size}.")
        if not 0 <= decay < 1:  # a decay above 1 moves each code away from its cluster's mean
            raise ConfigError(f"the codebook decay must lie in [0, 1), got {decay}.")
        self.__dict__["geometry"] = geometry  # shared, not a submodule: the owner registers it once
        self.size, self.decay, self.dead_threshold, self.kmeans_iters = size, decay, dead_threshold, kmeans_iters
        self.register_buffer("codes", torch.zeros(size, geometry.dim))
        self.register_buffer("usage", torch.full((size,), 1.0 / size))
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))

    def distances(self, z: torch.Tensor) -> torch.Tensor:
        """``[M, K]`` geodesic distances from latents ``z: [M, d]`` to the codes."""
        return self.geometry.pairwise_dist(z, self.codes.to(z.dtype))

    def assign(self, z: torch.Tensor) -> torch.Tensor:
        return self.distances(z).argmin(-1)

    @torch.no_grad()
    def kmeans_init(self, z: torch.Tensor, generator: torch.Generator | None = None) -> None:
        """Riemannian k-means++ and Lloyd iterations on the latents ``z: [M, d]``."""
        g = self.geometry
        m = z.shape[0]
        idx = [int(torch.randint(m, (1,), generator=generator, device=z.device))]
        d2 = g.pairwise_dist(z, z[idx]).square().min(-1).values
        for _ in range(1, self.size):
            w = d2 + 1e-12
            nxt = int(torch.multinomial(w / w.sum(), 1, generator=generator))
            idx.append(nxt)
            d2 = torch.minimum(d2, g.pairwise_dist(z, z[nxt : nxt + 1])[:, 0].square())
        codes = z[idx].clone()
        for _ in range(self.kmeans_iters):
            codes = g.cluster_means(z, g.pairwise_dist(z, codes).argmin(-1), self.size, codes)
        self.codes.copy_(g.projx(codes))
        self.usage.fill_(1.0 / self.size)
        self.initialised.fill_(True)

    @torch.no_grad()
    def ema_update(self, z: torch.Tensor, assign: torch.Tensor, generator: torch.Generator | None = None) -> None:
        """Move each used code along the geodesic towards its batch Frechet mean; restart dead codes."""
        g = self.geometry
        counts = torch.bincount(assign, minlength=self.size).to(z.dtype)
        means = g.cluster_means(z, assign, self.size, self.codes.to(z.dtype))
        moved = g.geodesic(self.codes.to(z.dtype), means, 1 - self.decay)
        self.codes.copy_(torch.where(counts[:, None] > 0, moved, self.codes.to(z.dtype)))
        self.usage.mul_(self.decay).add_((1 - self.decay) * counts / counts.sum().clamp_min(1))
        dead = self.usage < self.dead_threshold / self.size
        n_dead = int(dead.sum())
        if n_dead:
            pick = torch.randint(z.shape[0], (n_dead,), generator=generator, device=z.device)
            self.codes[dead] = g.projx(z[pick])
            self.usage[dead] = 1.0 / self.size

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(z_q straight-through [M, d], code index [M], commitment d(z, sg e)^2 [M])`` for ``z: [M, d]``."""
        g = self.geometry
        idx = self.assign(z.detach())
        e = self.codes[idx].to(z.dtype)
        commit = g.manifold.sq_dist(z, e)
        uz = g.logmap0(z)
        zq = g.expmap0(uz + (g.logmap0(e) - uz).detach())
        return zq, idx, commit

    @torch.no_grad()
    def update(self, z: torch.Tensor, generator: torch.Generator | None = None) -> None:
        """One training update from the latents ``z: [M, d]``: k-means initialisation on the first call, then the
        Frechet-mean EMA and dead-code restart."""
        z = all_gather_rows(z)
        if not bool(self.initialised):
            self.kmeans_init(z, generator)
        self.ema_update(z, self.assign(z), generator)
        broadcast_state(self)  # the ranks' generators differ (k-means seeding, dead-code restarts): keep rank 0's
