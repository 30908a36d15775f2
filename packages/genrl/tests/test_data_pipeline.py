"""From data to learner and back: uniform replay sampling over the stored rows only, and observation statistics
computed on the data set and applied unchanged when the agent acts (also after a save and load)."""

from __future__ import annotations

import numpy as np
import torch

from genrl.agents import EnvSpec, load_agent, make_agent
from genrl.dataset import OfflineDataset
from genrl.training import ReplayBuffer


def _buffer(capacity: int, rows: int) -> ReplayBuffer:
    """Row ``i`` holds observation ``[i, -i]``, reward ``10 i``, terminal ``i odd`` and next observation
    ``[i + 0.5, -i]``, so every field of a sampled row tells which row it came from."""
    buf = ReplayBuffer(2, 1, capacity)
    for i in range(rows):
        buf.add(np.array([i, -i], float), np.array([i / rows]), 10.0 * i, i % 2 == 1, np.array([i + 0.5, -i]))
    return buf


def test_sampling_is_uniform_over_the_stored_rows_and_keeps_each_row_together() -> None:
    """A buffer with room for 10 holding 4 rows (offline data plus room for online steps) samples only those 4,
    each with probability 1/4: 4000 draws give counts of 1000 +- 27.4 (binomial sd), checked within 6 sd."""
    buf = _buffer(capacity=10, rows=4)
    batch = buf.sample(4000, torch.Generator().manual_seed(0))
    i = batch["observations"][:, 0].numpy()
    assert set(np.unique(i).tolist()) == {0.0, 1.0, 2.0, 3.0}  # never an empty row of the unused capacity
    counts = np.bincount(i.astype(int), minlength=4)
    assert np.abs(counts - 1000).max() < 6 * np.sqrt(4000 * 0.25 * 0.75)
    np.testing.assert_array_equal(batch["observations"][:, 1].numpy(), -i)
    np.testing.assert_array_equal(batch["next_observations"].numpy(), np.stack([i + 0.5, -i], 1))
    np.testing.assert_array_equal(batch["rewards"].numpy(), 10.0 * i)
    np.testing.assert_array_equal(batch["terminals"].numpy(), i % 2 == 1)
    np.testing.assert_allclose(batch["actions"][:, 0].numpy(), i / 4)
    wrapped = _buffer(capacity=3, rows=5)  # rows 2, 3, 4 survive the wrap
    kept = wrapped.sample(600, torch.Generator().manual_seed(1))["observations"][:, 0].numpy()
    assert set(np.unique(kept).tolist()) == {2.0, 3.0, 4.0}


def test_observation_statistics_come_from_the_data_and_are_applied_when_acting(tmp_path) -> None:
    """Per-dimension mean and (population) std of the data set's observations, a constant dimension floored at
    1e-3; the agent standardises with exactly those numbers in ``act``, before and after save/load."""
    rng = np.random.default_rng(0)
    obs = np.stack([rng.normal(3.0, 2.0, 64), rng.normal(-1.0, 0.5, 64), np.full(64, 7.0)], 1).astype(np.float32)
    n = len(obs)
    ds = OfflineDataset(
        observations=obs,
        actions=rng.uniform(-1, 1, (n, 1)),
        rewards=rng.normal(size=n),
        terminals=np.arange(n) == n - 1,
        truncations=np.zeros(n, bool),
        next_observations=np.roll(obs, -1, 0),
        episode_starts=[0],
    )
    spec = EnvSpec.from_dataset(ds, {"action_low": [-1.0], "action_high": [1.0]})
    x = obs.astype(np.float64)
    np.testing.assert_allclose(spec.obs_mean, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(spec.obs_std, [x[:, 0].std(), x[:, 1].std(), 1e-3], rtol=1e-12)
    agent = make_agent("flow-bc", spec, {"hidden": 8, "depth": 1, "flow_steps": 2})
    seen = []
    original = agent.policy

    def spy(o: torch.Tensor, deterministic: bool) -> torch.Tensor:
        seen.append(o.clone())
        return original(o, deterministic)

    agent.policy = spy
    probe = np.array([[5.0, 0.0, 7.0], [1.0, -2.0, 7.0]], np.float32)
    expected = (probe - np.asarray(spec.obs_mean, np.float32)) / np.asarray(spec.obs_std, np.float32)
    agent.act(probe)
    np.testing.assert_allclose(seen[-1].numpy(), expected, rtol=1e-6, atol=1e-6)
    agent.save(tmp_path / "a")
    back = load_agent(tmp_path / "a")
    np.testing.assert_allclose(back.obs_mean.numpy(), np.asarray(spec.obs_mean, np.float32))
    np.testing.assert_allclose(back.obs_std.numpy(), np.asarray(spec.obs_std, np.float32))
    np.testing.assert_allclose(back.act(probe), agent.act(probe), rtol=1e-6, atol=1e-6)
