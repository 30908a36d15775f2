"""Does another latent prior close GGBall's code-sharing gap on tree? Prior variants on one trained autoencoder.

    python benchmarks/diag_prior_variants.py OUT.json --work DIR [--model ggball] [--dataset tree] [--steps 1500]
        [--variants "codes 256x4;latents 64x2"]

Trains (or reuses) the run ``DIR/<model>`` of ``bench_reproduction.py``'s protocol (seed 0, 300 autoencoder and
1,500 prior steps), then trains further flow priors on the same autoencoder's training latents with the run's
engine settings, ``--steps`` each (1,500 by default; ``--variants`` picks some of those below, separated by
semicolons). A run folder that exists already, of any budget, is reused as it is (so ``--work`` can point at a
longer run of the same protocol):

- ``codes 64x2``: the run's own prior (width 64, 2 transformer layers, fitted to the quantised latents);
- ``codes 256x4``: a prior 29 times larger (width 256, 4 layers), same data;
- ``latents 64x2``: the default prior fitted to the *unquantised* encoder latents (a smooth target instead of
  point masses on the codes);
- ``codes 64x2, distance bias``: the run's prior size with distance-biased attention
  (``SetVelocity(distance_bias=True)``, ``gengraph train --prior-distance-bias``), which lets a node see which
  others are near it, the information it needs to land on a code shared with them;
- ``codes 64x2, size`` and ``codes 256x4, size``: those sizes with the node-count embedding
  (``SetVelocity(size_embedding=True)``, ``gengraph train --prior-size-embedding``);
- ``tokens 64x2, size``: not a flow: ``gengraph train --prior masked-codes``'s masked discrete diffusion over
  the graph's code indices (:mod:`gengraph.models.code_prior`), the same width and depth; it always reads the
  node count. Not GGBall's prior: it asks whether the autoencoder's codes can be generated better than
  GGBall's flow generates them. Its samples are codes, so they are decoded once.

Each prior's samples (three sampling folds) are decoded by sampling, once snapped to their nearest codes (as
``gengraph sample`` does) and once unquantised, and scored against the test split (degree / clustering / orbit
MMD, mean edges and components); for the snapped samples also the node pairs sharing a code and the distinct
codes per graph (``bench_diagnosis.py``'s statistics; the test trees' own codes: about 49 pairs and 34 codes).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch
from bench_diagnosis import FOLDS, _code_sets, _score
from torch.utils.data import TensorDataset

from gencore.io import write_json
from gencore.tables import format_table
from gencore.train import Trainer
from gengraph.batch import pack
from gengraph.datasets import load_dataset
from gengraph.experiment import (
    RunConfig,
    _CodePriorTask,
    _engine,
    _PriorTask,
    load_latent_run,
    read_run,
    sample_prior,
    train_run,
)
from gengraph.models.code_prior import CodePriorConfig, CodeTokenPrior
from gengraph.models.latent_flow import SetVelocity

VARIANTS = {  # name: (target, width, layers, distance bias, size embedding)
    "codes 256x4": ("codes", 256, 4, False, False),
    "latents 64x2": ("latents", 64, 2, False, False),
    "codes 64x2, distance bias": ("codes", 64, 2, True, False),
    "codes 64x2, size": ("codes", 64, 2, False, True),
    "codes 256x4, size": ("codes", 256, 4, False, True),
    "tokens 64x2, size": ("tokens", 64, 2, False, True),
}


def _token_prior(cfg, ae, codes: torch.Tensor, mask: torch.Tensor, hidden: int, layers: int, out: Path, steps: int):
    """``gengraph train --prior masked-codes``'s prior, trained on the run's codes with the run's engine."""
    model = CodeTokenPrior(CodePriorConfig(n_codes=ae.codebook.size, hidden=hidden, layers=layers))
    return Trainer(_engine(cfg, out, steps, lr=1e-3)).fit(_CodePriorTask(model), TensorDataset(codes, mask)).ema.eval()


def _params(model: torch.nn.Module) -> int:
    return sum(q.numel() for q in model.parameters())


def _draws(prior, ae, mask: torch.Tensor):
    return lambda seed: sample_prior(ae, prior, mask, generator=torch.Generator().manual_seed(seed))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--work", required=True)
    p.add_argument("--model", default="ggball", choices=("ggball", "ggball-euclidean"))
    p.add_argument("--dataset", default="tree")
    p.add_argument("--steps", type=int, default=1500, help="steps of each extra prior")
    p.add_argument("--variants", default=";".join(VARIANTS), help="names of the extra priors, separated by ';'")
    args = p.parse_args()
    chosen = [v.strip() for v in args.variants.split(";") if v.strip()]
    if unknown := [v for v in chosen if v not in VARIANTS]:
        p.error(f"unknown variant(s) {', '.join(unknown)}; choose from: {', '.join(VARIANTS)}")
    train, test = load_dataset(args.dataset, "train"), load_dataset(args.dataset, "test")
    cfg = RunConfig(model=args.model, dataset=args.dataset, steps=300, progress=False)
    run = Path(args.work) / args.dataset / args.model
    if not (run / "run.json").exists():
        train_run(cfg, train, run)
    info = read_run(run)
    cfg = replace(cfg, seed=int(info["config"]["seed"]))  # a reused run's training seed seeds the extra priors
    n_max, coupling = int(info["n_max"]), info["config"]["prior_coupling"]  # the run's pairing for every prior
    ae, run_prior = load_latent_run(run)
    edges, nodes, mask = pack(train, n_max)
    test_mask = pack([g for g in test if g.n_nodes <= n_max], n_max)[2]
    with torch.no_grad():
        z = ae.encode(edges, nodes, mask)
        zq, zq_idx, _ = ae.quantise(z, mask)
    draws = {"codes 64x2": _draws(run_prior, ae, test_mask)}  # name: seed -> latent sets [B, N, d]
    params = {"codes 64x2": _params(run_prior)}
    for name in chosen:
        target, hidden, layers, distance_bias, size_embedding = VARIANTS[name]
        torch.manual_seed(cfg.seed)
        out = run / f"prior_{name.replace(' ', '_').replace(',', '')}"
        if target == "tokens":
            model = _token_prior(cfg, ae, zq_idx, mask, hidden, layers, out, args.steps)
            draws[name], params[name] = _draws(model, ae, test_mask), _params(model)
            continue
        data = zq if target == "codes" else z
        prior = SetVelocity(
            ae.geometry, hidden=hidden, layers=layers, distance_bias=distance_bias, size_embedding=size_embedding
        )
        prior.fit_centre(data, mask)
        task = _PriorTask(prior, ae.geometry, coupling)
        prior = Trainer(_engine(cfg, out, args.steps, lr=1e-3)).fit(task, TensorDataset(data, mask)).ema.eval()
        draws[name], params[name] = _draws(prior, ae, test_mask), _params(prior)
    rows = []
    for name, draw in draws.items():
        with torch.no_grad():
            samples = [draw(f) for f in range(FOLDS)]
        tokens = name in VARIANTS and VARIANTS[name][0] == "tokens"  # samples are codes: one decoding
        for quantise in (True,) if tokens else (True, False):
            rec = {"prior": name, "decoded": "snapped to codes" if quantise else "unquantised"}
            rec |= _score(test, ae, samples, test_mask, snap=quantise)
            if quantise:
                rec |= _code_sets(ae.quantise(samples[0], test_mask)[1], test_mask)
            rec["params"] = params[name]
            rows.append(rec)
            print(rec, flush=True)
    write_json(args.out, {"args": vars(args), "rows": rows})
    print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
