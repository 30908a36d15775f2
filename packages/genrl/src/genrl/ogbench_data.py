"""OGBench manipulation datasets (``cube-single``, ``puzzle-3x3``) generated locally with OGBench's own oracles.

Park, Frans, Eysenbach & Levine, "OGBench: Benchmarking Offline Goal-Conditioned RL", ICLR 2025.

OGBench's published datasets are downloads (which fail here); its package ships the environments and the
scripted oracles that made them, so we rerun its data-collection procedure (``data_gen_scripts/
generate_manipspace.py`` with the settings of ``commands.sh``) and write the result in the genrl layout:

* the environment comes from ``ogbench.make_env_and_datasets(f"{env}-{type}-v0", env_only=True)`` in its
  data-collection mode (``mode="data_collection"``, ``terminate_at_goal=False``): every episode starts from a
  random scene and the oracle keeps solving freshly drawn sub-goals until the episode's time limit
  (``episode_length`` transitions, 1,000 in OGBench);
* behaviour ``oracle-play`` (OGBench ``play``): the non-Markovian plan oracles (``CubePlanOracle``,
  ``ButtonPlanOracle``) with smoothed plan noise ``noise = 0.1``, ``noise_smoothing = 0.5``;
  ``oracle-noisy`` (OGBench ``noisy``): the closed-loop Markov oracles (``min_norm = 0.4``) with per-episode
  Gaussian action noise ``xi ~ U[0, 0.1]`` scaled by ``(1, 1, 1, 3, 10)`` per action dimension and a random
  action with probability 0.1 (cube) or 0.2 (puzzle); the puzzle oracles keep the gripper closed;
* rewards follow OGBench's single-task variants (``*-singletask[-taskN]-v0``): ``ogbench.relabel_utils.
  relabel_dataset`` with the task's fixed goal, evaluated on the state ``s_i`` the action was taken in
  (the singletask envs' ``success_timing='pre'``): ``r_i = (objects at their goal in s_i) - (objects)``, so
  ``-1``/``0`` for cube-single and ``-9 ... 0`` for puzzle-3x3; OGBench's mask ``1 - success(s_i)`` becomes
  ``terminals[i] = success(s_i)`` (no bootstrap from a solved state, as the singletask env terminates there).
  Play episodes continue after such a transition, so a terminal can sit inside a collection episode;
  ``truncations`` marks the collection episode's time limit and the end of collection.

The card's ``env_id`` is the singletask evaluation environment (``cube-single-singletask-task2-v0`` for the
default task), which ``genrl evaluate`` can run once ogbench is installed. OGBench's oracles draw from
NumPy's global generator: it is seeded with ``seed`` for the collection and restored afterwards.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from gencore.errors import ConfigError
from genrl.dataset import OfflineDataset, make_card

ENVS = ("cube-single", "puzzle-3x3")
POLICIES = ("oracle-play", "oracle-noisy")
EPISODE_LENGTH = 1000
# OGBench data_gen_scripts/commands.sh: cube-single-noisy uses --p_random_action=0.1, puzzle-3x3-noisy 0.2.
NOISY_RANDOM_ACTION = {"cube-single": 0.1, "puzzle-3x3": 0.2}
PLAY_NOISE, PLAY_NOISE_SMOOTHING, NOISY_NOISE, MIN_NORM = 0.1, 0.5, 0.1, 0.4
NOISE_SCALE = np.array([1.0, 1.0, 1.0, 3.0, 10.0])  # per action dimension, as in generate_manipspace.py
INSTALL_HINT = "pip install 'genrl[ogbench]'"

_ID = re.compile(
    r"^(?P<env>cube-single|puzzle-3x3)(?:-(?P<kind>play|noisy))?(?:-singletask(?:-task(?P<task>[1-5]))?)?(?:-v0)?$"
)
_OGBENCH_ENV = re.compile(r"^(?:visual-)?(?:cube|puzzle|scene|pointmaze|antmaze|humanoidmaze|antsoccer|powderworld)-")


def is_ogbench_id(env_id: str) -> bool:
    """True for the OGBench dataset names genrl generates (``cube-single``, ``puzzle-3x3-noisy-v0``, ...)."""
    return _ID.match(env_id) is not None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Hide the import-time noise of ogbench's dependencies (no X display for glfw, float32 Box casts)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def import_ogbench():
    """``import ogbench`` or one clear sentence on how to get it."""
    try:
        with _quiet():
            import ogbench
    except ImportError:
        raise ConfigError(
            f"OGBench datasets need the optional ogbench package; install it with {INSTALL_HINT}."
        ) from None
    return ogbench


def ensure_registered(env_id: str) -> bool:
    """Import ogbench when ``env_id`` names one of its environments (and gymnasium lacks it); True for those."""
    import gymnasium as gym

    if not _OGBENCH_ENV.match(env_id):
        return False
    if env_id not in gym.registry:
        import_ogbench()
    return True


def quiet_if(condition: bool) -> contextlib.AbstractContextManager:
    """:func:`_quiet` for OGBench environments (float64 Box bounds warn on every ``make``), else nothing."""
    return _quiet() if condition else contextlib.nullcontext()


def parse_ogbench_id(env_id: str, policy: str | None) -> tuple[str, str, int | None]:
    """``(env, kind, task)`` from an id such as ``cube-single-play-singletask-task3-v0`` and ``--policy``."""
    m = _ID.match(env_id)
    if m is None:
        raise ConfigError(
            f"{env_id!r} is not an OGBench dataset genrl generates; expected cube-single or puzzle-3x3, optionally "
            "with -play/-noisy, -singletask[-taskN] (N = 1..5) and -v0 (e.g. cube-single-play-v0)."
        )
    kind = m["kind"]
    if policy is not None:
        if policy not in POLICIES:
            choices = " or ".join(POLICIES)
            raise ConfigError(f"OGBench datasets use the scripted oracles: --policy {choices}, not {policy!r}.")
        if kind is not None and policy != f"oracle-{kind}":
            raise ConfigError(f"{env_id!r} is a {kind} dataset but --policy is {policy!r}; use oracle-{kind}.")
        kind = policy.removeprefix("oracle-")
    return m["env"], kind or "play", None if m["task"] is None else int(m["task"])


def _oracle(env_name: str, kind: str, env: Any):
    if env_name.startswith("cube"):
        if kind == "play":
            from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle

            return CubePlanOracle(env=env, noise=PLAY_NOISE, noise_smoothing=PLAY_NOISE_SMOOTHING)
        from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle

        return CubeMarkovOracle(env=env, min_norm=MIN_NORM)
    if kind == "play":
        from ogbench.manipspace.oracles.plan.button_plan import ButtonPlanOracle

        return ButtonPlanOracle(
            env=env, noise=PLAY_NOISE, noise_smoothing=PLAY_NOISE_SMOOTHING, gripper_always_closed=True
        )
    from ogbench.manipspace.oracles.markov.button_markov import ButtonMarkovOracle

    return ButtonMarkovOracle(env=env, min_norm=MIN_NORM, gripper_always_closed=True)


@contextlib.contextmanager
def _seeded_global_numpy(seed: int) -> Iterator[None]:
    """OGBench's oracles draw from NumPy's legacy global generator: seed it for the block, then restore it."""
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(seed)  # noqa: NPY002
    try:
        yield
    finally:
        np.random.set_state(state)  # noqa: NPY002


def make_ogbench_dataset(
    env_id: str,
    policy: str | None = None,
    steps: int = 100_000,
    seed: int = 0,
    *,
    episode_length: int = EPISODE_LENGTH,
    progress: bool = True,
) -> tuple[OfflineDataset, dict[str, Any]]:
    """Collect ``steps`` transitions of OGBench oracle data with single-task rewards (see the module docstring)."""
    env_name, kind, task = parse_ogbench_id(env_id, policy)
    if steps < 1:
        raise ConfigError(f"steps must be a positive integer, got {steps}.")
    if episode_length < 1:
        raise ConfigError(f"episode_length must be a positive integer, got {episode_length}.")
    ogbench = import_ogbench()
    from ogbench.relabel_utils import relabel_dataset

    dataset_name = f"{env_name}-{kind}-v0"
    task_part = "singletask" if task is None else f"singletask-task{task}"
    with _quiet():
        env = ogbench.make_env_and_datasets(
            dataset_name,
            env_only=True,
            mode="data_collection",
            terminate_at_goal=False,
            max_episode_steps=episode_length,
        )
        task_env = ogbench.make_env_and_datasets(f"{env_name}-{kind}-{task_part}-v0", env_only=True)
    eval_id = task_env.spec.id
    task_id = int(task_env.unwrapped._reward_task_id)  # OGBench resolves its default task (0) in set_tasks
    noisy = kind == "noisy"
    p_random = NOISY_RANDOM_ACTION[env_name] if noisy else 0.0
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {k: [] for k in ("o", "a", "trunc", "n", "qpos", "buttons")}
    starts = [0]
    with _seeded_global_numpy(seed), _quiet():
        oracle = _oracle(env_name, kind, env)
        ob, info = env.reset(seed=seed)
        oracle.reset(ob, info)
        xi = rng.uniform(0.0, NOISY_NOISE)
        for i in tqdm(range(steps), disable=not progress, desc=f"collect {dataset_name}"):
            if rng.random() < p_random:
                action = rng.uniform(-1.0, 1.0, size=5)
            else:
                action = np.asarray(oracle.select_action(ob, info), dtype=np.float64)
                if noisy:
                    action = action + rng.normal(0.0, xi * NOISE_SCALE)
            action = np.clip(action, -1.0, 1.0).astype(np.float32)
            nxt, _, term, trunc, info = env.step(action)
            if oracle.done:  # the current sub-goal is solved: draw the next one, as OGBench's collection does
                sub_ob, sub_info = env.unwrapped.set_new_target(p_stack=0.0)
                oracle.reset(sub_ob, sub_info)
            for k, v in zip(("o", "a", "trunc", "n"), (ob, action, bool(term or trunc), nxt)):
                rows[k].append(v)
            rows["qpos"].append(info["prev_qpos"])  # the state s_i the action was taken in
            rows["buttons"].append(info.get("prev_button_states", ()))
            ob = nxt
            if term or trunc:
                ob, info = env.reset()
                oracle.reset(ob, info)
                xi = rng.uniform(0.0, NOISY_NOISE)
                if i + 1 < steps:
                    starts.append(i + 1)
        relabelled: dict[str, np.ndarray] = {"qpos": np.asarray(rows["qpos"])}
        if env_name.startswith("puzzle"):
            relabelled["button_states"] = np.asarray(rows["buttons"], dtype=np.int64)
        relabel_dataset(eval_id, task_env, relabelled)
    rows["trunc"][-1] = True  # the collection's end cuts the last episode
    ds = OfflineDataset(
        observations=np.asarray(rows["o"], np.float32),
        actions=np.asarray(rows["a"], np.float32),
        rewards=relabelled["rewards"],
        terminals=relabelled["masks"] == 0.0,
        truncations=np.asarray(rows["trunc"]),
        next_observations=np.asarray(rows["n"], np.float32),
        episode_starts=np.asarray(starts),
    )
    behaviour: dict[str, Any] = {
        "name": f"oracle-{kind}",
        "oracle": type(oracle).__name__,
        "episode_length": episode_length,
        "collection_env": f"{env.spec.id} (mode=data_collection, terminate_at_goal=False)",
        "p_random_action": p_random,
    }
    if noisy:
        behaviour.update(min_norm=MIN_NORM, noise_max=NOISY_NOISE, noise_scale=NOISE_SCALE.tolist())
    else:
        behaviour.update(noise=PLAY_NOISE, noise_smoothing=PLAY_NOISE_SMOOTHING)
    import gymnasium
    import mujoco

    # a terminal does not end a collection episode (success of s_i, the play goes on), so a last episode the
    # collection cut short must be named cut: ending on a terminal it would count as complete
    cut = (ds.n_episodes - 1,) if ds.episode_lengths()[-1] < episode_length else ()
    card = make_card(
        ds,
        cut_episodes=cut,
        env_id=eval_id,
        env_version=task_env.spec.version,
        # the data's episodes end at the collection's time limit, not the evaluation env's (200 for cube-single):
        # the return statistics count the episodes of exactly that length as complete
        max_episode_steps=episode_length,
        eval_max_episode_steps=task_env.spec.max_episode_steps,
        dataset_name=f"{env_name}-{kind}-singletask-task{task_id}-v0",
        policy=behaviour,
        task={
            "id": task_id,
            "name": task_env.unwrapped.task_infos[task_id - 1]["task_name"],
            "reward": "OGBench singletask relabelling on s_i: (objects at goal) - (objects); terminals = all at goal",
        },
        seed=seed,
        action_low=[-1.0] * ds.action_dim,
        action_high=[1.0] * ds.action_dim,
        ogbench_version=_version("ogbench"),
        gymnasium_version=gymnasium.__version__,
        mujoco_version=mujoco.__version__,
    )
    env.close()
    task_env.close()
    return ds, card


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
