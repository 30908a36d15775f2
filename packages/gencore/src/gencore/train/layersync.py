"""LayerSync: a network regularised by its own intermediate representations.

LayerSync ("LayerSync: self-aligning intermediate layers", ICLR 2026) aligns the features of
a *weak* (earlier) layer with those of a *strong* (later) layer of the same network, with
no external encoder. For a pair ``(weak, strong)`` with features ``h_w, h_s`` of shape
``[..., D]`` (feature dimension last; every other dimension is flattened into ``N`` tokens)

    R(h_w, h_s) = -(1/N) sum_n cos(h_w[n], stopgrad(h_s[n])),

so the gradient of ``R`` reaches only the parameters that produce ``h_w`` (the weak side);
the strong layer is a fixed target for this term. With several pairs the regulariser is the
mean of ``R`` over *all* pairs, and the training loss is ``loss + weight * mean_pairs R``
(``weight`` 0.2 by default). Note: the reference implementation overwrites its accumulator
in the pair loop and so counts only the last pair; here every pair counts. A pair naming one module twice is
refused: ``cos(h, stopgrad(h)) = 1`` has zero gradient, so it would regularise nothing.

Features are captured with forward hooks on modules named as in ``model.named_modules()``
(of the unwrapped network, so names carry no ``module.`` prefix under DDP). A module that
returns a tuple contributes its first element. If a module runs several times in one loss
evaluation, the last call is used.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from gencore.errors import ConfigError


def layersync_term(h_weak: torch.Tensor, h_strong: torch.Tensor) -> torch.Tensor:
    """``-mean_tokens cos(h_weak, stopgrad(h_strong))`` for features ``[..., D]`` of equal shape, computed in
    float32 at least (half-precision features are promoted; float64 stays float64)."""
    if h_weak.shape != h_strong.shape:
        raise ConfigError(
            f"LayerSync pairs need features of equal shape, got {tuple(h_weak.shape)} and {tuple(h_strong.shape)}."
        )
    d = h_weak.shape[-1]
    dtype = torch.promote_types(torch.promote_types(h_weak.dtype, h_strong.dtype), torch.float32)
    w = h_weak.reshape(-1, d).to(dtype)
    s = h_strong.detach().reshape(-1, d).to(dtype)
    return -F.cosine_similarity(w, s, dim=-1, eps=1e-8).mean()


def _first_tensor(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise ConfigError(f"LayerSync can only hook modules returning a tensor (or a tuple of them), got {type(output)}.")


class LayerSync:
    """Forward hooks on ``(weak, strong)`` module pairs of ``model`` and the regulariser they give.

    Use::

        ls = LayerSync(model, [("blocks.2", "blocks.8")], weight=0.2)
        with ls.capture():
            loss, metrics = task_loss(model, batch)
        loss = loss + ls.weight * ls.loss()

    or wrap a loss function with :meth:`wrap_loss`. Hooks only record inside ``capture()``.
    """

    def __init__(self, model: torch.nn.Module, pairs: Sequence[tuple[str, str]], weight: float = 0.2) -> None:
        if not pairs:
            raise ConfigError("LayerSync needs at least one (weak, strong) module pair.")
        if not (math.isfinite(weight) and weight >= 0):  # NaN and inf made every training loss non-finite
            raise ConfigError(f"LayerSync weight must be a non-negative finite number, got {weight}.")
        self.pairs = [(str(w), str(s)) for w, s in pairs]
        for w, s in self.pairs:
            if w == s:  # cos(h, stopgrad(h)) = 1 with zero gradient: the pair would silently do nothing
                raise ConfigError(
                    f"LayerSync pair ({w!r}, {s!r}) names one module twice; the weak and strong layers must differ."
                )
        self.weight = float(weight)
        modules = dict(model.named_modules())
        names = sorted({n for pair in self.pairs for n in pair})
        missing = [n for n in names if n not in modules]
        if missing:
            raise ConfigError(
                f"LayerSync module name(s) {', '.join(missing)} not found in the model; "
                f"available: {', '.join(n for n in modules if n) or '(none)'}."
            )
        self._features: dict[str, torch.Tensor] = {}
        self._active = False
        self._handles = [modules[n].register_forward_hook(self._hook(n)) for n in names]

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if self._active:
                self._features[name] = _first_tensor(output)

        return hook

    @contextlib.contextmanager
    def capture(self) -> Iterator[LayerSync]:
        """Record the hooked features of forward passes run inside the block."""
        self._features = {}
        self._active = True
        try:
            yield self
        finally:
            self._active = False

    def loss(self) -> torch.Tensor:
        """Mean over pairs of ``-mean_tokens cos(h_weak, stopgrad(h_strong))`` from the last capture."""
        terms = []
        for weak, strong in self.pairs:
            if weak not in self._features or strong not in self._features:
                raise ConfigError(f"LayerSync pair ({weak!r}, {strong!r}) was not run in the captured forward pass.")
            terms.append(layersync_term(self._features[weak], self._features[strong]))
        self._features = {}
        return torch.stack(terms).mean()

    def wrap_loss(
        self, loss_fn: Callable[..., tuple[torch.Tensor, dict[str, Any]]]
    ) -> Callable[..., tuple[torch.Tensor, dict[str, Any]]]:
        """``loss_fn(*a, **k) -> (loss, metrics)`` plus ``weight * R``; metrics gain ``layersync``."""

        def wrapped(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, dict[str, Any]]:
            with self.capture():
                loss, metrics = loss_fn(*args, **kwargs)
            if self.weight == 0.0:
                self._features = {}
                return loss, metrics
            reg = self.loss()
            return loss + self.weight * reg.to(loss.dtype), {**metrics, "layersync": reg.detach()}

        return wrapped

    def remove(self) -> None:
        """Remove the hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []
