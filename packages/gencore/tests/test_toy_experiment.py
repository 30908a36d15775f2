"""End-to-end checks of the toy experiment: couplings change what a flow model learns as the papers say."""

from __future__ import annotations

import pytest
import torch

from gencore.toy_experiment import ToyConfig, ToyFlowTask, compare, training_data


def _by(records, coupling, nfe, metric="w2"):
    (r,) = [r for r in records if r["coupling"] == coupling and r["nfe"] == nfe]
    return r[metric]


def test_ot_pairing_straightens_one_step_samples() -> None:
    # Independent pairing regresses x1 on noise: one Euler step lands near the data mean, far from the
    # 8 modes. OT pairings (exact, semidiscrete) learn near-straight paths, so one step is already close.
    cfg = ToyConfig(
        dataset="8gaussians",
        steps=300,
        n_data=512,
        n_eval=256,
        nfe=(1,),
        progress=False,
        semidiscrete_fit_steps=1500,
        semidiscrete_batch_size=512,
    )
    records, samples = compare(cfg, ("independent", "exact", "semidiscrete"))
    indep = _by(records, "independent", 1)
    assert _by(records, "exact", 1) < 0.7 * indep
    assert _by(records, "semidiscrete", 1) < 0.7 * indep
    assert samples["exact"][1].shape == (256, 2)


@pytest.mark.slow
def test_semidiscrete_beats_independent_and_sinkhorn_at_every_nfe() -> None:
    # SD-FM's central claim in miniature (the full version is benchmarks/bench_sdfm.py).
    cfg = ToyConfig(dataset="checkerboard", steps=2000, n_data=2048, n_eval=1024, nfe=(1, 2, 4), progress=False)
    records, _ = compare(cfg, ("independent", "sinkhorn", "semidiscrete"))
    for k in cfg.nfe:
        assert _by(records, "semidiscrete", k) < _by(records, "independent", k)
        assert _by(records, "semidiscrete", k) < _by(records, "sinkhorn", k)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_the_toy_task_pairs_cuda_batches_with_a_coupling_fitted_on_the_cpu(epsilon: float) -> None:
    """The engine trains on CUDA when there is one; the semidiscrete coupling is fitted on the CPU data set, so
    its assignment multiplied CUDA noise by CPU data."""
    cfg = ToyConfig(
        coupling="semidiscrete", semidiscrete_epsilon=epsilon, semidiscrete_fit_steps=20,
        semidiscrete_batch_size=64, n_data=128, hidden=16, depth=2, progress=False,
    )  # fmt: skip
    data = training_data(cfg)
    task = ToyFlowTask(cfg, data)
    cuda = torch.device("cuda")
    loss, _ = task.loss(task.model.to(cuda), (data[:32].to(cuda),), torch.Generator(device=cuda).manual_seed(0))
    assert loss.device.type == "cuda" and torch.isfinite(loss)
