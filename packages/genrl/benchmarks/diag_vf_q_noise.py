"""Diagnostic: how much of Value Flows' best-of-N choice is decided by the critic's read-out noise.

Usage: ``python diag_vf_q_noise.py OUT.json --data DIR [--updates 2500] [--hidden 128] [--seed 0]
[--episodes 10] [--noises 64] [--eval-q-noises 32]``.

Value Flows reads ``Q(s, a) = eps + v(eps, 0 | s, a)`` with one noise ``eps`` per candidate (as its reference
code does). Because BCFM couples the bootstrapped return with the same ``eps``, this read-out is the
``eps``-quantile of the learned return law, not its mean: unbiased over ``eps`` but spread like the law
itself. Early in training that spread is still mostly the N(0, 1) source, which contracts only by the discount
per effective Bellman backup. This script trains Value Flows on a dataset folder (as ``bench_vf_vs_fql.py``
does for one seed) and reports, on dataset states with ``n_candidates`` BC-flow actions each:

* ``read_out_sd``: spread of the single-noise Q of one (s, a) over noises (the read-out noise);
* ``candidate_sd``: spread over the candidates of the noise-averaged Q (the signal best-of-N selects on);
* ``argmax_agreement``: how often the single-noise best-of-N pick equals the noise-averaged pick (1/N by
  chance);
* the critic's ``return_std`` (mean ``|dz_1/deps|`` on data) over training, all in scaled-reward units;

and evaluates the same weights with the default read-out and with ``--eval-q-noises`` averaged noises. It is a
diagnostic of the comparison, not a tuned result.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

import torch

from gencore.io import write_json
from genrl.agents import EnvSpec, make_agent
from genrl.dataset import load_dataset
from genrl.evaluation import evaluate
from genrl.training import ReplayBuffer, train_offline


@torch.no_grad()
def read_out_stats(agent, observations: torch.Tensor, noises: int) -> dict[str, float]:
    """Read-out noise against candidate signal for best-of-N on ``observations`` (environment units)."""
    n, a = agent.config.n_candidates, agent.spec.action_dim
    obs = agent.norm_obs(observations)
    b = obs.shape[0]
    obs_n = obs.repeat_interleave(n, 0)
    cand = agent.flow_actions(obs_n, agent.noise(b * n, a))
    q = torch.stack([agent.critic.q(obs_n, cand, agent.generator) for _ in range(noises)])  # [K, B * N]
    q = q.reshape(noises, b, n)
    mean_q = q.mean(0)  # [B, N], noise-averaged
    single_pick = q[0].argmax(1)
    return {
        "read_out_sd": q.std(0).mean().item(),
        "candidate_sd": mean_q.std(1).mean().item(),
        "argmax_agreement": (single_pick == mean_q.argmax(1)).float().mean().item(),
        "chance_agreement": 1.0 / n,
        "q_mean": mean_q.mean().item(),
        "states": b,
        "candidates": n,
        "noises": noises,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--data", required=True)
    p.add_argument("--updates", type=int, default=2500)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--eval-seed", type=int, default=1000)
    p.add_argument("--states", type=int, default=256)
    p.add_argument("--noises", type=int, default=64)
    p.add_argument("--eval-q-noises", type=int, default=32)
    args = p.parse_args()
    t0 = time.perf_counter()
    ds, card = load_dataset(args.data)
    agent = make_agent("value-flows", EnvSpec.from_dataset(ds, card), {"seed": args.seed, "hidden": args.hidden})
    with tempfile.TemporaryDirectory() as run_dir:
        log = train_offline(agent, ReplayBuffer.from_dataset(ds), args.updates, run_dir, progress=False)
    pick = torch.randperm(len(ds), generator=torch.Generator().manual_seed(args.seed))[: args.states]
    stats = read_out_stats(agent, torch.as_tensor(ds.observations[pick.numpy()]), args.noises)
    print(stats, flush=True)
    evals = {}
    for k in (1, args.eval_q_noises):
        agent.critic.cfg = replace(agent.critic.cfg, q_noises=k)
        res = evaluate(agent, card["env_id"], args.episodes, seed=args.eval_seed)
        evals[f"q_noises_{k}"] = {key: res[key] for key in ("return_mean", "return_std", "success_rate")}
        print(k, evals[f"q_noises_{k}"], flush=True)
    write_json(
        args.out,
        {
            "setup": {k: v for k, v in vars(args).items() if k != "out"},
            "env_id": card["env_id"],
            "read_out": stats,
            "return_std_during_training": [[r["step"], r["return_std"]] for r in log],
            "evaluation": evals,
            "wall_s": time.perf_counter() - t0,
        },
    )


if __name__ == "__main__":
    main()
