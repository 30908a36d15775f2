"""Runs: load a data set, train through :mod:`gencore.train`, save and reload a run folder, sample.

A run folder holds ``model/`` (EMA weights as safetensors + config.json), ``run.json`` (settings,
atom vocabulary, size histogram, a fingerprint of the training tensors), ``train_smiles.txt`` (for novelty
and FCD), ``reference.sdf`` (a seeded random sample of up to 1,000 training molecules, for the bond-geometry
distances), and the engine's ``metrics.jsonl`` and ``checkpoints/``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import TensorDataset

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError
from gencore.io import ensure_dir, read_json, require_fields, tensor_fingerprint, write_json, write_text
from gencore.train import TrainConfig, Trainer, holds_settings, launch, run_identity
from genmol.chem.io import ReadReport, read_sdf, write_sdf
from genmol.chem.molecule import Molecule
from genmol.generation.flow import (
    GenConfig,
    MoleculeFlowTask,
    config_dict,
    model_view,
    molecule_tensors,
    size_histogram,
)
from genmol.generation.vocab import AtomVocabulary
from genmol.metrics.chemistry import canonical_smiles
from genmol.models import Backbone

# settings a resumed run may change; every other field must match the checkpoint's (TrainConfig.identity)
RESUMABLE = ("steps", "progress")

REFERENCE_SIZE = 1000


def load_dataset(
    name: str, *, subset: int | None = None, seed: int = 0, progress: bool = True, cache: str | None = None
) -> tuple[list[Molecule], ReadReport]:
    """``"qm9"`` (seeded subset of the qm9pack files) or an SDF path with 3-D coordinates."""
    if name == "qm9":
        from genmol.data.qm9 import qm9_subset

        return qm9_subset(subset, seed=seed, cache=cache, progress=progress)
    if subset is not None and subset < 1:
        raise ConfigError(f"subset must be a positive number of molecules, got {subset}.")
    path = Path(name)
    if path.suffix.lower() != ".sdf":
        raise ConfigError(f"--data must be 'qm9' or an .sdf file with 3-D coordinates, got {name!r}.")
    mols, report = read_sdf(path, on_error="skip")
    flat = [k for k, m in enumerate(mols) if m.coordinates is None]
    if flat:
        first = mols[flat[0]].name or f"molecule {flat[0]}"
        raise InputError(
            f"{str(path)!r}: {len(flat)} of {len(mols)} molecules have no coordinates (the first: {first!r}); "
            "training needs 3-D coordinates (`genmol prepare --conformers N` writes them)."
        )
    if subset is not None:
        order = torch.randperm(len(mols), generator=torch.Generator().manual_seed(seed)).tolist()
        mols = [mols[k] for k in sorted(order[:subset])]
    return mols, report


def reference_sample(molecules: Sequence[Any], seed: int) -> list[Any]:
    """Up to :data:`REFERENCE_SIZE` of ``molecules``, a ``seed``-ed uniform sample kept in data order.

    Not the first ones: data sets come sorted (QM9 by index, roughly by size, fluorinated molecules last), so a
    prefix would bias the bond-geometry distances that ``genmol evaluate --reference RUN`` measures."""
    if len(molecules) <= REFERENCE_SIZE:
        return list(molecules)
    order = torch.randperm(len(molecules), generator=torch.Generator().manual_seed(seed)).tolist()
    return [molecules[k] for k in sorted(order[:REFERENCE_SIZE])]


def data_fingerprint(tensors: dict[str, torch.Tensor], vocab: AtomVocabulary) -> str:
    """SHA-256 of the training tensors and the vocabulary: a resumed or finished run is the same run only on the
    same data (``--data qm9`` names many subsets; an SDF file may have changed)."""
    return tensor_fingerprint(
        *(tensors[k] for k in ("tokens", "coords", "mask", "bonds")), header=repr(vocab.to_list())
    )


def _worker(cfg: GenConfig, vocab_pairs: list, tensors: dict[str, torch.Tensor], train_cfg: TrainConfig) -> dict:
    task = MoleculeFlowTask(cfg, AtomVocabulary(vocab_pairs))
    data = TensorDataset(tensors["tokens"], tensors["coords"], tensors["mask"], tensors["bonds"])
    start = time.perf_counter()
    result = Trainer(train_cfg).fit(task, data)
    if int(os.environ.get("RANK", "0") or 0) == 0 and not result.interrupted:
        result.ema.save_pretrained(Path(train_cfg.out_dir) / "model")
    return {"interrupted": result.interrupted, "seconds": time.perf_counter() - start, "last_loss": result.last_loss}


def train_run(
    cfg: GenConfig,
    molecules: Sequence[Molecule],
    out_dir: str | os.PathLike,
    *,
    nproc: int = 1,
    data_name: str = "",
    **engine: Any,
) -> dict[str, Any]:
    """Train one model on ``molecules`` into ``out_dir`` (see module docstring); returns a summary.
    With ``cfg.hydrogens == "implicit"`` the model, the size histogram and the reference files see the
    heavy atoms only."""
    cfg.validate()
    if len(molecules) < 2:
        raise InputError(f"training needs at least 2 molecules with coordinates, got {len(molecules)}.")
    counted = [k for k, m in enumerate(molecules) if cfg.hydrogens == "explicit" and m.num_hs.any()]
    if counted:  # an explicit-hydrogen model would never see these hydrogens, nor place them when sampling
        first = molecules[counted[0]].name or f"molecule {counted[0]}"
        raise InputError(
            f"{len(counted)} of {len(molecules)} molecules hold hydrogens as counts without coordinates (the first: "
            f"{first!r}); hydrogens 'explicit' needs every hydrogen as an atom in 3-D, so add them or train with "
            "hydrogens 'implicit' (--hydrogens implicit)."
        )
    molecules = model_view(molecules, cfg.hydrogens)
    vocab = AtomVocabulary.from_molecules(molecules)
    tensors = molecule_tensors(molecules, vocab)
    fingerprint = data_fingerprint(tensors, vocab)
    batch = min(cfg.batch_size, len(molecules))
    train_cfg = TrainConfig(
        steps=cfg.steps,
        global_batch_size=batch,
        optimizer="adamw",
        lr=cfg.lr,
        warmup_steps=min(20, cfg.steps // 10),
        schedule="cosine",
        clip_grad_norm=1.0,
        ema_decay=cfg.ema_decay,
        seed=cfg.seed,
        progress=cfg.progress,
        out_dir=str(Path(out_dir)),
        identity=run_identity(cfg, RESUMABLE) | {"data": data_name, "data_sha256": fingerprint},
        **engine,
    ).validate()
    nproc = check_int(nproc, "nproc", low=1)  # engine settings are checked before the run folder is made
    out = ensure_dir(out_dir)
    saved = read_json(out / "run.json") if engine.get("resume") and (out / "run.json").is_file() else {}
    if (
        (out / "model").is_dir()
        and saved.get("interrupted") is False
        and saved.get("data") == data_name
        and saved.get("data_sha256") == fingerprint
        and holds_settings(saved.get("config") or {}, replace(cfg, batch_size=batch))
    ):  # a finished run of these settings: nothing to train
        return {"interrupted": False, "seconds": 0.0, "last_loss": float("nan"), "already_finished": True}
    info = launch(_worker, replace(cfg, batch_size=batch), vocab.to_list(), tensors, train_cfg, nproc=nproc).get(0)
    info = info or {"interrupted": True, "seconds": 0.0, "last_loss": float("nan")}
    smiles = sorted({s for s in (canonical_smiles(m) for m in molecules) if s})
    write_text(out / "train_smiles.txt", "\n".join(smiles) + "\n")
    write_sdf(out / "reference.sdf", reference_sample(molecules, cfg.seed))
    write_json(
        out / "run.json",
        {
            "config": config_dict(replace(cfg, batch_size=batch)),
            "data": data_name,
            "data_sha256": fingerprint,
            "n_train": len(molecules),
            "vocabulary": vocab.to_list(),
            "vocabulary_labels": vocab.labels(),
            "sizes": {str(k): v for k, v in size_histogram(molecules).items()},
            "train_seconds": round(info["seconds"], 2),
            "interrupted": info["interrupted"],
        },
    )
    return info


def load_run(
    run_dir: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[Backbone, GenConfig, AtomVocabulary, dict[int, int]]:
    """Reload the EMA model (on ``device``), settings, vocabulary and size histogram of a run folder."""
    run = Path(run_dir)
    meta_path = run / "run.json"
    if not meta_path.is_file():
        raise InputError(f"{str(run)!r} is not a genmol run folder (no run.json); train one with `genmol train`.")
    meta = read_json(meta_path)
    fields = ("config", "vocabulary", "sizes")
    require_fields(meta, fields, repr(str(meta_path)), "; it was not written by `genmol train`")
    if meta.get("interrupted"):
        raise InputError(f"the run in {str(run)!r} was interrupted; resume it with `genmol train ... --resume auto`.")
    try:
        cfg = GenConfig(**meta["config"])
        vocab = AtomVocabulary([tuple(p) for p in meta["vocabulary"]])
        sizes = {int(k): int(v) for k, v in meta["sizes"].items()}
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise InputError(f"{str(meta_path)!r} has a malformed config, vocabulary or size table ({exc}).") from None
    model = Backbone.from_pretrained(run / "model").to(device)
    return model, cfg, vocab, sizes


def train_smiles(run_dir: str | os.PathLike) -> list[str]:
    path = Path(run_dir) / "train_smiles.txt"
    return [s for s in path.read_text().splitlines() if s] if path.is_file() else []
