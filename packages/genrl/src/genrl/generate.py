"""Generate offline datasets locally: gymnasium classic control and MuJoCo v5, and the toy MDP.

Behaviour policies:

* ``random`` — uniform actions from the env's Box (``action_space.seed(seed)``).
* ``medium`` / ``expert`` — a soft actor-critic (:mod:`genrl.agents.sac`) trained online here for
  ``train_steps`` environment steps (defaults 20,000 and 100,000), then run with its stochastic policy.
  As in D4RL, "medium" is a partially trained policy and "expert" a fully trained one; here the two are
  defined by their training budget, and the card records the budget and the policy's measured return so
  the label never hides what the data is.
* ``medium-replay`` — as in D4RL, the replay buffer of that SAC's training (default budget 20,000): every
  transition it saw on the way to "medium", from the random warm-up (the first ``min(5000, budget / 10)``
  steps) to the last update. ``steps`` takes the last ``steps`` transitions (at most the budget; equal to it,
  the whole buffer), so the first episode may start mid-way (the card's ``first_episode_cut`` then says so and
  its return statistics leave that episode out). Episode ends are read off the buffer: a row ends
  its episode when it terminates or when its next observation is not the next row's observation (a reset);
  the ends that are not terminations are truncations.
* ``medium-expert`` — as in D4RL, medium data followed by expert data, half the transitions each (the medium
  half gets the odd one). Both policies come from one SAC run of ``train_steps`` (default 100,000): "expert"
  is its end and "medium" its snapshot after ``train_steps // 5`` steps (20,000 by default, the ``medium``
  budget). The card records both budgets and both measured returns; the medium half is collected with
  ``seed``, the expert half with ``seed + 1``.

Environment ids: any gymnasium id with Box actions (``Pendulum-v1``, ``MountainCarContinuous-v0``,
``HalfCheetah-v5``, ``Hopper-v5``, ``Walker2d-v5``, ``Ant-v5`` ...), ``toy-bimodal`` for
:class:`genrl.toy_mdp.BimodalChain`, or an OGBench manipulation dataset (``cube-single``, ``puzzle-3x3``,
``cube-single-noisy-v0``, ...) made with OGBench's scripted oracles (:mod:`genrl.ogbench_data`, behaviour
``oracle-play`` / ``oracle-noisy``; needs ``genrl[ogbench]``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from gencore.checks import check_choice, check_int
from gencore.errors import ConfigError
from genrl.dataset import OfflineDataset, concatenate, make_card
from genrl.evaluation import make_env
from genrl.toy_mdp import BimodalChain

POLICIES = ("random", "medium", "medium-replay", "medium-expert", "expert")
DEFAULT_TRAIN_STEPS = {"medium": 20_000, "medium-replay": 20_000, "medium-expert": 100_000, "expert": 100_000}
MEDIUM_EXPERT_RATIO = 5  # medium-expert: the medium snapshot is taken after train_steps // 5 SAC steps
TOY_ENV = "toy-bimodal"


def collect(
    env_id: str, policy: Callable[[np.ndarray], np.ndarray] | None, steps: int, seed: int, progress: bool = True
) -> tuple[OfflineDataset, Any]:
    """Run ``policy`` (None: uniform random) for ``steps`` transitions of whole episodes; the last one is cut."""
    if steps < 1:
        raise ConfigError(f"steps must be a positive integer, got {steps}.")
    check_int(seed, "seed", low=0)  # gymnasium refuses a negative reset seed with a traceback
    env = make_env(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    rows: dict[str, list] = {k: [] for k in ("o", "a", "r", "term", "trunc", "n")}
    starts = [0]
    for i in tqdm(range(steps), disable=not progress, desc=f"collect {env_id}"):
        o = np.asarray(obs, np.float32).ravel()
        a = env.action_space.sample() if policy is None else policy(o)
        nxt, reward, term, trunc, _ = env.step(a)
        for k, v in zip(rows, (o, a, reward, term, trunc, np.asarray(nxt, np.float32).ravel())):
            rows[k].append(v)
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
            if i + 1 < steps:
                starts.append(i + 1)
    rows["trunc"][-1] = rows["trunc"][-1] or not rows["term"][-1]  # the collection's end cuts the last episode
    ds = OfflineDataset(
        observations=np.stack(rows["o"]),
        actions=np.stack(rows["a"]).astype(np.float32),
        rewards=np.asarray(rows["r"]),
        terminals=np.asarray(rows["term"]),
        truncations=np.asarray(rows["trunc"]),
        next_observations=np.stack(rows["n"]),
        episode_starts=np.asarray(starts),
    )
    return ds, env


def _versions() -> dict[str, str]:
    import gymnasium

    out = {"gymnasium_version": gymnasium.__version__}
    try:
        import mujoco

        out["mujoco_version"] = mujoco.__version__
    except ImportError:
        pass
    return out


def train_behaviour_policy(
    env_id: str, train_steps: int, seed: int, progress: bool = True, snapshots: tuple[int, ...] = ()
):
    """A SAC agent trained online from scratch for ``train_steps`` env steps (first 5,000 or 10% random),
    its replay buffer (every transition of the training, in order), and ``{n: copy of the agent after n
    steps}`` for each ``n`` in ``snapshots``."""
    import copy

    from gencore.errors import Interrupted
    from gencore.train import signal_received
    from genrl.agents import EnvSpec, make_agent
    from genrl.training import ReplayBuffer, train_online

    env = make_env(env_id)
    obs_dim = int(np.prod(env.observation_space.shape))
    spec = EnvSpec(
        obs_dim=obs_dim,
        action_dim=int(env.action_space.shape[0]),
        action_low=tuple(float(x) for x in env.action_space.low),
        action_high=tuple(float(x) for x in env.action_space.high),
        env_id=env_id,
    )
    env.close()
    agent = make_agent("sac", spec, {"seed": seed})
    buffer = ReplayBuffer(obs_dim, spec.action_dim, capacity=max(train_steps, 1))
    if any(not 0 < n <= train_steps for n in snapshots):
        raise ConfigError(f"snapshots must lie in [1, train_steps = {train_steps}], got {list(snapshots)}.")
    taken: dict[int, Any] = {}

    def snapshot(n: int) -> None:
        if n in snapshots:
            taken[n] = copy.deepcopy(agent)

    with tempfile.TemporaryDirectory() as tmp:
        train_online(
            agent,
            env_id,
            buffer,
            train_steps,
            tmp,
            seed=seed,
            start_random=min(5000, train_steps // 10),
            progress=progress,
            on_step=snapshot if snapshots else None,
        )
    if signal_received() is not None:  # train_online stopped early: no half-trained behaviour policy
        raise Interrupted("the behaviour policy's training was stopped; no dataset was written", signal_received())
    return agent, buffer, taken


def _stochastic(agent: Any) -> Callable[[np.ndarray], np.ndarray]:
    return lambda o: agent.act(o, deterministic=False)


def _sac_return(agent: Any, env_id: str, seed: int) -> float:
    """The behaviour policy's mean return over 5 stochastic episodes (reset seeds from 10,000 + seed)."""
    from genrl.evaluation import evaluate

    return evaluate(agent, env_id, 5, seed=10_000 + seed, deterministic=False)["return_mean"]


def replay_dataset(buffer: Any, steps: int) -> OfflineDataset:
    """The last ``steps`` transitions of a replay buffer filled in order (never wrapped) as a dataset.

    Within an episode a row's next observation is the next row's observation, exactly (the same array);
    where it is not, the environment was reset, so the row ended its episode: by termination when its
    terminal flag is set, else by truncation. The last row ends the collection (truncated unless terminal).
    """
    if not 0 < steps <= buffer.size:
        raise ConfigError(f"steps must be between 1 and the replay buffer's {buffer.size} transitions, got {steps}.")
    rows = {k: v[buffer.size - steps : buffer.size] for k, v in buffer.data.items()}
    term = rows["terminals"]
    ends = np.ones(steps, bool)
    ends[:-1] = term[:-1] | (rows["next_observations"][:-1] != rows["observations"][1:]).any(1)
    return OfflineDataset(
        observations=rows["observations"],
        actions=rows["actions"],
        rewards=rows["rewards"],
        terminals=term,
        truncations=ends & ~term,
        next_observations=rows["next_observations"],
        episode_starts=np.concatenate([[0], np.flatnonzero(ends[:-1]) + 1]),
    )


def replay_starts_mid_episode(buffer: Any, steps: int) -> bool:
    """Whether :func:`replay_dataset`'s last ``steps`` rows begin part-way through an episode: the row before
    them neither terminated nor was followed by a reset (its next observation is the first row's observation)."""
    first = buffer.size - steps
    if first == 0:
        return False
    d = buffer.data
    return not d["terminals"][first - 1] and bool((d["next_observations"][first - 1] == d["observations"][first]).all())


def make_dataset(
    env_id: str,
    policy: str | None = None,
    steps: int = 10_000,
    seed: int = 0,
    *,
    train_steps: int | None = None,
    episode_length: int | None = None,
    progress: bool = True,
) -> tuple[OfflineDataset, dict[str, Any]]:
    """A dataset and its card (see the module docstring for the policies).

    ``policy=None`` means ``random`` for gymnasium ids and the id's oracle (``oracle-play`` unless the id says
    ``noisy``) for OGBench ids; ``episode_length`` (OGBench only, default 1,000) sets the collection episodes.
    """
    from genrl.ogbench_data import EPISODE_LENGTH, is_ogbench_id, make_ogbench_dataset

    check_int(seed, "seed", low=0)  # NumPy and gymnasium refuse a negative seed with a traceback
    if is_ogbench_id(env_id):
        length = EPISODE_LENGTH if episode_length is None else episode_length
        return make_ogbench_dataset(env_id, policy, steps, seed, episode_length=length, progress=progress)
    if episode_length is not None:
        raise ConfigError(f"episode_length applies to OGBench datasets only; {env_id!r} sets its own episode ends.")
    policy = "random" if policy is None else policy
    check_choice(policy, POLICIES, "policy")
    if steps < 1:
        raise ConfigError(f"steps must be a positive integer, got {steps}.")
    if env_id == TOY_ENV:
        if policy != "random":
            raise ConfigError(f"{TOY_ENV} ignores actions; only --policy random makes sense for it.")
        chain = BimodalChain()
        ds = chain.dataset(max(steps // chain.length, 1), seed=seed)
        card = make_card(
            ds,
            env_id=TOY_ENV,
            env_version=None,
            policy={"name": "random"},
            seed=seed,
            toy={"length": chain.length, "sigma": chain.sigma, "discount": chain.discount},
            action_low=[-1.0],
            action_high=[1.0],
        )
        return ds, card
    behaviour: dict[str, Any] = {"name": policy}
    window: dict[str, Any] = {}  # medium-replay: whether the data begins part-way through an episode
    if policy == "random":
        ds, env = collect(env_id, None, steps, seed, progress)
    else:
        budget = train_steps if train_steps is not None else DEFAULT_TRAIN_STEPS[policy]
        if budget < 1:
            raise ConfigError(f"a {policy} policy is a SAC trained first; train_steps must be positive, got {budget}.")
        if policy == "medium-replay" and steps > budget:
            raise ConfigError(
                f"medium-replay data is the SAC's replay buffer: steps ({steps}) cannot exceed its training budget "
                f"(train_steps {budget})."
            )
        medium_at = budget // MEDIUM_EXPERT_RATIO if policy == "medium-expert" else None
        if medium_at == 0:
            raise ConfigError(
                f"medium-expert takes its medium policy after train_steps // {MEDIUM_EXPERT_RATIO} SAC steps; "
                f"train_steps must be at least {MEDIUM_EXPERT_RATIO}, got {budget}."
            )
        if policy == "medium-expert" and steps < 2:
            raise ConfigError(f"medium-expert data needs at least 2 transitions (one per half), got {steps}.")
        agent, replay, snaps = train_behaviour_policy(
            env_id, budget, seed, progress, snapshots=() if medium_at is None else (medium_at,)
        )
        behaviour.update(algorithm="sac", train_steps=budget, eval_return_mean=_sac_return(agent, env_id, seed))
        if policy == "medium-replay":
            ds, env = replay_dataset(replay, steps), make_env(env_id)
            window["first_episode_cut"] = replay_starts_mid_episode(replay, steps)
        elif policy == "medium-expert":
            medium = snaps[medium_at]
            behaviour.update(medium_train_steps=medium_at, medium_eval_return_mean=_sac_return(medium, env_id, seed))
            first, env = collect(env_id, _stochastic(medium), steps - steps // 2, seed, progress)
            env.close()
            second, env = collect(env_id, _stochastic(agent), steps // 2, seed + 1, progress)
            ds = concatenate(first, second)
        else:
            ds, env = collect(env_id, _stochastic(agent), steps, seed, progress)
    spec = env.spec
    card = make_card(
        ds,
        env_id=env_id,
        env_version=None if spec is None else spec.version,
        max_episode_steps=None if spec is None else spec.max_episode_steps,
        policy=behaviour,
        seed=seed,
        **window,
        action_low=env.action_space.low.astype(float).tolist(),
        action_high=env.action_space.high.astype(float).tolist(),
        **_versions(),
    )
    env.close()
    return ds, card
