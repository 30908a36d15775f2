"""Argument checks of the samplers' Python API (one typed sentence, before any work)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError, InputError
from genmol.generation.flow import GenConfig, build_backbone, draw_sizes, sample_joint
from genmol.generation.vocab import AtomVocabulary

VOCAB = AtomVocabulary([(1, 0), (6, 0), (8, 0)])


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_backbone(GenConfig(hidden=8, layers=1), len(VOCAB))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes": [0, 3]}, "every size .atoms per molecule. must be a positive integer"),
        ({"sizes": [-1]}, "every size .atoms per molecule. must be a positive integer"),
        ({"sizes": [2.5]}, "every size .atoms per molecule. must be a positive integer"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"steps": 2.5}, "steps must be a positive integer"),
    ],
)
def test_sample_joint_refuses_bad_arguments(model, kwargs, match):
    args = {"sizes": [3], "steps": 2, "batch_size": 4} | kwargs
    with pytest.raises(ConfigError, match=match):
        sample_joint(model, VOCAB, args.pop("sizes"), strategy="quotient", **args)


@pytest.mark.parametrize("sizes", [[3, 4], torch.tensor([3, 4]), np.array([3, 4])])
def test_sample_joint_accepts_integer_sizes_of_any_kind(model, sizes):
    out = sample_joint(model, VOCAB, sizes, strategy="quotient", steps=2, generator=torch.Generator().manual_seed(0))
    assert [m.num_atoms for m in out] == [3, 4]


def test_draw_sizes_refuses_bad_arguments():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ConfigError, match="number of sizes"):
        draw_sizes({3: 1}, 0, g)
    with pytest.raises(InputError, match="size histogram"):
        draw_sizes({}, 2, g)
    with pytest.raises(InputError, match="size histogram"):
        draw_sizes({0: 5}, 2, g)
    assert draw_sizes({3: 1}, 2, g) == [3, 3]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_loss_runs_with_the_engines_cuda_generator():
    """gencore's Trainer hands the task a generator on the training device; the random rotations of the data
    were drawn on the CPU from it, which a CUDA generator refuses."""
    from conftest import embedded

    from genmol.chem.batching import pad
    from genmol.generation.flow import MoleculeFlowTask

    mols = [embedded("CCO", 0), embedded("CC=O", 1)]
    vocab = AtomVocabulary.from_molecules(mols)
    task = MoleculeFlowTask(GenConfig(hidden=8, layers=1), vocab)
    t = pad(mols, vocab.token)
    device = torch.device("cuda")
    batch = [t[k].to(device) for k in ("tokens", "coords", "mask", "bonds")]
    loss, _ = task.loss(task.model.to(device), batch, torch.Generator(device=device).manual_seed(0))
    assert torch.isfinite(loss)


def test_the_task_seeds_its_weights_without_reseeding_the_callers_rng():
    from conftest import embedded

    from genmol.generation.flow import MoleculeFlowTask

    vocab = AtomVocabulary.from_molecules([embedded("CCO", 0)])
    cfg = GenConfig(hidden=8, layers=1, seed=3)
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    task = MoleculeFlowTask(cfg, vocab)
    assert torch.equal(torch.rand(4), expected)  # the global stream goes on as if the task were not built
    torch.manual_seed(cfg.seed)
    reference = build_backbone(cfg, len(vocab))  # the weights are still those of the seed
    for a, b in zip(task.model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf")])
def test_config_refuses_a_bad_token_weight(weight):
    with pytest.raises(ConfigError, match="token_weight"):
        GenConfig(token_weight=weight).validate()


def test_config_keeps_the_harmonic_prior_to_conformers_and_checks_its_constant():
    GenConfig(task="conformer", prior="harmonic").validate()
    with pytest.raises(ConfigError, match="harmonic prior is built from the bonds"):
        GenConfig(task="joint", prior="harmonic").validate()
    with pytest.raises(ConfigError, match="prior must be one of gaussian, harmonic"):
        GenConfig(task="conformer", prior="uniform").validate()
    with pytest.raises(ConfigError, match="prior_alpha must be positive"):
        GenConfig(task="conformer", prior="harmonic", prior_alpha=0.0).validate()


def test_harmonic_training_noise_follows_the_bond_graph():
    """The task's noise for a 3-atom chain: bonded atoms 1 / alpha apart per coordinate, the ends 2 / alpha."""
    from genmol.generation.flow import prior_noise, prior_transform

    bonds = torch.zeros(20_000, 3, 3, dtype=torch.long)
    bonds[:, 0, 1] = bonds[:, 1, 0] = bonds[:, 1, 2] = bonds[:, 2, 1] = 1
    mask = torch.ones(20_000, 3)
    a = prior_transform("harmonic", bonds, mask, 2.0)
    x = prior_noise((20_000, 3, 3), mask, a, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(x.mean(1), torch.zeros(20_000, 3, dtype=torch.float64), atol=1e-12, rtol=0)  # centred
    near = (x[:, 0] - x[:, 1]).pow(2).mean().item()
    far = (x[:, 0] - x[:, 2]).pow(2).mean().item()
    assert abs(near - 0.5) < 0.02 and abs(far - 1.0) < 0.04  # standard errors 0.003 and 0.006
    assert prior_transform("gaussian", bonds, mask, 2.0) is None
