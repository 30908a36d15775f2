"""Simplicial Wright-Fisher diffusion: exact forward sampler, stable score loss, on-simplex sampler.

Implements the simplicial part of "A Unification of Discrete, Gaussian, and Simplicial
Diffusion" (Chandra, Li, Amin, Ali, Rollins, Wilson; ICLR 2026), and a plain Jacobi /
Dirichlet-SDE baseline in the style of DDSM (Avdeyev et al. 2023, "Dirichlet Diffusion Score
Model") for comparison. Conventions shared with the other WF processes (mutation rate ``psi``,
stationary ``pi``, time map, likelihood-augmented posterior, bound) are described in
:mod:`gencore.discrete.wright_fisher`.

The process. Each position's type frequencies ``x in Delta^{K-1}`` follow the K-allele WF
diffusion with parent-independent mutation, in the time ``tau``:
``dx = (psi/2)(pi - x) dtau + a(x)^(1/2) dW``, ``a(x) = diag(x) - x x^T``.

Exact forward sampler (Griffiths 1980; Tavare 1984; Jenkins & Spano 2017, "Exact simulation
of the Wright-Fisher diffusion", Ann. Appl. Probab.): started at a vertex ``onehot(x0)``,
``x_tau ~ Dirichlet(psi pi + m onehot(x0))`` where ``m ~ A_inf(tau)`` is the number of lineages
surviving at ``tau`` from an infinite sample in the coalescent with mutation (``m`` lineages are
lost at rate ``m (m + psi - 1) / 2``). Its law is the alternating series
``q_m(tau) = sum_{k>=m} (-1)^(k-m) (psi+2k-1) (psi+m)_(k-1) / (m! (k-m)!) exp(-k(k+psi-1) tau/2)``,
summed in float64 over ``m <= 100``, ``k <= m + 60`` (later terms are below ``e^{-700}``). For
small ``tau`` the terms grow like ``4^m e^{-m^2 tau/2}`` and cancel to ``O(1)``: the exact
identity ``E[m / (psi + m)] = e^{-psi tau/2}`` (the WF mean) holds to 1e-10 at ``tau = 0.08`` but
only to 3e-3 at ``tau = 0.05`` (psi = 2). So below ``GRIFFITHS_SWITCH = 0.08`` (Jenkins & Spano
use 0.05 with their precision-controlled alternating sampler; a plain float64 sum needs the
larger value) the Griffiths (1984) normal approximation ``A_inf ~ N(mu, s^2)`` is used, with
``beta = (psi-1) tau/2``, ``eta = beta / (e^beta - 1)``, ``mu = 2 eta / tau``,
``s^2 = (2 eta / tau)(eta+beta)^2 (1 + eta/(eta+beta) - 2 eta) / beta^2`` (``2/(3 tau)`` when
``beta -> 0``). Its error in the mean identity is 5e-4 at ``tau = 0.08`` and ``O(tau)`` below
(8e-6 at 0.01). It is discretised on 41 integer nodes ``round(mu) + r j``, ``|j| <= 20``, stride
``r = max(1, round(8 s / 20))``, spanning at least ``mu +- 5.3 s`` (the least, at ``s`` just below 3.75
where the stride is still 1; the normal mass left out is below 1.1e-7). Either way the lineage law
is a weighted node set, and the sampler and every density below use the same one, so the
loss is exactly the score of what is sampled.

Closed-form score. With ``c_mb = (psi)_m / (psi pi_b)_m``,
``q(x | b) = Dir(x; psi pi) h_b(x_b)``, ``h_b(y) = sum_m q_m c_mb y^m``: the data-dependent part
of the density depends on ``x`` only through ``x_b``. Hence the uniform-prior posterior
``softmax_b log h_b(x_b)`` is the sufficient statistic fed to the network, and the score of the
model's marginal is ``grad log Dir(x; psi pi) + sum_b w_b g_b e_b``, ``g_b = h_b'(x_b)/h_b(x_b)``,
with ``w`` the model posterior of the clean token. Everything is computed with log-sum-exp over
the nodes in float64 from ``log x`` (the state is stored as ``log x``, drawn with log-space Gamma
variates), so no density underflows at small ``tau``.

Loss in the WF metric. The reverse SDE conditioned on ``x0`` and the model's reverse SDE share
the diffusion ``a`` and differ in drift by ``a (s_model - s_x0)``; by Girsanov the path KL rate
is ``(1/2) d^T a d`` with ``d_b = (w_b - 1[b = x0]) g_b`` (the ``Dirichlet(psi pi)`` part of the
score cancels, so no ``1/x`` term appears). ``d^T a d = sum_b x_b d_b^2 - (sum_b x_b d_b)^2`` is
the variance of ``d`` under ``x``, evaluated from log-space factors. This is the integrand of a
valid bound on ``-log p(x0)`` in nats per position (prior KL ``E[log h_x0]`` at ``tau_max``,
likelihood decoder at ``tau_min``). The reference implementation zeroes the loss below
``tau = 0.05``; here the likelihood-augmented posterior keeps the small-``tau`` terms finite and
they are kept, so the bound is a bound.

Reverse sampler on the simplex. The reverse drift simplifies (in ``K-1`` free coordinates the
divergence of ``a`` and the Dirichlet score add up to twice the mutation drift) to
``(psi/2)(pi - x) + a(x) u`` with ``u_b = w_b g_b``. One step from ``tau_t`` to ``tau_s`` is a
Wright-Fisher generation split in three pieces, each of which maps the simplex to itself:
genetic drift ``x <- Dirichlet(x / (e^{dtau} - 1))``, whose covariance ``(1 - e^{-dtau}) a(x)`` is
exactly that of neutral WF drift over ``dtau``; mutation
``x <- e^{-psi dtau/2} x + (1 - e^{-psi dtau/2}) pi`` (exact); and selection
``x <- x e^{dtau u} / sum``, the exact replicator flow ``dx = a u`` with ``u`` frozen at the start
of the step. Selection comes last so that the final steps, where the reverse dynamics is stiff
(``u ~ 1/tau``), end concentrated at a vertex. The splitting is first-order weak, like
Euler-Maruyama, but never leaves the simplex, so no clamping or projection is needed; the state
is kept as ``log x`` throughout.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import nn

from gencore.discrete.base import check_tokens
from gencore.discrete.ctmc import sample_categorical, stratified_times
from gencore.discrete.wright_fisher import WrightFisherProcess
from gencore.errors import ConvergenceError, InputError

__all__ = [
    "GRIFFITHS_SWITCH",
    "JacobiDirichletSDE",
    "WrightFisherSimplex",
    "euler_maruyama_wf",
    "griffiths_moments",
    "lineage_log_pmf",
    "lineage_nodes",
    "sample_log_dirichlet",
    "sample_log_gamma",
    "wf_moments",
]

GRIFFITHS_SWITCH = 0.08  # tau below which the lineage law uses the Griffiths normal approximation
N_NODES = 101  # lineage-count nodes per tau (exact series: m = 0..100)
G_NODES = 41  # integer nodes of the discretised Griffiths normal
NEGLIGIBLE = -40.0  # log-weight below which a lineage node is dropped (relative mass < 5e-18)


# ---------------------------------------------------------------------- lineage-count law
@functools.lru_cache(maxsize=16)
def _series_coefficients(psi: float, m_max: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``log |b_k(m)|`` without the time factor, signs and ``k (k + psi - 1) / 2`` on the ``(m, k - m)`` grid."""
    m = torch.arange(m_max + 1, dtype=torch.float64)[:, None]
    j = torch.arange(61, dtype=torch.float64)[None, :]  # k = m + j; terms beyond j = 60 are below e^-700
    k = m + j
    first = k == 0  # the k = m = 0 term equals 1 for every psi
    kk = torch.where(first, torch.ones_like(k), k)
    log_coef = (
        torch.where(first, 0.0, torch.log(psi + 2 * kk - 1) + torch.lgamma(psi + m + kk - 1) - torch.lgamma(psi + m))
        - torch.lgamma(m + 1)
        - torch.lgamma(j + 1)
    )
    return log_coef, 1.0 - 2.0 * (j % 2), k * (k + psi - 1) / 2


def lineage_log_pmf(tau: torch.Tensor, psi: float, m_max: int = N_NODES - 1) -> torch.Tensor:
    """``log q_m(tau)``, ``m = 0..m_max``, from the alternating series (float64), ``[..., m_max+1]``.

    Accurate for ``tau >= GRIFFITHS_SWITCH``; tiny negative values from rounding are clipped to 0.
    """
    log_coef, sign, rate = _series_coefficients(float(psi), int(m_max))
    terms = sign * torch.exp(log_coef - rate * tau.to(torch.float64)[..., None, None])
    q = terms.sum(-1).clamp_min(0.0)
    return torch.log(q / q.sum(-1, keepdim=True))


def griffiths_moments(tau: torch.Tensor, psi: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of Griffiths' normal approximation of ``A_inf(tau)`` (Jenkins & Spano 2017, Thm 1)."""
    tau = tau.to(torch.float64)
    beta = 0.5 * (psi - 1) * tau
    small = beta.abs() < 1e-6
    b = torch.where(small, torch.ones_like(beta), beta)
    eta = torch.where(small, torch.ones_like(beta), b / torch.expm1(b))
    var = (2 * eta / tau) * (eta + b) ** 2 * (1 + eta / (eta + b) - 2 * eta) / b**2
    var = torch.where(small, 2 / (3 * tau), var)
    return 2 * eta / tau, var


def lineage_nodes(tau: torch.Tensor, psi: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes ``m: [B, 101]`` and normalised log-weights ``[B, 101]`` of the lineage-count law at ``tau: [B]``.

    Exact series on ``m = 0..100`` for ``tau >= GRIFFITHS_SWITCH``; otherwise the Griffiths normal
    on 41 integer nodes centred on the mean (see the module docstring). Nodes negligible for every
    ``tau`` of the batch are dropped.
    """
    tau, inverse = torch.unique(tau.to(torch.float64).reshape(-1), return_inverse=True)
    m = torch.arange(N_NODES, dtype=torch.float64).repeat(tau.shape[0], 1)
    logw = torch.empty_like(m)
    exact = tau >= GRIFFITHS_SWITCH
    if bool(exact.any()):
        logw[exact] = lineage_log_pmf(tau[exact], psi)
    if bool((~exact).any()):
        mu, var = griffiths_moments(tau[~exact], psi)
        sd = var.sqrt()
        half = (G_NODES - 1) // 2
        stride = torch.round(8 * sd / half).clamp_min(1.0)
        offsets = torch.arange(N_NODES, dtype=torch.float64) - half
        nodes = mu.round()[:, None] + stride[:, None] * offsets
        lw = -0.5 * ((nodes - mu[:, None]) / sd[:, None]) ** 2
        lw = lw.masked_fill((offsets > half) | (nodes < 0), -math.inf)
        nodes = nodes.clamp_min(0.0)
        m[~exact] = nodes
        logw[~exact] = lw - torch.logsumexp(lw, -1, keepdim=True)
    keep = (logw > NEGLIGIBLE).any(0)  # drop nodes negligible for every tau of the batch
    return m[inverse][:, keep], logw[inverse][:, keep]


# ---------------------------------------------------------------------- log-space Gamma / Dirichlet
def sample_log_gamma(alpha: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """``log G`` with ``G ~ Gamma(alpha, 1)`` (float64), Marsaglia-Tsang with the ``alpha < 1`` boost in log space."""
    alpha = alpha.to(torch.float64)
    if not bool(((alpha > 0) & torch.isfinite(alpha)).all()):  # one host sync per call
        raise InputError("Gamma shapes must be positive and finite.")
    boost = alpha < 1
    a = torch.where(boost, alpha + 1, alpha).reshape(-1)
    d = a - 1.0 / 3.0
    c = 1.0 / torch.sqrt(9 * d)
    out = torch.empty_like(a)
    todo = torch.arange(a.shape[0])
    for _ in range(200):
        if todo.numel() == 0:
            break
        z = torch.randn(todo.shape[0], generator=generator, dtype=torch.float64)
        u = 1 - torch.rand(todo.shape[0], generator=generator, dtype=torch.float64)
        v = (1 + c[todo] * z) ** 3
        ok = v > 0
        vv = torch.where(ok, v, torch.ones_like(v))
        accept = ok & (u.log() < 0.5 * z * z + d[todo] - d[todo] * vv + d[todo] * vv.log())
        out[todo[accept]] = d[todo[accept]].log() + vv[accept].log()
        todo = todo[~accept]
    else:
        if todo.numel():
            raise ConvergenceError("Gamma rejection sampler did not accept within 200 rounds.")
    out = out.reshape(alpha.shape)
    u = 1 - torch.rand(alpha.shape, generator=generator, dtype=torch.float64)
    return out + torch.where(boost, u.log() / alpha, torch.zeros_like(alpha))


def sample_log_dirichlet(alpha: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """``log x`` with ``x ~ Dirichlet(alpha)`` over the last dimension (float64, no underflow)."""
    log_g = sample_log_gamma(alpha, generator=generator)
    return log_g - torch.logsumexp(log_g, -1, keepdim=True)


# ---------------------------------------------------------------------- closed-form moments, SDE
def wf_moments(x0: torch.Tensor, tau: float, psi: float, pi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact mean ``[K]`` and covariance ``[K, K]`` of the WF diffusion at ``tau`` from the vertex ``x0`` (int).

    From the moment ODEs ``dm/dtau = (psi/2)(pi - m)`` and
    ``dM/dtau = -(1+psi) M + diag(m) + (psi/2)(pi m^T + m pi^T)``, solved in closed form.
    """
    pi = pi.to(torch.float64)
    k = pi.shape[0]
    e = torch.zeros(k, dtype=torch.float64)
    e[int(x0)] = 1.0
    lam, c = psi / 2, 1 + psi
    mean = pi + (e - pi) * math.exp(-lam * tau)
    f_inf = torch.diag(pi) + psi * torch.outer(pi, pi)
    f_1 = torch.diag(e - pi) + lam * (torch.outer(pi, e - pi) + torch.outer(e - pi, pi))
    second = (
        math.exp(-c * tau) * torch.outer(e, e)
        + f_inf * (1 - math.exp(-c * tau)) / c
        + f_1 * (math.exp(-lam * tau) - math.exp(-c * tau)) / (c - lam)
    )
    return mean, second - torch.outer(mean, mean)


def euler_maruyama_wf(
    x0: torch.Tensor,
    tau: torch.Tensor,
    psi: float,
    pi: torch.Tensor,
    n_steps: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Euler-Maruyama simulation of the WF SDE from ``onehot(x0)`` to ``tau: [B]`` (per row), ``[B, L, K]``.

    Uniform steps ``tau / n_steps``; after each step negative coordinates are clipped to 0 and the
    point renormalised (the usual fix, which biases the law near the boundary). Noise
    ``a(x)^(1/2) xi = sqrt(x) (xi - sqrt(x) <sqrt(x), xi>)``.
    """
    k = pi.shape[0]
    pi = pi.to(dtype)
    x = nn.functional.one_hot(x0, k).to(dtype)
    dt = (tau.to(dtype) / n_steps)[:, None, None]
    for _ in range(n_steps):
        r = x.clamp_min(0).sqrt()
        xi = torch.randn(x.shape, generator=generator, dtype=dtype)
        noise = r * (xi - r * (r * xi).sum(-1, keepdim=True))
        x = x + 0.5 * psi * (pi - x) * dt + noise * dt.sqrt()
        x = x.clamp_min(0)
        x = x / x.sum(-1, keepdim=True)
    return x


# ---------------------------------------------------------------------- the process
class WrightFisherSimplex(WrightFisherProcess):
    """Simplicial WF diffusion; the state is ``log x: [B, L, K]`` (float64) on the simplex."""

    name = "wf-simplex"

    def __init__(self, vocab_size: int, **kwargs: Any) -> None:
        super().__init__(vocab_size, **kwargs)
        self._node_cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._h_cache: tuple[torch.Tensor, ...] | None = None

    def _coefficients(self, m: torch.Tensor) -> torch.Tensor:
        """``log c_mb = log (psi)_m - log (psi pi_b)_m`` for nodes ``m: [B, J]`` -> ``[B, K, J]``."""
        a = self.psi * self.pi.to(m.device)[None, :, None]
        mm = m[:, None, :]
        return torch.lgamma(self.psi + mm) - math.lgamma(self.psi) - torch.lgamma(a + mm) + torch.lgamma(a)

    def _nodes(self, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`lineage_nodes` at ``tau: [B]``, reused while the same times come back (one-entry cache)."""
        tau = tau.to(torch.float64).reshape(-1)
        cached = self._node_cache
        if cached is None or cached[0].shape != tau.shape or not torch.equal(cached[0], tau):
            self._node_cache = cached = (tau.clone(), *lineage_nodes(tau, self.psi))
        return cached[1], cached[2]

    def _log_h(self, log_x: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``log h_b(x_b)`` and ``log g_b = log h_b'(x_b) - log h_b(x_b)``, ``[B, L, K]`` each.

        The last state is cached (by identity, holding a reference), since the features, the loss
        and the sampler step all need it for the same state.
        """
        tau = tau.to(torch.float64).reshape(-1).expand(log_x.shape[0])
        cached = self._h_cache
        if cached is not None and cached[0] is log_x and torch.equal(cached[1], tau):
            return cached[2], cached[3]
        m, logw = self._nodes(tau)
        base = (logw[:, None, :] + self._coefficients(m))[:, None]  # [B, 1, K, J]
        mm = m[:, None, None, :]
        ly = log_x[..., None]
        log_h = torch.logsumexp(base + mm * ly, -1)
        log_dh = base + mm.clamp_min(1).log() + (mm - 1) * ly
        log_dh = torch.logsumexp(log_dh.masked_fill(mm <= 0, -math.inf), -1)
        self._h_cache = (log_x, tau.clone(), log_h, log_dh - log_h)
        return log_h, log_dh - log_h

    def forward_sample(self, x0, t, *, generator=None):
        x0, t = self._tokens_and_times(x0, t)
        m, logw = self._nodes(self.tau(t))
        b, length = x0.shape
        idx = sample_categorical(logw.exp()[:, None, :].expand(b, length, -1), generator=generator)
        lineages = torch.gather(m, 1, idx)  # [B, L]
        onehot = nn.functional.one_hot(x0, self.vocab_size).to(torch.float64)
        alpha = self.psi * self.pi + lineages[..., None] * onehot
        return sample_log_dirichlet(alpha, generator=generator)

    def log_likelihood(self, state, tau):
        return self._log_h(state, tau)[0]

    def _kl_rate(self, log_post, x0, state, tau):
        _, log_g = self._log_h(state, tau)
        onehot = nn.functional.one_hot(x0, self.vocab_size).bool()
        # log |w_b - 1[b = x0]|: log w_b off x0, log sum_{c != x0} w_c on x0
        log_rest = torch.logsumexp(log_post.masked_fill(onehot, -math.inf), -1, keepdim=True)
        log_abs = torch.where(onehot, log_rest.expand_as(log_post), log_post)
        sign = torch.where(onehot, -1.0, 1.0).to(torch.float64)
        xd = sign * torch.exp(state + log_abs + log_g)  # x_b d_b
        xd2 = torch.exp(state + 2 * (log_abs + log_g))  # x_b d_b^2
        return 0.5 * (xd2.sum(-1) - xd.sum(-1) ** 2).clamp_min(0.0)

    def _prior_kl(self, x0, *, generator):
        t = torch.zeros(x0.shape[0], dtype=torch.float64)
        log_x = self.forward_sample(x0, t, generator=generator)
        return torch.gather(self._log_h(log_x, self.tau(t))[0], 2, x0[..., None]).squeeze(-1)

    def _decoder_nll(self, x0, *, generator):
        t = torch.ones(x0.shape[0], dtype=torch.float64)
        log_x = self.forward_sample(x0, t, generator=generator)
        log_dec = torch.log_softmax(self._log_h(log_x, self.tau(t))[0], -1)
        return -torch.gather(log_dec, 2, x0[..., None]).squeeze(-1)

    def _prior_sample(self, n, length, generator):
        return sample_log_dirichlet((self.psi * self.pi).expand(n, length, -1), generator=generator)

    def _reverse_step(self, state, log_post, tau_t, tau_s, generator):
        dtau = float(tau_t - tau_s)
        _, log_g = self._log_h(state, tau_t)
        u = torch.exp(log_post + log_g)  # selection coefficients at the start of the step
        conc = torch.exp(state - math.log(math.expm1(dtau)))  # genetic drift
        log_x = sample_log_dirichlet(conc.clamp_min(1e-300), generator=generator)
        keep = math.exp(-0.5 * self.psi * dtau)  # mutation
        log_x = torch.logaddexp(log_x + math.log(keep), math.log1p(-keep) + self.pi.log())
        return torch.log_softmax(log_x + dtau * u, -1)  # selection (replicator flow)


class JacobiDirichletSDE(WrightFisherSimplex):
    """Plain Jacobi / Dirichlet-SDE baseline on the same WF diffusion (what the issue calls the failing recipe).

    The usual ingredients of a DDSM-style simplex diffusion, without the WF machinery above:

    - forward ``x_tau`` by Euler-Maruyama from the vertex (:func:`euler_maruyama_wf`, float32,
      ``em_steps`` steps, clip-and-renormalise, then coordinates floored at ``eps = 1e-6``);
    - the network sees ``x_tau`` itself and predicts ``w = softmax(f)`` (no likelihood term);
    - the target score is the conditional score from the transition series: ``q_m`` by the
      alternating series truncated at ``series_terms = 64`` terms and summed in linear float32
      (no Griffiths switch), then ``h_b``, ``h_b'`` as power series in ``x_b``;
    - plain Euclidean denoising score matching ``|dtau/dt| |s_model - s_x0|^2 / 2`` in ambient
      coordinates, including the ``(psi pi - 1)/x`` Dirichlet part of both scores.

    At small ``tau`` the series terms overflow float32 and cancel (``inf - inf``), and where they do
    not overflow the cancellation leaves garbage (negative ``h``, huge scores), so the loss turns
    NaN or blows up; the bound and the sampler are the stable ones inherited from
    :class:`WrightFisherSimplex`, fed with this model's inputs.
    """

    name = "dirichlet-sde"

    def __init__(
        self, vocab_size: int, *, em_steps: int = 20, series_terms: int = 64, eps: float = 1e-6, **kwargs: Any
    ) -> None:
        super().__init__(vocab_size, **kwargs)
        self.eps = eps
        self.em_steps = em_steps
        self.series_terms = series_terms

    def features(self, state, t):
        return state.exp().float()

    def posterior(self, model, state, t, **cond):
        logits = model(self.features(state, t), t.float(), **cond).to(torch.float64)
        return torch.log_softmax(logits, dim=-1)

    def _series_h(self, x: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``h_b(x_b)`` and ``h_b'(x_b)`` by the truncated series in linear float32 arithmetic."""
        n = self.series_terms
        psi = self.psi
        m = torch.arange(n, dtype=torch.float32)[:, None]
        k = torch.arange(n, dtype=torch.float32)[None, :]
        first = k == 0
        kk = torch.where(first, 1.0, k)
        log_coef = (
            torch.where(
                first, 0.0, torch.log(psi + 2 * kk - 1) + torch.lgamma(psi + m + kk - 1) - torch.lgamma(psi + m)
            )
            - torch.lgamma(m + 1)
            - torch.lgamma((k - m).clamp_min(0) + 1)
        )
        decay = k * (k + psi - 1) * tau.float()[:, None, None] / 2
        sign = 1 - 2 * ((k - m) % 2)
        terms = torch.where(k >= m, sign * torch.exp(log_coef - decay), 0.0)
        q = terms.sum(-1)  # [B, n], linear float32 sum of the alternating series
        a = (self.psi * self.pi).float()[:, None]
        mt = m.T
        c = torch.exp(torch.lgamma(psi + mt) - math.lgamma(psi) - torch.lgamma(a + mt) + torch.lgamma(a))  # [K, n]
        qc = q[:, None, None, :] * c[None, None]
        h = (qc * x[..., None] ** mt).sum(-1)  # [B, L, K]
        dh = (qc[..., 1:] * mt[:, 1:] * x[..., None] ** (mt[:, 1:] - 1)).sum(-1)
        return h, dh

    def loss(self, model, x0, *, generator=None, **cond):
        x0 = check_tokens(x0, self.vocab_size)
        t = stratified_times(x0.shape[0], generator=generator, device=x0.device)
        tau = self.tau(t)
        x = euler_maruyama_wf(x0, tau, self.psi, self.pi, self.em_steps, generator=generator, dtype=torch.float32)
        x = x.clamp_min(self.eps)
        x = x / x.sum(-1, keepdim=True)
        w = self.posterior(model, x.double().log(), t, **cond).exp().float()
        h, dh = self._series_h(x, tau)
        g = dh / h
        dirichlet = ((self.psi * self.pi).float() - 1) / x
        onehot = nn.functional.one_hot(x0, self.vocab_size).float()
        s_true = dirichlet + onehot * g
        s_model = dirichlet + w * g
        per_pos = 0.5 * ((s_model - s_true) ** 2).sum(-1)
        loss = (self.dtau_dt(t).float()[:, None] * per_pos).mean()
        return loss, {"loss": loss.detach()}
