"""Video in miniature: a video DiT on Moving MNIST, scored next to reference clip sets that bracket the scores.

One unconditional :class:`genimage.models.VideoDiT` (DiT-Mi, patch 4, ``--temporal-patch``) is trained with
flow matching on the 2,000 locally generated Moving MNIST clips (``--frames`` frames of ``--size`` pixels,
two digits; :func:`genimage.data.moving_mnist`) through ``genimage.training.train``, then ``--n-eval`` clips
are sampled (Euler, ``--nfe``). Every clip set below is scored against the same ``--n-eval`` training clips
with the metrics of ``genimage evaluate`` (frame FD-EffLite0 at 96 px over all frames; ``motion_w1``,
``fd_efflite0_diff``; see :mod:`genimage.evaluate`):

- ``fresh data``: new Moving MNIST clips (seed 1): the floor of each score at this sample size;
- ``static``: each reference clip's first frame held still (perfect frames, no motion);
- ``shuffled``: each reference clip's frames in a random order (perfect frames, incoherent motion);
- ``video DiT``: the trained model.

    python bench_video.py results/bench_video.json [--steps 600] [--n-eval 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from gencore.io import write_json
from gencore.tables import format_table
from genimage.config import ImageTrainConfig
from genimage.data import MOVING_MNIST_VIDEOS, moving_mnist
from genimage.evaluate import temporal_scores
from genimage.metrics import efflite0_features, frechet_distance
from genimage.runs import load_run
from genimage.sampling import sample_images
from genimage.training import train, write_samples

INPUT_PX = 96


def score(real: torch.Tensor, fake: torch.Tensor) -> dict[str, float]:
    """Frame FD-EffLite0, ``motion_w1``, the mean motions and ``fd_efflite0_diff`` of ``fake`` against ``real``."""

    def frames(v: torch.Tensor) -> torch.Tensor:
        return v.transpose(1, 2).flatten(0, 1)

    fd = frechet_distance(
        efflite0_features(frames(real), input_px=INPUT_PX), efflite0_features(frames(fake), input_px=INPUT_PX)
    )
    return {"fd_efflite0": fd, **temporal_scores(real, fake, None, {}, INPUT_PX)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="JSON file for the records")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--temporal-patch", type=int, default=2)
    p.add_argument("--nfe", type=int, default=16)
    p.add_argument("--n-eval", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, help="keep the run folder here (default: a temporary folder)")
    a = p.parse_args()
    cfg = ImageTrainConfig(
        data="moving-mnist",
        image_size=a.size,
        frames=a.frames,
        patch_size=4,
        temporal_patch=a.temporal_patch,
        steps=a.steps,
        batch_size=a.batch_size,
        lr=5e-4,
        warmup_steps=50,
        sample_nfe=a.nfe,
        seed=a.seed,
        progress=False,
    )
    data = moving_mnist(MOVING_MNIST_VIDEOS, frames=a.frames, image_size=a.size, seed=0)
    pick = torch.randperm(len(data), generator=torch.Generator().manual_seed(123))[: a.n_eval]
    real = data.videos[pick]
    g = torch.Generator().manual_seed(7)
    order = torch.stack([torch.randperm(a.frames, generator=g) for _ in range(a.n_eval)])
    sets = {
        "fresh data": moving_mnist(a.n_eval, frames=a.frames, image_size=a.size, seed=1).videos,
        "static": real[:, :, :1].expand_as(real).contiguous(),
        "shuffled": torch.stack([v[:, o] for v, o in zip(real, order, strict=True)]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = a.work or Path(tmp) / "run"
        t0 = time.perf_counter()
        train(cfg, run_dir, data=data)
        train_s = time.perf_counter() - t0
        run = load_run(run_dir)
        t0 = time.perf_counter()
        fake = sample_images(run, a.n_eval, None, nfe=a.nfe, cfg_scale=1.0, solver="euler", seed=a.seed + 1)
        sample_ms = 1000 * (time.perf_counter() - t0) / a.n_eval
        sets["video DiT"] = fake
        write_samples(a.out.with_suffix(".png"), fake[:8], nrow=4)
    records = []
    for name, clips in sets.items():
        records.append({"set": name, **score(real, clips)})
        print(name, {k: round(v, 4) for k, v in records[-1].items() if k != "set"}, flush=True)
    settings = vars(a) | {"out": str(a.out), "work": str(a.work) if a.work else None}
    write_json(
        a.out, {"settings": settings, "train_seconds": train_s, "sample_ms_per_clip": sample_ms, "records": records}
    )
    keys = ("fd_efflite0", "motion_w1", "motion_generated", "motion_real", "fd_efflite0_diff")
    print(format_table(records, ["set", *keys], markdown=True))


if __name__ == "__main__":
    main()
