"""OGBench oracle datasets: layout, episode boundaries and single-task rewards against the task's success signal.

The rewards are checked against the observations themselves (cube position / button one-hots decoded from
``observations[i]``) and the task's goal from OGBench's task table, not against the relabelling code path.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gencore.errors import ConfigError
from genrl.dataset import load_dataset, save_dataset
from genrl.ogbench_data import parse_ogbench_id

STEPS, LENGTH = 250, 100
XYZ_CENTER, XYZ_SCALE = np.array([0.425, 0.0, 0.0]), 10.0  # OGBench's observation scaling of positions
PROPRIO = 19  # joint pos/vel (12), effector pos (3), yaw cos/sin (2), gripper opening and contact (2)


def test_ids_and_policies() -> None:
    assert parse_ogbench_id("cube-single", None) == ("cube-single", "play", None)
    assert parse_ogbench_id("puzzle-3x3-noisy-singletask-task3-v0", None) == ("puzzle-3x3", "noisy", 3)
    assert parse_ogbench_id("cube-single", "oracle-noisy") == ("cube-single", "noisy", None)
    with pytest.raises(ConfigError, match="is a play dataset but --policy is 'oracle-noisy'"):
        parse_ogbench_id("cube-single-play-v0", "oracle-noisy")
    with pytest.raises(ConfigError, match="scripted oracles"):
        parse_ogbench_id("cube-single", "random")


@pytest.fixture(scope="module")
def ogbench():
    return pytest.importorskip("ogbench")


def _make(env_id: str):
    from genrl.generate import make_dataset

    return make_dataset(env_id, None, STEPS, seed=1, episode_length=LENGTH, progress=False)


def _task(ogbench, card: dict) -> dict:
    with warnings.catch_warnings():  # ogbench's float64 Box bounds
        warnings.simplefilter("ignore")
        env = ogbench.make_env_and_datasets(card["dataset_name"], env_only=True)
    return env.unwrapped.task_infos[card["task"]["id"] - 1]


def _check_layout(ds, card, name: str, obs_dim: int) -> None:
    assert ds.observations.shape == (STEPS, obs_dim) and ds.actions.shape == (STEPS, 5)
    assert (np.abs(ds.actions) <= 1.0).all()
    np.testing.assert_array_equal(ds.episode_starts, [0, 100, 200])
    assert ds.truncations.nonzero()[0].tolist() == [99, 199, 249]  # time limit twice, then end of collection
    for start, stop in ds.episode_bounds():
        np.testing.assert_array_equal(ds.next_observations[start : stop - 1], ds.observations[start + 1 : stop])
    assert card["policy"]["name"] == name and card["policy"]["episode_length"] == LENGTH
    # the two episodes that reached the collection's time limit are complete, the one the collection cut is not
    # (the evaluation env's own limit, 200 for cube-single, would have left every collection episode out)
    assert card["max_episode_steps"] == LENGTH and card["n_complete_episodes"] == 2
    expected = [float(ds.rewards[s : s + LENGTH].sum(dtype=np.float64)) for s in (0, LENGTH)]
    assert card["returns"]["mean"] == pytest.approx(np.mean(expected))
    assert card["env_version"] == 0 and card["ogbench_version"] and card["seed"] == 1


def test_puzzle_rewards_count_buttons_at_the_goal(tmp_path, ogbench) -> None:
    ds, card = _make("puzzle-3x3")
    _check_layout(ds, card, "oracle-play", PROPRIO + 9 * 4)
    assert card["env_id"] == "puzzle-3x3-singletask-v0"
    assert card["dataset_name"] == f"puzzle-3x3-play-singletask-task{card['task']['id']}-v0"
    goal = _task(ogbench, card)["goal_button_states"]
    onehots = ds.observations[:, PROPRIO:].reshape(STEPS, 9, 4)[:, :, :2]
    states = onehots.argmax(-1)
    np.testing.assert_array_equal(onehots.sum(-1), 1.0)
    expected = (states == goal).sum(1) - 9.0
    np.testing.assert_array_equal(ds.rewards, expected)
    np.testing.assert_array_equal(ds.terminals, expected == 0.0)
    assert np.unique(ds.rewards).size > 1  # the oracle pressed buttons: the check above is not vacuous
    save_dataset(tmp_path / "p", ds, card)
    back, card2 = load_dataset(tmp_path / "p")
    np.testing.assert_array_equal(back.rewards, ds.rewards)
    assert card2["task"] == card["task"]


def test_cube_rewards_follow_the_cube_distance_to_the_goal(ogbench) -> None:
    ds, card = _make("cube-single-noisy-singletask-task2-v0")
    _check_layout(ds, card, "oracle-noisy", PROPRIO + 9)
    assert card["env_id"] == "cube-single-singletask-task2-v0" and card["policy"]["p_random_action"] == 0.1
    goal = _task(ogbench, card)["goal_xyzs"][0]
    cube = ds.observations[:, PROPRIO : PROPRIO + 3] / XYZ_SCALE + XYZ_CENTER
    success = np.linalg.norm(cube - goal, axis=1) <= 0.04
    np.testing.assert_array_equal(ds.rewards, success - 1.0)
    np.testing.assert_array_equal(ds.terminals, success)
    moved = np.linalg.norm(np.diff(cube, axis=0), axis=1).max()
    assert moved > 0.01  # the oracle moved the cube


def test_missing_ogbench_is_one_sentence(monkeypatch, tmp_path, capsys) -> None:
    import builtins

    from genrl.cli import main

    real_import = builtins.__import__

    def no_ogbench(name, *args, **kwargs):
        if name == "ogbench" or name.startswith("ogbench."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ogbench)
    assert main(["dataset", "make", "--env", "cube-single", "--steps", "10", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'genrl[ogbench]'" in err
