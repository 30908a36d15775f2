"""Memorisation vs generalisation through representations, in miniature.

Zhang, Li, Li, Shi, Wu, Tao & Qu, "Generalization of Diffusion Models Arises with a Balanced
Representation Space" (ICLR 2026, arXiv:2512.20963). Three experiments on sklearn's 8x8 digits
(scaled to [-1, 1]):

* ``dae``: a two-layer ReLU denoising autoencoder ``f(y) = W2 ReLU(W1 y + b1) + b2`` at one noise
  level, trained on ``n`` digits for each ``n``. With few training points it *memorises*: the
  encoder rows align with individual training images and each training input lights up a few
  hidden units (a *spiky* representation); with many, it *generalises*: hidden activity is
  balanced and test denoising error approaches training error. Reported per ``n``: spikiness
  (mean ``max_j h_j / sum_j h_j`` over noisy training inputs), the mean over training images of
  the best cosine with an encoder row, and the test/train denoising-error ratio.
* ``detect``: a flow-matching model trained through :mod:`gencore.train` on a small digit set in
  which a few images are duplicated many times: the ReLU MLP :class:`ReLUVelocity` (representation:
  its last hidden layer ``rep``) or the convolutional ReLU U-Net
  :class:`~geninterp.memorization_unet.ReLUUNet` (representations: the output of each block, max-pooled
  over space to a channel vector as the paper does). Generated samples are labelled memorised when their
  nearest training image is much closer than the second-nearest distinct one (distance ratio below
  1/3, the rule of Yoon et al. 2023 and Gu et al. 2023); the detection score is the spikiness of a
  representation along the sampling trajectory (scale-free measures, and the plain standard deviation
  of the units, the paper's statistic), and, for a finished image without its trajectory, of the
  representation of the image re-noised to a few times ``t``; AUROC of score vs label, for every (tap,
  measure, window), with one headline per model fixed in advance (:data:`HEADLINES`).
* ``steer``: adding a class direction (mean hidden representation of that class's noised
  training images minus the overall mean) to the same hidden layer during sampling edits the
  generated digits; measured by a logistic-regression digit classifier as the fraction of
  samples of the target class, before and after steering.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gencore.checks import check_choice
from gencore.data import get_dataset
from gencore.errors import ConfigError, InputError
from gencore.flow_matching import FlowMatcher
from gencore.io import ensure_dir
from gencore.metrics import roc_auc
from gencore.nn import SinusoidalTimeEmbedding, broadcast_time
from gencore.rng import randn_like_with
from gencore.train import TrainConfig, Trainer
from geninterp.capture import ActivationCapture, OutputReplacement
from geninterp.memorization_unet import UNET_TAPS, ReLUUNet

EXPERIMENTS = ("dae", "detect", "steer")
MODELS = ("mlp", "unet")
TAPS = {"mlp": ("rep",), "unet": UNET_TAPS}  # the representations read, per model
STEER_TAP = {"mlp": "rep", "unet": "mid_block"}
PROBE_TIMES = (0.3, 0.5, 0.7, 0.9)  # re-noising times of the finished-sample probe (windows "final, t=...")
# The score named in reports, (tap, measure, window), per model; every combination's AUROC is reported too.
# mlp: fixed before any run. unet: the best of the 140 (tap, measure, window) AUROCs of training seed 0 only
# (0.921; 848 of 1,000 samples memorised), written here before seeds 1 and 2 were trained, and kept for them.
HEADLINES = {"mlp": ("rep", "hoyer", "middle"), "unet": ("up_blocks.1", "hoyer", "final, t=0.9")}
# The paper's recipe fixed a priori: std of the (spatially max-pooled) first decoder block's representation
# (Stable Diffusion's ``up_blocks.0``) of the finished image at low noise (t = 0.9: noise/signal 0.11).
PAPER_RECIPE = {"mlp": ("rep", "std", "final, t=0.9"), "unet": ("up_blocks.0", "std", "final, t=0.9")}


def digits_scaled() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits in [-1, 1] ``[N, 64]`` and their labels ``[N]``."""
    from sklearn.datasets import load_digits

    x = get_dataset("digits")
    lo, hi = x.min(), x.max()
    return ((x - lo) / (hi - lo) * 2 - 1).float(), torch.as_tensor(load_digits().target)


def spikiness(h: torch.Tensor) -> torch.Tensor:
    """``max_j h_j / sum_j h_j`` per row of non-negative ``h: [B, m]`` (1: one unit; 1/m: uniform)."""
    return h.max(-1).values / h.sum(-1).clamp_min(1e-12)


def hoyer(h: torch.Tensor) -> torch.Tensor:
    """Hoyer sparsity ``(sqrt(m) - |h|_1 / |h|_2) / (sqrt(m) - 1)`` per row (1: one unit; 0: uniform; 0 for an
    all-zero row, like the other measures, rather than the formula's out-of-range ``sqrt(m) / (sqrt(m) - 1)``)."""
    m = h.shape[-1]
    norm = h.norm(dim=-1)
    ratio = h.abs().sum(-1) / norm.clamp_min(1e-12)
    return torch.where(norm > 0, (math.sqrt(m) - ratio) / (math.sqrt(m) - 1), 0.0)


def top_share(h: torch.Tensor, k: int = 8) -> torch.Tensor:
    """Share of the representation's mass on its ``k`` largest units, per row (1 when it has at most ``k``)."""
    return h.topk(min(k, h.shape[-1]), dim=-1).values.sum(-1) / h.sum(-1).clamp_min(1e-12)


def feature_std(h: torch.Tensor) -> torch.Tensor:
    """Standard deviation of the representation's units, per row: the detection statistic of Zhang et al.
    (not scale-free: a spiky representation has a few large units, hence a large spread)."""
    return h.std(-1)


SPIKINESS_MEASURES = {"max_over_sum": spikiness, "hoyer": hoyer, "top8_share": top_share, "std": feature_std}


def _fit(
    task: Any,
    data: torch.Tensor,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    progress: bool,
    weight_decay: float = 0.0,
) -> nn.Module:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(
            steps=steps, global_batch_size=batch, optimizer="adamw", lr=lr, schedule="cosine", ema_decay=0.0,
            seed=seed, progress=progress, out_dir=tmp, log_every=max(steps // 10, 1), weight_decay=weight_decay,
        )  # fmt: skip
        # the engine trains on CUDA when there is one; the experiments evaluate on the CPU
        return Trainer(cfg).fit(task, torch.utils.data.TensorDataset(data)).model.cpu().eval()


# ---------------------------------------------------------------------------------------------- ReLU DAE
class ReLUDAE(nn.Module):
    """``f(y) = W2 ReLU(W1 y + b1) + b2``; ``hidden(y)`` is the representation."""

    def __init__(self, dim: int, width: int) -> None:
        super().__init__()
        self.enc = nn.Linear(dim, width)
        self.dec = nn.Linear(width, dim)

    def hidden(self, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.enc(y))

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.dec(self.hidden(y))


class DAETask:
    def __init__(self, model: ReLUDAE, sigma: float) -> None:
        self.model, self.sigma = model, sigma

    def loss(self, model: nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        (x,) = batch
        y = x + self.sigma * randn_like_with(x, generator)
        return (model(y) - x).pow(2).sum(-1).mean(), {}


@torch.no_grad()
def dae_transition(
    sizes: tuple[int, ...] = (4, 16, 64, 256, 1597), width: int = 32, sigma: float = 0.5, steps: int = 2000,
    weight_decay: float = 0.01, seed: int = 0, progress: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Per training-set size: representation spikiness, weight-data alignment, test/train error ratio.

    Digits are centred (the data-set mean removed) so that cosines measure shape, not the shared
    background; weight decay (AdamW) lets unused hidden units switch off, as in the paper's
    regularised analysis.
    """
    x, _ = digits_scaled()
    if not sizes or any(not 1 <= n <= len(x) - 200 for n in sizes):
        raise ConfigError(
            f"the DAE training sizes must lie in 1..{len(x) - 200} (200 digits are held out), got {sizes}."
        )
    x = x - x.mean(0)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    test = x[perm[:200]]
    g = torch.Generator().manual_seed(seed + 1)
    rows = []
    for n in sizes:
        train = x[perm[200 : 200 + n]]
        torch.manual_seed(seed)
        with torch.enable_grad():
            task = DAETask(ReLUDAE(64, width), sigma)
            model = _fit(task, train, steps, min(128, n), 2e-3, seed, progress, weight_decay)
        y_train = train + sigma * torch.randn(train.shape, generator=g)
        y_test = test + sigma * torch.randn(test.shape, generator=g)
        h = model.hidden(y_train)
        active = h.sum(0) > 0
        rows_w = nn.functional.normalize(model.enc.weight, dim=-1)
        align = (nn.functional.normalize(train, dim=-1) @ rows_w.T).max(-1).values.mean()
        err_train = (model(y_train) - train).pow(2).sum(-1).mean()
        err_test = (model(y_test) - test).pow(2).sum(-1).mean()
        rows.append(
            {
                "n_train": n,
                "spikiness": float(spikiness(h).mean()),
                "weight_data_cosine": float(align),
                "test_over_train_error": float(err_test / err_train),
                "active_units": int(active.sum()),
            }
        )
    return {"width": width, "sigma": sigma, "steps": steps, "weight_decay": weight_decay, "rows": rows}


# ---------------------------------------------------------------------------------------------- diffusion model
class ReLUVelocity(nn.Module):
    """Flow-matching MLP ``v(x, t)`` whose second ReLU layer (module ``rep``) is the studied representation."""

    def __init__(self, dim: int, hidden: int = 512, time_dim: int = 32) -> None:
        super().__init__()
        self.time_embed = SinusoidalTimeEmbedding(time_dim)
        self.inp = nn.Sequential(nn.Linear(dim + time_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.rep = nn.ReLU()
        self.out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        t = broadcast_time(t, x)
        return self.out(self.rep(self.inp(torch.cat([x, self.time_embed(t).to(x.dtype)], -1))))


class FlowTask:
    def __init__(self, model: nn.Module) -> None:
        self.model, self.fm = model, FlowMatcher()

    def loss(self, model: nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        (x,) = batch
        return self.fm.loss(model, x, generator=generator), {}


def duplicated_training_set(
    n_unique: int = 100, n_duplicated: int = 10, copies: int = 20, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(train_rows, unique_images, unique_labels, duplicated_mask)``: ``n_duplicated`` of the
    ``n_unique`` images repeated ``copies`` times in ``train_rows``."""
    x, y = digits_scaled()
    if not (0 <= n_duplicated <= n_unique <= len(x) and n_unique >= 2 and copies >= 1):
        raise ConfigError(
            f"need 0 <= n_duplicated <= n_unique <= {len(x)}, n_unique >= 2 and copies >= 1, "
            f"got {n_duplicated}, {n_unique} and {copies}."
        )
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n_unique]
    unique, labels = x[idx], y[idx]
    dup = torch.zeros(n_unique, dtype=torch.bool)
    dup[:n_duplicated] = True
    rows = torch.cat([unique, unique[:n_duplicated].repeat_interleave(copies - 1, 0)])
    return rows, unique, labels, dup


def make_model(arch: str, dim: int) -> nn.Module:
    """A fresh velocity network: ``"mlp"`` (:class:`ReLUVelocity`) or ``"unet"`` (:class:`ReLUUNet`, square images)."""
    check_choice(arch, MODELS, "model")
    if arch == "mlp":
        return ReLUVelocity(dim)
    side = math.isqrt(dim)
    if side * side != dim:
        raise ConfigError(f"the U-Net needs square images, but the rows have {dim} values.")
    return ReLUUNet(side)


def train_flow(rows: torch.Tensor, steps: int, seed: int, progress: bool, arch: str = "mlp") -> nn.Module:
    torch.manual_seed(seed)
    return _fit(FlowTask(make_model(arch, rows.shape[1])), rows, steps, 128, 2e-3, seed, progress)


def pool_rep(h: torch.Tensor) -> torch.Tensor:
    """A representation as one vector per sample: ``[B, m]`` as is; a conv map ``[B, C, H, W]`` max-pooled over
    space to ``[B, C]`` (the pooling of Zhang et al.'s representation extraction)."""
    return h if h.dim() == 2 else h.flatten(2).amax(-1)


def rep_measures(h: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every spikiness measure of the pooled representation, per sample."""
    pooled = pool_rep(h)
    return {name: fn(pooled) for name, fn in SPIKINESS_MEASURES.items()}


@torch.no_grad()
def sample_with_reps(
    model: nn.Module, noise: torch.Tensor, nfe: int = 32, steer: torch.Tensor | None = None,
    steer_until: float = 0.6, taps: tuple[str, ...] = ("rep",), steer_tap: str = "rep",
) -> tuple[torch.Tensor, dict[str, dict[str, torch.Tensor]]]:  # fmt: skip
    """Euler samples ``[B, D]`` and every spikiness measure of each tap at every step (``{tap: {name: [nfe, B]}}``);
    ``steer`` (broadcast against one sample's activation of ``steer_tap``) is added to that module's output,
    then ReLU, while ``t < steer_until``."""
    if nfe < 1:
        raise ConfigError(f"sampling needs nfe >= 1 Euler steps, got {nfe}.")
    x = noise
    spikes: dict[str, dict[str, list[torch.Tensor]]] = {tap: {n: [] for n in SPIKINESS_MEASURES} for tap in taps}
    for i in range(nfe):
        t = torch.tensor(i / nfe)
        edit = steer if steer is not None and float(t) < steer_until else None
        with ActivationCapture(model, list(taps)) as cap:
            if edit is not None:
                with OutputReplacement(model, steer_tap, lambda h, e=edit: torch.relu(h + e)):
                    v = model(x, t)
            else:
                v = model(x, t)
        for tap in taps:
            for name, value in rep_measures(cap.outputs[tap]).items():
                spikes[tap][name].append(value)
        x = x + v / nfe
    return x, {tap: {name: torch.stack(v) for name, v in by.items()} for tap, by in spikes.items()}


@torch.no_grad()
def probe_reps(
    model: nn.Module, samples: torch.Tensor, times: tuple[float, ...] = PROBE_TIMES, draws: int = 8,
    generator: torch.Generator | None = None, taps: tuple[str, ...] = ("rep",),
) -> dict[str, dict[str, torch.Tensor]]:  # fmt: skip
    """Every spikiness measure of each tap for finished samples re-noised to each time ``t``
    (``x_t = t x + (1 - t) eps``, averaged over ``draws`` noise draws): ``{tap: {name: [len(times), B]}}``.

    This scores an image at hand, without its sampling trajectory (what a detector given only the
    image can do)."""
    out: dict[str, dict[str, list[torch.Tensor]]] = {tap: {n: [] for n in SPIKINESS_MEASURES} for tap in taps}
    for t in times:
        acc = {tap: {name: torch.zeros(samples.shape[0]) for name in SPIKINESS_MEASURES} for tap in taps}
        for _ in range(draws):
            eps = torch.randn(samples.shape, generator=generator)
            with ActivationCapture(model, list(taps)) as cap:
                model(t * samples + (1 - t) * eps, torch.tensor(t))
            for tap in taps:
                for name, value in rep_measures(cap.outputs[tap]).items():
                    acc[tap][name] += value / draws
        for tap in taps:
            for name in SPIKINESS_MEASURES:
                out[tap][name].append(acc[tap][name])
    return {tap: {name: torch.stack(v) for name, v in by.items()} for tap, by in out.items()}


def memorised_labels(samples: torch.Tensor, unique: torch.Tensor, ratio: float = 1.0 / 3.0) -> torch.Tensor:
    """A sample is memorised when ``d(nearest) < ratio * d(second nearest)`` among distinct training images
    (repeated rows of ``unique`` count once: a copy would be its own second-nearest image)."""
    distinct = torch.unique(unique, dim=0) if unique.ndim == 2 else unique
    if unique.ndim != 2 or distinct.shape[0] < 2:
        raise InputError(
            f"memorisation labels need at least two training images [N, D] that differ, got shape "
            f"{tuple(unique.shape)} with {distinct.shape[0] if unique.ndim == 2 else 0} distinct rows."
        )
    if samples.ndim != 2 or samples.shape[1] != unique.shape[1]:
        raise InputError(
            f"memorisation labels need samples [B, {unique.shape[1]}] like the training images, "
            f"got shape {tuple(samples.shape)}."
        )
    # float64 and direct differences: samples and images may differ in dtype, and the matrix-product form of
    # cdist puts an exact copy at a distance of order sqrt(eps) |x|
    d = torch.cdist(samples.double(), distinct.double(), compute_mode="donot_use_mm_for_euclid_dist")
    d = d.topk(2, largest=False).values
    return d[:, 0] < ratio * d[:, 1]


def _auroc(label: torch.Tensor, score: torch.Tensor) -> float:
    """AUROC of ``score`` for the boolean ``label`` (NaN when only one class is present)."""
    return roc_auc(score[label], score[~label]) if 0 < int(label.sum()) < len(label) else math.nan


def auroc_table(
    spikes: dict[str, dict[str, torch.Tensor]], probe: dict[str, dict[str, torch.Tensor]], label: torch.Tensor,
    times: tuple[float, ...] = PROBE_TIMES,
) -> list[dict[str, Any]]:  # fmt: skip
    """AUROC of every (tap, measure, window) score against the memorised ``label``: trajectory windows early,
    middle, late (first quarter, middle half, last quarter of the steps) and the probe's ``final, t=...``."""
    short = [tap for tap, by in spikes.items() for v in by.values() if v.shape[0] < 4]
    if short:
        raise ConfigError(f"the AUROC windows need scores at nfe >= 4 sampling steps; tap {short[0]!r} has fewer.")
    table = []
    for tap, by_measure in spikes.items():
        for name, per_step in by_measure.items():
            nfe = per_step.shape[0]
            windows = {"early": slice(0, nfe // 4), "middle": slice(nfe // 4, 3 * nfe // 4),
                       "late": slice(3 * nfe // 4, nfe)}  # fmt: skip
            scores = {w: per_step[sl].mean(0) for w, sl in windows.items()}
            scores |= {f"final, t={t}": probe[tap][name][j] for j, t in enumerate(times)}
            for window, score in scores.items():
                table.append({"tap": tap, "measure": name, "window": window, "auroc": _auroc(label, score),
                              "mean_memorised": float(score[label].mean()) if label.any() else math.nan,
                              "mean_other": float(score[~label].mean()) if not label.all() else math.nan})  # fmt: skip
    return table


def _pick(table: list[dict[str, Any]], key: tuple[str, str, str]) -> dict[str, Any]:
    return next(r for r in table if (r["tap"], r["measure"], r["window"]) == key)


def detection(
    steps: int = 4000, n_samples: int = 1000, nfe: int = 32, seed: int = 0, progress: bool = False,
    model: nn.Module | None = None, arch: str = "mlp",
) -> tuple[dict[str, Any], nn.Module]:  # fmt: skip
    """AUROC of representation spikiness for memorised generations; returns ``(record, model)``.

    ``arch`` names the network (``"mlp"`` or ``"unet"``; a given ``model`` must be of that kind): it sets
    the taps read and the pre-registered headline."""
    check_choice(arch, MODELS, "model")
    if nfe < 4:
        raise ConfigError(
            f"detection needs nfe >= 4 sampling steps (its early window is the first quarter), got {nfe}."
        )
    rows, unique, _, dup = duplicated_training_set(seed=seed)
    start = time.perf_counter()
    model = model or train_flow(rows, steps, seed, progress, arch)
    seconds = time.perf_counter() - start
    taps = TAPS[arch]
    noise = torch.randn(n_samples, rows.shape[1], generator=torch.Generator().manual_seed(seed + 5))
    samples, spikes = sample_with_reps(model, noise, nfe, taps=taps)
    label = memorised_labels(samples, unique)
    nearest = torch.cdist(samples, unique).argmin(1)
    n_mem = int(label.sum())
    probe = probe_reps(model, samples, generator=torch.Generator().manual_seed(seed + 7), taps=taps)
    table = auroc_table(spikes, probe, label)
    head, paper = HEADLINES[arch], PAPER_RECIPE[arch]
    # control without the network: the same measures of the finished image's own pixels (mapped to [0, 1])
    pixels = rep_measures(((samples + 1) / 2).clamp_min(0))
    control = {name: _auroc(label, score) for name, score in pixels.items()}
    return {
        "model": arch,
        "seed": seed,
        "train_steps": steps,
        "train_rows": len(rows),
        "unique_images": len(unique),
        "duplicated_images": int(dup.sum()),
        "copies": int((len(rows) - len(unique)) // max(int(dup.sum()), 1) + 1),
        "samples": n_samples,
        "memorised_samples": n_mem,
        "memorised_of_duplicated": int((label & dup[nearest]).sum()),
        "auroc_spikiness": _pick(table, head)["auroc"],
        "headline_score": f"{head[1]} of {head[0]}, window {head[2]}",
        "auroc_paper_recipe": _pick(table, paper)["auroc"],
        "paper_recipe": f"{paper[1]} of {paper[0]}, window {paper[2]}",
        "auroc_pixel_control": control,
        "scores": table,
        "train_seconds": round(seconds, 2),
    }, model


def detection_seeds(
    arch: str = "unet", seeds: tuple[int, ...] = (0, 1, 2), steps: int = 4000, n_samples: int = 1000,
    progress: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """:func:`detection` once per training seed (a different duplicated set, initialisation and noise each),
    with the mean and spread of the pre-registered headline and of the paper's recipe."""
    runs = [detection(steps=steps, n_samples=n_samples, seed=s, progress=progress, arch=arch)[0] for s in seeds]

    def summary(key: str) -> dict[str, Any]:
        values = torch.tensor([r[key] for r in runs], dtype=torch.float64)
        return {"per_seed": values.tolist(), "mean": float(values.mean()),
                "std": float(values.std()) if len(values) > 1 else 0.0}  # fmt: skip

    return {
        "model": arch,
        "seeds": list(seeds),
        "headline_score": runs[0]["headline_score"],
        "paper_recipe": runs[0]["paper_recipe"],
        "memorised_samples": [r["memorised_samples"] for r in runs],
        "auroc_headline": summary("auroc_spikiness"),
        "auroc_paper_recipe": summary("auroc_paper_recipe"),
        "runs": runs,
    }


@torch.no_grad()
def steering(
    model: nn.Module, n_samples: int = 400, nfe: int = 32, strength: float = 4.0, seed: int = 0, tap: str = "rep"
) -> dict[str, Any]:
    """Fraction of samples classified as each target digit, without and with its steering vector on ``tap``."""
    from sklearn.linear_model import LogisticRegression

    x, y = digits_scaled()
    clf = LogisticRegression(max_iter=2000).fit(x.numpy(), y.numpy())
    g = torch.Generator().manual_seed(seed + 9)
    noise = torch.randn(n_samples, x.shape[1], generator=g)
    base, _ = sample_with_reps(model, noise, nfe, taps=(tap,), steer_tap=tap)
    base_pred = torch.as_tensor(clf.predict(base.numpy()))
    # class directions: mean rep of class images on the path at a few times, minus the overall mean
    reps, cls = [], []
    for t in (0.2, 0.4):
        x0 = torch.randn(x.shape, generator=g)
        xt = (1 - t) * x0 + t * x
        with ActivationCapture(model, [tap]) as cap:
            model(xt, torch.tensor(t))
        reps.append(cap.outputs[tap])
        cls.append(y)
    r, c = torch.cat(reps), torch.cat(cls)
    overall = r.mean(0)
    rows = []
    for target in range(10):
        v = strength * (r[c == target].mean(0) - overall)
        steered, _ = sample_with_reps(model, noise, nfe, steer=v, taps=(tap,), steer_tap=tap)
        pred = torch.as_tensor(clf.predict(steered.numpy()))
        rows.append(
            {
                "target": target,
                "fraction_before": float((base_pred == target).double().mean()),
                "fraction_after": float((pred == target).double().mean()),
                "mean_change_l2": float((steered - base).norm(dim=-1).mean()),
            }
        )
    before = sum(r_["fraction_before"] for r_ in rows) / 10
    after = sum(r_["fraction_after"] for r_ in rows) / 10
    return {
        "samples": n_samples,
        "strength": strength,
        "tap": tap,
        "mean_target_before": before,
        "mean_target_after": after,
        "rows": rows,
    }


def run_all(
    out_dir: str | Path | None = None, progress: bool = False, quick: bool = False,
    experiments: tuple[str, ...] = EXPERIMENTS, seed: int = 0, arch: str = "mlp", steps: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run the named experiments with the ``arch`` flow model; ``quick`` shrinks them (for the demo and tests);
    ``steps`` overrides the flow model's training steps (4,000; 800 when quick)."""
    bad = [e for e in experiments if e not in EXPERIMENTS]
    if bad:
        raise ConfigError(f"experiments must be among {', '.join(EXPERIMENTS)}, got {', '.join(bad)}.")
    check_choice(arch, MODELS, "model")
    if steps is not None and steps < 1:
        raise ConfigError(f"the training steps must be a positive integer, got {steps}.")
    flow_steps = steps or (800 if quick else 4000)
    record: dict[str, Any] = {}
    if "dae" in experiments:
        sizes = (4, 64, 1597) if quick else (4, 16, 64, 256, 1597)
        record["dae"] = dae_transition(sizes=sizes, steps=400 if quick else 2000, seed=seed, progress=progress)
    model = None
    if "detect" in experiments:
        record["detect"], model = detection(
            steps=flow_steps, n_samples=300 if quick else 1000, seed=seed, progress=progress, arch=arch
        )
    if "steer" in experiments:
        if model is None:
            rows, *_ = duplicated_training_set(seed=seed)
            model = train_flow(rows, flow_steps, seed, progress, arch)
        record["steer"] = steering(model, n_samples=100 if quick else 400, seed=seed, tap=STEER_TAP[arch])
    if out_dir is not None:
        _plots(record, ensure_dir(out_dir))
    return record


def _plots(record: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gencore.plots import save_figure

    if "dae" in record:
        rows = record["dae"]["rows"]
        fig, ax = plt.subplots(1, 3, figsize=(11, 3.2))
        n = [r["n_train"] for r in rows]
        for a, key in zip(ax, ("spikiness", "weight_data_cosine", "test_over_train_error"), strict=True):
            a.plot(n, [r[key] for r in rows], "o-")
            a.set_xscale("log")
            a.set_xlabel("training images")
            a.set_title(key.replace("_", " "))
        save_figure(fig, out / "dae_transition.png")
    if "steer" in record:
        rows = record["steer"]["rows"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.bar([r["target"] - 0.2 for r in rows], [r["fraction_before"] for r in rows], 0.4, label="before")
        ax.bar([r["target"] + 0.2 for r in rows], [r["fraction_after"] for r in rows], 0.4, label="steered")
        ax.set_xlabel("target digit")
        ax.set_ylabel("fraction of samples")
        ax.legend()
        save_figure(fig, out / "steering.png")
