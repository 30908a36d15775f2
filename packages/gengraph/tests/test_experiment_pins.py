"""Pins of the run pipeline by independent computations: what the prior trains on (the quantised codes of the
training split), the node counts a run records and samples, the data fingerprint, the evaluation's novelty
reference, and resuming a finished GGBall run with more autoencoder steps."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import networkx as nx
import pytest
import torch

import gengraph.experiment as experiment
from gencore.errors import ConfigError
from gengraph.cli import main
from gengraph.datasets import generate, split
from gengraph.experiment import RunConfig, _size_mask, data_fingerprint, load_latent_run, sample_run, train_run
from gengraph.graph import Graph
from gengraph.models.ggball import GGBall

TINY = RunConfig(steps=3, prior_steps=2, batch_size=4, codebook_size=8, hidden=16, prior_hidden=16, progress=False)


def _files(folder) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _nearest_code_gap(points: torch.Tensor, codes: torch.Tensor) -> float:
    """Largest distance from a point to its nearest codebook row, by brute force over the rows."""
    return float(torch.cdist(points.double(), codes.double()).min(1).values.max())


def test_the_prior_learns_the_quantised_codes_of_the_training_graphs(tmp_path, monkeypatch) -> None:
    """The flow prior's data are codebook points (not the unquantised latents), one set per training graph with
    its node count; the masked prior's data are the indices of those same points; sampling decodes code points."""
    seen: dict[str, tuple] = {}

    class Recording(experiment.Trainer):
        def fit(self, task, data):
            seen[f"{self.cfg.out_dir}"] = data.tensors
            return super().fit(task, data)

    monkeypatch.setattr(experiment, "Trainer", Recording)
    graphs = generate("community-small", 8, seed=0)
    flow = train_run(TINY, graphs, tmp_path / "flow")
    masked = train_run(replace(TINY, prior="masked-codes"), graphs, tmp_path / "masked")
    ae, _ = load_latent_run(flow)
    codes = ae.codebook.codes
    zq, mask = seen[str(flow / "prior")]
    assert mask.sum(1).tolist() == [g.n_nodes for g in graphs]
    assert _nearest_code_gap(zq[mask], codes) < 1e-5
    # the same seed trains the same autoencoder whatever the prior: the masked prior's indices name those points
    index, index_mask = seen[str(masked / "prior")]
    assert torch.equal(index_mask, mask)
    torch.testing.assert_close(codes[index[mask]], zq[mask], atol=1e-5, rtol=0)
    decoded = []
    original = GGBall.decode_graphs

    def recording(self, zq, mask, generator=None):
        decoded.append((zq, mask))
        return original(self, zq, mask, generator=generator)

    monkeypatch.setattr(GGBall, "decode_graphs", recording)
    for run in (flow, masked):
        decoded.clear()
        sample_run(run, 3, seed=1, steps=2)
        assert decoded and all(_nearest_code_gap(z[m], codes) < 1e-5 for z, m in decoded)


def test_resuming_with_more_autoencoder_steps_is_refused_while_a_prior_exists(tmp_path) -> None:
    """``--resume auto --steps`` larger than a finished GGBall run's trained the autoencoder on and kept the prior
    trained on the old autoencoder's codes (its stage had reached its step count): the run sampled from a prior of
    other codes. Now it is refused and nothing is written; more prior steps alone still resume."""
    graphs = generate("community-small", 8, seed=0)
    run = train_run(TINY, graphs, tmp_path / "g")
    before = _files(run)
    with pytest.raises(ConfigError, match=r"trained on the codes of its 3-step autoencoder.*keep --steps 3"):
        train_run(replace(TINY, steps=5), graphs, run, resume="auto")
    assert _files(run) == before
    autoencoder = _files(run / "autoencoder" / "model")
    train_run(replace(TINY, prior_steps=3), graphs, run, resume="auto")
    assert _files(run / "autoencoder" / "model") == autoencoder
    assert json.loads((run / "run.json").read_text())["config"]["prior_steps"] == 3


def test_train_reads_the_train_split_and_records_its_node_counts(tmp_path) -> None:
    run = tmp_path / "d"
    argv = ["train", "--data", "community-small", "--model", "digress", "--steps", "1", "--batch-size", "8"]
    assert main([*argv, "--no-progress", "--out", str(run)]) == 0
    info = json.loads((run / "run.json").read_text())
    train = split(generate("community-small"), "train")
    assert info["n_train_graphs"] == len(train) == 64
    assert info["node_counts"] == {str(k): v for k, v in Counter(g.n_nodes for g in train).items()}
    assert info["n_max"] == max(g.n_nodes for g in train)


def test_sampled_node_counts_follow_the_training_histogram() -> None:
    info = {"node_counts": {"2": 3, "4": 1, "6": 2}, "n_max": 7}
    mask = _size_mask(info, 30000, torch.Generator().manual_seed(0))
    sizes = mask.sum(1)
    assert torch.equal(mask, torch.arange(7)[None, :] < sizes[:, None])  # real nodes first
    freq = {k: float((sizes == k).double().mean()) for k in (2, 4, 6)}
    assert sum(freq.values()) == 1.0
    assert freq == pytest.approx({2: 3 / 6, 4: 1 / 6, 6: 2 / 6}, abs=0.01)


def test_the_data_fingerprint_sees_edge_types_node_order_and_graph_order() -> None:
    a = Graph(n_nodes=3, edges=[(0, 1), (1, 2)], node_types=[0, 1, 1], edge_types=[0, 1])
    b = Graph(n_nodes=2, edges=[(0, 1)])
    same = data_fingerprint([a, b])
    assert same == data_fingerprint([Graph(**a.to_dict()), Graph(**b.to_dict())])
    retyped = Graph(n_nodes=3, edges=[(0, 1), (1, 2)], node_types=[0, 1, 1], edge_types=[1, 0])
    relabelled = Graph(n_nodes=3, edges=[(1, 0), (0, 2)], node_types=[1, 0, 1], edge_types=[0, 1])
    for other in ([retyped, b], [relabelled, b], [b, a]):
        assert data_fingerprint(other) != same


def test_evaluate_scores_novelty_against_the_train_split_and_the_test_split_by_default(tmp_path, capsys) -> None:
    files = {}
    for which in ("train", "test"):
        files[which] = tmp_path / f"{which}.json"
        assert main(["data", "--dataset", "community-small", "--split", which, "--out", str(files[which])]) == 0
    train, test = split(generate("community-small"), "train"), split(generate("community-small"), "test")
    seen = [nx.Graph(g.to_networkx()) for g in train]
    novel = sum(not any(nx.is_isomorphic(nx.Graph(g.to_networkx()), t) for t in seen) for g in test) / len(test)
    records = {}
    for which, path in files.items():
        out = tmp_path / f"m-{which}.json"
        argv = ["evaluate", "--reference", "community-small", "--generated", str(path), "--json", str(out)]
        assert main([*argv, "--metrics", "degree_mmd_gaussian_tv"]) == 0
        records[which] = json.loads(out.read_text())
    assert records["train"]["novel"] == 0.0 and records["test"]["novel"] == pytest.approx(novel)
    assert records["test"]["degree_mmd_gaussian_tv"] == pytest.approx(0.0, abs=1e-12)  # the reference is the test split
    assert records["test"]["n_reference"] == len(test)


def test_the_demo_scores_its_samples_against_the_test_split_and_writes_its_report(tmp_path, capsys) -> None:
    from gengraph.io import read_graph_set

    out = tmp_path / "demo"
    assert main(["demo", "--steps", "3", "--no-progress", "--out", str(out)]) == 0
    train, test = split(generate("community-small"), "train"), split(generate("community-small"), "test")
    generated = read_graph_set(out / "generated.json")
    record = json.loads((out / "metrics.json").read_text())
    assert len(generated) == record["n_generated"] == 40 and record["n_reference"] == len(test) == 20
    assert {g.n_nodes for g in generated} <= {g.n_nodes for g in train}
    assert record["mean_nodes"] == pytest.approx(sum(g.n_nodes for g in generated) / 40)
    text = (out / "README.md").read_text()
    assert f"trained on the {len(train)} training graphs" in text and f"against the {len(test)} test graphs" in text
    assert (out / "graphs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a second demo with other --steps into the folder would train the autoencoder on under the old prior
    run = _files(out / "run")
    assert main(["demo", "--steps", "4", "--no-progress", "--out", str(out)]) == 2
    assert "keep --steps 3" in capsys.readouterr().err and _files(out / "run") == run


def test_each_batch_of_a_sample_draws_fresh_noise(tmp_path) -> None:
    """One generator runs through every batch: batches of one graph each, all of one size, are not copies."""
    from gengraph.experiment import RUN_FORMAT_VERSION
    from gengraph.models.digress import DigressConfig, DigressDenoiser

    run = tmp_path / "run"
    torch.manual_seed(0)
    DigressDenoiser(
        DigressConfig(n_node_types=1, n_edge_types=1, n_max=6, hidden=8, heads=2, layers=1)
    ).save_pretrained(run / "denoiser" / "model")
    info = {
        "format": "gengraph.run", "format_version": RUN_FORMAT_VERSION, "config": {"model": "digress"}, "n_max": 6,
        "n_node_types": 1, "n_edge_types": 1, "node_counts": {"6": 1}, "node_marginal": [1.0],
        "edge_marginal": [0.5, 0.5],
    }  # fmt: skip
    (run / "run.json").write_text(json.dumps(info))
    drawn = [json.dumps(g.to_dict(), sort_keys=True) for g in sample_run(run, 6, seed=0, steps=2, batch_size=1)]
    assert len(set(drawn)) > 1
