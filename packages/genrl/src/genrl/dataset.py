"""The genrl offline-dataset layout: compressed arrays plus a JSON dataset card.

A dataset is a folder with two files:

``data.npz`` (``numpy.savez_compressed``, read back with ``allow_pickle=False``), one row per transition:

=====================  ==================  ===========================================================
key                    shape, dtype        meaning
=====================  ==================  ===========================================================
``observations``       ``[N, *obs]`` f32   observation ``s_i`` the action was taken in
``actions``            ``[N, A]`` f32      action ``a_i`` (continuous, in the env's Box bounds)
``rewards``            ``[N]`` f32         reward ``r_i`` received for ``(s_i, a_i)``
``terminals``          ``[N]`` bool        ``s'_i`` is terminal (MDP ended): no bootstrap from it
``truncations``        ``[N]`` bool        episode cut after ``i`` (time limit, end of collection):
                                           ``s'_i`` is *not* terminal, so targets still bootstrap
``next_observations``  ``[N, *obs]`` f32   the observation ``s'_i`` reached after ``a_i``
``episode_starts``     ``[E]`` int64       index of each episode's first transition (0 first,
                                           strictly increasing); episodes are contiguous
=====================  ==================  ===========================================================

Conventions (the ones every agent in genrl uses): the one-step target is
``r_i + discount * (1 - terminals[i]) * Z(s'_i, a')``; the last transition of every episode has
``terminals`` or ``truncations`` set; ``next_observations[i] == observations[i + 1]`` inside an episode.

``card.json`` describes the data: the environment id and version, the gymnasium (and MuJoCo)
versions, the behaviour policy, the seed, sizes, and statistics of the undiscounted episode
returns, plus the SHA-256 of ``data.npz`` so a card cannot silently describe other data.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import atomic_path, ensure_dir, read_json, write_json

DATA_NAME = "data.npz"
CARD_NAME = "card.json"
FORMAT = "genrl-offline-dataset"
FORMAT_VERSION = 1
KEYS = (
    "observations",
    "actions",
    "rewards",
    "terminals",
    "truncations",
    "next_observations",
    "episode_starts",
)


@dataclass
class OfflineDataset:
    """Transitions of whole episodes in the genrl layout (see the module docstring for each array)."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray
    next_observations: np.ndarray
    episode_starts: np.ndarray

    def __post_init__(self) -> None:
        self.observations = np.asarray(self.observations, dtype=np.float32)
        self.actions = np.asarray(self.actions, dtype=np.float32)
        self.rewards = np.asarray(self.rewards, dtype=np.float32)
        self.terminals = np.asarray(self.terminals, dtype=bool)
        self.truncations = np.asarray(self.truncations, dtype=bool)
        self.next_observations = np.asarray(self.next_observations, dtype=np.float32)
        self.episode_starts = np.asarray(self.episode_starts, dtype=np.int64)
        validate_arrays(self.as_dict(), where="dataset")

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_episodes(self) -> int:
        return int(self.episode_starts.shape[0])

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.observations.shape[1:]))

    @property
    def action_dim(self) -> int:
        return int(self.actions.shape[1])

    def as_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in KEYS}

    def episode_bounds(self) -> list[tuple[int, int]]:
        """``[(start, stop), ...]`` half-open index ranges of the episodes."""
        stops = [*self.episode_starts[1:].tolist(), len(self)]
        return list(zip(self.episode_starts.tolist(), stops))

    def episode_returns(
        self,
        complete_only: bool = True,
        time_limit: int | None = None,
        first_episode_cut: bool = False,
        cut_episodes: tuple[int, ...] = (),
    ) -> np.ndarray:
        """Undiscounted return of each episode.

        ``complete_only`` keeps the episodes that ended on their own: by a terminal, or, given the environment's
        ``time_limit``, by a truncation after exactly that many steps (a collection's end is flagged as a
        truncation too, so that learners bootstrap through it, but it cuts its episode short); without a
        ``time_limit`` any flagged end counts. ``first_episode_cut`` says that the data begins part-way through
        its first episode (a window of a longer recording, such as the end of a replay buffer), which is then
        left out as well, and so are the episodes indexed by ``cut_episodes`` (known to be cut by the end of a
        recording, such as Minari episodes whose last step has neither flag).
        """
        cut = set(cut_episodes)
        out = []
        for e, (start, stop) in enumerate(self.episode_bounds()):
            ended = self.terminals[stop - 1] or (
                self.truncations[stop - 1] and (time_limit is None or stop - start == time_limit)
            )
            if complete_only and (not ended or (e == 0 and first_episode_cut) or e in cut):
                continue
            out.append(float(self.rewards[start:stop].sum()))
        return np.asarray(out, dtype=np.float64)

    def episode_lengths(self) -> np.ndarray:
        return np.diff(np.append(self.episode_starts, len(self)))


def concatenate(*parts: OfflineDataset) -> OfflineDataset:
    """The transitions of ``parts`` one after another, episode boundaries kept (D4RL's medium-expert layout).

    Each part must end its last episode (terminal or truncated), so no episode runs across a seam.
    """
    if not parts:
        raise ConfigError("concatenate needs at least one dataset.")
    for i, p in enumerate(parts[:-1]):
        if not (p.terminals[-1] or p.truncations[-1]):
            raise ConfigError(f"dataset part {i} does not end its last episode; it cannot be followed by another.")
    offsets = np.cumsum([0] + [len(p) for p in parts[:-1]])
    joined = {k: np.concatenate([getattr(p, k) for p in parts]) for k in KEYS if k != "episode_starts"}
    starts = np.concatenate([p.episode_starts + off for p, off in zip(parts, offsets)])
    return OfflineDataset(**joined, episode_starts=starts)


def validate_arrays(arrays: dict[str, np.ndarray], where: str) -> None:
    """Check keys, shapes, dtypes and episode boundaries; raise :class:`InputError` naming ``where`` and the key."""
    missing = [k for k in KEYS if k not in arrays]
    if missing:
        raise InputError(
            f"{where} is missing the key(s) {', '.join(missing)}; a genrl dataset needs {', '.join(KEYS)}."
        )
    obs, act = arrays["observations"], arrays["actions"]
    if obs.ndim < 2:
        raise InputError(f"{where}: 'observations' must have shape [N, obs_dim...], got {obs.shape}.")
    n = obs.shape[0]
    if n == 0:
        raise InputError(f"{where}: the dataset holds no transitions.")
    if act.ndim != 2 or act.shape[0] != n:
        raise InputError(f"{where}: 'actions' must have shape [{n}, action_dim], got {act.shape}.")
    for key in ("rewards", "terminals", "truncations"):
        if arrays[key].shape != (n,):
            raise InputError(f"{where}: '{key}' must have shape [{n}], got {arrays[key].shape}.")
    if arrays["next_observations"].shape != obs.shape:
        raise InputError(
            f"{where}: 'next_observations' must have the shape of 'observations' {obs.shape}, "
            f"got {arrays['next_observations'].shape}."
        )
    for key in ("terminals", "truncations"):
        if arrays[key].dtype != np.bool_:
            raise InputError(f"{where}: '{key}' must be boolean, got dtype {arrays[key].dtype}.")
    for key in ("observations", "actions", "rewards", "next_observations"):
        if not np.issubdtype(arrays[key].dtype, np.floating):
            raise InputError(f"{where}: '{key}' must be floating point, got dtype {arrays[key].dtype}.")
        if not np.isfinite(arrays[key]).all():
            raise InputError(f"{where}: '{key}' holds NaN or infinite values.")
    starts = arrays["episode_starts"]
    if starts.ndim != 1 or starts.shape[0] == 0 or not np.issubdtype(starts.dtype, np.integer):
        raise InputError(
            f"{where}: 'episode_starts' must be a non-empty 1-D integer array, got {starts.dtype} {starts.shape}."
        )
    starts = starts.astype(np.int64)  # unsigned indices would wrap in the differences and stop indexing below
    if starts[0] != 0 or (np.diff(starts) <= 0).any() or starts[-1] >= n:
        raise InputError(
            f"{where}: 'episode_starts' must start at 0 and increase strictly below {n} (one index per episode)."
        )
    ends = np.append(starts[1:], n) - 1
    done = arrays["terminals"] | arrays["truncations"]
    inner = ends[:-1]
    if not done[inner].all():
        bad = int(inner[~done[inner]][0])
        raise InputError(
            f"{where}: transition {bad} ends an episode but has neither 'terminals' nor 'truncations' set."
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


STATS = ("mean", "std", "min", "max")


def _stats(x: np.ndarray) -> dict[str, float] | None:
    if x.size == 0:
        return None
    return {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()), "max": float(x.max())}


def make_card(ds: OfflineDataset, *, cut_episodes: tuple[int, ...] = (), **fields: Any) -> dict[str, Any]:
    """The dataset card: ``fields`` (env_id, env_version, policy, seed, ...) plus sizes and return statistics
    (of the complete episodes; ``max_episode_steps`` and ``first_episode_cut`` among ``fields``, and the
    ``cut_episodes`` indices, say which those are, see :meth:`OfflineDataset.episode_returns`)."""
    from genrl import __version__

    returns = ds.episode_returns(
        time_limit=fields.get("max_episode_steps"),
        first_episode_cut=bool(fields.get("first_episode_cut")),
        cut_episodes=cut_episodes,
    )
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **fields,
        "n_transitions": len(ds),
        "n_episodes": ds.n_episodes,
        "n_complete_episodes": int(returns.size),
        "observation_shape": list(ds.observations.shape[1:]),
        "action_dim": ds.action_dim,
        "returns": _stats(returns),
        "episode_length": _stats(ds.episode_lengths().astype(np.float64)),
        "reward": _stats(ds.rewards.astype(np.float64)),
        "terminal_fraction": float(ds.terminals.mean()),
        "conventions": (
            "rewards[i] follows actions[i] in observations[i]; terminals[i]: next_observations[i] is terminal "
            "(no bootstrap); truncations[i]: episode cut (time limit or end of collection), bootstrap as usual"
        ),
        "created_by": f"genrl {__version__}",
    }


def save_dataset(directory: str | os.PathLike, ds: OfflineDataset, card: dict[str, Any]) -> Path:
    """Write ``data.npz`` and ``card.json`` (with the data's SHA-256) atomically into ``directory``."""
    d = ensure_dir(directory)
    with atomic_path(d / DATA_NAME) as tmp:
        with tmp.open("wb") as fh:
            np.savez_compressed(fh, **ds.as_dict())
    write_json(d / CARD_NAME, {**card, "data_sha256": _sha256(d / DATA_NAME)})
    return d


def load_dataset(directory: str | os.PathLike, verify: bool = True) -> tuple[OfflineDataset, dict[str, Any]]:
    """Read a dataset folder back; every problem is one :class:`InputError`/:class:`StorageError` sentence."""
    d = Path(directory)
    data_path = d / DATA_NAME
    if not d.is_dir():
        raise StorageError(f"dataset folder {str(d)!r} does not exist.")
    if not data_path.is_file():
        raise StorageError(
            f"{str(data_path)!r} does not exist; a genrl dataset folder holds {DATA_NAME} and {CARD_NAME}."
        )
    card = read_json(d / CARD_NAME) if (d / CARD_NAME).is_file() else None
    if card is None:
        raise StorageError(
            f"{str(d / CARD_NAME)!r} does not exist; every genrl dataset carries a card ({DATA_NAME} without it is "
            "what an interrupted write leaves: remove the folder and make or import the data set again)."
        )
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise InputError(f"{str(d / CARD_NAME)!r} is not a genrl dataset card (expected format {FORMAT!r}).")
    if verify and card.get("data_sha256") not in (None, _sha256(data_path)):
        raise InputError(f"{str(data_path)!r} does not match the SHA-256 recorded in its card; the file was changed.")
    arrays = read_npz(data_path)
    validate_arrays(arrays, where=str(data_path))
    ds = OfflineDataset(**{k: arrays[k] for k in KEYS})
    check_card(card, ds, where=str(d / CARD_NAME))
    return ds, card


def check_card(card: dict[str, Any], ds: OfflineDataset, where: str) -> None:
    """Check the card fields that commands and agents read: the sizes must be the data's, the statistics
    objects (or null), the action bounds ``action_dim`` finite numbers with ``low < high``; one
    :class:`InputError` sentence naming ``where`` and the field."""
    expected = {
        "n_transitions": len(ds),
        "n_episodes": ds.n_episodes,
        "observation_shape": list(ds.observations.shape[1:]),
        "action_dim": ds.action_dim,
    }
    for key, value in expected.items():
        if card.get(key) != value:
            raise InputError(f"{where}: field {key!r} is {card.get(key)!r}, but {DATA_NAME} holds {value!r}.")
    for key in ("n_complete_episodes", "terminal_fraction"):
        value = card.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise InputError(f"{where}: field {key!r} must be a number, got {value!r}.")
    for key in ("returns", "episode_length", "reward"):
        value = card.get(key)
        if value is not None and not (
            isinstance(value, dict)
            and all(isinstance(value.get(s), (int, float)) and not isinstance(value.get(s), bool) for s in STATS)
        ):
            raise InputError(f"{where}: field {key!r} must be null or an object of {', '.join(STATS)}, got {value!r}.")
    if card.get("env_id") is not None and not isinstance(card["env_id"], str):
        raise InputError(f"{where}: field 'env_id' must be a string or null, got {card['env_id']!r}.")
    bounds = {}
    for key in ("action_low", "action_high"):
        value = card.get(key)
        if value is None:
            continue
        ok = isinstance(value, list) and len(value) == ds.action_dim
        ok = ok and all(isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) for x in value)
        if not ok:
            raise InputError(
                f"{where}: field {key!r} must be a list of {ds.action_dim} finite numbers (one per action "
                f"dimension), got {value!r}."
            )
        bounds[key] = np.asarray(value, np.float64)
    if len(bounds) == 2 and not (bounds["action_low"] < bounds["action_high"]).all():
        raise InputError(f"{where}: field 'action_low' must be below 'action_high' in every action dimension.")


def card_action_bounds(card: dict[str, Any], action_dim: int) -> tuple[list[float], list[float]]:
    """The card's ``action_low`` and ``action_high``, each ``[-1] * action_dim`` / ``[1] * action_dim`` where the
    card has none (the convention of agents and exports alike)."""
    low = card.get("action_low") or [-1.0] * action_dim
    high = card.get("action_high") or [1.0] * action_dim
    return [float(x) for x in low], [float(x) for x in high]


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Load every array of an ``.npz`` without pickle; a broken or pickled file is a clear error."""
    p = Path(path)
    if not zipfile.is_zipfile(p):
        raise StorageError(f"{str(p)!r} is not a readable .npz file (not a zip archive).")
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(p, allow_pickle=False) as npz:
            for k in npz.files:
                try:
                    arrays[k] = npz[k]
                except ValueError as exc:
                    if "pickle" not in str(exc):  # a broken .npy header
                        raise StorageError(f"{str(p)!r}: member {k!r} is not a readable NumPy array ({exc}).") from exc
                    raise InputError(
                        f"{str(p)!r}: {k!r} is an array that needs pickle to load, which genrl refuses ({exc})."
                    ) from exc
                if not isinstance(arrays[k], np.ndarray):  # np.load hands back a member without the .npy header raw
                    raise InputError(f"{str(p)!r}: member {k!r} is not a NumPy .npy array.")
    except StorageError:
        raise
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, io.UnsupportedOperation) as exc:
        raise StorageError(f"{str(p)!r} is not a readable .npz file ({exc}).") from exc
    return arrays
