"""How good can a flow critic be on the toy chain without bootstrapping? Plain conditional flow matching.

One ``ReturnVelocity`` of the toy benchmark's size (128 x 3), optimiser (Adam 1e-3, cosine decay), batch (256) and
budget (6,000 updates) is trained by plain linear-path flow matching on return samples of every state, with no
Bellman backup, no DCFM term and no confidence weights. Two kinds of targets:

* ``fresh``: a new draw of the true return law ``Z(k, c)`` for every sample (no data limit);
* ``data``: the discounted Monte-Carlo return of each row of the benchmark's own data set (2,000 episodes,
  generated with the same seed as ``bench_toy_critics.py``), so the critic sees exactly the data the
  distributional critics see.

Scored like ``bench_toy_critics.py``: W1 against the analytic law on the same evaluation states, 10,000 samples
per state, read out with 10 Euler and 10 midpoint steps, per number of steps to go and over all states.

Run: ``python benchmarks/diag_toy_flow_oracle.py OUT.json --targets fresh|data [--seeds 0,1,2]`` (one thread,
about a minute per seed).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from gencore.io import write_json
from gencore.solvers import solve_ode
from gencore.train import TrainConfig
from genrl.networks import ReturnVelocity
from genrl.toy_experiment import eval_states
from genrl.toy_mdp import BimodalChain, cdf_errors


def _data_sampler(chain: BimodalChain, episodes: int, seed: int, rng: np.random.Generator):
    ds = chain.dataset(episodes, seed=seed)
    final = np.repeat(ds.rewards[ds.terminals], chain.length)  # each episode's last reward, on all its rows
    returns = chain.discount ** chain.steps_to_go(ds.observations) * final
    obs, act = torch.tensor(ds.observations, dtype=torch.float32), torch.tensor(ds.actions, dtype=torch.float32)
    z = torch.tensor(returns[:, None], dtype=torch.float32)

    def draw(batch: int):
        idx = torch.from_numpy(rng.integers(0, len(obs), batch))
        return obs[idx], act[idx], z[idx]

    return draw


def _fresh_sampler(chain: BimodalChain, rng: np.random.Generator):
    def draw(batch: int):
        obs = chain.observation(rng.integers(0, chain.length, batch), rng.uniform(0.0, 1.0, batch))
        z = chain.sample_returns(obs, 1, rng)
        act = rng.uniform(-1.0, 1.0, (batch, 1))
        return (torch.tensor(a, dtype=torch.float32) for a in (obs, act, z))

    return draw


def run(targets: str, seed: int, steps: int = 6000, batch: int = 256, episodes: int = 2000) -> dict:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    chain = BimodalChain()
    draw = _data_sampler(chain, episodes, seed, rng) if targets == "data" else _fresh_sampler(chain, rng)
    net = ReturnVelocity(chain.obs_dim, 1, 128, 3)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    schedule = TrainConfig(steps=steps, lr=1e-3, schedule="cosine", warmup_steps=0).validate()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule.lr_factor)
    start = time.perf_counter()
    for _ in range(steps):
        obs, act, z1 = draw(batch)
        eps, t = torch.randn(batch, 1, generator=g), torch.rand(batch, 1, generator=g)
        loss = ((net(t * z1 + (1 - t) * eps, t.squeeze(-1), obs, act) - (z1 - eps)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    states = eval_states(chain)
    togo = chain.steps_to_go(states)
    n, grid = 10_000, np.linspace(-2.5, 2.5, 4001)
    cdf = chain.return_cdf(states, np.tile(grid, (len(states), 1)))
    record = {"targets": targets, "seed": seed, "train_s": round(time.perf_counter() - start, 1)}
    obs = torch.tensor(np.repeat(states, n, 0), dtype=torch.float32)
    act = torch.zeros(len(obs), 1)
    for method in ("euler", "midpoint"):
        eps = torch.randn(len(obs), 1, generator=torch.Generator().manual_seed(123))
        with torch.no_grad():
            samples = solve_ode(lambda x, s: net(x, s, obs, act), eps, steps=10, method=method).x
        samples = samples.reshape(len(states), n).numpy()
        record[f"w1_{method}10"] = cdf_errors(samples, cdf, grid)["w1"]
        for j in range(chain.length):
            record[f"w1_{method}10_j{j}"] = cdf_errors(samples[togo == j], cdf[togo == j], grid)["w1"]
    return record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--targets", choices=("fresh", "data"), required=True)
    p.add_argument("--seeds", default="0,1,2")
    args = p.parse_args()
    torch.set_num_threads(1)
    records = []
    for seed in (int(s) for s in args.seeds.split(",")):
        records.append(run(args.targets, seed))
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in records[-1].items()}, flush=True)
        write_json(args.out, {"settings": vars(args), "records": records})


if __name__ == "__main__":
    main()
