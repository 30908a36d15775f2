"""genimage's VideoDiT against diffusers' ``LatteTransformer3DModel`` on Moving MNIST, in one run.

Both networks are trained by the same loop (gencore's engine on :class:`genimage.task.ImageTask`: rectified-flow
velocity loss, AdamW, warm-up and cosine schedule, EMA, the same seed and batches), sampled by the same Euler
solver from the same noise, and scored with the metrics of ``genimage evaluate`` against the same clips
(``bench_video.score``: frame FD-EffLite0 at 96 px, ``motion_w1``, ``fd_efflite0_diff``).

The architectures differ by design, which is what is compared:

- **VideoDiT** (genimage), DiT-Mi (4 blocks, width 128, 4 heads), patch 4: ``video-dit-tp{pt}`` with full
  space-time attention over tubelets of ``pt`` frames; ``video-dit-tp1-factorised`` with blocks alternating
  within-frame and across-frame attention (``--video-attention factorised``).
- **Latte** (diffusers; Ma et al. 2024, "Latte: Latent Diffusion Transformer for Video Generation", its
  variant 1): per-frame spatial blocks alternating with per-position temporal blocks, adaLN-single, patch 4,
  width 128, 4 heads, ``num_layers = 2`` (2 spatial + 2 temporal blocks: as many blocks as DiT-Mi). Latte is a
  text-to-video model: its spatial blocks cross-attend to a caption, here one all-zero token (unconditional);
  its timestep is ``1000 t``.

First a table times one training step (forward, loss, backward, AdamW) of all four models, interleaved, median
of rounds (``--timing-only`` stops there); then the ``--train`` models are trained and scored.

    python bench_video_vs_latte.py results/bench_video_vs_latte.json [--steps 2000] [--n-eval 200]
        [--train video-dit-tp2,latte] [--timing-only]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from bench_video import score
from torch.utils.data import TensorDataset

from gencore.io import write_json
from gencore.solvers import solve_ode
from gencore.tables import format_table
from gencore.train import TrainConfig, Trainer
from genimage.config import ImageTrainConfig
from genimage.data import MOVING_MNIST_VIDEOS, moving_mnist
from genimage.models import VideoDiT
from genimage.task import ImageTask
from genimage.training import write_samples

HEADS, HEAD_DIM, PATCH = 4, 32, 4  # DiT-Mi's width 128
TIMING_ROUNDS, TIMING_STEPS = 3, 5


class LatteVelocity(torch.nn.Module):
    """diffusers' Latte as a velocity field ``model(x_t: [B, C, T, H, W], t, y=None)``, caption one zero token."""

    def __init__(self, size: int, frames: int, channels: int) -> None:
        super().__init__()
        from diffusers import LatteTransformer3DModel

        self.net = LatteTransformer3DModel(
            num_attention_heads=HEADS,
            attention_head_dim=HEAD_DIM,
            in_channels=channels,
            out_channels=channels,
            num_layers=2,
            cross_attention_dim=HEADS * HEAD_DIM,
            sample_size=size,
            patch_size=PATCH,
            activation_fn="gelu-approximate",
            norm_type="ada_norm_single",
            norm_elementwise_affine=False,
            norm_eps=1e-6,
            caption_channels=HEADS * HEAD_DIM,
            video_length=frames,
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        b = x.shape[0]
        t = torch.as_tensor(t, dtype=x.dtype, device=x.device).reshape(-1).expand(b)
        caption = x.new_zeros(b, 1, HEADS * HEAD_DIM)
        return self.net(x, timestep=1000 * t, encoder_hidden_states=caption).sample


MODELS = ("video-dit-tp1", "video-dit-tp2", "video-dit-tp1-factorised", "latte")


def build(name: str, a: argparse.Namespace) -> torch.nn.Module:
    """``latte``, or ``video-dit-tp{pt}[-factorised]``: a DiT-Mi VideoDiT with tubelets of ``pt`` frames."""
    if name == "latte":
        return LatteVelocity(a.size, a.frames, 1)
    patch_t = int(name.split("-tp", 1)[1].split("-")[0])
    attention = "factorised" if name.endswith("-factorised") else "full"
    return VideoDiT(
        image_size=a.size, frames=a.frames, channels=1, patch_size=PATCH, temporal_patch=patch_t, attention=attention
    )


def step_times(models: dict[str, torch.nn.Module], a: argparse.Namespace) -> dict[str, float]:
    """Median seconds of one training step per model, the models timed in interleaved rounds."""
    g = torch.Generator().manual_seed(0)
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(TIMING_ROUNDS):
        for name, net in models.items():
            for i in range(TIMING_STEPS + 1):  # the first step of a round warms up
                x = torch.randn(a.batch_size, 1, a.frames, a.size, a.size, generator=g)
                target, t = torch.randn(x.shape, generator=g), torch.rand(a.batch_size, generator=g)
                start = time.perf_counter()
                loss = (net(x, t) - target).square().mean()
                opts[name].zero_grad(set_to_none=True)
                loss.backward()
                opts[name].step()
                if i:
                    times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


@torch.no_grad()
def sample(net: torch.nn.Module, noise: torch.Tensor, nfe: int) -> torch.Tensor:
    net.eval()
    grid = torch.linspace(0.0, 1.0, nfe + 1)
    out = [solve_ode(lambda z, t: net(z, t), chunk, grid, method="euler").x for chunk in noise.split(50)]
    return torch.cat(out).clamp(-1, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="JSON file for the records")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--train", default="video-dit-tp2,latte", help=f"models to train and score, of {', '.join(MODELS)}")
    p.add_argument("--timing-only", action="store_true", help="time the training steps of every model, no training")
    p.add_argument("--nfe", type=int, default=16)
    p.add_argument("--n-eval", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    timed = {name: build(name, a) for name in MODELS}
    seconds = step_times(timed, a)
    timing = [
        {
            "model": name,
            "params": sum(q.numel() for q in net.parameters()),
            "tokens_per_clip": (a.size // PATCH) ** 2 * a.frames // getattr(net, "config", {}).get("temporal_patch", 1),
            "train_step_ms": 1000 * seconds[name],
            "ratio_to_latte": seconds[name] / seconds["latte"],
        }
        for name, net in timed.items()
    ]
    print(format_table(timing, list(timing[0]), markdown=True), flush=True)
    if a.timing_only:
        write_json(a.out, {"settings": vars(a) | {"out": str(a.out)}, "timing": timing})
        return
    names = a.train.split(",")
    if unknown := [n for n in names if n not in MODELS]:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; expected some of {', '.join(MODELS)}.")

    cfg = ImageTrainConfig(
        data="moving-mnist", image_size=a.size, frames=a.frames, patch_size=PATCH,
        steps=a.steps, batch_size=a.batch_size, lr=5e-4, warmup_steps=50, sample_nfe=a.nfe, seed=a.seed,
        progress=False,
    )  # fmt: skip
    data = moving_mnist(MOVING_MNIST_VIDEOS, frames=a.frames, image_size=a.size, seed=0)
    pick = torch.randperm(len(data), generator=torch.Generator().manual_seed(123))[: a.n_eval]
    real = data.videos[pick]
    noise = torch.randn((a.n_eval, 1, a.frames, a.size, a.size), generator=torch.Generator().manual_seed(a.seed + 1))
    records = []
    for name in names:
        tmp = tempfile.mkdtemp()
        torch.manual_seed(a.seed)
        net = build(name, a)
        engine = TrainConfig(
            steps=a.steps, global_batch_size=a.batch_size, lr=cfg.lr, warmup_steps=min(cfg.warmup_steps, a.steps),
            schedule="cosine", ema_decay=cfg.ema_decay, seed=a.seed, progress=False,
            out_dir=tmp,
        )  # fmt: skip
        t0 = time.perf_counter()
        result = Trainer(engine).fit(ImageTask(cfg, net, None), TensorDataset(data.videos))
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        fake = sample(result.ema, noise, a.nfe)
        sample_ms = 1000 * (time.perf_counter() - t0) / a.n_eval
        write_samples(a.out.with_name(f"{a.out.stem}_{name}.png"), fake[:8], nrow=4)
        shutil.rmtree(tmp)
        rec = {"model": name, "train_s": train_s, "sample_ms_per_clip": sample_ms, "final_loss": result.last_loss}
        records.append(rec | score(real, fake))
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in records[-1].items()}, flush=True)
    settings = vars(a) | {"out": str(a.out)}
    write_json(a.out, {"settings": settings, "timing": timing, "records": records})
    keys = ("model", "fd_efflite0", "motion_w1", "fd_efflite0_diff", "final_loss", "train_s", "sample_ms_per_clip")
    print(format_table(records, list(keys), markdown=True))


if __name__ == "__main__":
    main()
