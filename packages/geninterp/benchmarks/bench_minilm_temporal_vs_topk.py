"""Temporal SAE vs TopK at matched k on MiniLM layer 3 (the README's ``compare_on_store`` table).

    python bench_minilm_temporal_vs_topk.py OUT_DIR [--width 512] [--steps 100] [--seed 0]

Captures 8,192 tokens of stdlib docstrings (sequences of 64) from MiniLM's layer 3 into ``OUT_DIR/acts``
(reused when present), trains both SAEs with :func:`geninterp.temporal_experiments.compare_on_store`
(k = 16, 2,048 tokens per step; finished runs in ``OUT_DIR/runs`` are reused), adds the MiniLM embedding
cosine with each reconstruction spliced in (:func:`geninterp.metrics.downstream_effect`, 8 held-out
sequences), prints the table and writes the record to ``OUT_DIR/results.json``. This is the MiniLM part of
``geninterp demo`` at the table's settings (the demo uses width 256 and 50 steps to fit its time budget).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gencore.io import write_json
from gencore.tables import format_table
from geninterp.capture import capture_to_store
from geninterp.metrics import downstream_effect
from geninterp.models import load_model, run_model
from geninterp.store import ActivationStore
from geninterp.temporal_experiments import compare_on_store
from geninterp.text import stdlib_texts, token_chunks
from geninterp.training import load_run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    lm = load_model("minilm")
    prefix, suffix, sep = lm.special
    acts = args.out / "acts"
    if not (acts / "index.json").is_file():
        chunks = token_chunks(
            stdlib_texts("docstrings", seed=args.seed), lm.encode, 62, prefix=prefix, suffix=suffix, separator=sep
        )
        capture_to_store(
            lambda t: run_model(lm, t), lm.model, lm.module_name(3), chunks, acts, n_tokens=8192,
            metadata={"model": "minilm", "module": lm.module_name(3), "layer": 3, "text": "python-stdlib-docstrings"},
            progress=False,
        )  # fmt: skip
    record = compare_on_store(
        acts, args.out / "runs", k=16, width=args.width, steps=args.steps, batch_tokens=2048, seed=args.seed,
        resume="auto",
    )  # fmt: skip
    for arch in ("topk", "temporal"):
        sae, run = load_run(args.out / "runs" / arch)
        held = ActivationStore(acts, range(*run["eval_sequences"]))
        record[f"{arch}_embedding_cosine"] = downstream_effect(lm, lm.module_name(3), sae, held, 8)["embedding_cosine"]
    write_json(args.out / "results.json", record)
    rows = [
        {"SAE": arch, "held-out FVU": record[f"{arch}_fvu"], "L0 (novel)": record[f"{arch}_l0"],
         "embedding cosine": record[f"{arch}_embedding_cosine"], "tokens/s": record[f"{arch}_tokens_per_second"]}
        for arch in ("topk", "temporal")
    ]  # fmt: skip
    print(format_table(rows))
    print(f"Temporal SAE predicted share of the reconstructed energy: {record['temporal_pred_share']:.3f}")


if __name__ == "__main__":
    main()
