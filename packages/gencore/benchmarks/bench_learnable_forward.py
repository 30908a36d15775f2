"""Few-step discrete diffusion: learned forward process (FLDD) vs the fixed masking schedule at equal T.

Reproduces in miniature the central claim of "Forward-Learned Discrete Diffusion: Learning how to
noise to denoise faster" (ICLR 2026): with few sampling steps, learning the forward marginals
(maximum-coupling posteriors, factorised reverse model unchanged) gives a better bound and better
samples than a fixed masking schedule with the same number of steps.

Arms (``--arms``): ``fixed-mask`` and ``learned-forward`` are
``gencore.discrete.learnable_forward.LearnableForwardProcess`` (``learnable=False``: masked diffusion's
T-step bound and ancestral sampler; ``learnable=True``: marginals per (step, position, clean token), the
reverse model masked diffusion's x0-mixture); ``fixed-mask-net`` and ``learned-forward-net`` are
``gencore.discrete.sequence_forward.SequenceForwardProcess``, the paper's parameterisation (marginals from a
network of the whole sequence, reverse transitions predicted directly; ``fixed-mask-net`` keeps the masking
schedule with that reverse model, isolating the learned forward process; ``learned-forward-net`` holds phi
for the first half of training, then REINFORCE); ``learned-forward-net-posterior`` is the same learned process
with ``reverse="posterior"`` (masked diffusion's x0-mixture carried over, so at masking it is the ``fixed-mask``
arm, which is its fixed-schedule counterpart); ``fixed-mask-x2`` is fixed masking with every sequence of the batch
twice, the control for the learned arms' second REINFORCE draw per sequence. ``--gumbel-fraction`` sets the
straight-through Gumbel phase of both learned arms (default: the classes' default, 0;
``diag_fldd_phi_gradient.py`` shows it to be biased towards revealing). Every arm uses the same
``TokenDenoiser(hidden=64, depth=2)`` (``process.output_dim`` outputs), the same AdamW optimiser over
``model.parameters()`` plus ``process.parameters()``, the same batches and the same number of steps, calling
``process.update_schedule(step / steps)`` before each loss.

- ``grid``: 8-component 2-D Gaussian mixture on a 16 x 16 categorical grid (length 2, K = 16), T = 2.
  Sample quality: total variation between the histogram of 4,096 samples and (a) the 512-point test
  histogram, (b) a 200,000-point reference histogram of the same law (less noisy); ``tv_floor`` is the
  TV of the test set itself to the reference (what a perfect sampler would score in (b) with 512 draws
  is lower; with 4,096 draws about half of it).
- ``digits``: binarised 8x8 digits (length 64, K = 2), T = 4. Sample quality: mean absolute error of the
  per-pixel means (samples vs test set), mean absolute error of the off-diagonal pixel-pair covariances
  (``pair_cov_err``: second-order structure, where a factorised few-step sampler errs) and the squared MMD with
  an RBF-kernel mixture (``gencore.metrics.mmd``; on 0/1 vectors the squared distance is the Hamming distance),
  and ``sample_nll``: the samples' NLL in nats per pixel under an autoregressive reference model fitted to the
  training digits (``gencore.discrete.reference``, the analogue of the generative perplexity that FLDD and
  MDLM report; the test digits score ``sample_nll`` 0.26 under it, the ``train vs test`` row). A low
  ``sample_nll`` alone would reward samples that collapse onto typical digits, so its converse is reported too:
  ``test_nll_fit_to_samples``, the test digits' NLL under the same reference model fitted to the samples instead
  (how much of the data the samples cover; the floor row fits it to the training digits, 1,500 of them against
  the arms' 4,000 samples, so it is not a strict floor).
  ``train vs test`` rows give the floor of each statistic.

The bound is the exact T-step bound in nats per position on the test set, each expectation over
``z_s`` estimated with ``n_time`` draws. Run: ``python benchmarks/bench_learnable_forward.py [out.json]
[--tasks grid,digits] [--arms ...] [--steps N]`` (at most 2 threads; wall times are noisy on a shared machine).
"""

from __future__ import annotations

import sys
import time

import torch

from gencore.command import benchmark_parser
from gencore.discrete.learnable_forward import FewStepForward, LearnableForwardProcess
from gencore.discrete.network import TokenDenoiser
from gencore.discrete.reference import ReferenceAR, fit_reference
from gencore.discrete.sequence_forward import SequenceForwardProcess
from gencore.discrete.tasks import grid_tokens, make_task
from gencore.io import write_json
from gencore.metrics import mmd
from gencore.tables import format_table

CONFIGS = {
    "grid": {"steps_T": 2, "train_steps": 1000, "batch": 256, "lr": 2e-3, "seeds": (0, 1)},
    "digits": {"steps_T": 4, "train_steps": 600, "batch": 128, "lr": 2e-3, "seeds": (0,)},
}
N_TIME = {"grid": 8, "digits": 4}


ARMS = (
    "fixed-mask",
    "learned-forward",
    "fixed-mask-net",
    "learned-forward-net",
    "learned-forward-net-posterior",
    "fixed-mask-x2",
)


def _process(arm: str, task, steps_T: int, gumbel_fraction: float | None = None) -> FewStepForward:
    """The arm's process; ``gumbel_fraction`` None keeps the classes' default (0: REINFORCE only)."""
    phases = {} if gumbel_fraction is None else {"gumbel_fraction": gumbel_fraction}
    if arm in ("fixed-mask", "learned-forward", "fixed-mask-x2"):
        return LearnableForwardProcess(
            task.vocab_size, task.length, steps=steps_T, learnable=arm == "learned-forward", **phases
        )
    # the paper's parameterisation; phi held for the first half while the reverse model learns, then REINFORCE
    learnable = arm != "fixed-mask-net"
    reverse = "posterior" if arm.endswith("-posterior") else "direct"
    return SequenceForwardProcess(
        task.vocab_size, task.length, steps=steps_T, learnable=learnable, warmup_fraction=0.5, reverse=reverse, **phases
    )


def _train(
    task, arm: str, cfg: dict, seed: int, phi_lr_scale: float = 1.0, gumbel_fraction: float | None = None
) -> tuple[FewStepForward, TokenDenoiser, float, list[float]]:
    """Train one arm; also returns the mean training bound over each tenth of training."""
    torch.manual_seed(seed + 1)  # the forward network of learned-forward-net
    proc = _process(arm, task, cfg["steps_T"], gumbel_fraction)
    torch.manual_seed(seed)  # the same reverse-model initialisation in every arm with the same output size
    model = TokenDenoiser(proc.input_dim, proc.output_dim, task.length, hidden=64, depth=2, heads=4, local_kernel=0)
    groups = [{"params": list(model.parameters())}, {"params": list(proc.parameters()), "lr": cfg["lr"] * phi_lr_scale}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg["lr"])
    g = torch.Generator().manual_seed(1000 + seed)  # same batches for both arms
    start = time.perf_counter()
    n = cfg["train_steps"]
    bounds = []
    for step in range(n):
        proc.update_schedule(step / n)
        batch = task.train[torch.randint(0, task.train.shape[0], (cfg["batch"],), generator=g)]
        if arm == "fixed-mask-x2":  # every sequence twice: as many z draws per step as REINFORCE's two copies
            batch = batch.repeat_interleave(2, dim=0)
        loss, metrics = proc.loss(model, batch, generator=g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bounds.append(metrics["bound"])
    tenth = max(1, n // 10)
    trace = [sum(bounds[i : i + tenth]) / len(bounds[i : i + tenth]) for i in range(0, n, tenth)]
    return proc, model, time.perf_counter() - start, trace


def _masked_share(proc: FewStepForward, x: torch.Tensor) -> list[float]:
    """Mean ``q(z_s = mask | x)`` over ``x`` and positions at the inner steps ``1..T-1``."""
    with torch.no_grad():
        if isinstance(proc, SequenceForwardProcess):
            steps = [torch.full((x.shape[0],), s) for s in range(1, proc.steps)]
            return [float(proc.marginals(x, s)[..., proc.mask_index].mean()) for s in steps]
        marg = proc.marginals()[:, torch.arange(x.shape[1])[None, :], x]  # [T + 1, B, L, K + 1]
        return [float(marg[s, ..., proc.mask_index].mean()) for s in range(1, proc.steps)]


def _hist(tokens: torch.Tensor, bins: int) -> torch.Tensor:
    return torch.bincount(tokens[:, 0] * bins + tokens[:, 1], minlength=bins * bins).double() / tokens.shape[0]


def _tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def _grid_stats(samples: torch.Tensor, task, reference: torch.Tensor) -> dict:
    k = task.vocab_size
    return {
        "tv_test": _tv(_hist(samples, k), _hist(task.test, k)),
        "tv_reference": _tv(_hist(samples, k), _hist(reference, k)),
    }


def _digit_stats(samples: torch.Tensor, task, reference: ReferenceAR) -> dict:
    s, t = samples.double(), task.test.double()

    def cov(x: torch.Tensor) -> torch.Tensor:
        x = x - x.mean(0)
        return x.T @ x / (x.shape[0] - 1)

    off = ~torch.eye(s.shape[1], dtype=torch.bool)
    return {
        "mean_pixel_err": float((s.mean(0) - t.mean(0)).abs().mean()),
        "pair_cov_err": float((cov(s) - cov(t))[off].abs().mean()),
        "mmd2": float(mmd(s, t)),
        "sample_nll": reference.nll(samples),
        "test_nll_fit_to_samples": fit_reference(samples, task.vocab_size, seed=0).nll(task.test),
    }


def run_task(
    name: str,
    arms: tuple[str, ...] = ARMS,
    train_steps: int | None = None,
    phi_lr_scale: float = 1.0,
    gumbel_fraction: float | None = None,
    seeds: tuple[int, ...] | None = None,
    samples: int | None = None,
) -> list[dict]:
    cfg = dict(CONFIGS[name], **({"train_steps": train_steps} if train_steps else {}))
    if seeds:
        cfg["seeds"] = seeds
    task = make_task(name)
    if name == "grid":
        reference = grid_tokens(200_000, task.vocab_size, generator=torch.Generator().manual_seed(99))
    else:
        reference = fit_reference(task.train, task.vocab_size, seed=0)
    records = []
    for seed in cfg["seeds"]:
        for arm in arms:
            proc, model, wall, trace = _train(task, arm, cfg, seed, phi_lr_scale, gumbel_fraction)
            model.eval()
            with torch.no_grad():
                g = torch.Generator().manual_seed(7)
                bound = float(proc.nll_bound(model, task.test, n_time=N_TIME[name], generator=g).mean())
                n = samples or (4096 if name == "grid" else 1000)
                out = proc.sample(model, n, task.length, steps=cfg["steps_T"], generator=g)
            stats = (_grid_stats if name == "grid" else _digit_stats)(out.tokens, task, reference)
            records.append(
                {
                    "task": name,
                    "process": proc.name,
                    "arm": arm,
                    "seed": seed,
                    "T": cfg["steps_T"],
                    "nfe": out.nfe,
                    "train_steps": cfg["train_steps"],
                    "phi_lr_scale": phi_lr_scale,
                    "gumbel_fraction": proc.gumbel_fraction if proc._learns else None,
                    "test_bound_nats_per_position": bound,
                    **stats,
                    "masked_share": _masked_share(proc, task.test),
                    "train_bound_per_tenth": trace,
                    "train_s": wall,
                }
            )
            print(format_table([{k: v for k, v in records[-1].items() if not isinstance(v, list)}]), flush=True)
    if name == "grid":
        k = task.vocab_size
        records.append(
            {
                "task": name,
                "process": "floor: test vs reference",
                "tv_reference": _tv(_hist(task.test, k), _hist(reference, k)),
            }
        )
    else:
        # what a sampler of the true law would score: the train set's statistics against the test set, and the
        # test digits' NLL under the reference (the training digits' own NLL is biased low by the fit)
        floor = {**_digit_stats(task.train, task, reference), "sample_nll": reference.nll(task.test)}
        records.append({"task": name, "process": "floor: train vs test", **floor})
    return records


def summarise(records: list[dict]) -> list[dict]:
    """Mean over seeds per (task, process)."""
    rows = []

    def name(r: dict) -> str:  # the arm where there is one: fixed-mask and fixed-mask-x2 share a process name
        return r.get("arm") or r["process"]

    keys = dict.fromkeys((r["task"], name(r)) for r in records)
    for task, process in keys:
        group = [r for r in records if r["task"] == task and name(r) == process]
        row: dict = {"task": task, "process": process, "seeds": len(group)}
        for col in (
            "T",
            "test_bound_nats_per_position",
            "tv_test",
            "tv_reference",
            "mean_pixel_err",
            "pair_cov_err",
            "mmd2",
            "sample_nll",
            "test_nll_fit_to_samples",
        ):
            vals = [r[col] for r in group if col in r]
            if vals:
                row[col] = sum(vals) / len(vals)
        rows.append(row)
    return rows


def main(argv: list[str]) -> list[dict]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tasks", default="grid,digits", help="comma-separated: grid, digits")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {', '.join(ARMS)}")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: per task, see CONFIGS)")
    parser.add_argument("--phi-lr-scale", type=float, default=1.0, help="learning rate of phi / that of the model")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: per task, see CONFIGS)")
    parser.add_argument("--samples", type=int, default=None, help="samples for the statistics (default 4096 / 1000)")
    parser.add_argument(
        "--gumbel-fraction",
        type=float,
        default=None,
        help="share of training with straight-through Gumbel gradients for the learned arms "
        "(default: the classes' default, 0: REINFORCE only)",
    )
    args = parser.parse_args(argv)
    arms = tuple(args.arms.split(","))
    if unknown := set(arms) - set(ARMS) or set(args.tasks.split(",")) - set(CONFIGS):
        parser.error(f"unknown arm or task: {', '.join(sorted(unknown))}")
    out_json = args.out_json
    torch.set_num_threads(min(2, torch.get_num_threads()))  # OMP_NUM_THREADS=1 lowers it on a busy machine
    start = time.perf_counter()
    records = [
        r
        for task in args.tasks.split(",")
        for r in run_task(
            task,
            arms,
            args.steps,
            args.phi_lr_scale,
            args.gumbel_fraction,
            tuple(int(x) for x in args.seeds.split(",")) if args.seeds else None,
            args.samples,
        )
    ]
    summary = summarise(records)
    print(format_table(summary))
    print(f"total wall time {time.perf_counter() - start:.0f} s")
    if out_json:
        write_json(out_json, {"records": records, "summary": summary})
    return records


if __name__ == "__main__":
    main(sys.argv[1:])
