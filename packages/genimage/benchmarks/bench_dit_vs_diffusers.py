"""genimage's DiT against diffusers' ``DiTTransformer2DModel`` at equal size and batch.

Both networks: 6 adaLN-Zero blocks of width 192 (3 heads x 64), patch 2, on 4 x 16 x 16 inputs (a
latent-sized image), 10 classes, fp32 on CPU with the same thread count. Measured in one process:

- training step: forward, MSE loss against a velocity target, backward, AdamW step (median over
  ``ROUNDS`` interleaved rounds of ``REPEATS`` steps, each round after ``WARMUP`` steps);
- sampling: images per second for Euler at ``NFE`` evaluations (the whole batch, no guidance).

The configurations are equal (depth, width, heads, patch, classes); diffusers' model has about 10 %
more parameters because every one of its ``ada_norm_zero`` blocks carries its own timestep and label
embedders, where DiT (and genimage) share one conditioning embedding across blocks. Wall-clock
numbers on a shared machine are noisy; the two models are timed interleaved so that load affects both alike.

    python bench_dit_vs_diffusers.py results/bench_dit_vs_diffusers.json
"""

from __future__ import annotations

import statistics
import time

import torch

from gencore.command import benchmark_parser
from gencore.io import write_json
from gencore.tables import format_table
from genimage.models import DiT

BATCH, SIZE, CHANNELS, CLASSES = 16, 16, 4, 10
DEPTH, HEADS, HEAD_DIM = 6, 3, 64
WARMUP, REPEATS, ROUNDS, NFE = 2, 10, 3, 8


def build_diffusers() -> torch.nn.Module:
    from diffusers import DiTTransformer2DModel

    return DiTTransformer2DModel(
        num_attention_heads=HEADS,
        attention_head_dim=HEAD_DIM,
        in_channels=CHANNELS,
        out_channels=CHANNELS,
        num_layers=DEPTH,
        sample_size=SIZE,
        patch_size=2,
        num_embeds_ada_norm=CLASSES,
        norm_type="ada_norm_zero",
    )


def ours_call(net, x, t, y):
    return net(x, t, y=y)


def diffusers_call(net, x, t, y):
    return net(x, timestep=t * 1000, class_labels=y).sample


def train_step_times(net, call, g) -> list[float]:
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    times = []
    for i in range(WARMUP + REPEATS):
        x = torch.randn(BATCH, CHANNELS, SIZE, SIZE, generator=g)
        target = torch.randn(BATCH, CHANNELS, SIZE, SIZE, generator=g)
        t = torch.rand(BATCH, generator=g)
        y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        start = time.perf_counter()
        loss = (call(net, x, t, y) - target).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    return times


@torch.no_grad()
def sampling_rate(net, call, g) -> float:
    net.eval()
    x = torch.randn(BATCH, CHANNELS, SIZE, SIZE, generator=g)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    start = time.perf_counter()
    for k in range(NFE):
        t = torch.full((BATCH,), k / NFE)
        x = x + call(net, x, t, y) / NFE
    rate = BATCH / (time.perf_counter() - start)
    net.train()
    return rate


def main(out_json: str) -> None:
    torch.manual_seed(0)
    nets = {
        "genimage DiT": (
            DiT(
                image_size=SIZE,
                channels=CHANNELS,
                patch_size=2,
                size=None,
                depth=DEPTH,
                hidden=HEADS * HEAD_DIM,
                heads=HEADS,
                num_classes=CLASSES,
            ),
            ours_call,
        ),
        "diffusers DiTTransformer2DModel": (build_diffusers(), diffusers_call),
    }
    times = {name: [] for name in nets}
    for _ in range(ROUNDS):  # interleave the two models
        for name, (net, call) in nets.items():
            times[name] += train_step_times(net, call, torch.Generator().manual_seed(1))
    records = []
    for name, (net, call) in nets.items():
        rate = statistics.median(sampling_rate(net, call, torch.Generator().manual_seed(2)) for _ in range(3))
        records.append(
            {
                "model": name,
                "params_M": round(sum(p.numel() for p in net.parameters()) / 1e6, 3),
                "train_step_ms": round(1000 * statistics.median(times[name]), 1),
                "sample_images_per_s": round(rate, 3),
            }
        )
    ratio = records[1]["train_step_ms"] / records[0]["train_step_ms"]
    print(format_table(records, list(records[0])))
    print(f"diffusers / genimage training-step time: {ratio:.2f}")
    write_json(
        out_json,
        {
            "benchmark": "dit_vs_diffusers",
            "batch": BATCH,
            "input": [CHANNELS, SIZE, SIZE],
            "depth": DEPTH,
            "hidden": HEADS * HEAD_DIM,
            "nfe": NFE,
            "threads": torch.get_num_threads(),
            "records": records,
            "diffusers_over_genimage_step_time": ratio,
        },
    )


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "results/bench_dit_vs_diffusers.json")
    args = parser.parse_args()
    main(args.out_json)
