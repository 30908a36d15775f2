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


def test_evaluate_scores_euler_samples_against_fresh_reference_draws_with_a_reference_only_kernel() -> None:
    # A constant velocity c moves the evaluation noise to noise + c at every NFE, so each record is known exactly.
    from gencore.data import toy_dataset
    from gencore.metrics import mmd, wasserstein2
    from gencore.toy_experiment import MMD_KEY, ToyRun, evaluate, evaluation_noise, reference_data

    cfg = ToyConfig(dataset="moons", n_eval=200, nfe=(1, 3), seed=4, progress=False)
    c = torch.tensor([0.5, -1.0])
    run = ToyRun(
        config=cfg, model=lambda x, t: torch.zeros_like(x) + c, data=training_data(cfg),  # type: ignore[arg-type]
        losses=[], train_seconds=1.0, coupling_seconds=0.5,
    )  # fmt: skip
    reference = reference_data(cfg)
    assert torch.equal(reference, toy_dataset("moons", 200, seed=4 + 10_000))
    assert not torch.equal(reference, run.data[:200])  # scored on fresh draws, not the training set
    records, samples = evaluate(run)
    x = evaluation_noise(cfg, 2) + c
    ref_d = torch.cdist(reference.double(), reference.double())
    median = float(ref_d[torch.triu_indices(200, 200, 1).unbind()].median())
    bandwidths = [k * median for k in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert [(r["nfe"], r["coupling"], r["dataset"]) for r in records] == [
        (1, "independent", "moons"),
        (3, "independent", "moons"),
    ]
    for r in records:
        assert torch.allclose(samples[r["nfe"]], x, atol=1e-5)
        assert r["w2"] == pytest.approx(wasserstein2(x, reference), rel=1e-4)
        assert r[MMD_KEY] == pytest.approx(mmd(x, reference, bandwidths=bandwidths).value, rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("n_eval", [1, 8193])
def test_an_n_eval_that_evaluate_cannot_score_is_refused_before_training(n_eval: int) -> None:
    """n_eval = 1 (the unbiased MMD needs two samples) or above exact W2's 8192 points passed validate, so a
    comparison trained every model and only then failed in evaluate."""
    from gencore.errors import ConfigError

    cfg = ToyConfig(dataset="moons", n_eval=n_eval, steps=1, progress=False)
    with pytest.raises(ConfigError, match=rf"^n_eval must be from 2 .* to 8192 .*, got {n_eval}\.$"):
        cfg.validate()
    with pytest.raises(ConfigError, match="n_eval"):
        compare(cfg, ("independent",))
    ToyConfig(dataset="moons", n_eval=2).validate()
    ToyConfig(dataset="moons", n_eval=8192).validate()
    ToyConfig(dataset="digits", n_eval=1).validate()  # digits are scored on all 1,797 images; n_eval is unused
