"""gengraph: graph data and metrics, hyperbolic layers, GGBall and a DiGress baseline on gencore."""

__version__ = "0.1.0"
