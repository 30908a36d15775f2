"""Where random draws happen.

A draw from a seeded ``torch.Generator`` is made on the generator's own device and then moved to the data's,
so a seed gives the same numbers whatever device the data (or the model) lives on, and a CPU generator can
drive a CUDA run. Without a generator the draw uses the global generator of the given default device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["draw_device", "rand_with", "randn_like_with", "seeded_init"]


@contextlib.contextmanager
def seeded_init(seed: int) -> Iterator[None]:
    """Inside, torch's global CPU generator is seeded with ``seed``; on leaving, it is as the caller left it.

    For initial weights (``nn.Module`` constructors draw from the global generator): they then depend on the
    seed alone, and building a model does not reseed the caller's random stream.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def draw_device(generator: torch.Generator | None, default: torch.device | str | None = None) -> torch.device:
    """``generator``'s device, else ``default`` (else the CPU)."""
    if generator is not None:
        return generator.device
    return torch.device(default) if default is not None else torch.device("cpu")


def rand_with(
    shape: tuple[int, ...], generator: torch.Generator | None, *, device: torch.device | str, dtype=None
) -> torch.Tensor:
    """``U[0, 1)`` draws of ``shape`` made on :func:`draw_device` and returned on ``device``."""
    where = draw_device(generator, device)
    return torch.rand(shape, generator=generator, device=where, dtype=dtype).to(device)


def randn_like_with(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """``N(0, I)`` noise shaped like ``x``, drawn on :func:`draw_device` and returned on ``x``'s device."""
    where = draw_device(generator, x.device)
    return torch.randn(x.shape, generator=generator, dtype=x.dtype, device=where).to(x.device)
