"""Bad input to the ``gengraph`` command: one sentence on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import json

from gencore.testing import check_seed_refused
from gengraph.cli import main
from gengraph.experiment import RUN_FORMAT_VERSION


def _run_json(**fields) -> dict:
    info = {
        "format": "gengraph.run",
        "format_version": RUN_FORMAT_VERSION,
        "config": {"model": "ggball"},
        "n_max": 4,
        "node_counts": {"3": 2, "4": 1},
    }
    return {k: v for k, v in (info | fields).items() if v is not None}


def test_a_damaged_run_json_is_one_line_exit_2_before_any_model_loads(tmp_path, capsys) -> None:
    """``sample`` read run.json's fields unchecked: a missing ``n_max`` was a KeyError traceback, an unknown model
    sampled as GGBall, a JSON list an AttributeError."""
    run = tmp_path / "run"
    run.mkdir()
    cases = [
        (_run_json(n_max=None), "field 'n_max' must be a positive integer, got None"),
        (_run_json(n_max="4"), "field 'n_max' must be a positive integer"),
        (_run_json(config={"model": "bogus"}), "field 'config.model' must be one of ggball"),
        (_run_json(config=None), "field 'config.model' must be one of"),
        (_run_json(node_counts={"9": 1}), "field 'node_counts' must map node counts up to n_max (4)"),
        (_run_json(node_counts={}), "field 'node_counts'"),
        (_run_json(node_counts=None), "field 'node_counts'"),
        (_run_json(config={"model": "digress"}), "field 'node_marginal' must be a list of probabilities"),
        ([1, 2], "not a gengraph run description"),
    ]
    for info, message in cases:
        (run / "run.json").write_text(json.dumps(info))
        out = tmp_path / "g.json"
        assert main(["sample", "--run", str(run), "--n", "2", "--steps", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "run.json" in err[0] and message in err[0], (info, err)
        assert not out.exists()


def test_evaluate_and_sample_never_write_over_a_file_they_read(tmp_path, capsys) -> None:
    """``evaluate --json`` naming the --generated (or --reference) graph set replaced the graphs with the metrics, and
    ``sample --out RUN/run.json`` replaced the run's description with samples (the run could not be sampled again)."""
    graphs = tmp_path / "graphs.json"
    assert main(["data", "--dataset", "community-small", "--split", "test", "--out", str(graphs)]) == 0
    before = graphs.read_bytes()
    capsys.readouterr()
    for flag in ("--generated", "--reference"):
        other = "--reference" if flag == "--generated" else "--generated"
        argv = ["evaluate", flag, str(graphs), other, "community-small", "--json", str(graphs)]
        assert main([*argv, "--metrics", "degree_mmd_gaussian_tv"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"gengraph: error: --json {str(graphs)!r} is the input file {str(graphs)!r}, which writing it would "
            "destroy; choose another --json."
        ]
        assert graphs.read_bytes() == before
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps(_run_json()))
    description = (run / "run.json").read_bytes()
    assert main(["sample", "--run", str(run), "--n", "2", "--steps", "1", "--out", str(run / "run.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and "is the input file" in err[0], err
    assert (run / "run.json").read_bytes() == description


def test_a_seed_outside_the_range_is_refused_by_every_verb(tmp_path, capsys) -> None:
    """--seed 10**20 was a traceback from torch's generator in train and sample; -1 sampled although data and
    evaluate refused it."""
    verbs = [
        ["data", "--dataset", "community-small", "--out", str(tmp_path / "d.json")],
        ["train", "--data", "community-small", "--steps", "1", "--out", str(tmp_path / "run")],
        ["sample", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "s.json")],
        ["evaluate", "--reference", "community-small", "--generated", "community-small"],
    ]
    for value in ("-1", str(10**20)):
        check_seed_refused(main, capsys, verbs, value)
    assert list(tmp_path.iterdir()) == []


def test_train_refuses_an_option_the_chosen_model_does_not_read(tmp_path, capsys) -> None:
    """``--model digress`` with GGBall's --latent-dim, --prior or --code-repulsion trained DiGress and ignored them
    without a word (as GGBall ignored --no-digress-extra-features, and the flat ablation --curvature); given
    explicitly, each is refused."""
    cases = [
        (["--model", "digress", "--latent-dim", "8"], "--latent-dim is an option of the GGBall models"),
        (["--model", "digress", "--prior", "flow"], "--prior is an option of the GGBall models"),
        (["--model", "digress", "--code-repulsion", "0"], "--code-repulsion is an option of the GGBall models"),
        (["--model", "digress", "--prior-distance-bias"], "--prior-distance-bias is an option of the GGBall"),
        (["--no-digress-extra-features"], "--no-digress-extra-features is an option of DiGress; --model ggball"),
        (["--model", "ggball-euclidean", "--curvature", "2"], "--curvature is an option of the Poincare-ball model"),
    ]
    for argv, message in cases:
        out = tmp_path / "run"
        assert main(["train", "--data", "community-small", "--steps", "1", *argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and "does not use it" in err[0], (argv, err)
        assert not out.exists()
