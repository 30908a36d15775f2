"""gengraph: Graph, graph-signal, causal-DAG and manifold generation on gencore's flow-matching math."""

__version__ = "0.1.0"
