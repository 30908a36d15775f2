"""Exponential moving average (EMA) of a network's weights, kept as a separate module.

After optimiser update ``s`` (0-based) every floating-point parameter and buffer of the EMA
copy moves towards the trained network,

    theta_ema <- d_s theta_ema + (1 - d_s) theta,    d_s = min(decay, (1 + s) / (10 + s)),

the warm-up of TensorFlow's ``ExponentialMovingAverage(num_updates=...)`` so the average is
not dominated by the random initialisation early on (Polyak & Juditsky 1992, "Acceleration
of stochastic approximation by averaging"; used for sampling in Song et al. 2021, Karras
et al. 2022). Non-float buffers (counters) are copied. The EMA module is never DDP-wrapped:
every rank holds identical trained weights after each step, so its EMA is identical too.
"""

from __future__ import annotations

import copy

import torch


class EMA:
    """An EMA copy of ``model`` (frozen, eval mode), updated with :meth:`update`."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = float(decay)
        self.module = copy.deepcopy(model).requires_grad_(False).eval()
        self.updates = 0
        self._cache: tuple | None = None

    def decay_at(self, step: int) -> float:
        """``d_s = min(decay, (1 + s) / (10 + s))``."""
        return min(self.decay, (1.0 + step) / (10.0 + step))

    def _pairs(self, model: torch.nn.Module) -> tuple[dict[type, tuple[list, list]], list[tuple]]:
        """({tensor type: (EMA floats, model floats)}, other pairs), cached per model: walking the module
        tree every step costs as much as the update itself. Floats are grouped by tensor type because a
        fused update cannot mix FSDP's sharded ``DTensor`` parameters with plain buffers. Parameters and
        buffers are updated in place, so the cached tensors stay the live ones (a module that replaces a
        buffer object must build a new EMA)."""
        if self._cache is None or self._cache[0] is not model:
            floats: dict[type, tuple[list, list]] = {}
            other = []
            for target, value in zip(
                [*self.module.parameters(), *self.module.buffers()], [*model.parameters(), *model.buffers()]
            ):
                if (target.dtype.is_floating_point or target.dtype.is_complex) and value.dtype == target.dtype:
                    avg, new = floats.setdefault(type(target), ([], []))
                    avg.append(target)
                    new.append(value)
                else:
                    other.append((target, value))
            self._cache = (model, floats, other)
        return self._cache[1], self._cache[2]

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """Move the average one step towards ``model`` (the unwrapped network).

        Floating parameters and buffers are averaged with one fused ``_foreach_lerp_``; other
        buffers (counters) are copied. The EMA copy was deep-copied from ``model``, so both list
        their tensors in the same order.
        """
        d = self.decay_at(self.updates)
        floats, other = self._pairs(model)
        for avg, new in floats.values():
            torch._foreach_lerp_(avg, new, 1.0 - d)
        for target, value in other:
            if target.dtype.is_floating_point or target.dtype.is_complex:
                target.lerp_(value.to(target.dtype), 1.0 - d)
            else:
                target.copy_(value)
        self.updates += 1

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.module.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor], updates: int) -> None:
        self.module.load_state_dict(state)
        self.updates = int(updates)
