"""Argument checks of the samplers' Python API (one typed sentence, before any work)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError, InputError
from genmol.generation.flow import GenConfig, build_backbone, draw_sizes, sample_conformers, sample_joint
from genmol.generation.vocab import AtomVocabulary

VOCAB = AtomVocabulary([(1, 0), (6, 0), (8, 0)])


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_backbone(GenConfig(hidden=8, layers=1), len(VOCAB))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes": [0, 3]}, "every size .atoms per molecule. must be a positive integer"),
        ({"sizes": [-1]}, "every size .atoms per molecule. must be a positive integer"),
        ({"sizes": [2.5]}, "every size .atoms per molecule. must be a positive integer"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"steps": 2.5}, "steps must be a positive integer"),
    ],
)
def test_sample_joint_refuses_bad_arguments(model, kwargs, match):
    args = {"sizes": [3], "steps": 2, "batch_size": 4} | kwargs
    with pytest.raises(ConfigError, match=match):
        sample_joint(model, VOCAB, args.pop("sizes"), strategy="quotient", **args)


@pytest.mark.parametrize("sizes", [[3, 4], torch.tensor([3, 4]), np.array([3, 4])])
def test_sample_joint_accepts_integer_sizes_of_any_kind(model, sizes):
    out = sample_joint(model, VOCAB, sizes, strategy="quotient", steps=2, generator=torch.Generator().manual_seed(0))
    assert [m.num_atoms for m in out] == [3, 4]


def test_draw_sizes_refuses_bad_arguments():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ConfigError, match="number of sizes"):
        draw_sizes({3: 1}, 0, g)
    with pytest.raises(InputError, match="size histogram"):
        draw_sizes({}, 2, g)
    with pytest.raises(InputError, match="size histogram"):
        draw_sizes({0: 5}, 2, g)
    assert draw_sizes({3: 1}, 2, g) == [3, 3]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_loss_runs_with_the_engines_cuda_generator():
    """gencore's Trainer hands the task a generator on the training device; the random rotations of the data
    were drawn on the CPU from it, which a CUDA generator refuses."""
    from conftest import embedded

    from genmol.chem.batching import pad
    from genmol.generation.flow import MoleculeFlowTask

    mols = [embedded("CCO", 0), embedded("CC=O", 1)]
    vocab = AtomVocabulary.from_molecules(mols)
    task = MoleculeFlowTask(GenConfig(hidden=8, layers=1), vocab)
    t = pad(mols, vocab.token)
    device = torch.device("cuda")
    batch = [t[k].to(device) for k in ("tokens", "coords", "mask", "bonds")]
    loss, _ = task.loss(task.model.to(device), batch, torch.Generator(device=device).manual_seed(0))
    assert torch.isfinite(loss)


def test_the_task_seeds_its_weights_without_reseeding_the_callers_rng():
    from conftest import embedded

    from genmol.generation.flow import MoleculeFlowTask

    vocab = AtomVocabulary.from_molecules([embedded("CCO", 0)])
    cfg = GenConfig(hidden=8, layers=1, seed=3)
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    task = MoleculeFlowTask(cfg, vocab)
    assert torch.equal(torch.rand(4), expected)  # the global stream goes on as if the task were not built
    torch.manual_seed(cfg.seed)
    reference = build_backbone(cfg, len(vocab))  # the weights are still those of the seed
    for a, b in zip(task.model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf")])
def test_config_refuses_a_bad_token_weight(weight):
    with pytest.raises(ConfigError, match="token_weight"):
        GenConfig(token_weight=weight).validate()


def test_config_keeps_the_harmonic_prior_to_conformers_and_checks_its_constant():
    GenConfig(task="conformer", prior="harmonic").validate()
    with pytest.raises(ConfigError, match="harmonic prior is built from the bonds"):
        GenConfig(task="joint", prior="harmonic").validate()
    with pytest.raises(ConfigError, match="prior must be one of gaussian, harmonic"):
        GenConfig(task="conformer", prior="uniform").validate()
    with pytest.raises(ConfigError, match="prior_alpha must be positive"):
        GenConfig(task="conformer", prior="harmonic", prior_alpha=0.0).validate()


def test_harmonic_training_noise_follows_the_bond_graph():
    """The task's noise for a 3-atom chain: bonded atoms 1 / alpha apart per coordinate, the ends 2 / alpha."""
    from genmol.generation.flow import prior_noise, prior_transform

    bonds = torch.zeros(20_000, 3, 3, dtype=torch.long)
    bonds[:, 0, 1] = bonds[:, 1, 0] = bonds[:, 1, 2] = bonds[:, 2, 1] = 1
    mask = torch.ones(20_000, 3)
    a = prior_transform("harmonic", bonds, mask, 2.0)
    x = prior_noise((20_000, 3, 3), mask, a, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(x.mean(1), torch.zeros(20_000, 3, dtype=torch.float64), atol=1e-12, rtol=0)  # centred
    near = (x[:, 0] - x[:, 1]).pow(2).mean().item()
    far = (x[:, 0] - x[:, 2]).pow(2).mean().item()
    assert abs(near - 0.5) < 0.02 and abs(far - 1.0) < 0.04  # standard errors 0.003 and 0.006
    assert prior_transform("gaussian", bonds, mask, 2.0) is None


# --- the training loss on a fixed draw, against a hand computation ------------------------------------------------


def _loss_batch(b=6, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(b, n)
    mask[0, 3:] = 0
    mask[2, 4:] = 0
    tokens = torch.randint(len(VOCAB), (b, n), generator=g) * mask.long()
    coords = torch.randn(b, n, 3, generator=g) * 1.5 * mask[..., None]
    bonds = torch.zeros(b, n, n, dtype=torch.long)
    v = torch.randn(b, n, 3, generator=g)  # what the fake network answers
    logits = torch.randn(b, n, len(VOCAB), generator=g)
    return (tokens, coords, mask, bonds), v, logits


def _expected_draws(strategy, tokens, coords, mask, seed):
    """The task's random draws replayed from a generator with the same seed: rotation, noise, pairing, time,
    then the token corruption at the same time (keep a token with probability alpha_t = t; t = 1 is data)."""
    from genmol.generation.strategies import pair
    from genmol.se3 import centered_noise, random_rotations

    g = torch.Generator().manual_seed(seed)
    b = tokens.shape[0]
    x1 = coords @ random_rotations(b, generator=g).transpose(1, 2)
    x0 = centered_noise(x1.shape, mask, generator=g, dtype=x1.dtype)
    x0, x1 = pair(strategy, x0, x1, mask)
    t = torch.rand(b, generator=g)
    keep = torch.rand(tokens.shape, generator=g) < t[:, None]
    noisy = torch.where(keep, tokens, torch.full_like(tokens, len(VOCAB))) * mask.long()
    x_t = (t[:, None, None] * x1 + (1 - t[:, None, None]) * x0) * mask[..., None]
    return x0, x1, t, x_t, noisy


@pytest.mark.parametrize("strategy", ["com", "kabsch", "quotient", "quotient-aligned"])
def test_task_loss_matches_a_hand_computation_on_a_fixed_draw(strategy):
    """Coordinates: the strategy's own error (quotient: |P_h(x_t)(v - u)|^2 with the projection at x_t;
    com/kabsch: the centred error), per atom, averaged over molecules. Tokens: cross-entropy over the masked
    real positions only, weighted by token_weight; the tokens are corrupted at the coordinates' time."""
    from genmol.generation.flow import MoleculeFlowTask
    from genmol.se3 import center, horizontal_projection

    batch, v, logits = _loss_batch()
    tokens, coords, mask, _ = batch
    seen = {}

    def fake(x_t, t, *, tokens, mask):
        seen.update(x_t=x_t, t=t, tokens=tokens)
        return v, logits

    task = MoleculeFlowTask(GenConfig(hidden=8, layers=1, strategy=strategy, token_weight=0.7), VOCAB)
    loss, metrics = task.loss(fake, batch, torch.Generator().manual_seed(5))
    x0, x1, t, x_t, noisy = _expected_draws(strategy, tokens, coords, mask, seed=5)
    torch.testing.assert_close(seen["t"], t)
    torch.testing.assert_close(seen["x_t"], x_t, atol=1e-5, rtol=0)
    assert torch.equal(seen["tokens"].argmax(-1), noisy)  # corrupted at the coordinates' t, padding token 0
    assert 0 < int(((noisy == len(VOCAB)) & mask.bool()).sum()) < int(mask.sum())  # some masked, some kept

    diff = (v - (x1 - x0)) * mask[..., None]
    if strategy in ("quotient", "quotient-aligned"):
        diff = horizontal_projection(x_t, diff, mask)
    else:
        diff = center(diff, mask)
    coord = (diff.pow(2).sum((1, 2)) / mask.sum(1)).mean()
    masked = (noisy == len(VOCAB)) & mask.bool()
    logp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    tok = -(logp * masked).sum() / masked.sum()
    torch.testing.assert_close(metrics["coord"], coord, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(metrics["token_ce"], tok, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss, coord + 0.7 * tok, atol=1e-5, rtol=1e-5)


def test_task_corrupts_tokens_like_the_time_says():
    """t near 0 is noise (almost every token masked), t near 1 is data (almost none)."""
    from genmol.generation.flow import MoleculeFlowTask

    b, n = 400, 6
    tokens = torch.randint(len(VOCAB), (b, n), generator=torch.Generator().manual_seed(0))
    batch = (tokens, torch.randn(b, n, 3), torch.ones(b, n), torch.zeros(b, n, n, dtype=torch.long))
    seen = {}

    def fake(x_t, t, *, tokens, mask):
        seen.update(t=t, tokens=tokens)
        return torch.zeros_like(x_t), torch.zeros(*x_t.shape[:2], len(VOCAB))

    task = MoleculeFlowTask(GenConfig(hidden=8, layers=1), VOCAB)
    task.loss(fake, batch, torch.Generator().manual_seed(1))
    frac = (seen["tokens"].argmax(-1) == len(VOCAB)).float().mean(1)
    early, late = seen["t"] < 0.2, seen["t"] > 0.8
    assert frac[early].mean() > 0.8 and frac[late].mean() < 0.2


# --- the joint sampler with an oracle network ---------------------------------------------------------------------

TARGET = torch.tensor([[0.0, 0.0, 0.0], [1.1, 0.0, 0.0], [-0.4, 1.0, 0.1], [-0.3, -0.5, 0.9], [0.2, -0.6, -1.2]])
TARGET_TOKENS = torch.tensor([1, 0, 0, 0, 2])  # C H H H O


class Oracle(torch.nn.Module):
    """The exact velocity towards the nearest rotation of a fixed molecule, ``(x1 - x) / (1 - t)``, plus motion the
    sampler must drop (a translation; for the quotient strategies also an infinitesimal rotation), and confident
    logits of the molecule's tokens. Records what it is called with."""

    def __init__(self, strategy):
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1))
        self.vertical = strategy in ("quotient", "quotient-aligned")
        self.calls = []

    def forward(self, x, t, *, tokens, mask, edges=None):
        from genmol.metrics.rmsd import kabsch_align
        from genmol.se3 import center

        b, n, _ = x.shape
        x1 = kabsch_align(center(TARGET[None, :n].expand(b, n, 3) * mask[..., None], mask), x, mask)
        v = (x1 - x) / (1.0 - t[:, None, None])
        junk = torch.tensor([0.3, -0.2, 0.5])
        if self.vertical:
            junk = junk + torch.linalg.cross(torch.tensor([1.0, -2.0, 0.5]).expand_as(x), center(x, mask), dim=-1)
        v = (v + junk) * mask[..., None]
        logits = torch.full((b, n, len(VOCAB)), -30.0)
        logits.scatter_(2, TARGET_TOKENS[None, :n, None].expand(b, n, 1), 30.0)
        self.calls.append({"x": x.clone(), "t": t.clone(), "v": v, "tokens": tokens.argmax(-1), "mask": mask})
        return v, logits


@pytest.mark.parametrize("strategy", ["com", "kabsch", "quotient", "quotient-aligned"])
def test_sample_joint_with_an_oracle_reaches_the_molecule(strategy):
    from genmol.metrics.rmsd import kabsch_rmsd
    from genmol.se3 import center

    steps = 20
    oracle = Oracle(strategy)
    mols = sample_joint(
        oracle, VOCAB, [5] * 8, strategy=strategy, steps=steps, generator=torch.Generator().manual_seed(0)
    )
    xs = torch.tensor(np.stack([m.coordinates for m in mols]))
    assert kabsch_rmsd(xs, center(TARGET[None].double()).expand(8, 5, 3)).max() < 1e-3
    assert all(m.atomic_numbers.tolist() == [6, 1, 1, 1, 8] for m in mols)
    # the model is called at t_k on the step from t_k to t_{k+1}: 0, 1/steps, ..., 1 - 1/steps
    times = torch.stack([c["t"][0] for c in oracle.calls])
    torch.testing.assert_close(times, torch.arange(steps, dtype=times.dtype) / steps)


@pytest.mark.parametrize("strategy", ["com", "quotient"])
def test_sample_joint_steps_along_the_projected_velocity(strategy):
    """Each Euler step moves by dt times the CoM-free velocity (quotient: its horizontal part at x_k)."""
    from genmol.se3 import center, horizontal_projection

    steps = 10
    oracle = Oracle(strategy)
    sample_joint(oracle, VOCAB, [5, 4, 3], strategy=strategy, steps=steps, generator=torch.Generator().manual_seed(1))
    for a, b in zip(oracle.calls, oracle.calls[1:], strict=False):
        mask = a["mask"]
        assert (b["x"] * mask[..., None]).sum(1).abs().max() < 1e-5  # the samples stay centred
        d = horizontal_projection(a["x"], a["v"], mask) if strategy == "quotient" else center(a["v"], mask)
        torch.testing.assert_close(b["x"], (a["x"] + d / steps) * mask[..., None], atol=1e-5, rtol=1e-5)


def test_sample_joint_unmasks_the_right_fraction_per_step():
    """With the linear schedule the masked fraction at the model's call at t_k is about 1 - t_k."""
    steps, count = 10, 200
    oracle = Oracle("com")
    sample_joint(oracle, VOCAB, [5] * count, strategy="com", steps=steps, generator=torch.Generator().manual_seed(2))
    for k in (0, 2, 5, 8):
        frac = (oracle.calls[k]["tokens"] == len(VOCAB)).float().mean().item()
        expected = 1.0 - k / steps
        assert abs(frac - expected) <= 4 * max(expected * (1 - expected) / (5 * count), 1e-12) ** 0.5 + 1e-9, (k, frac)


def test_draw_sizes_follows_the_histogram_counts():
    histogram = {3: 1, 5: 3, 9: 6}
    n = 20_000
    sizes = np.asarray(draw_sizes(histogram, n, torch.Generator().manual_seed(0)))
    total = sum(histogram.values())
    for size, count in histogram.items():
        p = count / total
        assert abs((sizes == size).mean() - p) < 4 * (p * (1 - p) / n) ** 0.5, size


def test_draw_sizes_refuses_non_finite_counts_and_fractional_sizes():
    """A NaN or infinite count reached torch.multinomial (a RuntimeError), and a size of 2.5 atoms was silently
    drawn as 2."""
    g = torch.Generator().manual_seed(0)
    for histogram in ({3: float("nan"), 4: 1}, {3: float("inf"), 4: 1}, {2.5: 1}, {3: 1, 4: -1}):
        with pytest.raises(InputError, match="size histogram must map positive integer sizes"):
            draw_sizes(histogram, 2, g)
    with pytest.raises(ConfigError, match="number of sizes to draw must be a positive integer"):
        draw_sizes({3: 1}, 2.5, g)
    assert set(draw_sizes({np.int64(4): np.int64(2), 5: 0.5}, 50, g)) == {4, 5}  # NumPy and float weights are fine


def test_samplers_refuse_an_infinite_noise_scale_and_a_fractional_conformer_count(model):
    from conftest import embedded

    from genmol.generation.flow import sample_conformers

    with pytest.raises(ConfigError, match="noise scale must be non-negative and finite, got inf"):
        sample_joint(model, VOCAB, [3], strategy="com", sampler="sde", noise_scale=float("inf"), steps=2)
    conformer_model = build_backbone(GenConfig(task="conformer", hidden=8, layers=1), len(VOCAB))
    with pytest.raises(ConfigError, match=r"conformers per molecule must be a positive integer, got 2\.5"):
        sample_conformers(conformer_model, VOCAB, [embedded("CO", 0)], 2.5, strategy="com", steps=2)


@pytest.mark.parametrize("strategy", ["com", "kabsch", "quotient", "quotient-aligned"])
def test_ode_samplers_are_rotation_equivariant(strategy, monkeypatch):
    """With an E(3)-equivariant network (EGNN), rotating the initial noise rotates every ODE sample and leaves its
    atom types alone; the conformer sampler likewise with the harmonic prior's noise."""
    from conftest import embedded

    import genmol.generation.flow as flow
    from genmol.se3 import random_rotations

    rot = random_rotations(1, generator=torch.Generator().manual_seed(9))[0]
    torch.manual_seed(0)
    joint = build_backbone(GenConfig(hidden=16, layers=2), len(VOCAB))
    conformer = build_backbone(GenConfig(task="conformer", hidden=16, layers=2), len(VOCAB))
    graph = embedded("OCC=O", 0)

    def run(rotate):
        def noise(*args, **kwargs):
            x = make(*args, **kwargs)
            return x @ rot.T if rotate else x

        make = flow.centered_noise
        monkeypatch.setattr(flow, "centered_noise", noise)
        mols = sample_joint(
            joint, VOCAB, [5, 3, 6], strategy=strategy, steps=8, generator=torch.Generator().manual_seed(1)
        )
        monkeypatch.undo()
        make = flow.prior_noise
        monkeypatch.setattr(flow, "prior_noise", noise)
        confs = flow.sample_conformers(
            conformer,
            VOCAB,
            [graph],
            2,
            strategy=strategy,
            steps=8,
            prior="harmonic",
            generator=torch.Generator().manual_seed(2),
        )[0]
        monkeypatch.undo()
        return mols, confs

    plain, turned = run(False), run(True)
    for a, b in zip(plain[0] + plain[1], turned[0] + turned[1], strict=True):
        assert a.atomic_numbers.tolist() == b.atomic_numbers.tolist()
        np.testing.assert_allclose(a.coordinates @ rot.double().numpy().T, b.coordinates, atol=1e-4, rtol=0)
    assert max(np.abs(m.coordinates).max() for m in plain[0]) > 0.1  # the samples moved away from the origin


@pytest.mark.parametrize("prior", ["gaussian", "harmonic"])
def test_sde_samplers_step_from_t_k_with_the_priors_noise(prior, monkeypatch):
    """The SDE samplers take each Euler-Maruyama step at the model's time t_k with dt = 1 / steps (the last step
    is an Euler step); the conformer sampler draws its initial noise from, and injects through, the harmonic
    prior's transform of the graph (isotropic noise with the curvature term keeps the wrong law there)."""
    from conftest import embedded

    import genmol.generation.flow as flow
    from genmol.chem.batching import pad

    steps, calls, priors = 5, [], []
    real_step, real_noise = flow.sde_step, flow.prior_noise

    def step(strategy, velocity, x, t, dt, mask, noise_scale, generator, noise_transform=None):
        calls.append((t, dt, noise_transform))
        return real_step(strategy, velocity, x, t, dt, mask, noise_scale, generator, noise_transform)

    def noise(shape, mask, transform, **kwargs):
        priors.append(transform)
        return real_noise(shape, mask, transform, **kwargs)

    monkeypatch.setattr(flow, "sde_step", step)
    monkeypatch.setattr(flow, "prior_noise", noise)
    graph = embedded("OCC=O", 0)
    model = build_backbone(GenConfig(task="conformer", hidden=8, layers=1), len(VOCAB))
    g = torch.Generator().manual_seed(0)
    kwargs = {"strategy": "quotient", "steps": steps, "sampler": "sde", "generator": g}
    flow.sample_conformers(model, VOCAB, [graph], 2, prior=prior, prior_alpha=1.7, **kwargs)
    times = [k / steps for k in range(steps - 1)]
    assert [c[0] for c in calls] == pytest.approx(times) and [c[1] for c in calls] == pytest.approx([1 / steps] * 4)
    t = pad([graph] * 2, VOCAB.token)
    expected = flow.prior_transform(prior, t["bonds"], t["mask"], 1.7)
    for transform in [priors[0]] + [c[2] for c in calls]:
        if prior == "gaussian":
            assert transform is None and expected is None
        else:
            torch.testing.assert_close(transform, expected)
    calls.clear()
    sample_joint(build_backbone(GenConfig(hidden=8, layers=1), len(VOCAB)), VOCAB, [4, 3], **kwargs)
    assert [c[0] for c in calls] == pytest.approx(times) and all(c[2] is None for c in calls)


def test_sample_joint_decodes_each_molecule_from_its_own_rows_of_a_padded_chunk():
    """In a chunk of mixed sizes molecule i is the first sizes[i] atoms of its row: the oracle's leading tokens and
    its geometry (to a rotation), centred over the real atoms; no padded atom reaches a molecule."""
    from genmol.metrics.rmsd import kabsch_rmsd
    from genmol.se3 import center

    sizes = [5, 3, 4, 2]
    mols = sample_joint(
        Oracle("com"), VOCAB, sizes, strategy="com", steps=20, generator=torch.Generator().manual_seed(3), batch_size=2
    )
    assert [m.name for m in mols] == [f"sample_{k}" for k in range(4)]
    for m, n in zip(mols, sizes, strict=True):
        assert m.atomic_numbers.tolist() == [VOCAB.pairs[int(k)][0] for k in TARGET_TOKENS[:n]]
        assert m.formal_charges.tolist() == [0] * n and m.num_hs.tolist() == [0] * n
        np.testing.assert_allclose(m.coordinates.mean(0), 0.0, atol=1e-5)
        target = center(TARGET[None, :n].double())
        assert kabsch_rmsd(torch.tensor(m.coordinates)[None], target).item() < 1e-3


def test_sample_conformers_keeps_each_graph_and_gives_coordinates_in_its_atom_order():
    """The conformers of each graph keep its atoms, charges, bonds and order; with an oracle velocity towards the
    graph's own geometry every atom lands on its own position (to a rotation), for graphs of different sizes."""
    from conftest import embedded

    from genmol.metrics.rmsd import kabsch_align, kabsch_rmsd
    from genmol.se3 import center

    graphs = [embedded("OCC=O", 0), embedded("CC[NH3+]", 1)]
    vocab = AtomVocabulary.from_molecules(graphs)
    targets = {g.num_atoms: torch.tensor(g.coordinates, dtype=torch.float32) for g in graphs}  # sizes 8 and 11

    class ConformerOracle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x, t, *, tokens, mask, edges):
            b, n, _ = x.shape
            x1 = kabsch_align(center(targets[n][None].expand(b, n, 3), mask), x, mask)
            return (x1 - x) / (1.0 - t[:, None, None]), torch.zeros(b, n, len(vocab))

    ens = sample_conformers(
        ConformerOracle(), vocab, graphs, 3, strategy="com", steps=20, generator=torch.Generator().manual_seed(0)
    )
    assert [len(e) for e in ens] == [3, 3]
    for graph, confs in zip(graphs, ens, strict=True):
        for c in confs:
            assert c.atomic_numbers.tolist() == graph.atomic_numbers.tolist()
            assert c.formal_charges.tolist() == graph.formal_charges.tolist()
            assert c.bonds.tolist() == graph.bonds.tolist() and c.bond_orders.tolist() == graph.bond_orders.tolist()
            want = center(torch.tensor(graph.coordinates)[None])
            assert kabsch_rmsd(torch.tensor(c.coordinates)[None], want).item() < 1e-3
