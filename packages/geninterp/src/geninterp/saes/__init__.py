"""Sparse autoencoders: a registry of architectures (config + module) and their objectives."""

from geninterp.saes.base import SAEConfig, SAEOutput, SparseAutoencoder
from geninterp.saes.objectives import L1Objective, TopKObjective, reconstruction_terms
from geninterp.saes.registry import ARCHITECTURES, build_sae, make_objective, make_sae
from geninterp.saes.relu import ReLUSAE, ReLUSAEConfig
from geninterp.saes.temporal import TemporalSAE, TemporalSAEConfig
from geninterp.saes.topk import TopKSAE, TopKSAEConfig, topk_relu

__all__ = [
    "ARCHITECTURES",
    "L1Objective",
    "ReLUSAE",
    "ReLUSAEConfig",
    "SAEConfig",
    "SAEOutput",
    "SparseAutoencoder",
    "TemporalSAE",
    "TemporalSAEConfig",
    "TopKObjective",
    "TopKSAE",
    "TopKSAEConfig",
    "build_sae",
    "make_objective",
    "make_sae",
    "reconstruction_terms",
    "topk_relu",
]
