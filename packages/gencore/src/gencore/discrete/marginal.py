"""Discrete diffusion with marginal transitions (the noise model of DiGress).

Vignac et al. 2023, "DiGress: Discrete Denoising Diffusion for Graph Generation" (ICLR), section 4.1: every
categorical variable (a node type, an edge class with "no edge" as class 0) is corrupted towards the
*marginal* distribution ``m`` of its classes in the training data, rather than towards uniform noise or a
mask (Austin et al. 2021, D3PM). Written in the suite's time convention (``t = 0`` noise, ``t = 1`` data)
with a :class:`gencore.discrete.DiscreteSchedule` ``alpha_t`` (0 at ``t = 0``, 1 at ``t = 1``):

    q_t(v | c) = alpha_t [v = c] + (1 - alpha_t) m_v                               (forward marginal)
    q(v | j; t <- s) = (alpha_t / alpha_s) [v = j] + (1 - alpha_t / alpha_s) m_v   (noising from s > t to t)

so ``x_0 ~ m`` exactly for any data. The reverse step from ``t`` to ``s > t`` averages the exact posterior
over the denoiser's prediction ``p(c | x_t)`` of the clean class (DiGress eq. 4):

    p(x_s = j | x_t = v) = sum_c p(c | x_t) q(v | j; t <- s) q_s(j | c) / q_t(v | c).

This module holds only the process math; the graph network (and the symmetrisation of edge classes) lives
with the caller (gengraph's DiGress baseline). ``tests/test_discrete_marginal.py`` checks the
forward marginals, that the posterior is a distribution consistent with them, and that the exact denoiser
turns the reverse chain into a sampler of the data distribution.
"""

from __future__ import annotations

import torch

from gencore.discrete.ctmc import DiscreteSchedule, discrete_schedule, sample_categorical
from gencore.errors import ConfigError
from gencore.rng import draw_device

__all__ = ["MarginalTransitionDiffusion"]


class MarginalTransitionDiffusion:
    """Marginal-transition corruption of ``K``-class variables, ``marginal: [K]`` (normalised here)."""

    def __init__(self, marginal: torch.Tensor, schedule: str | DiscreteSchedule = "cosine") -> None:
        m = torch.as_tensor(marginal, dtype=torch.float64).flatten()
        if m.numel() < 1 or bool((m < 0).any()) or not float(m.sum()) > 0:
            raise ConfigError("the marginal must hold non-negative class weights with a positive sum.")
        self.marginal = m / m.sum()
        self.schedule = discrete_schedule(schedule)

    @property
    def n_classes(self) -> int:
        return int(self.marginal.numel())

    def _alpha(self, t: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(t, dtype=torch.float64, device=like.device)
        return self.schedule.alpha(t).to(torch.float64)

    def forward_probs(self, clean: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """``q_t(. | c)``: ``[..., K]`` for class indices ``clean: [...]``; ``t`` broadcasts against ``clean``."""
        a = self._alpha(t, clean)
        a = a.reshape(*a.shape, 1) if a.dim() else a
        onehot = torch.nn.functional.one_hot(clean.long(), self.n_classes).to(torch.float64)
        return a * onehot + (1 - a) * self.marginal.to(clean.device)

    def sample(
        self, clean: torch.Tensor, t: torch.Tensor | float, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Draw ``x_t ~ q_t(. | clean)``."""
        return sample_categorical(self.forward_probs(clean, t), generator=generator)

    def prior(self, shape: tuple[int, ...], *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``x_0 ~ m`` with the given shape, on ``generator``'s device (without one, the marginal's)."""
        m = self.marginal.to(draw_device(generator, self.marginal.device))
        return sample_categorical(m.expand(*shape, -1), generator=generator)

    def posterior_probs(self, x_t: torch.Tensor, p_clean: torch.Tensor, t: float, s: float) -> torch.Tensor:
        """``p(x_s = . | x_t)`` ``[..., K]`` for ``s > t``, given the predicted clean-class probabilities
        ``p_clean: [..., K]`` (rows need not be normalised)."""
        if not 0.0 <= t < s <= 1.0:
            raise ConfigError(f"the reverse step needs 0 <= t < s <= 1, got t={t}, s={s}.")
        m = self.marginal.to(x_t.device)
        a_t = float(self.schedule.alpha(torch.tensor(t, dtype=torch.float64)))
        a_s = float(self.schedule.alpha(torch.tensor(s, dtype=torch.float64)))
        ratio = a_t / a_s if a_s > 0 else 0.0
        p = p_clean.to(torch.float64)
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-300)
        onehot_v = torch.nn.functional.one_hot(x_t.long(), self.n_classes).to(torch.float64)  # [..., K] over v
        # q(v | j; t <- s) as a function of j: ratio [v = j] + (1 - ratio) m_v
        m_v = (onehot_v * m).sum(-1, keepdim=True)  # [..., 1]
        q_step = ratio * onehot_v + (1 - ratio) * m_v  # [..., K] over j
        # q_t(v | c) as a function of c, and q_s(j | c) as a [K(c), K(j)] matrix
        q_t_v = a_t * onehot_v + (1 - a_t) * m_v  # [..., K] over c
        eye = torch.eye(self.n_classes, dtype=torch.float64, device=x_t.device)
        q_s = a_s * eye + (1 - a_s) * m  # [c, j]
        weights = p / q_t_v.clamp_min(1e-300)  # [..., K] over c
        return q_step * (weights @ q_s)
