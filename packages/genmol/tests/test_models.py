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
