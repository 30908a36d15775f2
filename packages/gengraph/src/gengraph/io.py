"""Graph-set files: gengraph's JSON graph set, edge lists and GraphML, with one-sentence errors.

JSON graph set (what ``gengraph sample`` writes; safe to load, no pickle)::

    {"format": "gengraph.graph-set", "version": 1,
     "graphs": [{"n_nodes": 3, "directed": false, "edges": [[0, 1], [1, 2]],
                 "node_types": [0, 1, 0], "edge_types": [0, 0]}, ...]}

``node_types``/``edge_types`` default to zeros and ``node_features``/``edge_features`` are optional lists of
lists. Edge list (one graph per file): one edge ``u v`` or ``u v type`` per line, ``#`` comments, nodes are
any tokens (relabelled in order of appearance), except in a file that :func:`write_edgelist` wrote: its header
``# gengraph edge list: N nodes, E edges`` (``, directed`` for a directed graph) makes the nodes the integers
``0..N-1``, so node order, isolated nodes and direction come back (node types and features do not). GraphML:
read with networkx; integer ``type`` attributes become the categorical channels, self-loops are dropped and
parallel edges refused. A numeric edge attribute ``weight`` (networkx's convention) becomes a one-column
``edge_features`` table (an edge without one weighs 1, as in networkx) and :func:`write_graphml` writes a
one-column ``edge_features`` back as ``weight``; node features or several edge feature columns have no GraphML
form here and are refused rather than dropped (write a graph set).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import networkx as nx

from gencore.errors import InputError
from gencore.io import write_json, write_text
from gengraph.datasets import load_dataset
from gengraph.graph import Graph

__all__ = [
    "FORMAT",
    "load_graphs",
    "read_edgelist",
    "read_graph_set",
    "read_graphml",
    "write_edgelist",
    "write_graph_set",
    "write_graphml",
    "write_graphs",
]

FORMAT = "gengraph.graph-set"
_EDGELIST_HEADER = re.compile(r"#\s*gengraph edge list:\s*(\d+) nodes?,\s*(\d+) edges?(,\s*directed)?")


def write_graph_set(path: str | os.PathLike, graphs: list[Graph], **meta) -> Path:
    """Write ``graphs`` (and optional metadata) as a JSON graph set, atomically."""
    return write_json(path, {"format": FORMAT, "version": 1, **meta, "graphs": [g.to_dict() for g in graphs]})


def check_graphs_output(path: str | os.PathLike, n_graphs: int) -> str:
    """The suffix ``n_graphs`` graphs can be written under: ``.json`` (a graph set), or ``.graphml`` for one graph.

    Anything else (an edge list cannot hold isolated nodes or several graphs) is one :class:`InputError` sentence.
    """
    suffix = Path(path).suffix.lower()
    if suffix == ".json" or (suffix == ".graphml" and n_graphs == 1):
        return suffix
    if suffix == ".graphml":
        raise InputError(f"{path}: GraphML holds one graph here, not {n_graphs}; write a graph set (.json).")
    raise InputError(f"{path}: graphs are written as a JSON graph set (.json), or one graph as GraphML (.graphml).")


def write_graphs(path: str | os.PathLike, graphs: list[Graph], **meta) -> Path:
    """:func:`write_graph_set` (``.json``, with ``meta``) or :func:`write_graphml` (``.graphml``, one graph)."""
    if check_graphs_output(path, len(graphs)) == ".graphml":
        return write_graphml(path, graphs[0])
    return write_graph_set(path, graphs, **meta)


def _check_file(path: Path) -> None:
    """One sentence when ``path`` cannot be read as a file (missing, a folder, no permission)."""
    if not path.exists():
        raise InputError(f"{path}: no such file.")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a graph file.")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file.")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: not readable (permission denied).")


def read_graph_set(path: str | os.PathLike) -> list[Graph]:
    path = Path(path)
    _check_file(path)
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc}).") from None
    if isinstance(doc, list):
        records = doc
    elif isinstance(doc, dict) and isinstance(doc.get("graphs"), list):
        if doc.get("format", FORMAT) != FORMAT:
            raise InputError(f"{path}: expected format {FORMAT!r}, got {doc.get('format')!r}.")
        if doc.get("version", 1) != 1:
            raise InputError(f"{path}: graph-set version {doc.get('version')!r}, this gengraph reads version 1.")
        records = doc["graphs"]
    else:
        raise InputError(f"{path}: expected a JSON object with a 'graphs' list (format {FORMAT!r}).")
    if not records:
        raise InputError(f"{path}: the graph set is empty.")
    return [Graph.from_dict(r, where=f"{path}: graph {i}") for i, r in enumerate(records)]


def read_edgelist(path: str | os.PathLike, *, directed: bool | None = None) -> Graph:
    """One graph from an edge list; ``directed`` defaults to what a gengraph header says, else undirected."""
    path = Path(path)
    _check_file(path)
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text edge list.") from None
    header = _EDGELIST_HEADER.fullmatch(lines[0].strip()) if lines else None
    if directed is None:
        directed = bool(header and header[3])
    n_header = int(header[1]) if header else 0  # write_edgelist numbers the nodes 0..N-1, isolated ones included
    index: dict[str, int] = {}
    edges, types = [], []
    seen: dict[tuple[int, int], int] = {}
    for lineno, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split()
        if len(parts) not in (2, 3):
            raise InputError(f"{path}, line {lineno}: expected 'u v' or 'u v type', got {line.strip()!r}.")
        if not header:
            u, v = (index.setdefault(p, len(index)) for p in parts[:2])
        elif all(p.isascii() and p.isdigit() and int(p) < n_header for p in parts[:2]):
            u, v = int(parts[0]), int(parts[1])
        else:
            raise InputError(
                f"{path}, line {lineno}: the header announces {n_header} nodes, numbered 0 to {n_header - 1}, "
                f"got {line.strip()!r}."
            )
        if u == v:
            raise InputError(f"{path}, line {lineno}: self-loop on node {parts[0]!r} is not supported.")
        pair = (u, v) if directed else (min(u, v), max(u, v))
        if pair in seen:
            raise InputError(
                f"{path}, line {lineno}: the edge {parts[0]} {parts[1]} repeats line {seen[pair]}"
                f"{'' if directed else ' (edges are undirected)'}; list each edge once."
            )
        seen[pair] = lineno
        try:
            types.append(int(parts[2]) if len(parts) == 3 else 0)
            if types[-1] < 0:
                raise ValueError
        except ValueError:
            raise InputError(
                f"{path}, line {lineno}: the edge type must be a non-negative integer, got {parts[2]!r}."
            ) from None
        edges.append((u, v))
    if header and len(edges) != int(header[2]):
        raise InputError(f"{path}: the header announces {header[2]} edges, but the file lists {len(edges)}.")
    if not index and not header:
        raise InputError(f"{path}: the edge list has no edges.")
    try:
        return Graph(n_nodes=n_header if header else len(index), edges=edges, edge_types=types, directed=directed)
    except InputError as exc:
        raise InputError(f"{path}: {str(exc).removeprefix('graph: ')}") from None


def write_edgelist(path: str | os.PathLike, graph: Graph) -> Path:
    """``graph``'s edges, one ``u v type`` line each, under the header from which :func:`read_edgelist` restores
    the node numbering, the isolated nodes and the direction."""
    kind = ", directed" if graph.directed else ""
    rows = [f"# gengraph edge list: {graph.n_nodes} nodes, {graph.n_edges} edges{kind}"]
    rows += [f"{u} {v} {int(t)}" for (u, v), t in zip(graph.edges.tolist(), graph.edge_types, strict=True)]
    return write_text(path, "\n".join(rows) + "\n")


def read_graphml(path: str | os.PathLike) -> Graph:
    path = Path(path)
    _check_file(path)
    try:
        g = nx.read_graphml(path)
    except Exception as exc:  # networkx raises several parser exception types
        raise InputError(f"{path}: not a readable GraphML file ({type(exc).__name__}: {exc}).") from None
    if any("weight" in d for *_, d in g.edges(data=True)):
        for u, v, d in g.edges(data=True):
            value = d.get("weight", 1.0)  # networkx's weighted algorithms read a missing weight as 1
            try:
                weight = float(value)
                if isinstance(value, bool) or not math.isfinite(weight):
                    raise ValueError
            except (TypeError, ValueError):
                raise InputError(
                    f"{path}: the weight of edge {u} {v} must be a finite number, got {value!r}."
                ) from None
            d["x"] = [weight]  # from_networkx reads list-valued "x" as the edge features
    try:
        return Graph.from_networkx(g)
    except InputError as exc:
        raise InputError(f"{path}: {str(exc).removeprefix('graph: ')}") from None


def write_graphml(path: str | os.PathLike, graph: Graph) -> Path:
    """``graph`` as GraphML: types as ``type``, a one-column ``edge_features`` as the edge ``weight``."""
    if graph.node_features is not None and graph.node_features.numel():  # an empty table loses nothing
        raise InputError(f"{path}: GraphML here holds no node features; write a graph set (.json) to keep them.")
    if graph.edge_features is not None and graph.edge_features.numel() and graph.edge_features.shape[1] != 1:
        raise InputError(
            f"{path}: GraphML here holds one edge weight per edge, not {graph.edge_features.shape[1]} edge "
            "feature columns; write a graph set (.json) to keep them."
        )
    g = graph.to_networkx()
    for _, d in g.nodes(data=True):
        d.pop("x", None)  # an empty feature row
    for *_, d in g.edges(data=True):
        if "x" in d:
            d["weight"] = float(d.pop("x")[0])  # GraphML attributes are scalars
    return write_text(path, "\n".join(nx.generate_graphml(g)) + "\n")


def load_graphs(source: str | os.PathLike, which: str = "test", *, seed: int = 0) -> list[Graph]:
    """Graphs from a dataset name (its ``which`` split), a JSON graph set, a GraphML file or an edge list."""
    text = str(source)
    suffix = Path(text).suffix.lower()
    if suffix == ".json":
        return read_graph_set(text)
    if suffix == ".graphml":
        return [read_graphml(text)]
    if suffix in (".edgelist", ".edges", ".txt", ".tsv"):
        return [read_edgelist(text)]
    if Path(text).exists():
        raise InputError(f"{text}: unknown graph file type; expected .json, .graphml or .edgelist.")
    return load_dataset(text, which, seed=seed)
