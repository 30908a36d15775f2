"""Which LayerSync pair and weight, if any, speeds up a small DiT? A sweep beside one baseline.

``bench_layersync.py`` uses one pair (``blocks.1 -> blocks.3`` on the 4-block DiT-Mi: the last block as the
teacher) and weight 0.2, and LayerSync was slower than the baseline on digits and MNIST-5k. The paper's
teacher is a middle layer (about two thirds of the depth on SiT-XL, e.g. block 16 of 28, student block 8),
not the last one, which is closest to the velocity output. This script trains the baseline once and then
each LayerSync arm, with the same seed, data, optimiser and scoring as ``bench_layersync.py`` (EMA model,
class-conditional samples, Euler 8 NFE, FD on the in-suite classifier's features), and reports for every arm
its final FD and the first logged step at which it reaches the baseline's final FD.

Arms are written ``weak:strong@weight`` (several pairs in one arm joined by ``+``):

    python diag_layersync_pairs.py OUT.json mnist --arms blocks.1:blocks.2@0.2,blocks.0:blocks.2@0.2 \
        [--steps 2000 --eval-every 200 --seed 0 --n-eval 300]
"""

from __future__ import annotations

import argparse
import json

import torch
from _repro import steps_to_reach, train_with_curve
from bench_layersync import DOMAINS, LOADERS, classifier_fd_scorer

from gencore.io import write_json
from gencore.tables import format_table
from genimage.config import ImageTrainConfig


def parse_arm(text: str) -> tuple[tuple[str, ...], float]:
    """``"blocks.1:blocks.2+blocks.0:blocks.1@0.2"`` -> ``(("blocks.1:blocks.2", "blocks.0:blocks.1"), 0.2)``."""
    pairs, sep, weight = text.partition("@")
    if not sep or not pairs:
        raise argparse.ArgumentTypeError(f"an arm is weak:strong[+weak:strong...]@weight, got {text!r}.")
    try:
        value = float(weight)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the weight of arm {text!r} is not a number.") from None
    return tuple(pairs.split("+")), value


def main(out_json: str, domain: str, arms: list[tuple[tuple[str, ...], float]], args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    settings = DOMAINS[domain] | {k: v for k, v in (("steps", args.steps), ("eval_every", args.eval_every)) if v}
    data = LOADERS[domain]()
    score, acc = classifier_fd_scorer(data, args.n_eval)

    def train(pairs: tuple[str, ...], weight: float) -> tuple[list[dict], float]:
        cfg = ImageTrainConfig(
            data=domain,
            steps=settings["steps"],
            batch_size=settings["batch_size"],
            patch_size=settings["patch_size"],
            lr=settings["lr"],
            warmup_steps=20,
            layersync=bool(pairs),
            layersync_pairs=pairs,
            layersync_weight=weight,
            seed=args.seed,
            progress=False,
        )
        curve, _, seconds = train_with_curve(cfg, data, score, settings["eval_every"])
        return curve, seconds

    base_curve, base_s = train((), 0.0)
    base_final = base_curve[-1]["fd_classifier"]
    records = [_row("baseline", base_curve, base_final, base_s, settings["steps"])]
    curves = {"baseline": base_curve}
    for pairs, weight in arms:
        name = "+".join(pairs) + f"@{weight:g}"
        curve, seconds = train(pairs, weight)
        curves[name] = curve
        records.append(_row(name, curve, base_final, seconds, settings["steps"]))
        print(format_table(records, list(records[0])), flush=True)
    write_json(
        out_json,
        {
            "benchmark": "layersync pair sweep",
            "domain": domain,
            "seed": args.seed,
            "n_eval": args.n_eval,
            "classifier_accuracy": acc,
            "settings": settings,
            "records": records,
            "curves": curves,
        },
    )
    print(json.dumps(records, indent=1))


def _row(name: str, curve: list[dict], base_final: float, seconds: float, steps: int) -> dict:
    reach = steps_to_reach(curve, "fd_classifier", base_final)
    return {
        "arm": name,
        "final_fd": curve[-1]["fd_classifier"],
        "steps_to_baseline_final_fd": reach,
        "speedup": None if reach is None else steps / reach,
        "fd_curve": " ".join(f"{r['fd_classifier']:.2f}" for r in curve),
        "train_s": round(seconds, 1),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("domain", choices=sorted(DOMAINS))
    p.add_argument(
        "--arms",
        required=True,
        type=lambda text: [parse_arm(x) for x in text.split(",")],
        help="comma-separated weak:strong[+weak:strong]@weight",
    )
    p.add_argument("--steps", type=int, help="training steps (default: the domain's)")
    p.add_argument("--eval-every", type=int, help="steps between FD evaluations (default: the domain's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-eval", type=int, default=300)
    a = p.parse_args()
    main(a.out, a.domain, a.arms, a)
