"""Does FLDD's phi gradient descend the bound on binarised digits (T = 4, length 64)?

Separates an estimator bug from an optimisation difficulty. The reverse model is trained for
``--warm-steps`` with phi held at the masking schedule (the warm-up phase of
``bench_learnable_forward.py``), then frozen. With theta frozen, the bound on a fixed evaluation batch is a
fixed function of phi, measured with common random numbers (the same Gumbel noise at every phi, ``n_eval``
draws of ``z_s`` per sequence and step; the Gumbel-max coupling keeps each draw an exact sample of
``q_phi``, so differences between two phi are unbiased and far less noisy than independent estimates).

1. Gradient check: for a few scalar directions of phi, the central finite difference of the bound (several
   noise seeds, mean +- standard error) against the mean over ``--grad-reps`` draws of the training
   estimator's directional derivative, for REINFORCE (``reinforce`` phase) and for the straight-through
   Gumbel-softmax (``gumbel`` phase at temperature ``tau``).
2. Descent check: phi alone trained for ``--phi-steps`` on the evaluation batch with each estimator (Adam,
   ``--phi-lr``); the bound before and after (same noise) and the share of pixels still masked per step.

Processes: ``sequence`` (:class:`SequenceForwardProcess`, directions: the gate, and the forward network's output
bias of the mask logit, whose derivative is exactly 0 at gate 0, a check that every column respects it) and
``token`` (:class:`LearnableForwardProcess`, directions: the mask shift of one inner step over all positions).
Results: ``benchmarks/results/diag_fldd_phi_gradient_digits*.json`` and the FLDD section of the README.
Run: ``python benchmarks/diag_fldd_phi_gradient.py [out.json] [--processes ...]`` (about 12 min on one core).
"""

from __future__ import annotations

import copy
import math
import sys
import time

import torch

from gencore.command import benchmark_parser
from gencore.discrete.learnable_forward import FewStepForward, LearnableForwardProcess
from gencore.discrete.network import TokenDenoiser
from gencore.discrete.sequence_forward import SequenceForwardProcess
from gencore.discrete.tasks import make_task
from gencore.io import write_json

T = 4
REINFORCE_PROGRESS = 0.99  # a training progress in the REINFORCE phase; the Gumbel phase's follows from --tau


def build(kind: str, task, estimator_kwargs: dict) -> FewStepForward:
    """The learnable process of ``bench_learnable_forward.py`` (warm-up half of training, then 10 % Gumbel)."""
    if kind == "sequence":
        return SequenceForwardProcess(
            task.vocab_size, task.length, steps=T, warmup_fraction=0.5, gumbel_fraction=0.1, **estimator_kwargs
        )
    return LearnableForwardProcess(
        task.vocab_size, task.length, steps=T, warmup_fraction=0.5, gumbel_fraction=0.1, **estimator_kwargs
    )


def warm_theta(proc: FewStepForward, task, steps: int, seed: int) -> TokenDenoiser:
    """Train the reverse model with phi held at masking (warm-up phase), as the benchmark does."""
    torch.manual_seed(seed)
    model = TokenDenoiser(proc.input_dim, proc.output_dim, task.length, hidden=64, depth=2, heads=4, local_kernel=0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(1000 + seed)
    proc.update_schedule(0.0)
    for _ in range(steps):
        batch = task.train[torch.randint(0, task.train.shape[0], (128,), generator=g)]
        loss, _ = proc.loss(model, batch, generator=g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def directions(proc: FewStepForward) -> dict[str, torch.Tensor]:
    """Named unit perturbations of phi: tensors shaped like the flattened phi vector."""
    params = list(proc.parameters())
    sizes = [p.numel() for p in params]
    out = {}

    def unit(param: torch.Tensor, index: tuple | slice) -> torch.Tensor:
        pieces = []
        for p in params:
            d = torch.zeros_like(p)
            if p is param:
                d[index] = 1.0
            pieces.append(d.flatten())
        v = torch.cat(pieces)
        return v / v.norm()

    if isinstance(proc, SequenceForwardProcess):
        out["gate"] = unit(proc.gate, ())
        out["mask-bias"] = unit(proc.forward_net.out.bias, (proc.mask_index,))
    else:
        for s in range(proc.steps - 1):
            out[f"mask-shift-step{s + 1}"] = unit(proc.raw_position, (s, slice(None)))
    assert sum(sizes) == next(iter(out.values())).numel()
    return out


def flat_params(proc: FewStepForward) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in proc.parameters()])


def set_params(proc: FewStepForward, vec: torch.Tensor) -> None:
    start = 0
    with torch.no_grad():
        for p in proc.parameters():
            p.copy_(vec[start : start + p.numel()].view_as(p))
            start += p.numel()


def bound(proc: FewStepForward, model, x: torch.Tensor, n_eval: int, seed: int) -> float:
    """Bound (nats per position) on ``x`` with the Gumbel noise of ``seed`` (common random numbers)."""
    with torch.no_grad():
        return float(proc.nll_bound(model, x, n_time=n_eval, generator=torch.Generator().manual_seed(seed)).mean())


def finite_difference(proc, model, x, d: torch.Tensor, h: float, n_eval: int, seeds: int) -> tuple[float, float]:
    base = flat_params(proc)
    vals = []
    for seed in range(seeds):
        set_params(proc, base + h * d)
        up = bound(proc, model, x, n_eval, 10_000 + seed)
        set_params(proc, base - h * d)
        down = bound(proc, model, x, n_eval, 10_000 + seed)
        vals.append((up - down) / (2 * h))
    set_params(proc, base)
    v = torch.tensor(vals)
    return float(v.mean()), float(v.std() / math.sqrt(len(vals)))


def estimator_mean(proc, model, x, dirs: dict, progress: float, reps: int) -> dict[str, tuple[float, float]]:
    """Mean and standard error of the training loss's directional derivative along each direction."""
    proc.update_schedule(progress)
    params = list(proc.parameters())
    rows = []
    for r in range(reps):
        loss, _ = proc.loss(model, x, generator=torch.Generator().manual_seed(20_000 + r))
        rows.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
    est = torch.stack(rows)
    out = {}
    for name, d in dirs.items():
        proj = est @ d
        out[name] = (float(proj.mean()), float(proj.std() / math.sqrt(reps)))
    return out


def masked_share(proc: FewStepForward, x: torch.Tensor) -> list[float]:
    """Mean ``q_phi(z_s = mask | x)`` over the batch and positions, steps ``1..T-1``."""
    with torch.no_grad():
        if isinstance(proc, SequenceForwardProcess):
            return [
                float(proc.marginals(x, torch.full((x.shape[0],), s))[..., proc.mask_index].mean())
                for s in range(1, proc.steps)
            ]
        marg = proc.marginals()  # [T+1, L, K, S]
        rows = marg[:, torch.arange(x.shape[1])[None, :], x]  # [T+1, B, L, S]
        return [float(rows[s, ..., proc.mask_index].mean()) for s in range(1, proc.steps)]


def descend(proc, model, x, progress: float, steps: int, lr: float, n_eval: int) -> dict:
    """Train phi alone on ``x`` with the estimator of the phase at ``progress``; bound before / after."""
    proc = copy.deepcopy(proc)
    proc.update_schedule(progress)
    opt = torch.optim.Adam(proc.parameters(), lr=lr)
    g = torch.Generator().manual_seed(30_000)
    trace = [bound(proc, model, x, n_eval, 0)]
    for step in range(steps):
        loss, _ = proc.loss(model, x, generator=g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % max(1, steps // 4) == 0:
            trace.append(bound(proc, model, x, n_eval, 0))
    return {"bound_trace": trace, "masked_share_after": masked_share(proc, x)}


def run(kind: str, args, task) -> dict:
    start = time.perf_counter()
    proc = build(kind, task, {})
    model = warm_theta(proc, task, args.warm_steps, args.seed)
    x = task.test[: args.eval_size]
    tau_progress = 0.5 + 0.1 * math.log(args.tau / proc.tau_start) / math.log(proc.tau_end / proc.tau_start)
    phases = {"reinforce": REINFORCE_PROGRESS, "gumbel": tau_progress}
    proc.update_schedule(phases["reinforce"])
    dirs = directions(proc)
    record: dict = {
        "process": kind,
        "warm_steps": args.warm_steps,
        "bound_at_masking": bound(proc, model, x, args.n_eval, 0),
        "masked_share_at_masking": masked_share(proc, x),
        "gradient": {},
        "descent": {},
    }
    for name, d in dirs.items():
        proc.update_schedule(phases["reinforce"])
        fd = finite_difference(proc, model, x, d, args.fd_h, args.n_eval, args.fd_seeds)
        record["gradient"][name] = {"finite_difference": fd}
    for phase, progress in phases.items():
        est = estimator_mean(proc, model, x, dirs, progress, args.grad_reps)
        for name in dirs:
            record["gradient"][name][phase] = est[name]
    for phase, progress in phases.items():
        record["descent"][phase] = descend(proc, model, x, progress, args.phi_steps, args.phi_lr, args.n_eval)
    record["wall_s"] = time.perf_counter() - start
    return record


def report(record: dict) -> None:
    print(f"\n== {record['process']}: bound at masking {record['bound_at_masking']:.4f} nats/position")
    print("direction            finite difference        REINFORCE mean            Gumbel ST mean")
    for name, g in record["gradient"].items():
        cells = [f"{m:+.4f} +- {se:.4f}" for m, se in (g["finite_difference"], g["reinforce"], g["gumbel"])]
        print(f"{name:<20} " + "   ".join(f"{c:<22}" for c in cells))
    for phase, d in record["descent"].items():
        trace = " -> ".join(f"{b:.4f}" for b in d["bound_trace"])
        masked = " / ".join(f"{m:.3f}" for m in d["masked_share_after"])
        print(f"phi-only descent ({phase}): bound {trace}; masked at steps 1..{T - 1}: {masked}")


def main(argv: list[str]) -> list[dict]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--processes", default="sequence,token", help="comma-separated: sequence, token")
    parser.add_argument("--warm-steps", type=int, default=300, help="reverse-model steps with phi held")
    parser.add_argument("--eval-size", type=int, default=64, help="test digits in the evaluation batch")
    parser.add_argument("--n-eval", type=int, default=16, help="draws of z_s per sequence and step in the bound")
    parser.add_argument("--fd-h", type=float, default=0.05, help="finite-difference half step")
    parser.add_argument("--fd-seeds", type=int, default=4, help="noise seeds of the finite difference")
    parser.add_argument("--grad-reps", type=int, default=100, help="estimator draws averaged per phase")
    parser.add_argument("--tau", type=float, default=1.0, help="Gumbel temperature of the gradient check")
    parser.add_argument("--phi-steps", type=int, default=80, help="phi-only optimisation steps per estimator")
    parser.add_argument("--phi-lr", type=float, default=2e-3, help="Adam learning rate of the phi-only descent")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    task = make_task("digits")
    records = []
    for kind in args.processes.split(","):
        records.append(run(kind, args, task))
        report(records[-1])
    if args.out_json:
        write_json(args.out_json, {"args": vars(args), "records": records})
    return records


if __name__ == "__main__":
    main(sys.argv[1:])
