"""The OGBench collection's card with a stand-in ogbench (the real one is optional): a last episode the collection
cuts short stays out of the return statistics even when its last state solves the task (a terminal inside play)."""

from __future__ import annotations

import sys
import types

import numpy as np

from genrl.ogbench_data import make_ogbench_dataset


class _Env:
    def __init__(self, env_id: str, max_episode_steps: int | None) -> None:
        self.spec = types.SimpleNamespace(id=env_id, version=0, max_episode_steps=max_episode_steps or 200)
        self.unwrapped = types.SimpleNamespace(
            _reward_task_id=2, task_infos=[{"task_name": f"task{i}"} for i in range(1, 6)], set_new_target=None
        )
        self.t, self.state = 0, 0.0

    def _ob(self) -> np.ndarray:
        return np.array([self.state], np.float32)

    def reset(self, seed=None):
        self.t = 0
        return self._ob(), {}

    def step(self, action):
        prev, self.t, self.state = self.state, self.t + 1, self.state + 1.0
        return self._ob(), 0.0, False, self.t >= self.spec.max_episode_steps, {"prev_qpos": np.array([prev])}

    def close(self) -> None:
        pass


class _Oracle:
    done = False

    def __init__(self, env, **kwargs) -> None:
        pass

    def reset(self, ob, info) -> None:
        pass

    def select_action(self, ob, info):
        return np.zeros(5)


def _relabel(env_id, env, dataset) -> None:
    # success (the task's goal reached) in the state of the collection's very last transition only
    success = np.zeros(len(dataset["qpos"]))
    success[-1] = 1.0
    dataset["rewards"], dataset["masks"] = success - 1.0, 1.0 - success


def test_a_cut_last_episode_ending_on_a_terminal_is_not_a_complete_episode(monkeypatch) -> None:
    og = types.ModuleType("ogbench")
    og.make_env_and_datasets = lambda name, env_only, max_episode_steps=None, **kw: _Env(name, max_episode_steps)
    relabel = types.ModuleType("ogbench.relabel_utils")
    relabel.relabel_dataset = _relabel
    plan = types.ModuleType("ogbench.manipspace.oracles.plan.cube_plan")
    plan.CubePlanOracle = _Oracle
    for name, mod in {
        "ogbench": og,
        "ogbench.relabel_utils": relabel,
        "ogbench.manipspace": types.ModuleType("ogbench.manipspace"),
        "ogbench.manipspace.oracles": types.ModuleType("ogbench.manipspace.oracles"),
        "ogbench.manipspace.oracles.plan": types.ModuleType("ogbench.manipspace.oracles.plan"),
        "ogbench.manipspace.oracles.plan.cube_plan": plan,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    ds, card = make_ogbench_dataset("cube-single", steps=5, episode_length=3, progress=False)
    np.testing.assert_array_equal(ds.episode_starts, [0, 3])
    assert ds.terminals.tolist() == [False, False, False, False, True]
    # episode 0 ran to the collection's time limit; episode 1 (two steps) was cut by the end of collection
    assert card["n_complete_episodes"] == 1
    assert card["returns"]["mean"] == float(ds.rewards[:3].sum())
