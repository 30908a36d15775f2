"""Wright-Fisher unification in miniature: one denoiser, three domains, one unit; small-tau stability; exact sampler.

"A Unification of Discrete, Gaussian, and Simplicial Diffusion" (Chandra, Li, Amin et al.,
ICLR 2026) claims that discrete, Gaussian and simplicial diffusion are one Wright-Fisher process,
that one network can serve all three through a sufficient-statistic input, and that the
simplicial process, simulated exactly from the coalescent, trains stably where plain Jacobi /
Dirichlet-SDE recipes fail at small tau. On the synthetic DNA task (K = 4, length 48) this
script:

1. trains a small TokenDenoiser (hidden 64, depth 2) for wf-discrete, wf-gaussian, wf-simplex,
   the plain dirichlet-sde baseline and the same baseline restricted to tau >= 0.3, with equal
   steps, and reports the test bound in nats per position (first step with a non-finite loss);
2. evaluates the simplex and baseline losses of a fresh network at fixed tau from 1e-4 to 1;
3. compares the exact forward sampler with fine-step Euler-Maruyama and the closed-form WF
   moments (mean and variance of two coordinates) at tau = 1e-3 .. 1.

    python bench_wright_fisher.py results/bench_wright_fisher.json [steps]
"""

from __future__ import annotations

import math
import time

import torch

from gencore.command import benchmark_parser
from gencore.discrete.network import TokenDenoiser
from gencore.discrete.simplex import JacobiDirichletSDE, WrightFisherSimplex, euler_maruyama_wf, wf_moments
from gencore.discrete.tasks import make_task
from gencore.discrete.wright_fisher import WrightFisherDiscrete, WrightFisherGaussian
from gencore.io import write_json
from gencore.tables import format_table, pivot

BATCH, LR, HIDDEN, DEPTH = 64, 1e-3, 64, 2


def processes() -> dict:
    return {
        "wf-discrete": WrightFisherDiscrete(4),
        "wf-gaussian": WrightFisherGaussian(4),
        "wf-simplex": WrightFisherSimplex(4),
        "dirichlet-sde": JacobiDirichletSDE(4),
        "dirichlet-sde (tau>=0.3)": JacobiDirichletSDE(4, tau_min=0.3),
    }


def train_and_evaluate(name, proc, task, steps: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = TokenDenoiser(proc.input_dim, 4, task.length, hidden=HIDDEN, depth=DEPTH, local_kernel=0)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(seed)
    first_bad, losses, start = None, [], time.perf_counter()
    for step in range(1, steps + 1):
        idx = torch.randint(0, task.train.shape[0], (BATCH,), generator=g)
        loss, _ = proc.loss(model, task.train[idx], generator=g)
        if not torch.isfinite(loss):
            first_bad = step
            break
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    train_s = time.perf_counter() - start
    bound = float("nan")
    if first_bad is None:
        model.eval()
        bound = float(proc.nll_bound(model, task.test[:256], n_time=32, generator=g).mean())
    tail = losses[-50:] or [float("nan")]
    return {
        "process": name,
        "nll_nats_per_token": bound,
        "first_nonfinite_step": first_bad if first_bad is not None else "-",
        "train_loss_last50": sum(tail) / len(tail),
        "steps_done": len(losses),
        "train_s": train_s,
    }


def small_tau_losses(taus=(1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.3, 1.0)) -> list[dict]:
    """Loss rate per unit tau of a fresh network at one fixed tau, simplex vs the Jacobi baseline.

    Each process is restricted to a band ``[0.999 tau, 1.001 tau]`` and its loss divided by
    ``dtau/dt`` there, so the value is the KL rate (simplex) or the score-matching rate (baseline).
    """
    task = make_task("dna", n=256)
    records = []
    for name, cls in (("wf-simplex", WrightFisherSimplex), ("dirichlet-sde", JacobiDirichletSDE)):
        for tau in taus:
            torch.manual_seed(0)
            model = TokenDenoiser(4, 4, task.length, hidden=HIDDEN, depth=DEPTH, local_kernel=0)
            proc = cls(4, tau_min=tau * 0.999, tau_max=tau * 1.001)
            loss, _ = proc.loss(model, task.train[:64], generator=torch.Generator().manual_seed(1))
            finite = bool(torch.isfinite(loss))
            grads_ok = False
            if finite:
                loss.backward()
                grads_ok = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
            rate = float(loss.detach()) / float(proc.dtau_dt(torch.tensor(0.5)))
            records.append({"process": name, "tau": tau, "rate": rate, "finite_loss_and_grad": finite and grads_ok})
    return records


def moment_check(taus=(1e-3, 1e-2, 0.1, 1.0), n: int = 10000, em_steps: int = 500) -> list[dict]:
    """Exact sampler vs Euler-Maruyama (``em_steps`` steps) vs closed-form WF moments, K = 4, x0 = 0."""
    proc = WrightFisherSimplex(4)
    g = torch.Generator().manual_seed(2)
    x0 = torch.zeros(n, 1, dtype=torch.long)
    records = []
    for tau in taus:
        t = proc.t_of_tau(tau).repeat(n)
        exact = proc.forward_sample(x0, t, generator=g).exp()[:, 0]
        em = euler_maruyama_wf(x0, torch.full((n,), tau), proc.psi, proc.pi, em_steps, generator=g)[:, 0]
        mean, cov = wf_moments(0, tau, proc.psi, proc.pi)
        for coord in (0, 1):
            se_m = float(exact[:, coord].std()) / math.sqrt(n)
            dev = (exact[:, coord] - exact[:, coord].mean()) ** 2
            se_v = float(dev.std()) / math.sqrt(n)
            records.append(
                {
                    "tau": tau,
                    "coord": coord,
                    "mean_closed": float(mean[coord]),
                    "mean_exact": float(exact[:, coord].mean()),
                    "mean_em": float(em[:, coord].mean()),
                    "z_mean_exact": (float(exact[:, coord].mean()) - float(mean[coord])) / se_m,
                    "var_closed": float(cov[coord, coord]),
                    "var_exact": float(exact[:, coord].var()),
                    "var_em": float(em[:, coord].var()),
                    "z_var_exact": (float(exact[:, coord].var()) - float(cov[coord, coord])) / se_v,
                }
            )
    return records


def main(out_json: str | None = None, steps: int = 300) -> dict:
    torch.set_num_threads(2)
    task = make_task("dna")
    start = time.perf_counter()
    train = [train_and_evaluate(name, proc, task, steps) for name, proc in processes().items()]
    print(f"\nsynthetic DNA (K=4, L=48): test bound, nats/position, {steps} steps x batch {BATCH}, log 4 = 1.386")
    print(format_table(train))
    stability = small_tau_losses()
    print("\nloss rate per unit tau of a fresh network at fixed tau (NaN = failure)")
    print(format_table(pivot(stability, "process", "tau", "rate")))
    moments = moment_check()
    print("\nexact forward sampler vs Euler-Maruyama (500 steps) vs closed-form WF moments (x0 = 0)")
    print(format_table(moments))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    result = {
        "config": {"task": "dna", "steps": steps, "batch": BATCH, "lr": LR, "hidden": HIDDEN, "depth": DEPTH},
        "train": train,
        "small_tau": stability,
        "moments": moments,
    }
    if out_json:
        write_json(out_json, result)
    return result


if __name__ == "__main__":
    parser = benchmark_parser(__doc__)
    parser.add_argument("steps", nargs="?", type=int, default=300, help="training steps per model (default 300)")
    args = parser.parse_args()
    main(args.out_json, args.steps)
