"""A trained generator saved to its run folder and reloaded samples bit-exactly what the trained model samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import embedded

import genmol.experiment as experiment
from genmol.generation.flow import GenConfig, sample_conformers, sample_joint


@pytest.mark.parametrize("task", ["joint", "conformer"])
def test_a_reloaded_run_samples_bit_exactly_like_the_trained_model(tmp_path, monkeypatch, task):
    trained = {}
    fit = experiment.Trainer.fit

    def keep(self, t, data):
        result = fit(self, t, data)
        trained["model"] = result.ema
        return result

    monkeypatch.setattr(experiment.Trainer, "fit", keep)
    cfg = GenConfig(task=task, hidden=8, layers=1, steps=3, batch_size=4, progress=False)
    mols = [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"])]
    experiment.train_run(cfg, mols, tmp_path / "run")
    model, cfg_back, vocab, _sizes = experiment.load_run(tmp_path / "run")
    assert cfg_back.task == task and type(model) is type(trained["model"])
    before, after = trained["model"].state_dict(), model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)

    def draw(m):
        g = torch.Generator().manual_seed(7)
        if task == "joint":
            return sample_joint(m, vocab, [9, 8, 9], strategy=cfg.strategy, steps=4, sampler="sde", generator=g)
        return sample_conformers(m, vocab, mols[:2], 2, strategy=cfg.strategy, steps=4, sampler="sde", generator=g)

    flat = (lambda out: out) if task == "joint" else (lambda out: [c for per in out for c in per])
    first, again = flat(draw(trained["model"])), flat(draw(model))
    assert len(first) == len(again) > 0
    for a, b in zip(first, again, strict=True):
        assert np.array_equal(a.atomic_numbers, b.atomic_numbers) and np.array_equal(a.formal_charges, b.formal_charges)
        assert np.array_equal(a.coordinates, b.coordinates)
        assert np.array_equal(a.bonds, b.bonds) and np.array_equal(a.bond_orders, b.bond_orders)


@pytest.mark.parametrize("strategy", ["com", "kabsch"])
def test_euclidean_sde_step_keeps_a_centred_molecule_centred(strategy):
    """The com/kabsch SDE injects centred noise: uncentred noise drifts the centroid, which a non-equivariant
    backbone (the transformer) sees as input; no other test noticed ``eps * mask`` in its place."""
    from genmol.generation.strategies import sde_step
    from genmol.se3 import center

    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    x = center(torch.randn(2, 4, 3, generator=g, dtype=torch.float64), mask)
    v = torch.zeros_like(x)
    out = sde_step(strategy, v, x, 0.3, 0.1, mask, 1.0, torch.Generator().manual_seed(1))
    centroid = (out * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    torch.testing.assert_close(centroid, torch.zeros_like(centroid), atol=1e-12, rtol=0)
    assert out.sub(x).abs().sum() > 0.1  # noise was injected
    assert torch.equal(out[0, 3], torch.zeros(3, dtype=x.dtype))
