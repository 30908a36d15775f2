"""The engine against a hand-written PyTorch loop: schedule, accumulation, clipping, EMA and data order at once.

Every other engine test compares the trainer with itself (resumed vs uninterrupted, 4 vs 1 micro-batches), so a
mistake shared by both runs (a clipping norm per tensor, the learning rate of the wrong step, a sum instead of a
mean over micro-batches, another EMA warm-up) would pass them. Here the reference is plain ``torch.optim.SGD`` on
the documented batches: epoch ``e`` visits ``torch.randperm(n, seed + e)`` in order, the update at 0-based step ``s``
uses ``lr * lr_factor(s)`` with ``lr_factor`` the hand formula below, the gradient is the mean over the global
batch clipped to a global L2 norm over all parameters, and the EMA decay is ``min(decay, (1 + s) / (10 + s))``.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from gencore.train import TrainConfig, Trainer
from gencore.train.example import RegressionTask, regression_data


def _factor(s: int, steps: int, warmup: int) -> float:
    if s < warmup:
        return (s + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (s - warmup) / (steps - warmup)))


@pytest.mark.parametrize(("accum", "clip"), [(4, None), (1, 0.05), (2, 0.05)])
def test_trainer_equals_a_hand_written_sgd_loop(tmp_path: Path, accum: int, clip: float | None) -> None:
    steps, batch, warmup, lr, decay, n = 7, 16, 3, 0.1, 0.9, 40  # 2 steps per epoch, 8 samples dropped each
    cfg = TrainConfig(
        steps=steps,
        global_batch_size=batch,
        grad_accum_steps=accum,
        optimizer="sgd",
        betas=(0.5, 0.999),  # momentum 0.5
        lr=lr,
        warmup_steps=warmup,
        clip_grad_norm=clip,
        ema_decay=decay,
        progress=False,
        out_dir=tmp_path,
    )
    got = Trainer(cfg, device="cpu").fit(RegressionTask(), regression_data(n))

    model = RegressionTask().model  # the same initial weights
    ema = copy.deepcopy(model)
    x, y = regression_data(n).tensors
    order = torch.cat([torch.randperm(n, generator=torch.Generator().manual_seed(e))[:32] for e in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.5)
    norms = []
    for s in range(steps):
        idx = order[s * batch : (s + 1) * batch]
        opt.zero_grad()
        (model(x[idx]) - y[idx]).pow(2).mean().backward()
        norms.append(float(torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))))
        if clip is not None:
            scale = min(1.0, clip / norms[-1])
            for p in model.parameters():
                p.grad.mul_(scale)
        for group in opt.param_groups:
            group["lr"] = lr * _factor(s, steps, warmup)
        opt.step()
        d = min(decay, (1 + s) / (10 + s))
        with torch.no_grad():
            for a, p in zip(ema.parameters(), model.parameters()):
                a.mul_(d).add_((1 - d) * p)
    if clip is not None:
        assert min(norms) > 2 * clip  # clipping acts on every step, so a wrong norm would change the weights
    for name, ours, ref in (("model", got.model, model), ("ema", got.ema, ema)):
        for (k, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=f"{name}.{k}")
