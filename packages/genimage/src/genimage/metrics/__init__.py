"""Offline image metrics: FD-EffLite0 and KID on EfficientNet-Lite0 features, a Frechet distance on an
in-suite classifier, k-NN precision/recall, bits/dim, radially averaged power-spectrum errors."""

from genimage.metrics.classifier import SmallCNN, classifier_features, classifier_for, train_classifier
from genimage.metrics.efflite import efflite0_features
from genimage.metrics.frechet import KIDResult, frechet_distance, frechet_distance_from_stats, kernel_inception_distance
from genimage.metrics.knn import knn_precision_recall
from genimage.metrics.likelihood import bits_per_dim
from genimage.metrics.spectrum import radial_power_spectrum, spectral_errors

__all__ = [
    "KIDResult",
    "SmallCNN",
    "bits_per_dim",
    "classifier_features",
    "classifier_for",
    "efflite0_features",
    "frechet_distance",
    "frechet_distance_from_stats",
    "kernel_inception_distance",
    "knn_precision_recall",
    "radial_power_spectrum",
    "spectral_errors",
    "train_classifier",
]
