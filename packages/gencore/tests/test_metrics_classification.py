"""ROC AUC against its definition, sklearn, and its invariances."""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import roc_auc_score

from gencore.errors import InputError
from gencore.metrics import roc_auc


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roc_auc_is_the_pairwise_win_rate_with_ties_counting_half(seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, 6, (37,), generator=g).float()  # few levels: many ties
    neg = torch.randint(0, 5, (23,), generator=g).float()
    diff = pos[:, None] - neg[None, :]
    brute = ((diff > 0).double() + 0.5 * (diff == 0).double()).mean()
    assert roc_auc(pos, neg) == pytest.approx(float(brute), abs=1e-12)


def test_roc_auc_matches_sklearn_and_ignores_monotone_maps():
    g = torch.Generator().manual_seed(3)
    pos, neg = torch.randn(200, generator=g) + 0.7, torch.randn(300, generator=g)
    labels = torch.cat([torch.ones(200), torch.zeros(300)]).numpy()
    expected = roc_auc_score(labels, torch.cat([pos, neg]).numpy())
    assert roc_auc(pos, neg) == pytest.approx(expected, abs=1e-12)
    assert roc_auc(pos.exp(), neg.exp()) == pytest.approx(expected, abs=1e-12)
    assert roc_auc(neg, pos) == pytest.approx(1 - expected, abs=1e-12)  # swapping the classes


def test_roc_auc_extremes_and_shapes():
    assert roc_auc(torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0])) == 1.0
    assert roc_auc(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0])) == 0.0
    assert roc_auc(torch.ones(4), torch.ones(7)) == 0.5
    assert roc_auc(torch.tensor([[2.0], [3.0]]), torch.tensor([1.0])) == 1.0  # flattened


def test_roc_auc_input_errors():
    with pytest.raises(InputError, match="at least one positive"):
        roc_auc(torch.zeros(0), torch.ones(3))
    with pytest.raises(InputError, match="finite"):
        roc_auc(torch.tensor([float("nan")]), torch.ones(3))


def test_roc_auc_rejects_non_tensor_scores_with_one_sentence():
    with pytest.raises(InputError, match=r"pos must be a torch\.Tensor"):
        roc_auc([1.0, 2.0], torch.ones(3))  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"neg must be a torch\.Tensor"):
        roc_auc(torch.ones(3), torch.ones(3).numpy())  # type: ignore[arg-type]
