"""Discrete and simplex generative processes (masked, uniform, Wright-Fisher, learnable forward)."""

from gencore.discrete.base import DiscreteProcess, DiscreteSample, check_tokens
from gencore.discrete.ctmc import (
    CTMC_METHODS,
    DISCRETE_SCHEDULES,
    CosineDiscreteSchedule,
    DiscreteSchedule,
    LinearDiscreteSchedule,
    ctmc_jump,
    discrete_schedule,
    evaluations_per_call,
    model_device,
    sample_categorical,
    stratified_times,
)
from gencore.discrete.enumeration import ExactDenoiser, all_sequences, sequence_index
from gencore.discrete.guidance import GuidedDenoiser, guided_logits
from gencore.discrete.learnable_forward import LearnableForwardProcess, masking_marginals, maximum_coupling_posterior
from gencore.discrete.marginal import MarginalTransitionDiffusion
from gencore.discrete.masked import MaskedDiffusion
from gencore.discrete.network import TokenDenoiser
from gencore.discrete.reference import ReferenceAR, fit_reference
from gencore.discrete.registry import PROCESSES, make_process
from gencore.discrete.sequence_forward import SequenceForwardProcess
from gencore.discrete.simplex import JacobiDirichletSDE, WrightFisherSimplex
from gencore.discrete.uniform import UNIFORM_SAMPLERS, UniformDiffusion, uniform_elbo_integrand
from gencore.discrete.wright_fisher import WrightFisherDiscrete, WrightFisherGaussian

__all__ = [
    "CTMC_METHODS",
    "DISCRETE_SCHEDULES",
    "PROCESSES",
    "UNIFORM_SAMPLERS",
    "CosineDiscreteSchedule",
    "DiscreteProcess",
    "DiscreteSample",
    "DiscreteSchedule",
    "ExactDenoiser",
    "GuidedDenoiser",
    "JacobiDirichletSDE",
    "LearnableForwardProcess",
    "LinearDiscreteSchedule",
    "MarginalTransitionDiffusion",
    "MaskedDiffusion",
    "ReferenceAR",
    "SequenceForwardProcess",
    "TokenDenoiser",
    "UniformDiffusion",
    "WrightFisherDiscrete",
    "WrightFisherGaussian",
    "WrightFisherSimplex",
    "all_sequences",
    "check_tokens",
    "ctmc_jump",
    "discrete_schedule",
    "evaluations_per_call",
    "fit_reference",
    "guided_logits",
    "make_process",
    "masking_marginals",
    "maximum_coupling_posterior",
    "model_device",
    "sample_categorical",
    "sequence_index",
    "stratified_times",
    "uniform_elbo_integrand",
]
