"""Value Flows vs FQL on self-generated data at equal updates and seeds, with NFE and decision latency.

Usage: ``python bench_vf_vs_fql.py OUT.json [--env Hopper-v5] [--policy medium] [--data-steps 100000]
[--train-steps 20000] [--data DIR] [--updates 20000] [--eval-every 0] [--seeds 0,1] [--episodes 10]
[--hidden 256] [--alpha A]``.

The dataset is generated here (``medium``: SAC trained for ``--train-steps`` env steps, see
:mod:`genrl.generate`; an OGBench id such as ``cube-single`` uses its scripted oracle) or, with ``--data DIR``,
loaded from DIR when DIR holds a dataset (otherwise generated and saved there). Each agent then trains offline
for ``--updates`` steps per seed on the same data, with the same network width, batch size and learning rate,
and is evaluated on the same evaluation seeds (``--eval-seed`` onwards) in the card's evaluation env. Every
agent is evaluated from the same weights with its own extraction and with the other one: Value Flows with
best-of-N (``value-flows``) and its one-step policy (``value-flows/one-step``), FQL with its one-step policy
(``fql``) and best-of-N over its own critic (``fql/best-of-n``), which separates the critic from the extraction.
The one-step policies act from zero noise (``deterministic``); each is also evaluated from sampled noise
(``.../one-step-sampled``), which is how FQL's reference code evaluates it. Records are written to OUT after
every evaluation, so an interrupted run keeps what it finished. ``--eval-every K`` also evaluates every K
updates during training (a learning curve; the records' ``updates`` say when), drawing from the agent's noise
stream, so the later updates differ from a run without it. The paper reports a 1.3x average improvement of Value
Flows over the best baseline on OGBench/D4RL at 1M updates; this script runs the comparison at whatever budget a
machine allows."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gencore.io import write_json
from gencore.tables import format_table
from genrl.agents import EnvSpec, make_agent
from genrl.dataset import load_dataset, save_dataset
from genrl.evaluation import evaluate
from genrl.generate import make_dataset
from genrl.training import ReplayBuffer, train_offline

CARD_KEYS = ("env_id", "dataset_name", "policy", "task", "seed", "n_transitions", "n_episodes", "returns")


def get_data(args: argparse.Namespace):
    if args.data and (Path(args.data) / "card.json").exists():
        return load_dataset(args.data)
    ds, card = make_dataset(
        args.env, args.policy, args.data_steps, args.data_seed, train_steps=args.train_steps, progress=False
    )
    if args.data:
        save_dataset(args.data, ds, card)
        ds, card = load_dataset(args.data)  # the card gains its checksum
    return ds, card


def summarise(records: list[dict]) -> list[dict]:
    out = []
    for name, updates in dict.fromkeys((r["agent"], r["updates"]) for r in records):
        rs = [r for r in records if r["agent"] == name and r["updates"] == updates]
        row = {
            "agent": name,
            "seeds": len(rs),
            "updates": updates,
            "return_mean": statistics.mean(r["return_mean"] for r in rs),
            "return_sd_over_seeds": statistics.pstdev(r["return_mean"] for r in rs),
        }
        if rs[0]["success_rate"] is not None:
            row["success_mean"] = statistics.mean(r["success_rate"] for r in rs)
            row["success_sd_over_seeds"] = statistics.pstdev(r["success_rate"] for r in rs)
        row["nfe_per_decision"] = rs[0]["nfe_per_decision"]
        row["latency_ms"] = statistics.median(r["latency_ms"] for r in rs)
        row["train_ms_per_update"] = statistics.median(r["train_ms_per_update"] for r in rs)
        out.append(row)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--env", default="Hopper-v5", help="gymnasium id or OGBench id (cube-single, puzzle-3x3, ...)")
    p.add_argument("--policy", default=None, help="behaviour policy (default: medium; OGBench: its oracle)")
    p.add_argument("--data-steps", type=int, default=100_000)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--train-steps", type=int, default=None, help="SAC budget for medium/expert data")
    p.add_argument("--data", default=None, help="dataset folder: loaded if present, else generated and saved there")
    p.add_argument("--updates", type=int, default=20_000)
    p.add_argument("--eval-every", type=int, default=0, help="also evaluate every K updates (a learning curve)")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--eval-seed", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--agents", default="fql,value-flows")
    p.add_argument("--alpha", type=float, default=None, help="one-step policy distillation weight (default: agent's)")
    p.add_argument("--device", default="cpu", help="where the agents train and act: cpu, cuda (default cpu)")
    args = p.parse_args()
    if args.policy is None and not args.env.startswith(("cube-", "puzzle-")):
        args.policy = "medium"
    t0 = time.perf_counter()
    ds, card = get_data(args)
    data_s = time.perf_counter() - t0
    print(f"data: {card['env_id']} {card['n_transitions']} transitions, {data_s:.0f} s", flush=True)
    spec = EnvSpec.from_dataset(ds, card)
    buffer = ReplayBuffer.from_dataset(ds)
    setup = {**{k: v for k, v in vars(args).items() if k != "out"}, "eval_env": card["env_id"]}
    records: list[dict] = []

    def record(name: str, seed: int, agent, updates: int, train_s: float) -> None:
        """Evaluate ``agent`` with both extractions (its own first), append the records and rewrite OUT."""
        own = agent.config.extraction
        runs = [(m, True) for m in (own, *(m for m in ("best-of-n", "one-step") if m != own))]
        runs.append(("one-step", False))  # the one-step policy from sampled noise, as FQL's reference evaluates
        for mode, deterministic in runs:
            agent.use_extraction(mode)
            res = evaluate(agent, card["env_id"], args.episodes, seed=args.eval_seed, deterministic=deterministic)
            label = name if mode == own else f"{name}/{mode}"
            rec = {
                "agent": label if deterministic else f"{name}/one-step-sampled",
                "seed": seed,
                "updates": updates,
                "return_mean": res["return_mean"],
                "return_std_over_episodes": res["return_std"],
                "success_rate": res["success_rate"],
                "episode_length_mean": res["episode_length_mean"],
                "nfe_per_decision": res["nfe_per_decision"],
                "latency_ms": res["latency_ms"],
                "train_s": train_s,
                "train_ms_per_update": 1000.0 * train_s / updates,
            }
            records.append(rec)
            print(format_table([rec]), flush=True)
        agent.use_extraction(own)  # training continues in the agent's own mode
        write_json(
            args.out,
            {
                "setup": setup,
                "dataset": {k: card.get(k) for k in CARD_KEYS},
                "records": records,
                "summary": summarise(records),
                "wall_s": time.perf_counter() - t0,
                "data_s": data_s,
            },
        )

    for seed in (int(s) for s in args.seeds.split(",")):
        for name in args.agents.split(","):
            overrides = {"seed": seed, "hidden": args.hidden, "batch_size": args.batch_size}
            if args.alpha is not None:
                overrides["alpha"] = args.alpha
            agent = make_agent(name, spec, overrides)
            t = time.perf_counter()
            evals = 0.0  # seconds spent in intermediate evaluations, not counted as training time

            def curve(step: int, agent, name=name, seed=seed, t=t) -> dict:
                nonlocal evals
                if step == args.updates:
                    return {}  # the final evaluation follows training
                e = time.perf_counter()
                record(name, seed, agent, step, e - t - evals)
                evals += time.perf_counter() - e
                return {}

            with tempfile.TemporaryDirectory() as run_dir:
                train_offline(
                    agent,
                    buffer,
                    args.updates,
                    run_dir,
                    progress=False,
                    callback=curve,
                    callback_every=args.eval_every,
                    device=args.device,
                )
            record(name, seed, agent, args.updates, time.perf_counter() - t - evals)
    print(format_table(summarise(records), markdown=True))


if __name__ == "__main__":
    main()
