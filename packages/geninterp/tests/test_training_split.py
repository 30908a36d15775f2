"""The SAE trainer reads only its training split, and a damaged run record is one sentence."""

from __future__ import annotations

import pytest

from gencore.errors import StorageError
from geninterp.store import ActivationStore
from geninterp.training import SAETrainConfig, train_sae


def test_training_reads_no_held_out_sequence(tmp_path, store_dir, monkeypatch):
    """Every sequence the run reads (statistics, initialisation, every sampled batch over several epochs) lies in
    its training range; handing the trainer the whole store instead of the training view passed every other test."""
    read: list[int] = []
    original = ActivationStore._read

    def recording(self, global_index):
        read.append(int(global_index))
        return original(self, global_index)

    monkeypatch.setattr(ActivationStore, "_read", recording)
    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=12, batch_tokens=64, progress=False, eval_fraction=0.25)
    _, record = train_sae(cfg, store_dir, tmp_path / "run")  # 18 training sequences, 4 a step: 3 epochs
    assert record["train_sequences"] == [0, 18] and record["eval_sequences"] == [18, 24]
    assert set(read) == set(range(18))  # all of the training split, none of the held-out one


def test_a_damaged_run_record_is_one_sentence_on_resume(tmp_path, store_dir):
    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=2, batch_tokens=64, progress=False)
    train_sae(cfg, store_dir, tmp_path / "run")
    (tmp_path / "run" / "run.json").write_text("[1, 2]")
    with pytest.raises(StorageError, match=r"run\.json' does not hold a JSON object"):
        train_sae(cfg, store_dir, tmp_path / "run", resume="auto")
