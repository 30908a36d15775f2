"""Can the GGBall autoencoder reconstruct trees? Trains only the autoencoder (both latent geometries) on a data
set's train split and reports held-out reconstruction, quantised and unquantised.

    python benchmarks/bench_ae_trees.py OUT.json [--dataset tree] [--steps 300] [--geometries ball,euclidean]
                                                 [--variant NAME:field=value,field=value ...] [--merge]

Each ``--variant`` overrides :class:`gengraph.models.ggball.GGBallConfig` fields (``base`` with no override is
the current default). Training as in ``gengraph train`` (Adam, lr 2e-3, cosine schedule, clipping at 1, batch
32, VQ warm-up ``steps // 3``, seed 0; through gencore's Trainer). On the test split, from the argmax decoding:
edge accuracy, precision and recall, per-pair edge cross-entropy (and the density-only value), the fraction of
test graphs recovered exactly, and per graph the distinct codes and node pairs sharing a code.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time

import torch
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from gencore.io import read_json, write_json
from gencore.train import TrainConfig, Trainer
from gengraph.batch import pack
from gengraph.datasets import load_dataset
from gengraph.evaluation import edge_reconstruction
from gengraph.models.ggball import GGBall, GGBallConfig

CONFIG_KEYS = ("geometry", "latent_dim", "codebook_size", "laplacian_pe", "random_features", "centre_latents",
               "gnn_layers", "hidden")  # fmt: skip


class _Task:
    def __init__(self, model: GGBall) -> None:
        self.model = model

    def loss(self, model, batch, generator):
        return model(*batch, generator)


@torch.no_grad()
def reconstruction(ae: GGBall, edges: torch.Tensor, nodes: torch.Tensor, mask: torch.Tensor) -> dict:
    """Argmax reconstruction of ``(edges, nodes, mask)`` by the autoencoder in eval mode, quantised and not."""
    ae.eval()
    m = mask.float()
    pair = (m[:, :, None] * m[:, None, :]).triu(1).bool()
    z = ae.encode(edges, nodes, mask)
    zq, idx, _ = ae.quantise(z, mask)
    out: dict = {}
    for name, lat in (("quantised", zq), ("unquantised", z)):
        out[f"ae_{name}"] = edge_reconstruction(ae.decode(lat, mask)[1], edges, mask)
    density = float((edges[pair] > 0).float().mean())
    out["edge_ce_density_only"] = float(F.binary_cross_entropy(torch.tensor(density), torch.tensor(density)))
    same = ((idx[:, :, None] == idx[:, None, :]) & pair).sum((1, 2))
    out["same_code_pairs"] = float(same.double().mean())
    out["distinct_codes"] = statistics.mean(len(torch.unique(i[k])) for i, k in zip(idx, mask, strict=True))
    return out


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _variant(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition(":")
    fields = {f.name for f in dataclasses.fields(GGBallConfig)}
    over = {}
    for item in filter(None, rest.split(",")):
        key, _, val = item.partition("=")
        if key not in fields:
            raise SystemExit(f"unknown GGBallConfig field {key!r} in variant {spec!r}")
        over[key] = _value(val)
    return name, over


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--dataset", default="tree")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--geometries", default="ball,euclidean")
    p.add_argument("--variant", action="append", default=None, help="NAME:field=value,... (repeatable)")
    p.add_argument("--merge", action="store_true", help="append to OUT's rows")
    args = p.parse_args()
    train, test = load_dataset(args.dataset, "train"), load_dataset(args.dataset, "test")
    n_max = max(g.n_nodes for g in train)
    data = TensorDataset(*pack(train, n_max))
    test_batch = pack([g for g in test if g.n_nodes <= n_max], n_max)
    rows = read_json(args.out)["rows"] if args.merge else []
    for spec in args.variant or ["base:"]:
        name, over = _variant(spec)
        for geometry in args.geometries.split(","):
            cfg = GGBallConfig(**({"n_max": n_max, "geometry": geometry, "vq_warmup": args.steps // 3} | over))
            torch.manual_seed(args.seed)
            ae = GGBall(cfg)
            start = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                engine = TrainConfig(
                    steps=args.steps, global_batch_size=32, optimizer="adam", lr=args.lr, schedule="cosine",
                    seed=args.seed, progress=False, out_dir=tmp, log_every=10, clip_grad_norm=1.0, ema_decay=0.0,
                )  # fmt: skip
                ae = Trainer(engine.validate()).fit(_Task(ae), data).model.cpu()
            row = {"dataset": args.dataset, "variant": name, "config": {k: getattr(cfg, k) for k in CONFIG_KEYS},
                   "steps": args.steps, "lr": args.lr, "seed": args.seed,
                   "train_s": round(time.perf_counter() - start, 1)}  # fmt: skip
            row |= reconstruction(ae, *test_batch)
            print(json.dumps(row), flush=True)
            rows.append(row)
            write_json(args.out, {"rows": rows})


if __name__ == "__main__":
    main()
