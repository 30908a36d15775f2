"""Semidiscrete OT coupling: pair Gaussian noise with the whole data set (SD-FM).

Mousavi-Hosseini, Zhang, Klein & Cuturi, "Flow Matching with Semidiscrete Couplings" (SD-FM),
arXiv:2509.25519, 2025; ICLR 2026. The structure (dual potential fitted by stochastic ascent, EMA
of the potential, chi-square marginal diagnostic) follows ott-jax's
``solvers/linear/semidiscrete.py``; this is an independent PyTorch implementation.

Problem. Noise ``x ~ mu = N(0, I_D)``, data ``nu = (1/N) sum_j delta_{y_j}`` with ``y: [N, D]``,
cost ``c(x, y) = |x - y|^2 / 2``. The semi-dual of OT is the concave function of ``g: [N]``::

    F(g) = E_x[ min_j (c(x, y_j) - g_j) ] + mean(g)                 (eps = 0)
    F(g) = E_x[ -eps log (1/N) sum_j exp((g_j - c(x, y_j)) / eps) ] + mean(g)   (eps > 0)

whose gradient is ``dF/dg_j = 1/N - P_x(j is assigned)``: ascent raises the potential of data
points that receive too little noise. ``|x|^2 / 2`` does not depend on ``j``, so the assignment is::

    j(x) = argmax_j <x, y_j> - |y_j|^2 / 2 + g_j                            (eps = 0)
    j(x) ~ softmax_j((<x, y_j> - |y_j|^2 / 2 + g_j) / eps)  (Gumbel-max)   (eps > 0)

At the optimum every data point receives mass exactly ``1/N`` and ``x -> y_j(x)`` is the OT map
(Laguerre cells), so pairing costs ``O(B N D)`` per batch instead of minibatch OT's ``O(B^2 ...)``.

Memory. The search over ``N`` runs in chunks of ``query_chunk`` noise rows times ``data_chunk``
data rows: at most ``query_chunk * data_chunk`` scores (two such buffers for ``eps > 0``) plus
``O(B + N)``, e.g. 64 MiB (128 MiB) in float32 at the defaults, for any ``N``.

Diagnostics. Besides the chi-square divergence of the assignment frequencies from ``1/N``
(estimated without bias as ott-jax does, so a perfect fit reads about 0 at any sample size), which
alone can look fine for a badly fitted potential, :meth:`SemidiscreteCoupling.diagnose` reports
the per-point mass (max/min ratio, fraction of points never assigned against what a perfect fit
would leave unassigned) and the W2 distance between the assigned targets (with multiplicity) and
the data, relative to the same distance for independent (random) pairing.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from gencore.checks import check_choice, check_finite, check_points
from gencore.couplings.assignment import optimal_assignment
from gencore.couplings.base import check_positive, max_inner_product, sq_euclidean_cost
from gencore.errors import ConfigError, InputError
from gencore.io import load_pretrained, save_pretrained, tensor_fingerprint
from gencore.rng import draw_device


@dataclass
class SemidiscreteDiagnostics:
    """Quality of a fitted semidiscrete potential (see :meth:`SemidiscreteCoupling.diagnose`)."""

    chi2: float  #: unbiased estimate of chi^2(assignment frequencies || uniform); 0 at a perfect fit
    chi2_plugin: float  #: plug-in estimate ``N sum_j (c_j / M)^2 - 1`` (>= 0, biased up by ~(N-1)/M)
    n_samples: int  #: noise samples ``M`` used for the statistics below
    mass_ratio: float  #: max over min assignment count (inf if some point got none)
    mass_max: float  #: largest count relative to the uniform ``M / N``
    mass_min: float  #: smallest count relative to ``M / N``
    unassigned_fraction: float  #: fraction of data points that no sample was assigned to
    unassigned_expected: float  #: the same under a perfect fit, ``(1 - 1/N)^M``
    w2_assigned: float  #: W2(assigned targets, uniform data sample), same sample sizes
    w2_random: float  #: mean W2(other uniform data sample, that sample): random pairing's floor
    w2_random_sd: float  #: spread of that floor over the reference draws
    w2_ratio: float  #: ``w2_assigned / w2_random``; about 1 when fitted
    chi2_history: list[float] = field(default_factory=list)  #: chi^2 during :meth:`fit`
    chi2_steps: list[int] = field(default_factory=list)  #: the fit steps of ``chi2_history``
    n_steps: int = 0  #: fit steps run
    warnings: list[str] = field(default_factory=list)  #: what looks off, in words

    @property
    def ok(self) -> bool:
        """True when no check raised a warning."""
        return not self.warnings


def data_fingerprint(data: torch.Tensor) -> str:
    """SHA-256 (hex) of a data set's shape, dtype and bytes: identifies the data a potential was fitted on."""
    return tensor_fingerprint(data)


def _w2(a: torch.Tensor, b: torch.Tensor) -> float:
    """Exact W2 between two equal-size uniform point sets ``[m, D]`` (assignment, float64, CPU)."""
    c = sq_euclidean_cost(a.to("cpu", torch.float64), b.to("cpu", torch.float64)).numpy()
    sigma = optimal_assignment(c)
    return math.sqrt(float(c[np.arange(len(sigma)), sigma].mean()))


class SemidiscreteCoupling(nn.Module):
    """Pair noise with data-set points through a fitted semidiscrete OT potential (SD-FM).

    ``data: [N, ...]`` is fixed (flattened to ``[N, D]`` internally). The potential ``g: [N]`` and a
    fingerprint of the data are buffers, so the coupling saves and loads with any model it is a
    submodule of (``store_data=False`` keeps the data out of the state dict; the fingerprint still
    guards against loading a potential fitted on other data).

    Example::

        sd = SemidiscreteCoupling(data)           # data: [N, D]
        diag = sd.fit(n_steps=2000, batch_size=1024, generator=gen)
        x0, x1 = sd(torch.randn(256, D), None)    # x1 = data[sd.assign(x0)]
    """

    def __init__(
        self,
        data: torch.Tensor,
        *,
        epsilon: float = 0.0,
        query_chunk: int = 1024,
        data_chunk: int = 16384,
        store_data: bool = True,
    ) -> None:
        super().__init__()
        check_finite(data, "data")
        if data.dim() < 2 or data.shape[0] == 0:
            raise InputError(f"data must be a non-empty batch [N, ...], got shape {tuple(data.shape)}.")
        flat = data.detach().reshape(data.shape[0], -1)
        if not flat.is_floating_point():
            flat = flat.float()
        check_points(flat, "data")
        if query_chunk < 1 or data_chunk < 1:
            raise ConfigError(f"query_chunk and data_chunk must be >= 1, got {query_chunk}, {data_chunk}.")
        self.epsilon = check_positive(epsilon, "epsilon", allow_zero=True)
        self.query_chunk, self.data_chunk, self.store_data = (
            int(query_chunk),
            int(data_chunk),
            bool(store_data),
        )
        self.feature_shape = tuple(data.shape[1:])
        self.register_buffer("data", flat.clone(), persistent=self.store_data)
        self.register_buffer("potential", torch.zeros(flat.shape[0], dtype=flat.dtype, device=flat.device))
        digest = bytes.fromhex(data_fingerprint(flat))
        self.register_buffer("data_sha256", torch.tensor(list(digest), dtype=torch.uint8))
        self.register_buffer("fit_steps", torch.zeros((), dtype=torch.long))
        self.last_diagnostics: SemidiscreteDiagnostics | None = None

    # ------------------------------------------------------------------ matching
    @property
    def n_points(self) -> int:
        return self.data.shape[0]

    def _bias(self, g: torch.Tensor | None = None) -> torch.Tensor:
        g = self.potential if g is None else g
        return g - 0.5 * (self.data * self.data).sum(-1)

    def _flat_noise(self, x0: torch.Tensor) -> torch.Tensor:
        check_finite(x0, "x0")
        if x0.dim() < 2 or tuple(x0.shape[1:]) != self.feature_shape:
            raise InputError(
                f"x0 must have shape [B, {', '.join(map(str, self.feature_shape))}] to match the data, "
                f"got {tuple(x0.shape)}."
            )
        return x0.reshape(x0.shape[0], -1).to(self.data.dtype)

    def _assign_flat(self, x: torch.Tensor, g: torch.Tensor | None, generator: torch.Generator | None):
        return max_inner_product(
            x,
            self.data,
            self._bias(g),
            temperature=self.epsilon,
            generator=generator,
            query_chunk=self.query_chunk,
            key_chunk=self.data_chunk,
        )

    @torch.no_grad()
    def assign(self, x0: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Indices ``[B]`` of the data points matched to ``x0: [B, ...]`` (sampled if ``epsilon > 0``).

        The coupling follows the noise: when ``x0`` is on another device than the data (a coupling
        fitted on the CPU pairing the batches of a GPU run), the module moves itself there once.
        """
        if x0.device != self.data.device:
            self.to(x0.device)
        return self._assign_flat(self._flat_noise(x0), None, generator)

    def forward(
        self, x0: torch.Tensor, x1: torch.Tensor | None = None, *, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x0, data[assign(x0)])``: ``x1``'s values are ignored (only its batch size is checked)."""
        if x1 is not None and x1.shape[0] != x0.shape[0]:
            raise InputError(f"x0 has batch size {x0.shape[0]} but x1 has {x1.shape[0]}; they must match.")
        idx = self.assign(x0, generator=generator)
        return x0, self.data[idx].reshape(x0.shape[0], *self.feature_shape)

    # ------------------------------------------------------------------ fitting
    def _noise(self, n: int, generator: torch.Generator | None) -> torch.Tensor:
        """``N(0, I)`` draws ``[n, D]``, made on the generator's device (a CPU generator may drive a CUDA fit)."""
        where = draw_device(generator, self.data.device)
        x = torch.randn(n, self.data.shape[1], generator=generator, device=where, dtype=self.data.dtype)
        return x.to(self.data.device)

    def _soft_mass(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``sum_i softmax_j((<x_i, y_j> + bias_j) / eps)`` -> ``[N]``, two chunked passes over the data."""
        n, eps = self.n_points, self.epsilon
        mass = torch.zeros(n, dtype=x.dtype, device=x.device)
        for q0 in range(0, x.shape[0], self.query_chunk):
            q = x[q0 : q0 + self.query_chunk]
            lse = torch.full((q.shape[0],), -math.inf, dtype=x.dtype, device=x.device)
            for k0 in range(0, n, self.data_chunk):
                s = torch.addmm(bias[k0 : k0 + self.data_chunk], q, self.data[k0 : k0 + self.data_chunk].t())
                lse = torch.logaddexp(lse, torch.logsumexp(s.div_(eps), dim=1))
            for k0 in range(0, n, self.data_chunk):
                s = torch.addmm(bias[k0 : k0 + self.data_chunk], q, self.data[k0 : k0 + self.data_chunk].t())
                mass[k0 : k0 + self.data_chunk] += s.div_(eps).sub_(lse.unsqueeze(1)).exp_().sum(0)
        return mass

    def _counts(self, n_samples: int, g: torch.Tensor, generator: torch.Generator | None, keep: int = 0):
        """Assignment counts ``[N]`` over ``n_samples`` fresh noise draws, and the first ``keep`` indices."""
        counts = torch.zeros(self.n_points, dtype=torch.long, device=self.data.device)
        kept = []
        step = max(self.query_chunk, 4096)
        for s0 in range(0, n_samples, step):
            idx = self._assign_flat(self._noise(min(step, n_samples - s0), generator), g, generator)
            counts.index_add_(0, idx, torch.ones_like(idx))  # bincount without a device sync
            if sum(k.numel() for k in kept) < keep:
                kept.append(idx)
        return counts, torch.cat(kept)[:keep] if keep else None

    @torch.no_grad()
    def score_scale(self, generator: torch.Generator | None = None, n_noise: int = 256) -> float:
        """Typical spread over the data of the matching score ``<x, z_j> - |z_j|^2 / 2`` for noise ``x`` and
        the centred data ``z_j = y_j - mean(y)``: the mean over ``n_noise`` draws of its standard deviation over
        (up to 4096 of) the data points.
        It is the size of the gaps the potential must close, and sets the default learning rate (1 when the
        data points are all equal)."""
        sub = self.data[:: max(1, self.n_points // 4096)]
        sub = sub - self.data.mean(0)  # a translation of the data costs the potential no steps (see fit)
        scores = self._noise(n_noise, generator) @ sub.t() - 0.5 * (sub * sub).sum(-1)
        spread = float(scores.std(dim=1, correction=0).mean()) if sub.shape[0] > 1 else 0.0
        return spread if spread > 0 else 1.0  # identical data points: no gap to close, any unit step

    @staticmethod
    def _chi2(counts: torch.Tensor) -> tuple[float, float]:
        """Unbiased and plug-in chi^2 of frequencies ``counts / M`` against uniform ``1/N``."""
        n, m = counts.numel(), float(counts.sum())
        c = counts.double()
        unbiased = n * float((c * (c - 1)).sum()) / (m * (m - 1)) - 1.0 if m > 1 else math.inf
        return unbiased, n * float((c * c).sum()) / (m * m) - 1.0

    @torch.no_grad()
    def fit(
        self,
        n_steps: int = 2000,
        batch_size: int = 1024,
        lr: float | None = None,
        generator: torch.Generator | None = None,
        progress: bool = False,
        *,
        optimizer: str = "adam",
        ema: float = 0.99,
        lr_decay: bool = True,
        eval_every: int | None = None,
        eval_samples: int | None = None,
        diagnose_samples: int | None = None,
        warn: bool = True,
    ) -> SemidiscreteDiagnostics:
        """Fit the potential by stochastic ascent on the semi-dual; returns :meth:`diagnose`'s result.

        Each step draws ``batch_size`` noise samples ``x ~ N(0, I)`` with ``generator``, computes the
        ascent direction ``1/N - (assignment frequencies)`` (exact softmax frequencies when
        ``epsilon > 0``) and updates ``g`` with Adam (``optimizer="adam"``) or plain SGD on ``N`` times
        the gradient (``"sgd"``, so ``lr`` is in the cost's units for any ``N``). ``lr`` defaults to
        ``0.01 * min(1, (256 / N)^(1/4)) *`` :meth:`score_scale` (an empirical rule from fits of
        N = 3 ... 4096 points in 1-2 D: larger data sets need finer steps); with ``lr_decay`` it
        follows a cosine from ``lr`` down to ``lr / 100``. The matching uses the EMA (rate ``ema``) of
        the iterates, which is what is stored in ``self.potential``. Every ``eval_every`` steps the
        unbiased chi^2 of the EMA potential is recorded on ``eval_samples`` fresh noise samples.
        Continues from the current potential (call again to fit longer); a first fit from the zero potential
        starts at ``g_j = <mean(y), y_j>``, the potential of the translation to the data's mean, which makes
        the fit equivariant to translations of the data.
        """
        check_choice(optimizer, ("adam", "sgd"), "optimizer")
        if n_steps < 1 or batch_size < 1:
            raise ConfigError(f"n_steps and batch_size must be >= 1, got {n_steps} and {batch_size}.")
        if not 0.0 <= ema < 1.0:
            raise ConfigError(f"ema must be in [0, 1), got {ema!r}.")
        n = self.n_points
        if lr is None:
            lr = 0.01 * min(1.0, (256 / n) ** 0.25) * self.score_scale(generator)
        lr = check_positive(lr, "lr")
        eval_every = eval_every or max(1, n_steps // 20)
        eval_samples = eval_samples or min(max(4096, 4 * n), 2**17)
        if int(self.fit_steps) == 0 and not bool(self.potential.any()):
            # the OT map to data translated by c is the map to the centred data, translated: start from that
            # translation's potential g_j = <c, y_j> (x is matched as x + c). From g = 0 the fit also had to learn
            # the translation: 64 points of spread 0.5 at offset 3 ended at chi2 0.16 after 600 steps (0.002 now)
            self.potential.copy_(self.data @ self.data.mean(0))
        g = self.potential.clone()
        g_ema = self.potential.clone()
        m1, m2 = torch.zeros_like(g), torch.zeros_like(g)
        beta1, beta2, adam_eps = 0.9, 0.999, 1e-12
        history, hist_steps = [], []
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n_steps, desc="semidiscrete fit", disable=None)  # None: hidden when not a TTY
        for step in range(1, n_steps + 1):
            x = self._noise(batch_size, generator)
            if self.epsilon > 0:
                freq = self._soft_mass(x, self._bias(g)) / batch_size
            else:
                idx = self._assign_flat(x, g, None)
                freq = torch.zeros_like(g).index_add_(0, idx, torch.full_like(idx, 1, dtype=g.dtype))
                freq.div_(batch_size)
            grad = freq.neg_().add_(1.0 / n)  # ascent direction of the semi-dual
            rate = lr * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * (step - 1) / n_steps))) if lr_decay else lr
            if optimizer == "adam":
                m1.mul_(beta1).add_(grad, alpha=1 - beta1)
                m2.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (m2 / (1 - beta2**step)).sqrt_().add_(adam_eps)
                g.addcdiv_(m1, denom, value=rate / (1 - beta1**step))
            else:
                g.add_(grad, alpha=rate * n)
            g_ema.mul_(ema).add_(g, alpha=1 - ema)
            if step % eval_every == 0 or step == n_steps:
                counts, _ = self._counts(eval_samples, g_ema, generator)
                history.append(self._chi2(counts)[0])
                hist_steps.append(step)
                if bar is not None:
                    bar.set_postfix(chi2=f"{history[-1]:.4f}")
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        self.potential.copy_(g_ema)
        self.fit_steps += n_steps
        diag = self.diagnose(n_samples=diagnose_samples, generator=generator, warn=warn, _stacklevel=5)
        diag.chi2_history, diag.chi2_steps, diag.n_steps = history, hist_steps, n_steps
        return diag

    # ------------------------------------------------------------------ diagnostics
    @torch.no_grad()
    def diagnose(
        self,
        n_samples: int | None = None,
        generator: torch.Generator | None = None,
        *,
        chi2_tol: float = 0.05,
        w2_ratio_tol: float = 1.5,
        w2_points: int = 512,
        w2_draws: int = 10,
        warn: bool = True,
        _stacklevel: int = 3,
    ) -> SemidiscreteDiagnostics:
        """Check the current potential on ``n_samples`` fresh noise draws (default ``min(max(16 N,
        8192), 2^20)``) and ``warnings.warn`` about what looks off:

        - unbiased chi^2 above ``chi2_tol`` (0.05: the assigned mass is off by about 22 % RMS);
        - more data points never assigned than a perfect fit leaves, ``(1 - 1/N)^M``, by over
          ``0.01 + 4 sd``;
        - the assigned targets (``w2_points`` of them, with multiplicity) are more than
          ``w2_ratio_tol`` times farther, in W2, from a uniform sample of the data than *every one*
          of ``w2_draws`` other uniform samples of that size (random pairing) is. A perfect fit's
          targets are such a uniform sample, so they exceed the largest of 10 draws 1 time in 11 and
          1.5 times it far more rarely. This warning also needs the chi^2 estimate to exceed 4 times
          its sampling spread ``sqrt(2 (N - 1)) / M`` (a real mass error, moved far): for tiny data
          sets the W2 floor is pure multinomial noise, which alone must not raise an alarm.
          ``w2_ratio`` itself is reported against the mean of the draws.
        """
        n = self.n_points
        m = int(n_samples or min(max(16 * n, 8192), 2**20))
        if m < 2:
            raise ConfigError(f"n_samples must be >= 2, got {m}.")
        k = min(int(w2_points), m)
        counts, kept = self._counts(m, self.potential, generator, keep=k)
        chi2, chi2_plugin = self._chi2(counts)
        rel = counts.double() * (n / m)
        c_max, c_min = int(counts.max()), int(counts.min())
        unassigned = float((counts == 0).double().mean())
        p0 = math.exp(m * math.log1p(-1.0 / n)) if n > 1 else 0.0
        sd0 = math.sqrt(p0 * (1 - p0) / n)
        draw = torch.randint(n, (1 + max(2, w2_draws), k), generator=generator, device=draw_device(generator))
        ref = self.data[draw[0].to(self.data.device)]
        w2_assigned = _w2(self.data[kept], ref)
        null = torch.tensor([_w2(self.data[d.to(self.data.device)], ref) for d in draw[1:]])
        w2_random, w2_sd, w2_max = float(null.mean()), float(null.std()), float(null.max())
        ratio = w2_assigned / w2_random if w2_random > 0 else (1.0 if w2_assigned == 0 else math.inf)
        msgs = []
        if chi2 > chi2_tol:
            msgs.append(f"assignment frequencies are far from uniform: chi2 = {chi2:.4f} > {chi2_tol:g}")
        if unassigned > p0 + 0.01 + 4 * sd0:
            msgs.append(
                f"{unassigned:.1%} of the {n} data points were never assigned in {m} draws "
                f"(a fitted potential leaves {p0:.1%})"
            )
        chi2_sd = math.sqrt(2.0 * max(n - 1, 1)) / m  # null spread of the unbiased chi2 estimate
        if w2_assigned > w2_ratio_tol * w2_max and chi2 > 4 * chi2_sd:
            msgs.append(
                f"assigned targets are {ratio:.2f}x farther (W2) from the data than random pairing's, "
                f"over {w2_ratio_tol:g}x its largest of {len(null)} draws"
            )
        diag = SemidiscreteDiagnostics(
            chi2=chi2,
            chi2_plugin=chi2_plugin,
            n_samples=m,
            mass_ratio=c_max / c_min if c_min > 0 else math.inf,
            mass_max=float(rel.max()),
            mass_min=float(rel.min()),
            unassigned_fraction=unassigned,
            unassigned_expected=p0,
            w2_assigned=w2_assigned,
            w2_random=w2_random,
            w2_random_sd=w2_sd,
            w2_ratio=ratio,
            n_steps=int(self.fit_steps),
            warnings=msgs,
        )
        if warn:
            for msg in msgs:
                # point at the caller: diagnose <- no_grad wrapper <- caller (two more from fit)
                warnings.warn(f"SemidiscreteCoupling: {msg}; fit longer or lower lr.", stacklevel=_stacklevel)
        self.last_diagnostics = diag
        return diag

    # ------------------------------------------------------------------ persistence
    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        key = prefix + "data_sha256"
        if key in state_dict and not torch.equal(state_dict[key].to("cpu"), self.data_sha256.to("cpu")):
            raise InputError(
                "the semidiscrete potential being loaded was fitted on a different data set "
                f"(sha256 {bytes(state_dict[key].tolist()).hex()[:12]}..., this coupling has "
                f"{bytes(self.data_sha256.tolist()).hex()[:12]}...)."
            )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def config(self) -> dict[str, Any]:
        """JSON-serialisable settings (what :meth:`load` needs besides the tensors)."""
        return {
            "class": type(self).__name__,
            "epsilon": self.epsilon,
            "query_chunk": self.query_chunk,
            "data_chunk": self.data_chunk,
            "store_data": self.store_data,
            "feature_shape": list(self.feature_shape),
            "n_points": self.n_points,
            "data_sha256": bytes(self.data_sha256.tolist()).hex(),
        }

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``model.safetensors`` (potential, fingerprint, data if ``store_data``) + ``config.json``."""
        save_pretrained(directory, self.state_dict(), self.config())

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        data: torch.Tensor | None = None,
        device: str | torch.device = "cpu",
    ) -> SemidiscreteCoupling:
        """Rebuild a coupling saved by :meth:`save`; pass ``data`` if saved with ``store_data=False``."""
        state, cfg = load_pretrained(directory, device)
        if data is None:
            if "data" not in state:
                raise InputError(f"{str(directory)!r} was saved without its data (store_data=False); pass data=.")
            data = state["data"].reshape(-1, *cfg["feature_shape"])
        sd = cls(
            data.to(device),
            epsilon=cfg["epsilon"],
            query_chunk=cfg["query_chunk"],
            data_chunk=cfg["data_chunk"],
            store_data=cfg["store_data"],
        )
        sd.load_state_dict(state)
        return sd

    save_pretrained = save
    from_pretrained = load

    def extra_repr(self) -> str:
        return f"n_points={self.n_points}, dim={self.data.shape[1]}, epsilon={self.epsilon}"
