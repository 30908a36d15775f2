"""Names of the discrete processes that ``gencore discrete compare`` can train.

``PROCESSES[name](task, sample_steps)`` builds a :class:`~gencore.discrete.base.DiscreteProcess`
for a :class:`~gencore.discrete.tasks.TokenTask`. Processes living in optional modules are
imported inside their factory, so a missing module only fails when that process is asked for
(with a :class:`~gencore.errors.ConfigError` naming the module).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gencore.discrete.base import DiscreteProcess
from gencore.discrete.masked import MaskedDiffusion
from gencore.discrete.tasks import TokenTask
from gencore.discrete.uniform import UniformDiffusion
from gencore.errors import ConfigError

__all__ = ["PROCESSES", "make_process"]


def _lazy(module: str, cls: str) -> Callable[[], Any]:
    def load() -> Any:
        try:
            return getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"this process needs {module}.{cls}, which could not be imported ({exc}).") from None

    return load


def _wright_fisher(cls: str) -> Callable[[TokenTask, int], DiscreteProcess]:
    load = _lazy("gencore.discrete.wright_fisher", cls)
    return lambda task, sample_steps: load()(task.vocab_size)


def _learnable_forward(learnable: bool) -> Callable[[TokenTask, int], DiscreteProcess]:
    load = _lazy("gencore.discrete.learnable_forward", "LearnableForwardProcess")
    return lambda task, sample_steps: load()(task.vocab_size, task.length, steps=sample_steps, learnable=learnable)


def _sequence_forward(learnable: bool, reverse: str = "direct") -> Callable[[TokenTask, int], DiscreteProcess]:
    load = _lazy("gencore.discrete.sequence_forward", "SequenceForwardProcess")
    return lambda task, sample_steps: load()(
        task.vocab_size, task.length, steps=sample_steps, learnable=learnable, reverse=reverse
    )


PROCESSES: dict[str, Callable[[TokenTask, int], DiscreteProcess]] = {
    "masked": lambda task, sample_steps: MaskedDiffusion(task.vocab_size),
    "uniform": lambda task, sample_steps: UniformDiffusion(task.vocab_size),
    "wf-discrete": _wright_fisher("WrightFisherDiscrete"),
    "wf-gaussian": _wright_fisher("WrightFisherGaussian"),
    "wf-simplex": _wright_fisher("WrightFisherSimplex"),
    "dirichlet-sde": _wright_fisher("JacobiDirichletSDE"),
    "fixed-mask": _learnable_forward(False),
    "learned-forward": _learnable_forward(True),
    "fixed-mask-net": _sequence_forward(False),
    "learned-forward-net": _sequence_forward(True),
    "learned-forward-net-posterior": _sequence_forward(True, "posterior"),
}


def make_process(name: str, task: TokenTask, sample_steps: int) -> DiscreteProcess:
    """Build the process ``name`` for ``task``; unknown names raise :class:`ConfigError`."""
    if name not in PROCESSES:
        raise ConfigError(f"unknown discrete process {name!r}; expected one of: {', '.join(PROCESSES)}.")
    return PROCESSES[name](task, sample_steps)
