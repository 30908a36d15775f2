"""Bad input to the ``gengraph`` command: one sentence on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import json

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
