"""Can a latent prior learn which codes occur together? GGBall's flow prior against the masked code prior.

    python benchmarks/bench_prior_cooccurrence.py OUT.json [--steps 2000] [--hidden 64] [--layers 2]
        [--priors flow,masked-codes] [--geometry euclidean]

A synthetic task isolates what GGBall's decoder needs from its prior: ``--codes`` (64) points ``N(0, I)`` in
``--dim`` (8) dimensions (mapped to the ball with ``exp_0`` for ``--geometry ball``) are paired by a fixed random
perfect matching, and every set holds ``--pairs`` (16) whole pairs in random order, so each code's partner is
always in its set, and every code is used equally often. A prior that learned only the codes' usage puts a node
beside its partner in ``1 - (1 - 1/K)^(N - 1)`` of the cases (0.38 at 64 codes and 32 nodes); the data: always.

- ``flow``: :class:`~gengraph.models.latent_flow.SetVelocity` trained with ``latent_flow_loss`` on the code
  points (independent coupling), sampled with ``sample_latent_sets`` (midpoint, 50 steps) and snapped to the
  nearest code, as ``gengraph sample`` does;
- ``masked-codes``: :class:`~gengraph.models.code_prior.CodeTokenPrior` trained with ``code_prior_loss`` on the
  code indices, sampled with ``sample_code_sets`` (50 steps).

Both: the same width and depth, Adam at 1e-3 with a cosine schedule, gradient clipping at 1, batch 32, ``--steps``
steps, one thread. Reported per prior: the share of sampled nodes whose partner code is in the same set, distinct
codes per set, and the training time.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from gencore.io import write_json
from gencore.tables import format_table
from gengraph.hyperbolic.geometry import make_geometry
from gengraph.models.code_prior import CodePriorConfig, CodeTokenPrior, code_prior_loss, sample_code_sets
from gengraph.models.latent_flow import SetVelocity, latent_flow_loss, sample_latent_sets

PRIORS = ("flow", "masked-codes")
BATCH, SAMPLES = 32, 256


def pairing(n_codes: int, generator: torch.Generator) -> torch.Tensor:
    """``partner[c]``: a random perfect matching of the codes."""
    order = torch.randperm(n_codes, generator=generator)
    partner = torch.empty(n_codes, dtype=torch.long)
    partner[order[0::2]], partner[order[1::2]] = order[1::2], order[0::2]
    return partner


def code_sets(partner: torch.Tensor, pairs: int, b: int, generator: torch.Generator) -> torch.Tensor:
    """``b`` sets of ``pairs`` whole pairs each, nodes in random order: ``[b, 2 pairs]`` code indices."""
    firsts = torch.nonzero(partner > torch.arange(len(partner))).squeeze(1)  # one code of every pair
    rows = []
    for _ in range(b):
        chosen = firsts[torch.randperm(len(firsts), generator=generator)[:pairs]]
        both = torch.cat([chosen, partner[chosen]])
        rows.append(both[torch.randperm(len(both), generator=generator)])
    return torch.stack(rows)


def partner_share(codes: torch.Tensor, partner: torch.Tensor) -> float:
    """Share of the nodes whose partner code is in their set."""
    present = (codes[:, :, None] == partner[codes][:, None, :]).any(1)  # [b, n]: node j's partner is in the set
    return float(present.float().mean())


def train(model: nn.Module, loss_of, sets, steps: int) -> float:
    """``steps`` Adam steps on ``loss_of(codes [BATCH, n])`` for batches ``sets()``; returns the seconds taken."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    start = time.perf_counter()
    for _ in range(steps):
        loss = loss_of(sets())
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return time.perf_counter() - start


def run_flow(args, geo, points: torch.Tensor, sets, full: torch.Tensor) -> tuple[torch.Tensor, float]:
    noise = torch.Generator().manual_seed(2)
    model = SetVelocity(geo, hidden=args.hidden, layers=args.layers)
    many = torch.cat([sets() for _ in range(32)])
    model.fit_centre(points[many], torch.ones(many.shape, dtype=torch.bool))
    seconds = train(model, lambda codes: latent_flow_loss(model, geo, points[codes], full, noise), sets, args.steps)
    mask = torch.ones(SAMPLES, full.shape[1], dtype=torch.bool)
    x = sample_latent_sets(model.eval(), geo, mask, generator=torch.Generator().manual_seed(3))
    return geo.pairwise_dist(x.reshape(-1, args.dim), points).argmin(1).view(mask.shape), seconds


def run_masked(args, sets, full: torch.Tensor) -> tuple[torch.Tensor, float]:
    noise = torch.Generator().manual_seed(2)
    model = CodeTokenPrior(CodePriorConfig(n_codes=args.codes, hidden=args.hidden, layers=args.layers))
    seconds = train(model, lambda codes: code_prior_loss(model, codes, full, noise)[0], sets, args.steps)
    mask = torch.ones(SAMPLES, full.shape[1], dtype=torch.bool)
    return sample_code_sets(model.eval(), mask, generator=torch.Generator().manual_seed(3)), seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--codes", type=int, default=64)
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--geometry", default="euclidean", choices=("euclidean", "ball"))
    p.add_argument("--priors", default=",".join(PRIORS))
    args = p.parse_args()
    if args.codes % 2 or args.pairs > args.codes // 2:
        p.error(f"--codes must be even and hold --pairs pairs, got {args.codes} codes and {args.pairs} pairs.")
    torch.set_num_threads(1)
    geo = make_geometry(args.geometry, args.dim)
    setup = torch.Generator().manual_seed(0)
    points = geo.expmap0(torch.randn(args.codes, args.dim, generator=setup))
    partner = pairing(args.codes, setup)
    n = 2 * args.pairs
    independent = partner_share(torch.randint(args.codes, (SAMPLES, n), generator=setup), partner)
    full = torch.ones(BATCH, n, dtype=torch.bool)
    rows = []
    for prior in args.priors.split(","):
        torch.manual_seed(0)
        data = torch.Generator().manual_seed(1)

        def sets(data=data) -> torch.Tensor:
            return code_sets(partner, args.pairs, BATCH, data)

        if prior == "flow":
            codes, seconds = run_flow(args, geo, points, sets, full)
        elif prior == "masked-codes":
            codes, seconds = run_masked(args, sets, full)
        else:
            p.error(f"unknown prior {prior!r}; choose from {', '.join(PRIORS)}")
        row = {
            "prior": prior, "geometry": args.geometry, "hidden": args.hidden, "layers": args.layers,
            "steps": args.steps, "partner_in_set": partner_share(codes, partner), "independent_draws": independent,
            "distinct_codes": float(torch.tensor([len(set(r.tolist())) for r in codes]).float().mean()),
            "nodes": n, "train_s": round(seconds, 1),
        }  # fmt: skip
        print(row, flush=True)
        rows.append(row)
    write_json(args.out, {"args": vars(args), "rows": rows})
    print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
