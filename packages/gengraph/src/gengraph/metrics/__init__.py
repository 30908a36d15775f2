"""Graph generation metrics: descriptor MMDs with kernel-named keys, bootstrap intervals and V.U.N."""

from gengraph.metrics.descriptors import (
    clustering_histograms,
    degree_histograms,
    orbit_counts,
    spectral_histograms,
)
from gengraph.metrics.kernels import KERNELS, gram, mmd2_from_gram
from gengraph.metrics.mmd import DEFAULT_METRICS, METRICS, MetricSpec, graph_mmd, mmd_bootstrap
from gengraph.metrics.vun import is_sbm_graph, is_valid, vun

__all__ = [
    "DEFAULT_METRICS",
    "KERNELS",
    "METRICS",
    "MetricSpec",
    "clustering_histograms",
    "degree_histograms",
    "gram",
    "graph_mmd",
    "is_sbm_graph",
    "is_valid",
    "mmd2_from_gram",
    "mmd_bootstrap",
    "orbit_counts",
    "spectral_histograms",
    "vun",
]
