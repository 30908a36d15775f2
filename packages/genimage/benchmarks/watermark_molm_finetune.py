"""MOLM after each phase of its training, with the same adapters and on the same noise.

    python watermark_molm_finetune.py RUN OUT.json [--steps 2400] [--sampler-steps 150] [--finetune-steps 300]
        [--n 64] [--seed 0] [--routing bit|segment]

Builds MOLM on a `genimage train` run with the joint phase only and runs the evaluation harness (row ``joint``);
then, unless ``--sampler-steps 0``, trains the adapters and the extractor together through the sampler
(:meth:`~genimage.watermark.molm.MOLMScheme.train_through_sampler`; row ``joint+sampler``); then trains the
extractor alone on 1,024 fully sampled images with random keys, keeping the weights that read 256 further
ones best (:meth:`~genimage.watermark.molm.MOLMScheme.finetune`; row ``...+finetune``), running the harness
after each phase on the same noise, so consecutive rows differ only by one phase. The defaults are those of
``genimage watermark evaluate``. Records: the harness's, with ``phase``, the wall seconds of the phase, its
report (the held-out bit accuracy of random keys before and after the extractor phase, a less noisy measure
than the harness's one message), and ``psnr_db``: the PSNR of the harness's marked images against the
unmarked images of the same noise (what the marks cost in fidelity).
"""

from __future__ import annotations

import argparse
import time

import torch

from gencore.io import write_json
from gencore.tables import format_table
from genimage.watermark.evaluate import HEADLINE_COLUMNS, EvaluationConfig, evaluate_watermarks
from genimage.watermark.generators import RunGenerator
from genimage.watermark.metrics import psnr
from genimage.watermark.molm import FINETUNE_STEPS, JOINT_STEPS, ROUTINGS, SAMPLER_STEPS, MOLMScheme


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=JOINT_STEPS, help="joint steps of adapters and extractor")
    parser.add_argument(
        "--sampler-steps", type=int, default=SAMPLER_STEPS, help="steps trained through the sampler (0: none)"
    )
    parser.add_argument("--finetune-steps", type=int, default=FINETUNE_STEPS)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--attacks", default="none,jpeg75,blur,noise0.1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--routing", choices=ROUTINGS, default="bit", help="MOLM's key routing (bit)")
    args = parser.parse_args()
    gen = RunGenerator(args.run, steps=20)
    config = EvaluationConfig(n=args.n, seed=args.seed, message_bits=args.bits)
    attacks = args.attacks.split(",")
    noise = torch.randn(args.n, *gen.noise_shape, generator=torch.Generator().manual_seed(args.seed))
    plain = gen.generate(noise)
    records = []

    def score(phase: str, seconds: float, report: dict) -> None:
        fidelity = psnr(scheme.mark(gen, noise, plain), plain)
        rows = evaluate_watermarks(gen, [scheme], attacks, config)
        records.extend({"phase": phase, "phase_s": seconds, "psnr_db": fidelity, **report, **r} for r in rows)

    t0 = time.perf_counter()
    scheme = MOLMScheme.build(
        gen,
        message_bits=args.bits,
        seed=args.seed,
        steps=args.steps,
        sampler_steps=0,
        finetune_steps=0,
        routing=args.routing,
    )
    score("joint", time.perf_counter() - t0, {})
    phase = "joint"
    if args.sampler_steps:
        t0 = time.perf_counter()
        report = scheme.train_through_sampler(gen, steps=args.sampler_steps, seed=args.seed)
        phase += "+sampler"
        score(phase, time.perf_counter() - t0, report)
        print(report)
    t0 = time.perf_counter()
    report = scheme.finetune(gen, steps=args.finetune_steps, seed=args.seed)
    score(phase + "+finetune", time.perf_counter() - t0, report)
    setup = {**vars(args), "sampler": "euler, 20 steps"}
    write_json(args.out, {"setup": setup, "records": records})
    print(format_table(records, ["phase", "psnr_db", *HEADLINE_COLUMNS]))
    print(report)


if __name__ == "__main__":
    main()
