"""The run pipeline end to end on small cases: typed dense batches and their padding, a typed sampled set written
and read back, the node counts of sampled graphs, and resuming into a folder that holds another model's run."""

from __future__ import annotations

import json

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gengraph.batch import pack, unpack
from gengraph.cli import main
from gengraph.datasets import generate
from gengraph.experiment import RUN_FORMAT_VERSION, RunConfig, _size_mask, read_run, sample_run, train_run
from gengraph.graph import Graph
from gengraph.io import read_graph_set, read_graphml
from gengraph.models.digress import DigressConfig, DigressDenoiser


def _typed() -> list[Graph]:
    return [
        Graph(n_nodes=4, edges=[(0, 1), (1, 2), (2, 3), (0, 3)], node_types=[0, 2, 1, 2], edge_types=[1, 0, 2, 1]),
        Graph(n_nodes=2, edges=[(0, 1)], node_types=[1, 1], edge_types=[2]),
        Graph(n_nodes=3, node_types=[2, 0, 1]),
    ]


def _same(a: Graph, b: Graph) -> bool:
    return (
        a.n_nodes == b.n_nodes
        and a.directed == b.directed
        and torch.equal(a.edges, b.edges)
        and torch.equal(a.node_types, b.node_types)
        and torch.equal(a.edge_types, b.edge_types)
    )


def test_typed_graphs_survive_packing_and_padding_never_leaks() -> None:
    graphs = _typed()
    edges, nodes, mask = pack(graphs, 6)
    assert mask.sum(1).tolist() == [4, 2, 3]
    assert (edges * ~(mask[:, :, None] & mask[:, None, :]) == 0).all() and (nodes * ~mask == 0).all()
    assert all(_same(a, b) for a, b in zip(graphs, unpack(edges, nodes, mask), strict=True))
    # whatever a sampler leaves on the padding (edges to and between masked nodes, their types) is dropped
    pair = mask[:, :, None] & mask[:, None, :]
    noisy_edges, noisy_nodes = torch.where(pair, edges, 2), torch.where(mask, nodes, 1)
    assert all(_same(a, b) for a, b in zip(graphs, unpack(noisy_edges, noisy_nodes, mask), strict=True))
    # a mask need not be a prefix: the kept nodes are renumbered in order
    scattered = torch.tensor([[True, False, True, False, True, True, False, False]])
    dense = torch.zeros(1, 8, 8, dtype=torch.long)
    dense[0, 0, 2] = dense[0, 2, 0] = 2
    dense[0, 4, 5] = dense[0, 5, 4] = 1
    dense[0, 1, 3] = dense[0, 3, 1] = 1  # between two masked nodes
    types = torch.tensor([[1, 9, 0, 9, 2, 1, 9, 9]])
    (back,) = unpack(dense, types, scattered)
    assert _same(back, Graph(n_nodes=4, edges=[(0, 1), (2, 3)], edge_types=[1, 0], node_types=[1, 0, 2, 1]))


def _typed_digress_run(tmp_path):
    run = tmp_path / "run"
    torch.manual_seed(0)
    cfg = DigressConfig(n_node_types=3, n_edge_types=2, n_max=6, hidden=8, heads=2, layers=1)
    DigressDenoiser(cfg).save_pretrained(run / "denoiser" / "model")
    info = {
        "format": "gengraph.run", "format_version": RUN_FORMAT_VERSION, "config": {"model": "digress"}, "n_max": 6,
        "n_node_types": 3, "n_edge_types": 2, "node_counts": {"2": 3, "4": 1, "6": 2},
        "node_marginal": [0.3, 0.3, 0.4], "edge_marginal": [0.4, 0.3, 0.3],
    }  # fmt: skip
    (run / "run.json").write_text(json.dumps(info))
    return run


def test_a_sampled_typed_set_reads_back_as_sampled_with_the_drawn_node_counts(tmp_path) -> None:
    run = _typed_digress_run(tmp_path)
    drawn = sample_run(run, 12, seed=3, steps=2, batch_size=5)
    # the node counts are the size draws of the run's histogram: no padding node is kept, none is lost
    sizes = _size_mask(read_run(run), 12, torch.Generator().manual_seed(3)).sum(1).tolist()
    assert [g.n_nodes for g in drawn] == sizes
    assert any(bool(g.node_types.any()) for g in drawn) and any(bool((g.edge_types > 0).any()) for g in drawn)
    assert all((g.edge_types <= 1).all() and (g.node_types <= 2).all() for g in drawn)
    out = tmp_path / "g.json"
    argv = ["sample", "--run", str(run), "--n", "12", "--seed", "3", "--steps", "2", "--batch-size", "5"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    back = read_graph_set(out)
    assert len(back) == 12 and all(_same(a, b) for a, b in zip(drawn, back, strict=True))
    one = tmp_path / "one.graphml"
    argv = ["sample", "--run", str(run), "--n", "1", "--seed", "3", "--steps", "2", "--no-progress"]
    assert main([*argv, "--out", str(one)]) == 0
    assert _same(read_graphml(one), sample_run(run, 1, seed=3, steps=2)[0])


def test_resuming_into_another_models_run_is_refused_and_leaves_it_untouched(tmp_path) -> None:
    """``--resume auto`` with another ``--model`` trained the new model beside the finished run's stages and
    replaced its run.json: the GGBall run then sampled as DiGress."""
    graphs = generate("community-small", 8, seed=0)
    run = tmp_path / "g"
    cfg = RunConfig(steps=2, prior_steps=2, batch_size=4, codebook_size=8, hidden=16, progress=False)
    train_run(cfg, graphs, run)
    before = {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    digress = RunConfig(model="digress", steps=2, batch_size=4, progress=False)
    with pytest.raises(ConfigError, match=r"holds the autoencoder stage of another model, not of digress"):
        train_run(digress, graphs, run, resume="auto")
    assert {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    (tmp_path / "d" / "denoiser").mkdir(parents=True)  # an interrupted DiGress run
    with pytest.raises(ConfigError, match=r"holds the denoiser stage of another model, not of ggball"):
        train_run(cfg, graphs, tmp_path / "d", resume="auto")
    assert not (tmp_path / "d" / "autoencoder").exists()


def test_digress_refuses_a_training_set_without_node_pairs(tmp_path) -> None:
    """Single-node graphs only: the edge-class marginal was 0 / 0, NaN, and the run failed with gencore's
    sentence about the marginal that named neither the data nor the cause."""
    graphs = [Graph(n_nodes=1), Graph(n_nodes=1, node_types=[1])]
    with pytest.raises(InputError, match="every training graph has a single node"):
        train_run(RunConfig(model="digress", steps=2, batch_size=2, progress=False), graphs, tmp_path / "r")


def test_a_finished_run_resumed_on_other_graphs_is_not_the_same_run(tmp_path) -> None:
    """A run's identity holds its training graphs' fingerprint: ``--resume auto`` on a finished run of other graphs
    (a file changed, or a procedural set's generator) reported "finished" and kept the old model. Now the run is
    not finished on them, and resuming its stages is refused by name; on the same graphs it is finished."""
    from gengraph.experiment import is_finished

    graphs = generate("community-small", 8, seed=0)
    run = tmp_path / "d"
    cfg = RunConfig(model="digress", steps=2, batch_size=4, progress=False)
    train_run(cfg, graphs, run)
    assert json.loads((run / "run.json").read_text())["data_sha256"]
    assert is_finished(cfg, run, graphs)
    assert train_run(cfg, graphs, run, resume="auto") == run  # nothing to train
    other = generate("community-small", 8, seed=1)
    assert not is_finished(cfg, run, other)
    with pytest.raises(ConfigError, match=r"data_sha256"):
        train_run(cfg, other, run, resume="auto")
    flipped = [
        Graph(n_nodes=g.n_nodes, edges=g.edges, node_types=g.node_types + 1, edge_types=g.edge_types) for g in graphs
    ]
    assert not is_finished(cfg, run, flipped)  # the same structure with other node types is other data


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"n": 2.5}, "the number of graphs must be a positive integer, got 2.5"),
        ({"n": 4, "batch_size": True}, "the batch size must be a positive integer, got True"),
        ({"n": 4, "seed": -1}, "seed"),
    ],
)
def test_sample_run_refuses_non_integer_counts_in_one_sentence(tmp_path, kw, message) -> None:
    """``sample_run(run, 2.5)`` failed inside torch with a traceback; the CLI passes integers, the API may not."""
    graphs = generate("community-small", 8, seed=0)
    run = train_run(RunConfig(model="digress", steps=1, batch_size=4, progress=False), graphs, tmp_path / "d")
    with pytest.raises(ConfigError, match=message):
        sample_run(run, steps=1, **kw)
