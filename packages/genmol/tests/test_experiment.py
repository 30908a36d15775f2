"""Run folders: which training molecules the reference file holds, and which data a finished or resumed run is."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest
import torch
from conftest import embedded
from rdkit import Chem

import genmol.experiment as experiment
from gencore.errors import ConfigError, InputError
from genmol.chem.io import read_sdf, write_sdf
from genmol.generation.flow import GenConfig

CFG = GenConfig(hidden=8, layers=1, steps=2, batch_size=4, progress=False)


def test_reference_sample_is_a_seeded_uniform_sample_in_data_order():
    """Data sets come sorted (QM9 by index: small molecules first, fluorinated ones last); the reference for the
    bond-geometry distances must be spread over the whole set, not its first REFERENCE_SIZE molecules."""
    items = list(range(3 * experiment.REFERENCE_SIZE))
    ref = experiment.reference_sample(items, seed=0)
    assert len(ref) == experiment.REFERENCE_SIZE and ref == sorted(set(ref))
    tail = sum(k >= 2 * experiment.REFERENCE_SIZE for k in ref) / len(ref)
    assert abs(tail - 1 / 3) < 0.06  # a uniform sample: about a third from the last third (sd 0.012)
    assert experiment.reference_sample(items, seed=0) == ref and experiment.reference_sample(items, seed=1) != ref
    assert experiment.reference_sample(items[:10], seed=0) == items[:10]  # small sets are kept whole


def test_the_run_folders_reference_is_drawn_from_the_whole_training_set(tmp_path, monkeypatch):
    """It was ``molecules[:1000]``: on a QM9 subset of 2,000 its bond-angle distance to the whole set was 0.70
    degrees against 0.28 for a random 1,000 (no fluorine in it, 8.6 heavy atoms against 8.8)."""
    monkeypatch.setattr(experiment, "REFERENCE_SIZE", 6)
    mols = [embedded("CCO", k, name=f"first{k}") for k in range(12)]
    mols += [embedded("CC=O", k, name=f"second{k}") for k in range(12)]
    experiment.train_run(CFG, mols, tmp_path / "run")
    ref, _ = read_sdf(tmp_path / "run" / "reference.sdf")
    names = [m.name for m in ref]
    assert names == [m.name for m in experiment.reference_sample(mols, CFG.seed)]
    assert len(names) == 6 and any(n.startswith("second") for n in names)


def test_a_finished_run_is_the_same_run_only_on_the_same_data(tmp_path):
    """``--data qm9`` names every subset: a run finished on some molecules was reported finished (and its model
    used) for other molecules of the same data name, and a checkpoint resumed on them without a word."""
    mols = [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC", "OCCO", "CC#N"])]
    run = tmp_path / "run"
    experiment.train_run(CFG, mols, run, data_name="qm9")
    again = experiment.train_run(CFG, mols, run, data_name="qm9", resume="auto")
    assert again.get("already_finished")
    with pytest.raises(ConfigError, match=r"cannot resume .*data_sha256"):
        experiment.train_run(CFG, mols[:5], run, data_name="qm9", resume="auto")


def test_an_explicit_hydrogen_run_refuses_molecules_whose_hydrogens_have_no_coordinates(tmp_path):
    """Heavy-atom 3-D data (hydrogens as counts) trained an explicit-hydrogen model without a word: its vocabulary
    had no H, every sample came out with neither hydrogen atoms nor counts (all atoms under-valent)."""
    mols = [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"])]
    heavy = [m.without_hydrogens() for m in mols]
    assert all(m.num_hs.any() for m in heavy)
    with pytest.raises(InputError, match=r"4 of 4 molecules hold hydrogens as counts .*'CCO'.*implicit"):
        experiment.train_run(CFG, heavy, tmp_path / "run")
    with pytest.raises(InputError, match=r"1 of 4 molecules hold hydrogens as counts .*'CC=O'"):
        experiment.train_run(CFG, mols[:2] + heavy[2:3] + mols[3:], tmp_path / "run")
    assert not (tmp_path / "run").exists()
    experiment.train_run(replace(CFG, hydrogens="implicit"), heavy, tmp_path / "run")  # the heavy-atom model
    assert (tmp_path / "run" / "run.json").is_file()


def test_a_resumed_run_refuses_the_same_molecules_in_other_conformers(tmp_path):
    """The data fingerprint covers the coordinates: the same graphs in other conformers are other training data."""
    smiles = ["CCO", "CCN", "CC=O", "COC"]
    run = tmp_path / "run"
    experiment.train_run(CFG, [embedded(s, 0) for s in smiles], run, data_name="d.sdf")
    moved = [embedded(s, 7) for s in smiles]
    assert any(
        abs(a.coordinates - b.coordinates).max() > 0.01 for a, b in zip(moved, read_sdf(run / "reference.sdf")[0])
    )
    with pytest.raises(ConfigError, match=r"cannot resume .*data_sha256"):
        experiment.train_run(CFG, moved, run, data_name="d.sdf", resume="auto")


def test_a_finished_run_is_not_reported_finished_for_another_data_name_or_setting(tmp_path):
    mols = [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"])]
    run = tmp_path / "run"
    experiment.train_run(CFG, mols, run, data_name="a.sdf")
    with pytest.raises(ConfigError, match=r"cannot resume .*data"):
        experiment.train_run(CFG, mols, run, data_name="b.sdf", resume="auto")
    with pytest.raises(ConfigError, match=r"cannot resume .*lr"):
        experiment.train_run(replace(CFG, lr=1e-3), mols, run, data_name="a.sdf", resume="auto")
    more = experiment.train_run(replace(CFG, steps=3), mols, run, data_name="a.sdf", resume="auto")
    assert not more.get("already_finished") and not more["interrupted"]


def test_run_json_and_train_smiles_describe_every_training_molecule(tmp_path):
    """Counted independently: RDKit's canonical SMILES of each input, and each molecule's atom count."""
    smiles = ["CCN", "CCO", "OCC", "CC=O", "c1ccccc1", "C[NH3+]"]
    mols = [embedded(s, k) for k, s in enumerate(smiles)]
    experiment.train_run(CFG, mols, tmp_path / "run", data_name="x.sdf")
    expected = sorted({Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in smiles})
    assert experiment.train_smiles(tmp_path / "run") == expected
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["n_train"] == 6 and meta["data"] == "x.sdf" and meta["interrupted"] is False
    sizes = Counter(Chem.AddHs(Chem.MolFromSmiles(s)).GetNumAtoms() for s in smiles)
    assert {int(k): v for k, v in meta["sizes"].items()} == dict(sizes)
    assert sorted(tuple(p) for p in meta["vocabulary"]) == [(1, 0), (6, 0), (7, 0), (7, 1), (8, 0)]


def test_load_run_refuses_an_interrupted_run(tmp_path):
    mols = [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"])]
    experiment.train_run(CFG, mols, tmp_path / "run")
    experiment.load_run(tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    (tmp_path / "run" / "run.json").write_text(json.dumps(meta | {"interrupted": True}))
    with pytest.raises(InputError, match=r"was interrupted; resume it"):
        experiment.load_run(tmp_path / "run")


def test_an_sdf_subset_is_a_seeded_sample_of_the_whole_file_in_file_order(tmp_path):
    mols = [embedded("CCO", 0, name=f"m{k}") for k in range(40)]
    write_sdf(tmp_path / "d.sdf", mols)
    names = [m.name for m in experiment.load_dataset(str(tmp_path / "d.sdf"), subset=10, seed=3)[0]]
    order = torch.randperm(40, generator=torch.Generator().manual_seed(3)).tolist()[:10]
    assert names == [f"m{k}" for k in sorted(order)]
    assert names != [f"m{k}" for k in range(10)]
    assert [m.name for m in experiment.load_dataset(str(tmp_path / "d.sdf"), subset=10, seed=4)[0]] != names
