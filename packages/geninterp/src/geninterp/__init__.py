"""geninterp: Interpretability for generative models: sparse autoencoders, memorisation and denoiser-based metrics."""

__version__ = "0.1.0"
