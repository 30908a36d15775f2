"""A small CNN classifier trained in-suite, whose penultimate features give a domain-specific
Frechet distance for labelled sets (digits, MNIST, spectrogram classes) -- the role LeNet features
play in the MNIST literature.

``train_classifier`` fits it deterministically (seeded, Adam, a fixed number of epochs) on the
labelled images and reports its accuracy on a held-out 10 %; ``features`` returns the 128-d
penultimate activations. ``classifier_for`` caches the trained weights (safetensors) in a folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gencore.checks import check_int
from gencore.io import load_pretrained, read_json, save_pretrained, write_json
from gencore.rng import seeded_init
from genimage.data import ImageSet


class SmallCNN(nn.Module):
    """``[B, C, S, S] -> logits [B, K]`` for ``S >= 8``: two conv stages, 2x2 pooled, 128-d features."""

    def __init__(self, *, channels: int, num_classes: int, width: int = 16) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"channels": channels, "num_classes": num_classes, "width": width}
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1), nn.GroupNorm(4, width), nn.SiLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.GroupNorm(4, width), nn.SiLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.GroupNorm(4, 2 * width), nn.SiLU(), nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(2), nn.Flatten(),
            nn.Linear(8 * width, 128), nn.SiLU(),
        )  # fmt: skip
        self.head = nn.Linear(128, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def train_classifier(data: ImageSet, *, epochs: int = 5, seed: int = 0, batch_size: int = 64) -> tuple[SmallCNN, float]:
    """Fit :class:`SmallCNN` on ``data`` (90 %) and return it with its held-out accuracy (10 %)."""
    train, held = data.split(0.1, seed)
    with seeded_init(seed):
        net = SmallCNN(channels=data.shape[0], num_classes=data.num_classes or int(data.labels.max()) + 1)
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(train), generator=g)
        for idx in perm.split(batch_size):
            loss = F.cross_entropy(net(train.images[idx]), train.labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval().requires_grad_(False)
    with torch.no_grad():
        acc = float((net(held.images).argmax(1) == held.labels).float().mean())
    return net, acc


def classifier_for(data: ImageSet, cache_dir: str | os.PathLike | None, seed: int = 0) -> tuple[SmallCNN, float]:
    """The classifier of ``data``: loaded from ``cache_dir`` when it was trained there, else trained (and saved)."""
    if cache_dir is not None and (Path(cache_dir) / "model.safetensors").is_file():
        state, config = load_pretrained(cache_dir)
        meta = read_json(Path(cache_dir) / "accuracy.json")
        net = SmallCNN(**{k: v for k, v in config.items() if k != "class"})
        net.load_state_dict(state)
        return net.eval().requires_grad_(False), float(meta["accuracy"])
    net, acc = train_classifier(data, seed=seed)
    if cache_dir is not None:
        save_pretrained(cache_dir, net.state_dict(), {"class": "SmallCNN", **net.config})
        write_json(Path(cache_dir) / "accuracy.json", {"accuracy": acc, "data": data.name, "n": len(data)})
    return net, acc


@torch.no_grad()
def classifier_features(net: SmallCNN, images: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """Penultimate features ``[N, 128]``, ``batch_size >= 1`` images at a time."""
    batch_size = check_int(batch_size, "the classifier feature batch_size", low=1)
    device = next(net.parameters()).device  # images are moved to the network, not the network to them
    return torch.cat([net.features(b.to(device)) for b in images.split(batch_size)])
