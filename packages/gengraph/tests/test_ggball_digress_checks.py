"""GGBall and DiGress against brute force: typed edges reach the encoder, the autoencoder's loss is the sum of its
terms, the training statistics a run samples from (node counts, class marginals), and damaged marginals or
node counts in run.json are one sentence."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from gengraph.batch import pack
from gengraph.cli import main
from gengraph.datasets import generate
from gengraph.experiment import RUN_FORMAT_VERSION, _marginals, _size_mask
from gengraph.graph import Graph
from gengraph.models.digress import DigressConfig, DigressDenoiser
from gengraph.models.ggball import RW_STEPS, GGBall, GGBallConfig


def _typed_graphs() -> list[Graph]:
    """Two graphs with one structure (a 6-cycle with a chord) and different edge types, and a path."""
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3)]
    return [
        Graph(n_nodes=6, edges=edges, edge_types=[0, 1, 0, 1, 0, 1, 2]),
        Graph(n_nodes=6, edges=edges, edge_types=[1, 0, 1, 0, 1, 0, 0]),
        Graph(n_nodes=4, edges=[(0, 1), (1, 2), (2, 3)], edge_types=[2, 2, 0]),
    ]


def test_the_ggball_encoder_reads_edge_types() -> None:
    """Every input of the encoder (structural features, eigenvectors, the convolutions) read ``edges > 0``, so two
    graphs differing only in their edge types had identical latents and the decoder's edge classes could only
    guess (on trees with random edge types: ~0.5 held-out type accuracy on true edges, see the module). With
    several edge types the input now holds, per type ``k``, the mean over the node's neighbours of their inputs
    counted on type-``k`` edges only; with one edge type the input (and the weights' shape) is unchanged."""
    edges, nodes, mask = pack(_typed_graphs(), 6)
    torch.manual_seed(0)
    cfg = GGBallConfig(n_edge_types=3, hidden=16, latent_dim=8, laplacian_pe=3, random_features=2)
    model = GGBall(cfg).eval()
    seen = []
    model.lift.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    with torch.no_grad():
        z = model.encode(edges, nodes, mask)
    assert (z[0] - z[1]).abs().max() > 1e-3  # same structure, other types: other latents
    width = 1 + RW_STEPS + 1 + 3 + 2
    feats = seen[0]
    assert feats.shape[-1] == width * 4
    base = feats[..., :width]
    for b, g in enumerate(_typed_graphs()):
        nx_graph = g.to_networkx()
        for i in range(g.n_nodes):
            for k in range(3):
                neighbours = [j for j in nx_graph[i] if int(edges[b, i, j]) == k + 1]
                expected = base[b, neighbours].sum(0) / nx_graph.degree[i]
                torch.testing.assert_close(feats[b, i, width * (k + 1) : width * (k + 2)], expected)
    assert (feats[2, 4:] == 0).all()  # padding reads nothing
    untyped = GGBall(GGBallConfig(hidden=16, latent_dim=8, laplacian_pe=3, random_features=2))
    assert untyped.lift.in_features == width


def test_the_ggball_loss_is_edge_plus_weighted_node_and_commitment_terms() -> None:
    """With the quantiser fixed (evaluation mode) the loss is exact: the mean cross-entropy over the real pairs
    ``i < j``, ``node_loss_weight`` times the mean over real nodes of the node-type cross-entropy, and
    ``commitment`` times the mean squared geodesic distance from each real node's latent to its code (brute
    force; the edge logits are read in the upper triangle only, the padding never)."""
    graphs = [*generate("community-small", 2, seed=0), *generate("community-small", 1, seed=4)]
    edges, nodes, mask = pack(graphs, 20)
    nodes = (torch.arange(20) % 2).expand(3, 20) * mask
    torch.manual_seed(0)
    cfg = GGBallConfig(n_node_types=2, hidden=8, latent_dim=4, codebook_size=6, commitment=0.7, node_loss_weight=1.9)
    model = GGBall(cfg).eval()
    geo = model.latent_geo
    with torch.no_grad():
        model.codebook.codes.copy_(geo.expmap0(0.5 * torch.randn(6, 4, generator=torch.Generator().manual_seed(1))))
        model.codebook.initialised.fill_(True)
        loss, parts = model(edges, nodes, mask)
        z = model.encode(edges, nodes, mask)
        zq, idx, _ = model.quantise(z, mask)
        node_logits, edge_logits = model.decode(zq, mask)
    node_ce, edge_ce, commit = [], [], []
    for b, g in enumerate(graphs):
        for i in range(g.n_nodes):
            node_ce.append(-node_logits[b, i].log_softmax(-1)[nodes[b, i]])
            commit.append(geo.manifold.dist(z[b, i], model.codebook.codes[idx[b, i]]) ** 2)
            for j in range(i + 1, g.n_nodes):
                edge_ce.append(-edge_logits[b, i, j].log_softmax(-1)[edges[b, i, j]])
    node_ce, edge_ce, commit = (torch.stack(v).mean() for v in (node_ce, edge_ce, commit))
    assert float(commit) > 1e-2  # the commitment term counts in the total
    torch.testing.assert_close(parts["edge_ce"], edge_ce)
    torch.testing.assert_close(parts["node_ce"], node_ce)
    torch.testing.assert_close(parts["commit"], commit)
    torch.testing.assert_close(loss, edge_ce + 1.9 * node_ce + 0.7 * commit)


def test_sampled_node_counts_follow_the_training_histogram() -> None:
    """Node counts are drawn with the training frequencies (not uniformly over the sizes seen), and each mask
    holds its graph's nodes first."""
    info = {"n_max": 7, "node_counts": {"2": 1, "5": 6, "7": 3}}
    mask = _size_mask(info, 20000, torch.Generator().manual_seed(0))
    assert mask.shape == (20000, 7)
    sizes = mask.sum(1)
    assert torch.equal(mask, torch.arange(7)[None, :] < sizes[:, None])
    shares = Counter(sizes.tolist())
    assert set(shares) == {2, 5, 7}
    for n, p in ((2, 0.1), (5, 0.6), (7, 0.3)):
        assert abs(shares[n] / 20000 - p) < 5 * (p * (1 - p) / 20000) ** 0.5


def test_class_marginals_count_nodes_edges_and_absent_pairs() -> None:
    """DiGress's noise marginals: node-type shares over all nodes; edge classes over all node pairs ``i < j`` of
    every graph, class 0 the pairs without an edge, class ``k + 1`` the edges of type ``k`` (brute force with
    networkx)."""
    graphs = _typed_graphs()
    node_marg, edge_marg = _marginals(graphs, 1, 3)
    assert node_marg == pytest.approx([1.0])
    counts = torch.zeros(4)
    for g in graphs:
        h = g.to_networkx()
        types = {tuple(sorted(e)): int(t) for e, t in zip(g.edges.tolist(), g.edge_types, strict=True)}
        for i in range(g.n_nodes):
            for j in range(i + 1, g.n_nodes):
                counts[types[(i, j)] + 1 if h.has_edge(i, j) else 0] += 1
    assert edge_marg == pytest.approx((counts / counts.sum()).tolist())
    typed = [Graph(n_nodes=3, edges=[(0, 1)], node_types=[0, 2, 2]), Graph(n_nodes=2, node_types=[1, 2])]
    assert _marginals(typed, 3, 1)[0] == pytest.approx([0.2, 0.2, 0.6])


def _digress_run(tmp_path, **fields):
    run = tmp_path / "run"
    DigressDenoiser(DigressConfig(n_max=4, hidden=8, heads=2, layers=1)).save_pretrained(run / "denoiser" / "model")
    info = {
        "format": "gengraph.run", "format_version": RUN_FORMAT_VERSION, "config": {"model": "digress"}, "n_max": 4,
        "n_node_types": 1, "n_edge_types": 1, "node_counts": {"3": 2, "4": 1}, "node_marginal": [1.0],
        "edge_marginal": [0.6, 0.4],
    }  # fmt: skip
    (run / "run.json").write_text(json.dumps(info | fields))
    return run


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"node_counts": {"0": 2, "4": 1}}, "field 'node_counts' must map node counts up to n_max (4)"),
        ({"node_marginal": [0.5, 0.5]}, "field 'node_marginal' must hold 1 probabilities (the denoiser's classes)"),
        ({"edge_marginal": [0.5, 0.3, 0.2]}, "field 'edge_marginal' must hold 2 probabilities"),
        ({"edge_marginal": [1.2, -0.2]}, "field 'edge_marginal' must be a list of probabilities"),
        ({"edge_marginal": [0, 0]}, "field 'edge_marginal' must be a list of probabilities"),
        ({"edge_marginal": [True, 0.5]}, "field 'edge_marginal' must be a list of probabilities"),
    ],
)
def test_damaged_counts_and_marginals_in_run_json_are_one_sentence(tmp_path, capsys, fields, message) -> None:
    """A node count of 0 sampled graphs without nodes (NaN attention, a multinomial traceback), marginals of the
    wrong length a one-hot traceback (or, shorter than the denoiser's classes, silent broadcasting), and negative
    marginals gencore's sentence that named no file."""
    run = _digress_run(tmp_path)
    out = tmp_path / "g.json"
    assert main(["sample", "--run", str(run), "--n", "3", "--steps", "2", "--out", str(out)]) == 0
    out.unlink()
    capsys.readouterr()
    run = _digress_run(tmp_path, **fields)
    assert main(["sample", "--run", str(run), "--n", "3", "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.json" in err[0] and message in err[0], err
    assert not out.exists()


def test_digress_posterior_is_bayes_with_the_marginal_transition_matrices() -> None:
    """The reverse step DiGress samples from, on a 3-class case by direct Bayes: the one-step matrix ``Q_{t|s}``
    solved from ``Q_s Q_{t|s} = Q_t`` (``Q_r = alpha_r I + (1 - alpha_r) 1 m^T``; t = 0 noise) is again of
    marginal form with ``alpha_t / alpha_s``, and ``p(x_s = j | x_t = v) = sum_c p(c) Q_s[c, j] Q_{t|s}[j, v] /
    sum_j' Q_s[c, j'] Q_{t|s}[j', v]`` for predicted clean-class probabilities ``p``."""
    from gencore.discrete.marginal import MarginalTransitionDiffusion

    m = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    noise = MarginalTransitionDiffusion(m)
    eye = torch.eye(3, dtype=torch.float64)
    p = torch.tensor([[0.1, 0.6, 0.3], [0.7, 0.2, 0.1], [0.0, 0.0, 1.0]], dtype=torch.float64)
    for t, s in ((0.0, 0.25), (0.3, 0.55), (0.6, 1.0)):
        a_t, a_s = (float(noise.schedule.alpha(torch.tensor(r, dtype=torch.float64))) for r in (t, s))
        q_s, q_t = a_s * eye + (1 - a_s) * m, a_t * eye + (1 - a_t) * m
        step = torch.linalg.solve(q_s, q_t)
        torch.testing.assert_close(step, a_t / a_s * eye + (1 - a_t / a_s) * m)
        for v in range(3):
            joint = q_s * step[:, v]  # [c, j]: q_s(j | c) q(v | j)
            expected = p @ (joint / joint.sum(-1, keepdim=True))
            ours = noise.posterior_probs(torch.full((3,), v), p, t, s)
            torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize(
    ("field", "value"),
    [("curvature", float("inf")), ("commitment", float("inf")), ("node_loss_weight", float("nan")),
     ("code_repulsion", float("inf")), ("repulsion_radius", float("inf"))],
)  # fmt: skip
def test_ggball_curvature_and_loss_weights_must_be_finite(field: str, value: float) -> None:
    """An infinite curvature made every latent NaN, and an infinite commitment weight times the warm-up's zero
    commitment made the loss NaN from the first step; both passed the ``> 0`` / ``>= 0`` checks."""
    from gencore.errors import ConfigError

    with pytest.raises(ConfigError, match=field) as info:
        GGBallConfig(**{field: value}).validate()
    assert "finite" in str(info.value)


@pytest.mark.parametrize(
    "bad", [{"hidden": "wide"}, {"hidden": 30}, {"layers": 0}, {"hidden": True}, {"distance_bias": "false"}]
)
def test_a_damaged_flow_prior_config_is_one_storage_error(tmp_path, bad) -> None:
    """``int("wide")`` was a ValueError traceback, a width the heads do not divide an assertion inside torch, and
    ``bool("false")`` silently built the prior with distance-biased attention (then a weight-mismatch message
    about a setting the file never asked for)."""
    from gencore.errors import StorageError
    from gencore.io import read_json, save_pretrained, write_json
    from gengraph.experiment import load_latent_run
    from gengraph.models.latent_flow import SetVelocity

    ae = GGBall(GGBallConfig(hidden=8, latent_dim=4, codebook_size=4))
    ae.save_pretrained(tmp_path / "autoencoder" / "model")
    arch = {"hidden": 16, "layers": 1, "distance_bias": False, "size_embedding": False}
    where = tmp_path / "prior" / "model"
    save_pretrained(where, SetVelocity(ae.geometry, **arch).state_dict(), {"class": "SetVelocity", **arch})
    assert load_latent_run(tmp_path)[1].inp.out_features == 16
    write_json(where / "config.json", read_json(where / "config.json") | bad)
    with pytest.raises(StorageError, match=r"config\.json' must give the prior's hidden \(a positive multiple of 4\)"):
        load_latent_run(tmp_path)
