"""A toy MDP whose return distribution is known in closed form and bimodal.

``BimodalChain``: an episode starts at position ``k = 0`` of a chain of ``length`` states with a
context ``c ~ U[0, 1]`` drawn once per episode. Each step moves one position right (the 1-D action
is ignored, so every policy has the same return law). Rewards are 0 until the last position, whose
reward is ``R ~ 1/2 N(-m(c), sigma^2) + 1/2 N(+m(c), sigma^2)`` with ``m(c) = 0.5 + c``; the episode
then terminates. Observation: ``[k / (length - 1), c]``.

With ``j = length - 1 - k`` steps to go, the discounted return from ``(k, c)`` (convention
``Z = r + discount * (1 - terminal) * Z'``) is exactly

    ``Z(k, c) ~ 1/2 N(-discount^j m(c), (discount^j sigma)^2) + 1/2 N(+discount^j m(c), (discount^j sigma)^2)``

with mean 0 and variance ``discount^(2j) (m(c)^2 + sigma^2)``: two modes whose separation and the
variance differ from state to state, which is what distributional critics and variance estimates are
tested on. :class:`ExactReturnField` is the exact flow-matching field of that law (an oracle for Value Flows).

Where the randomness enters (``randomness``):

* ``"reward"`` (the default): the last reward itself is random, as above.
* ``"transition"``: the same ``R`` is drawn by the *transition* into the last position and shown there as a
  third observation entry ``w`` (0 before), and the last reward is ``w``: deterministic given the state. Every
  state before the last has exactly the law above; the last state's return is the point mass at ``w``. Value
  Flows' DCFM term is biased by a random reward at a terminal transition (``benchmarks/diag_dcfm_bias.py``)
  and not by a random next state, so the two variants separate that bias from the rest of the comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from gencore.checks import check_choice
from gencore.errors import ConfigError, InputError
from genrl.dataset import OfflineDataset

RANDOMNESS = ("reward", "transition")


@dataclass(frozen=True)
class BimodalChain:
    """Parameters of the toy chain (see the module docstring)."""

    length: int = 3
    sigma: float = 0.1
    discount: float = 0.9
    randomness: str = "reward"

    def __post_init__(self) -> None:
        check_choice(self.randomness, RANDOMNESS, "toy-chain randomness")
        if self.length < 1:
            raise ConfigError(f"a toy chain needs length >= 1, got {self.length}.")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):  # a negative sd would make return_cdf a point mass
            raise ConfigError(f"the toy chain's sigma must be a finite non-negative number, got {self.sigma}.")
        if not (math.isfinite(self.discount) and 0.0 <= self.discount <= 1.0):  # discount^j scales the mode's sd
            raise ConfigError(f"the toy chain's discount must be in [0, 1], got {self.discount}.")
        if self.randomness == "transition" and self.length < 2:
            raise ConfigError(f"a toy chain with random transitions needs length >= 2, got {self.length}.")

    @property
    def obs_dim(self) -> int:
        return 2 if self.randomness == "reward" else 3

    def mode_offset(self, c: np.ndarray) -> np.ndarray:
        return 0.5 + np.asarray(c)

    def observation(self, k: np.ndarray, c: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        """``[k / (length - 1), c]``, and with random transitions ``w`` (the drawn reward) at the last position."""
        k = np.asarray(k, np.float64)
        cols = [k / max(self.length - 1, 1), np.asarray(c, np.float64)]
        if self.randomness == "transition":
            w = np.zeros_like(k) if w is None else np.asarray(w, np.float64)
            cols.append(np.where(k == self.length - 1, w, 0.0))
        return np.stack(cols, -1)

    def steps_to_go(self, obs: np.ndarray) -> np.ndarray:
        k = np.rint(np.asarray(obs)[..., 0] * max(self.length - 1, 1))
        return (self.length - 1 - k).astype(np.int64)

    def return_modes(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``Z(obs) ~ 1/2 N(centres[:, 0], sd^2) + 1/2 N(centres[:, 1], sd^2)``: ``centres [B, 2]``, ``sd [B]``.

        ``sd`` is 0 for a point mass (the last state with random transitions).
        """
        obs = np.asarray(obs, np.float64)
        togo = self.steps_to_go(obs)
        scale = self.discount**togo
        mu = scale * self.mode_offset(obs[..., 1])
        centres, sd = np.stack([-mu, mu], -1), scale * self.sigma
        if self.randomness == "transition":
            known = togo == 0
            centres = np.where(known[:, None], obs[:, 2:3], centres)
            sd = np.where(known, 0.0, sd)
        return centres, sd

    def return_variance(self, obs: np.ndarray) -> np.ndarray:
        centres, sd = self.return_modes(obs)
        return centres.var(-1) + sd**2

    def return_cdf(self, obs: np.ndarray, z: np.ndarray) -> np.ndarray:
        """``P(Z(obs) <= z)``: ``obs [B, D]``, ``z [B, G]`` -> ``[B, G]``."""
        centres, sd = self.return_modes(obs)
        sd = sd[:, None]
        safe = np.where(sd > 0, sd, 1.0)
        cdf = [
            np.where(sd > 0, 0.5 * (1.0 + _erf((z - c[:, None]) / (safe * math.sqrt(2.0)))), z >= c[:, None])
            for c in centres.T
        ]
        return 0.5 * (cdf[0] + cdf[1])

    def sample_returns(self, obs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        centres, sd = self.return_modes(obs)
        pick = rng.choice([0, 1], size=(len(centres), n))
        return np.take_along_axis(centres, pick, 1) + sd[:, None] * rng.standard_normal((len(centres), n))

    def dataset(self, n_episodes: int, seed: int = 0) -> OfflineDataset:
        """``n_episodes`` complete episodes under a uniform random 1-D action in [-1, 1]."""
        rng = np.random.default_rng(seed)
        L = self.length
        c = rng.uniform(0.0, 1.0, n_episodes)
        sign = rng.choice([-1.0, 1.0], size=n_episodes)
        final = sign * self.mode_offset(c) + self.sigma * rng.standard_normal(n_episodes)
        k = np.tile(np.arange(L), n_episodes)
        cc, ww = np.repeat(c, L), np.repeat(final, L)
        obs = self.observation(k, cc, ww)
        nxt = self.observation(np.minimum(k + 1, L - 1), cc, ww)
        last = k == L - 1
        rewards = np.zeros(n_episodes * L)
        rewards[last] = final
        return OfflineDataset(
            observations=obs,
            actions=rng.uniform(-1.0, 1.0, (n_episodes * L, 1)),
            rewards=rewards,
            terminals=last,
            truncations=np.zeros_like(last),
            next_observations=nxt,
            episode_starts=np.arange(n_episodes) * L,
        )


class ExactReturnField(nn.Module):
    """The exact linear-path field of the chain's return law: ``v(z, t | s) = E[Z - eps | t Z + (1 - t) eps = z]``.

    Called like Value Flows' learned field, ``(z [B, 1], t [B] or float, obs [B, D], act) -> [B, 1]``. For the
    mixture ``1/2 N(c_0, s^2) + 1/2 N(c_1, s^2)`` (:meth:`BimodalChain.return_modes`) each mode ``k`` contributes,
    with weight ``w_k`` its posterior given ``z_t = z`` (``z_t | k ~ N(t c_k, t^2 s^2 + (1 - t)^2)``),
    ``(c_k (1 - t) - z (1 - t - t s^2)) / (t^2 s^2 + (1 - t)^2)``: ``(E[Z | z, k] - z) / (1 - t)`` written without
    the 0/0 at ``t = 1`` (for a point mass, ``s = 0``, it is ``(c - z) / (1 - t)``, taken as 0 at ``t = 1``). Its flow
    from ``N(0, 1)`` is the monotone map ``F^-1(Phi(eps))``, so integrated exactly it samples the law exactly;
    integrated with few steps it shows the read-out's own error.
    """

    def __init__(self, chain: BimodalChain) -> None:
        super().__init__()
        self.chain = chain

    def forward(self, z: torch.Tensor, t: torch.Tensor | float, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        centres, sd = (
            torch.as_tensor(a, dtype=z.dtype, device=z.device)
            for a in self.chain.return_modes(obs.detach().cpu().numpy())
        )
        t = torch.as_tensor(t, dtype=z.dtype, device=z.device).reshape(-1, 1).expand_as(z)
        s2 = sd[:, None] ** 2
        var = (t**2 * s2 + (1 - t) ** 2).clamp_min(1e-12)  # 0 only for a point mass at t = 1, on its path
        drift = torch.cat([(c[:, None] * (1 - t) - z * (1 - t - t * s2)) / var for c in centres.T], -1)
        logw = torch.cat([-0.5 * (z - t * c[:, None]) ** 2 / var for c in centres.T], -1)
        return (logw.softmax(-1) * drift).sum(-1, keepdim=True)


def _erf(x: np.ndarray) -> np.ndarray:
    return torch.erf(torch.as_tensor(x, dtype=torch.float64)).numpy()


def cdf_errors(samples: np.ndarray, cdf_true: np.ndarray, grid: np.ndarray) -> dict[str, float]:
    """Distribution errors of model return samples ``[B, n]`` against the analytic CDF ``[B, G]`` on ``grid [G]``.

    * ``w1``: Wasserstein-1 ``int |F_model - F| dz`` (exact for the empirical CDF up to the grid's resolution).
    * ``crps``: expected CRPS of the model's forecast when outcomes follow the true law,
      ``E_y int (F_model(z) - 1[y <= z])^2 dz = int F_model^2 - 2 F_model F + F dz``.
    * ``crps_floor``: the same score of the true law itself (``int F (1 - F) dz``): ``crps - crps_floor``
      is the Cramer distance ``int (F_model - F)^2 dz``.

    The integrals run over the whole line: on the grid by the trapezoid rule, beyond it exactly, with the true
    law taken to hold no mass there (``F = 0`` below the grid, ``1`` above it) and ``F_model`` the samples' step
    function, so samples outside the grid count in full (they used to be dropped: a shift by 3 read as 2.3).
    Each value is averaged over the ``B`` states. Mismatched shapes or a grid that is not increasing are one
    :class:`InputError` (NumPy would broadcast one state's samples against every state's CDF).
    """
    samples, cdf_true, grid = np.asarray(samples), np.asarray(cdf_true), np.asarray(grid)
    if samples.ndim != 2 or samples.shape[1] == 0:
        raise InputError(f"cdf_errors: samples must have shape [B, n] with n >= 1, got {samples.shape}.")
    if grid.ndim != 1 or grid.size < 2 or not (np.diff(grid) > 0).all():
        raise InputError(f"cdf_errors: grid must be a strictly increasing 1-D array of >= 2 points, got {grid.shape}.")
    if cdf_true.shape != (samples.shape[0], grid.size):
        raise InputError(
            f"cdf_errors: cdf_true must have shape [B, G] = {(samples.shape[0], grid.size)} (one row per state of "
            f"samples, one column per grid point), got {cdf_true.shape}."
        )
    s = np.sort(samples, axis=1)
    n, ends = s.shape[1], np.ones((len(s), 1))
    f_model = np.stack([np.searchsorted(row, grid, side="right") / n for row in s])
    dz = np.zeros(grid.size)
    dz[:-1] += np.diff(grid) / 2
    dz[1:] += np.diff(grid) / 2
    # beyond the grid: widths of the steps of F_model (= k / n below, 1 - F_model = (n - k) / n above)
    below = np.diff(np.concatenate([np.minimum(s, grid[0]), grid[0] * ends], 1), axis=1)
    above = np.diff(np.concatenate([grid[-1] * ends, np.maximum(s, grid[-1])], 1), axis=1)
    f_below, g_above = np.arange(1, n + 1) / n, np.arange(n, 0, -1) / n
    w1 = (np.abs(f_model - cdf_true) * dz).sum(1) + (below * f_below).sum(1) + (above * g_above).sum(1)
    crps = ((f_model**2 - 2 * f_model * cdf_true + cdf_true) * dz).sum(1)
    crps += (below * f_below**2).sum(1) + (above * g_above**2).sum(1)
    floor = ((cdf_true * (1 - cdf_true)) * dz).sum(1)
    return {"w1": float(w1.mean()), "crps": float(crps.mean()), "crps_floor": float(floor.mean())}
