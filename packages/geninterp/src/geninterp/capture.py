"""Capture activations of any ``torch`` module by name with forward hooks, and splice replacements in.

:class:`ActivationCapture` records the outputs of named submodules during a forward pass; with
``stop_early=True`` it aborts the pass right after the last requested module has run, so
capturing layer 3 of a 30-layer model costs only 4 blocks. :class:`OutputReplacement` swaps a
module's output for ``fn(output)`` (an SAE reconstruction, a steering edit). A module returning
a tuple or list (transformer blocks) or a mapping (a transformers ``ModelOutput``) is handled by
capturing/replacing its first element or value, the rest of the output kept as it is.

:func:`capture_to_store` streams a text corpus through a language model in batches and writes
the activations of one layer to an :class:`~geninterp.store.ActivationWriter`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from gencore.errors import ConfigError, InputError
from geninterp.store import ActivationWriter


class _StopForward(Exception):
    """Raised inside a hook to end a forward pass early (caught by ActivationCapture)."""


def get_module(model: torch.nn.Module, name: str) -> torch.nn.Module:
    """The submodule called ``name`` (dotted path), or a :class:`ConfigError` listing close names."""
    try:
        return model.get_submodule(name)
    except AttributeError:
        names = [n for n, _ in model.named_modules() if n]
        close = [n for n in names if name.split(".")[-1] in n][:5] or names[:5]
        raise ConfigError(f"the model has no module named {name!r}; e.g. {', '.join(close)}.") from None


def _first(output: Any, name: str) -> torch.Tensor:
    """The activation in a module's output: the output itself, the first item of a tuple or list (transformer
    blocks), or the first value of a mapping (e.g. a transformers ``ModelOutput``)."""
    if isinstance(output, tuple | list):
        output = output[0] if output else None
    elif isinstance(output, Mapping):
        output = next(iter(output.values()), None)
    if not torch.is_tensor(output):
        raise InputError(
            f"module {name!r} returned {type(output).__name__}, not a tensor (nor a tuple, list or mapping that "
            "starts with one); capture a submodule whose output is the activation."
        )
    return output


class ActivationCapture:
    """``with ActivationCapture(model, ["encoder.layer.3"]) as cap: model(x)`` then ``cap.outputs[name]``."""

    def __init__(self, model: torch.nn.Module, names: Sequence[str], *, stop_early: bool = False) -> None:
        if not names:
            raise ConfigError("name at least one module to capture.")
        self.model = model
        self.names = list(names)
        self.stop_early = stop_early
        self.outputs: dict[str, torch.Tensor] = {}
        self._handles: list[Any] = []

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            # a copy: a later in-place op (``ReLU(inplace=True)``, ``h += residual``) must not change what was captured
            self.outputs[name] = _first(output, name).detach().clone()
            if self.stop_early and len(self.outputs) == len(self.names):
                raise _StopForward

        return hook

    def __enter__(self) -> ActivationCapture:
        modules = [get_module(self.model, name) for name in self.names]  # every name checked before any hook
        for name, module in zip(self.names, modules, strict=True):
            self._handles.append(module.register_forward_hook(self._hook(name)))
        return self

    def run(self, fn: Callable[[], Any]) -> dict[str, torch.Tensor]:
        """Call ``fn()`` (a forward pass) and return the captured outputs (early stop handled)."""
        self.outputs = {}
        with contextlib.suppress(_StopForward):
            fn()
        missing = [n for n in self.names if n not in self.outputs]
        if missing:
            raise InputError(f"module(s) {', '.join(missing)} did not run in the forward pass.")
        return self.outputs

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def _replace_first(output: Any, name: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``output`` with the activation :func:`_first` reads replaced by ``fn(activation)``: the output itself, the
    first item of a tuple or list (a new one of the same type), or the first value of a mutable mapping (set in
    place, so a ``ModelOutput`` keeps its type and its other fields)."""
    new = fn(_first(output, name))
    if isinstance(output, tuple | list):
        return type(output)([new, *output[1:]])
    if isinstance(output, Mapping):
        if not isinstance(output, MutableMapping):
            raise InputError(f"module {name!r} returned a read-only {type(output).__name__}; it cannot be replaced.")
        output[next(iter(output))] = new
        return output
    return new


class OutputReplacement:
    """``with OutputReplacement(model, name, fn): model(x)`` runs with the activation of ``module`` (the value
    :class:`ActivationCapture` reads: the output, or its first item or mapping value) replaced by ``fn`` of it."""

    def __init__(self, model: torch.nn.Module, name: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.module = get_module(model, name)
        self.name = name
        self.fn = fn
        self._handle: Any = None

    def _hook(self, module: torch.nn.Module, args: Any, output: Any) -> Any:
        return _replace_first(output, self.name, self.fn)

    def __enter__(self) -> OutputReplacement:
        self._handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.remove()


def _batched(it: Iterable[torch.Tensor], n: int) -> Iterator[torch.Tensor]:
    iterator = iter(it)
    length = 0
    while batch := list(itertools.islice(iterator, n)):
        for chunk in batch:  # one clear sentence, not torch.stack's error
            if not (torch.is_tensor(chunk) and chunk.ndim == 1 and len(chunk) > 0):
                shown = list(chunk.shape) if torch.is_tensor(chunk) else type(chunk).__name__
                raise InputError(f"token chunks must be non-empty 1-D tensors, got {shown}.")
            length = length or len(chunk)
            if len(chunk) != length:
                raise InputError(f"token chunks must all have one length; got {len(chunk)} after {length}.")
        yield torch.stack(batch)


@torch.no_grad()
def capture_to_store(
    forward: Callable[[torch.Tensor], Any],
    model: torch.nn.Module,
    module_name: str,
    chunks: Iterable[torch.Tensor],
    out_dir: str | os.PathLike,
    *,
    n_tokens: int,
    batch_size: int = 16,
    storage: str = "safetensors",
    dtype: str = "float32",
    shard_sequences: int = 256,
    metadata: dict[str, Any] | None = None,
    progress: bool = True,
) -> ActivationWriter:
    """Run ``forward(tokens [B, L])`` over token ``chunks`` until ``n_tokens`` tokens are stored.

    Each chunk contributes all its ``L`` positions (special tokens included, so sequence
    positions are those the model saw). Returns the closed writer (``writer.dir`` is the store).
    """
    if n_tokens < 1 or batch_size < 1:
        raise ConfigError("n_tokens and batch_size must be positive integers.")
    writer: ActivationWriter | None = None
    done = 0
    bar = tqdm(total=n_tokens, unit="tok", disable=not progress, desc=f"capture {module_name}")
    with ActivationCapture(model, [module_name], stop_early=True) as cap:
        for tokens in _batched(chunks, batch_size):
            acts = cap.run(lambda t=tokens: forward(t))[module_name]
            if writer is None:
                writer = ActivationWriter(
                    out_dir,
                    d_model=acts.shape[-1],
                    seq_len=acts.shape[1],
                    shard_sequences=shard_sequences,
                    storage=storage,
                    dtype=dtype,
                    metadata=metadata,
                )
            need = -(-(n_tokens - done) // writer.seq_len)
            acts, tokens = acts[:need], tokens[:need]
            writer.write(acts, tokens)
            done += acts.shape[0] * writer.seq_len
            bar.update(min(acts.shape[0] * writer.seq_len, bar.total - bar.n))
            if done >= n_tokens:
                break
    bar.close()
    if writer is None:
        raise InputError("the text corpus produced no complete chunk; nothing was captured.")
    if done < n_tokens:
        raise InputError(f"the text corpus ran out after {done} tokens, fewer than the {n_tokens} requested.")
    writer.close()
    return writer
