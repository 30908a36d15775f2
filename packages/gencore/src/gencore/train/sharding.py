"""FSDP2 (``torch.distributed.fsdp.fully_shard``) for models that do not fit one device.

With ``TrainConfig(parallel="fsdp")`` in a multi-process run every parameter becomes a
``DTensor`` sharded over the ranks (Zhao et al. 2023, "PyTorch FSDP: Experiences on Scaling
Fully Sharded Data Parallel"; FSDP2 is the per-parameter-sharding rewrite). Each submodule
whose class name is listed in ``fsdp_units`` (e.g. ``"TransformerEncoderLayer"``) becomes its
own all-gather unit, then the root; the EMA copy is sharded the same way, so neither the
weights, the gradients, the optimiser state nor the average is ever held whole on one rank
during training.

Checkpoints stay in the engine's one format: the full (unsharded) model, EMA and optimiser
state are gathered with ``torch.distributed.checkpoint.state_dict`` (CPU offload, rank 0
receives them) and written by rank 0; on resume every rank loads the full state and keeps its
shard. The optimiser state of an FSDP checkpoint is keyed by parameter name, that of a DDP
checkpoint by parameter index, so a run resumes under the parallelism it was started with.
"""

from __future__ import annotations

from typing import Any

import torch

from gencore.errors import ConfigError


def _options(**kwargs: Any):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def shard(module: torch.nn.Module, units: tuple[str, ...]) -> torch.nn.Module:
    """Apply ``fully_shard`` to every submodule whose class name is in ``units``, then to ``module``."""
    from torch.distributed.fsdp import fully_shard

    found = set()
    for sub in list(module.modules())[1:]:
        name = type(sub).__name__  # read before sharding: fully_shard swaps the class for FSDP<name>
        if name in units:
            fully_shard(sub)
            found.add(name)
    missing = sorted(set(units) - found)
    if missing:
        raise ConfigError(f"fsdp_units {missing} name no submodule class of {type(module).__name__}.")
    fully_shard(module)
    return module


def is_sharded(module: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def full_model_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Collective: the whole state dict of a sharded module on CPU (rank 0; empty on other ranks)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(cpu_offload=True))


def full_optimizer_state(module: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective: the whole optimiser state keyed by parameter name, on CPU (rank 0)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(module, opt, options=_options(cpu_offload=True))


def load_model_state(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Every rank: keep this rank's shard of a full state dict."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(module, state, options=_options())


def load_optimizer_state(module: torch.nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Every rank: keep this rank's shard of a full (name-keyed) optimiser state."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(module, opt, state, options=_options())


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """A plain tensor from a ``DTensor`` (collective) or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return value.full_tensor() if isinstance(value, DTensor) else value
