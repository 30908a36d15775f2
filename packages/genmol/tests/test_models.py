from __future__ import annotations

import pytest
import torch

from genmol.models import EGNN, Backbone, CoordinateTransformer
from genmol.se3 import random_rotations


def inputs(seed=0, b=3, n=7, k=5, edges=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, 3, generator=g)
    mask = torch.ones(b, n)
    mask[0, 5:] = 0
    tokens = torch.nn.functional.one_hot(torch.randint(k + 1, (b, n), generator=g), k + 1).float()
    e = torch.nn.functional.one_hot(torch.randint(edges, (b, n, n), generator=g), edges).float() if edges else None
    return x * mask[..., None], torch.rand(b, generator=g), tokens, mask, e


@pytest.mark.parametrize("edges", [0, 5])
def test_egnn_is_rotation_equivariant_and_translation_invariant(edges):
    torch.manual_seed(0)
    model = EGNN(6, 5, hidden=32, layers=3, edge_features=edges).double()
    x, t, tok, mask, e = inputs(edges=edges)
    x, tok = x.double(), tok.double()
    e = None if e is None else e.double()
    rot = random_rotations(3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    shift = torch.randn(3, 1, 3, dtype=torch.float64)
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    v2, logits2 = model((x @ rot.transpose(1, 2) + shift) * mask[..., None], t, tokens=tok, mask=mask, edges=e)
    torch.testing.assert_close(v2, v @ rot.transpose(1, 2), atol=1e-9, rtol=0)
    torch.testing.assert_close(logits2, logits, atol=1e-9, rtol=0)
    assert v[0, 5:].abs().max() == 0  # padding never moves


def test_egnn_outputs_ignore_padding_content():
    torch.manual_seed(0)
    model = EGNN(6, 5, hidden=16, layers=2)
    x, t, tok, mask, _ = inputs()
    v, logits = model(x, t, tokens=tok, mask=mask)
    x2, tok2 = x.clone(), tok.clone()
    x2[0, 5:] = 100.0
    tok2[0, 5:] = 0.0
    v2, logits2 = model(x2, t, tokens=tok2, mask=mask)
    torch.testing.assert_close(v2[0, :5], v[0, :5])
    torch.testing.assert_close(logits2[0, :5], logits[0, :5])


def test_transformer_is_not_equivariant_but_respects_padding():
    torch.manual_seed(0)
    model = CoordinateTransformer(6, 5, hidden=32, layers=2, heads=4)
    x, t, tok, mask, _ = inputs()
    v, logits = model(x, t, tokens=tok, mask=mask)
    assert v.shape == x.shape and logits.shape == (3, 7, 5)
    rot = random_rotations(3, generator=torch.Generator().manual_seed(1))
    v2, _ = model(x @ rot.transpose(1, 2), t, tokens=tok, mask=mask)
    assert (v2 - v @ rot.transpose(1, 2)).abs().max() > 1e-4
    x2 = x.clone()
    x2[0, 5:] = 50.0
    v3, _ = model(x2, t, tokens=tok, mask=mask)
    torch.testing.assert_close(v3[0, :5], v[0, :5])


@pytest.mark.parametrize("klass", [EGNN, CoordinateTransformer])
def test_save_and_load_round_trip(tmp_path, klass):
    torch.manual_seed(0)
    model = klass(6, 5, hidden=16, layers=2, edge_features=5)
    model.save_pretrained(tmp_path / "m")
    back = Backbone.from_pretrained(tmp_path / "m")
    assert type(back) is klass
    x, t, tok, mask, e = inputs(edges=5)
    torch.testing.assert_close(back(x, t, tokens=tok, mask=mask, edges=e), model(x, t, tokens=tok, mask=mask, edges=e))


def test_e3nn_backbone_is_equivariant():
    pytest.importorskip("e3nn")
    from genmol.models import E3NNBackbone

    torch.manual_seed(0)
    model = E3NNBackbone(6, 5, hidden=8, layers=2, edge_features=5)
    x, t, tok, mask, e = inputs(edges=5)
    rot = random_rotations(3, generator=torch.Generator().manual_seed(2))
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    v2, logits2 = model((x @ rot.transpose(1, 2) + 1.5) * mask[..., None], t, tokens=tok, mask=mask, edges=e)
    torch.testing.assert_close(v2, v @ rot.transpose(1, 2), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits2, logits, atol=1e-4, rtol=1e-4)
    assert v.abs().max() > 0


def test_e3nn_backbone_output_does_not_depend_on_padding():
    """A molecule's velocity and logits are the same alone and padded into a batch with a larger molecule
    (the message normalisation used to divide by the padded width instead of the molecule's own size)."""
    pytest.importorskip("e3nn")
    from genmol.models import E3NNBackbone

    torch.manual_seed(0)
    model = E3NNBackbone(6, 5, hidden=8, layers=2, edge_features=5).double()
    x, t, tok, mask, e = inputs(edges=5)  # molecule 0 has 5 real atoms of 7
    x, tok, e = x.double(), tok.double(), e.double()
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    alone_v, alone_logits = model(x[:1, :5], t[:1], tokens=tok[:1, :5], mask=mask[:1, :5], edges=e[:1, :5, :5])
    torch.testing.assert_close(v[:1, :5], alone_v, atol=1e-10, rtol=0)
    torch.testing.assert_close(logits[:1, :5], alone_logits, atol=1e-10, rtol=0)


def _egnn_inputs_f64(edges=0):
    x, t, tok, mask, e = inputs(edges=edges)  # molecule 0 has 5 real atoms of 7
    return x.double(), t.double(), tok.double(), mask.double(), None if e is None else e.double()


@pytest.mark.parametrize("edges", [0, 5])
def test_egnn_output_does_not_depend_on_padding(edges):
    """A molecule's velocity and logits are the same alone and padded into a batch with larger molecules
    (the coordinate update must be normalised by the molecule's own neighbour count, not the padded width)."""
    torch.manual_seed(0)
    model = EGNN(6, 5, hidden=16, layers=2, edge_features=edges).double()
    x, t, tok, mask, e = _egnn_inputs_f64(edges)
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    alone_e = None if e is None else e[:1, :5, :5]
    alone_v, alone_logits = model(x[:1, :5], t[:1], tokens=tok[:1, :5], mask=mask[:1, :5], edges=alone_e)
    assert alone_v.abs().max() > 1e-6  # the check is not vacuous
    torch.testing.assert_close(v[:1, :5], alone_v, atol=1e-12, rtol=0)
    torch.testing.assert_close(logits[:1, :5], alone_logits, atol=1e-12, rtol=0)


@pytest.mark.parametrize("edges", [0, 5])
def test_egnn_is_e3_equivariant_including_reflections(edges):
    """Rotation + reflection + translation: the velocity turns with the frame, the logits do not change."""
    torch.manual_seed(0)
    model = EGNN(6, 5, hidden=16, layers=2, edge_features=edges).double()
    x, t, tok, mask, e = _egnn_inputs_f64(edges)
    rot = random_rotations(3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    q = rot @ torch.diag(torch.tensor([-1.0, 1.0, 1.0], dtype=torch.float64))  # improper: det -1
    assert torch.allclose(torch.linalg.det(q), -torch.ones(3, dtype=torch.float64))
    shift = torch.randn(3, 1, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    v2, logits2 = model((x @ q.transpose(1, 2) + shift) * mask[..., None], t, tokens=tok, mask=mask, edges=e)
    assert v.abs().max() > 1e-6
    torch.testing.assert_close(v2, v @ q.transpose(1, 2), atol=1e-10, rtol=0)
    torch.testing.assert_close(logits2, logits, atol=1e-10, rtol=0)


@pytest.mark.parametrize("edges", [0, 5])
def test_egnn_is_permutation_equivariant(edges):
    torch.manual_seed(0)
    model = EGNN(6, 5, hidden=16, layers=2, edge_features=edges).double()
    x, t, tok, mask, e = _egnn_inputs_f64(edges)
    perm = torch.tensor([3, 0, 4, 1, 2, 6, 5])  # molecule 0's padding (atoms 5, 6) stays padding
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    pe = None if e is None else e[:, perm][:, :, perm]
    v2, logits2 = model(x[:, perm], t, tokens=tok[:, perm], mask=mask[:, perm], edges=pe)
    torch.testing.assert_close(v2, v[:, perm], atol=1e-12, rtol=0)
    real = mask[:, perm, None].bool()
    torch.testing.assert_close(logits2 * real, logits[:, perm] * real, atol=1e-12, rtol=0)


def _backbone_classes():
    classes = [EGNN, CoordinateTransformer]
    try:
        import e3nn  # noqa: F401
    except ImportError:
        return classes
    from genmol.models import E3NNBackbone

    return [*classes, E3NNBackbone]


@pytest.mark.parametrize("klass", _backbone_classes())
def test_backbones_refuse_inputs_that_do_not_match_their_signature(klass):
    """A bond-conditioned backbone called without bonds used to run silently without them (EGNN), one without edge
    features silently dropped the bonds it was given (EGNN), and wrong shapes were tracebacks from deep inside."""
    from gencore.errors import InputError

    torch.manual_seed(0)
    with_edges, without = klass(6, 5, hidden=8, layers=1, edge_features=5), klass(6, 5, hidden=8, layers=1)
    x, t, tok, mask, e = inputs(edges=5)
    with pytest.raises(InputError, match=r"edge_features=5: edges of shape \(3, 7, 7, 5\) are required"):
        with_edges(x, t, tokens=tok, mask=mask)
    with pytest.raises(InputError, match="edge_features=0: edges must be None"):
        without(x, t, tokens=tok, mask=mask, edges=e)
    with pytest.raises(InputError, match=r"edges must have shape \(3, 7, 7, 5\), got \(3, 7, 7, 4\)"):
        with_edges(x, t, tokens=tok, mask=mask, edges=e[..., :4])
    with pytest.raises(InputError, match=r"t must be a scalar or have shape \(3,\).*got \(3, 1\)"):
        without(x, t[:, None], tokens=tok, mask=mask)
    with pytest.raises(InputError, match=r"tokens must have shape \(3, 7, 6\), got \(3, 7, 5\)"):
        without(x, t, tokens=tok[..., :5], mask=mask)
    with pytest.raises(InputError, match=r"mask must have shape \(3, 7\), got \(3, 6\)"):
        without(x, t, tokens=tok, mask=mask[:, :6])
    with pytest.raises(InputError, match=r"x_t must have shape \[B, N, 3\], got \(7, 3\)"):
        without(x[0], t, tokens=tok, mask=mask)
    # one time for the whole batch, as a tensor or a number, is the same as that time per molecule
    v, logits = without(x, torch.full((3,), 0.4), tokens=tok, mask=mask)
    for scalar in (torch.tensor(0.4), 0.4):
        v2, logits2 = without(x, scalar, tokens=tok, mask=mask)
        torch.testing.assert_close(v2, v, atol=0, rtol=0)
        torch.testing.assert_close(logits2, logits, atol=0, rtol=0)


def test_from_pretrained_refuses_a_folder_that_does_not_describe_a_backbone(tmp_path):
    """A config edited by hand or weights of another run are one StorageError sentence naming the folder (they were a
    TypeError or a load_state_dict RuntimeError traceback)."""
    import json

    from gencore.errors import StorageError

    EGNN(6, 5, hidden=16, layers=2).save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    for change, message in [
        ({"hidden": 8}, "the weights in .* do not fit the EGNN its config.json describes"),
        ({"heads": 4}, r"config.json' does not describe a EGNN \(.*heads"),
        ({"class": "Unet"}, r"config.json' names the backbone 'Unet'; expected one of EGNN, CoordinateTransformer"),
    ]:
        (tmp_path / "m" / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(StorageError, match=message):
            Backbone.from_pretrained(tmp_path / "m")


def test_transformer_output_does_not_depend_on_padding_and_is_permutation_equivariant():
    """Attention must never look at padded keys: a molecule alone and padded into a batch gives the same velocity
    and logits, and permuting the atoms (padding included) permutes the outputs."""
    torch.manual_seed(0)
    model = CoordinateTransformer(6, 5, hidden=16, layers=2, heads=4, edge_features=5).double()
    x, t, tok, mask, e = _egnn_inputs_f64(edges=5)  # molecule 0 has 5 real atoms of 7
    x2, tok2 = x.clone(), tok.clone()
    x2[0, 5:], tok2[0, 5:] = 40.0, 1.0  # whatever padding holds
    v, logits = model(x2, t, tokens=tok2, mask=mask, edges=e)
    alone_v, alone_logits = model(x[:1, :5], t[:1], tokens=tok[:1, :5], mask=mask[:1, :5], edges=e[:1, :5, :5])
    torch.testing.assert_close(v[:1, :5], alone_v, atol=1e-12, rtol=0)
    torch.testing.assert_close(logits[:1, :5], alone_logits, atol=1e-12, rtol=0)
    assert v[0, 5:].abs().max() == 0
    perm = torch.tensor([6, 3, 0, 5, 1, 4, 2])  # mixes molecule 0's padding with its atoms
    v3, logits3 = model(x2[:, perm], t, tokens=tok2[:, perm], mask=mask[:, perm], edges=e[:, perm][:, :, perm])
    real = mask[:, perm, None]
    torch.testing.assert_close(v3, v[:, perm], atol=1e-12, rtol=0)
    torch.testing.assert_close(logits3 * real, logits[:, perm] * real, atol=1e-12, rtol=0)


def test_e3nn_backbone_is_e3_and_permutation_equivariant_in_double():
    """The module docstring promises E(3): an improper rotation plus a shift turns the 1o velocity with the frame
    (a polar vector) and leaves the 0e logits alone; permuting atoms permutes both."""
    pytest.importorskip("e3nn")
    from genmol.models import E3NNBackbone

    torch.manual_seed(0)
    model = E3NNBackbone(6, 5, hidden=8, layers=2, edge_features=5).double()
    x, t, tok, mask, e = _egnn_inputs_f64(edges=5)
    q = random_rotations(3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    q = q @ torch.diag(torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64))
    shift = torch.randn(3, 1, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    v2, logits2 = model((x @ q.transpose(1, 2) + shift) * mask[..., None], t, tokens=tok, mask=mask, edges=e)
    assert v.abs().max() > 1e-3
    torch.testing.assert_close(v2, v @ q.transpose(1, 2), atol=1e-12, rtol=0)
    torch.testing.assert_close(logits2, logits, atol=1e-12, rtol=0)
    perm = torch.tensor([3, 0, 4, 1, 2, 6, 5])
    v3, logits3 = model(x[:, perm], t, tokens=tok[:, perm], mask=mask[:, perm], edges=e[:, perm][:, :, perm])
    real = mask[:, perm, None]
    torch.testing.assert_close(v3, v[:, perm], atol=1e-12, rtol=0)
    torch.testing.assert_close(logits3 * real, logits[:, perm] * real, atol=1e-12, rtol=0)


@pytest.mark.parametrize("klass", _backbone_classes())
def test_one_and_two_atom_molecules_give_finite_outputs_and_gradients(klass):
    """Zero distances (an atom with itself, coincident padding) must not turn into NaN, forward or backward; a single
    atom of an equivariant backbone cannot move (no direction is singled out)."""
    torch.manual_seed(0)
    model = klass(6, 5, hidden=8, layers=2, edge_features=3)
    x = torch.zeros(2, 3, 3)
    x[0, :2] = torch.tensor([[0.6, 0.0, 0.0], [-0.6, 0.0, 0.0]])
    x.requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    tok = torch.nn.functional.one_hot(torch.tensor([[1, 2, 0], [3, 0, 0]]), 6).float()
    e = torch.nn.functional.one_hot(torch.randint(3, (2, 3, 3), generator=torch.Generator().manual_seed(0)), 3).float()
    v, logits = model(x, torch.tensor([0.0, 1.0]), tokens=tok, mask=mask, edges=e)
    ((v**2).sum() + (logits * mask[..., None]).sum()).backward()
    assert torch.isfinite(v).all() and torch.isfinite(logits).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    if klass is not CoordinateTransformer:
        assert v[1].abs().max() == 0
        # two atoms: the velocity lies along their axis
        assert v[0, :2, 1:].abs().max() < 1e-6 * v[0, :2, 0].abs().max()


@pytest.mark.parametrize("klass", _backbone_classes())
def test_non_finite_padding_never_reaches_a_real_atom(klass):
    """Padding filled with NaN or inf (a common sentinel) used to make every atom of the molecule NaN: ``0 * nan`` is
    NaN in the masked sums and in attention. The outputs must equal those with zero padding."""
    torch.manual_seed(0)
    model = klass(6, 5, hidden=8, layers=2, edge_features=5)
    x, t, tok, mask, e = inputs(edges=5)  # molecule 0 has 5 real atoms of 7
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    for fill in (float("nan"), float("inf")):
        x2, tok2, e2 = x.clone(), tok.clone(), e.clone()
        x2[0, 5:], tok2[0, 5:], e2[0, 5:], e2[0, :, 5:] = fill, fill, fill, fill
        v2, logits2 = model(x2, t, tokens=tok2, mask=mask, edges=e2)
        real = mask[..., None]
        torch.testing.assert_close(v2, v, atol=0, rtol=0)
        torch.testing.assert_close(logits2 * real, logits * real, atol=0, rtol=0)
