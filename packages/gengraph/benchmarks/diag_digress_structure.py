"""Has a trained DiGress run learned graph structure, or only to copy its noisy input edge by edge?

    python benchmarks/diag_digress_structure.py OUT.json RUN [RUN ...] [--times 0.3,0.5,0.7,0.9] [--repeats 4]

For each ``digress`` run folder (``gengraph train --model digress`` or ``bench_reproduction.py``) and each time
``t`` (``t = 0`` noise, ``t = 1`` data), the training split of the run's data set (data seed 0, as
``bench_reproduction.py`` trains on) is noised with the run's marginal-transition process and the denoiser's
edge cross-entropy (nats per node pair, upper triangle) is set beside two references that use no structure:

- ``marginal_ce``: predicting the training edge marginal ``m`` for every pair (what a denoiser that ignores its
  input scores);
- ``copy_ce``: the exact posterior of each pair's clean class given only that pair's noisy class,
  ``p(c | v) ∝ q_t(v | c) m_c`` (the best any edge-by-edge predictor can do).

A denoiser at ``copy_ce`` has learned nothing about how edges depend on each other: sampling from it draws
each edge independently with the data's density (an Erdos-Renyi graph with the right size and density). A
denoiser below ``copy_ce`` uses structure. The same noised graphs (seeded) serve every run.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from torch.nn import functional as F

from gencore.discrete.marginal import MarginalTransitionDiffusion
from gencore.io import write_json
from gengraph.batch import pack
from gengraph.datasets import load_dataset
from gengraph.experiment import read_run
from gengraph.models.digress import DigressDenoiser, noisy_edges


def pair_ce(log_probs: torch.Tensor, edges: torch.Tensor, pair: torch.Tensor) -> float:
    """Mean ``-log p(clean class)`` over the node pairs of ``pair`` (log_probs ``[B, N, N, K]``)."""
    nll = -log_probs.gather(-1, edges[..., None]).squeeze(-1)
    return float((nll * pair).sum() / pair.sum())


def diagnose(run: Path, times: list[float], repeats: int) -> list[dict]:
    info = read_run(run)
    if info["config"]["model"] != "digress":
        raise SystemExit(f"{run}: a {info['config']['model']} run; this diagnostic reads digress runs.")
    model = DigressDenoiser.from_pretrained(run / "denoiser" / "model").eval()
    graphs = load_dataset(info["config"]["dataset"], "train")  # the split bench_reproduction.py trains on
    edges, nodes, mask = pack(graphs, info["n_max"])
    noise = MarginalTransitionDiffusion(info["edge_marginal"])
    m = noise.marginal
    pair = (mask[:, :, None] & mask[:, None, :]).triu(1)
    pf = pair.to(torch.float64)
    rows = []
    for t in times:
        g = torch.Generator().manual_seed(0)
        alpha = float(noise.schedule.alpha(torch.tensor(t, dtype=torch.float64)))
        model_ce, copy_ce = [], []
        for _ in range(repeats):
            et = noisy_edges(noise, edges, torch.full((len(edges),), t), mask, g)
            with torch.no_grad():
                _, logits = model(nodes * mask, torch.full((len(edges),), t), edges_t=et, mask=mask)
            model_ce.append(pair_ce(F.log_softmax(logits.double(), -1), edges, pf))
            # q_t(v | c) = alpha [v = c] + (1 - alpha) m_v, as a function of the clean class c
            lik = alpha * F.one_hot(et, len(m)).double() + (1 - alpha) * m[et][..., None]
            post = lik * m
            copy_ce.append(pair_ce((post / post.sum(-1, keepdim=True)).log(), edges, pf))
        marginal_ce = pair_ce(m.log().expand(*edges.shape, -1), edges, pf)
        rows.append(
            {
                "run": str(run), "dataset": info["config"]["dataset"], "steps": info["config"]["steps"],
                "seed": info["config"]["seed"], "t": t, "alpha": alpha, "model_ce": statistics.mean(model_ce),
                "copy_ce": statistics.mean(copy_ce), "marginal_ce": marginal_ce,
            }
        )  # fmt: skip
        r = rows[-1]
        print(
            f"{run} t={t}: model {r['model_ce']:.4f}  copy {r['copy_ce']:.4f}  marginal {r['marginal_ce']:.4f}",
            flush=True,
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--times", default="0.3,0.5,0.7,0.9")
    p.add_argument("--repeats", type=int, default=4, help="noisings per time")
    args = p.parse_args()
    times = [float(t) for t in args.times.split(",")]
    rows = [row for run in args.runs for row in diagnose(run, times, args.repeats)]
    write_json(args.out, {"times": times, "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
