from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from conftest import embedded

from gencore.testing import check_seed_refused
from genmol.chem.io import read_sdf, read_xyz, write_sdf
from genmol.chem.molecule import Molecule
from genmol.cli import main

GARBAGE = "not a molecule\n\n\n  x  y  0  0  0  0  0  0  0  0999 V2000\nM  END\n$$$$\n"


@pytest.fixture
def mixed_sdf(tmp_path):
    """valid molecules, a valence-violating record, an unparsable record and a charged aromatic molecule."""
    ethanol, benzene = embedded("CCO", 0, "ethanol"), embedded("c1ccccc1", 0, "benzene")
    pyridinium = embedded("c1cc[nH+]cc1", 0, "pyridinium")
    ch5 = Molecule([6, 1, 1, 1, 1, 1], [0] * 6, [[0, k] for k in range(1, 6)], [1.0] * 5, [0] * 6, name="CH5")
    ch5.coordinates = np.vstack([np.zeros(3), np.eye(3), -np.eye(3)[:2]])
    path = tmp_path / "mixed.sdf"
    write_sdf(path, [ethanol, benzene, ch5])
    text = path.read_text() + GARBAGE
    path.write_text(text + write_sdf(tmp_path / "p.sdf", [pyridinium]).read_text())
    return path


def test_evaluate_reports_each_record_and_exits_zero(mixed_sdf, tmp_path, capsys):
    out = tmp_path / "e.json"
    assert main(["evaluate", str(mixed_sdf), "--json", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "molecule_stability" in printed and "validity" in printed
    data = json.loads(out.read_text())
    rows = {r["index"]: r for r in data["records"]}
    assert [rows[k]["name"] for k in (0, 1, 2, 4)] == ["ethanol", "benzene", "CH5", "pyridinium"]
    for k in (0, 1, 4):
        assert rows[k]["valid"] and rows[k]["mol_stable"] and rows[k]["atom_stability"] == 1.0
    assert rows[4]["smiles"] == "c1cc[nH+]cc1"
    assert not rows[2]["valid"] and "valence" in rows[2]["error"].lower() and not rows[2]["mol_stable"]
    assert rows[2]["unstable_atoms"] == ["atom 0 C(+0): valence 5 not in (4,)"]
    assert not rows[3]["parsed"] and "line" in rows[3]["error"]
    s = data["summary"]
    assert s["n_records"] == 5 and s["n_parsed"] == 4
    assert s["validity"] == 0.6 and s["molecule_stability"] == 0.6
    atoms = 9 + 12 + 6 + 12
    assert s["atom_stability"] == pytest.approx((atoms - 1) / atoms)
    assert math.isfinite(s["mmff_strain_median"])


def test_evaluate_table_masks_control_characters_in_titles(tmp_path, capsys):
    """A record's title is printed without its terminal control characters (an escape sequence would act)."""
    path = tmp_path / "t.sdf"
    path.write_text(GARBAGE.replace("not a molecule", "bad\x1b[2Jtitle"))
    assert main(["evaluate", str(path), "--no-progress", "--no-fcd", "--no-strain"]) == 0
    printed = capsys.readouterr().out
    assert "bad?[2Jtitle" in printed and "\x1b" not in printed


def test_evaluate_missing_file_is_one_line_and_exit_2(tmp_path, capsys):
    for name in ("nope.sdf", "nope.smi"):  # refused before the progress bar starts
        assert main(["evaluate", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name!s}' does not exist or is not a file" in err[0], err
    assert main(["evaluate", str(tmp_path / "m.mol2")]) == 2  # a file type genmol does not read
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "m.mol2" in err[0] and ".sdf" in err[0] and ".smi" in err[0]


@pytest.mark.parametrize("name", ["gen.smi", "gen.csv.gz"])
def test_evaluate_smiles_file_scores_every_line(tmp_path, capsys, name):
    """Invalid molecules are rows (not skipped lines); validity, uniqueness and novelty match RDKit's counts."""
    import gzip

    lines = [
        "smiles,name",  # a header line is skipped
        "CCO,ethanol",
        "OCC,ethanol_again",  # the same molecule: uniqueness 2/3 of the valid ones
        "c1cc[nH+]cc1,pyridinium",  # charged aromatic
        "C(C)(C)(C)(C)C,pentavalent",  # parses, does not sanitise: invalid
        "c1cccc1,bad_ring",  # an aromatic ring that cannot be kekulized: invalid
        "CC(C,unclosed",  # does not parse: a failed row naming the line
        "",
        "CC.O,two_fragments",  # valid, not connected
    ]
    path = tmp_path / name
    text = "\n".join(lines) + "\n"
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    (tmp_path / "ref.smi").write_text("CCO\nCC.O\n")
    out = tmp_path / "e.json"
    args = ["evaluate", str(path), "--json", str(out), "--reference", str(tmp_path / "ref.smi"), "--no-fcd"]
    assert main([*args, "--no-progress"]) == 0
    data = json.loads(out.read_text())
    rows = {r["name"]: r for r in data["records"]}
    assert [r["index"] for r in data["records"]] == list(range(7))
    assert rows["ethanol"]["valid"] and rows["ethanol"]["mol_stable"] and rows["ethanol"]["smiles"] == "CCO"
    assert rows["pyridinium"]["valid"] and rows["pyridinium"]["mol_stable"]
    assert rows["pyridinium"]["smiles"] == "c1cc[nH+]cc1" and rows["pyridinium"]["n_atoms"] == 6  # heavy atoms
    assert not rows["pentavalent"]["valid"] and "valence" in rows["pentavalent"]["error"].lower()
    assert rows["pentavalent"]["unstable_atoms"] == ["atom 0 C(+0): valence 5 not in (4,)"]
    assert not rows["bad_ring"]["valid"] and "kekulize" in rows["bad_ring"]["error"].lower()
    assert not rows["unclosed"]["parsed"] and rows["unclosed"]["error"].startswith("line 7: ")
    assert "parentheses" in rows["unclosed"]["error"]
    assert rows["two_fragments"]["valid"] and not rows["two_fragments"]["connected"]
    assert all(r["mmff_strain"] is None for r in data["records"])  # no coordinates, no 3-D metrics
    s = data["summary"]
    assert s["n_records"] == 7 and s["n_parsed"] == 6
    assert s["validity"] == pytest.approx(4 / 7) and s["validity_connected"] == pytest.approx(3 / 7)
    assert s["uniqueness"] == pytest.approx(3 / 4) and s["novelty"] == pytest.approx(1 / 3)  # c1cc[nH+]cc1 is new
    assert "bond_length_w1" not in s


@pytest.mark.parametrize(
    ("task", "backbone", "strategy"), [("joint", "egnn", "quotient"), ("conformer", "transformer", "kabsch")]
)
def test_train_sample_evaluate_end_to_end(tmp_path, task, backbone, strategy, capsys):
    data = write_sdf(
        tmp_path / "train.sdf",
        [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "OCCO", "CC#N", "COC"] * 2)],
    )
    run = tmp_path / "run"
    args = ["train", "--data", str(data), "--steps", "3", "--out", str(run), "--task", task, "--backbone", backbone]
    args += ["--strategy", strategy, "--hidden", "16", "--layers", "1", "--batch-size", "4", "--no-progress"]
    assert main([*args, "--ema-decay", "0.9"]) == 0
    assert (run / "model" / "model.safetensors").is_file() and (run / "run.json").is_file()
    assert json.loads((run / "run.json").read_text())["config"]["ema_decay"] == 0.9
    before = {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*args, "--ema-decay", "0.9", "--resume", "auto"]) == 0  # the finished run: nothing to train
    assert "already holds this run, finished; nothing to train" in capsys.readouterr().out
    assert {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    out = tmp_path / "s.sdf"
    sample = ["sample", "--run", str(run), "--n", "4", "--steps", "3", "--out", str(out), "--sampler", "sde"]
    if task == "conformer":
        (tmp_path / "g.smi").write_text("CCO\nCOC\n")
        sample += ["--graphs", str(tmp_path / "g.smi")]
    assert main(sample) == 0
    mols, report = read_sdf(out, sanitize=False)
    assert len(mols) == (8 if task == "conformer" else 4) and report.n_skipped == 0
    assert all(np.isfinite(m.coordinates).all() for m in mols)
    if task == "conformer":
        assert mols[0].to_smiles() == "CCO"
    xyz = tmp_path / "s.xyz"  # the same samples as XYZ frames (coordinates only)
    assert main([str(xyz) if a == str(out) else a for a in sample]) == 0
    frames = read_xyz(xyz)
    assert [f.num_atoms for f in frames] == [m.num_atoms for m in mols]
    np.testing.assert_allclose(frames[0].coordinates, mols[0].coordinates, atol=1e-4)
    capsys.readouterr()
    assert main([*sample, "--noise", "-1"]) == 2  # a negative SDE noise scale would take a complex square root
    assert "noise scale must be non-negative" in capsys.readouterr().err
    bad = tmp_path / "s.txt"
    assert main([str(bad) if a == str(out) else a for a in sample]) == 2 and not bad.exists()
    assert "written as SDF (.sdf) or XYZ (.xyz)" in capsys.readouterr().err
    if task == "joint":
        (tmp_path / "g.smi").write_text("CCO\n")
        assert main([*sample, "--graphs", str(tmp_path / "g.smi")]) == 2
        assert "--graphs is for conformer runs" in capsys.readouterr().err
    else:  # unreadable graphs are reported with their line and reason, then skipped or fatal by --on-error
        (tmp_path / "g.smi").write_text("CCO\nC1CC\nCOC\n")
        mixed = tmp_path / "mixed.sdf"
        assert main([str(mixed) if a == str(out) else a for a in sample]) == 0
        err = capsys.readouterr().err
        assert "2 records read, 1 skipped" in err and "record 1 (line 2): unclosed ring" in err
        assert len(read_sdf(mixed, sanitize=False)[0]) == 8
        assert main([*sample, "--on-error", "raise"]) == 2
        assert "record 1 (line 2): unclosed ring" in capsys.readouterr().err
        (tmp_path / "g.smi").write_text("")
        assert main(sample) == 2
        assert "holds no readable molecular graphs" in capsys.readouterr().err
        assert len(read_sdf(out, sanitize=False)[0]) == 8  # the earlier output is untouched
        (tmp_path / "g.smi").write_text("CCO\n[Na+].[Cl-] salt\n")  # an atom the model never saw
        assert main(sample) == 2
        assert "g.smi: molecular graph 2 (salt): atom Na(+1) is not in" in capsys.readouterr().err
        (tmp_path / "g.smi").write_text("CCO\nCOC\n")
    meta = json.loads((run / "run.json").read_text())
    broken = tmp_path / "broken"
    (broken / "model").mkdir(parents=True)
    (broken / "run.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "config"}))
    assert main([str(broken) if a == str(run) else a for a in sample]) == 2
    assert "run.json' lacks the field 'config'" in capsys.readouterr().err
    (broken / "run.json").write_text(json.dumps(meta | {"sizes": {"3": float("inf")}}))  # was an OverflowError
    assert main([str(broken) if a == str(run) else a for a in sample]) == 2
    assert "run.json' has a malformed config, vocabulary or size table" in capsys.readouterr().err
    if torch.cuda.is_available():  # noise is drawn on the CPU stream, so the GPU repeats the CPU's conformers
        on_gpu = tmp_path / "gpu.sdf"
        assert main([str(on_gpu) if a == str(out) else a for a in sample] + ["--device", "cuda"]) == 0
        gpu_mols, _ = read_sdf(on_gpu, sanitize=False)
        assert len(gpu_mols) == len(mols)
        if task == "conformer":
            for m, g in zip(mols, gpu_mols):
                np.testing.assert_allclose(g.coordinates, m.coordinates, atol=1e-3)
    ev = tmp_path / "e.json"
    assert main(["evaluate", str(out), "--json", str(ev), "--reference", str(run), "--no-fcd", "--no-progress"]) == 0
    s = json.loads(ev.read_text())["summary"]
    assert s["validity"] is not None and s["atom_stability"] is not None


def test_conformer_run_with_the_harmonic_prior_trains_and_samples(tmp_path, capsys):
    data = write_sdf(tmp_path / "train.sdf", [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"] * 2)])
    run = tmp_path / "run"
    args = ["train", "--data", str(data), "--steps", "3", "--out", str(run), "--task", "conformer"]
    args += ["--hidden", "16", "--layers", "1", "--batch-size", "4", "--no-progress", "--prior", "harmonic"]
    assert main([*args, "--prior-alpha", "1.5"]) == 0
    cfg = json.loads((run / "run.json").read_text())["config"]
    assert cfg["prior"] == "harmonic" and cfg["prior_alpha"] == 1.5
    (tmp_path / "g.smi").write_text("CCO\nCOC\n")
    for sampler in ("ode", "sde"):
        out = tmp_path / f"{sampler}.sdf"
        sample = ["sample", "--run", str(run), "--n", "3", "--steps", "3", "--out", str(out), "--sampler", sampler]
        assert main([*sample, "--graphs", str(tmp_path / "g.smi")]) == 0
        mols, _ = read_sdf(out, sanitize=False)
        assert len(mols) == 6 and all(np.isfinite(m.coordinates).all() for m in mols)
    capsys.readouterr()
    joint = tmp_path / "joint"
    assert main(["train", "--data", str(data), "--steps", "3", "--out", str(joint), "--prior", "harmonic"]) == 2
    assert "harmonic prior is built from the bonds" in capsys.readouterr().err and not joint.exists()


def test_heavy_atom_model_trains_samples_and_scores_without_hydrogen_atoms(tmp_path):
    data = write_sdf(tmp_path / "train.sdf", [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"] * 2)])
    run = tmp_path / "run"
    args = ["train", "--data", str(data), "--steps", "3", "--out", str(run), "--hydrogens", "implicit"]
    assert main([*args, "--hidden", "16", "--layers", "1", "--batch-size", "4", "--no-progress"]) == 0
    meta = json.loads((run / "run.json").read_text())
    assert meta["config"]["hydrogens"] == "implicit" and "H" not in meta["vocabulary_labels"]
    assert set(map(int, meta["sizes"])) == {3}
    reference, _ = read_sdf(run / "reference.sdf")
    assert all((m.atomic_numbers != 1).all() for m in reference)
    out = tmp_path / "s.sdf"
    assert main(["sample", "--run", str(run), "--n", "6", "--steps", "3", "--out", str(out), "--no-progress"]) == 0
    mols, _ = read_sdf(out, sanitize=False)
    assert len(mols) == 6 and all(m.num_atoms == 3 and (m.atomic_numbers != 1).all() for m in mols)
    ev = tmp_path / "e.json"
    assert main(["evaluate", str(out), "--json", str(ev), "--no-fcd", "--no-strain", "--no-progress"]) == 0
    rows = json.loads(ev.read_text())["records"]
    # the SDF carries no hydrogen atoms; the reader derives the counts (RDKit's implicit valence) as sampling
    # did, so an atom can only be unstable by being over-valent, never under-valent
    assert sum(int(m.num_hs.sum()) for m in mols) > 0  # hydrogens are there, as counts
    reasons = [u for row in rows for u in row["unstable_atoms"]]
    for reason in reasons:
        valence, allowed = re.search(r"valence (\S+) not in \(([\d, ]+)\)", reason).groups()
        assert float(valence) > max(int(a) for a in allowed.split(",") if a.strip()), reason


def test_train_reads_a_yaml_config_and_flags_override_it(tmp_path, capsys):
    data = write_sdf(tmp_path / "train.sdf", [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "COC", "CC=O"])])
    cfg = tmp_path / "run.yaml"
    cfg.write_text("token_weight: 0.25\nhidden: 16\nlayers: 1\nbatch_size: 4\nsteps: 50\nstrategy: kabsch\n")
    run = tmp_path / "run"
    args = ["train", "--data", str(data), "--config", str(cfg), "--steps", "2", "--out", str(run), "--no-progress"]
    assert main(args) == 0
    saved = json.loads((run / "run.json").read_text())["config"]
    # token_weight has no flag; --steps overrides the file's 50; the rest are the file's or the defaults
    assert (saved["token_weight"], saved["steps"], saved["hidden"], saved["strategy"]) == (0.25, 2, 16, "kabsch")
    assert (saved["backbone"], saved["progress"]) == ("egnn", False)
    cfg.write_text("token_wieght: 0.25\n")
    capsys.readouterr()
    assert main([*args[:-3], "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert "run.yaml: unknown field(s) token_wieght" in err and "Traceback" not in err
    assert not (tmp_path / "r2").exists()


def test_train_refuses_bad_input_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", "x.sdf", "--out", str(tmp_path), "--strategy", "nope"])
    assert exc.value.code == 2
    assert main(["train", "--data", "x.csv", "--out", str(tmp_path / "r")]) == 2
    assert "--data must be 'qm9' or an .sdf file" in capsys.readouterr().err
    assert main(["train", "--data", "x.sdf", "--out", str(tmp_path / "r"), "--ema-decay", "1"]) == 2
    assert "ema_decay must be in [0, 1), got 1.0." in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_prepare_conformers_from_a_smiles_file(tmp_path, capsys):
    smi = tmp_path / "in.smi"
    smi.write_text("CCO ethanol\nC1CC broken\nc1ccccc1O phenol\n")
    out = tmp_path / "confs.sdf"
    assert main(["prepare", "--data", str(smi), "--conformers", "2", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "2 records read, 1 skipped" in printed and "line 2" in printed
    mols, _ = read_sdf(out)
    assert [m.name for m in mols] == ["ethanol_conf0", "ethanol_conf1", "phenol_conf0", "phenol_conf1"]
    assert all(m.coordinates is not None and (m.atomic_numbers == 1).any() for m in mols)
    capsys.readouterr()
    bad = tmp_path / "neg.sdf"
    assert main(["prepare", "--data", str(smi), "--conformers", "-1", "--out", str(bad), "--no-progress"]) == 2
    assert "conformers per molecule must be positive, got -1" in capsys.readouterr().err and not bad.exists()
    assert main(["evaluate", str(out), "--rows", "-1", "--no-progress"]) == 2
    assert "--rows must be 0 or more" in capsys.readouterr().err


def test_depictions_are_written_for_valid_and_invalid_molecules(tmp_path):
    from genmol.demo import depict

    ch5 = Molecule([6, 1, 1, 1, 1, 1], [0] * 6, [[0, k] for k in range(1, 6)], [1.0] * 5, [0] * 6)
    depict([embedded("c1cc[nH+]cc1", 0), ch5], tmp_path / "d.png", ["pyridinium", "CH5"])
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sample_on_cuda_without_cuda_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "s.sdf"
    assert main(["sample", "--run", str(tmp_path), "--out", str(out), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no usable CUDA device" in err[0]
    assert not out.exists()


def test_prepare_reads_sdf_and_refuses_input_without_molecules(tmp_path, capsys):
    sdf = write_sdf(tmp_path / "in.sdf", [embedded("CCO", 0, "ethanol"), embedded("c1cc[nH+]cc1", 0, "pyr")])
    out = tmp_path / "out.sdf"
    assert main(["prepare", "--data", str(sdf), "--out", str(out), "--no-progress"]) == 0  # not read as SMILES
    assert "2 records read, 0 skipped" in capsys.readouterr().out
    assert [m.to_smiles() for m in read_sdf(out)[0]] == ["CCO", "c1cc[nH+]cc1"]
    before = out.read_bytes()
    (tmp_path / "empty.smi").write_text("")
    for args in (["--data", str(tmp_path / "empty.smi")], ["--data", str(sdf), "--subset", "-1"]):
        assert main(["prepare", *args, "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("holds no readable molecules" in err[0] or "--subset must be" in err[0])
    assert out.read_bytes() == before


def test_evaluate_and_train_refuse_files_without_records_or_coordinates(tmp_path, capsys):
    for name in ("empty.sdf", "empty.smi"):
        (tmp_path / name).write_text("")
        out = tmp_path / "e.json"
        assert main(["evaluate", str(tmp_path / name), "--json", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name}' holds no records" in err[0] and not out.exists()
    flat = write_sdf(tmp_path / "flat.sdf", [Molecule.from_smiles(s, name=s) for s in ("CCO", "CCN", "COC")])
    assert main(["train", "--data", str(flat), "--steps", "2", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "flat.sdf': 3 of 3 molecules have no coordinates" in err and not (tmp_path / "r").exists()


def test_binary_inputs_and_bad_references_are_one_line_and_write_nothing(tmp_path, capsys):
    """A binary file under a molecule name (an image, an archive, weights) was read as records of garbage:
    ``evaluate`` scored it with exit 0, ``prepare`` and ``sample`` printed a skipped line per garbage line. A
    --reference folder that is not a run folder was ignored (novelty and FCD silently missing)."""
    binary = bytes(range(256)) * 8
    for name in ("b.sdf", "b.smi"):
        (tmp_path / name).write_bytes(binary)
    out = tmp_path / "keep.sdf"
    out.write_text("keep\n")
    good = write_sdf(tmp_path / "good.sdf", [embedded("CCO", 0, "ethanol"), embedded("CCN", 1, "ethylamine")])
    (tmp_path / "plain").mkdir()
    json_out = tmp_path / "e.json"
    runs = [
        ["evaluate", str(tmp_path / "b.sdf"), "--json", str(json_out)],
        ["evaluate", str(tmp_path / "b.smi"), "--json", str(json_out)],
        ["prepare", "--data", str(tmp_path / "b.smi"), "--out", str(out)],
        ["train", "--data", str(tmp_path / "b.sdf"), "--steps", "2", "--out", str(tmp_path / "r")],
        ["evaluate", str(good), "--json", str(json_out), "--no-fcd", "--reference", str(tmp_path / "plain")],
        ["evaluate", str(good), "--json", str(json_out), "--no-fcd", "--reference", str(tmp_path / "no_run")],
    ]
    messages = ["not a text file (it holds NUL bytes)"] * 4 + ["not a genmol run folder", "no_run' does not exist"]
    for args, message in zip(runs, messages, strict=True):
        assert main([*args, "--no-progress"]) == 2, args
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and "Traceback" not in captured.err, (args, captured.err)
    assert out.read_text() == "keep\n" and not json_out.exists() and not (tmp_path / "r").exists()


def test_train_leaves_no_folder_behind_when_an_engine_setting_is_refused(tmp_path, capsys):
    data = write_sdf(tmp_path / "t.sdf", [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "COC"])])
    for flag, value in (("--checkpoint-every", "-5"), ("--nproc", "0"), ("--resume", str(tmp_path / "missing"))):
        out = tmp_path / "r"
        args = ["train", "--data", str(data), "--steps", "2", "--out", str(out), flag, value, "--no-progress"]
        assert main(args) == 2
        assert "Traceback" not in capsys.readouterr().err and not out.exists(), flag


def test_prepare_refuses_a_worker_count_below_one_before_reading(tmp_path, capsys):
    smi = tmp_path / "in.smi"
    smi.write_text("CCO\n")
    for workers in ("0", "-2"):  # were run serially without a word
        args = ["prepare", "--data", str(smi), "--conformers", "1", "--workers", workers, "--no-progress"]
        assert main([*args, "--out", str(tmp_path / "o.sdf")]) == 2
        captured = capsys.readouterr()
        assert "--workers must be a positive number of processes" in captured.err and not captured.out
    assert not (tmp_path / "o.sdf").exists()


def test_no_verb_writes_its_output_over_a_file_it_reads(tmp_path, capsys):
    """``evaluate s.sdf --json s.sdf`` replaced the molecules with their scores, ``prepare --data m.sdf --subset 2
    --out m.sdf`` cut the source down to two molecules, ``sample --graphs g.sdf --out g.sdf`` replaced the graphs."""
    sdf = write_sdf(tmp_path / "m.sdf", [embedded(s, k, s) for k, s in enumerate(["CCO", "CCN", "COC"])])
    before = sdf.read_bytes()
    smiles = tmp_path / "g.smi"
    smiles.write_text("CCO\n")
    runs = [
        (["evaluate", str(sdf), "--json", str(sdf), "--no-fcd", "--no-strain"], "--json"),
        (["evaluate", str(smiles), "--reference", str(sdf), "--json", str(sdf)], "--json"),
        (["prepare", "--data", str(sdf), "--subset", "2", "--out", str(sdf)], "--out"),
        (["sample", "--run", str(tmp_path / "run"), "--graphs", str(sdf), "--out", str(sdf)], "--out"),
    ]
    for args, flag in runs:
        assert main([*args, "--no-progress"]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"genmol: error: {flag} {str(sdf)!r} is the input file {str(sdf)!r}, which writing it would destroy; "
            f"choose another {flag}."
        ], args
        assert sdf.read_bytes() == before


@pytest.mark.parametrize("value", ["-1", str(10**20)])
def test_a_seed_outside_the_range_is_refused_by_every_verb(tmp_path, capsys, value):
    """``sample --seed 10**20`` was a traceback from torch's generator; ``sample`` and ``prepare`` took -1 although
    ``train`` refused it."""
    sdf = write_sdf(tmp_path / "m.sdf", [embedded("CCO", 0, "ethanol")])
    verbs = [
        ["prepare", "--data", str(sdf), "--out", str(tmp_path / "p.sdf")],
        ["train", "--data", str(sdf), "--steps", "1", "--out", str(tmp_path / "run")],
        ["sample", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "s.sdf")],
    ]
    check_seed_refused(main, capsys, verbs, value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.sdf"]


def test_train_never_writes_into_another_commands_run_folder(tmp_path, capsys):
    """gengraph and genrl runs hold a run.json but no checkpoints/ at the top, so the engine let ``genmol train``
    into their folders, and its run.json replaced theirs: that run could not be sampled or evaluated again."""
    data = write_sdf(tmp_path / "t.sdf", [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "COC"])])
    run = tmp_path / "graphs"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"format": "gengraph.run", "config": {"model": "ggball"}}))
    before = (run / "run.json").read_bytes()
    argv = ["train", "--data", str(data), "--steps", "1", "--hidden", "8", "--layers", "1", "--out", str(run)]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    path = str(run / "run.json")
    assert err == [
        f"genmol: error: {path!r} lacks the field 'vocabulary'; it was not written by `genmol train`, so choose a new "
        "--out folder."
    ]
    assert (run / "run.json").read_bytes() == before and [p.name for p in run.iterdir()] == ["run.json"]


def test_evaluate_with_a_run_folder_measures_novelty_against_the_runs_training_smiles(tmp_path):
    train = [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"])]
    write_sdf(tmp_path / "d.sdf", train)
    args = ["--steps", "2", "--hidden", "8", "--layers", "1", "--no-progress"]
    assert main(["train", "--data", str(tmp_path / "d.sdf"), "--out", str(tmp_path / "run"), *args]) == 0
    write_sdf(tmp_path / "s.sdf", [embedded("CCO", 3), embedded("OCC#N", 0), embedded("CCN", 5), embedded("CCCC", 0)])
    flags = ["--reference", str(tmp_path / "run"), "--no-fcd", "--no-strain", "--no-progress"]
    assert main(["evaluate", str(tmp_path / "s.sdf"), "--json", str(tmp_path / "e.json"), *flags]) == 0
    summary = json.loads((tmp_path / "e.json").read_text())["summary"]
    assert summary["novelty"] == pytest.approx(0.5)  # OCC#N and CCCC are not among the training molecules


def test_sample_and_evaluate_never_write_over_the_run_folders_own_files(tmp_path, capsys):
    """``sample --run R --out R/reference.sdf`` replaced the run's training reference set (read by ``evaluate
    --reference R``) with the samples, and ``evaluate --reference R --json R/train_smiles.txt`` its training SMILES."""
    data = write_sdf(tmp_path / "train.sdf", [embedded(s, k) for k, s in enumerate(["CCO", "CCN", "CC=O", "COC"])])
    run = tmp_path / "run"
    args = ["train", "--data", str(data), "--steps", "2", "--out", str(run), "--hidden", "8", "--layers", "1"]
    assert main([*args, "--batch-size", "4", "--no-progress"]) == 0
    capsys.readouterr()
    reference, smiles = run / "reference.sdf", run / "train_smiles.txt"
    before = {p: p.read_bytes() for p in (reference, smiles)}
    runs = [
        (["sample", "--run", str(run), "--n", "2", "--steps", "2", "--out", str(reference)], "--out", reference),
        (
            ["evaluate", str(data), "--reference", str(run), "--json", str(smiles), "--no-fcd", "--no-strain"],
            "--json",
            smiles,
        ),
    ]
    for argv, flag, target in runs:
        assert main([*argv, "--no-progress"]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"genmol: error: {flag} {str(target)!r} is the input file {str(target)!r}, which writing it would destroy; "
            f"choose another {flag}."
        ], argv
    assert {p: p.read_bytes() for p in before} == before
