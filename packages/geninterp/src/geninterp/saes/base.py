"""The sparse-autoencoder contract: a frozen config dataclass and a module with ``encode/decode/forward``.

Every architecture stores a decoder ``W_dec: [width, d_in]`` whose rows (the dictionary
atoms) are used *normalised to unit length* in :meth:`SparseAutoencoder.decode`, so the
sparsity penalty cannot be dodged by shrinking codes and growing atoms (the usual
post-step renormalisation of SAE trainers, expressed as a reparametrisation instead). Inputs
are multiplied by ``act_scale`` (set from the data so that ``E ||x||^2 = d_in``) before
encoding, and reconstructions divided by it, so one set of hyper-parameters fits any model.

Shapes: per-token architectures take ``x: [..., d_in]``; sequence architectures
(``is_sequence = True``) take ``x: [B, L, d_in]``. ``forward(x)`` returns an
:class:`SAEOutput`; the training objective lives apart (:mod:`geninterp.saes.objectives`).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import load_pretrained, save_pretrained, saved_float_dtype


def _is_count(value: Any) -> bool:
    """A positive integer (not a bool, not a float)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True, kw_only=True)
class SAEConfig:
    """Fields shared by every architecture."""

    arch: ClassVar[str] = "base"
    d_in: int
    width: int
    act_scale: float = 1.0  # inputs are multiplied by this before encoding

    def validate(self) -> SAEConfig:
        if not (_is_count(self.d_in) and _is_count(self.width)):
            raise ConfigError(f"d_in and width must be positive integers, got {self.d_in!r} and {self.width!r}.")
        scale = self.act_scale
        if not (isinstance(scale, numbers.Real) and not isinstance(scale, bool) and scale > 0 and math.isfinite(scale)):
            raise ConfigError(f"act_scale must be a positive finite number, got {scale!r}.")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"arch": self.arch, **dataclasses.asdict(self)}


@dataclass
class SAEOutput:
    """What ``forward`` returns. ``codes``: the sparse latents ``[..., width]``; ``pre_codes``: the
    encoder's pre-activations (for auxiliary losses); ``recon``: the reconstruction in input units.
    Sequence architectures also fill ``pred_codes``/``pred_recon`` (predicted part) and
    ``novel_recon`` (the sparse novel part), both without the decoder bias."""

    recon: torch.Tensor
    codes: torch.Tensor
    pre_codes: torch.Tensor | None = None
    pred_codes: torch.Tensor | None = None
    pred_recon: torch.Tensor | None = None
    novel_recon: torch.Tensor | None = None


class SparseAutoencoder(nn.Module, abc.ABC):
    """Base module: encoder ``W_enc [d_in, width]``, ``b_enc``, decoder ``W_dec [width, d_in]``, ``b_dec``."""

    config_class: ClassVar[type[SAEConfig]] = SAEConfig
    is_sequence: ClassVar[bool] = False

    def __init__(self, config: SAEConfig) -> None:
        super().__init__()
        self.config = config.validate()
        d, w = config.d_in, config.width
        atoms = torch.randn(w, d)
        atoms = atoms / atoms.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(atoms)
        self.W_enc = nn.Parameter(atoms.T.clone())  # encoder initialised as the decoder's transpose
        self.b_enc = nn.Parameter(torch.zeros(w))
        self.b_dec = nn.Parameter(torch.zeros(d))

    @property
    def atoms(self) -> torch.Tensor:
        """Unit-norm dictionary ``[width, d_in]``."""
        return self.W_dec / self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8)

    def check_dtype(self, x: torch.Tensor) -> None:
        """One :class:`InputError` sentence when ``x`` is not in the weights' precision (torch's own error is a
        matmul traceback that names neither)."""
        if x.dtype != self.W_enc.dtype:
            raise InputError(
                f"the SAE's weights are {self.W_enc.dtype} but its input is {x.dtype}; cast one to the other "
                f"(x.to({self.W_enc.dtype}) or sae.to({x.dtype}))."
            )

    def pre_activation(self, x: torch.Tensor) -> torch.Tensor:
        """``(x * act_scale - b_dec) W_enc + b_enc``: ``[..., width]``."""
        if x.ndim < 1 or x.shape[-1] != self.config.d_in:
            raise InputError(f"the SAE takes inputs [..., {self.config.d_in}], got shape {tuple(x.shape)}.")
        self.check_dtype(x)
        return (x * self.config.act_scale - self.b_dec) @ self.W_enc + self.b_enc

    @abc.abstractmethod
    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        """The architecture's sparsifying nonlinearity: pre-activations ``[..., width]`` to codes."""

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Sparse codes ``[..., width]`` of ``x: [..., d_in]``."""
        return self.activate(self.pre_activation(x))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Reconstruction in input units: ``(codes @ atoms + b_dec) / act_scale``."""
        return (codes @ self.atoms + self.b_dec) / self.config.act_scale

    def forward(self, x: torch.Tensor) -> SAEOutput:
        pre = self.pre_activation(x)
        codes = self.activate(pre)
        return SAEOutput(recon=self.decode(codes), codes=codes, pre_codes=pre)

    @torch.no_grad()
    def init_from_data(self, mean: torch.Tensor) -> None:
        """Start the decoder bias at the (scaled) data mean."""
        self.b_dec.copy_(mean.to(self.b_dec) * self.config.act_scale)

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """``model.safetensors`` + ``config.json`` (with the architecture name) in ``directory``."""
        save_pretrained(directory, self.state_dict(), self.config.to_dict())

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device = "cpu") -> SparseAutoencoder:
        """Load any registered architecture from a folder written by :meth:`save_pretrained`."""
        from geninterp.saes.registry import build_sae

        state, config = load_pretrained(directory, device)
        model = build_sae(config, source=str(directory))
        dtype = saved_float_dtype(state)
        if dtype is not None:  # keep the saved precision (a float64 SAE must not come back as float32)
            model = model.to(dtype)
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError:  # a tensor of another shape than the config describes
            raise StorageError(
                f"the weights in {str(directory)!r} do not fit the {config.get('arch')!r} SAE that its config.json "
                "describes."
            ) from None
        if missing or unexpected:
            raise StorageError(
                f"weights in {str(directory)!r} do not fit a {config.get('arch')!r} SAE "
                f"(missing {sorted(missing)}, unexpected {sorted(unexpected)})."
            )
        return model.to(device)
