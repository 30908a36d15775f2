"""GGBall, the latent flow prior, the DiGress baseline, and the train -> sample -> evaluate command line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from gencore.errors import ConfigError, GenError, InputError
from gengraph.batch import pack, unpack
from gengraph.cli import build_parser, main
from gengraph.datasets import generate
from gengraph.experiment import load_latent_run
from gengraph.hyperbolic import BallGeometry, make_geometry
from gengraph.io import read_graph_set
from gengraph.models.digress import DigressConfig, DigressDenoiser
from gengraph.models.ggball import GGBall, GGBallConfig, latent_repulsion
from gengraph.models.latent_flow import COUPLINGS, SetVelocity, latent_flow_loss, sample_latent_sets


def _batch(n: int = 8):
    return pack(generate("community-small", n, seed=0), 20)


def test_pack_unpack_roundtrip() -> None:
    graphs = generate("community-small", 5, seed=3)
    back = unpack(*pack(graphs, 20))
    assert all(torch.equal(a.edges, b.edges) and a.n_nodes == b.n_nodes for a, b in zip(graphs, back, strict=True))


def test_ggball_trains_and_keeps_its_codebook_on_the_ball(tmp_path) -> None:
    torch.manual_seed(0)
    edges, nodes, mask = _batch()
    model = GGBall(GGBallConfig(hidden=16, codebook_size=8, vq_warmup=5))
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(30):
        loss, metrics = model(edges, nodes, mask, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        assert (model.codebook.codes.norm(dim=-1) < 1).all()
    assert bool(model.codebook.initialised) and metrics["codes_used"] >= 2
    model.eval()
    with torch.no_grad():  # the count kept on the device is the number of distinct codes of the real nodes
        _, idx, _ = model.quantise(model.encode(edges, nodes, mask, torch.Generator().manual_seed(1)), mask)
        _, m = model(edges, nodes, mask, torch.Generator().manual_seed(1))
    assert int(m["codes_used"]) == torch.unique(idx[mask.bool()]).numel()
    assert sum(losses[-5:]) < sum(losses[5:10])  # quantised from step 6 on
    model.eval()
    model.save_pretrained(tmp_path / "m")
    again = GGBall.from_pretrained(tmp_path / "m").eval()
    z = model.encode(edges, nodes, mask)
    torch.testing.assert_close(again.encode(edges, nodes, mask), z)
    assert torch.equal(again.quantise(z, mask)[1], model.quantise(z, mask)[1])


def test_ggball_encoder_is_permutation_equivariant() -> None:
    torch.manual_seed(0)
    edges, nodes, mask = _batch(1)
    n = int(mask.sum())
    perm = torch.cat([torch.randperm(n), torch.arange(n, 20)])
    # without the positional inputs (Laplacian eigenvectors: arbitrary signs and bases; random features) the
    # encoder is exactly equivariant; the per-graph centring keeps it so
    model = GGBall(GGBallConfig(hidden=16, laplacian_pe=0, random_features=0)).eval()
    z = model.encode(edges, nodes, mask)
    zp = model.encode(edges[:, perm][:, :, perm], nodes[:, perm], mask[:, perm])
    torch.testing.assert_close(zp[0, :n], z[0, perm[:n]], rtol=1e-4, atol=1e-5)


def test_latent_flow_prior_is_equivariant_and_samples_on_the_ball() -> None:
    torch.manual_seed(0)
    geo = BallGeometry(4)
    net = SetVelocity(geo, hidden=16, layers=1).eval()
    x = geo.expmap0(torch.randn(2, 5, 4))
    mask = torch.ones(2, 5, dtype=torch.bool)
    perm = torch.randperm(5)
    t = torch.tensor([0.3, 0.7])
    torch.testing.assert_close(net(x[:, perm], t, mask=mask), net(x, t, mask=mask)[:, perm], rtol=1e-4, atol=1e-5)
    loss = latent_flow_loss(net, geo, x, mask, torch.Generator().manual_seed(0))
    assert torch.isfinite(loss) and float(loss) > 0
    z = sample_latent_sets(net, geo, mask, steps=4, generator=torch.Generator().manual_seed(0))
    assert (z.norm(dim=-1) < 1).all()


def test_set_ot_coupling_makes_the_prior_loss_blind_to_the_order_of_a_graphs_nodes() -> None:
    """With index pairing, reordering a graph's latent nodes changes which noise node goes where (and the loss);
    with the optimal assignment the pairing follows the nodes, and the equivariant network gives the same loss."""
    torch.manual_seed(0)
    geo = BallGeometry(4)
    net = SetVelocity(geo, hidden=16, layers=1).eval()
    x = geo.expmap0(0.5 * torch.randn(3, 6, 4))
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    perm = torch.tensor([3, 0, 2, 1, 4, 5])  # keeps graph 1's padding in place

    def loss(z, coupling):
        return float(latent_flow_loss(net, geo, z, mask, torch.Generator().manual_seed(1), coupling))

    assert loss(x[:, perm], "set-ot") == pytest.approx(loss(x, "set-ot"), rel=1e-5)
    assert abs(loss(x[:, perm], "independent") - loss(x, "independent")) > 1e-3
    with pytest.raises(ConfigError, match="prior coupling"):
        loss(x, "sinkhorn")


def test_size_embedding_lets_the_prior_count_its_nodes() -> None:
    """Attention averages cannot count: a set of n copies of one point gives every node the same output whatever
    n is. With ``size_embedding`` the output depends on n; the field stays equivariant and blind to padding."""
    torch.manual_seed(0)
    geo = BallGeometry(4)
    point = geo.expmap0(0.3 * torch.randn(4))
    x = point.expand(2, 6, 4).clone()
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 3:] = False  # graph 0: three copies; graph 1: six
    t = torch.tensor([0.4, 0.4])
    plain = SetVelocity(geo, hidden=16, layers=2).eval()
    out = plain(x, t, mask=mask)
    torch.testing.assert_close(out[0, 0], out[1, 0], rtol=1e-5, atol=1e-6)
    net = SetVelocity(geo, hidden=16, layers=2, size_embedding=True).eval()
    out = net(x, t, mask=mask)
    assert (out[0, 0] - out[1, 0]).abs().max() > 1e-3
    assert (out[0, 3:] == 0).all()
    y = geo.expmap0(0.3 * torch.randn(2, 6, 4))
    perm = torch.tensor([2, 0, 1, 5, 3, 4])  # keeps graph 0's padding behind its real nodes
    torch.testing.assert_close(net(y[:, perm], t, mask=mask)[1], net(y, t, mask=mask)[1, perm], rtol=1e-4, atol=1e-5)
    moved = y.clone()
    moved[0, 3:] = geo.expmap0(torch.randn(3, 4))
    torch.testing.assert_close(net(moved, t, mask=mask)[0, :3], net(y, t, mask=mask)[0, :3], rtol=1e-5, atol=1e-6)


def test_run_config_refuses_a_zero_prior_budget() -> None:
    from gengraph.experiment import RunConfig

    assert RunConfig(prior_steps=None).validate().prior_steps is None  # unset: 5 x steps
    with pytest.raises(ConfigError, match="prior_steps must be a positive integer"):
        RunConfig(prior_steps=0).validate()


def test_distance_biased_prior_is_equivariant_ignores_padding_and_attends_locally() -> None:
    """With ``distance_bias`` the field stays permutation-equivariant and blind to padded rows; with every head's
    scale large, a node attends only to its near neighbours, so moving a far cluster changes nothing for it
    (plain dot-product attention mixes every node into every output)."""
    torch.manual_seed(0)
    geo = BallGeometry(4)
    net = SetVelocity(geo, hidden=16, layers=2, distance_bias=True).eval()
    x = geo.expmap0(0.3 * torch.randn(2, 6, 4))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    t = torch.tensor([0.3, 0.9])
    out = net(x, t, mask=mask)
    perm = torch.tensor([2, 0, 3, 1, 4, 5])  # keeps padding last
    torch.testing.assert_close(net(x[:, perm], t, mask=mask), out[:, perm], rtol=1e-4, atol=1e-5)
    moved = x.clone()
    moved[1, 4:] = geo.expmap0(0.5 * torch.randn(2, 4))
    torch.testing.assert_close(net(moved, t, mask=mask)[1, :4], out[1, :4], rtol=1e-5, atol=1e-6)
    assert (out[1, 4:] == 0).all()
    with torch.no_grad():  # the inference fast path, with padded rows far from every real node
        moved[1, 4:] = geo.expmap0(torch.full((2, 4), 2.0))
        torch.testing.assert_close(net(moved, t, mask=mask), out, rtol=1e-4, atol=1e-5)
    # two clusters of two nodes, 0.02 apart inside a cluster and ~1 apart between them
    near = torch.tensor([[0.3, 0, 0, 0], [0.3, 0.02, 0, 0], [-0.3, 0, 0, 0], [-0.3, 0.02, 0, 0]])
    far = near.clone()
    far[2:, 2] += 0.4  # the second cluster moves, still ~1 away from the first
    pts = geo.expmap0(torch.stack([near, far]))
    m4, t4 = torch.ones(2, 4, dtype=torch.bool), torch.tensor([0.5, 0.5])
    plain = SetVelocity(geo, hidden=16, layers=2).eval()
    assert not torch.allclose(plain(pts, t4, mask=m4)[0, :2], plain(pts, t4, mask=m4)[1, :2], atol=1e-4)
    with torch.no_grad():
        net.distance_scale.bias.fill_(float(torch.log(torch.tensor(1e3))))
    local = net(pts, t4, mask=m4)
    torch.testing.assert_close(local[0, :2], local[1, :2], rtol=1e-4, atol=1e-5)
    loss = latent_flow_loss(net, geo, x, mask, torch.Generator().manual_seed(0))
    loss.backward()
    with torch.no_grad():
        net.out.bias.fill_(float("nan"))
    with pytest.raises(GenError, match="non-finite points"):
        sample_latent_sets(net, geo, mask, steps=2)
    assert torch.isfinite(net.distance_scale.weight.grad).all() and float(net.distance_scale.bias.grad.abs().sum()) > 0


@pytest.mark.parametrize("kind", ["ball", "euclidean"])
def test_latent_flow_centring_is_an_isometry_to_the_frechet_mean(kind: str) -> None:
    """The prior's coordinates: the training latents' Frechet mean goes to the origin (Karcher condition
    sum_i log_0 y_i = 0), distances are kept, and uncentring inverts centring; a zero field returns base noise
    around the centre, not around the origin (the prior's base is the wrapped normal at the data's mean)."""
    gen = torch.Generator().manual_seed(0)
    geo = make_geometry(kind, 4)
    direction = torch.tensor([1.0, -0.5, 0.3, 0.2])
    x = geo.expmap0(2.0 * direction / direction.norm() + 0.1 * torch.randn(3, 40, 4, generator=gen))
    mask = torch.ones(3, 40, dtype=torch.bool)
    mask[1, 30:] = False
    net = SetVelocity(geo, hidden=16, layers=1).eval()
    net.fit_centre(x, mask)
    y = net.centred(x)
    ys = y[mask].double()
    karcher = geo.manifold.logmap(torch.zeros_like(ys), ys).mean(0)
    assert float(karcher.norm()) < 1e-4
    torch.testing.assert_close(geo.pairwise_dist(y, y), geo.pairwise_dist(x, x), rtol=1e-4, atol=2e-4)
    torch.testing.assert_close(net.uncentred(y), x, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        net.out.weight.zero_()
        net.out.bias.zero_()
    z = sample_latent_sets(net, geo, torch.ones(1, 4000, dtype=torch.bool), steps=2, generator=gen)[0]
    mean = geo.frechet_mean(z, torch.ones(1, 4000), z[:1], iters=10)[0]
    assert float(geo.manifold.dist(mean, net.centre)) < 0.1 < float(geo.manifold.dist(mean, torch.zeros(4)))


@pytest.mark.parametrize("extra", [False, True])
def test_digress_denoiser_is_equivariant_with_symmetric_edges(extra: bool) -> None:
    torch.manual_seed(0)
    edges, nodes, mask = _batch(2)
    model = DigressDenoiser(DigressConfig(hidden=16, layers=1, extra_features=extra)).eval()
    t = torch.tensor([0.2, 0.9])
    nl, el = model(nodes, t, edges_t=edges, mask=mask)
    torch.testing.assert_close(el, el.transpose(1, 2))
    perm = torch.randperm(20)
    nlp, elp = model(nodes[:, perm], t, edges_t=edges[:, perm][:, :, perm], mask=mask[:, perm])
    keep = mask[:, perm]
    torch.testing.assert_close(nlp[keep], nl[:, perm][keep], rtol=1e-4, atol=1e-5)
    pair = keep[:, :, None] & keep[:, None, :]
    torch.testing.assert_close(elp[pair], el[:, perm][:, :, perm][pair], rtol=1e-4, atol=1e-5)


def test_command_line_train_sample_evaluate(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                "community-small",
                "--model",
                "ggball",
                "--steps",
                "4",
                "--out",
                str(run),
                "--no-progress",
            ]
        )
        == 0
    )
    out = tmp_path / "g.json"
    assert main(["sample", "--run", str(run), "--n", "6", "--steps", "3", "--out", str(out)]) == 0
    graphs = read_graph_set(out)
    assert len(graphs) == 6 and all(12 <= g.n_nodes <= 20 for g in graphs)
    biased = tmp_path / "biased"
    argv = ["train", "--data", "community-small", "--steps", "3", "--prior-distance-bias", "--prior-size-embedding"]
    assert main([*argv, "--no-progress", "--out", str(biased)]) == 0
    assert load_latent_run(biased)[1].distance_scale is not None and load_latent_run(run)[1].distance_scale is None
    assert load_latent_run(biased)[1].size is not None and load_latent_run(run)[1].size is None
    assert main(["sample", "--run", str(biased), "--n", "2", "--steps", "3", "--out", str(tmp_path / "b.json")]) == 0
    metrics = tmp_path / "m.json"
    assert main(["evaluate", "--reference", "community-small", "--generated", str(out), "--json", str(metrics)]) == 0
    record = json.loads(metrics.read_text())
    assert {"degree_mmd_gaussian_tv", "degree_mmd_gaussian_emd", "orbit_mmd_gaussian_tv", "valid"} <= set(record)
    assert (
        main(
            [
                "train",
                "--data",
                "community-small",
                "--model",
                "digress",
                "--steps",
                "3",
                "--out",
                str(tmp_path / "d"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert (
        main(["sample", "--run", str(tmp_path / "d"), "--n", "3", "--steps", "3", "--out", str(tmp_path / "d.json")])
        == 0
    )
    # --batch-size bounds memory: n graphs in batches, reproducible for one (seed, batch size); a batch of at least
    # n is the single batch it always was
    from gengraph.experiment import sample_run

    def drawn(folder, **kw) -> list[dict]:
        return [g.to_dict() for g in sample_run(folder, 5, seed=1, steps=3, **kw)]

    for folder in (tmp_path / "d", run):  # DiGress and GGBall
        batched = drawn(folder, batch_size=2)
        assert len(batched) == 5 and batched == drawn(folder, batch_size=2)
        assert drawn(folder, batch_size=5) == drawn(folder, batch_size=256)
    capsys.readouterr()
    argv = ["sample", "--run", str(tmp_path / "d"), "--n", "3", "--batch-size", "0", "--out", str(tmp_path / "z.json")]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "gengraph: error: the batch size must be a positive integer, got 0."
    ]
    assert main(["sample", "--run", str(tmp_path / "missing"), "--n", "3", "--out", str(tmp_path / "x.json")]) == 2
    assert "not a gengraph run folder" in capsys.readouterr().err
    # training into a finished run's folder (another model or the same) is refused; the run is untouched
    before = {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for model in ("digress", "ggball"):
        argv = ["train", "--data", "community-small", "--model", model, "--steps", "3", "--out", str(run)]
        assert main([*argv, "--no-progress"]) == 2
        assert "already holds a gengraph run (run.json); pass --resume auto" in capsys.readouterr().err
    assert {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    # resuming the finished run with its own settings trains nothing and says so
    argv = ["train", "--data", "community-small", "--model", "digress", "--steps", "3", "--out", str(tmp_path / "d")]
    d_before = {str(p): p.read_bytes() for p in (tmp_path / "d").rglob("*") if p.is_file()}
    assert main([*argv, "--resume", "auto"]) == 0
    assert "already holds this run, finished; nothing to train" in capsys.readouterr().out
    assert {str(p): p.read_bytes() for p in (tmp_path / "d").rglob("*") if p.is_file()} == d_before
    # a run written by an older gengraph (no format_version) is refused with one sentence, not loaded wrongly
    info = json.loads((tmp_path / "d" / "run.json").read_text())
    del info["format_version"]
    (tmp_path / "d" / "run.json").write_text(json.dumps(info))
    assert main(["sample", "--run", str(tmp_path / "d"), "--n", "3", "--out", str(tmp_path / "y.json")]) == 2
    assert "run format version 1" in capsys.readouterr().err
    assert not (tmp_path / "y.json").exists()


def test_latent_repulsion_is_exact_and_pushes_close_nodes_of_one_graph_apart() -> None:
    u = torch.tensor([[[0.0, 0.0], [0.05, 0.0], [1.0, 0.0]]], requires_grad=True)
    pair = torch.ones(1, 3, 3).triu(1)
    value = latent_repulsion(u, pair, 0.1)
    # only the first pair is inside the radius: (1 - 0.05^2 / 0.1^2)^2, averaged over the 3 pairs
    torch.testing.assert_close(value, torch.tensor(0.75**2 / 3))
    value.backward()
    assert u.grad[0, 0, 0] > 0 > u.grad[0, 1, 0]  # a descent step moves node 0 left and node 1 right
    assert (u.grad[0, 2] == 0).all() and (u.grad[..., 1] == 0).all()
    # coinciding nodes get the largest value and a finite gradient; pairs outside ``pair`` (padding) count nothing
    same = torch.zeros(1, 2, 2, requires_grad=True)
    v = latent_repulsion(same, torch.ones(1, 2, 2).triu(1), 0.1)
    v.backward()
    assert v.item() == 1.0 and torch.isfinite(same.grad).all()
    assert float(latent_repulsion(same, torch.zeros(1, 2, 2), 0.1)) == 0.0
    for bad in ({"code_repulsion": -1.0}, {"repulsion_radius": 0.0}):
        with pytest.raises(ConfigError, match="repulsion"):
            GGBallConfig(**bad).validate()


def test_an_interrupted_prior_resumes_exactly(tmp_path) -> None:
    import shutil

    from gencore.io import load_pretrained
    from gencore.train import find_checkpoints
    from gengraph.experiment import RunConfig, train_run

    graphs = generate("community-small", 16, seed=0)
    cfg = RunConfig(steps=4, prior_steps=6, batch_size=8, codebook_size=16, progress=False)
    full = train_run(cfg, graphs, tmp_path / "full", checkpoint_every=2)
    part = train_run(cfg, graphs, tmp_path / "part", checkpoint_every=2)
    # as if killed after prior step 4: no run.json, no prior model, no later checkpoint
    (part / "run.json").unlink()
    shutil.rmtree(part / "prior" / "model")
    shutil.rmtree(find_checkpoints(part / "prior" / "checkpoints")[0])
    with pytest.raises(InputError, match="pass --resume auto"):
        train_run(cfg, graphs, part, checkpoint_every=2)
    with pytest.raises(ConfigError, match=r"other settings \(batch_size: 8 -> 4\)"):
        train_run(replace(cfg, batch_size=4), graphs, part, checkpoint_every=2, resume="auto")
    train_run(cfg, graphs, part, checkpoint_every=2, resume="auto")
    a, b = load_pretrained(full / "prior" / "model")[0], load_pretrained(part / "prior" / "model")[0]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((part / "run.json").read_text()) == json.loads((full / "run.json").read_text())


def test_cli_train_passes_the_code_repulsion_to_the_autoencoder(tmp_path) -> None:
    run = tmp_path / "r"
    argv = ["train", "--data", "community-small", "--steps", "3", "--prior-steps", "2", "--no-progress"]
    assert main([*argv, "--code-repulsion", "0.5", "--repulsion-radius", "0.2", "--out", str(run)]) == 0
    ae, _ = load_latent_run(run)
    assert (ae.config.code_repulsion, ae.config.repulsion_radius) == (0.5, 0.2)
    logged = [json.loads(line) for line in (run / "autoencoder" / "metrics.jsonl").read_text().splitlines()]
    assert any("repulsion" in rec for rec in logged)
    assert main([*argv, "--code-repulsion", "-1", "--out", str(tmp_path / "bad")]) != 0


def test_cli_trains_and_samples_digress_with_its_extra_features(tmp_path) -> None:
    run = tmp_path / "d"
    argv = ["train", "--data", "community-small", "--model", "digress", "--steps", "3", "--no-progress"]
    assert main([*argv, "--out", str(run)]) == 0  # the features are on by default
    assert json.loads((run / "run.json").read_text())["config"]["digress_extra_features"] is True
    model = DigressDenoiser.from_pretrained(run / "denoiser" / "model")
    assert model.config.extra_features and model.edge_in.in_features == model.ke + 2
    out = tmp_path / "g.json"
    assert main(["sample", "--run", str(run), "--n", "4", "--steps", "3", "--out", str(out), "--no-progress"]) == 0
    assert len(read_graph_set(out)) == 4
    plain_run = tmp_path / "plain"
    assert main([*argv, "--no-digress-extra-features", "--out", str(plain_run)]) == 0
    plain = DigressDenoiser.from_pretrained(plain_run / "denoiser" / "model")
    assert not plain.config.extra_features and plain.edge_in.in_features == plain.ke
    # a model folder written before the option existed has no extra_features key: it loads the plain network
    config = plain_run / "denoiser" / "model" / "config.json"
    config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != "extra_features"}))
    old = DigressDenoiser.from_pretrained(plain_run / "denoiser" / "model")
    assert not old.config.extra_features and old.edge_in.in_features == old.ke
    sample = ["sample", "--run", str(plain_run), "--n", "2", "--steps", "2", "--out", str(out), "--no-progress"]
    assert main(sample) == 0


def test_cli_train_records_the_prior_coupling(tmp_path) -> None:
    run = tmp_path / "r"
    argv = ["train", "--data", "community-small", "--steps", "3", "--prior-steps", "2", "--no-progress"]
    assert main([*argv, "--prior-coupling", "set-ot", "--out", str(run)]) == 0
    assert json.loads((run / "run.json").read_text())["config"]["prior_coupling"] == "set-ot"
    with pytest.raises(SystemExit):
        main([*argv, "--prior-coupling", "nope", "--out", str(tmp_path / "bad")])
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    assert tuple(next(a for a in train._actions if a.dest == "prior_coupling").choices) == COUPLINGS


def test_cli_train_reads_a_yaml_config_and_flags_override_it(tmp_path, capsys) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text("hidden: 16\nvq_warmup: 1\nsteps: 40\nprior_steps: 2\ncode_repulsion: 0.5\nseed: 3\n")
    run = tmp_path / "r"
    argv = ["train", "--data", "community-small", "--config", str(cfg), "--steps", "3", "--no-progress"]
    assert main([*argv, "--out", str(run)]) == 0
    saved = json.loads((run / "run.json").read_text())["config"]
    # hidden and vq_warmup have no flag; --steps overrides the file's 40; flags not given keep the file's values
    assert (saved["hidden"], saved["vq_warmup"], saved["steps"], saved["prior_steps"]) == (16, 1, 3, 2)
    assert (saved["code_repulsion"], saved["seed"], saved["dataset"], saved["model"]) == (
        0.5,
        3,
        "community-small",
        "ggball",
    )
    assert (saved["repulsion_radius"], saved["prior_coupling"], saved["progress"]) == (0.1, "independent", False)
    cfg.write_text("hiden: 16\n")
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "run.yaml: unknown field(s) hiden" in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()


@pytest.mark.distributed
def test_two_process_training_from_the_command_line(tmp_path) -> None:
    run = tmp_path / "ddp"
    argv = ["train", "--data", "community-small", "--steps", "6", "--prior-steps", "4", "--batch-size", "8"]
    assert main([*argv, "--nproc", "2", "--out", str(run), "--no-progress"]) == 0
    assert json.loads((run / "run.json").read_text())["nproc"] == 2
    ranks = {p.name for p in next((run / "prior" / "checkpoints").iterdir()).iterdir()}
    assert {"rng-rank0.safetensors", "rng-rank1.safetensors"} <= ranks  # both stages ran on two processes
    out = tmp_path / "g.json"
    assert main(["sample", "--run", str(run), "--n", "4", "--steps", "3", "--out", str(out)]) == 0
    assert len(read_graph_set(out)) == 4
    assert main([*argv, "--nproc", "3", "--out", str(tmp_path / "odd")]) == 2  # 8 graphs do not split 3 ways


def test_a_run_refused_before_its_first_step_can_be_trained_again(tmp_path, capsys) -> None:
    """A batch larger than the data is refused by the engine after it made the (empty) stage folder; the corrected
    command used to be refused too, as if the folder held a run."""
    data = tmp_path / "two.json"
    data.write_text(
        '{"graphs": [{"n_nodes": 3, "edges": [[0, 1], [1, 2]]}, {"n_nodes": 4, "edges": [[0, 1], [2, 3]]}]}'
    )
    argv = ["train", "--data", str(data), "--model", "digress", "--steps", "2", "--out", str(tmp_path / "d")]
    assert main([*argv, "--no-progress"]) == 2
    assert "smaller global batch size" in capsys.readouterr().err
    assert main([*argv, "--batch-size", "2", "--no-progress"]) == 0
    assert (tmp_path / "d" / "run.json").is_file()


def test_zero_sampling_steps_are_refused_not_returned_as_noise(tmp_path) -> None:
    """``steps=0`` used to skip the reverse chain and return the marginal noise as if it were samples."""
    from gencore.discrete.marginal import MarginalTransitionDiffusion
    from gengraph.experiment import sample_run
    from gengraph.models.digress import digress_sample

    model = DigressDenoiser(DigressConfig(hidden=16, layers=1)).eval()
    noise = MarginalTransitionDiffusion(torch.tensor([1.0])), MarginalTransitionDiffusion(torch.tensor([0.7, 0.3]))
    mask = torch.ones(2, 20, dtype=torch.bool)
    with pytest.raises(ConfigError, match="sampling steps"):
        digress_sample(model, *noise, mask, steps=0)
    e, _ = digress_sample(model, *noise, mask, steps=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(e, e.transpose(1, 2))
    with pytest.raises(ConfigError, match="sampling steps"):  # refused before the run folder is read
        sample_run(tmp_path / "no-run", 4, steps=0)


def test_training_refuses_a_graph_without_nodes(tmp_path) -> None:
    """One node-less graph used to make every batch holding it train on a NaN loss (its attention rows are fully
    masked, and the masked mean multiplies NaN by 0); it is now refused before any work."""
    from gencore.discrete.marginal import MarginalTransitionDiffusion
    from gengraph.experiment import RunConfig, train_run
    from gengraph.graph import Graph
    from gengraph.models.digress import digress_loss

    graphs = [*generate("community-small", 3, seed=0), Graph(n_nodes=0)]
    edges, nodes, mask = pack(graphs, 20)
    noise = MarginalTransitionDiffusion(torch.tensor([1.0])), MarginalTransitionDiffusion(torch.tensor([0.7, 0.3]))
    loss, _ = digress_loss(
        DigressDenoiser(DigressConfig(hidden=16, layers=1)), *noise, edges, nodes, mask, torch.Generator()
    )
    assert torch.isnan(loss)  # why the set is refused
    cfg = RunConfig(model="digress", steps=1, batch_size=4, progress=False)
    with pytest.raises(InputError, match="graph 3 of the training set has no nodes"):
        train_run(cfg, graphs, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_samplers_run_on_the_models_device_with_a_cpu_generator_and_mask() -> None:
    """A CUDA model with a CPU mask and a CPU generator (as ``sample_run`` passes them): the noise is drawn on
    the CPU and moved, and the samples come back on the model's device."""
    from gencore.discrete.marginal import MarginalTransitionDiffusion
    from gengraph.models.digress import digress_sample

    cuda = torch.device("cuda")
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 6:] = False
    model = DigressDenoiser(DigressConfig(n_node_types=2, hidden=16, layers=1)).eval().to(cuda)
    noise = MarginalTransitionDiffusion(torch.tensor([0.6, 0.4])), MarginalTransitionDiffusion(torch.tensor([0.7, 0.3]))
    e, x = digress_sample(model, *noise, mask, steps=2, generator=torch.Generator().manual_seed(0))
    assert e.device.type == x.device.type == "cuda"
    assert torch.equal(e, e.transpose(1, 2)) and not e[1, 6:].any() and not x[1, 6:].any()
    for geo in (BallGeometry(4), make_geometry("euclidean", 4)):
        net = SetVelocity(geo, hidden=16, layers=1).eval().to(cuda)
        z = sample_latent_sets(net, geo, mask, steps=2, generator=torch.Generator().manual_seed(0))
        assert z.device.type == "cuda" and z.shape == (2, 10, 4) and torch.isfinite(z).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["ball", "euclidean"])
def test_training_losses_take_the_engines_cuda_generator(kind: str) -> None:
    """gencore's Trainer hands the losses a generator on the training device: the autoencoder's sign flips and
    random node features, and the prior's base noise, were drawn on the CPU from it, which a CUDA generator
    refuses."""
    cuda = torch.device("cuda")
    graphs = generate("tree", 4, seed=0)
    edges, nodes, mask = (t.to(cuda) for t in pack(graphs, max(g.n_nodes for g in graphs)))
    gen = torch.Generator(device=cuda).manual_seed(0)
    torch.manual_seed(0)
    ae = GGBall(GGBallConfig(n_max=edges.shape[1], geometry=kind, hidden=16, latent_dim=4, vq_warmup=1)).to(cuda)
    for _ in range(2):  # the warm-up step, then one through the codebook
        loss, _ = ae(edges, nodes, mask, gen)
        assert loss.device.type == "cuda" and torch.isfinite(loss)
    with torch.no_grad():
        zq, _, _ = ae.eval().quantise(ae.encode(edges, nodes, mask), mask)
    prior = SetVelocity(ae.geometry, hidden=16, layers=1).to(cuda)
    prior.fit_centre(zq, mask)  # its weights were made on the CPU
    for coupling in COUPLINGS:
        loss = latent_flow_loss(prior, ae.geometry, zq, mask, gen, coupling)
        assert loss.device.type == "cuda" and torch.isfinite(loss)


def test_ggball_counts_training_steps_on_the_host_and_rereads_them_after_a_load() -> None:
    edges, nodes, mask = _batch()
    model = GGBall(GGBallConfig(hidden=16, codebook_size=8, vq_warmup=3))
    g = torch.Generator().manual_seed(0)
    for step in range(1, 4):  # the warm-up: a plain autoencoder, the codebook untouched
        model(edges, nodes, mask, g)
        assert int(model.train_steps) == model._host_steps == step and not bool(model.codebook.initialised)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model(edges, nodes, mask, g)  # step 4 quantises: k-means initialisation
    assert bool(model.codebook.initialised) and int(model.train_steps) == model._host_steps == 4
    fresh = GGBall(GGBallConfig(hidden=16, codebook_size=8, vq_warmup=3))
    fresh(edges, nodes, mask, g)  # its own count (1) is replaced by the loaded one (3)
    fresh.load_state_dict(state)
    fresh(edges, nodes, mask, g)  # step 4 of the loaded run: past the warm-up
    assert bool(fresh.codebook.initialised) and int(fresh.train_steps) == fresh._host_steps == 4
    fresh.eval()
    fresh(edges, nodes, mask, g)  # evaluation counts nothing
    assert int(fresh.train_steps) == fresh._host_steps == 4


def test_noisy_edges_are_an_undirected_draw_on_each_graphs_node_pairs() -> None:
    """``q_t`` is drawn once per pair ``i < j`` and mirrored: clean at ``t = 1``, the marginal at ``t = 0``, and
    never an edge on the diagonal or to a padding node."""
    from gencore.discrete.marginal import MarginalTransitionDiffusion
    from gengraph.models.digress import noisy_edges

    edges, _, mask = pack(generate("community-small", 64, seed=0), 20)
    noise = MarginalTransitionDiffusion(torch.tensor([0.7, 0.3]))
    g = torch.Generator().manual_seed(0)
    assert torch.equal(noisy_edges(noise, edges, torch.ones(64), mask, g), edges)
    e0 = noisy_edges(noise, edges, torch.zeros(64), mask, g)
    assert torch.equal(e0, e0.transpose(1, 2)) and not e0.diagonal(dim1=1, dim2=2).any()
    outside = ~(mask[:, :, None] & mask[:, None, :])
    assert outside.any() and not e0[outside].any()
    pairs = (mask[:, :, None] & mask[:, None, :]).triu(1)
    share = e0[pairs].float().mean().item()  # the marginal's 0.3, whatever the clean graphs hold
    assert abs(share - 0.3) < 4 * (0.3 * 0.7 / pairs.sum().item()) ** 0.5


def test_the_prior_size_is_a_setting_and_older_runs_load_at_the_old_size(tmp_path, capsys) -> None:
    """``--prior-hidden`` / ``--prior-layers`` build, save and reload the prior at that size; a run whose
    prior config predates the setting (no ``hidden`` / ``layers`` keys) loads at the old fixed 64 x 2."""
    from gencore.io import read_json, write_json

    run = tmp_path / "wide"
    argv = ["train", "--data", "community-small", "--steps", "2", "--no-progress"]
    assert main([*argv, "--prior-hidden", "16", "--prior-layers", "3", "--out", str(run)]) == 0
    prior = load_latent_run(run)[1]
    assert prior.inp.out_features == 16 and len(prior.body.layers) == 3
    assert json.loads((run / "run.json").read_text())["config"]["prior_hidden"] == 16
    assert main(["sample", "--run", str(run), "--n", "2", "--steps", "2", "--out", str(tmp_path / "w.json")]) == 0

    old = tmp_path / "old"
    assert main([*argv, "--out", str(old)]) == 0
    config = old / "prior" / "model" / "config.json"
    write_json(config, {k: v for k, v in read_json(config).items() if k not in ("hidden", "layers")})
    prior = load_latent_run(old)[1]
    assert prior.inp.out_features == 64 and len(prior.body.layers) == 2
    write_json(config, {**read_json(config), "hidden": 32})  # weights of a 64-wide prior
    assert main(["sample", "--run", str(old), "--n", "2", "--out", str(tmp_path / "o.json")]) == 2
    assert "do not fit the prior its config.json describes" in capsys.readouterr().err

    assert main([*argv, "--prior-hidden", "30", "--out", str(tmp_path / "bad")]) == 2
    assert "prior_hidden must be a multiple of the prior's 4 attention heads, got 30" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


class _ExactMarginalDenoiser(torch.nn.Module):
    """The exact ``p(c | x_t)`` of graphs whose node types and edge classes are independent with laws ``p_node``
    and ``p_edge`` (Bayes with ``q_t(v | c) = alpha_t [v = c] + (1 - alpha_t) m_v``); records the times it is
    called at."""

    def __init__(self, node_noise, edge_noise, p_node: torch.Tensor, p_edge: torch.Tensor) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the sampler a device to read
        self.noise, self.laws, self.times = (node_noise, edge_noise), (p_node, p_edge), []

    def forward(self, x_t, t, *, edges_t, mask):
        self.times.append(float(t[0]))
        alpha = float(self.noise[0].schedule.alpha(t[0].double()))
        out = []
        for noise, law, v in zip(self.noise, self.laws, (x_t, edges_t), strict=True):
            onehot = torch.nn.functional.one_hot(v, law.numel()).double()
            q_v = alpha * onehot + (1 - alpha) * noise.marginal[v][..., None]
            out.append((law * q_v).log().float())
        return tuple(out)


def test_digress_sampler_with_the_exact_denoiser_draws_the_data_law() -> None:
    """Single variables (two-node graphs) with the exact denoiser: ancestral sampling from the marginals must give
    the data law whatever the number of steps, with the network read at the times ``t_k = k / steps``. Reading it
    at ``s`` instead gave edge shares 0.10, 0.39, 0.59 for 1, 3, 10 steps instead of 0.75."""
    from gencore.discrete.marginal import MarginalTransitionDiffusion
    from gengraph.models.digress import digress_sample

    p_node, p_edge = torch.tensor([0.2, 0.8], dtype=torch.float64), torch.tensor([0.25, 0.75], dtype=torch.float64)
    noise = MarginalTransitionDiffusion(torch.tensor([0.6, 0.4])), MarginalTransitionDiffusion(torch.tensor([0.9, 0.1]))
    mask = torch.ones(4000, 2, dtype=torch.bool)
    for steps in (1, 3):
        model = _ExactMarginalDenoiser(*noise, p_node, p_edge)
        e, x = digress_sample(model, *noise, mask, steps=steps, generator=torch.Generator().manual_seed(steps))
        assert model.times == pytest.approx([k / steps for k in range(steps)])
        assert torch.equal(e, e.transpose(1, 2)) and not e.diagonal(dim1=1, dim2=2).any()
        assert abs(e[:, 0, 1].float().mean() - 0.75) < 5 * (0.75 * 0.25 / 4000) ** 0.5
        assert abs(x.float().mean() - 0.8) < 5 * (0.8 * 0.2 / 8000) ** 0.5


def test_digress_loss_is_the_cross_entropy_of_real_nodes_and_node_pairs() -> None:
    """With logits that ignore the noisy input the loss is exact: the mean cross-entropy of the real nodes plus
    ``edge_weight`` times that of the real pairs ``i < j`` (brute force; the logits are not symmetric, so reading
    the lower triangle or the diagonal would change the number)."""
    from gencore.discrete.marginal import MarginalTransitionDiffusion
    from gengraph.models.digress import digress_loss

    graphs = [*generate("community-small", 2, seed=0), *generate("community-small", 1, seed=4)]
    edges, nodes, mask = pack(graphs, 20)
    nodes = (torch.arange(20) % 3).expand(3, 20) * mask  # three node types
    gen = torch.Generator().manual_seed(0)
    node_logits, edge_logits = torch.randn(3, 20, 3, generator=gen), torch.randn(3, 20, 20, 2, generator=gen)

    class Fixed(torch.nn.Module):
        def forward(self, x_t, t, *, edges_t, mask):
            return node_logits, edge_logits

    noise = MarginalTransitionDiffusion(torch.ones(3)), MarginalTransitionDiffusion(torch.tensor([0.7, 0.3]))
    loss, parts = digress_loss(Fixed(), *noise, edges, nodes, mask, gen, edge_weight=2.5)
    node_ce, edge_ce = [], []
    for b, g in enumerate(graphs):
        for i in range(g.n_nodes):
            node_ce.append(-node_logits[b, i].log_softmax(-1)[nodes[b, i]])
            for j in range(i + 1, g.n_nodes):
                edge_ce.append(-edge_logits[b, i, j].log_softmax(-1)[edges[b, i, j]])
    node_ce, edge_ce = torch.stack(node_ce).mean(), torch.stack(edge_ce).mean()
    torch.testing.assert_close(parts["node_ce"], node_ce)
    torch.testing.assert_close(parts["edge_ce"], edge_ce)
    torch.testing.assert_close(loss, node_ce + 2.5 * edge_ce)


@pytest.mark.parametrize("kind", ["ball", "euclidean"])
def test_latent_flow_loss_of_a_zero_field_is_the_mean_squared_geodesic_distance(kind: str) -> None:
    """Along the geodesic from ``x0`` to ``x1`` the speed is constant, ``|u_t|_{x_t} = d(x0, x1)``, so a zero field's
    loss is the mean of ``d(x0, x1)^2`` over the real nodes whatever ``t`` is drawn (in the metric norm: the
    Euclidean norm of ``u_t`` on the ball gave another number)."""
    torch.manual_seed(0)
    geo = make_geometry(kind, 4)
    net = SetVelocity(geo, hidden=16, layers=1).eval()
    with torch.no_grad():
        net.out.weight.zero_()
        net.out.bias.zero_()
    gen = torch.Generator().manual_seed(0)
    x1 = geo.expmap0(0.7 * torch.randn(3, 5, 4, generator=gen))
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    x1[1, 3:] = geo.expmap0(torch.full((2, 4), 2.0))  # padding far from the noise: it must not count
    loss = latent_flow_loss(net, geo, x1, mask, torch.Generator().manual_seed(1))
    x0 = geo.manifold.random_base(15, generator=torch.Generator().manual_seed(1)).view(3, 5, 4)  # the loss's draw
    d2 = geo.manifold.dist(x0, x1) ** 2
    assert float(loss.detach()) == pytest.approx(float(d2[mask].mean()), rel=1e-4)


def test_ggball_edge_probability_is_fermi_dirac_in_the_decoders_distance() -> None:
    """With the edge MLP's readout zeroed, ``p(edge_ij) = sigmoid((r - d(h_i, h_j)) / tau)`` for the decoder's
    context points ``h`` (Krioukov et al. 2010): close nodes are joined, far ones not."""
    torch.manual_seed(0)
    model = GGBall(GGBallConfig(hidden=8, latent_dim=4, codebook_size=4)).eval()
    with torch.no_grad():
        model.edge_mlp[-1].weight.zero_()
        model.edge_mlp[-1].bias.zero_()
        model.radius.fill_(1.3)
        model.log_tau.fill_(-0.5)
    zq = model.latent_geo.expmap0(torch.randn(2, 6, 4))
    mask = torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad():
        _, logits = model.decode(zq, mask)
        h = model.from_latent(zq)
        for block in model.dec_blocks:
            h = block(h, mask)
        d = model.hidden_geo.pairwise_dist(h, h)
    p = logits.softmax(-1)[..., 1]
    torch.testing.assert_close(p, torch.sigmoid((1.3 - d) / torch.tensor(-0.5).exp()), rtol=1e-5, atol=1e-6)
    assert p.min() < 0.01 and p.max() > 0.8  # both regimes are exercised


class _ToCentre(SetVelocity):
    """The exact marginal field of data that is one point, in the prior's centred coordinates where that point is
    the origin: the geodesic velocity ``log_x(0) / (1 - t)`` (t = 0 noise, t = 1 data)."""

    def forward(self, x, t, *, mask):
        t = torch.as_tensor(t, dtype=x.dtype).expand(x.shape[0])[:, None, None]
        return self.geometry.manifold.logmap(x, torch.zeros_like(x)) / (1 - t).clamp_min(1e-6) * mask[..., None]


@pytest.mark.parametrize("kind", ["ball", "euclidean"])
def test_the_exact_field_of_a_one_point_law_has_zero_loss_and_samples_that_point(kind: str) -> None:
    """When every latent is one point ``p`` the conditional and marginal fields agree, so the field that flows each
    point along its geodesic to ``p`` in the time left has zero flow-matching loss under either coupling, and the
    sampler (Euler exactly; midpoint to round-off) carries the base noise onto ``p``. A loss that ran the path from
    data to noise, read the time as ``1 - t`` or skipped the centring would give it a positive loss."""
    geo = make_geometry(kind, 3)
    p = geo.expmap0(torch.tensor([1.5, -0.7, 0.4]))
    x1 = p.expand(2, 5, 3).clone()
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    x1[1, 3:] = geo.expmap0(torch.randn(2, 3, generator=torch.Generator().manual_seed(0)))  # padding: elsewhere
    net = _ToCentre(geo, hidden=8, layers=1).eval()
    net.fit_centre(x1, mask)
    for coupling in COUPLINGS:
        assert float(latent_flow_loss(net, geo, x1, mask, torch.Generator().manual_seed(1), coupling)) < 1e-9
    for method in ("euler", "midpoint"):
        z = sample_latent_sets(net, geo, mask, steps=4, method=method, generator=torch.Generator().manual_seed(2))
        assert float(geo.manifold.dist(z[mask], p.expand(8, -1)).max()) < 1e-5


def test_a_codebook_the_warm_up_never_initialised_is_refused_not_quantised_to_one_point(tmp_path, capsys) -> None:
    """With ``vq_warmup`` at or past the training steps the k-means initialisation never ran: the all-zero codebook
    put every node of every graph on the origin (one code) and the run trained its prior on that, silently. The
    run config refuses it, and an autoencoder in that state refuses to quantise."""
    from gengraph.experiment import RunConfig

    edges, nodes, mask = _batch()
    model = GGBall(GGBallConfig(hidden=16, codebook_size=8, vq_warmup=5))
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        model(edges, nodes, mask, g)
    model.eval()
    with pytest.raises(ConfigError, match=r"never initialised.*vq_warmup \(5 steps\)"):
        model.quantise(model.encode(edges, nodes, mask), mask)
    with pytest.raises(ConfigError, match="never initialised"):
        model(edges, nodes, mask)
    RunConfig(steps=3, vq_warmup=2).validate()
    RunConfig(model="digress", steps=3, vq_warmup=3).validate()  # DiGress has no codebook
    for bad in (3, 10, -1):
        with pytest.raises(ConfigError, match=r"vq_warmup must lie in \[0, steps\) = \[0, 3\)"):
            RunConfig(steps=3, vq_warmup=bad).validate()
    cfg = tmp_path / "c.yaml"
    cfg.write_text("vq_warmup: 10\n")
    argv = ["train", "--data", "community-small", "--steps", "3", "--config", str(cfg), "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    assert "vq_warmup must lie in [0, steps) = [0, 3), got 10" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_digress_config_is_checked_when_the_denoiser_is_built() -> None:
    """A width that the heads do not divide, or no node types, built a denoiser that failed inside its first
    forward pass with a reshape or one-hot traceback; each is now one sentence naming the field."""
    for bad, match in (
        ({"hidden": 30}, r"hidden \(30\) must be a multiple of heads \(4\)"),
        ({"n_node_types": 0}, "n_node_types must be"),
        ({"heads": 0}, "heads must be"),
        ({"layers": -1}, "layers must be"),
        ({"edge_weight": -1.0}, "edge_weight must be >= 0"),
    ):
        with pytest.raises(ConfigError, match=match):
            DigressDenoiser(DigressConfig(**bad))
    DigressDenoiser(DigressConfig(hidden=12, heads=3, layers=0))
