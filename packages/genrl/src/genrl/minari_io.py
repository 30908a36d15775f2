"""Minari-compatible export and import of genrl datasets (Minari's HDF5 storage, written and read with h5py).

Minari (Farama Foundation, https://minari.farama.org) keeps a dataset in a folder ``data/`` holding

* ``main_data.hdf5``: one group ``episode_{i}`` per episode (attributes ``id`` and ``total_steps``) with the
  datasets ``observations`` ``[T + 1, *obs]`` (the reset observation, then one per step),
  ``actions`` ``[T, A]``, ``rewards`` ``[T]``, ``terminations`` ``[T]`` and ``truncations`` ``[T]`` (bool),
  and optionally an ``infos`` group;
* ``metadata.json``: ``dataset_id`` (``namespace/name-vN``), ``total_episodes``, ``total_steps``,
  ``data_format`` (``"hdf5"``), ``observation_space`` / ``action_space`` (Minari's JSON serialisation of
  gymnasium spaces), ``env_spec`` (gymnasium ``EnvSpec.to_json()``, optional), ``algorithm_name``,
  ``description``, ``minari_version``, ``dataset_size`` (MB).

This is the layout of ``minari/dataset/_storages/hdf5_storage.py`` and ``minari/dataset/minari_storage.py``
(Minari 0.5.x). A local Minari dataset lives at ``$MINARI_DATASETS_PATH/<dataset_id>/data/``, so
``export_minari(..., out)`` writes ``out/data/``; ``import_minari`` accepts either folder.

Mapping to the genrl layout: episode ``e`` with ``T`` steps gives transitions ``observations[:-1]``,
``next_observations = observations[1:]``, ``terminals = terminations``, ``truncations`` as stored; an episode
whose last step has neither flag (cut by the end of a recording) gets ``truncations[-1] = True`` on import,
and the card counts them; the return statistics leave them out (with or without ``env_spec``'s
``max_episode_steps``). Export needs ``next_observations[i] == observations[i + 1]`` inside each episode
(always true for data genrl generates). The genrl card travels in ``metadata.json`` under ``genrl_card``, so a
round trip keeps env id, behaviour policy and seed. Only flat ``Box`` observations and actions are read.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import atomic_path, ensure_dir, read_json, write_json
from genrl.agents.base import EnvSpec
from genrl.dataset import (
    FORMAT,
    OfflineDataset,
    card_action_bounds,
    check_card,
    load_dataset,
    make_card,
    save_dataset,
    validate_arrays,
)
from genrl.training import check_action_bounds

MAIN_FILE = "main_data.hdf5"
METADATA_FILE = "metadata.json"
MINARI_VERSION = "0.5.4"  # the storage layout written here, checked against minari 0.5.4's reader
EPISODE_KEYS = ("observations", "actions", "rewards", "terminations", "truncations")
_DATASET_ID = re.compile(r"(?:[-\w][-\w/]*[-\w]+/)?[-\w]+?-v\d+")  # Minari's DATASET_ID_RE, version required
_COMPUTED = {
    "format",
    "format_version",
    "n_transitions",
    "n_episodes",
    "n_complete_episodes",
    "observation_shape",
    "action_dim",
    "returns",
    "episode_length",
    "reward",
    "terminal_fraction",
    "conventions",
    "created_by",
    "data_sha256",
    "source",
}


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ConfigError("Minari export and import need h5py; install it with pip install 'genrl[minari]'.") from None
    return h5py


def default_dataset_id(card: dict[str, Any]) -> str:
    """``genrl/<env id>-<policy>-v0``, lower case, in Minari's id grammar."""

    def slug(x: Any) -> str:
        return re.sub(r"[^-\w]+", "-", str(x)).strip("-").lower() or "data"

    return f"genrl/{slug(card.get('env_id') or 'dataset')}-{slug((card.get('policy') or {}).get('name', 'data'))}-v0"


def _box(shape: list[int], low: Any, high: Any) -> str:
    return json.dumps({"type": "Box", "dtype": "float32", "shape": shape, "low": low, "high": high})


def _env_spec_json(env_id: str | None) -> str | None:
    if not env_id:
        return None
    import gymnasium as gym

    from genrl.ogbench_data import ensure_registered

    try:
        ensure_registered(env_id)
        return gym.spec(env_id).to_json()
    except (ConfigError, gym.error.Error, TypeError, ValueError):
        return None


def export_minari(
    source: str | os.PathLike | tuple[OfflineDataset, dict[str, Any]],
    out: str | os.PathLike,
    dataset_id: str | None = None,
) -> Path:
    """Write a genrl dataset (folder or ``(dataset, card)``) as a Minari HDF5 dataset in ``out/data``."""
    h5py = _h5py()
    ds, card = load_dataset(source) if isinstance(source, (str, os.PathLike)) else source
    where = str(source) if isinstance(source, (str, os.PathLike)) else "dataset"
    for e, (start, stop) in enumerate(ds.episode_bounds()):
        same = ds.next_observations[start : stop - 1] == ds.observations[start + 1 : stop]
        if not same.all():
            i = start + int(np.argmin(same.reshape(stop - 1 - start, -1).all(1)))
            raise InputError(
                f"{where}: next_observations[{i}] differs from observations[{i + 1}] inside episode {e}; Minari "
                "stores one observation sequence per episode and cannot hold that."
            )
    # the Box written must hold the data: a card without bounds means [-1, 1], which actions may leave
    check_action_bounds(ds.actions, EnvSpec.from_dataset(ds, card, normalise_obs=False), where)
    dataset_id = dataset_id or default_dataset_id(card)
    if not _DATASET_ID.fullmatch(dataset_id):
        raise ConfigError(
            f"dataset id {dataset_id!r} is not a Minari id; expected (namespace/)name-vN, "
            "e.g. genrl/pendulum-random-v0."
        )

    data = ensure_dir(Path(out) / "data")
    if (data / METADATA_FILE).exists():
        raise StorageError(f"{str(data / METADATA_FILE)!r} already exists; export into a new --out folder.")
    with atomic_path(data / MAIN_FILE) as tmp:
        with h5py.File(tmp, "w", track_order=True) as f:
            for e, (start, stop) in enumerate(ds.episode_bounds()):
                g = f.create_group(f"episode_{e}")
                g.attrs["id"] = e
                g.attrs["total_steps"] = stop - start
                obs = np.concatenate([ds.observations[start:stop], ds.next_observations[stop - 1 : stop]])
                arrays = (obs, ds.actions[start:stop], ds.rewards[start:stop])
                for key, arr in zip(("observations", "actions", "rewards"), arrays):
                    g.create_dataset(key, data=arr, compression="gzip")
                g.create_dataset("terminations", data=ds.terminals[start:stop])
                g.create_dataset("truncations", data=ds.truncations[start:stop])
    obs_shape = list(ds.observations.shape[1:])
    inf = np.full(obs_shape, np.inf).tolist()
    low, high = card_action_bounds(card, ds.action_dim)
    policy = card.get("policy") or {}
    metadata: dict[str, Any] = {
        "dataset_id": dataset_id,
        "total_episodes": ds.n_episodes,
        "total_steps": len(ds),
        "data_format": "hdf5",
        "observation_space": _box(obs_shape, (-np.asarray(inf)).tolist(), inf),
        "action_space": _box([ds.action_dim], low, high),
        "algorithm_name": str(policy.get("name", "unknown")),
        "description": (
            f"genrl dataset of {card.get('env_id')} with behaviour {json.dumps(policy)}, seed {card.get('seed')}; "
            "exported by genrl (rewards[i] follows actions[i] in observations[i])."
        ),
        "minari_version": MINARI_VERSION,
        "dataset_size": round((data / MAIN_FILE).stat().st_size / 1e6, 1),
        "genrl_card": card,
    }
    spec = _env_spec_json(card.get("env_id"))
    if spec is not None:
        metadata["env_spec"] = spec
    write_json(data / METADATA_FILE, metadata)
    return data


def _minari_folder(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise StorageError(f"Minari dataset folder {str(p)!r} does not exist.")
    if (p / "data" / METADATA_FILE).is_file():
        return p / "data"
    if not (p / METADATA_FILE).is_file():
        raise StorageError(
            f"{str(p / METADATA_FILE)!r} does not exist; a Minari dataset folder holds {METADATA_FILE} and {MAIN_FILE} "
            "(directly or under data/)."
        )
    return p


def _space(meta: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    raw = meta.get(key)
    if raw is None:
        raise InputError(f"{where}: field {key!r} is missing; genrl needs the dataset's Box {key.split('_')[0]} space.")
    try:
        space = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: field {key!r} is not a serialised gymnasium space ({exc}).") from None
    if not isinstance(space, dict) or space.get("type") != "Box":
        kind = space.get("type") if isinstance(space, dict) else type(space).__name__
        raise InputError(f"{where}: field {key!r} is a {kind} space; genrl reads Box observations and actions only.")
    return space


def _count(meta: dict[str, Any], key: str, where: str) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(f"{where}: field {key!r} must be a non-negative integer, got {value!r}.")
    return value


def _read_episodes(h5: Path, n: int) -> tuple[dict[str, list[np.ndarray]], list[int]]:
    h5py = _h5py()
    parts: dict[str, list[np.ndarray]] = {k: [] for k in (*EPISODE_KEYS, "next_observations")}
    cut: list[int] = []
    try:
        f = h5py.File(h5, "r")
    except OSError as exc:
        raise StorageError(f"{str(h5)!r} is not a readable HDF5 file ({exc}).") from None
    with f:
        for e in range(n):
            name = f"episode_{e}"
            if name not in f:
                raise InputError(f"{str(h5)!r}: group {name!r} is missing (metadata says {n} episodes).")
            ep = {}
            for key in EPISODE_KEYS:
                node = f[name].get(key)
                if node is None:
                    raise InputError(f"{str(h5)!r}: {name}/{key} is missing.")
                if not isinstance(node, h5py.Dataset):
                    raise InputError(
                        f"{str(h5)!r}: {name}/{key} is a group (a Dict or Tuple space); genrl reads flat Box data only."
                    )
                ep[key] = node[()]
            t = ep["rewards"].shape[0] if ep["rewards"].ndim == 1 else -1
            if t < 1:
                shape = ep["rewards"].shape
                raise InputError(f"{str(h5)!r}: {name}/rewards must have shape [T] with T >= 1, got {shape}.")
            obs, act = ep["observations"], ep["actions"]
            if obs.ndim < 2 or obs.shape[0] != t + 1:
                raise InputError(f"{str(h5)!r}: {name}/observations must have shape [{t + 1}, ...], got {obs.shape}.")
            if act.ndim == 1 and np.issubdtype(act.dtype, np.floating):
                act = act[:, None]
            if act.ndim != 2 or act.shape[0] != t or not np.issubdtype(act.dtype, np.floating):
                raise InputError(
                    f"{str(h5)!r}: {name}/actions must be floating point of shape [{t}, A], "
                    f"got {act.dtype} {act.shape}."
                )
            if not np.issubdtype(obs.dtype, np.number):
                raise InputError(f"{str(h5)!r}: {name}/observations must be numeric, got dtype {obs.dtype}.")
            first = (parts["observations"] or [obs])[0].shape[1:], (parts["actions"] or [act])[0].shape[1]
            if (obs.shape[1:], act.shape[1]) != first:
                raise InputError(
                    f"{str(h5)!r}: {name} holds observations {list(obs.shape[1:])} and actions [{act.shape[1]}], "
                    f"but episode_0 holds {list(first[0])} and [{first[1]}]; every episode must share the spaces."
                )
            for key in ("terminations", "truncations"):
                if ep[key].shape != (t,):
                    raise InputError(f"{str(h5)!r}: {name}/{key} must have shape [{t}], got {ep[key].shape}.")
            term, trunc = ep["terminations"].astype(bool), ep["truncations"].astype(bool).copy()
            if not (term[-1] or trunc[-1]):
                trunc[-1] = True
                cut.append(e)
            for key, arr in zip(
                (*EPISODE_KEYS, "next_observations"), (obs[:-1], act, ep["rewards"], term, trunc, obs[1:])
            ):
                parts[key].append(arr)
    return parts, cut


def import_minari(
    path: str | os.PathLike, out: str | os.PathLike | None = None
) -> tuple[OfflineDataset, dict[str, Any]]:
    """Read a Minari HDF5 dataset folder into the genrl layout (and save it to ``out`` when given)."""
    data = _minari_folder(path)
    meta_path = data / METADATA_FILE
    where = str(meta_path)
    meta = read_json(meta_path)
    if not isinstance(meta, dict):
        raise InputError(f"{where}: expected a JSON object of Minari metadata.")
    if meta.get("data_format", "hdf5") != "hdf5":
        raise InputError(f"{where}: field 'data_format' is {meta['data_format']!r}; genrl reads Minari's hdf5 storage.")
    n_episodes, total_steps = _count(meta, "total_episodes", where), _count(meta, "total_steps", where)
    if n_episodes == 0:
        raise InputError(f"{where}: field 'total_episodes' is 0; the dataset holds no episodes.")
    action_space = _space(meta, "action_space", where)
    _space(meta, "observation_space", where)
    h5 = data / MAIN_FILE
    if not h5.is_file():
        raise StorageError(
            f"{str(h5)!r} does not exist; a Minari dataset folder holds {METADATA_FILE} and {MAIN_FILE}."
        )
    parts, cut = _read_episodes(h5, n_episodes)
    lengths = [len(r) for r in parts["rewards"]]
    if sum(lengths) != total_steps:
        raise InputError(f"{where}: field 'total_steps' is {total_steps} but the episodes hold {sum(lengths)} steps.")
    arrays = {
        "observations": np.concatenate(parts["observations"]).astype(np.float32),
        "actions": np.concatenate(parts["actions"]).astype(np.float32),
        "rewards": np.concatenate(parts["rewards"]).astype(np.float32),
        "terminals": np.concatenate(parts["terminations"]),
        "truncations": np.concatenate(parts["truncations"]),
        "next_observations": np.concatenate(parts["next_observations"]).astype(np.float32),
        "episode_starts": np.cumsum([0, *lengths[:-1]]).astype(np.int64),
    }
    validate_arrays(arrays, where=str(h5))
    ds = OfflineDataset(**arrays)
    fields = _card_fields(meta, action_space, where)
    source = {
        "format": "minari",
        "path": str(data),
        "dataset_id": meta.get("dataset_id"),
        "minari_version": meta.get("minari_version"),
        "episodes_cut_at_end": len(cut),
    }
    card = make_card(ds, cut_episodes=tuple(cut), **fields, source=source)
    check_card(card, ds, where)  # what load_dataset would refuse is not written
    if out is not None:
        save_dataset(out, ds, card)
    return ds, card


def _card_fields(meta: dict[str, Any], action_space: dict[str, Any], where: str) -> dict[str, Any]:
    kept = meta.get("genrl_card")
    if isinstance(kept, dict) and kept.get("format") == FORMAT:
        return {k: v for k, v in kept.items() if k not in _COMPUTED}
    env_id, version, time_limit = None, None, None
    if isinstance(meta.get("env_spec"), str):
        try:
            spec = json.loads(meta["env_spec"])
            env_id, time_limit = spec.get("id"), spec.get("max_episode_steps")
        except (json.JSONDecodeError, AttributeError):
            env_id = None
    if isinstance(time_limit, bool) or not isinstance(time_limit, int) or time_limit < 1:
        time_limit = None  # without the env's time limit every flagged episode end counts as complete
    if env_id:
        m = re.search(r"-v(\d+)$", env_id)
        version = int(m.group(1)) if m else None
    try:
        low, high = (
            np.broadcast_to(np.asarray(action_space[k], float), action_space["shape"]).ravel() for k in ("low", "high")
        )
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where}: field 'action_space' lacks a numeric shape, low and high.") from None
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (low < high).all()):
        raise InputError(
            f"{where}: field 'action_space' has bounds {low.tolist()} to {high.tolist()}; genrl scales actions by "
            "the Box bounds and needs finite ones with low < high."
        )
    return {
        "env_id": env_id,
        "env_version": version,
        "max_episode_steps": time_limit,
        "policy": {"name": meta.get("algorithm_name", "unknown")},
        "seed": None,
        "action_low": low.tolist(),
        "action_high": high.tolist(),
        "description": meta.get("description"),
    }
