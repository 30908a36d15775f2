"""Real C. elegans connectomes, read from the data that the ``cect`` package ships.

``cect`` (the C. elegans Connectome Toolbox, OpenWorm, MIT licence) bundles the published wiring diagrams
and, for each of its readers, the reader's output as JSON (``cect/cache/<Reader>.json``: ``nodes``, the cell
names, and ``connections``, one ``[pre, post]`` weight matrix per synapse class), which cect itself loads by
default. gengraph reads those files directly and never imports cect, whose import pulls plotly, pyneuroml and
wormneuroatlas: ``pip install --no-deps cect==0.3.5`` (13 MB) is all it needs. Nothing is downloaded.

=========================  =====================  ==================================================  =====
name                       cect reader            source                                              cells
=========================  =====================  ==================================================  =====
celegans-white1986         White_whole            White et al. 1986, Phil. Trans. R. Soc. B            309
celegans-durbin1987-jsh    DurbinJSHDataReader    Durbin 1987 (PhD thesis), animal JSH (L4)            190
celegans-durbin1987-n2u    DurbinN2UDataReader    Durbin 1987 (PhD thesis), animal N2U (adult)         199
celegans-varshney2011      VarshneyDataReader     Varshney et al. 2011, PLoS Comput. Biol.             281
celegans-cook2019-herm     Cook2019HermReader     Cook et al. 2019, Nature (hermaphrodite)             473
celegans-cook2019-male     Cook2019MaleReader     Cook et al. 2019, Nature (male)                      585
celegans-witvliet2021-K    WitvlietDataReaderK    Witvliet et al. 2021, Nature, animal K = 1..8        187-222
=========================  =====================  ==================================================  =====

Witvliet et al. reconstructed the nerve ring of eight animals from birth to adulthood (animals 1-4: L1,
5: L2, 6: L3, 7-8: adult). The set ``celegans-witvliet2021`` is those eight graphs in developmental order,
each on its own cells; :func:`witvliet_series` puts them on one node set (the union of their cells, in
sorted order, absent cells isolated), so that node ``i`` is the same cell at every stage: a dynamic graph.

Graphs are undirected by default: cells ``i`` and ``j`` are joined when any chemical synapse (every synapse
class other than gap junctions, in either direction) or gap junction (``Generic_GJ``) connects them. Edge
types: 0 chemical only, 1 gap junction only, 2 both. Edge features: ``[chemical weight i->j plus j->i,
gap-junction weight]``, in the source's units (synapse counts, or serial-section counts). With
``directed=True`` there is an edge ``i -> j`` for a chemical synapse from ``i`` to ``j`` or a gap junction
between them (gap junctions go both ways), typed and weighted per direction. Self-connections are dropped.
The cell names are :attr:`Connectome.names`.

Node types are cell classes (:data:`CELL_CLASSES`): 0 sensory neuron, 1 interneuron, 2 motor neuron, 3 muscle,
4 other (glia-like, epithelial, gland and structural cells, and the two canal neurons). They come from the
WormAtlas cell type that cect ships for every cell (``cect/data/all_cell_info.csv``, column ``Type``), through
the fixed table :data:`CELL_TYPE_CLASSES`. It agrees with cect's own provisional sensory / inter / motor
classification (``cect.Cells.get_SIM_class``, after Cook et al. 2019) on all 300 neurons that it covers:
the five pharyngeal polymodal neurons follow it (NSML/R sensory; MI, MCL/R motor), and cect also counts the
canal neurons as other. Male-specific neurons, which cect's classification leaves as other, are classed by
their WormAtlas type (male sensory neurons as sensory, male interneurons as interneurons).
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gencore.checks import check_choice
from gencore.errors import InputError
from gengraph.graph import Graph

__all__ = [
    "CELL_CLASSES",
    "CELL_TYPE_CLASSES",
    "CONNECTOMES",
    "SERIES",
    "Connectome",
    "cect_cache_dir",
    "cell_classes",
    "connectome",
    "witvliet_series",
]

GAP_JUNCTIONS = "Generic_GJ"
WITVLIET_STAGES = ("L1", "L1", "L1", "L1", "L2", "L3", "adult", "adult")
CONNECTOMES: dict[str, tuple[str, str]] = {
    "celegans-white1986": ("White_whole", "White et al. 1986, Phil. Trans. R. Soc. B 314"),
    "celegans-durbin1987-jsh": ("DurbinJSHDataReader", "Durbin 1987, PhD thesis (animal JSH)"),
    "celegans-durbin1987-n2u": ("DurbinN2UDataReader", "Durbin 1987, PhD thesis (animal N2U)"),
    "celegans-varshney2011": ("VarshneyDataReader", "Varshney et al. 2011, PLoS Comput. Biol. 7"),
    "celegans-cook2019-herm": ("Cook2019HermReader", "Cook et al. 2019, Nature 571 (hermaphrodite)"),
    "celegans-cook2019-male": ("Cook2019MaleReader", "Cook et al. 2019, Nature 571 (male)"),
    **{
        f"celegans-witvliet2021-{k}": (f"WitvlietDataReader{k}", f"Witvliet et al. 2021, Nature 596 (animal {k}, {s})")
        for k, s in enumerate(WITVLIET_STAGES, start=1)
    },
}
SERIES = {"celegans-witvliet2021": tuple(f"celegans-witvliet2021-{k}" for k in range(1, 9))}
INSTALL = "pip install --no-deps cect==0.3.5"

CELL_CLASSES = ("sensory neuron", "interneuron", "motor neuron", "muscle", "other")
SENSORY, INTER, MOTOR, MUSCLE, OTHER = range(5)
_MUSCLE_TYPES = (
    "Main body muscle", "Head muscle", "Pharyngeal muscle", "Vulval muscle", "Uterine muscle", "Anal/sphincter muscle",
    "Intestinal muscles", "Unspecified body wall muscle", "Diagonal muscle (male specific)",
    "Anterior oblique (male specific)", "Posterior oblique (male specific)", "Gubernacular erector (male specific)",
    "Gubernacular retractor (male specific)", "Caudal longitudinal muscle (male specific)",
    "Anterior inner longitudinal muscle (male specific)", "Posterior inner longitudinal muscle (male specific)",
    "Posterior outer longitudinal muscle (male specific)", "Dorsal spicule protractor (male specific)",
    "Ventral spicule protractor (male specific)", "Dorsal spicule retractor (male specific)",
    "Ventral spicule retractor (male specific)",
)  # fmt: skip
_OTHER_TYPES = (
    "Canal neuron", "GLR cell", "Excretory cell", "Excretory gland", "Gonad (male specific)", "Head mesodermal cell",
    "Hypodermis", "Intestine", "Male ray structural cell", "Marginal cell of the pharynx",
    "Pharyngeal basement membrane", "Pharyngeal epithelium", "Pharyngeal gland cell", "Proctodeum (male specific)",
    "Sheath cell other than amphid sheath and phasmid",
)  # fmt: skip
#: WormAtlas cell type (cect 0.3.5's ``all_cell_info.csv``, all 61 of them) -> index into :data:`CELL_CLASSES`.
CELL_TYPE_CLASSES: dict[str, int] = {
    **dict.fromkeys(
        ("Amphid", "Amphid, nociceptive", "Cephalic", "Mechanosensory", "O2, CO2, social signals, touch", "Phasmid",
         "Touch", "Male sensory neuron", "Male head sensory neuron"),
        SENSORY,
    ),
    **dict.fromkeys(
        ("Layer 1 interneuron", "Layer 1 interneuron; motorneuron in White et al., 1986", "Layer 2 interneuron",
         "Layer 3 interneuron", "Category 4 interneuron", "Linker to pharynx", "Pharyngeal interneuron",
         "Male interneuron", "Male head interneuron"),
        INTER,
    ),
    **dict.fromkeys(
        ("Ventral cord motor neuron", "Head motor neuron", "Sublateral motor neuron",
         "Sublateral motor neuron; interneuron in White et al., 1986", "Hermaphrodite specific motor neuron",
         "Pharyngeal motor neuron", "Pharyngeal polymodal neuron"),
        MOTOR,
    ),
    **dict.fromkeys(_MUSCLE_TYPES, MUSCLE),
    **dict.fromkeys(_OTHER_TYPES, OTHER),
}  # fmt: skip
_CELL_OVERRIDES = {"NSML": SENSORY, "NSMR": SENSORY}  # pharyngeal polymodal but classed sensory, as cect does


@dataclass(frozen=True)
class Connectome:
    """A connectome as a :class:`Graph`, with its cell names (node ``i`` is ``names[i]``) and its source."""

    name: str
    graph: Graph
    names: tuple[str, ...]
    source: str


def cect_cache_dir() -> Path:
    """The folder of cect's bundled reader output, found without importing cect."""
    spec = importlib.util.find_spec("cect")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"the C. elegans connectomes are read from the cect package's data; install it: {INSTALL}")
    return Path(next(iter(spec.submodule_search_locations))) / "cache"


@functools.cache
def _cell_types() -> dict[str, str]:
    """Cell name -> WormAtlas cell type, from cect's ``data/all_cell_info.csv``."""
    path = cect_cache_dir().parent / "data" / "all_cell_info.csv"
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise InputError(f"{path}: not found; this cect version lacks its cell table ({INSTALL}).") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: not a readable CSV file ({exc}).") from None
    if not rows or not {"Cell name", "Type"} <= set(rows[0]):
        raise InputError(f"{path}: expected the columns 'Cell name' and 'Type'.")
    return {r["Cell name"]: r["Type"] for r in rows}


def cell_classes(names: list[str] | tuple[str, ...]) -> list[int]:
    """The class of each cell (an index into :data:`CELL_CLASSES`; see the module docstring)."""
    types = _cell_types()
    out = []
    for name in names:
        kind = types.get(name)
        if kind is None or kind not in CELL_TYPE_CLASSES:
            what = "is not in cect's cell table" if kind is None else f"has the unknown cell type {kind!r}"
            raise InputError(f"cell {name!r} {what} (cect/data/all_cell_info.csv); expected cect 0.3.5 ({INSTALL}).")
        out.append(_CELL_OVERRIDES.get(name, CELL_TYPE_CLASSES[kind]))
    return out


def _read(reader: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Cell names and the summed chemical and gap-junction ``[pre, post]`` weight matrices of a cect reader."""
    path = cect_cache_dir() / f"{reader}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: not found; this cect version lacks the {reader} connectome ({INSTALL}).") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a readable cect connectome JSON file ({exc}).") from None
    names = data.get("nodes") if isinstance(data, dict) else None
    conns = data.get("connections") if isinstance(data, dict) else None
    if not isinstance(names, list) or not all(isinstance(s, str) for s in names) or len(set(names)) != len(names):
        raise InputError(f"{path}: field 'nodes' must be a list of distinct cell names.")
    if not isinstance(conns, dict) or not conns:
        raise InputError(f"{path}: field 'connections' must map synapse classes to weight matrices.")
    n = len(names)
    chem, gap = np.zeros((n, n)), np.zeros((n, n))
    for synclass, matrix in conns.items():
        try:
            w = np.asarray(matrix, dtype=np.float64)
        except (TypeError, ValueError):
            w = None
        if w is None or w.shape != (n, n) or not np.isfinite(w).all() or (w < 0).any():
            raise InputError(
                f"{path}: connections[{synclass!r}] must be a {n} x {n} matrix of finite non-negative weights."
            )
        if synclass == GAP_JUNCTIONS:
            gap += w
        else:
            chem += w
    return names, chem, gap


def _graph(chem: np.ndarray, gap: np.ndarray, directed: bool, node_types: list[int]) -> Graph:
    np.fill_diagonal(chem, 0.0)
    np.fill_diagonal(gap, 0.0)
    gap = np.maximum(gap, gap.T)  # a gap junction joins both cells; cect lists each in both directions
    if not directed:
        chem = chem + chem.T
    has_chem, has_gap = chem > 0, gap > 0
    linked = has_chem | has_gap
    if not directed:
        linked = np.triu(linked, 1)
    src, dst = np.nonzero(linked)
    types = np.where(has_chem[src, dst] & has_gap[src, dst], 2, np.where(has_gap[src, dst], 1, 0))
    return Graph(
        n_nodes=chem.shape[0],
        edges=torch.as_tensor(np.stack([src, dst], 1)),
        node_types=torch.tensor(node_types, dtype=torch.long),
        edge_types=torch.as_tensor(types),
        edge_features=torch.as_tensor(np.stack([chem[src, dst], gap[src, dst]], 1)),
        directed=directed,
    )


def connectome(name: str, *, directed: bool = False, cells: list[str] | tuple[str, ...] | None = None) -> Connectome:
    """One connectome (see the module docstring); ``cells`` imposes the node order (a superset of its cells,
    absent cells isolated)."""
    check_choice(name, tuple(CONNECTOMES), "connectome")
    return _connectome(name, _read(CONNECTOMES[name][0]), directed, cells)


def _connectome(
    name: str,
    data: tuple[list[str], np.ndarray, np.ndarray],
    directed: bool,
    cells: list[str] | tuple[str, ...] | None,
) -> Connectome:
    names, chem, gap = data
    if cells is not None:
        cells = tuple(cells)
        index = {c: i for i, c in enumerate(cells)}
        missing = [c for c in names if c not in index]
        if missing or len(index) != len(cells):
            raise InputError(f"cells must list distinct names including all of {name}'s cells; missing {missing[:5]}.")
        at = np.array([index[c] for c in names], dtype=np.int64)
        big_chem, big_gap = np.zeros((len(cells),) * 2), np.zeros((len(cells),) * 2)
        big_chem[np.ix_(at, at)], big_gap[np.ix_(at, at)] = chem, gap
        names, chem, gap = list(cells), big_chem, big_gap
    graph = _graph(chem, gap, directed, cell_classes(names))
    return Connectome(name, graph, tuple(names), CONNECTOMES[name][1])


def witvliet_series(*, directed: bool = False) -> list[Connectome]:
    """Witvliet et al.'s eight animals, birth to adulthood, on the union of their cells (sorted names)."""
    members = SERIES["celegans-witvliet2021"]
    data = {m: _read(CONNECTOMES[m][0]) for m in members}  # each file read once
    cells = sorted({c for names, _, _ in data.values() for c in names})
    return [_connectome(m, data[m], directed, cells) for m in members]
