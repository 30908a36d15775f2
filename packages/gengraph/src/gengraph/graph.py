"""The typed graph container every part of gengraph reads and writes.

A :class:`Graph` holds ``n_nodes`` nodes, an edge list ``edges: [E, 2]`` (each undirected edge stored once
with ``u < v``; directed graphs keep ``(source, target)``), one categorical channel per node
(``node_types: [N]``) and per edge (``edge_types: [E]``), optional float features (``node_features: [N, F]``,
``edge_features: [E, F]``) and a ``directed`` flag. Self-loops and repeated edges are rejected.

Conversions: :meth:`Graph.to_networkx` / :meth:`Graph.from_networkx` (types in the ``"type"`` attribute,
features in ``"x"``), :meth:`Graph.to_pyg` / :meth:`Graph.from_pyg` (torch-geometric ``Data`` with
``edge_index`` in both directions for undirected graphs), dense :meth:`Graph.adjacency` and
:meth:`Graph.from_dense`, and :meth:`Graph.to_dict` / :meth:`Graph.from_dict` for JSON.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch

from gencore.errors import InputError

__all__ = ["Graph"]


def _long(values: Any, shape_name: str, where: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InputError(f"{where}: {shape_name} must be integers ({exc}).") from None
    if t.is_floating_point():  # 1.5 would silently become 1
        wrong = ~torch.isfinite(t) | (t != t.round())
        if bool(wrong.any()):
            raise InputError(f"{where}: {shape_name} must be integers, got {t[wrong][0].item()!r}.")
    return t.to(torch.long)


def _edge_pairs(values: Any, where: str) -> torch.Tensor:
    """``values`` as ``[E, 2]`` endpoint pairs: an ``[E, 2]`` table, or a flat list of even length.

    Any other shape is refused rather than reshaped: a torch-geometric ``edge_index [2, E]`` read row-major as
    pairs would silently join the wrong nodes."""
    t = _long(values, "edges", where)
    if (t.dim() == 2 and t.shape[1] == 2) or (t.dim() == 1 and t.numel() % 2 == 0):
        return t.reshape(-1, 2)
    raise InputError(
        f"{where}: edges must have shape [E, 2] (one (u, v) row per edge; a torch-geometric edge_index [2, E] is "
        f"its transpose), got shape {tuple(t.shape)}."
    )


def _float_rows(values: Any, rows: int, name: str, unit: str, where: str) -> torch.Tensor:
    """``values`` as a float32 ``[rows, F]`` table (one row per node or edge; zero rows for an empty graph)."""
    try:
        t = torch.as_tensor(values, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InputError(f"{where}: {name} must be a table of numbers ({exc}).") from None
    if t.dim() == 2 and t.shape[0] == rows:
        return t
    # a flat list, or one row of any shape per node/edge; never a [F, rows] table read row-major as rows
    if rows and t.numel() and (t.dim() <= 1 or t.shape[0] == rows) and t.numel() % rows == 0:
        return t.reshape(rows, -1)
    if not rows and not t.numel():
        return t.reshape(0, 0)  # what to_dict writes for a graph without nodes (or edges): []
    raise InputError(f"{where}: {name} must hold one row for each of the {rows} {unit}, got shape {tuple(t.shape)}.")


@dataclass(eq=False)
class Graph:
    """One graph (see the module docstring). Construct it directly or through the ``from_*`` constructors."""

    n_nodes: int
    edges: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 2, dtype=torch.long))
    node_types: torch.Tensor | None = None
    edge_types: torch.Tensor | None = None
    node_features: torch.Tensor | None = None
    edge_features: torch.Tensor | None = None
    directed: bool = False

    def __post_init__(self) -> None:
        where = "graph"
        if not isinstance(self.n_nodes, numbers.Integral) or isinstance(self.n_nodes, bool) or self.n_nodes < 0:
            raise InputError(f"{where}: n_nodes must be a non-negative integer, got {self.n_nodes!r}.")
        self.n_nodes = int(self.n_nodes)  # a numpy integer (an array's shape or sum) is one too
        e = _edge_pairs(self.edges, where) if len(self.edges) else torch.zeros(0, 2, dtype=torch.long)
        if e.numel() and (int(e.min()) < 0 or int(e.max()) >= self.n_nodes):
            raise InputError(f"{where}: edge endpoints must lie in [0, {self.n_nodes}), got {e.min()}..{e.max()}.")
        if e.numel() and bool((e[:, 0] == e[:, 1]).any()):
            raise InputError(f"{where}: self-loops are not supported (node {int(e[e[:, 0] == e[:, 1]][0, 0])}).")
        if not self.directed:
            e = torch.sort(e, dim=1).values
        key = e[:, 0] * max(self.n_nodes, 1) + e[:, 1]
        if key.unique().numel() != key.numel():
            raise InputError(f"{where}: an edge is listed twice.")
        order = torch.argsort(key)
        self.edges = e[order]
        n, m = self.n_nodes, self.edges.shape[0]
        self.node_types = (
            torch.zeros(n, dtype=torch.long) if self.node_types is None else _long(self.node_types, "node_types", where)
        )
        # the shapes are checked before the edge types follow their edges through the sort: a list one too long
        # would lose its last entry, one too short an IndexError
        self.edge_types = (
            torch.zeros(m, dtype=torch.long) if self.edge_types is None else _long(self.edge_types, "edge_types", where)
        )
        if self.node_types.shape != (n,) or self.edge_types.shape != (m,):
            raise InputError(
                f"{where}: node_types must have shape ({n},) and edge_types ({m},), got "
                f"{tuple(self.node_types.shape)} and {tuple(self.edge_types.shape)}."
            )
        if (self.node_types < 0).any() or (self.edge_types < 0).any():
            raise InputError(f"{where}: node and edge types must be non-negative category indices.")
        self.edge_types = self.edge_types[order]
        if self.node_features is not None:
            self.node_features = _float_rows(self.node_features, n, "node_features", "nodes", where)
        if self.edge_features is not None:
            self.edge_features = _float_rows(self.edge_features, m, "edge_features", "edges", where)[order]

    # ------------------------------------------------------------------ views
    @property
    def n_edges(self) -> int:
        return int(self.edges.shape[0])

    def adjacency(self, size: int | None = None, *, typed: bool = False) -> torch.Tensor:
        """Dense ``[size, size]`` adjacency (``edge_type + 1`` where ``typed``, 0 = no edge); symmetric unless
        directed."""
        size = self.n_nodes if size is None else size
        a = torch.zeros(size, size, dtype=torch.long)
        val = self.edge_types + 1 if typed else torch.ones(self.n_edges, dtype=torch.long)
        a[self.edges[:, 0], self.edges[:, 1]] = val
        if not self.directed:
            a[self.edges[:, 1], self.edges[:, 0]] = val
        return a

    def degrees(self) -> torch.Tensor:
        """Edges at each node (in + out for a directed graph, so a reciprocal pair counts twice)."""
        return torch.bincount(self.edges.reshape(-1), minlength=self.n_nodes)

    def to_undirected(self) -> Graph:
        """The undirected graph on the same connections (``self`` when undirected): a reciprocal pair ``u -> v``,
        ``v -> u`` becomes one edge, keeping the type and features of ``(min, max)``."""
        if not self.directed:
            return self
        e = torch.sort(self.edges, dim=1).values
        key = e[:, 0] * max(self.n_nodes, 1) + e[:, 1]
        _, group = torch.unique(key, return_inverse=True)
        first = torch.full((int(group.max()) + 1 if self.n_edges else 0,), self.n_edges, dtype=torch.long)
        first = first.scatter_reduce(0, group, torch.arange(self.n_edges), "amin")  # edges are sorted by (u, v)
        return Graph(
            n_nodes=self.n_nodes, edges=e[first], node_types=self.node_types, edge_types=self.edge_types[first],
            node_features=self.node_features,
            edge_features=None if self.edge_features is None else self.edge_features[first],
        )  # fmt: skip

    # ------------------------------------------------------------------ constructors and conversions
    @classmethod
    def from_dense(cls, adjacency: torch.Tensor, node_types: torch.Tensor | None = None) -> Graph:
        """From ``[N, N]`` edge classes (0 = no edge, ``k >= 1`` = edge of type ``k - 1``), read above the
        diagonal (undirected). Edge classes must be non-negative integers (a probability such as 0.7 is refused,
        not truncated to "no edge")."""
        a = _long(adjacency, "adjacency", "graph")
        if a.dim() != 2 or a.shape[0] != a.shape[1]:
            raise InputError(f"graph: the adjacency must be a square [N, N] matrix, got shape {tuple(a.shape)}.")
        if a.numel() and int(a.min()) < 0:
            raise InputError(f"graph: adjacency entries are edge classes (0 = no edge, k >= 1), got {int(a.min())}.")
        iu = torch.triu_indices(a.shape[0], a.shape[0], 1)
        vals = a[iu[0], iu[1]]
        keep = vals > 0
        return cls(n_nodes=int(a.shape[0]), edges=iu[:, keep].T, node_types=node_types, edge_types=vals[keep] - 1)

    def to_networkx(self) -> nx.Graph:
        g = nx.DiGraph() if self.directed else nx.Graph()
        for i in range(self.n_nodes):
            attrs: dict[str, Any] = {"type": int(self.node_types[i])}
            if self.node_features is not None:
                attrs["x"] = self.node_features[i].tolist()
            g.add_node(i, **attrs)
        for k, (u, v) in enumerate(self.edges.tolist()):
            attrs = {"type": int(self.edge_types[k])}
            if self.edge_features is not None:
                attrs["x"] = self.edge_features[k].tolist()
            g.add_edge(u, v, **attrs)
        return g

    @classmethod
    def from_networkx(cls, g: nx.Graph, *, type_key: str = "type", feature_key: str = "x") -> Graph:
        """Nodes are relabelled ``0..N-1`` in iteration order; integer ``type_key`` attributes become the
        categorical channels (missing: 0); list-valued ``feature_key`` attributes become features (scalar ones,
        such as a GraphML layout coordinate ``x``, are not features and are ignored). Self-loops are dropped."""
        if g.is_multigraph():
            raise InputError("multigraphs are not supported: merge parallel edges first.")
        g = nx.Graph(g) if not g.is_directed() else g
        index = {v: i for i, v in enumerate(g.nodes)}
        edges = [(index[u], index[v]) for u, v in g.edges if u != v]
        data = [d for u, v, d in g.edges(data=True) if u != v]
        node_data = [g.nodes[v] for v in g.nodes]

        def channel(rows: list[Mapping[str, Any]], what: str) -> list[int]:
            out = []
            for r in rows:
                value = r.get(type_key, 0)
                try:
                    out.append(int(value))
                    # int(1.7) would be 1, for a numpy or torch float as for a Python one
                    if not isinstance(value, (str, numbers.Integral)) and float(value) != out[-1]:
                        raise ValueError
                except (TypeError, ValueError, OverflowError):
                    raise InputError(
                        f"{what} attribute {type_key!r} must be an integer category, got {value!r}."
                    ) from None
            return out

        def features(rows: list[Mapping[str, Any]]) -> list[list[float]] | None:
            values = [r.get(feature_key) for r in rows]
            if not rows or any(v is None or isinstance(v, (str, bytes, numbers.Number)) for v in values):
                return None
            try:
                return [list(map(float, v)) for v in values]
            except (TypeError, ValueError):
                raise InputError(f"attribute {feature_key!r} must hold lists of numbers as features.") from None

        return cls(
            n_nodes=len(index),
            edges=torch.tensor(edges, dtype=torch.long).reshape(-1, 2),
            node_types=channel(node_data, "node"),
            edge_types=channel(data, "edge"),
            node_features=features(node_data),
            edge_features=features(data),
            directed=g.is_directed(),
        )

    def to_pyg(self):
        """A torch-geometric ``Data`` (``edge_index`` lists both directions for undirected graphs)."""
        from torch_geometric.data import Data

        e = self.edges.T
        et, ef = self.edge_types, self.edge_features
        if not self.directed:
            e = torch.cat([e, e.flip(0)], dim=1)
            et = torch.cat([et, et])
            ef = None if ef is None else torch.cat([ef, ef])
        return Data(
            edge_index=e, num_nodes=self.n_nodes, node_type=self.node_types, edge_type=et, x=self.node_features,
            edge_attr=ef,
        )  # fmt: skip

    @classmethod
    def from_pyg(cls, data, *, directed: bool = False) -> Graph:
        """From a torch-geometric ``Data``; undirected graphs keep each ``{u, v}`` once, whether ``edge_index``
        lists it in both directions or in one (the ``u < v`` entry's type and features where both are listed);
        self-loops are dropped."""
        e = data.edge_index.T
        n = int(data.num_nodes)
        et = getattr(data, "edge_type", None)
        ef = getattr(data, "edge_attr", None)
        keep = (e[:, 0] != e[:, 1]).nonzero().flatten()
        if not directed and keep.numel():
            pairs = torch.sort(e[keep], dim=1).values
            _, group = torch.unique(pairs[:, 0] * max(n, 1) + pairs[:, 1], return_inverse=True)
            # one entry per unordered pair: the first u < v entry, else the first u > v one
            rank = torch.arange(keep.numel()) + keep.numel() * (e[keep, 0] > e[keep, 1]).long()
            best = torch.full((int(group.max()) + 1,), 2 * keep.numel(), dtype=torch.long)
            best = best.scatter_reduce(0, group, rank, "amin")
            keep = keep[best % keep.numel()]
        return cls(
            n_nodes=n,
            edges=e[keep],
            node_types=getattr(data, "node_type", None),
            edge_types=None if et is None else et[keep],
            node_features=getattr(data, "x", None),
            edge_features=None if ef is None else ef[keep],
            directed=directed,
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"n_nodes": self.n_nodes, "directed": self.directed, "edges": self.edges.tolist()}
        if bool(self.node_types.any()):
            d["node_types"] = self.node_types.tolist()
        if bool(self.edge_types.any()):
            d["edge_types"] = self.edge_types.tolist()
        if self.node_features is not None:
            d["node_features"] = self.node_features.tolist()
        if self.edge_features is not None:
            d["edge_features"] = self.edge_features.tolist()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "graph") -> Graph:
        if not isinstance(d, Mapping) or "n_nodes" not in d:
            raise InputError(f"{where}: expected an object with 'n_nodes' and 'edges'.")
        if not isinstance(d.get("directed", False), bool):  # bool("false") is True
            raise InputError(f"{where}: 'directed' must be true or false, got {d['directed']!r}.")
        try:
            return cls(
                n_nodes=d["n_nodes"],
                edges=_edge_pairs(d.get("edges", []), "graph"),  # an edge_index [2, E] is refused, not re-read
                node_types=d.get("node_types"),
                edge_types=d.get("edge_types"),
                node_features=d.get("node_features"),
                edge_features=d.get("edge_features"),
                directed=d.get("directed", False),
            )
        except InputError as exc:
            raise InputError(f"{where}: {str(exc).removeprefix('graph: ')}") from None
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InputError(f"{where}: malformed graph record ({exc}).") from None

    def __repr__(self) -> str:
        kind = "directed" if self.directed else "undirected"
        return f"Graph(n_nodes={self.n_nodes}, n_edges={self.n_edges}, {kind})"
