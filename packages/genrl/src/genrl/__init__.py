"""genrl: Offline and online reinforcement learning with generative policies on gencore's flow-matching math."""

__version__ = "0.1.0"
