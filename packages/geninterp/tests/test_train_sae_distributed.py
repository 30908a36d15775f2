"""SAE training in two gloo processes equals one process with the same global batch; TopK's dead-latent
counts are shared between the ranks (AuxK's normaliser is a per-rank batch statistic, as in every
data-parallel SAE trainer, so with AuxK two processes are close to one but not equal)."""

from __future__ import annotations

import pytest
import torch

from gencore.train import launch, setup, teardown
from geninterp.saes import make_sae
from geninterp.saes.objectives import TopKObjective
from geninterp.store import ActivationStore
from geninterp.training import SAETrainConfig, load_run, train_sae

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("arch", ["topk", "relu"])
def test_two_processes_equal_one(tmp_path, store_dir, arch) -> None:
    cfg = SAETrainConfig(arch=arch, width=32, k=2, steps=5, batch_tokens=64, lr=3e-3, aux_coeff=0.0, progress=False)
    train_sae(cfg, store_dir, tmp_path / "one")
    _, record = train_sae(cfg, store_dir, tmp_path / "two", nproc=2)
    one, _ = load_run(tmp_path / "one")
    two, _ = load_run(tmp_path / "two")
    assert record["nproc"] == 2
    for k, v in one.state_dict().items():
        torch.testing.assert_close(two.state_dict()[k], v, rtol=0, atol=2e-6)


def _dead_worker() -> list[int]:
    info = setup("cpu")
    try:
        sae = make_sae("topk", d_in=4, width=4, k=1)
        codes = torch.zeros(5, 4)
        codes[:, info.rank] = 1.0  # rank 0 fires latent 0, rank 1 latent 1, on its 5 tokens
        dead = TopKObjective(dead_after_tokens=10)._update_dead(sae, codes)
        return [*sae.tokens_since_fired.tolist(), *dead.int().tolist()]
    finally:
        teardown(info)


def test_dead_latents_are_counted_over_all_ranks() -> None:
    out = launch(_dead_worker, nproc=2)
    # both ranks: latents 0 and 1 fired somewhere; 2 and 3 silent for 2 x 5 tokens, dead at 10
    assert out[0] == out[1] == [0, 0, 10, 10, 0, 0, 1, 1]


def test_batch_must_split_over_the_processes(tmp_path, store_dir) -> None:
    from gencore.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot be split over 3 processes"):
        train_sae(SAETrainConfig(width=16, k=2, batch_tokens=64), store_dir, tmp_path / "r", nproc=3)
    seq_len = ActivationStore(store_dir).seq_len
    with pytest.raises(ConfigError, match=f"less than one sequence .* choose --batch-tokens >= {seq_len}"):
        train_sae(SAETrainConfig(width=16, k=2, batch_tokens=seq_len - 1), store_dir, tmp_path / "r")
    assert not (tmp_path / "r").exists()
