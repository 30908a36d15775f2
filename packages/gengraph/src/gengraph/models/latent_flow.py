"""A Riemannian flow-matching prior over sets of latent nodes (GGBall's generative stage).

Each graph's quantised node latents ``x1: [N, d]`` on the ball are one sample of a set-valued variable. The
prior transports ``N`` independent draws of the manifold's base distribution (a wrapped normal at the origin)
to it along geodesics (Chen & Lipman 2024, "Flow Matching on General Geometries"), composing gencore:
:func:`gencore.manifolds.geodesic_interpolant` gives the closed-form geodesic ``x_t`` and target velocity
``u_t`` per node, the loss is the metric norm ``|v - u_t|^2_{x_t}`` (as :func:`gencore.manifolds.rfm_loss`,
averaged over real nodes only), and sampling integrates with :func:`gencore.manifolds.solve_manifold_ode`.

Centring: the flow runs on the latents moved by the isometry ``x -> (-mu) (+) x`` (Mobius translation on the
ball, ``x - mu`` in flat space), ``mu`` the Frechet mean of the training latents (:meth:`SetVelocity.fit_centre`,
a buffer saved with the weights); samples are moved back by ``mu (+) y``. Equivalently the base distribution is
the wrapped normal at ``mu``. The isometry changes nothing geometric, but the network reads the latents in the
chart at the origin, and GGBall's encoders put all node latents in a small cluster far from the origin (on the
ball at distance ~4 for trees, where ``log_0`` compresses the cluster's sideways geodesic extent by
``r / sinh(r)``, so neighbouring codes differ by ~0.3 % of the input's norm): centred, the cluster fills the chart.

The velocity network :class:`SetVelocity` is a transformer over the nodes of a graph without positional
encodings, so the field is permutation-equivariant and the prior exchangeable; it reads ``log_0 x`` (tangent
coordinates; the identity in flat space) with a sinusoidal embedding of the per-graph time, and its output is
read in a metric-orthonormal frame (``Manifold.from_frame``) and projected to ``T_x``. Called as
``model(x_t [B, N, d], t [B], mask=mask [B, N])``.

Distance-biased attention (``distance_bias=True``, off by default). Dot-product attention does not see whether
two nodes are *close*, yet on tree ~76 % of the quantised training latents sit on a code shared with another node
of the same graph, while the default prior's samples have no two nodes closer than ~0.05. With the bias each
head adds ``-s_h(t) |log_0 x_i - log_0 x_j|^2`` to its attention logits (an RBF kernel in the centred chart; cf.
hyperbolic attention weighted by distance, Gulcehre et al. 2019, "Hyperbolic Attention Networks"), with
per-head scales ``s_h(t) = exp(a_h + w_h . emb(t))`` initialised log-spaced from 1 to 1e4, so some heads see the
whole set and others only a node's nearest neighbours. The blocks are gencore's
:class:`~gencore.nn.BiasedAttentionBlock`. Measured on tree it does not close the code-sharing gap (see the
README's prior-variant table); it stays an option.

Node-count embedding (``size_embedding=True``). Softmax attention averages over the set, so the transformer
cannot count: ``n`` copies of one point give every node the same output whatever ``n`` is, and the field cannot
tell a 4-node graph from an 18-node one until the points themselves do. Yet a graph's code usage depends on its
size (an ego net has one hub node, a share ``1 / n`` of its nodes). With the option a sinusoidal embedding of the
node count (the size ``gengraph sample`` draws; DiGress and EDM condition on it too) joins the time embedding at
every node's input.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gencore.checks import check_choice
from gencore.couplings import align_sets
from gencore.discrete import model_device
from gencore.errors import GenError
from gencore.manifolds import geodesic_interpolant, solve_manifold_ode
from gencore.nn import BiasedAttentionBlock, SinusoidalTimeEmbedding, broadcast_time
from gencore.rng import rand_with
from gengraph.hyperbolic.geometry import Geometry

__all__ = ["COUPLINGS", "SetVelocity", "latent_flow_loss", "node_count_embedding", "sample_latent_sets"]

HEADS = 4  # the set transformer's attention heads: its width must be a multiple
COUPLINGS = ("independent", "set-ot")  # how a graph's noise nodes are paired with its latent nodes


def node_count_embedding(dim: int) -> SinusoidalTimeEmbedding:
    """Sinusoidal features of a graph's node count ``n`` (periods 2 pi to 2000 pi nodes), for set networks whose
    softmax attention cannot count the set."""
    return SinusoidalTimeEmbedding(dim, scale=1.0, max_period=1000.0)


class SetVelocity(nn.Module):
    def __init__(
        self,
        geometry: Geometry,
        *,
        hidden: int = 64,
        layers: int = 2,
        heads: int = HEADS,
        time_dim: int = 32,
        distance_bias: bool = False,
        size_embedding: bool = False,
    ):
        super().__init__()
        self.geometry = geometry
        d = geometry.dim
        self.time = SinusoidalTimeEmbedding(time_dim, scale=30.0, max_period=30.0)
        self.size = node_count_embedding(time_dim) if size_embedding else None  # attention averages cannot count
        self.inp = nn.Linear(d + time_dim * (2 if size_embedding else 1), hidden)
        self.distance_scale = None
        if distance_bias:
            self.body = nn.ModuleList([BiasedAttentionBlock(hidden, heads, mlp_ratio=2) for _ in range(layers)])
            self.distance_scale = nn.Linear(time_dim, heads)
            nn.init.zeros_(self.distance_scale.weight)
            with torch.no_grad():
                self.distance_scale.bias.copy_(torch.linspace(0.0, math.log(1e4), heads))
        else:
            layer = nn.TransformerEncoderLayer(
                hidden, heads, 2 * hidden, dropout=0.0, batch_first=True, norm_first=True
            )
            self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(hidden, d)
        self.register_buffer("centre", torch.zeros(d))

    @torch.no_grad()
    def fit_centre(self, x1: torch.Tensor, mask: torch.Tensor, iters: int = 20) -> None:
        """Set the centre to the Frechet mean of the real nodes' latents ``x1[mask]``."""
        z = x1[mask]
        g = self.geometry
        ones = torch.ones(1, z.shape[0], dtype=z.dtype, device=z.device)
        self.centre.copy_(g.frechet_mean(z, ones, z[:1], iters=iters)[0])

    def centred(self, x: torch.Tensor) -> torch.Tensor:
        """``(-mu) (+) x``: the latents in the flow's coordinates."""
        return self.geometry.mobius_add(-self.centre.to(x.dtype).expand_as(x), x)

    def uncentred(self, y: torch.Tensor) -> torch.Tensor:
        """``mu (+) y``: the inverse of :meth:`centred`."""
        return self.geometry.mobius_add(self.centre.to(y.dtype).expand_as(y), y)

    def forward(self, x: torch.Tensor, t: torch.Tensor | float, *, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        temb = self.time(broadcast_time(t, x[:, 0])).to(x.dtype)
        y = self.geometry.logmap0(x)
        cond = temb
        if self.size is not None:
            cond = torch.cat([temb, self.size(mask.sum(1)).to(x.dtype)], -1)
        h = self.inp(torch.cat([y, cond[:, None].expand(b, n, -1)], -1))
        if self.distance_scale is None:
            h = self.body(h, src_key_padding_mask=~mask)
        else:
            d2 = (y[:, :, None] - y[:, None, :]).pow(2).sum(-1)
            bias = (-self.distance_scale(temb).exp()[:, :, None, None] * d2[:, None]).masked_fill(
                ~mask[:, None, None, :], -1e9
            )
            for block in self.body:
                h = block(h, bias)
        m = self.geometry.manifold
        v = m.from_frame(x, self.out(h))
        return m.proju(x, v) * mask[..., None]


def latent_flow_loss(
    model: nn.Module,
    geometry: Geometry,
    x1: torch.Tensor,
    mask: torch.Tensor,
    generator: torch.Generator,
    coupling: str = "independent",
) -> torch.Tensor:
    """Riemannian flow-matching loss of a batch of latent sets ``x1: [B, N, d]`` (padding masked out).

    ``coupling="set-ot"`` pairs each graph's noise nodes with its latent nodes by the optimal assignment under the
    squared geodesic distance (:func:`gencore.couplings.align_sets`) instead of by index."""
    check_choice(coupling, COUPLINGS, "prior coupling")
    m = geometry.manifold
    b, n, d = x1.shape
    x1 = getattr(model, "module", model).centred(x1)  # `model` may be the DDP wrapper of the SetVelocity
    x0 = m.random_base(b * n, generator=generator, dtype=x1.dtype).to(x1.device)
    if coupling == "set-ot":
        x0 = align_sets(x0.view(b, n, d), x1, mask, cost=m.pairwise_sq_dist).reshape(-1, d)
    t = rand_with((b,), generator, device=x1.device, dtype=x1.dtype)
    xt, ut = geodesic_interpolant(m, x0, x1.reshape(-1, d), t.repeat_interleave(n))
    v = model(xt.view(b, n, d), t, mask=mask).reshape(-1, d)
    err = m.norm2(xt, v - ut).view(b, n)
    return (err * mask).sum() / mask.sum()


@torch.no_grad()
def sample_latent_sets(
    model: nn.Module,
    geometry: Geometry,
    mask: torch.Tensor,
    *,
    steps: int = 50,
    method: str = "midpoint",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Integrate the prior from base noise to ``[B, N, d]`` latent sets (rows outside ``mask`` are noise), moved
    back from the flow's centred coordinates, on the model's device.

    The base noise is drawn on the CPU (with ``generator``, a CPU generator, or the global CPU one) and moved, so
    a seed gives the same sets whatever the model's device.
    """
    m = geometry.manifold
    device = model_device(model)
    mask = mask.to(device)
    b, n = mask.shape
    d = geometry.dim
    x0 = m.random_base(b * n, generator=generator).to(device)

    def field(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return model(x.view(b, n, d), t, mask=mask).reshape(-1, d)

    x1 = model.uncentred(solve_manifold_ode(m, field, x0, steps=steps, method=method).x.view(b, n, d))
    if not torch.isfinite(x1[mask]).all():
        # quantising would snap every NaN node to one code and decode a plausible-looking clique
        raise GenError("the latent flow prior produced non-finite points; its weights or its inputs are broken.")
    return x1
