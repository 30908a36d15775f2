"""Diagnostic: why FQL's one-step policy can fail where best-of-N over the same critic succeeds.

Usage: ``python diag_fql_onestep.py OUT.json --data DIR [--updates 20000] [--alphas 300,30] [--hidden 256]
[--seed 0] [--episodes 50] [--states 2048]``.

On self-generated OGBench cube-single play data (``bench_vf_vs_fql.py``), FQL's critic acting best-of-16 over
BC-flow actions reached 46-70 % success after 30,000-40,000 updates, while the one-step policy trained against
the same critic stayed at 0-2 %. For each distillation weight ``alpha`` this script trains FQL on a dataset
folder (seed, width and batch as in the benchmark) and reports, on ``--states`` dataset states (all in the
critic's scaled-reward units):

* ``q_data``: Q of the data's own actions; ``q_bc``: Q of BC-flow actions (one noise each);
* ``q_onestep`` / ``q_onestep_zero``: Q of the one-step policy from sampled / zero noise;
* ``q_best_of_n``: Q of the best of ``n_candidates`` BC-flow actions (what best-of-N acts with);
* ``distill_gap``: mean squared distance between the one-step action and the BC-flow action from the same
  noise (the distillation term the policy minimises, before the weight ``alpha``);
* success rate of the one-step policy (sampled noise) and of best-of-N, over ``--episodes`` episodes.

If ``q_onestep`` sits at ``q_bc`` (not at ``q_best_of_n``) and ``distill_gap`` is small, the distillation term
holds the policy on the BC flow and the Q term does not move it; a smaller ``alpha`` then tests whether the
policy can climb the critic at all. It is a diagnostic of the comparison, not a tuned result.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from gencore.io import write_json
from genrl.agents import EnvSpec, make_agent
from genrl.dataset import load_dataset
from genrl.evaluation import evaluate
from genrl.training import ReplayBuffer, train_offline


@torch.no_grad()
def action_values(agent, observations: torch.Tensor) -> dict[str, float]:
    """Mean Q of the data's, the BC flow's, the one-step policy's and best-of-N's actions on ``observations``."""
    obs = agent.norm_obs(observations)
    b, a = obs.shape[0], agent.spec.action_dim
    eps = agent.noise(b, a)
    bc = agent.flow_actions(obs, eps)
    onestep = agent.onestep_actions(obs, eps)

    def q(act: torch.Tensor) -> float:
        return agent.q_value(agent.critic, obs, act).mean().item()

    return {
        "q_bc": q(bc),
        "q_onestep": q(onestep),
        "q_onestep_zero": q(agent.onestep_actions(obs, torch.zeros_like(eps))),
        "q_best_of_n": q(agent.best_of_n(obs)),
        "distill_gap": ((onestep - bc) ** 2).mean().item(),
        "states": b,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--data", required=True)
    p.add_argument("--updates", type=int, default=20_000)
    p.add_argument("--alphas", default="300,30")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--eval-seed", type=int, default=1000)
    p.add_argument("--states", type=int, default=2048)
    args = p.parse_args()
    t0 = time.perf_counter()
    ds, card = load_dataset(args.data)
    spec = EnvSpec.from_dataset(ds, card)
    pick = torch.randperm(len(ds), generator=torch.Generator().manual_seed(args.seed))[: args.states].numpy()
    states = torch.as_tensor(ds.observations[pick])
    data_actions = torch.as_tensor(ds.actions[pick])
    runs = []
    for alpha in (float(x) for x in args.alphas.split(",")):
        agent = make_agent("fql", spec, {"seed": args.seed, "hidden": args.hidden, "alpha": alpha})
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as run_dir:
            log = train_offline(agent, ReplayBuffer.from_dataset(ds), args.updates, run_dir, progress=False)
        row = {"alpha": alpha, "updates": args.updates, "train_s": time.perf_counter() - start}
        row |= action_values(agent, states)
        with torch.no_grad():
            q_data = agent.q_value(agent.critic, agent.norm_obs(states), agent.norm_action(data_actions))
        row["q_data"] = q_data.mean().item()
        for mode, deterministic, key in (("one-step", False, "onestep_sampled"), ("best-of-n", True, "best_of_n")):
            agent.use_extraction(mode)
            res = evaluate(agent, card["env_id"], args.episodes, seed=args.eval_seed, deterministic=deterministic)
            row[f"success_{key}"] = res["success_rate"]
        row["last_log"] = {k: v for k, v in log[-1].items() if isinstance(v, (int, float))}
        runs.append(row)
        print(row, flush=True)
        write_json(
            args.out,
            {
                "setup": {k: v for k, v in vars(args).items() if k != "out"},
                "env_id": card["env_id"],
                "runs": runs,
                "wall_s": time.perf_counter() - t0,
            },
        )


if __name__ == "__main__":
    main()
