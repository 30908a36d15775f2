"""Backbones: EGNN (E(n)-equivariant), a transformer on global coordinates, and an optional e3nn network."""

from genmol.models.base import Backbone
from genmol.models.e3nn_net import E3NNBackbone
from genmol.models.egnn import EGNN
from genmol.models.transformer import CoordinateTransformer

BACKBONES: dict[str, type[Backbone]] = {"egnn": EGNN, "transformer": CoordinateTransformer, "e3nn": E3NNBackbone}

__all__ = ["BACKBONES", "EGNN", "Backbone", "CoordinateTransformer", "E3NNBackbone"]
