"""The graph container, its conversions, and graph-set / edge-list / GraphML files with their errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

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
    with pytest.raises(InputError, match="edge type must be a non-negative integer"):
        read_edgelist(el)
    typed = _typed()
    typed.node_features = None  # GraphML holds no node features (test_graphml_edge_weights_roundtrip...)
    gm = write_graphml(tmp_path / "g.graphml", typed)
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
    assert "bootstrap draws (0: none) must be a non-negative integer, got -1" in capsys.readouterr().err


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


def test_graphml_scalar_x_is_not_a_feature_and_types_must_be_whole(tmp_path) -> None:
    """Gephi / yEd write each node's layout position as scalar ``x``/``y`` attributes; they are not features.
    A fractional ``type`` is refused instead of truncated, in one sentence without a doubled prefix."""
    g = nx.Graph()
    g.add_node("a", x=1.5, y=2.0, type=1)
    g.add_node("b", x=0.5, y=1.0)
    g.add_edge("a", "b", x=3.0)
    nx.write_graphml(g, tmp_path / "layout.graphml")
    h = read_graphml(tmp_path / "layout.graphml")
    assert h.n_nodes == 2 and h.n_edges == 1 and h.node_types.tolist() == [1, 0]
    assert h.node_features is None and h.edge_features is None
    for value, message in ((1.7, "must be an integer category, got 1.7"), (-1, "layout.graphml: node and edge")):
        g.nodes["a"]["type"] = value
        nx.write_graphml(g, tmp_path / "layout.graphml")
        with pytest.raises(InputError, match=message) as info:
            read_graphml(tmp_path / "layout.graphml")
        assert "graph: " not in str(info.value)


def test_features_of_a_graph_without_edges_roundtrip(tmp_path) -> None:
    """``to_dict`` writes ``"edge_features": []`` for a graph without edges; reading it back must work."""
    graphs = [
        Graph(n_nodes=3, edges=[[0, 1]], edge_features=[[1.0, 2.0]]),
        Graph(n_nodes=2, edge_features=torch.zeros(0, 2)),
        Graph(n_nodes=0, node_features=torch.zeros(0, 3)),
    ]
    back = read_graph_set(write_graph_set(tmp_path / "f.json", graphs))
    assert back[1].n_edges == 0 and back[1].edge_features.shape[0] == 0 and back[2].node_features.shape[0] == 0
    with pytest.raises(InputError, match="node_features must hold one row for each of the 3 nodes, got shape"):
        Graph(n_nodes=3, node_features=[[1.0, 2.0]])


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ('{"n_nodes": 3, "edges": [[0, 1.5]]}', "graph 0: edges must be integers, got 1.5"),
        ('{"n_nodes": 2, "edges": [[0, 1]], "node_types": [0, 0.5]}', "node_types must be integers, got 0.5"),
        ('{"n_nodes": 2, "edges": [[0, 1]], "directed": "false"}', "'directed' must be true or false, got 'false'"),
        ('{"n_nodes": true, "edges": []}', "n_nodes must be a non-negative integer, got True"),
    ],
)
def test_graph_set_values_are_not_coerced(tmp_path, record: str, message: str) -> None:
    """A fractional endpoint is not truncated, ``"directed": "false"`` is not read as true, ``true`` is no count."""
    path = tmp_path / "g.json"
    path.write_text('{"format": "gengraph.graph-set", "version": 1, "graphs": [' + record + "]}")
    with pytest.raises(InputError, match=message):
        read_graph_set(path)


def test_graph_set_version_and_repeated_edge_lines(tmp_path) -> None:
    path = tmp_path / "g.json"
    path.write_text('{"format": "gengraph.graph-set", "version": 2, "graphs": [{"n_nodes": 2, "edges": [[0, 1]]}]}')
    with pytest.raises(InputError, match=r"g\.json: graph-set version 2, this gengraph reads version 1"):
        read_graph_set(path)
    el = tmp_path / "g.edgelist"
    el.write_text("a b\nb c\n# the reverse of line 1:\nb a\n")
    with pytest.raises(InputError, match=r"g\.edgelist, line 4: the edge b a repeats line 1"):
        read_edgelist(el)
    assert read_edgelist(el, directed=True).n_edges == 3
    el.write_text("a b 1\nb c -1\n")
    with pytest.raises(
        InputError, match=r"g\.edgelist, line 2: the edge type must be a non-negative integer, got '-1'"
    ):
        read_edgelist(el)


def test_evaluate_reads_empty_and_directed_graphs(tmp_path) -> None:
    """A graph without nodes crashed orbit-count (segfault) and a directed reciprocal pair aborted it; run in a
    child process so that a crash fails this test rather than the session."""
    ref = write_graph_set(tmp_path / "ref.json", [Graph(n_nodes=3, edges=[[0, 1], [1, 2]])] * 2)
    gen = tmp_path / "gen.json"
    gen.write_text(
        '{"graphs": [{"n_nodes": 0, "edges": []}, {"n_nodes": 1, "edges": []},'
        ' {"n_nodes": 3, "directed": true, "edges": [[0, 1], [1, 0], [2, 1]]}]}'
    )
    out = tmp_path / "m.json"
    argv = ["evaluate", "--reference", str(ref), "--generated", str(gen), "--json", str(out)]
    done = subprocess.run([sys.executable, "-m", "gengraph.cli", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["n_generated"] == 3 and record["valid"] == pytest.approx(2 / 3)  # the empty graph is invalid
    assert all(math.isfinite(v) for k, v in record.items() if k not in ("reference", "generated"))


@pytest.mark.parametrize("suffix", [".json", ".edgelist", ".graphml"])
def test_a_folder_is_not_a_graph_file(tmp_path, capsys, suffix: str) -> None:
    """A folder with a graph file's name was an IsADirectoryError traceback (GraphML: 'no such file')."""
    folder = tmp_path / f"graphs{suffix}"
    folder.mkdir()
    with pytest.raises(InputError, match=f"graphs{suffix}: is a folder, not a graph file"):
        load_graphs(folder)
    assert main(["data", "--dataset", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a folder" in err[0]


def test_edges_must_be_pairs_not_an_edge_index() -> None:
    """A torch-geometric edge_index [2, E] used to be read row-major as pairs: (0, 3), (2, 3), (1, 2) became
    (0, 2), (1, 3), (2, 3), a different graph without an error."""
    pairs = torch.tensor([[0, 3], [2, 3], [1, 2]])
    assert Graph(n_nodes=4, edges=pairs).edges.tolist() == [[0, 3], [1, 2], [2, 3]]
    with pytest.raises(InputError, match=r"shape \[E, 2\].*edge_index"):
        Graph(n_nodes=4, edges=pairs.T)
    with pytest.raises(InputError, match=r"shape \[E, 2\]"):
        Graph(n_nodes=4, edges=torch.tensor([0, 1, 2]))  # a flat list of odd length
    assert Graph(n_nodes=3, edges=[0, 1, 1, 2]).n_edges == 2  # a flat list of pairs is still read


def test_from_pyg_keeps_edges_listed_in_one_direction() -> None:
    """An undirected Data listing an edge only as (v, u), v > u, used to lose it; both directions still give one
    edge with the (u, v) entry's type."""
    from torch_geometric.data import Data

    data = Data(
        edge_index=torch.tensor([[0, 1, 2, 3], [1, 0, 1, 1]]), num_nodes=4, edge_type=torch.tensor([5, 6, 7, 8])
    )
    g = Graph.from_pyg(data)
    assert g.edges.tolist() == [[0, 1], [1, 2], [1, 3]]
    assert g.edge_types.tolist() == [5, 7, 8]
    expected = Graph(n_nodes=4, edges=[[0, 1], [1, 2], [1, 3]])
    assert torch.equal(Graph.from_pyg(Graph.from_pyg(data).to_pyg()).adjacency(), expected.adjacency())


def test_from_dense_refuses_probabilities_and_non_square_matrices() -> None:
    """A float adjacency of edge probabilities used to be truncated to class 0, i.e. a graph without edges."""
    with pytest.raises(InputError, match="adjacency must be integers"):
        Graph.from_dense(torch.tensor([[0.0, 0.7], [0.7, 0.0]]))
    with pytest.raises(InputError, match="square"):
        Graph.from_dense(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(InputError, match="edge classes"):
        Graph.from_dense(torch.tensor([[0, -1], [-1, 0]]))
    assert Graph.from_dense(torch.tensor([[0.0, 1.0], [1.0, 0.0]])).n_edges == 1
    assert Graph.from_dense(torch.tensor([[False, True], [True, False]])).n_edges == 1


def test_transposed_feature_tables_are_refused() -> None:
    """Node features given as ``[F, N]`` used to be reshaped row-major to ``[N, F]``, mixing the nodes' values."""
    x = torch.arange(6.0).reshape(3, 2)  # one row per node
    assert torch.equal(Graph(n_nodes=3, node_features=x).node_features, x)
    with pytest.raises(InputError, match="one row for each of the 3 nodes"):
        Graph(n_nodes=3, node_features=x.T)
    with pytest.raises(InputError, match="one row for each of the 1 edges"):
        Graph(n_nodes=3, edges=[[0, 1]], edge_features=torch.ones(2, 1))
    assert Graph(n_nodes=3, node_features=[1.0, 2.0, 3.0]).node_features.shape == (3, 1)  # flat: one per node
    assert Graph(n_nodes=2, node_features=torch.ones(2, 2, 2)).node_features.shape == (2, 4)


def test_graph_set_edges_as_an_edge_index_are_refused(tmp_path) -> None:
    """``from_dict`` reshaped ``edges`` row-major: an edge_index [[0, 1, 2], [3, 4, 5]] (edges 0-3, 1-4, 2-5) was
    read as 0-1, 2-3, 4-5 without an error."""
    path = tmp_path / "g.json"
    path.write_text('{"graphs": [{"n_nodes": 6, "edges": [[0, 1, 2], [3, 4, 5]]}]}')
    with pytest.raises(InputError, match=r"g\.json: graph 0: edges must have shape \[E, 2\]"):
        read_graph_set(path)
    assert Graph.from_dict({"n_nodes": 3, "edges": [0, 1, 1, 2]}).edges.tolist() == [[0, 1], [1, 2]]
    assert Graph.from_dict({"n_nodes": 2, "edges": []}).n_edges == 0


@pytest.mark.parametrize("edge_types", [[1, 2, 3, 4], [1, 2], 5])
def test_edge_types_of_the_wrong_length_are_refused(edge_types) -> None:
    """Edge types were reordered with the edges before their length was checked: one too many lost the last entry
    silently ([1, 2, 3, 4] for three edges gave [1, 2, 3]), too few or a scalar was a bare IndexError."""
    with pytest.raises(InputError, match=r"edge_types \(3,\)"):
        Graph(n_nodes=4, edges=[[2, 3], [1, 0], [1, 2]], edge_types=edge_types)
    g = Graph(n_nodes=4, edges=[[2, 3], [1, 0], [1, 2]], edge_types=[1, 2, 3])
    assert g.edges.tolist() == [[0, 1], [1, 2], [2, 3]] and g.edge_types.tolist() == [2, 3, 1]


def test_numpy_node_counts_are_integers() -> None:
    """``n_nodes=np.int64(3)`` (an array's length or sum) was refused as 'not a non-negative integer'."""
    import numpy as np

    g = Graph(n_nodes=np.int64(3), edges=[[0, 1]])
    assert g.n_nodes == 3 and type(g.n_nodes) is int
    with pytest.raises(InputError, match="n_nodes must be a non-negative integer"):
        Graph(n_nodes=np.float64(3.0))


def test_conversions_carry_edge_features_directions_and_degrees() -> None:
    """Edge features follow their edges through the sort and every conversion; directed graphs stay directed."""
    from torch_geometric.data import Data

    g = Graph(n_nodes=4, edges=[[3, 2], [1, 0], [1, 2]], edge_types=[1, 2, 3], edge_features=[[10.0], [20.0], [30.0]])
    assert g.edges.tolist() == [[0, 1], [1, 2], [2, 3]] and g.edge_features.flatten().tolist() == [20.0, 30.0, 10.0]
    assert g.degrees().tolist() == [1, 2, 2, 1]
    assert torch.equal(Graph.from_dense(g.adjacency(typed=True)).edge_types, g.edge_types)
    data = g.to_pyg()
    pairs = {tuple(c): float(f) for c, f in zip(data.edge_index.T.tolist(), data.edge_attr.flatten(), strict=True)}
    assert pairs == {(0, 1): 20.0, (1, 0): 20.0, (1, 2): 30.0, (2, 1): 30.0, (2, 3): 10.0, (3, 2): 10.0}
    for h in (Graph.from_networkx(g.to_networkx()), Graph.from_pyg(data), Graph.from_dict(g.to_dict())):
        assert torch.equal(h.edges, g.edges) and torch.equal(h.edge_features, g.edge_features)
    # from_pyg keeps the u < v entry's features when both directions are listed
    both = Data(edge_index=torch.tensor([[1, 0], [0, 1]]), num_nodes=2, edge_attr=torch.tensor([[7.0], [8.0]]))
    assert Graph.from_pyg(both).edge_features.tolist() == [[8.0]]
    d = Graph(n_nodes=3, edges=[[1, 0], [0, 1], [2, 1]], edge_types=[0, 1, 2], node_features=[[1.0], [2.0], [3.0]],
              edge_features=[[1.0], [2.0], [3.0]], directed=True)  # fmt: skip
    assert d.degrees().tolist() == [2, 3, 1]  # a reciprocal pair counts twice
    h = Graph.from_networkx(d.to_networkx())
    assert h.directed and torch.equal(h.edges, d.edges) and torch.equal(h.edge_features, d.edge_features)
    u = d.to_undirected()
    assert not u.directed and u.edges.tolist() == [[0, 1], [1, 2]] and u.edge_types.tolist() == [1, 2]
    assert u.edge_features.flatten().tolist() == [2.0, 3.0] and torch.equal(u.node_features, d.node_features)


def test_directed_edge_list_keeps_directions(tmp_path) -> None:
    """Two edges into node 1 must not come back as two edges out of it (the file lists source, then target)."""
    g = Graph(n_nodes=3, edges=[[0, 1], [2, 1]], directed=True)
    back = read_edgelist(write_edgelist(tmp_path / "d.edgelist", g), directed=True)
    assert back.directed and back.edges.tolist() == [[0, 1], [2, 1]]


def test_edgelist_written_by_gengraph_roundtrips_numbering_isolated_nodes_and_direction(tmp_path) -> None:
    """write_edgelist then read_edgelist used to renumber the nodes in order of appearance and drop isolated
    ones: edges (1, 2), (0, 3) on 5 nodes came back as (0, 1), (2, 3) on 4 nodes; a directed file came back
    undirected (its reciprocal pair a 'repeat'). networkx, reading the same file with integer node labels, agrees."""
    g = Graph(n_nodes=5, edges=[[1, 2], [0, 3]], edge_types=[2, 1])
    path = write_edgelist(tmp_path / "g.edgelist", g)
    back = read_edgelist(path)
    assert back.n_nodes == 5 and not back.directed
    assert torch.equal(back.adjacency(typed=True), g.adjacency(typed=True))
    oracle = nx.read_edgelist(path, nodetype=int, data=[("type", int)])
    assert (nx.to_numpy_array(oracle, nodelist=range(4)) == back.adjacency()[:4, :4].numpy()).all()
    assert {tuple(sorted(e)): d["type"] for *e, d in oracle.edges(data=True)} == {(0, 3): 1, (1, 2): 2}
    d = Graph(n_nodes=4, edges=[[0, 1], [1, 0], [2, 1]], edge_types=[0, 1, 2], directed=True)
    for back in (read_edgelist(write_edgelist(tmp_path / "d.edgelist", d)), *load_graphs(tmp_path / "d.edgelist")):
        assert back.directed and back.n_nodes == 4
        assert torch.equal(back.edges, d.edges) and torch.equal(back.edge_types, d.edge_types)
    assert read_edgelist(write_edgelist(tmp_path / "e.edgelist", Graph(n_nodes=3))).n_nodes == 3  # no edges
    # a hand-written file without the header still numbers its tokens in order of appearance
    plain = tmp_path / "p.edgelist"
    plain.write_text("3 1\n0 3\n")
    assert read_edgelist(plain).edges.tolist() == [[0, 1], [0, 2]]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("0 1 0\n1 5 0\n", r"line 3: the header announces 3 nodes, numbered 0 to 2, got '1 5 0'"),
        ("0 1 0\nb c 0\n", r"line 3: the header announces 3 nodes, numbered 0 to 2, got 'b c 0'"),
        ("0 1 0\n", r"g\.edgelist: the header announces 2 edges, but the file lists 1"),
    ],
)
def test_gengraph_edgelist_header_is_checked(tmp_path, body: str, message: str) -> None:
    path = tmp_path / "g.edgelist"
    path.write_text("# gengraph edge list: 3 nodes, 2 edges\n" + body)
    with pytest.raises(InputError, match=message):
        read_edgelist(path)


def test_from_networkx_refuses_fractional_numpy_and_torch_types() -> None:
    """Only a Python float was checked: a numpy float32 1.7 (a type read from an array) became category 1."""
    import numpy as np

    for value in (np.float32(1.7), np.float64(0.5), torch.tensor(2.5)):
        g = nx.Graph()
        g.add_node(0, type=value)
        g.add_edge(0, 1)
        with pytest.raises(InputError, match="node attribute 'type' must be an integer category"):
            Graph.from_networkx(g)
    g = nx.Graph()
    g.add_node(0, type=np.float32(2.0))
    g.add_edge(0, 1, type=torch.tensor(1))
    h = Graph.from_networkx(g)
    assert h.node_types.tolist() == [2, 0] and h.edge_types.tolist() == [1]


def test_graphml_edge_weights_roundtrip_with_networkx(tmp_path) -> None:
    """GraphML edge weights were dropped: a networkx file's ``weight`` came back as no edge features, and a
    one-column edge feature was not written. networkx, reading and writing the same files, is the oracle."""
    g = nx.Graph()
    g.add_edge("a", "b", weight=2.5)
    g.add_edge("b", "c", weight=-1.0)
    g.add_edge("c", "d")  # no weight: 1, as networkx's weighted algorithms read it
    g.add_node("e")
    nx.write_graphml(g, tmp_path / "nx.graphml")
    h = read_graphml(tmp_path / "nx.graphml")
    weighted = torch.zeros(h.n_nodes, h.n_nodes, dtype=torch.float64)
    weighted[h.edges[:, 0], h.edges[:, 1]] = h.edge_features[:, 0].double()
    weighted = weighted + weighted.T
    assert h.edge_features.shape == (3, 1)
    assert (weighted.numpy() == nx.to_numpy_array(g, nodelist=list(g.nodes), weight="weight")).all()
    d = Graph(n_nodes=3, edges=[[2, 0], [0, 1]], edge_types=[1, 0], edge_features=[[0.1], [7.0]], directed=True)
    path = write_graphml(tmp_path / "d.graphml", d)
    oracle = nx.read_graphml(path, node_type=int)
    assert {(u, v): w for u, v, w in oracle.edges(data="weight")} == pytest.approx({(2, 0): 0.1, (0, 1): 7.0})
    back = read_graphml(path)
    assert back.directed and torch.equal(back.edges, d.edges) and torch.equal(back.edge_types, d.edge_types)
    assert torch.equal(back.edge_features, d.edge_features)  # float32 values survive the decimal text exactly
    assert read_graphml(write_graphml(tmp_path / "u.graphml", Graph(n_nodes=2, edges=[[0, 1]]))).edge_features is None


def test_graphml_refuses_what_it_cannot_hold_and_bad_weights(tmp_path) -> None:
    """Node features and several edge feature columns were dropped without a word; a weight that is no finite
    number is refused, not read as garbage."""
    for graph, message in (
        (Graph(n_nodes=2, edges=[[0, 1]], node_features=[[1.0], [2.0]]), "holds no node features"),
        (Graph(n_nodes=2, edges=[[0, 1]], edge_features=[[1.0, 2.0]]), "not 2 edge feature columns"),
    ):
        with pytest.raises(InputError, match=message):
            write_graphml(tmp_path / "x.graphml", graph)
        assert not (tmp_path / "x.graphml").exists()
    empty = Graph.from_dict({"n_nodes": 2, "edges": [], "node_features": [[], []], "edge_features": []})
    assert read_graphml(write_graphml(tmp_path / "e.graphml", empty)).n_nodes == 2  # empty tables lose nothing
    for weight in ("heavy", float("nan"), float("inf")):
        g = nx.Graph()
        g.add_edge("a", "b", weight=weight)
        nx.write_graphml(g, tmp_path / "w.graphml")
        with pytest.raises(InputError, match=r"w\.graphml: the weight of edge a b must be a finite number"):
            read_graphml(tmp_path / "w.graphml")
