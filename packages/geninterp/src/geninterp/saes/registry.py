"""Architectures registered by name: config class, module class and default objective.

Example::

    sae = make_sae("topk", d_in=384, width=1024, k=16)
    objective = make_objective("topk")
    loss, metrics = objective(sae, torch.randn(64, 384))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from gencore.errors import ConfigError, StorageError
from geninterp.saes.base import SAEConfig, SparseAutoencoder
from geninterp.saes.objectives import L1Objective, TopKObjective
from geninterp.saes.relu import ReLUSAE, ReLUSAEConfig
from geninterp.saes.temporal import TemporalSAE, TemporalSAEConfig
from geninterp.saes.topk import TopKSAE, TopKSAEConfig


@dataclass(frozen=True)
class Architecture:
    config: type[SAEConfig]
    module: type[SparseAutoencoder]
    objective: Callable[..., Any]


ARCHITECTURES: dict[str, Architecture] = {
    "relu": Architecture(ReLUSAEConfig, ReLUSAE, L1Objective),
    "topk": Architecture(TopKSAEConfig, TopKSAE, TopKObjective),
    "temporal": Architecture(TemporalSAEConfig, TemporalSAE, TopKObjective),
}


def _arch(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise ConfigError(f"arch must be one of {', '.join(ARCHITECTURES)}, got {name!r}.")
    return ARCHITECTURES[name]


def config_fields(arch: str) -> set[str]:
    """Field names the architecture's config accepts."""
    return {f.name for f in fields(_arch(arch).config)}


def make_sae(arch: str, **config: Any) -> SparseAutoencoder:
    """Build an SAE of architecture ``arch`` from config fields (``d_in``, ``width``, ``k``, ...)."""
    spec = _arch(arch)
    unknown = set(config) - config_fields(arch)
    if unknown:
        raise ConfigError(f"the {arch!r} SAE has no setting(s) {', '.join(sorted(unknown))}.")
    return spec.module(spec.config(**config))


def build_sae(config: Mapping[str, Any], source: str = "config") -> SparseAutoencoder:
    """Build from a saved ``config.json`` dict (it names its ``arch``)."""
    if not isinstance(config, Mapping):
        raise StorageError(f"{source}: config.json must hold a JSON object of SAE settings.")
    arch = config.get("arch")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise StorageError(f"{source}: unknown SAE architecture {arch!r}; expected one of {', '.join(ARCHITECTURES)}.")
    settings = {k: v for k, v in config.items() if k != "arch"}
    required = {f.name for f in fields(ARCHITECTURES[arch].config) if f.default is MISSING and f.init}
    if required - set(settings):
        raise StorageError(
            f"{source}: config.json lacks the {arch!r} SAE setting(s) {', '.join(sorted(required - set(settings)))}."
        )
    try:
        return make_sae(arch, **settings)
    except ConfigError as exc:  # a setting of the wrong type or range, or one the architecture does not have
        raise StorageError(
            f"{source}: config.json does not describe a valid {arch!r} SAE ({str(exc).rstrip('.')})."
        ) from None


def make_objective(arch: str, **settings: Any) -> Callable[..., Any]:
    """The architecture's training objective with ``settings`` (e.g. ``l1_coeff``, ``aux_k``).

    Settings of another architecture's objective are ignored (one settings dict serves every architecture);
    a name no objective takes (a typo such as ``aux_coef``) is a :class:`ConfigError`.
    """
    cls = _arch(arch).objective
    allowed = {f.name for f in fields(cls)}
    known = {f.name for spec in ARCHITECTURES.values() for f in fields(spec.objective)}
    unknown = set(settings) - known
    if unknown:
        raise ConfigError(
            f"no SAE objective has setting(s) {', '.join(sorted(unknown))}; "
            f"expected some of {', '.join(sorted(known))}."
        )
    return cls(**{k: v for k, v in settings.items() if k in allowed})
