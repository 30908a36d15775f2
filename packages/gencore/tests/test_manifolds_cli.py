"""``gencore manifold compare``: records per (method, nfe), figures, and one-sentence errors."""

from __future__ import annotations

import json

import pytest

from gencore.cli import main


@pytest.mark.parametrize("manifold", ["sphere", "torus", "ball"])
def test_compare_writes_records_and_figures(tmp_path, manifold):
    out = tmp_path / "run.json"
    rc = main(
        [
            "manifold", "compare", "--manifold", manifold, "--methods", "rfm,gfm-lsd,gfm-psd,gfm-esd",
            "--nfe", "1,2", "--steps", "3", "--batch-size", "16", "--hidden", "8", "--n-eval", "32",
            "--json", str(out), "--out", str(tmp_path / "figs"), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    records = json.loads(out.read_text())["records"]
    assert [(r["method"], r["nfe"]) for r in records] == [
        (m, k) for m in ("rfm", "gfm-lsd", "gfm-psd", "gfm-esd") for k in (1, 2)
    ]
    assert all(isinstance(r["mmd"], float) for r in records)
    assert (tmp_path / "figs" / "run_samples.png").stat().st_size > 0
    assert (tmp_path / "figs" / "run_mmd.png").stat().st_size > 0


def test_unknown_method_is_one_sentence_and_exit_2(tmp_path, capsys):
    rc = main(
        ["manifold", "compare", "--manifold", "sphere", "--methods", "rfm,magic", "--json", str(tmp_path / "x.json")]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown method(s) magic" in err and "Traceback" not in err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("lr", ["inf", "-1", "nan"])
def test_a_non_finite_lr_is_refused_before_training(tmp_path, capsys, lr):
    # --lr inf trained to NaN and was reported as "MMD inputs contain NaN or inf."
    argv = ["manifold", "compare", "--methods", "rfm", "--steps", "2", "--n-eval", "8", "--no-progress"]
    assert main([*argv, "--lr", lr, "--json", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"gencore: error: lr must be a positive finite number, got {float(lr)}."]
    assert not (tmp_path / "x.json").exists()


def test_unknown_manifold_is_rejected_by_the_parser(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["manifold", "compare", "--manifold", "klein", "--json", str(tmp_path / "x.json")])
    assert exc.value.code == 2


def test_compare_reads_a_yaml_config_and_flags_override_it(tmp_path, capsys):
    cfg = tmp_path / "cmp.yaml"
    cfg.write_text("manifold: torus\nmethods: [rfm]\nnfe: [1, 3]\nsteps: 500\nbatch_size: 16\nhidden: 8\nn_eval: 32\n")
    out = tmp_path / "run.json"
    argv = ["manifold", "compare", "--config", str(cfg), "--steps", "2", "--json", str(out), "--no-progress"]
    assert main(argv) == 0
    config = json.loads(out.read_text())["config"]
    assert (config["manifold"], config["methods"], config["nfe"], config["steps"]) == ("torus", ["rfm"], [1, 3], 2)
    assert (config["hidden"], config["depth"], config["progress"]) == (8, 3, False)
    cfg.write_text("manifold: torus\nmethods: rfm,magic\n")
    assert main([*argv[:-3], "--json", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "unknown method(s) magic" in err and "Traceback" not in err
    assert not (tmp_path / "x.json").exists()
