"""Minari export/import: minari's own reader and writer are the oracle; bad files are one clear sentence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gencore.errors import ConfigError, InputError, StorageError
from genrl.cli import main
from genrl.dataset import KEYS, load_dataset, save_dataset

h5py = pytest.importorskip("h5py")
from genrl.minari_io import MAIN_FILE, METADATA_FILE, export_minari, import_minari  # noqa: E402


def _assert_same(a, b) -> None:
    for k in KEYS:
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
        assert getattr(a, k).dtype == getattr(b, k).dtype, k


def test_export_loads_in_minari_with_the_same_arrays(tmp_path, pendulum_dataset) -> None:
    minari = pytest.importorskip("minari")
    ds, card = pendulum_dataset
    data = export_minari((ds, card), tmp_path / "m")
    m = minari.MinariDataset(data)
    assert m.total_episodes == 3 and m.total_steps == 450
    assert m.spec.dataset_id == "genrl/pendulum-v1-random-v0" and m.spec.env_spec.id == "Pendulum-v1"
    np.testing.assert_array_equal(m.action_space.low, [-2.0])
    episodes = list(m.iterate_episodes())
    assert [len(ep) for ep in episodes] == [200, 200, 50]
    for (start, stop), ep in zip(ds.episode_bounds(), episodes):
        np.testing.assert_array_equal(ep.observations[:-1], ds.observations[start:stop])
        np.testing.assert_array_equal(ep.observations[1:], ds.next_observations[start:stop])
        np.testing.assert_array_equal(ep.actions, ds.actions[start:stop])
        np.testing.assert_array_equal(ep.rewards, ds.rewards[start:stop])
        np.testing.assert_array_equal(ep.terminations, ds.terminals[start:stop])
        np.testing.assert_array_equal(ep.truncations, ds.truncations[start:stop])


def test_round_trip_keeps_arrays_and_card(tmp_path, toy_dataset) -> None:
    from genrl.dataset import make_card

    card = make_card(toy_dataset, env_id="toy-bimodal", policy={"name": "random"}, seed=7)
    save_dataset(tmp_path / "d", toy_dataset, card)
    assert main(["dataset", "export", str(tmp_path / "d"), "--format", "minari", "--out", str(tmp_path / "m")]) == 0
    assert main(["dataset", "import", str(tmp_path / "m"), "--out", str(tmp_path / "d2")]) == 0
    back, card2 = load_dataset(tmp_path / "d2")
    _assert_same(back, toy_dataset)  # toy episodes end in terminals: Minari's terminations carry them
    assert card2["env_id"] == "toy-bimodal" and card2["policy"] == {"name": "random"} and card2["seed"] == 7
    assert card2["source"]["format"] == "minari" and card2["source"]["episodes_cut_at_end"] == 0
    assert card2["returns"] == card["returns"]
    held = (tmp_path / "d2" / "data.npz").read_bytes()
    assert main(["dataset", "import", str(tmp_path / "m"), "--out", str(tmp_path / "d")]) == 2  # never overwrites
    assert main(["dataset", "import", str(tmp_path / "m"), "--out", str(tmp_path / "d2")]) == 2
    assert (tmp_path / "d2" / "data.npz").read_bytes() == held


def test_import_of_a_dataset_written_by_minari(tmp_path) -> None:
    """Minari's own storage writer (python lists, float64 rewards, infos, an unfinished last episode)."""
    pytest.importorskip("minari")
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    rng = np.random.default_rng(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    storage = MinariStorage.new(tmp_path / "m", observation_space=obs_space, action_space=act_space)
    storage.update_metadata({"dataset_id": "test/made-by-minari-v0", "minari_version": "0.5.4"})
    lengths, buffers = [5, 3, 4], []
    for e, t in enumerate(lengths):
        buffers.append(
            EpisodeBuffer(
                observations=[rng.normal(size=4).astype(np.float32) for _ in range(t + 1)],
                actions=[rng.uniform(-1, 1, 2).astype(np.float32) for _ in range(t)],
                rewards=rng.normal(size=t).tolist(),
                terminations=[False] * (t - 1) + [e == 0],
                truncations=[False] * (t - 1) + [e == 1],  # episode 2 ends with neither flag
                infos={"step": np.arange(t + 1)},
            )
        )
    storage.update_episodes(buffers)
    ds, card = import_minari(tmp_path / "m", tmp_path / "d")
    ref = list(storage.get_episodes(range(3)))
    np.testing.assert_array_equal(ds.episode_starts, [0, 5, 8])
    for (start, stop), ep in zip(ds.episode_bounds(), ref):
        np.testing.assert_array_equal(ds.observations[start:stop], ep["observations"][:-1])
        np.testing.assert_array_equal(ds.next_observations[start:stop], ep["observations"][1:])
        np.testing.assert_allclose(ds.rewards[start:stop], ep["rewards"].astype(np.float32))
    assert ds.terminals.nonzero()[0].tolist() == [4] and ds.truncations.nonzero()[0].tolist() == [7, 11]
    assert card["source"]["episodes_cut_at_end"] == 1 and card["action_low"] == [-1.0, -1.0]
    load_dataset(tmp_path / "d")  # what import wrote is a valid genrl dataset


def test_bad_minari_files_are_one_sentence(tmp_path, toy_dataset, capsys) -> None:
    data = export_minari((toy_dataset, {"env_id": "toy-bimodal"}), tmp_path / "m")
    meta = json.loads((data / METADATA_FILE).read_text())
    (data / METADATA_FILE).write_text(json.dumps({k: v for k, v in meta.items() if k != "total_steps"}))
    with pytest.raises(InputError, match=r"metadata\.json.*'total_steps' must be a non-negative integer"):
        import_minari(tmp_path / "m")
    assert main(["dataset", "import", str(tmp_path / "m"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "total_steps" in err and "Traceback" not in err
    (data / METADATA_FILE).write_text(json.dumps({**meta, "action_space": json.dumps({"type": "Discrete", "n": 3})}))
    with pytest.raises(InputError, match="'action_space' is a Discrete space"):
        import_minari(tmp_path / "m")
    (data / METADATA_FILE).write_text(json.dumps(meta))
    with h5py.File(data / MAIN_FILE, "a") as f:
        del f["episode_1/rewards"]
    with pytest.raises(InputError, match=r"main_data\.hdf5.*episode_1/rewards is missing"):
        import_minari(tmp_path / "m")
    with h5py.File(data / MAIN_FILE, "a") as f:
        f["episode_1"].create_dataset("rewards", data=np.zeros(3, np.float32))
        obs = f["episode_2/observations"][()]
        del f["episode_2/observations"]
        f["episode_2"].create_dataset("observations", data=obs[:-1])
    with pytest.raises(InputError, match=r"episode_2/observations must have shape \[4, \.\.\.\]"):
        import_minari(tmp_path / "m")
    (data / MAIN_FILE).write_bytes(b"not hdf5")
    with pytest.raises(StorageError, match="not a readable HDF5 file"):
        import_minari(tmp_path / "m")
    with pytest.raises(StorageError, match=r"metadata\.json' does not exist"):
        import_minari(tmp_path)


def test_export_refuses_what_minari_cannot_hold(tmp_path, toy_dataset) -> None:
    arrays = {k: v.copy() for k, v in toy_dataset.as_dict().items()}
    from genrl.dataset import OfflineDataset

    arrays["next_observations"][0] += 1.0  # breaks next_observations[0] == observations[1] inside episode 0
    with pytest.raises(InputError, match=r"next_observations\[0\] differs from observations\[1\] inside episode 0"):
        export_minari((OfflineDataset(**arrays), {}), tmp_path / "a")
    with pytest.raises(ConfigError, match="not a Minari id"):
        export_minari((toy_dataset, {}), tmp_path / "b", dataset_id="no version")
    export_minari((toy_dataset, {}), tmp_path / "c")
    with pytest.raises(StorageError, match="already exists"):
        export_minari((toy_dataset, {}), tmp_path / "c")


def test_export_refuses_actions_outside_the_box_it_would_write(tmp_path, toy_dataset) -> None:
    # before: a card without bounds exported the Box [-1, 1] around actions beyond it, which Minari's users and
    # genrl's own import would then clip
    from genrl.dataset import OfflineDataset

    arrays = {k: v.copy() for k, v in toy_dataset.as_dict().items()}
    arrays["actions"][3, 0] = 2.5
    data = OfflineDataset(**arrays)
    with pytest.raises(InputError, match=r"actions in dimension 0 span \[.*, 2\.5\], outside .* \[-1, 1\]"):
        export_minari((data, {}), tmp_path / "a")
    assert not (tmp_path / "a").exists()
    dim = data.action_dim
    export_minari((data, {"action_low": [-3.0] * dim, "action_high": [3.0] * dim}), tmp_path / "b")


def test_missing_h5py_is_one_sentence(monkeypatch, tmp_path, toy_dataset) -> None:
    import builtins

    real_import = builtins.__import__

    def no_h5py(name, *args, **kwargs):
        if name == "h5py":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_h5py)
    with pytest.raises(ConfigError, match=r"install it with pip install 'genrl\[minari\]'"):
        export_minari((toy_dataset, {}), tmp_path / "m")


def test_import_refuses_unbounded_actions_before_writing(tmp_path, capsys, toy_dataset) -> None:
    """An unbounded Box (Minari serialises its bounds as +-Infinity) cannot scale actions: import wrote such a
    card, which every later load then refused; now it is one sentence and nothing is written."""
    data = export_minari((toy_dataset, {"env_id": "toy-bimodal"}), tmp_path / "m")
    meta = json.loads((data / METADATA_FILE).read_text())
    space = {"type": "Box", "dtype": "float32", "shape": [2], "low": [-np.inf, -1.0], "high": [np.inf, 1.0]}
    (data / METADATA_FILE).write_text(json.dumps({**meta, "action_space": json.dumps(space)}))
    with pytest.raises(InputError, match=r"'action_space' has bounds \[-inf, -1\.0\] to \[inf, 1\.0\]"):
        import_minari(tmp_path / "m")
    capsys.readouterr()
    assert main(["dataset", "import", str(tmp_path / "m"), "--out", str(tmp_path / "x")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def _minari_storage(path, lengths, flags, obs_dims=None, env_spec=None):
    """A Minari dataset written by Minari's own storage: episode ``e`` has ``lengths[e]`` steps and ends with
    ``flags[e]`` in ("term", "trunc", None) (None: cut by the end of the recording)."""
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    rng = np.random.default_rng(0)
    obs_dims = obs_dims or [3] * len(lengths)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (obs_dims[0],), np.float32)
    act_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    storage = MinariStorage.new(path, observation_space=obs_space, action_space=act_space, env_spec=env_spec)
    storage.update_metadata({"dataset_id": "test/made-by-minari-v0", "minari_version": "0.5.4"})
    buffers = [
        EpisodeBuffer(
            observations=[rng.normal(size=d).astype(np.float32) for _ in range(t + 1)],
            actions=[rng.uniform(-2, 2, 1).astype(np.float32) for _ in range(t)],
            rewards=rng.normal(size=t).tolist(),
            terminations=[False] * (t - 1) + [flag == "term"],
            truncations=[False] * (t - 1) + [flag == "trunc"],
        )
        for t, flag, d in zip(lengths, flags, obs_dims)
    ]
    storage.update_episodes(buffers)
    return [float(np.sum(b.rewards, dtype=np.float32)) for b in buffers]


def test_import_return_statistics_leave_out_the_episode_the_recording_cut(tmp_path) -> None:
    """With the env_spec's time limit (5 steps), the 3-step episode cut by the end of the recording is no complete
    episode: the card's returns are those of the two 5-step ones (the card averaged all three before)."""
    pytest.importorskip("minari")
    from dataclasses import replace

    import gymnasium as gym

    spec = replace(gym.spec("Pendulum-v1"), max_episode_steps=5)
    returns = _minari_storage(tmp_path / "m", [5, 5, 3], ["trunc", "trunc", None], env_spec=spec)
    _, card = import_minari(tmp_path / "m")
    assert card["max_episode_steps"] == 5 and card["source"]["episodes_cut_at_end"] == 1
    assert card["n_complete_episodes"] == 2
    assert card["returns"]["mean"] == pytest.approx(np.mean(returns[:2]), rel=1e-6)
    assert card["returns"]["max"] == pytest.approx(max(returns[:2]), rel=1e-6)


def test_import_return_statistics_leave_out_a_cut_episode_without_a_time_limit(tmp_path) -> None:
    """Without an env_spec the importer still knows which episode the recording cut (its last step has neither
    flag): its return is no episode return (the card counted 3 complete episodes and averaged the 3-step one in)."""
    pytest.importorskip("minari")
    returns = _minari_storage(tmp_path / "m", [5, 4, 3], ["trunc", "term", None])
    ds, card = import_minari(tmp_path / "m")
    assert card["max_episode_steps"] is None and card["source"]["episodes_cut_at_end"] == 1
    assert ds.truncations[-1] and card["n_complete_episodes"] == 2
    expected = np.asarray(returns[:2], np.float64)
    assert card["returns"] == pytest.approx(
        {"mean": expected.mean(), "std": expected.std(), "min": expected.min(), "max": expected.max()}, rel=1e-6
    )


def test_import_refuses_episodes_of_different_spaces_in_one_sentence(tmp_path) -> None:
    pytest.importorskip("minari")
    _minari_storage(tmp_path / "m", [4, 3], ["trunc", "term"], obs_dims=[3, 2])
    message = r"episode_1 holds observations \[2\] and actions \[1\], but episode_0 holds \[3\] and \[1\]"
    with pytest.raises(InputError, match=message):
        import_minari(tmp_path / "m")


def test_exported_hdf5_read_back_with_h5py(tmp_path, pendulum_dataset) -> None:
    """Minari's layout read directly: episode groups with their id and step count, T + 1 observations (the last the
    episode's final next observation), boolean flags, and both action bounds in the metadata."""
    ds, card = pendulum_dataset
    data = export_minari((ds, card), tmp_path / "m")
    with h5py.File(data / MAIN_FILE, "r") as f:
        assert list(f.keys()) == ["episode_0", "episode_1", "episode_2"]
        for e, (start, stop) in enumerate(ds.episode_bounds()):
            g = f[f"episode_{e}"]
            assert g.attrs["id"] == e and g.attrs["total_steps"] == stop - start
            np.testing.assert_array_equal(g["observations"][-1], ds.next_observations[stop - 1])
            assert g["observations"].shape == (stop - start + 1, 3)
            assert g["terminations"].dtype == bool and g["truncations"].dtype == bool
    meta = json.loads((data / METADATA_FILE).read_text())
    space = json.loads(meta["action_space"])
    assert space["low"] == [-2.0] and space["high"] == [2.0]


def test_import_refuses_non_numeric_observations(tmp_path, toy_dataset) -> None:
    data = export_minari((toy_dataset, {"env_id": "toy-bimodal"}), tmp_path / "m")
    with h5py.File(data / MAIN_FILE, "a") as f:
        del f["episode_1/observations"]
        f["episode_1"].create_dataset("observations", data=np.full((4, 2), b"x"))
    with pytest.raises(InputError, match=r"episode_1/observations must be numeric, got dtype \|S1"):
        import_minari(tmp_path / "m")


def test_import_reads_scalar_actions_and_a_reimport_recomputes_the_card(tmp_path, toy_dataset) -> None:
    """A Box of shape () stores actions as [T]; they become [T, 1]. Exporting an imported dataset again and
    importing it keeps the card's fields but recomputes its sizes, statistics and source (no stale checksum)."""
    from genrl.dataset import make_card

    card = make_card(toy_dataset, env_id="toy-bimodal", policy={"name": "random"}, seed=7)
    data = export_minari((toy_dataset, card), tmp_path / "m")
    with h5py.File(data / MAIN_FILE, "a") as f:
        for e in range(toy_dataset.n_episodes):
            act = f[f"episode_{e}/actions"][()]
            del f[f"episode_{e}/actions"]
            f[f"episode_{e}"].create_dataset("actions", data=act[:, 0])
    ds, _ = import_minari(tmp_path / "m", tmp_path / "d1")
    _assert_same(ds, toy_dataset)
    export_minari(tmp_path / "d1", tmp_path / "m2", dataset_id="test/again-v1")
    ds2, card2 = import_minari(tmp_path / "m2")
    _assert_same(ds2, toy_dataset)
    assert card2["source"]["dataset_id"] == "test/again-v1" and "data_sha256" not in card2
    assert card2["seed"] == 7 and card2["returns"] == card["returns"]
