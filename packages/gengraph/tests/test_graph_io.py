"""The graph container, its conversions, and graph-set / edge-list / GraphML files with their errors."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from gencore.errors import InputError
from gengraph.cli import main
from gengraph.graph import Graph
from gengraph.io import (
    load_graphs,
    read_edgelist,
    read_graph_set,
    read_graphml,
    write_edgelist,
    write_graph_set,
    write_graphml,
)


def _typed() -> Graph:
    return Graph(
        n_nodes=4,
        edges=[[1, 0], [2, 3], [1, 2]],
        node_types=[0, 2, 1, 0],
        edge_types=[1, 0, 2],
        node_features=torch.arange(8.0).reshape(4, 2),
    )


def test_container_canonicalises_and_validates() -> None:
    g = _typed()
    assert g.edges.tolist() == [[0, 1], [1, 2], [2, 3]]
    assert g.edge_types.tolist() == [1, 2, 0]  # types follow their edges through the sort
    a = g.adjacency(typed=True)
    assert torch.equal(a, a.T) and a[0, 1] == 2 and a[1, 2] == 3
    with pytest.raises(InputError, match="self-loops"):
        Graph(n_nodes=2, edges=[[1, 1]])
    with pytest.raises(InputError, match="twice"):
        Graph(n_nodes=2, edges=[[0, 1], [1, 0]])
    with pytest.raises(InputError, match=r"\[0, 2\)"):
        Graph(n_nodes=2, edges=[[0, 2]])


def test_networkx_pyg_dict_roundtrips() -> None:
    g = _typed()
    for h in (Graph.from_networkx(g.to_networkx()), Graph.from_pyg(g.to_pyg()), Graph.from_dict(g.to_dict())):
        assert torch.equal(h.edges, g.edges) and torch.equal(h.edge_types, g.edge_types)
        assert torch.equal(h.node_types, g.node_types)
        torch.testing.assert_close(h.node_features, g.node_features)
    assert g.to_pyg().edge_index.shape == (2, 6)  # both directions
    d = Graph(n_nodes=3, edges=[[2, 0], [0, 1]], directed=True)
    assert d.edges.tolist() == [[0, 1], [2, 0]]
    assert isinstance(d.to_networkx(), nx.DiGraph)


def test_graph_set_file_roundtrip_and_errors(tmp_path) -> None:
    graphs = [_typed(), Graph(n_nodes=3, edges=[[0, 1]])]
    path = write_graph_set(tmp_path / "g.json", graphs, note="x")
    back = read_graph_set(path)
    assert [b.n_edges for b in back] == [3, 1] and torch.equal(back[0].edge_types, graphs[0].edge_types)
    assert load_graphs(path)[1].n_nodes == 3
    bad = tmp_path / "bad.json"
    bad.write_text('{"graphs": [{"n_nodes": 2, "edges": [[0, 5]]}]}')
    with pytest.raises(InputError, match=r"bad.json: graph 0: edge endpoints"):
        read_graph_set(bad)
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_graph_set(bad)


def test_edgelist_and_graphml(tmp_path) -> None:
    el = tmp_path / "g.edgelist"
    el.write_text("# comment\na b\nb c 1\n\nc a\n")
    g = read_edgelist(el)
    assert g.n_nodes == 3 and g.n_edges == 3 and sorted(g.edge_types.tolist()) == [0, 0, 1]
    out = write_edgelist(tmp_path / "o.edgelist", g)
    assert torch.equal(read_edgelist(out).edges, g.edges)
    el.write_text("a b\nb c d e\n")
    with pytest.raises(InputError, match="line 2: expected 'u v' or 'u v type'"):
        read_edgelist(el)
    el.write_text("a a\n")
    with pytest.raises(InputError, match="line 1: self-loop"):
        read_edgelist(el)
    el.write_text("a b x\n")
    with pytest.raises(InputError, match="edge type must be an integer"):
        read_edgelist(el)
    gm = write_graphml(tmp_path / "g.graphml", _typed())
    h = read_graphml(gm)
    assert h.n_edges == 3 and sorted(h.edge_types.tolist()) == [0, 1, 2]
    broken = tmp_path / "broken.graphml"
    broken.write_text("<graphml><graph><node id=")
    with pytest.raises(InputError, match="not a readable GraphML file"):
        read_graphml(broken)


def test_cli_reports_bad_files_in_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["evaluate", "--reference", "community-small", "--generated", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "the graph set is empty" in err and "Traceback" not in err
    assert main(["evaluate", "--reference", "no-such-set", "--generated", str(bad)]) == 2
    assert "unknown graph dataset 'no-such-set'" in capsys.readouterr().err
    assert main(["evaluate", "--reference", "karate", "--generated", "karate", "--bootstrap", "-1"]) == 2
    assert "bootstrap draws must be 0 (none) or positive, got -1" in capsys.readouterr().err


def test_cli_output_format_follows_the_suffix(tmp_path, capsys) -> None:
    """A graph set goes to .json; one graph may go to .graphml; any other name is refused before writing."""
    one = tmp_path / "karate.graphml"
    assert main(["data", "--dataset", "karate", "--out", str(one)]) == 0
    (graph,) = load_graphs(one)
    assert graph.n_nodes == 34 and graph.n_edges == 78
    capsys.readouterr()
    for name, message in (("tree.graphml", "GraphML holds one graph here, not 128"), ("tree.pkl", "JSON graph set")):
        assert main(["data", "--dataset", "tree", "--out", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and not (tmp_path / name).exists()
    assert main(["data", "--dataset", "tree", "--out", str(tmp_path / "tree.json")]) == 0
    assert len(read_graph_set(tmp_path / "tree.json")) == 128
    capsys.readouterr()
    for argv, message in (
        (["--dataset", "tree", "--n", "1"], "leave the train split empty"),
        (["--dataset", "karate", "--n", "5"], "--n applies to the procedural data sets"),
    ):
        assert main(["data", *argv]) == 2
        assert message in capsys.readouterr().err
