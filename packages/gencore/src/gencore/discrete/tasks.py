"""Token data sets for the discrete comparisons, generated locally (no network).

- ``dna``: synthetic DNA over ``ACGT`` (K = 4): a first-order Markov background
  with a fixed random transition matrix, and one class-specific motif (length 6)
  planted at a random position in every sequence, 4 classes. Class labels are
  kept so that class-conditional models and guidance can be tested.
- ``grid``: a 2-D Gaussian mixture (8 components on a circle) discretised on a
  ``K x K`` grid: length 2, one token per coordinate (K = 16 by default).
- ``digits``: scikit-learn's 8x8 digits binarised at half intensity: length 64,
  K = 2, labels 0-9.

Every task is a :class:`TokenTask` with train and test splits; the same seed
gives the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gencore.checks import check_choice
from gencore.data import digits_labels, load_digits
from gencore.errors import ConfigError

TASKS: tuple[str, ...] = ("dna", "grid", "digits")
DNA_ALPHABET = "ACGT"


@dataclass
class TokenTask:
    """Tokens ``[n, L]`` (int64) with optional labels ``[n]`` and a train/test split."""

    name: str
    vocab_size: int
    length: int
    train: torch.Tensor
    test: torch.Tensor
    train_labels: torch.Tensor | None = None
    test_labels: torch.Tensor | None = None
    num_classes: int | None = None


def _split(name, vocab_size, x, y, num_classes, n_test, generator):
    perm = torch.randperm(x.shape[0], generator=generator)
    x = x[perm]
    y = y[perm] if y is not None else None
    te, tr = x[:n_test], x[n_test:]
    yte, ytr = (y[:n_test], y[n_test:]) if y is not None else (None, None)
    return TokenTask(name, vocab_size, x.shape[1], tr, te, ytr, yte, num_classes)


def dna_tokens(
    n: int, length: int = 48, *, num_classes: int = 4, motif_length: int = 6, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` synthetic DNA sequences ``[n, length]`` over ``ACGT`` and their class labels ``[n]``.

    The Markov transition matrix and the motifs are drawn from a fixed seed (they define the
    distribution); ``generator`` draws the sequences.
    """
    if length < motif_length + 1:
        raise ConfigError(f"dna length must exceed the motif length {motif_length}, got {length}.")
    law = torch.Generator().manual_seed(1234)
    transition = torch.softmax(2.0 * torch.randn(4, 4, generator=law), dim=-1)
    motifs = torch.randint(0, 4, (num_classes, motif_length), generator=law)
    labels = torch.randint(0, num_classes, (n,), generator=generator)
    x = torch.empty(n, length, dtype=torch.long)
    x[:, 0] = torch.randint(0, 4, (n,), generator=generator)
    for i in range(1, length):
        x[:, i] = torch.multinomial(transition[x[:, i - 1]], 1, generator=generator).squeeze(1)
    start = torch.randint(0, length - motif_length + 1, (n,), generator=generator)
    cols = start[:, None] + torch.arange(motif_length)
    x.scatter_(1, cols, motifs[labels])
    return x, labels


def grid_tokens(n: int, bins: int = 16, *, generator: torch.Generator) -> torch.Tensor:
    """``n`` points of an 8-component 2-D Gaussian mixture, each coordinate binned into ``bins`` tokens ``[n, 2]``."""
    angles = torch.arange(8) * (2 * math.pi / 8)
    centers = 0.7 * torch.stack([angles.cos(), angles.sin()], dim=1)
    k = torch.randint(0, 8, (n,), generator=generator)
    pts = centers[k] + 0.08 * torch.randn(n, 2, generator=generator)
    return ((pts.clamp(-0.999, 0.999) + 1) / 2 * bins).floor().long().clamp(0, bins - 1)


def binary_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 8x8 digits binarised at half intensity ``[1797, 64]`` (0/1 tokens) with labels."""
    return (load_digits(scaling="symmetric") > 0).long(), digits_labels()


def make_task(name: str, *, n: int = 4096, length: int = 48, bins: int = 16, seed: int = 0) -> TokenTask:
    """Build one of :data:`TASKS`; ``n`` (dna, grid) and ``length`` (dna) / ``bins`` (grid) size it."""
    check_choice(name, TASKS, "discrete task")
    g = torch.Generator().manual_seed(seed)
    if name == "dna":
        x, y = dna_tokens(n, length, generator=g)
        return _split(name, 4, x, y, 4, max(n // 8, 1), g)
    if name == "grid":
        return _split(name, bins, grid_tokens(n, bins, generator=g), None, None, max(n // 8, 1), g)
    x, y = binary_digits()
    return _split(name, 2, x, y, 10, 297, g)
