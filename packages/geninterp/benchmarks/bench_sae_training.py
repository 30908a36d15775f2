"""SAE training throughput (tokens/s): geninterp's TopK, ReLU and Temporal SAEs, and sae-lens's TopK SAE.

Usage: ``python bench_sae_training.py OUT.json``. Every row times the same work: forward, the
architecture's objective, backward and one Adam step on a batch of 4,096 Gaussian "activations"
of width d = 384 (MiniLM's residual stream), dictionary width 2,048 and k = 32 (TopK and
Temporal SAE; the Temporal SAE sees the batch as 64 sequences of 64 tokens). sae-lens is timed
on its own training forward pass (``TopKTrainingSAE.training_forward_pass``) at equal d, width,
k and batch, when it is importable; otherwise its row says why. The rows are timed interleaved,
``ROUNDS`` rounds of ``STEPS`` steps each (after ``WARMUP`` steps), and each row reports its median
round, so load that changes during the run affects every row alike. Wall-clock on a shared CPU:
noisy, compare rows of one run only.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from gencore.command import benchmark_parser
from geninterp.saes import make_objective, make_sae

D, WIDTH, K, TOKENS, SEQ = 384, 2048, 32, 4096, 64
WARMUP, STEPS, ROUNDS = 3, 5, 5


def _round(step) -> float:
    """Tokens per second over ``STEPS`` steps."""
    start = time.perf_counter()
    for _ in range(STEPS):
        step()
    return TOKENS * STEPS / (time.perf_counter() - start)


def geninterp_row(arch: str) -> tuple[dict[str, Any], Callable[[], None] | None]:
    torch.manual_seed(0)
    fields = {"d_in": D, "width": WIDTH} | ({} if arch == "relu" else {"k": K})
    sae = make_sae(arch, **fields)
    objective = make_objective(arch)
    opt = torch.optim.Adam(sae.parameters(), lr=1e-4)
    x = torch.randn(TOKENS // SEQ, SEQ, D) if sae.is_sequence else torch.randn(TOKENS, D)

    def step() -> None:
        loss, _ = objective(sae, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return {"library": "geninterp", "arch": arch, "k": None if arch == "relu" else K}, step


def sae_lens_row() -> tuple[dict[str, Any], Callable[[], None] | None]:
    try:
        import sae_lens
        from sae_lens.saes.sae import TrainStepInput
        from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
    except Exception as exc:  # any import failure means "not available here"; the reason is reported
        return {"library": "sae-lens", "arch": "topk", "k": K, "note": f"not importable: {exc}"}, None
    torch.manual_seed(0)
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=D, d_sae=WIDTH, k=K, device="cpu"))
    opt = torch.optim.Adam(sae.parameters(), lr=1e-4)
    x = torch.randn(TOKENS, D)
    dead = torch.zeros(WIDTH, dtype=torch.bool)

    def step() -> None:
        inp = TrainStepInput(
            sae_in=x, coefficients={}, dead_neuron_mask=dead, n_training_steps=0, is_logging_step=False
        )
        out = sae.training_forward_pass(inp)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()

    return {"library": f"sae-lens {sae_lens.__version__}", "arch": "topk", "k": K}, step


def main(out: str) -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    built = [geninterp_row("topk"), sae_lens_row(), geninterp_row("relu"), geninterp_row("temporal")]
    rates: list[list[float]] = [[] for _ in built]
    for _, step in built:
        for _ in range(WARMUP if step else 0):
            step()
    for _ in range(ROUNDS):
        for i, (_, step) in enumerate(built):
            if step is not None:
                rates[i].append(_round(step))
    rows = [row | {"tokens_per_s": statistics.median(r) if r else None} for (row, _), r in zip(built, rates)]
    topk = rows[0]["tokens_per_s"]
    for r in rows:
        r["relative_to_geninterp_topk"] = None if r["tokens_per_s"] is None else r["tokens_per_s"] / topk
    record = {
        "d_in": D,
        "width": WIDTH,
        "batch_tokens": TOKENS,
        "steps_timed": STEPS * ROUNDS,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }
    print(json.dumps(record, indent=2))
    with open(out, "w") as f:
        json.dump(record, f, indent=2)


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_sae_training.json")
    args = parser.parse_args()
    main(args.out_json)
