"""``genimage evaluate``: sample a run and score it against its training data, offline.

Samples: ``n`` images from seeded noise (class-conditional runs use the labels of ``n`` reference
images drawn with the same seed, so both sets share the class mix; against an unlabelled reference set,
every class in turn, so guidance is never silently off), integrated with ``solver`` at
``nfe`` evaluations and guidance ``cfg_scale``. The reference set is ``n`` images of the run's data
(seeded choice). Metric keys (all "lower is better" except precision and recall):

- ``fd_efflite0``, ``kid_efflite0`` (+ ``kid_efflite0_std``): on EfficientNet-Lite0 features at
  ``efflite0_input_px`` (:mod:`genimage.metrics.efflite`; not FID).
- ``precision_knn``, ``recall_knn``: k-NN manifolds (k = 3) on the same features.
- ``fd_classifier`` (+ ``classifier_accuracy``): Frechet distance on the in-suite classifier's
  features, for labelled data.
- ``bits_per_dim``: of ``bpd_images`` real images (pixel-space flow runs; else null), with the ODE solver and steps
  as ``bpd_ode``.
- ``spectral_error``, ``hf_spectral_error``: radially averaged power spectra (log10), all rings and
  the upper half of the band.

Video runs: ``n`` counts clips; the image metrics above are taken over all their frames (``n T`` images;
no classifier FD), ``bits_per_dim`` is per clip dimension, and two temporal scores are added:

- ``motion_w1``: the Wasserstein-1 distance between the generated and the real clips' motion, the mean
  absolute frame-to-frame difference of a clip (pixels in ``[-1, 1]``); ``motion_generated`` and
  ``motion_real`` are its means. A generator of good frames that stand still, or that flicker, fails it.
- ``fd_efflite0_diff``: the Frechet distance between EfficientNet-Lite0 features of the clips' frame
  differences ``(x_{t+1} - x_t) / 2``: whether the motion looks like the data's, not only its size.

Reference features and the classifier are cached in ``RUN/evaluation/``.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import time
from pathlib import Path
from typing import Any

import torch

from gencore.errors import ConfigError
from gencore.io import ensure_dir, load_tensors, save_tensors, tensor_fingerprint
from genimage.data import (
    DEFAULT_SIZES,
    VIDEO_SOURCES,
    ImageSet,
    ShardedImages,
    VideoSet,
    load_image_set,
    load_video_set,
)
from genimage.metrics import (
    bits_per_dim,
    classifier_features,
    classifier_for,
    efflite0_features,
    frechet_distance,
    kernel_inception_distance,
    knn_precision_recall,
    spectral_errors,
)
from genimage.metrics.efflite import check_input_px
from genimage.metrics.likelihood import BPD_METHOD, BPD_STEPS
from genimage.runs import LoadedRun
from genimage.sampling import sample_images


def reference_set(run: LoadedRun) -> ImageSet | VideoSet:
    """The run's training data, loaded as in training (shards: read into memory)."""
    c = run.config
    size = c.get("image_size") or DEFAULT_SIZES[c["data"]]
    if c["data"] in VIDEO_SOURCES:
        return load_video_set(
            c["data"],
            frames=run.image_shape[1],
            image_size=size,
            path=c.get("data_path"),
            channels=c.get("channels"),
            skip_bad=True,
        )
    if c["data"] == "shards":
        stream = ShardedImages(c["data_path"], image_size=size, channels=c.get("channels"), skip_bad=True)
        items = list(stream)
        labels = torch.stack([it[1] for it in items]) if len(items[0]) > 1 else None
        return ImageSet(torch.stack([it[0] for it in items]), labels, stream.class_names, name="shards")
    return load_image_set(
        c["data"], image_size=size, path=c.get("data_path"), channels=c.get("channels"), skip_bad=True
    )


def _choose(data: ImageSet | VideoSet, n: int, seed: int) -> ImageSet | VideoSet:
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[: min(n, len(data))]
    return data.subset(idx)


def _cached_features(cache: Path | None, key: dict[str, Any], compute) -> torch.Tensor:
    if cache is None:
        return compute()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache / f"reference-features-{digest}.safetensors"
    if path.is_file():
        return load_tensors(path)["features"]
    feats = compute()
    save_tensors(path, {"features": feats})
    return feats


def evaluate_run(
    run: LoadedRun,
    *,
    n: int = 500,
    nfe: int = 32,
    cfg_scale: float = 1.0,
    solver: str = "euler",
    seed: int = 0,
    input_px: int = 224,
    bpd_images: int = 64,
    reference: ImageSet | VideoSet | None = None,
    cache_dir: str | Path | None = "auto",
    batch_size: int = 256,
    progress: bool = True,
) -> dict[str, Any]:
    """Score ``run`` (see the module docstring); returns a JSON-ready dict of metrics and settings."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 4:
        raise ConfigError(f"evaluation needs n >= 4 images (k-NN precision/recall uses k = 3), got {n!r}.")
    check_input_px(input_px)  # before any sampling
    # a negative count was taken as 0 (skip), and a float one (32.0) failed slicing, after the whole evaluation had run
    if isinstance(bpd_images, bool) or not isinstance(bpd_images, numbers.Integral) or bpd_images < 0:
        raise ConfigError(f"bpd_images must be 0 (skip) or a positive integer, got {bpd_images!r}.")
    start = time.perf_counter()
    data = reference if reference is not None else reference_set(run)
    ref = _choose(data, n, seed)
    if cache_dir == "auto":
        cache = ensure_dir(run.run_dir / "evaluation") if run.run_dir is not None else None
    else:
        cache = ensure_dir(cache_dir) if cache_dir is not None else None
    labels = None
    if run.num_classes:  # a conditional run samples with the reference's class mix, else with balanced classes
        labels = ref.labels if ref.labels is not None else torch.arange(len(ref)) % run.num_classes
    fake = sample_images(
        run,
        len(ref),
        labels,
        nfe=nfe,
        cfg_scale=cfg_scale,
        solver=solver,
        seed=seed + 1,
        batch_size=batch_size,
        progress=progress,
    )
    video = isinstance(ref, VideoSet)
    key = {
        "data": run.config.get("data"),
        "path": run.config.get("data_path"),
        "shape": list(ref.shape),
        "n": len(ref),
        "seed": seed,
        # the reference pixels themselves: a ``reference`` set of the same shape, or files changed under data_path,
        # used to get the cached features of the set first evaluated
        "content": tensor_fingerprint(ref.videos if video else ref.images),
    }
    real_x = ref.frames() if video else ref.images
    fake_x = fake.transpose(1, 2).flatten(0, 1) if video else fake
    real_f = _cached_features(cache, key | {"px": input_px}, lambda: efflite0_features(real_x, input_px=input_px))
    fake_f = efflite0_features(fake_x, input_px=input_px)
    kid = kernel_inception_distance(real_f, fake_f, seed=seed)
    record: dict[str, Any] = {
        "run": str(run.run_dir) if run.run_dir is not None else None,
        "n_samples": len(ref),
        "nfe": nfe,
        "solver": solver,
        "cfg_scale": cfg_scale,
        "seed": seed,
        "fd_efflite0": frechet_distance(real_f, fake_f),
        "kid_efflite0": kid.mean,
        "kid_efflite0_std": kid.std,
        "efflite0_input_px": input_px,
        **knn_precision_recall(real_f, fake_f, k=3),
        "knn_k": 3,
    }
    if video:
        record |= temporal_scores(ref.videos, fake, cache, key, input_px)
    elif ref.labels is not None and data.num_classes:
        clf_dir = None
        if cache is not None:  # named by the training set's content: another set of one name trains its own
            clf_dir = (
                cache / f"classifier-{data.name}-{ref.shape[1]}px-{tensor_fingerprint(data.images, data.labels)[:16]}"
            )
        net, acc = classifier_for(data, clf_dir, seed=0)
        record["fd_classifier"] = frechet_distance(classifier_features(net, ref.images), classifier_features(net, fake))
        record["classifier_accuracy"] = acc
    bpd_set = (ref.videos if video else ref.images)[: min(bpd_images, len(ref))]
    record["bits_per_dim"] = bits_per_dim(run, bpd_set, seed=seed) if bpd_images > 0 else None
    record["bpd_images"] = int(bpd_set.shape[0]) if record["bits_per_dim"] is not None else 0
    record["bpd_ode"] = f"{BPD_METHOD} {BPD_STEPS}" if record["bits_per_dim"] is not None else None
    record |= spectral_errors(fake_x, real_x)
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def clip_motion(videos: torch.Tensor) -> torch.Tensor:
    """Mean absolute frame-to-frame difference of each clip ``[N, C, T, H, W]`` -> ``[N]``."""
    return (videos[:, :, 1:] - videos[:, :, :-1]).abs().mean(dim=(1, 2, 3, 4))


def temporal_scores(
    real: torch.Tensor, fake: torch.Tensor, cache: Path | None, key: dict[str, Any], input_px: int
) -> dict[str, float]:
    """``motion_w1``, ``motion_generated``, ``motion_real`` and ``fd_efflite0_diff`` (module docstring)."""
    from scipy.stats import wasserstein_distance

    mr, mf = clip_motion(real), clip_motion(fake)

    def differences(v: torch.Tensor) -> torch.Tensor:
        d = (v[:, :, 1:] - v[:, :, :-1]) / 2
        return d.transpose(1, 2).flatten(0, 1)

    real_f = _cached_features(
        cache, key | {"px": input_px, "diff": True}, lambda: efflite0_features(differences(real), input_px=input_px)
    )
    fake_f = efflite0_features(differences(fake), input_px=input_px)
    return {
        "motion_w1": float(wasserstein_distance(mf.double().numpy(), mr.double().numpy())),
        "motion_generated": float(mf.mean()),
        "motion_real": float(mr.mean()),
        "fd_efflite0_diff": frechet_distance(real_f, fake_f),
    }
