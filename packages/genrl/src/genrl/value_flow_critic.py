"""Value Flows' critic: a flow-matching model of the return distribution.

Dong, Zheng, Finn, Sadigh & Eysenbach, "Value Flows", ICLR 2026 (arXiv:2510.07650).

A vector field ``v(z_t, t | s, a)`` carries ``z_0 ~ N(0, 1)`` (t = 0, the suite's source) to a return
sample ``z_1 ~ Z(s, a)`` (t = 1, data) along the linear path. With ``phi_t(eps | s, a)`` the flow of the
*target* field from ``eps`` up to time ``t``, ``m = 1 - terminal`` and discount ``gamma``, the critic loss is
a confidence-weighted sum of two flow-matching terms:

* BCFM (bootstrapped conditional flow matching): the return target ``y = r + gamma m phi_1(eps | s', a')``
  is coupled with the same ``eps``; ``z_t = t y + (1 - t) eps`` and ``|| v(z_t, t | s, a) - (y - eps) ||^2``.
  Alone it is a distributional Bellman backup whose minimiser transports N(0, 1) to the law of ``y``.
* DCFM (distributional conditional flow matching): the path of ``(s, a)`` is the push-forward of the path of
  ``(s', a')`` under ``z -> r + gamma m z`` at every ``t`` (the paper's ``p(z_t | t, s, a) =
  gamma^-1 E p((z_t - r) / gamma | t, s', a')``). By the continuity equation its velocity at
  ``z_t = r + gamma m z'_t`` is ``gamma m v'(z'_t, t | s', a')``, so with ``z'_t = phi_t(eps | s', a')``
  the term is ``|| v(r + gamma m z'_t, t | s, a) - gamma m v'(z'_t, t | s', a') ||^2``.

  The reference implementation (chongyi-zheng/value-flows, ``agents/value_flows.py``) regresses on
  ``v'(z'_t, t | s', a')`` without the factor ``gamma m``; that field does not transport the pushed-forward
  path (and for terminal transitions asks a constant ``z_t = r`` to move). We use ``gamma m v'``;
  ``tests/test_value_flows.py`` pins it against a finite difference of the pushed-forward path.

* Confidence weights: the flow-derivative ODE ``d/dt (dz_t/deps) = dv/dz (z_t, t) * dz_t/deps`` with
  ``dz_0/deps = 1`` gives ``J = dz_1/deps``; ``|J|`` estimates the return standard deviation (exact when
  ``Z`` is Gaussian and the flow straight) and ``E_eps J^2`` the variance. Transitions are weighted by
  ``w = sigmoid(-temp / |J|) + 1/2`` in ``[1/2, 1]``, computed with the target field and without gradient.
* ``Q(s, a) = E_eps[eps + v(eps, 0 | s, a)]``: for the linear path ``v(z, 0) = E[z_1 - z_0 | z_0 = z]``,
  so this one-step estimate is unbiased for the mean return; it is averaged over ``q_noises`` noises.

Returns are clipped to ``[return_min, return_max]`` after integration.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.solvers import solve_ode
from genrl.critics import Batch, CriticConfig, bellman_mask
from genrl.networks import Ensemble, ReturnVelocity


def bcfm_target(target, r, gm, eps, t, next_obs, next_act) -> tuple[torch.Tensor, torch.Tensor]:
    """BCFM point and velocity: ``y = r + gm * phi_1(eps | s', a')``, ``z_t = t y + (1 - t) eps``, ``u = y - eps``.

    All of ``r, gm, eps, t`` are ``[B, 1]``; ``gm = discount * (1 - terminal)``.
    """
    y = r + gm * target.flow(eps, next_obs, next_act)[0]
    return t * y + (1 - t) * eps, y - eps


def dcfm_target(target, r, gm, eps, t, next_obs, next_act) -> tuple[torch.Tensor, torch.Tensor]:
    """DCFM point and velocity: ``z_t = r + gm * phi_t(eps | s', a')``, ``u = gm * v'(phi_t(eps), t | s', a')``.

    ``u`` is the time derivative of ``z_t`` along the pushed-forward path (the factor ``gm`` included); for an
    ensemble the path is the members' mean, so ``v'`` is each member's field at its own point, averaged.
    """
    z_next_t, v_next_t = target.path(eps, next_obs, next_act, t.squeeze(-1))
    return r + gm * z_next_t, gm * v_next_t


class FlowReturnCritic(nn.Module):
    """An ensemble of return vector fields ``v_k(z_t, t | s, a)``; outputs are averaged over members."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: CriticConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.fields = Ensemble(ReturnVelocity(obs_dim, action_dim, cfg.hidden, cfg.depth) for _ in range(cfg.ensemble))

    # ------------------------------------------------------------------ integration
    def flow(
        self,
        eps: torch.Tensor,
        obs: torch.Tensor,
        act: torch.Tensor,
        end_time: torch.Tensor | None = None,
        member: int | None = None,
        jacobian: bool = False,
        steps: int | None = None,
        method: str = "euler",
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Integrate ``z`` (and ``J = dz/deps``) from ``t = 0`` to ``end_time [B]`` (default 1).

        ``steps`` uniform steps of gencore's fixed-step ``method`` (default: ``cfg.flow_steps`` Euler steps, the
        setting training uses; more steps or a higher-order method only change how the learned field is read).
        ``member=None`` averages the members' end points (each integrated from the same ``eps``).
        Per-sample end times use the rescaled clock ``t = s * end_time``, ``s`` in [0, 1], so one grid serves all.
        Returns ``(z [B, 1], J [B, 1] or None)``.
        """
        members = range(len(self.fields)) if member is None else [member]
        end = torch.ones_like(eps[:, 0]) if end_time is None else end_time.reshape(-1)
        zs, js = [], []
        for k in members:
            net = self.fields[k]

            def field(x: torch.Tensor, s: torch.Tensor, net: nn.Module = net) -> torch.Tensor:
                t = s * end
                z = x[:, :1]
                if not jacobian:
                    return end[:, None] * net(z, t, obs, act)
                with torch.enable_grad():
                    zz = z.detach().requires_grad_(True)
                    v = net(zz, t, obs, act)
                    (dv,) = torch.autograd.grad(v.sum(), zz)
                return torch.cat([end[:, None] * v.detach(), end[:, None] * dv * x[:, 1:]], -1)

            x0 = torch.cat([eps, torch.ones_like(eps)], -1) if jacobian else eps
            x1 = solve_ode(field, x0, steps=self.cfg.flow_steps if steps is None else steps, method=method).x
            zs.append(x1[:, :1])
            if jacobian:
                js.append(x1[:, 1:])
        z = torch.stack(zs).mean(0)
        if end_time is None:
            z = z.clamp(self.cfg.return_min, self.cfg.return_max)
        return z, (torch.stack(js).mean(0) if jacobian else None)

    def path(
        self, eps: torch.Tensor, obs: torch.Tensor, act: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Point and time derivative of the flow :meth:`flow` reads at times ``t [B]``: ``(mean_k phi^k_t(eps),
        mean_k v_k(phi^k_t(eps), t))``, each ``[B, 1]`` (the mean field at the mean point is not the derivative
        of the mean path when the members differ)."""
        zs, vs = [], []
        for k, net in enumerate(self.fields):
            z, _ = self.flow(eps, obs, act, end_time=t, member=k)
            zs.append(z)
            vs.append(net(z, t, obs, act))
        return torch.stack(zs).mean(0), torch.stack(vs).mean(0)

    def velocity(self, z: torch.Tensor, t: torch.Tensor, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Mean of the members' fields ``[B, 1]``."""
        return self.fields(z, t, obs, act).mean(0)

    # ------------------------------------------------------------------ read-outs
    def q(self, obs: torch.Tensor, act: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        b, m = obs.shape[0], self.cfg.q_noises
        eps = torch.randn(b * m, 1, generator=generator, dtype=obs.dtype, device=obs.device)
        o, a = obs.repeat(m, 1), act.repeat(m, 1)
        z1 = eps + self.velocity(eps, torch.zeros_like(eps[:, 0]), o, a)
        return z1.clamp(self.cfg.return_min, self.cfg.return_max).reshape(m, b).mean(0)

    def sample(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        n: int,
        generator=None,
        steps: int | None = None,
        method: str = "euler",
    ) -> torch.Tensor:
        """``n`` return samples per state ``[B, n]`` from ``steps`` steps of ``method`` (see :meth:`flow`)."""
        b = obs.shape[0]
        eps = torch.randn(b * n, 1, generator=generator, dtype=obs.dtype, device=obs.device)
        z, _ = self.flow(eps, obs.repeat_interleave(n, 0), act.repeat_interleave(n, 0), steps=steps, method=method)
        return z.reshape(b, n)

    def return_variance(self, obs: torch.Tensor, act: torch.Tensor, n: int = 8, generator=None) -> torch.Tensor:
        """``E_eps[(dz_1/deps)^2]`` from the flow-derivative ODE, ``[B]``."""
        b = obs.shape[0]
        eps = torch.randn(b * n, 1, generator=generator, dtype=obs.dtype, device=obs.device)
        _, jac = self.flow(eps, obs.repeat_interleave(n, 0), act.repeat_interleave(n, 0), jacobian=True)
        return (jac.reshape(b, n) ** 2).mean(1)

    # ------------------------------------------------------------------ training
    def loss(
        self,
        batch: Batch,
        next_actions: torch.Tensor,
        target: FlowReturnCritic,
        discount: float,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        obs, act, nobs = batch["observations"], batch["actions"], batch["next_observations"]
        r = batch["rewards"][:, None]
        gm = discount * bellman_mask(batch)[:, None]  # gamma * (1 - terminal)
        b = obs.shape[0]
        kw = {"generator": generator, "dtype": obs.dtype, "device": obs.device}
        with torch.no_grad():
            _, jac = target.flow(torch.randn(b, 1, **kw), obs, act, jacobian=True)
            std = jac.abs().squeeze(-1)
            weights = torch.sigmoid(-self.cfg.confidence_temp / std.clamp_min(1e-6)) + 0.5
            eps = torch.randn(b, 1, **kw)
            t = torch.rand(b, 1, **kw)
            z_bcfm, u_bcfm = bcfm_target(target, r, gm, eps, t, nobs, next_actions)
            z_dcfm, u_dcfm = dcfm_target(target, r, gm, eps, t, nobs, next_actions)
        tt = t.squeeze(-1)
        v_b = self.fields(z_bcfm, tt, obs, act)  # [K, B, 1]
        v_d = self.fields(z_dcfm, tt, obs, act)
        bcfm = ((v_b - u_bcfm[None]) ** 2).sum(0).squeeze(-1)  # summed over members, [B]
        dcfm = ((v_d - u_dcfm[None]) ** 2).sum(0).squeeze(-1)
        loss = (weights * (self.cfg.bcfm_weight * bcfm + self.cfg.dcfm_weight * dcfm)).mean()
        return loss, {
            "critic_loss": loss.detach(),
            "bcfm_loss": bcfm.mean().detach(),
            "dcfm_loss": dcfm.mean().detach(),
            "confidence_weight": weights.mean().detach(),
            "return_std": std.mean().detach(),
        }
