"""3-D molecule generation: joint atom types/charges + coordinates, and conditional conformers.

Unconditional (``task="joint"``): the atom tokens (element, charge) follow gencore's
:class:`~gencore.discrete.MaskedDiffusion` (absorbing state, Sahoo et al. 2024 / Shi et al. 2024) and
the coordinates follow gencore's linear :class:`~gencore.paths.AffineGaussianPath` (flow matching,
Lipman et al. 2023), both at the same time ``t`` per molecule, one network predicting the velocity
and the clean-token logits (the MiDi / SemlaFlow recipe without bonds). The number of atoms is drawn
from the training set's histogram (EDM). Conditional (``task="conformer"``): the molecular graph is
given (tokens clean, bond orders as pair features) and only coordinates are generated.

Hydrogens are atoms of the model by default (``hydrogens="explicit"``, as EDM on QM9). With
``hydrogens="implicit"`` the model sees heavy atoms only (hydrogens as counts, dropped from the geometry,
the "QM9 without hydrogens" setting) and generated molecules get the hydrogen counts that complete each
atom's lowest allowed valence (:func:`genmol.metrics.stability.with_implicit_hydrogens`).

Noise: standard Gaussian on the zero-centroid subspace (``prior="gaussian"``, EDM) or, for conformers, the
harmonic prior of ET-Flow / FlowSite (``prior="harmonic"``: Gaussian with precision ``prior_alpha`` times the
bond graph's Laplacian, :mod:`gencore.paths.harmonic`), whose noise already has the molecule's bonded
shape; its SDE sampler preconditions the injected noise with the same covariance.

Token loss: cross-entropy on the masked positions (the unweighted form of the masked-diffusion
ELBO; the ELBO weight ``1 / (1 - t)`` makes 300-step runs noisy). The coordinate loss and sampler
depend on the SE(3) strategy (:mod:`genmol.generation.strategies`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from gencore.checks import check_int
from gencore.discrete import MaskedDiffusion, sample_categorical
from gencore.errors import ConfigError, InputError
from gencore.paths import AffineGaussianPath, LinearSchedule, harmonic_noise_transform
from gencore.rng import seeded_init
from genmol.chem.batching import BOND_CLASSES, pad
from genmol.chem.molecule import Molecule
from genmol.generation.bonds import molecule_from_geometry
from genmol.generation.strategies import STRATEGIES, check_strategy, coordinate_error, drift, pair, sde_step
from genmol.generation.vocab import AtomVocabulary
from genmol.metrics.stability import with_implicit_hydrogens
from genmol.models import BACKBONES, Backbone
from genmol.se3 import center, centered_noise, random_rotations

TASKS = ("joint", "conformer")
SAMPLERS = ("ode", "sde")
HYDROGENS = ("explicit", "implicit")
PRIORS = ("gaussian", "harmonic")


def check_hydrogens(hydrogens: str) -> None:
    if hydrogens not in HYDROGENS:
        raise ConfigError(f"hydrogens must be one of {', '.join(HYDROGENS)}, got {hydrogens!r}.")


def check_prior(prior: str) -> None:
    if prior not in PRIORS:
        raise ConfigError(f"prior must be one of {', '.join(PRIORS)}, got {prior!r}.")


@dataclass(frozen=True, kw_only=True)
class GenConfig:
    """Model and optimisation settings of one generative run."""

    task: str = "joint"  # joint | conformer
    backbone: str = "egnn"  # egnn | transformer
    strategy: str = "quotient"  # com | kabsch | quotient | quotient-aligned
    hydrogens: str = "explicit"  # explicit (atoms of the model) | implicit (heavy atoms only)
    prior: str = "gaussian"  # gaussian | harmonic (conformers: noise shaped by the bond graph)
    prior_alpha: float = 1.0  # the harmonic prior's spring constant, 1 / angstrom^2
    hidden: int = 64
    layers: int = 3
    steps: int = 300
    batch_size: int = 32
    lr: float = 2e-3
    ema_decay: float = 0.99
    token_weight: float = 0.5  # weight of the token cross-entropy against the coordinate loss
    seed: int = 0
    progress: bool = True

    def validate(self) -> GenConfig:
        if self.task not in TASKS:
            raise ConfigError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}.")
        if self.backbone not in BACKBONES:
            raise ConfigError(f"backbone must be one of {', '.join(BACKBONES)}, got {self.backbone!r}.")
        check_strategy(self.strategy)
        check_hydrogens(self.hydrogens)
        check_prior(self.prior)
        if self.prior == "harmonic" and self.task != "conformer":
            raise ConfigError(
                "the harmonic prior is built from the bonds, which only conformer generation is given: "
                "use it with task conformer."
            )
        if not (math.isfinite(self.prior_alpha) and self.prior_alpha > 0):
            raise ConfigError(f"prior_alpha must be positive, got {self.prior_alpha}.")
        for name in ("hidden", "layers", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be positive, got {self.lr}.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be in [0, 1), got {self.ema_decay}.")
        if not (math.isfinite(self.token_weight) and self.token_weight >= 0):
            raise ConfigError(f"token_weight must be a non-negative number, got {self.token_weight}.")
        return self


def token_features(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """One-hot ``[B, N, K + 1]`` (the last class is the mask token)."""
    return F.one_hot(tokens, vocab_size + 1).float()


def bond_features(bonds: torch.Tensor) -> torch.Tensor:
    return F.one_hot(bonds, len(BOND_CLASSES)).float()


def build_backbone(cfg: GenConfig, vocab_size: int) -> Backbone:
    edge = len(BOND_CLASSES) if cfg.task == "conformer" else 0
    klass = BACKBONES[cfg.backbone]
    return klass(vocab_size + 1, vocab_size, hidden=cfg.hidden, layers=cfg.layers, edge_features=edge)


def model_view(molecules: Sequence[Molecule], hydrogens: str) -> list[Molecule]:
    """The molecules as the model sees them: unchanged (``explicit``) or heavy atoms only (``implicit``)."""
    if hydrogens == "implicit":
        return [m.without_hydrogens() for m in molecules]
    return list(molecules)


def molecule_tensors(molecules: Sequence[Molecule], vocab: AtomVocabulary) -> dict[str, torch.Tensor]:
    """Padded tensors of molecules with coordinates (``tokens, coords, mask, bonds``)."""
    missing = [k for k, m in enumerate(molecules) if m.coordinates is None]
    if missing:
        raise InputError(f"molecules {missing[:5]} have no coordinates; 3-D training needs them.")
    return pad(molecules, vocab.token)


class MoleculeFlowTask:
    """The engine task (``gencore.train``): joint token + coordinate flow, or conformer flow."""

    def __init__(self, cfg: GenConfig, vocab: AtomVocabulary) -> None:
        self.cfg = cfg
        self.vocab = vocab
        with seeded_init(cfg.seed):  # the seed's initial weights, without reseeding the caller's RNG
            self.model = build_backbone(cfg, len(vocab))
        self.path = AffineGaussianPath(LinearSchedule())
        self.tokens = MaskedDiffusion(len(vocab))

    def loss(self, model, batch, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        tokens, coords, mask, bonds = batch
        n = int(mask.sum(1).max())  # trim the padding shared by the whole micro-batch
        tokens, coords, mask, bonds = tokens[:, :n], coords[:, :n], mask[:, :n], bonds[:, :n, :n]
        b, dev = tokens.shape[0], coords.device
        rot = random_rotations(b, generator=generator, device=dev)  # the engine's generator lives on `dev`
        x1 = coords @ rot.transpose(1, 2)
        transform = prior_transform(self.cfg.prior, bonds, mask, self.cfg.prior_alpha)
        x0 = prior_noise(x1.shape, mask, transform, generator=generator, device=dev, dtype=x1.dtype)
        x0, x1 = pair(self.cfg.strategy, x0, x1, mask)
        t = torch.rand(b, generator=generator, device=dev)
        s = self.path.sample(x0, x1, t)
        x_t = s.x_t * mask[..., None]
        cond: dict[str, Any] = {"mask": mask}
        if self.cfg.task == "joint":
            noisy = self.tokens.corrupt(tokens, t, generator=generator)
            noisy = torch.where(mask.bool(), noisy, torch.zeros_like(noisy))
            cond["tokens"] = token_features(noisy, len(self.vocab))
        else:
            noisy = tokens
            cond["tokens"] = token_features(tokens, len(self.vocab))
            cond["edges"] = bond_features(bonds)
        v, logits = model(x_t, t, **cond)
        coord = coordinate_error(self.cfg.strategy, v, s.u_t, x_t, mask).mean()
        metrics = {"coord": coord.detach()}
        loss = coord
        if self.cfg.task == "joint":
            masked = (noisy == self.tokens.mask_index) & mask.bool()
            ce = F.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")
            tok = (ce * masked).sum() / masked.sum().clamp_min(1)
            loss = loss + self.cfg.token_weight * tok
            metrics["token_ce"] = tok.detach()
        return loss, metrics


def prior_transform(cfg_prior: str, bonds: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor | None:
    """``A: [B, N, N]`` of the harmonic prior over each molecule's bond graph (``A A^T`` its covariance over
    the atoms), or ``None`` for the Gaussian prior."""
    if cfg_prior == "gaussian":
        return None
    return harmonic_noise_transform((bonds > 0).to(mask.dtype), mask, alpha=alpha)


def prior_noise(
    shape: tuple[int, int, int],
    mask: torch.Tensor,
    transform: torch.Tensor | None,
    *,
    generator: torch.Generator | None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Centred noise: standard Gaussian (``transform is None``) or ``A eps`` (the harmonic prior)."""
    if transform is None:
        return centered_noise(shape, mask, generator=generator, device=device, dtype=dtype)
    eps = torch.randn(shape, generator=generator, device=device, dtype=dtype)
    return center(transform.to(device=device, dtype=eps.dtype) @ eps, mask.to(device))


def size_histogram(molecules: Sequence[Molecule]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for m in molecules:
        counts[m.num_atoms] = counts.get(m.num_atoms, 0) + 1
    return dict(sorted(counts.items()))


def draw_sizes(histogram: dict[int, int], n: int, generator: torch.Generator) -> list[int]:
    """``n`` molecule sizes drawn from a size histogram ``{atoms: count}`` (EDM's size distribution)."""
    check_int(n, "the number of sizes to draw", low=1)
    sizes_ok = all(isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 1 for k in histogram)
    counts_ok = all(isinstance(c, numbers.Real) and math.isfinite(c) and c >= 0 for c in histogram.values())
    if not (histogram and sizes_ok and counts_ok and sum(histogram.values()) > 0):
        raise InputError(
            "the size histogram must map positive integer sizes to finite non-negative counts with a positive "
            f"total, got {histogram}."
        )
    sizes = torch.tensor(list(histogram), dtype=torch.long)
    probs = torch.tensor(list(histogram.values()), dtype=torch.float)
    return sizes[torch.multinomial(probs / probs.sum(), n, replacement=True, generator=generator)].tolist()


def check_sampler(sampler: str, steps: int, noise_scale: float) -> None:
    """One :class:`ConfigError` sentence unless ``sampler`` is known, ``steps >= 1`` and ``noise_scale`` is finite
    and ``>= 0``."""
    if sampler not in SAMPLERS:
        raise ConfigError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}.")
    check_int(steps, "steps", low=1)
    if not (noise_scale >= 0 and math.isfinite(noise_scale)):
        raise ConfigError(f"the SDE noise scale must be non-negative and finite, got {noise_scale}.")


@torch.no_grad()
def sample_joint(
    model: Backbone,
    vocab: AtomVocabulary,
    sizes: Sequence[int],
    *,
    strategy: str,
    steps: int = 100,
    sampler: str = "ode",
    noise_scale: float = 0.5,
    generator: torch.Generator | None = None,
    batch_size: int = 256,
    hydrogens: str = "explicit",
    progress: bool = False,
) -> list[Molecule]:
    """Generate molecules of the given sizes: tokens by ancestral unmasking, coordinates by Euler (ODE)
    or Euler-Maruyama (SDE; the quotient strategies add their correction term), bonds from distances;
    ``hydrogens="implicit"`` (heavy-atom models) fills in hydrogen counts.

    The noise is drawn from ``generator`` chunk by chunk (``batch_size`` molecules, padded to the chunk's
    largest size), so a seed gives the same molecules only with the same ``sizes`` and ``batch_size``."""
    check_strategy(strategy)
    check_hydrogens(hydrogens)
    check_sampler(sampler, steps, noise_scale)
    for size in sizes:
        check_int(size, "every size (atoms per molecule)", low=1)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size}.")
    from tqdm.auto import tqdm

    process = MaskedDiffusion(len(vocab))
    model.eval()
    dev = next(model.parameters()).device
    out: list[Molecule] = []
    bar = tqdm(total=len(sizes), desc="sample", unit="mol", disable=not progress)
    for start in range(0, len(sizes), batch_size):
        chunk = list(sizes[start : start + batch_size])
        b, n = len(chunk), max(chunk)
        mask = (torch.arange(n)[None, :] < torch.tensor(chunk)[:, None]).float()
        x = centered_noise((b, n, 3), mask, generator=generator).to(dev)
        mask = mask.to(dev)
        tok = torch.full((b, n), process.mask_index, dtype=torch.long, device=dev)
        grid = torch.linspace(0.0, 1.0, steps + 1)
        alphas = process.schedule.alpha(grid).tolist()
        for k in range(steps):
            t_k, dt = float(grid[k]), float(grid[k + 1] - grid[k])
            feats = token_features(torch.where(mask.bool(), tok, torch.zeros_like(tok)), len(vocab))
            v, logits = model(x, torch.full((b,), t_k, device=dev), tokens=feats, mask=mask)
            if sampler == "sde" and k < steps - 1:
                x = sde_step(strategy, v, x, t_k, dt, mask, noise_scale, generator)
            else:
                x = (x + dt * drift(strategy, v, x, mask)) * mask[..., None]
            a_t, a_s = alphas[k], (1.0 if k == steps - 1 else alphas[k + 1])
            p_unmask = (a_s - a_t) / (1.0 - a_t) if a_t < 1.0 else 1.0
            draw = sample_categorical(torch.softmax(logits.float(), -1).cpu(), generator=generator).to(dev)
            unmask = (tok == process.mask_index) & (torch.rand(tok.shape, generator=generator).to(dev) < p_unmask)
            tok = torch.where(unmask, draw, tok)
        x, tok = center(x, mask).cpu(), tok.cpu()
        for i, size in enumerate(chunk):
            pairs = [vocab.pairs[int(j)] for j in tok[i, :size]]
            z = np.asarray([p[0] for p in pairs])
            q = np.asarray([p[1] for p in pairs])
            mol = molecule_from_geometry(z, q, x[i, :size].double().numpy(), name=f"sample_{start + i}")
            out.append(with_implicit_hydrogens(mol) if hydrogens == "implicit" else mol)
        bar.update(b)
    bar.close()
    return out


@torch.no_grad()
def sample_conformers(
    model: Backbone,
    vocab: AtomVocabulary,
    molecules: Sequence[Molecule],
    n_per_molecule: int,
    *,
    strategy: str,
    steps: int = 50,
    sampler: str = "ode",
    noise_scale: float = 0.5,
    generator: torch.Generator | None = None,
    prior: str = "gaussian",
    prior_alpha: float = 1.0,
    progress: bool = False,
) -> list[list[Molecule]]:
    """``n_per_molecule`` generated conformers for each input graph (coordinates replaced), from the
    run's ``prior`` (its SDE preconditions the injected noise with the harmonic prior's covariance)."""
    from tqdm.auto import tqdm

    check_strategy(strategy)
    check_sampler(sampler, steps, noise_scale)
    check_prior(prior)
    check_int(n_per_molecule, "the number of conformers per molecule", low=1)
    model.eval()
    dev = next(model.parameters()).device
    out = []
    for mol in tqdm(molecules, desc="conformers", unit="mol", disable=not progress):
        reps = [mol] * n_per_molecule
        t = pad(reps, vocab.token)
        mask = t["mask"]
        transform = prior_transform(prior, t["bonds"], mask, prior_alpha)
        x = prior_noise(t["coords"].shape, mask, transform, generator=generator).to(dev)
        transform = None if transform is None else transform.to(dev)
        feats, edges = token_features(t["tokens"], len(vocab)).to(dev), bond_features(t["bonds"]).to(dev)
        mask = mask.to(dev)
        grid = torch.linspace(0.0, 1.0, steps + 1)
        for k in range(steps):
            t_k, dt = float(grid[k]), float(grid[k + 1] - grid[k])
            v, _ = model(x, torch.full((len(reps),), t_k, device=dev), tokens=feats, mask=mask, edges=edges)
            if sampler == "sde" and k < steps - 1:
                x = sde_step(strategy, v, x, t_k, dt, mask, noise_scale, generator, transform)
            else:
                x = (x + dt * drift(strategy, v, x, mask)) * mask[..., None]
        out.append([mol.with_coordinates(xi.double().numpy()) for xi in center(x, mask).cpu()])
    return out


def config_dict(cfg: GenConfig) -> dict[str, Any]:
    return asdict(cfg)


__all__ = [
    "HYDROGENS",
    "PRIORS",
    "SAMPLERS",
    "STRATEGIES",
    "TASKS",
    "GenConfig",
    "MoleculeFlowTask",
    "draw_sizes",
    "model_view",
    "molecule_tensors",
    "prior_noise",
    "prior_transform",
    "sample_conformers",
    "sample_joint",
    "size_histogram",
]
