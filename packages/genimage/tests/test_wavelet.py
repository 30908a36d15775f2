"""The LWD wavelet mask against a hand-computed Haar case, pywt, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.errors import ConfigError
from genimage.wavelet import haar_dwt2, haar_idwt2, lwd_mask, wavelet_energy_map


def test_haar_by_hand() -> None:
    # one 2x2 block [[a, b], [c, d]] = [[4, 2], [1, 3]]
    x = torch.tensor([[[[4.0, 2.0], [1.0, 3.0]]]])
    ll, h, v, d = haar_dwt2(x)
    assert ll.item() == pytest.approx((4 + 2 + 1 + 3) / 2)  # 5
    assert h.item() == pytest.approx((4 - 2 + 1 - 3) / 2)  # 0
    assert v.item() == pytest.approx((4 + 2 - 1 - 3) / 2)  # 1
    assert d.item() == pytest.approx((4 - 2 - 1 + 3) / 2)  # 2


def test_energy_map_and_mask_by_hand() -> None:
    # 4x2 image: top block flat (no detail), bottom block a checker (all detail in D)
    x = torch.tensor([[[[1.0, 1.0], [1.0, 1.0], [1.0, -1.0], [-1.0, 1.0]]]])
    # bottom block: a=1, b=-1, c=-1, d=1 -> H = 0, V = 0, D = (1 + 1 + 1 + 1) / 2 = 2, energy 4; top energy 0
    energy = wavelet_energy_map(x)
    # bilinear upsampling of the 2x1 energy column [0, 4] to 4 rows (align_corners=False): 0, 1, 3, 4
    expected = torch.tensor([0.0, 1.0, 3.0, 4.0]) / 4.0
    assert torch.allclose(energy[0, :, 0], expected, atol=1e-6)
    assert torch.allclose(energy[0, :, 0], energy[0, :, 1])
    # time-dependent mask M = [A + l >= 1 - t], l = 0.1
    m_noisy = lwd_mask(energy, torch.tensor([0.2]), floor=0.1)  # tau = 0.8: keep A >= 0.7
    assert m_noisy[0, 0, :, 0].tolist() == [0.0, 0.0, 1.0, 1.0]
    m_mid = lwd_mask(energy, torch.tensor([0.7]), floor=0.1)  # tau = 0.3: keep A >= 0.2
    assert m_mid[0, 0, :, 0].tolist() == [0.0, 1.0, 1.0, 1.0]
    m_clean = lwd_mask(energy, torch.tensor([0.95]), floor=0.1)  # tau = 0.05 <= l: everything
    assert bool((m_clean == 1).all())


def test_matches_pywavelets() -> None:
    pywt = pytest.importorskip("pywt")
    x = torch.randn(2, 3, 8, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ll, h, v, d = haar_dwt2(x)
    ca, (ch, cv, cd) = pywt.dwt2(x.numpy(), "haar", axes=(-2, -1))
    assert np.allclose(ll.numpy(), ca)
    # pywt orders (horizontal, vertical, diagonal) with its own signs; the energies agree band by band
    assert np.allclose(
        sorted([h.square().sum().item(), v.square().sum().item()]), sorted([(ch**2).sum(), (cv**2).sum()])
    )
    assert np.allclose(d.abs().numpy(), np.abs(cd))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(0, 10_000))
def test_orthonormal_and_invertible(c: int, hh: int, ww: int, seed: int) -> None:
    x = torch.randn(2, c, 2 * hh, 2 * ww, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    bands = haar_dwt2(x)
    assert torch.allclose(haar_idwt2(*bands), x)
    assert torch.allclose(sum(b.square().sum() for b in bands), x.square().sum())  # Parseval
    a = wavelet_energy_map(x)
    assert a.shape == (2, 2 * hh, 2 * ww) and float(a.min()) >= 0 and float(a.max()) <= 1 + 1e-9


def test_mask_is_monotone_in_time() -> None:
    energy = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(1))
    masks = [lwd_mask(energy, torch.full((3,), t)).sum().item() for t in torch.linspace(0, 1, 11)]
    assert masks == sorted(masks) and masks[-1] == energy.numel()


@pytest.mark.parametrize("energy", ["clean", "noisy"])
def test_task_loss_masks_with_the_energy_of_the_chosen_input(energy: str) -> None:
    """The training loss is the mean of the masked squared error, the mask from the energy map of ``x1``
    or of the noisy ``x_t`` the network saw (the reference code's choice, the default)."""
    from genimage.config import ImageTrainConfig
    from genimage.task import ImageTask

    seen = {}

    class Zero(torch.nn.Module):
        def forward(self, x, t, y=None):
            seen["x_t"], seen["t"] = x.clone(), t.clone()
            return torch.zeros_like(x)

    cfg = ImageTrainConfig(data="photos", lwd=True, lwd_energy=energy, class_conditional=False)
    task = ImageTask(cfg, Zero(), None)
    x1 = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    loss, metrics = task.loss(task.model, (x1,), torch.Generator().manual_seed(2))
    x_t, t = seen["x_t"], seen["t"].reshape(-1, 1, 1, 1)
    target = x1 - (x_t - t * x1) / (1 - t)  # the linear path's velocity x1 - x0
    mask = lwd_mask(wavelet_energy_map(x1 if energy == "clean" else x_t), seen["t"], cfg.lwd_floor)
    torch.testing.assert_close(loss, (mask * target.square()).mean(), rtol=1e-5, atol=1e-6)
    other = lwd_mask(wavelet_energy_map(x_t if energy == "clean" else x1), seen["t"], cfg.lwd_floor)
    assert not torch.equal(mask, other)  # the two choices differ on this batch
    assert float(metrics["lwd_mask_fraction"]) == pytest.approx(float(mask.mean()))


def test_energy_map_keeps_float64() -> None:
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a = wavelet_energy_map(x)
    assert a.dtype == torch.float64
    _, h, v, d = haar_dwt2(x)
    energy = (h.square() + v.square() + d.square()).mean(dim=1, keepdim=True)
    up = torch.nn.functional.interpolate(energy, size=(8, 8), mode="bilinear", align_corners=False)[:, 0]
    lo, hi = up.amin(dim=(1, 2), keepdim=True), up.amax(dim=(1, 2), keepdim=True)
    torch.testing.assert_close(a, (up - lo) / (hi - lo + 1e-8), rtol=0, atol=1e-12)


@pytest.mark.parametrize("t", [float("nan"), float("inf"), -float("inf"), np.float64("nan")])
def test_mask_refuses_a_non_finite_scalar_time(t: float) -> None:
    energy = torch.rand(2, 4, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="the LWD mask time t must be a finite number"):
        lwd_mask(energy, t)
    assert lwd_mask(energy, 0.5).shape == (2, 1, 4, 4)  # finite scalars still work


def test_the_lwd_energy_source_defines_only_lwd_runs() -> None:
    """Its default changed from clean to noisy: a checkpoint without LWD written before still resumes, one with
    LWD is refused with the change named."""
    from gencore.train import identity_changes
    from genimage.config import ImageTrainConfig
    from genimage.training import image_run_identity

    plain, lwd = ImageTrainConfig(), ImageTrainConfig(lwd=True)
    assert plain.lwd_energy == "noisy"
    old = image_run_identity(plain) | {"lwd_energy": "clean"}
    assert identity_changes(old, image_run_identity(plain)) == ""
    old = image_run_identity(lwd) | {"lwd_energy": "clean"}
    assert identity_changes(old, image_run_identity(lwd)) == "lwd_energy: 'clean' -> 'noisy'"


def test_pywt_bands_and_a_separable_haar_matrix_give_the_bands() -> None:
    """Band by band, signs included: ``H`` (left minus right) is pywt's ``cV``, ``V`` (top minus bottom) its
    ``cH``, ``D`` its ``cD``; and all four are the blocks of ``W_H x W_W^T`` for the orthonormal Haar matrix."""
    pywt = pytest.importorskip("pywt")
    x = torch.randn(2, 3, 8, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ll, h, v, d = haar_dwt2(x)
    _, (ch, cv, cd) = pywt.dwt2(x.numpy(), "haar", axes=(-2, -1))
    for ours, theirs in ((h, cv), (v, ch), (d, cd)):
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-12)

    def haar(n: int) -> torch.Tensor:  # rows: pairwise sums, then pairwise differences (first minus second)
        m = torch.zeros(n, n, dtype=torch.float64)
        for i in range(n // 2):
            m[i, 2 * i] = m[i, 2 * i + 1] = m[n // 2 + i, 2 * i] = 2**-0.5
            m[n // 2 + i, 2 * i + 1] = -(2**-0.5)
        return m

    y = haar(8) @ x @ haar(6).T
    for ours, block in ((ll, y[..., :4, :3]), (h, y[..., :4, 3:]), (v, y[..., 4:, :3]), (d, y[..., 4:, 3:])):
        torch.testing.assert_close(ours, block, rtol=0, atol=1e-12)


def test_mask_includes_the_boundary() -> None:
    # M = [A + l >= 1 - t]: a position exactly on the threshold is supervised
    energy = torch.tensor([[[0.25, 0.5]]], dtype=torch.float64)
    assert lwd_mask(energy, torch.tensor([0.25], dtype=torch.float64), floor=0.25)[0, 0, 0].tolist() == [0.0, 1.0]


def test_inverse_refuses_bands_of_different_shapes() -> None:
    from gencore.errors import InputError

    ll = torch.randn(2, 3, 4, 4)
    with pytest.raises(InputError, match="four \\[B, C, h, w\\] bands of one shape"):
        haar_idwt2(ll, ll[:1], ll[:1], ll[:1])  # used to broadcast silently into a [2, 3, 8, 8] image
    with pytest.raises(InputError, match="bands of one shape"):
        haar_idwt2(ll, ll[..., :3], ll, ll)
    with pytest.raises(InputError, match="bands of one shape"):
        haar_idwt2(ll[0], ll[0], ll[0], ll[0])


@pytest.mark.parametrize("floor", [float("nan"), -0.1, 1.5])
def test_mask_refuses_a_floor_outside_the_unit_interval(floor: float) -> None:
    # a NaN floor selected no position at all (a zero loss that trains nothing), as ImageTrainConfig.validate refuses
    energy = torch.rand(2, 4, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="the LWD mask floor l must be a number in \\[0, 1\\]"):
        lwd_mask(energy, torch.tensor([0.5, 0.5]), floor=floor)
    assert bool((lwd_mask(energy, torch.tensor([0.5, 0.5]), floor=1.0) == 1).all())  # l = 1: every position
