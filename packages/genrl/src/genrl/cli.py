"""The ``genrl`` command: ``dataset make|info|export|import``, ``train``, ``evaluate``, ``demo`` (and ``info``)."""

from __future__ import annotations

import argparse
import json
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gencore.command import (
    add_commands,
    add_device_argument,
    output_file,
    output_folder,
    package_parser,
    refuse_overwriting_input,
    report_finished,
    resolve_device,
    run,
    seed_int,
)
from gencore.errors import ConfigError, StorageError
from gencore.io import ensure_dir, write_json
from gencore.tables import format_table
from genrl import __version__

DESCRIPTION = "Offline and online reinforcement learning with generative policies on gencore's flow-matching math."


# ---------------------------------------------------------------------------------------------- dataset
def _refuse_existing_dataset(out: Path) -> None:
    """A data set is never overwritten by a later ``dataset make|import`` (refused before any work is done)."""
    from genrl.dataset import CARD_NAME, DATA_NAME

    held = [name for name in (CARD_NAME, DATA_NAME) if (out / name).exists()]
    if held:
        raise StorageError(f"{str(out)!r} already holds a genrl dataset ({held[0]}); choose a new --out folder.")


def _dataset_make(args: argparse.Namespace) -> int:
    from genrl.dataset import save_dataset
    from genrl.generate import make_dataset

    _refuse_existing_dataset(Path(args.out))
    t = time.perf_counter()
    ds, card = make_dataset(
        args.env,
        args.policy,
        args.steps,
        args.seed,
        train_steps=args.train_steps,
        episode_length=args.episode_length,
        progress=not args.no_progress,
    )
    save_dataset(args.out, ds, card)
    r = card["returns"]
    ret = "n/a" if r is None else f"{r['mean']:.2f} +- {r['std']:.2f}"
    print(
        f"wrote {args.out}: {len(ds)} transitions, {ds.n_episodes} episodes, return {ret} "
        f"({time.perf_counter() - t:.1f} s)"
    )
    return 0


def _dataset_export(args: argparse.Namespace) -> int:
    from genrl.minari_io import export_minari

    data = export_minari(args.dir, args.out, dataset_id=args.dataset_id)
    print(f"wrote Minari dataset {data} ({data / 'main_data.hdf5'}, {data / 'metadata.json'})")
    return 0


def _dataset_import(args: argparse.Namespace) -> int:
    from genrl.minari_io import import_minari

    _refuse_existing_dataset(Path(args.out))
    ds, card = import_minari(args.src, args.out)
    cut = card["source"]["episodes_cut_at_end"]
    print(
        f"wrote {args.out}: {len(ds)} transitions, {ds.n_episodes} episodes from {card['source']['dataset_id']}"
        + (f" ({cut} unfinished episodes marked truncated)" if cut else "")
    )
    return 0


def _dataset_info(args: argparse.Namespace) -> int:
    from genrl.dataset import load_dataset

    _, card = load_dataset(args.dir)
    if args.json:
        print(json.dumps(card, indent=2))
        return 0
    r = card.get("returns") or {}
    rows = [
        {"field": "env", "value": f"{card.get('env_id')} (v{card.get('env_version')})"},
        {"field": "policy", "value": json.dumps(card.get("policy"))},
        {"field": "seed", "value": card.get("seed")},
        {"field": "transitions", "value": card["n_transitions"]},
        {"field": "episodes", "value": f"{card['n_episodes']} ({card['n_complete_episodes']} complete)"},
        {"field": "observation shape", "value": card["observation_shape"]},
        {"field": "action dim", "value": card["action_dim"]},
        {"field": "return", "value": f"{r.get('mean', float('nan')):.3f} +- {r.get('std', float('nan')):.3f}"},
        {"field": "return range", "value": f"[{r.get('min', float('nan')):.3f}, {r.get('max', float('nan')):.3f}]"},
        {"field": "terminal fraction", "value": f"{card['terminal_fraction']:.4f}"},
    ]
    print(format_table(rows))
    return 0


# ---------------------------------------------------------------------------------------------- train
def _build_agent(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    """``(agent, dataset, card)`` of a ``genrl train`` call (the same in every process of a run)."""
    import torch

    from gencore.config import config_from_flags
    from genrl.agents import AGENTS, EnvSpec, make_agent
    from genrl.dataset import load_dataset

    torch.set_num_threads(max(1, args.threads))
    ds, card = load_dataset(args.data)
    spec = EnvSpec.from_dataset(ds, card)
    config = config_from_flags(AGENTS[args.agent].config_class, args)  # --seed, --batch-size over the file's values
    return make_agent(args.agent, spec, asdict(config)), ds, card


def _offline_agent_dir(args: argparse.Namespace) -> Path:
    """Where rank 0 saves the agent after the offline updates: ``agent/`` (the run's result) when there is no online
    phase, else ``offline_agent/``, so that a run killed during its online phase has no ``agent/`` to pass for its
    result (``agent/`` is written only when the last phase ends)."""
    return Path(args.out) / ("offline_agent" if args.online_steps else "agent")


def _offline(args: argparse.Namespace, agent: Any, ds: Any) -> list[dict[str, Any]]:
    """The offline phase on this rank; rank 0 saves the agent (:func:`_offline_agent_dir`)."""
    from gencore.train import setup, signal_received, teardown
    from genrl.training import ReplayBuffer, train_offline

    info = setup(resolve_device(args.device, args.nproc))
    try:
        records = train_offline(
            agent,
            ReplayBuffer.from_dataset(ds),
            args.steps,
            args.out,
            log_every=args.log_every,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume is not None,
            progress=not args.no_progress,
            device=info.device,
        )
        if info.is_main and signal_received() is None:  # an interrupted run keeps only its checkpoints
            agent.save(_offline_agent_dir(args))
        return records
    finally:
        teardown(info)


def _offline_worker(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One of ``--nproc`` launched learner processes."""
    agent, ds, _ = _build_agent(args)
    return _offline(args, agent, ds)


def _read_run(run_dir: Path) -> dict[str, Any]:
    """``run_dir/run.json`` as a dict whose ``env_id`` is a string or null (else one sentence naming the file)."""
    from gencore.io import read_json, require_fields

    path = run_dir / "run.json"
    run = read_json(path)
    if not isinstance(run, dict):
        raise StorageError(f"{str(path)!r} does not hold a JSON object; it was not written by `genrl train`.")
    if run.get("env_id") is not None and not isinstance(run["env_id"], str):
        raise StorageError(f"{str(path)!r}: field 'env_id' must be a gymnasium id or null, got {run['env_id']!r}.")
    # another command's run folder (gengraph, genmol, geninterp also write a run.json) is not taken for an unfinished
    # genrl run: "continue it with --resume" and "pass --env" were the answers to it
    require_fields(run, ("agent",), repr(str(path)), "; it was not written by `genrl train`")
    return run


def _peek_latest(folder: Path) -> Any:
    """:func:`gencore.train.load_latest` without its warnings about unusable checkpoints: the training that follows
    loads the same checkpoint and says them once."""
    from gencore.train import load_latest

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_latest(folder)


def _check_resumable(
    out: Path, identity: dict[str, Any], agent: Any, steps: tuple[int, int], nproc: int, n_data: int
) -> bool:
    """``--resume`` continues the run in ``out`` only from a checkpoint and with the settings it was started with;
    True when that run is finished at ``steps`` (offline, online), so that there is nothing to train. Everything
    that would refuse the resume is checked here, before ``run.json`` is rewritten."""
    from gencore.train import find_checkpoints, identity_changes, run_identity

    if not (out / "run.json").is_file():
        return False  # nothing there yet: a fresh run
    run = _read_run(out)
    # the agent and data first: another agent's config differs in every field, which says nothing more
    changes = identity_changes({"agent": run.get("agent"), "data": run.get("data")}, identity)
    if not changes:
        saved = {f"config.{k}": v for k, v in (run.get("config") or {}).items()}
        changes = identity_changes(saved, run_identity(agent.config, prefix="config."))  # with the defaults
    if changes:
        raise ConfigError(
            f"cannot resume the run in {str(out)!r}: it was trained with other settings ({changes}); resume with the "
            "same agent, data and config (the step count may change) or choose a new --out folder."
        )
    if (out / "agent").is_dir() and (run.get("steps"), run.get("online_steps")) == steps:
        return True  # agent/ is written when the last phase ends
    online = bool(find_checkpoints(out / "online" / "checkpoints"))
    if not find_checkpoints(out / "checkpoints") and not online:
        raise ConfigError(
            f"{str(out)!r} holds a run without checkpoints, so there is nothing to resume; train with "
            "--checkpoint-every N to make a run resumable, or choose a new --out folder."
        )
    if online and steps[0] != run.get("steps"):  # the offline agent went online; its offline phase is over
        raise ConfigError(
            f"the run in {str(out)!r} has begun its online phase after {run.get('steps')} offline steps, so --steps "
            f"cannot change now; resume with --steps {run.get('steps')} (--online-steps may grow)."
        )
    if online and steps[1]:  # the online phase continues from its checkpoint: its buffer must fit this run's
        from genrl.training import check_online_checkpoint

        check_online_checkpoint(_peek_latest(out / "online" / "checkpoints"), n_data + steps[1])
    ckpt = None if online and steps[1] else _peek_latest(out / "checkpoints")  # the offline phase's, if it runs
    saved = int(ckpt.extra.get("world_size", 1)) if ckpt is not None else nproc
    if saved != nproc:
        raise ConfigError(
            f"checkpoint {str(ckpt.path)!r} was written by {saved} process(es); resume it with --nproc {saved}."
        )
    return False


def _train(args: argparse.Namespace) -> int:
    from gencore.plots import loss_curve
    from gencore.train import find_checkpoints, interruption, launch, signal_received
    from gencore.train.metrics_log import read_metrics
    from genrl.agents import AGENTS, load_agent
    from genrl.training import ReplayBuffer, check_action_bounds, train_online

    if args.agent not in AGENTS or args.agent == "sac":
        offline = ", ".join(a for a in AGENTS if a != "sac")
        raise ConfigError(f"unknown offline agent {args.agent!r}; expected one of: {offline}.")
    for flag in ("steps", "nproc", "log_every", "threads"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}.")
    for flag in ("online_steps", "checkpoint_every"):
        if getattr(args, flag) < 0:
            raise ConfigError(f"--{flag.replace('_', '-')} must be 0 (none) or positive, got {getattr(args, flag)}.")
    agent, ds, card = _build_agent(args)  # checks the data set and config before any process starts
    check_action_bounds(ds.actions, agent.spec, where=f"dataset {args.data!r}")
    if args.online_steps and card.get("env_id") in (None, "toy-bimodal"):
        raise ConfigError(f"dataset {args.data!r} has no gymnasium environment for --online-steps.")
    if agent.config.batch_size % args.nproc:
        raise ConfigError(f"batch size {agent.config.batch_size} must be divisible by --nproc {args.nproc}.")
    device = resolve_device(args.device, args.nproc)  # a missing GPU is reported before any process starts
    if (Path(args.out) / "run.json").is_file() and args.resume is None:
        _read_run(Path(args.out))  # a run.json of another command is named as such
        raise ConfigError(
            f"{str(args.out)!r} already holds a genrl run (run.json); pass --resume to continue it from its "
            "checkpoints or choose a new --out folder."
        )
    identity = {"agent": args.agent, "data": str(Path(args.data).resolve())}
    steps = (args.steps, args.online_steps)
    if args.resume is not None and _check_resumable(Path(args.out), identity, agent, steps, args.nproc, len(ds)):
        return report_finished(args.out)
    out = ensure_dir(args.out)
    if args.resume is not None and (out / "agent").is_dir():
        # the run trains on, so its old agent/ is not its result any more: a stop before the end must leave none
        shutil.rmtree(out / "agent")
    run_info = {
        "agent": args.agent,
        "data": str(Path(args.data).resolve()),
        "env_id": card.get("env_id"),
        "steps": args.steps,
        "online_steps": args.online_steps,
        "nproc": args.nproc,
        "device": device,
        "config": asdict(agent.config),
        "spec": asdict(agent.spec),
        "dataset_card": {k: card.get(k) for k in ("env_id", "env_version", "policy", "seed", "n_transitions")},
        "created_by": f"genrl {__version__}",
    }
    write_json(out / "run.json", run_info)
    t = time.perf_counter()
    # an online checkpoint holds the whole agent after the offline phase, which then need not run again
    online_resume = bool(
        args.resume is not None and args.online_steps and find_checkpoints(out / "online" / "checkpoints")
    )
    if not online_resume and args.nproc == 1:
        _offline(args, agent, ds)  # the online phase continues with this agent and its optimisers
    elif not online_resume:
        launch(_offline_worker, args, nproc=args.nproc)
    if signal_received() is not None:
        raise interruption(out, "--resume")
    if args.nproc > 1 and not online_resume:  # rank 0's replica (all are equal); the optimisers start afresh online
        agent = load_agent(_offline_agent_dir(args), device)
    if args.online_steps:
        if hasattr(agent, "use_extraction"):
            agent.use_extraction("one-step")
        buffer = ReplayBuffer.from_dataset(ds, extra_capacity=args.online_steps)
        train_online(
            agent,
            card["env_id"],
            buffer,
            args.online_steps,
            out / "online",
            seed=agent.config.seed,
            log_every=args.log_every,
            checkpoint_every=args.checkpoint_every,
            resume=online_resume,
            progress=not args.no_progress,
        )
        if signal_received() is not None:
            raise interruption(out / "online", "--resume")
        agent.save(out / "agent")
    online = [r | {"step": args.steps + r["step"]} for r in read_metrics(out / "online" / "metrics.jsonl")]
    records = read_metrics(out / "metrics.jsonl") + online  # both phases, whether or not this call ran them
    losses = [(r["step"], r["critic_loss"]) for r in records if "critic_loss" in r and r["critic_loss"] > 0]
    if not losses:
        losses = [(r["step"], r["bc_flow_loss"]) for r in records if "bc_flow_loss" in r]
    if losses:
        loss_curve(losses, out / "loss.png", title=f"{args.agent} on {card.get('env_id')}")
    last = {k: v for k, v in records[-1].items() if isinstance(v, float)} if records else {}
    summary = ", ".join(f"{k}={v:.4g}" for k, v in list(last.items())[:4])
    print(
        f"trained {args.agent} for {args.steps} steps in {time.perf_counter() - t:.1f} s -> {out / 'agent'}; {summary}"
    )
    return 0


# ---------------------------------------------------------------------------------------------- evaluate
def _evaluate(args: argparse.Namespace) -> int:
    import torch

    from genrl.agents import load_agent
    from genrl.evaluation import evaluate

    if args.threads < 1:
        raise ConfigError(f"--threads must be a positive integer, got {args.threads}.")
    torch.set_num_threads(args.threads)
    run_dir = Path(args.run)
    if not (run_dir / "run.json").is_file():
        raise StorageError(f"{str(run_dir)!r} is not a genrl run folder (no run.json); make one with `genrl train`.")
    info = _read_run(run_dir)
    # every file of agent/ (its weights too: --json RUN/agent/model.safetensors replaced them with the record)
    refuse_overwriting_input(args.json, "--json", run_dir / "run.json", *sorted((run_dir / "agent").glob("*")))
    env_id = args.env or info.get("env_id")
    if args.env == "toy-bimodal":  # was told to "pass --env", which it had
        raise ConfigError("--env toy-bimodal is genrl's offline toy chain, not a gymnasium environment to roll out in.")
    if env_id in (None, "toy-bimodal"):
        raise ConfigError(f"run {str(run_dir)!r} has no gymnasium environment; pass --env.")
    if not (run_dir / "agent" / "config.json").is_file():
        raise StorageError(
            f"{str(run_dir)!r} holds no trained agent (agent/): its training has not finished; continue it with the "
            "same `genrl train` command and --resume."
        )
    agent = load_agent(run_dir / "agent", resolve_device(args.device))
    res = evaluate(
        agent, env_id, args.episodes, seed=args.seed, deterministic=not args.stochastic, progress=not args.no_progress
    )
    res["run"] = str(run_dir)
    keys = ("agent", "env_id", "episodes", "return_mean", "return_std", "nfe_per_decision", "latency_ms")
    print(format_table([{k: res[k] for k in keys}]))
    if args.json:
        write_json(args.json, res)
    return 0


# ---------------------------------------------------------------------------------------------- demo
def _demo(args: argparse.Namespace) -> int:
    from genrl.demo import run_demo

    run_demo(args.out, progress=not args.no_progress)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser, commands = package_parser("genrl", __version__, DESCRIPTION)

    ds = commands.add_parser("dataset", help="make or inspect offline datasets")
    ds_cmds = add_commands(ds)
    mk = ds_cmds.add_parser("make", help="generate a dataset locally (gymnasium env, OGBench or toy-bimodal)")
    mk.add_argument(
        "--env",
        required=True,
        help="gymnasium id with Box actions (Pendulum-v1, Hopper-v5, ...), toy-bimodal, or OGBench cube-single / "
        "puzzle-3x3 (e.g. cube-single-play-v0, puzzle-3x3-noisy-singletask-task2-v0; needs genrl[ogbench])",
    )
    mk.add_argument(
        "--policy",
        default=None,
        help="random | medium | medium-replay | medium-expert | expert (SAC trained here; medium-replay: its replay "
        "buffer; medium-expert: half medium, half expert, from one SAC run); "
        "OGBench: oracle-play | oracle-noisy "
        "(default: random, or the OGBench id's oracle)",
    )
    mk.add_argument("--steps", type=int, default=10_000, help="transitions to collect")
    mk.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="SAC budget (medium, medium-replay: 20k; expert, medium-expert: 100k, medium snapshot at 1/5)",
    )
    mk.add_argument("--episode-length", type=int, default=None, help="OGBench collection episode length (1000)")
    mk.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the environment, the policy and its training (default 0)"
    )
    mk.add_argument("--out", required=True, type=output_folder, help="new output folder (data.npz + card.json)")
    mk.add_argument("--no-progress", action="store_true", help="hide progress bars")
    mk.set_defaults(func=_dataset_make)
    ex = ds_cmds.add_parser("export", help="write a dataset as a Minari HDF5 dataset (needs genrl[minari])")
    ex.add_argument("dir", help="genrl dataset folder")
    ex.add_argument("--format", default="minari", choices=["minari"], help="target format")
    ex.add_argument("--out", required=True, type=output_folder, help="output folder; the Minari data goes to OUT/data")
    ex.add_argument("--dataset-id", default=None, help="Minari id (namespace/name-vN); default genrl/<env>-<policy>-v0")
    ex.set_defaults(func=_dataset_export)
    im = ds_cmds.add_parser("import", help="read a Minari HDF5 dataset folder into the genrl layout")
    im.add_argument("src", help="Minari dataset folder (holding metadata.json + main_data.hdf5, or data/ with them)")
    im.add_argument("--format", default="minari", choices=["minari"], help="source format")
    im.add_argument("--out", required=True, type=output_folder, help="new genrl dataset folder")
    im.set_defaults(func=_dataset_import)
    inf = ds_cmds.add_parser("info", help="print a dataset's card")
    inf.add_argument("dir", help="dataset folder")
    inf.add_argument("--json", action="store_true", help="print the whole card as JSON")
    inf.set_defaults(func=_dataset_info)

    tr = commands.add_parser("train", help="train an agent offline (then optionally online)")
    tr.add_argument("--agent", required=True, help="value-flows | fql | flow-bc | c51 | iqn")
    tr.add_argument("--data", required=True, help="dataset folder")
    tr.add_argument("--steps", type=int, default=10_000, help="offline updates")
    tr.add_argument("--online-steps", type=int, default=0, help="environment steps of offline-to-online fine-tuning")
    tr.add_argument("--out", required=True, type=output_folder, help="run folder")
    tr.add_argument("--config", default=None, help="YAML file of agent config fields")
    tr.add_argument("--batch-size", type=int, default=None, help="overrides the --config file's (default 256)")
    tr.add_argument("--seed", type=seed_int, default=None, help="overrides the --config file's (default 0)")
    tr.add_argument("--log-every", type=int, default=50, help="updates (offline) and environment steps (online)")
    tr.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="updates (offline) and environment steps (online) between checkpoints; 0: only on SIGTERM/Ctrl-C",
    )
    tr.add_argument(
        "--resume",
        nargs="?",
        const="auto",
        choices=("auto",),
        help="continue from the newest checkpoint in OUT/online/checkpoints, else OUT/checkpoints ('--resume' and "
        "'--resume auto', as in the other gen* commands, are the same)",
    )
    tr.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a busy machine)")
    add_device_argument(tr, nproc=True)
    tr.add_argument(
        "--nproc", type=int, default=1, help="offline learner processes (gloo; gradients averaged every step)"
    )
    tr.add_argument("--no-progress", action="store_true", help="hide progress bars")
    tr.set_defaults(func=_train)

    ev = commands.add_parser("evaluate", help="roll out a trained agent in vectorised environments")
    ev.add_argument("--run", required=True, help="run folder written by genrl train")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to roll out (default 10)")
    ev.add_argument("--json", default=None, type=output_file, help="write the result record here")
    ev.add_argument("--env", default=None, help="override the run's environment id")
    ev.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the environments and the policy noise (default 0)"
    )
    ev.add_argument("--stochastic", action="store_true", help="sample actions instead of the deterministic policy")
    ev.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ev.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_device_argument(ev)
    ev.set_defaults(func=_evaluate)

    dm = commands.add_parser("demo", help="toy-MDP critic comparison and a Pendulum pipeline (under 3 min)")
    dm.add_argument("--out", type=output_folder, default="report/genrl", help="report folder")
    dm.add_argument("--no-progress", action="store_true", help="hide progress bars")
    dm.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
