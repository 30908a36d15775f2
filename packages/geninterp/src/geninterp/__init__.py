"""geninterp: interpretability for generative models - sparse autoencoders (ReLU, TopK, Temporal SAE) on
language-model activations, memorisation through representations, and the Information-Estimation Metric."""

from geninterp.capture import ActivationCapture, OutputReplacement, capture_to_store
from geninterp.iem import (
    GaussianDenoiser,
    GaussianMixtureDenoiser,
    IEMResult,
    information_estimation_metric,
)
from geninterp.metrics import downstream_effect, evaluate_sae
from geninterp.saes import (
    ARCHITECTURES,
    ReLUSAE,
    SparseAutoencoder,
    TemporalSAE,
    TopKSAE,
    make_objective,
    make_sae,
)
from geninterp.store import ActivationStore, ActivationWriter
from geninterp.training import SAETrainConfig, load_run, train_sae

__version__ = "0.1.0"

__all__ = [
    "ARCHITECTURES",
    "ActivationCapture",
    "ActivationStore",
    "ActivationWriter",
    "GaussianDenoiser",
    "GaussianMixtureDenoiser",
    "IEMResult",
    "OutputReplacement",
    "ReLUSAE",
    "SAETrainConfig",
    "SparseAutoencoder",
    "TemporalSAE",
    "TopKSAE",
    "__version__",
    "capture_to_store",
    "downstream_effect",
    "evaluate_sae",
    "information_estimation_metric",
    "load_run",
    "make_objective",
    "make_sae",
    "train_sae",
]
