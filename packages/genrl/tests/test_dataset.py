"""Dataset layout: round trip, card, generator conventions and clear errors for bad files."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from gencore.errors import ConfigError, InputError, StorageError
from genrl.dataset import CARD_NAME, DATA_NAME, KEYS, OfflineDataset, load_dataset, make_card, save_dataset


def _arrays(ds: OfflineDataset) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in ds.as_dict().items()}


def test_round_trip_and_card(tmp_path, pendulum_dataset) -> None:
    ds, card = pendulum_dataset
    save_dataset(tmp_path / "d", ds, card)
    back, card2 = load_dataset(tmp_path / "d")
    for k in KEYS:
        np.testing.assert_array_equal(getattr(back, k), getattr(ds, k))
        assert getattr(back, k).dtype == getattr(ds, k).dtype
    assert card2["env_id"] == "Pendulum-v1" and card2["env_version"] == 1
    assert card2["policy"] == {"name": "random"} and card2["seed"] == 3
    assert card2["n_transitions"] == 450 and card2["n_episodes"] == 3  # 200 + 200 + 50 (cut)
    # the cut episode is flagged truncated (learners bootstrap through it) but is no complete episode
    assert card2["n_complete_episodes"] == 2 and ds.episode_returns().size == 3
    returns = ds.episode_returns(time_limit=200)
    assert card2["returns"]["mean"] == pytest.approx(returns.mean())
    assert returns.tolist() == [float(ds.rewards[:200].sum()), float(ds.rewards[200:400].sum())]
    assert len(card2["data_sha256"]) == 64 and "gymnasium_version" in card2


def test_generated_episode_conventions(pendulum_dataset) -> None:
    ds, _ = pendulum_dataset
    np.testing.assert_array_equal(ds.episode_starts, [0, 200, 400])
    # Pendulum never terminates: every episode end is a truncation (time limit or end of collection).
    assert not ds.terminals.any()
    assert ds.truncations.nonzero()[0].tolist() == [199, 399, 449]
    for start, stop in ds.episode_bounds():
        np.testing.assert_array_equal(ds.next_observations[start : stop - 1], ds.observations[start + 1 : stop])
    assert (np.abs(ds.actions) <= 2.0).all() and ds.actions.shape == (450, 1)


def test_every_next_observation_follows_the_pendulum_dynamics(pendulum_dataset) -> None:
    """Pendulum's step, by hand (g = 10, m = l = 1, dt = 0.05, |thdot| <= 8): each next observation is the state its
    action led to, the last one of a time-limited episode included (not the next episode's reset observation)."""
    ds, _ = pendulum_dataset
    o = ds.observations.astype(np.float64)
    th, thdot, u = np.arctan2(o[:, 1], o[:, 0]), o[:, 2], ds.actions[:, 0].astype(np.float64)
    new_thdot = np.clip(thdot + (3 * 10.0 / 2 * np.sin(th) + 3.0 * u) * 0.05, -8.0, 8.0)
    new_th = th + new_thdot * 0.05
    expected = np.stack([np.cos(new_th), np.sin(new_th), new_thdot], axis=1)
    np.testing.assert_allclose(ds.next_observations, expected, atol=1e-4)
    assert not np.allclose(ds.next_observations[199], ds.observations[200], atol=1e-2)  # the reset is elsewhere


def test_missing_key_is_a_clear_error(tmp_path, toy_dataset) -> None:
    save_dataset(tmp_path / "d", toy_dataset, make_card(toy_dataset, env_id="toy-bimodal"))
    arrays = _arrays(toy_dataset)
    del arrays["terminals"]
    np.savez_compressed(tmp_path / "d" / DATA_NAME, **arrays)
    with pytest.raises(InputError, match=r"missing the key\(s\) terminals"):
        load_dataset(tmp_path / "d", verify=False)


def test_wrong_shape_is_a_clear_error(tmp_path, toy_dataset) -> None:
    save_dataset(tmp_path / "d", toy_dataset, make_card(toy_dataset, env_id="toy-bimodal"))
    arrays = _arrays(toy_dataset)
    arrays["rewards"] = arrays["rewards"][:-1]
    np.savez_compressed(tmp_path / "d" / DATA_NAME, **arrays)
    with pytest.raises(InputError, match=r"'rewards' must have shape \[300\], got \(299,\)"):
        load_dataset(tmp_path / "d", verify=False)
    arrays = _arrays(toy_dataset)
    arrays["next_observations"] = arrays["next_observations"][:, :1]
    np.savez_compressed(tmp_path / "d" / DATA_NAME, **arrays)
    with pytest.raises(InputError, match="'next_observations' must have the shape of 'observations'"):
        load_dataset(tmp_path / "d", verify=False)


def test_changed_data_fails_the_card_checksum(tmp_path, toy_dataset) -> None:
    save_dataset(tmp_path / "d", toy_dataset, make_card(toy_dataset, env_id="toy-bimodal"))
    arrays = _arrays(toy_dataset)
    arrays["rewards"][0] += 1.0
    np.savez_compressed(tmp_path / "d" / DATA_NAME, **arrays)
    with pytest.raises(InputError, match="SHA-256"):
        load_dataset(tmp_path / "d")


def test_pickled_arrays_are_refused(tmp_path, toy_dataset) -> None:
    save_dataset(tmp_path / "d", toy_dataset, make_card(toy_dataset, env_id="toy-bimodal"))
    arrays = _arrays(toy_dataset)
    arrays["rewards"] = np.array([object()] * len(toy_dataset), dtype=object)
    np.savez(tmp_path / "d" / DATA_NAME, **arrays)
    with pytest.raises(InputError, match="needs pickle"):
        load_dataset(tmp_path / "d", verify=False)


def test_missing_files_and_bad_card(tmp_path, toy_dataset) -> None:
    with pytest.raises(StorageError, match="does not exist"):
        load_dataset(tmp_path / "nowhere")
    save_dataset(tmp_path / "d", toy_dataset, make_card(toy_dataset, env_id="toy-bimodal"))
    (tmp_path / "d" / CARD_NAME).unlink()  # what a write interrupted between the two files leaves
    with pytest.raises(StorageError, match=r"card\.json' does not exist.*interrupted write"):
        load_dataset(tmp_path / "d")
    (tmp_path / "d" / CARD_NAME).write_text(json.dumps({"format": "other"}))
    with pytest.raises(InputError, match="not a genrl dataset card"):
        load_dataset(tmp_path / "d")
    (tmp_path / "d" / DATA_NAME).write_bytes(b"not a zip")
    (tmp_path / "d" / CARD_NAME).write_text(json.dumps({"format": "genrl-offline-dataset"}))
    with pytest.raises(StorageError, match=r"not a readable \.npz"):
        load_dataset(tmp_path / "d")


def test_episode_boundaries_are_validated(toy_dataset) -> None:
    arrays = _arrays(toy_dataset)
    arrays["episode_starts"] = np.array([0, 2, 1])
    with pytest.raises(InputError, match="increase strictly"):
        OfflineDataset(**arrays)
    arrays = _arrays(toy_dataset)
    arrays["terminals"][2] = False  # first episode's end loses its flag
    with pytest.raises(InputError, match="transition 2 ends an episode"):
        OfflineDataset(**arrays)
    arrays = _arrays(toy_dataset)
    arrays["observations"][0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        OfflineDataset(**arrays)


def test_medium_policy_card_records_the_sac_budget() -> None:
    from genrl.generate import make_dataset

    ds, card = make_dataset("Pendulum-v1", "medium", 250, seed=1, train_steps=200, progress=False)
    assert card["policy"]["name"] == "medium" and card["policy"]["algorithm"] == "sac"
    assert card["policy"]["train_steps"] == 200 and np.isfinite(card["policy"]["eval_return_mean"])
    assert len(ds) == 250 and ds.truncations[-1]


def test_medium_replay_is_the_sac_replay_buffer_with_its_episode_ends() -> None:
    """Pendulum episodes end by truncation after 200 steps; the replay's first 40 steps are the random
    warm-up (budget / 10), and the whole buffer's episodes are those of the online run."""
    from genrl.generate import make_dataset

    ds, card = make_dataset("Pendulum-v1", "medium-replay", 400, seed=2, train_steps=400, progress=False)
    assert card["policy"]["name"] == "medium-replay" and card["policy"]["train_steps"] == 400
    assert card["first_episode_cut"] is False  # the whole buffer starts with the run's first reset
    assert ds.episode_starts.tolist() == [0, 200] and not ds.terminals.any()
    assert np.flatnonzero(ds.truncations).tolist() == [199, 399]
    for start, stop in ds.episode_bounds():  # consecutive rows chain within an episode
        np.testing.assert_array_equal(ds.next_observations[start : stop - 1], ds.observations[start + 1 : stop])
    assert (np.abs(ds.actions) <= 2.0).all()
    last, last_card = make_dataset("Pendulum-v1", "medium-replay", 150, seed=2, train_steps=400, progress=False)
    np.testing.assert_array_equal(last.observations, ds.observations[-150:])  # the last 150 of the same run
    assert last_card["first_episode_cut"] is True and last_card["n_complete_episodes"] == 0
    assert last.episode_starts.tolist() == [0] and last.truncations[-1]
    with pytest.raises(ConfigError, match="cannot exceed its training budget"):
        make_dataset("Pendulum-v1", "medium-replay", 500, seed=2, train_steps=400, progress=False)
    with pytest.raises(ConfigError, match="train_steps must be positive, got 0"):  # an untrained SAC is not "medium"
        make_dataset("Pendulum-v1", "medium", 100, seed=2, train_steps=0, progress=False)


def test_medium_expert_is_medium_then_expert_data_from_one_sac_run() -> None:
    """The first half (151, the odd one) comes from the snapshot after 400 // 5 = 80 steps, collected from
    reset seed 2; the second from the final SAC, from reset seed 3; the seam is an episode boundary."""
    import gymnasium as gym

    from genrl.generate import make_dataset

    ds, card = make_dataset("Pendulum-v1", "medium-expert", 301, seed=2, train_steps=400, progress=False)
    pol = card["policy"]
    assert pol["name"] == "medium-expert" and pol["algorithm"] == "sac"
    assert pol["train_steps"] == 400 and pol["medium_train_steps"] == 80
    assert np.isfinite(pol["eval_return_mean"]) and np.isfinite(pol["medium_eval_return_mean"])
    assert len(ds) == 301 and ds.episode_starts.tolist() == [0, 151]
    assert np.flatnonzero(ds.truncations).tolist() == [150, 300]  # each half's collection end cuts its episode
    env = gym.make("Pendulum-v1")
    for start, seed in ((0, 2), (151, 3)):
        np.testing.assert_allclose(ds.observations[start], env.reset(seed=seed)[0])
    with pytest.raises(ConfigError, match="at least 5"):
        make_dataset("Pendulum-v1", "medium-expert", 10, seed=2, train_steps=4, progress=False)


def test_behaviour_snapshots_are_the_agent_at_that_step() -> None:
    import torch

    from genrl.generate import train_behaviour_policy

    agent, _, snaps = train_behaviour_policy("Pendulum-v1", 400, seed=0, progress=False, snapshots=(300, 400))
    final, mid = agent.state_dict(), snaps[300].state_dict()
    assert all(torch.equal(final[k], v) for k, v in snaps[400].state_dict().items())
    assert any(not torch.equal(final[k], v) for k, v in mid.items())  # updates start at 256 transitions (the batch)
    with pytest.raises(ConfigError, match="snapshots must lie"):
        train_behaviour_policy("Pendulum-v1", 10, seed=0, progress=False, snapshots=(11,))


def test_concatenate_keeps_episodes_and_refuses_an_open_seam(pendulum_dataset) -> None:
    from genrl.dataset import concatenate

    ds, _ = pendulum_dataset
    both = concatenate(ds, ds)
    assert len(both) == 2 * len(ds)
    assert both.episode_starts.tolist() == [*ds.episode_starts.tolist(), *(ds.episode_starts + len(ds)).tolist()]
    np.testing.assert_array_equal(both.rewards[len(ds) :], ds.rewards)
    arrays = _arrays(ds)
    arrays["truncations"][-1] = False
    open_end = OfflineDataset(**arrays)
    with pytest.raises(ConfigError, match="part 0 does not end its last episode"):
        concatenate(open_end, ds)


def test_replay_dataset_reads_terminations_and_resets_off_the_buffer() -> None:
    from genrl.generate import replay_dataset
    from genrl.training import ReplayBuffer

    buf = ReplayBuffer(1, 1, capacity=6)
    chain = [(0.0, 1.0, False), (1.0, 2.0, True), (5.0, 6.0, False), (6.0, 7.0, False), (9.0, 10.0, False)]
    for o, n, term in chain:  # episodes: [0, 1] terminated, [2, 3] reset without termination, [4] cut
        buf.add(np.array([o]), np.zeros(1), 1.0, term, np.array([n]))
    ds = replay_dataset(buf, 5)
    assert ds.episode_starts.tolist() == [0, 2, 4]
    assert ds.terminals.tolist() == [False, True, False, False, False]
    assert ds.truncations.tolist() == [False, False, False, True, True]
    with pytest.raises(ConfigError, match="between 1 and"):
        replay_dataset(buf, 6)


def test_a_replay_window_starting_mid_episode_leaves_that_episode_out_of_the_returns() -> None:
    """Rows 2..6 of a buffer holding episodes [0..3] and [4..6], both terminated: the first episode of the window
    holds only the last 2 of its 4 steps, so its terminal does not make its return (2) an episode's return."""
    from genrl.generate import replay_dataset, replay_starts_mid_episode
    from genrl.training import ReplayBuffer

    buf = ReplayBuffer(1, 1, capacity=8)
    for o, r, term in [(0, 1, False), (1, 1, False), (2, 1, False), (3, 1, True), (10, 2, False), (11, 2, False)]:
        buf.add(np.array([o]), np.zeros(1), float(r), term, np.array([o + 1.0]))
    buf.add(np.array([12.0]), np.zeros(1), 2.0, True, np.array([13.0]))
    window = replay_dataset(buf, 5)
    assert window.episode_starts.tolist() == [0, 2] and window.terminals.tolist() == [0, 1, 0, 0, 1]
    assert replay_starts_mid_episode(buf, 5) and not replay_starts_mid_episode(buf, 7)
    assert not replay_starts_mid_episode(buf, 3)  # row 3 terminated: the window starts with episode [4..6]
    card = make_card(window, max_episode_steps=1000, first_episode_cut=replay_starts_mid_episode(buf, 5))
    assert card["n_complete_episodes"] == 1 and card["returns"] == {"mean": 6.0, "std": 0.0, "min": 6.0, "max": 6.0}
    np.testing.assert_array_equal(window.episode_returns(), [2.0, 6.0])  # without the flag both ends look complete


def test_edited_card_fields_are_clear_errors(tmp_path, pendulum_dataset) -> None:
    """A card whose fields no longer describe data.npz, or hold the wrong types, is one sentence naming the
    field (`genrl dataset info` and `train` read them), not a KeyError or a shape error in the first update."""
    ds, card = pendulum_dataset
    good = {**card}
    cases = [
        ({"n_transitions": None}, "field 'n_transitions' is None, but data.npz holds 450"),
        ({"observation_shape": [3, 2]}, "field 'observation_shape' is [3, 2], but data.npz holds [3]"),
        ({"returns": "x"}, "field 'returns' must be null or an object of mean, std, min, max"),
        ({"terminal_fraction": None}, "field 'terminal_fraction' must be a number, got None"),
        ({"action_low": [-2.0, -2.0]}, "field 'action_low' must be a list of 1 finite numbers"),
        ({"action_high": 2.0}, "field 'action_high' must be a list of 1 finite numbers"),
        ({"action_low": [2.0]}, "field 'action_low' must be below 'action_high'"),
        ({"env_id": 5}, "field 'env_id' must be a string or null, got 5"),
    ]
    for k, (edit, message) in enumerate(cases):
        d = tmp_path / f"d{k}"
        save_dataset(d, ds, {**good, **edit})
        with pytest.raises(InputError, match="card.json: " + re.escape(message)):
            load_dataset(d)
    (tmp_path / "d0" / CARD_NAME).write_bytes(b"\xff\xfe{}")
    with pytest.raises(StorageError, match=r"card.json' is not valid JSON \(not UTF-8 text"):
        load_dataset(tmp_path / "d0")


def test_npz_members_that_are_not_arrays_are_clear_errors(tmp_path, toy_dataset) -> None:
    """np.load hands back a member without the .npy header as raw bytes, and a broken deflate stream raises
    zlib.error: both are one sentence naming the file (and the member)."""
    import io
    import zipfile

    save_dataset(tmp_path / "d", toy_dataset, make_card(toy_dataset, env_id="toy-bimodal"))
    path = tmp_path / "d" / DATA_NAME
    with zipfile.ZipFile(path, "w") as z:
        for k, v in _arrays(toy_dataset).items():
            buf = io.BytesIO()
            np.save(buf, v)
            z.writestr(f"{k}.npy", buf.getvalue() if k != "rewards" else b"not an array")
    with pytest.raises(InputError, match=r"member 'rewards' is not a NumPy \.npy array"):
        load_dataset(tmp_path / "d", verify=False)
    np.savez_compressed(path, **_arrays(toy_dataset))
    raw = bytearray(path.read_bytes())
    info = zipfile.ZipFile(path).infolist()[0]
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    raw[start + 45 : start + 53] = b"\xff" * 8  # inside the first member's deflate stream
    path.write_bytes(bytes(raw))
    with pytest.raises(StorageError, match=r"is not a readable \.npz file"):
        load_dataset(tmp_path / "d", verify=False)


def test_unsigned_episode_starts_load_like_signed_ones(tmp_path, toy_dataset) -> None:
    arrays = _arrays(toy_dataset)
    arrays["episode_starts"] = arrays["episode_starts"].astype(np.uint64)
    back = OfflineDataset(**arrays)
    np.testing.assert_array_equal(back.episode_starts, toy_dataset.episode_starts)
    save_dataset(tmp_path / "d", back, make_card(back, env_id="toy-bimodal"))  # as a file written elsewhere
    np.savez_compressed(tmp_path / "d" / DATA_NAME, **arrays)
    np.testing.assert_array_equal(load_dataset(tmp_path / "d", verify=False)[0].episode_starts, back.episode_starts)
    arrays["episode_starts"] = arrays["episode_starts"].astype(np.float64)
    np.savez_compressed(tmp_path / "d" / DATA_NAME, **arrays)
    with pytest.raises(InputError, match=r"1-D integer array, got float64 \(100,\)"):
        load_dataset(tmp_path / "d", verify=False)


def test_toy_data_with_no_steps_is_refused() -> None:
    from genrl.generate import make_dataset

    # the toy generator silently made one episode for steps <= 0
    for steps in (0, -3):
        with pytest.raises(ConfigError, match="steps must be a positive integer"):
            make_dataset("toy-bimodal", "random", steps)


def test_card_statistics_are_those_computed_directly(pendulum_dataset) -> None:
    ds, card = pendulum_dataset
    returns = [float(np.sum(ds.rewards[s : s + 200], dtype=np.float64)) for s in (0, 200)]  # the two full episodes
    expected = {"mean": np.mean(returns), "std": np.std(returns), "min": min(returns), "max": max(returns)}
    assert card["returns"] == pytest.approx(expected, rel=1e-6)
    lengths = {"mean": 150.0, "std": np.std([200, 200, 50]), "min": 50.0, "max": 200.0}
    assert card["episode_length"] == pytest.approx(lengths)
    r = ds.rewards.astype(np.float64)
    assert card["reward"] == pytest.approx({"mean": r.mean(), "std": r.std(), "min": r.min(), "max": r.max()})
    from genrl.toy_mdp import BimodalChain

    toy = make_card(BimodalChain().dataset(4, seed=0))  # every third transition ends its episode by a terminal
    assert toy["terminal_fraction"] == pytest.approx(1 / 3) and toy["episode_length"]["max"] == 3.0


def test_empty_or_out_of_range_episodes_are_refused(toy_dataset) -> None:
    for starts in ([0, 3, 3, 6], [0, 3, 300]):  # a repeated start is an empty episode; 300 starts past the data
        arrays = _arrays(toy_dataset)
        arrays["episode_starts"] = np.array(starts)
        with pytest.raises(InputError, match="increase strictly below 300"):
            OfflineDataset(**arrays)


def test_generation_is_reproducible_from_the_seed(pendulum_dataset) -> None:
    from genrl.generate import make_dataset

    ds, _ = pendulum_dataset
    again, _ = make_dataset("Pendulum-v1", "random", 450, seed=3, progress=False)
    for k in KEYS:
        np.testing.assert_array_equal(getattr(again, k), getattr(ds, k), err_msg=k)
    other, _ = make_dataset("Pendulum-v1", "random", 450, seed=4, progress=False)
    assert not np.array_equal(other.actions, ds.actions)


def test_collect_runs_the_policy_and_ends_episodes_by_termination() -> None:
    """A constant policy's actions are stored; Hopper falls over, so episodes end by terminals whose next
    observation is the fallen state (not the reset one), and a collection ending on a terminal is no truncation."""
    from genrl.generate import collect

    ds, env = collect("Hopper-v5", lambda o: np.full(3, 0.5, np.float32), 60, seed=0, progress=False)
    env.close()
    np.testing.assert_array_equal(ds.actions, 0.5)
    assert np.flatnonzero(ds.terminals).tolist() == [26, 53] and np.flatnonzero(ds.truncations).tolist() == [59]
    np.testing.assert_array_equal(ds.episode_starts, [0, 27, 54])
    assert not np.array_equal(ds.next_observations[26], ds.observations[27])  # the fallen state, then a reset
    cut, env = collect("Hopper-v5", lambda o: np.full(3, 0.5, np.float32), 27, seed=0, progress=False)
    env.close()
    assert cut.terminals[-1] and not cut.truncations.any()  # the collection ended on the terminal itself
    np.testing.assert_array_equal(cut.next_observations, ds.next_observations[:27])


def test_toy_data_holds_whole_episodes_of_the_chain() -> None:
    from genrl.generate import make_dataset

    ds, card = make_dataset("toy-bimodal", "random", 25, seed=0, progress=False)
    assert len(ds) == 24 and ds.n_episodes == 8 and card["n_complete_episodes"] == 8  # 25 // 3 episodes of 3


def _hand_dataset(lengths, last_flags, rewards=None) -> OfflineDataset:
    """Episodes of the given lengths, each ending with "term" or "trunc"; observation i is [i], rewards 1, 2, ..."""
    n = sum(lengths)
    starts = np.cumsum([0, *lengths[:-1]])
    term, trunc = np.zeros(n, bool), np.zeros(n, bool)
    for s, t, flag in zip(starts, lengths, last_flags):
        (term if flag == "term" else trunc)[s + t - 1] = True
    obs = np.arange(n, dtype=np.float32)[:, None]
    r = np.arange(1, n + 1, dtype=np.float32) if rewards is None else np.asarray(rewards, np.float32)
    return OfflineDataset(obs, np.zeros((n, 1)), r, term, trunc, obs + 1, starts)


def test_episode_returns_count_a_truncation_as_complete_only_at_exactly_the_time_limit() -> None:
    # episodes [0..3] truncated at the limit 4, [4..6] truncated one step short, [7..8] terminated early
    ds = _hand_dataset([4, 3, 2], ["trunc", "trunc", "term"])
    np.testing.assert_array_equal(ds.episode_returns(time_limit=4), [1 + 2 + 3 + 4, 8 + 9])
    np.testing.assert_array_equal(ds.episode_returns(), [10, 5 + 6 + 7, 17])  # no limit: every flagged end
    np.testing.assert_array_equal(ds.episode_returns(time_limit=3), [5 + 6 + 7, 17])
    np.testing.assert_array_equal(ds.episode_returns(time_limit=4, cut_episodes=(2,)), [10])
    np.testing.assert_array_equal(ds.episode_returns(complete_only=False, time_limit=4), [10, 18, 17])


def test_concatenate_shifts_the_episode_starts_of_unequal_parts() -> None:
    from genrl.dataset import concatenate

    a, b = _hand_dataset([3, 2], ["term", "trunc"]), _hand_dataset([1, 6], ["term", "trunc"])
    both = concatenate(a, b)
    assert both.episode_starts.tolist() == [0, 3, 5, 6] and len(both) == 12
    assert both.episode_lengths().tolist() == [3, 2, 1, 6]
    np.testing.assert_array_equal(both.episode_returns(), [6, 9, 1, 2 + 3 + 4 + 5 + 6 + 7])


def test_a_replay_window_after_a_terminal_is_not_cut_even_when_the_reset_repeats_the_state() -> None:
    """Row 1 terminates in state 2 and the env resets to state 2 again: the next observations chain, yet the
    window from row 2 starts a fresh episode (a terminal ends its episode whatever the reset gives)."""
    from genrl.generate import replay_dataset, replay_starts_mid_episode
    from genrl.training import ReplayBuffer

    buf = ReplayBuffer(1, 1, capacity=4)
    for o, term in [(0.0, False), (1.0, True), (2.0, False), (3.0, True)]:
        buf.add(np.array([o]), np.zeros(1), 1.0, term, np.array([o + 1.0]))
    assert not replay_starts_mid_episode(buf, 2)
    assert replay_starts_mid_episode(buf, 3)  # row 0 did not terminate and row 1 continues it
    assert replay_dataset(buf, 4).episode_starts.tolist() == [0, 2]
