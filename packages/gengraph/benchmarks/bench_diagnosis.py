"""Where does a latent graph generator lose: the autoencoder or the prior? Stage-wise diagnosis of trained
``ggball`` / ``ggball-euclidean`` run folders (those of ``bench_reproduction.py``).

    python benchmarks/bench_diagnosis.py OUT.json --work bench-reproduction-runs [--datasets tree] [--models ...]

For each run, on the test split:

- autoencoder (a): argmax edge accuracy, edge precision / recall, per-pair edge cross-entropy, fraction of test
  graphs recovered exactly by the argmax decoding, with the quantised latents and without quantisation;
- ceiling (b): the test graphs' own quantised latents decoded by sampling the decoder (as ``sample_run`` does),
  scored against the test split: what a perfect prior would reach with this autoencoder;
- prior (c): graphs from prior samples (the same decoding), scored likewise; latent statistics of the data
  latents and of the prior samples (distance from the origin, distance to the nearest code, fraction at the
  ball's clipping radius, non-finite values) and the total-variation distance between the code usage of the
  data latents and of the prior samples; per graph, node pairs sharing a code and distinct codes;
- controls: ``random_codes`` decodes code sets drawn i.i.d. from the data's code usage (no structure at all:
  if it scores like the ceiling, the decoder ignores which codes meet); ``same_code_edge_prob``, the decoder's
  edge probability between two nodes on the same code; the fraction of decoder points at the ball's clipping
  radius after ``from_latent`` and after the decoder blocks.

Test graphs larger than the run's largest training graph cannot be encoded and are left out of the encoded set
(counted in the output); every decoded set is scored against the whole test split. ``FOLDS`` seeds for the
sampled decodings; mean over folds. Mean edges / components of the decoded graphs are
reported beside the test split's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import networkx as nx
import torch
from torch.nn import functional as F

from gencore.io import write_json
from gengraph.batch import pack, unpack
from gengraph.datasets import load_dataset
from gengraph.evaluation import edge_reconstruction
from gengraph.experiment import load_latent_run, read_run, sample_prior
from gengraph.hyperbolic.geometry import BALL_EPS
from gengraph.metrics import graph_mmd
from gengraph.models.ggball import GGBall

FOLDS = 3
KEYS = ("degree_mmd_gaussian_emd", "clustering_mmd_gaussian_emd", "orbit_mmd_gaussian")


def _shape(graphs) -> dict[str, float]:
    nxg = [g.to_networkx() for g in graphs]
    return {
        "edges": statistics.mean(g.number_of_edges() for g in nxg),
        "components": statistics.mean(nx.number_connected_components(g) for g in nxg),
    }


def _score(test, ae: GGBall, latents: list[torch.Tensor], mask: torch.Tensor, snap: bool = True) -> dict[str, float]:
    """Mean over folds of the MMDs (and shape) of the graphs decoded, by sampling, from fold ``f``'s latents
    snapped to their codes (``snap=False``: as they are) (decoder seed ``f``)."""
    folds = []
    for f, z in enumerate(latents):
        zq = ae.quantise(z, mask)[0] if snap else z
        graphs = unpack(*ae.decode_graphs(zq, mask, generator=torch.Generator().manual_seed(f)), mask)
        folds.append(graph_mmd(test, graphs, KEYS) | _shape(graphs))
    return {k: statistics.mean(f[k] for f in folds) for k in folds[0]}


def _latent_stats(ae: GGBall, z: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    geo = ae.geometry
    zr = z[mask]
    origin = torch.zeros_like(zr)
    radius = geo.manifold.dist(origin, zr)
    nearest = ae.codebook.distances(zr).min(-1).values
    out = {
        "finite": float(torch.isfinite(zr).all(-1).float().mean()),
        "dist_origin_mean": float(radius.mean()),
        "dist_origin_std": float(radius.std()),
        "nearest_code_mean": float(nearest.mean()),
    }
    if geo.kind == "ball":
        cap = (1 - BALL_EPS[torch.float32]) / float(geo.c.detach().sqrt())
        out["at_clip_radius"] = float((zr.norm(dim=-1) >= cap * (1 - 1e-4)).float().mean())
    return out


def _code_sets(idx: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Per graph: node pairs that share a code (the decoder reads them as distance 0) and distinct codes."""
    same = ((idx[:, :, None] == idx[:, None, :]) & mask[:, :, None] & mask[:, None, :]).triu(1)
    return {
        "same_code_pairs": float(same.sum((1, 2)).double().mean()),
        "distinct_codes": statistics.mean(len(torch.unique(i[m])) for i, m in zip(idx, mask, strict=True)),
    }


def _at_clip(ae: GGBall, x: torch.Tensor) -> float:
    """Fraction of real-node points at the hidden ball's clipping radius (0 in flat space)."""
    if ae.hidden_geo.kind != "ball":
        return 0.0
    return float((x.norm(dim=-1) >= ae.hidden_geo.max_norm(x) * (1 - 1e-4)).float().mean())


def _usage(idx: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    u = torch.bincount(idx[mask], minlength=k).double()
    return u / u.sum()


@torch.no_grad()
def diagnose(run: Path, test) -> dict:
    info = read_run(run)
    ae, prior = load_latent_run(run)
    fit = [g for g in test if g.n_nodes <= int(info["n_max"])]  # the autoencoder cannot hold larger graphs
    edges, nodes, mask = pack(fit, int(info["n_max"]))
    m = mask.float()
    pair = (m[:, :, None] * m[:, None, :]).triu(1).bool()
    z = ae.encode(edges, nodes, mask)
    zq, idx, _ = ae.quantise(z, mask)
    out: dict = {"test_graphs_encoded": len(fit), "test_graphs": len(test)}
    for name, lat in (("quantised", zq), ("unquantised", z)):
        out[f"ae_{name}"] = edge_reconstruction(ae.decode(lat, mask)[1], edges, mask)
    density = float((edges[pair] > 0).float().mean())
    out["edge_ce_density_only"] = float(F.binary_cross_entropy(torch.tensor(density), torch.tensor(density)))
    out["ceiling"] = _score(test, ae, [z] * FOLDS, mask)
    seeds = [torch.Generator().manual_seed(f) for f in range(FOLDS)]
    samples = [sample_prior(ae, prior, mask, generator=g) for g in seeds]
    out["prior"] = _score(test, ae, samples, mask)
    usage = _usage(idx, mask, ae.codebook.size)
    gen = torch.Generator().manual_seed(0)
    drawn = torch.multinomial(usage, mask.numel(), True, generator=gen).view(mask.shape)
    out["random_codes"] = _score(test, ae, [ae.codebook.codes[drawn]] * FOLDS, mask)
    h = ae.from_latent(zq)
    out["decoder_from_latent_at_clip"] = _at_clip(ae, h[mask])
    for blk in ae.dec_blocks:
        h = blk(h, mask)
    out["decoder_context_at_clip"] = _at_clip(ae, h[mask])
    one = torch.ones(1, ae.codebook.size, dtype=torch.bool)
    p_edge = 1 - ae.decode(ae.codebook.codes[None], one)[1].softmax(-1)[0, ..., 0]
    out["same_code_edge_prob"] = float(p_edge.diagonal().mean())
    out["latents_data"] = _latent_stats(ae, z, mask)
    out["latents_prior"] = _latent_stats(ae, samples[0], mask)
    prior_idx = ae.quantise(samples[0], mask)[1]
    out["code_usage_tv"] = float(0.5 * (usage - _usage(prior_idx, mask, ae.codebook.size)).abs().sum())
    out["code_sets_data"] = _code_sets(idx, mask)
    out["code_sets_prior"] = _code_sets(prior_idx, mask)
    out["codes_used_data"] = int(torch.unique(idx[mask]).numel())
    out["test_shape"] = _shape(test)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--work", default="bench-reproduction-runs")
    p.add_argument("--datasets", default="tree")
    p.add_argument("--models", default="ggball,ggball-euclidean")
    args = p.parse_args()
    rows = []
    for dataset in args.datasets.split(","):
        test = load_dataset(dataset, "test")
        for model in args.models.split(","):
            row = {"dataset": dataset, "model": model} | diagnose(Path(args.work) / dataset / model, test)
            print(json.dumps(row), flush=True)
            rows.append(row)
            write_json(args.out, {"folds": FOLDS, "rows": rows})


if __name__ == "__main__":
    main()
