"""How far from the true return law does the *minimiser* of Value Flows' critic loss sit on the toy MDP?

Usage::

    python diag_dcfm_bias.py OUT.json [--samples 100000] [--steps 1000]

No network is trained: every field is exact. For one transition ``(s, a) -> (s', a')`` of
:class:`genrl.toy_mdp.BimodalChain`, the BCFM term regresses on the linear path ``A`` from N(0, 1) to the law of
``r + gamma m Z'``, and the DCFM term on the pushed-forward path ``B``: ``r + gamma m z'_t``, whose source is
``r + gamma m eps``, not N(0, 1) (Dong et al., "Value Flows", ICLR 2026; the source mismatch that Xu et al.,
"Path-Coupled Bellman Flows", ICML 2026, point out). With equal weights the population minimiser of the sum is
the density-weighted average of the two paths' fields,

    v*(z, t) = (p_A(z, t) u_A(z, t) + p_B(z, t) u_B(z, t)) / (p_A(z, t) + p_B(z, t)),

which transports ``1/2 (source_A + source_B)`` to the law; sampled from N(0, 1), as the critic is, it does not.
The script integrates ``v*`` from N(0, 1) with many Euler steps (so the read-out adds nothing) and reports W1
against the exact law, beside BCFM's minimiser ``u_A`` alone (exact up to the integration):

* terminal transition (``m = 0``): ``B`` is the reward itself, standing still (``u_B = 0``). The toy's reward is
  random (1/2 N(-(0.5 + c), 0.1^2) + 1/2 N(0.5 + c, 0.1^2)), so ``p_B`` is the reward law and DCFM pulls the
  field to zero wherever rewards lie;
* the transitions before it (``r = 0``, ``m = 1``): ``B`` starts from N(0, gamma^2) instead of N(0, 1).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from gencore.io import write_json
from gencore.solvers import solve_ode
from gencore.tables import format_table
from genrl.toy_mdp import BimodalChain, ExactReturnField, cdf_errors


def _path_density(chain: BimodalChain, z: torch.Tensor, t: torch.Tensor | float, obs: torch.Tensor) -> torch.Tensor:
    """Density of ``z_t = t Z + (1 - t) eps`` for the law ``Z(obs)`` (a two-mode mixture), ``[B, 1]``."""
    centres, sd = (torch.as_tensor(a, dtype=z.dtype) for a in chain.return_modes(obs.numpy()))
    var = t**2 * sd[:, None] ** 2 + (1 - t) ** 2
    return sum(
        0.5 * torch.exp(-0.5 * (z - t * c[:, None]) ** 2 / var) / torch.sqrt(2 * math.pi * var) for c in centres.T
    )


@torch.no_grad()
def minimiser_samples(chain: BimodalChain, obs: torch.Tensor, eps: torch.Tensor, steps: int, dcfm: bool):
    """Integrate BCFM's (``dcfm=False``) or BCFM + DCFM's population minimiser from ``eps [B, n]`` (Euler)."""
    field = ExactReturnField(chain)
    togo = chain.steps_to_go(obs.numpy())
    k = chain.length - 1 - togo
    nxt = torch.as_tensor(chain.observation(np.minimum(k + 1, chain.length - 1), obs[:, 1].numpy()), dtype=obs.dtype)
    n = eps.shape[1]
    terminal = torch.as_tensor(togo == 0).repeat_interleave(n)[:, None]
    o, o2 = obs.repeat_interleave(n, 0), nxt.repeat_interleave(n, 0)
    act = torch.zeros(len(o), 1, dtype=obs.dtype)
    g = chain.discount

    def minimiser(z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        u_a = field(z, t, o, act)
        if not dcfm:
            return u_a
        p_a = _path_density(chain, z, t, o)
        # non-terminal (r = 0): B = gamma x (the next state's linear path); terminal: B = the reward, at rest (at
        # t = 1 a path's density is its law's: the reward's)
        p_b = torch.where(terminal, _path_density(chain, z, 1.0, o), _path_density(chain, z / g, t, o2) / g)
        u_b = torch.where(terminal, torch.zeros_like(z), g * field(z / g, t, o2, act))
        return (p_a * u_a + p_b * u_b) / (p_a + p_b).clamp_min(1e-300)

    return solve_ode(minimiser, eps.reshape(-1, 1), steps=steps).x.reshape(eps.shape)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--samples", type=int, default=100_000, help="samples per state")
    p.add_argument("--steps", type=int, default=1000, help="Euler steps of the integration")
    args = p.parse_args()
    chain = BimodalChain()
    c = np.array([0.0, 0.5, 1.0])
    rows, records = [], []
    grid = np.linspace(-2.5, 2.5, 4001)
    for j in range(chain.length):  # steps to go
        k = np.full(c.shape, chain.length - 1 - j)
        obs = torch.as_tensor(chain.observation(k, c), dtype=torch.float64)
        cdf = chain.return_cdf(obs.numpy(), np.broadcast_to(grid, (len(c), grid.size)))
        eps = torch.randn(len(c), args.samples, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        rec = {"steps_to_go": j, "contexts": c.tolist()}
        for name, dcfm in (("bcfm", False), ("bcfm+dcfm", True)):
            z = minimiser_samples(chain, obs, eps, args.steps, dcfm).numpy()
            centres, _ = chain.return_modes(obs.numpy())
            rec[name] = {
                "w1": cdf_errors(z, cdf, grid)["w1"],
                "mode_centre_error": float(np.mean(np.abs(z).mean(1) - centres[:, 1])),
                "mode_sd": float(np.mean([np.abs(r).std() for r in z])),
            }
        rec["true_mode_sd"] = float(chain.return_modes(obs.numpy())[1][0])
        records.append(rec)
        rows.append(
            {
                "steps to go": j,
                "W1 BCFM minimiser": f"{rec['bcfm']['w1']:.4f}",
                "W1 BCFM+DCFM minimiser": f"{rec['bcfm+dcfm']['w1']:.4f}",
                "mode centre error (BCFM+DCFM)": f"{rec['bcfm+dcfm']['mode_centre_error']:+.4f}",
                "mode sd (BCFM+DCFM / true)": f"{rec['bcfm+dcfm']['mode_sd']:.4f} / {rec['true_mode_sd']:.4f}",
            }
        )
    write_json(args.out, {"args": vars(args), "records": records})
    print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
