"""Spherical Watermark: exact round trip, sparse transform, moments, wrong key, null p-values."""

from __future__ import annotations

import json
import math

import pytest
import torch
from scipy import stats

from gencore.errors import ConfigError, InputError, StorageError
from genimage.watermark.generators import GaussianFlowGenerator
from genimage.watermark.keys import WatermarkKey, derive_seed, new_key, parse_message
from genimage.watermark.metrics import bit_accuracy, gaussianity
from genimage.watermark.rotation import KeyRotation
from genimage.watermark.spherical import ParityEmbedding, SphericalWatermark

SHAPE = (1, 32, 32)


def _wm(seed=1, **params):
    return SphericalWatermark(new_key("spherical", SHAPE, seed=seed, message_bits=32, **params))


def test_round_trip_is_exact_without_a_model_for_every_message():
    wm = _wm()
    g = torch.Generator().manual_seed(0)
    msgs = torch.randint(0, 2, (64, 32), generator=g)
    z = wm.embed(64, generator=g, message=msgs)
    assert torch.equal(wm.extract(z), msgs)
    assert torch.equal(wm.extract(z, soft=False), msgs)
    # any positive rescaling of the noise keeps the signs, so extraction is scale-free
    assert torch.equal(wm.extract(3.7 * z), msgs)


def test_round_trip_through_the_exact_gaussian_flow_and_its_ode():
    wm = _wm(seed=5)
    gen = GaussianFlowGenerator(torch.full(SHAPE, 0.1), torch.full(SHAPE, 0.4), steps=200, solver="rk4")
    z = wm.embed(8, generator=torch.Generator().manual_seed(1))
    closed = gen.invert(gen.generate(z))
    assert torch.equal(wm.extract(closed), wm.key.message_tensor().expand(8, -1))
    # the ODE path (RK4 on the analytic velocity) agrees with the closed-form flow
    ode_images = gen._solve(z, 0.0, 1.0)
    assert torch.allclose(ode_images, gen.generate(z), atol=1e-4)
    ode_noise = gen._solve(ode_images, 1.0, 0.0)
    assert bit_accuracy(wm.extract(ode_noise), wm.key.message_tensor()) == 1.0


def test_binary_transform_is_sparse_involution_over_gf2():
    e = ParityEmbedding(1024, 16, seed=3, parity_weight=3)
    t = e.sparse_matrix()
    assert t._nnz() == 1024 + e.repeats * 16 * 3
    dense = t.to_dense()
    assert torch.equal((dense @ dense) % 2, torch.eye(1024, dtype=torch.int64))  # T is its own inverse
    g = torch.Generator().manual_seed(0)
    msg = torch.randint(0, 2, (5, 16), generator=g)
    code = e.encode(msg, g)
    s = e.source_vector(msg, code)
    assert torch.equal((s @ dense.T) % 2, code)  # c = T s (mod 2)
    assert torch.equal(e.decode(code), msg)
    # groups are disjoint and cover r * L * (k + 1) positions
    assert e.groups.unique().numel() == e.groups.numel() == e.repeats * 16 * 4


def test_code_bits_are_k_wise_uniform_whatever_the_message():
    e = ParityEmbedding(256, 8, seed=2, parity_weight=3)
    g = torch.Generator().manual_seed(0)
    n = 20000
    code = e.encode(torch.zeros(n, 8, dtype=torch.int64), g)
    grp = e.groups[0]
    # any 3 bits of one parity group are uniform over the 8 patterns
    pattern = (code[:, grp[:3]] * torch.tensor([1, 2, 4])).sum(1)
    counts = torch.bincount(pattern, minlength=8).double()
    assert stats.chisquare(counts.numpy()).pvalue > 1e-3
    # ...but all k + 1 = 4 XOR to the message bit (so they are not 4-wise independent)
    assert bool((code[:, grp].sum(1) % 2 == 0).all())


def test_rotation_is_orthogonal_and_inverts():
    rot = KeyRotation(100, seed=4)  # odd-free, non-power-of-two size
    m = rot.matrix()
    assert torch.allclose(m @ m.T, torch.eye(100, dtype=torch.float64), atol=1e-12)
    x = torch.randn(3, 100, dtype=torch.float64)
    assert torch.allclose(rot.apply(x), x @ m.T, atol=1e-12)
    assert torch.allclose(rot.inverse(rot.apply(x)), x, atol=1e-12)
    odd = KeyRotation(33, seed=4)
    mo = odd.matrix()
    assert torch.allclose(mo @ mo.T, torch.eye(33, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("dim", [2, 33, 100, 1024])
def test_rotation_is_the_product_of_its_layers(dim):
    # R = G_L P_L ... G_1 P_1 written out layer by layer, in natural order: key files made before the
    # split-layout implementation must keep giving the same R
    rot = KeyRotation(dim, seed=6)
    x = torch.randn(4, dim, dtype=torch.float64)
    y = x.clone()
    m = dim // 2
    for perm, angle in zip(rot.perms, rot.angles):
        y = y[:, perm]
        a, b = y[:, 0 : 2 * m : 2].clone(), y[:, 1 : 2 * m : 2].clone()
        y[:, 0 : 2 * m : 2] = torch.cos(angle) * a - torch.sin(angle) * b
        y[:, 1 : 2 * m : 2] = torch.sin(angle) * a + torch.cos(angle) * b
    assert torch.allclose(rot.apply(x), y, atol=1e-12)
    assert torch.allclose(rot.inverse(y), x, atol=1e-12)
    assert torch.allclose(rot.apply(x.float()), y.float(), atol=1e-5)


def test_marked_noise_matches_standard_normal_to_third_order():
    wm = _wm(seed=9)
    n = 2000
    z = wm.embed(n, generator=torch.Generator().manual_seed(3)).double().flatten(1)
    d = z.shape[1]
    se = 1 / math.sqrt(n * d)
    assert abs(float(z.mean())) < 5 * se
    assert abs(float(z.pow(2).mean()) - 1) < 5 * math.sqrt(2) * se
    assert abs(float(z.pow(3).mean())) < 5 * math.sqrt(15) * se
    # covariance: off-diagonal entries of E z z^T vanish (sampled pairs), diagonal is 1
    cov = (z[:, :64].T @ z[:, :64]) / n
    off = cov - torch.diag(torch.diag(cov))
    assert float(off.abs().max()) < 5 / math.sqrt(n)
    assert float((torch.diag(cov) - 1).abs().max()) < 5 * math.sqrt(2 / n)
    stats_ = gaussianity(z[:400].reshape(400, *SHAPE))
    assert stats_["ks_pvalue"] > 0.01 and stats_["norm_ks_pvalue"] > 0.01


def test_wrong_key_gives_chance_level_bits():
    wm = _wm(seed=11)
    other = SphericalWatermark(new_key("spherical", SHAPE, seed=12, message=wm.key.message))
    z = wm.embed(200, generator=torch.Generator().manual_seed(0))
    acc = bit_accuracy(other.extract(z), wm.key.message_tensor())
    assert abs(acc - 0.5) < 0.03  # 6400 bits: 3 standard errors is 0.019
    pv = other.detect(z, generator=torch.Generator().manual_seed(1)).pvalue
    assert stats.kstest(pv.numpy(), "uniform").pvalue > 0.001


def test_null_pvalues_are_uniform():
    wm = _wm(seed=13)
    g = torch.Generator().manual_seed(0)
    pv = wm.detect(torch.randn(1000, *SHAPE, generator=g), generator=g).pvalue
    assert stats.kstest(pv.numpy(), "uniform").pvalue > 0.001
    marked = wm.detect(wm.embed(10, generator=g), generator=g).pvalue
    assert float(marked.max()) < 1e-20


def test_soft_decoding_beats_hard_decoding_under_noise():
    wm = _wm(seed=2)
    g = torch.Generator().manual_seed(0)
    z = wm.embed(200, generator=g)
    noisy = z + 0.8 * torch.randn(z.shape, generator=g)
    msg = wm.key.message_tensor()
    assert bit_accuracy(wm.extract(noisy), msg) > bit_accuracy(wm.extract(noisy, soft=False), msg)


def test_key_file_round_trip_and_errors(tmp_path):
    key = new_key("spherical", SHAPE, seed=21, message="0x0f0f", parity_weight=3)
    key.save(tmp_path / "k.json")
    back = WatermarkKey.load(tmp_path / "k.json")
    assert back == key and key.message == parse_message("0000111100001111")
    # material is derived from the seed only: same key, same noise
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    assert torch.equal(SphericalWatermark(back).embed(2, g1), SphericalWatermark(key).embed(2, g2))
    assert derive_seed(21, "a") != derive_seed(21, "b")
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(StorageError, match="not a genimage watermark key"):
        WatermarkKey.load(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="needs at least"):
        SphericalWatermark(new_key("spherical", (1, 4, 4), seed=1, message_bits=32))
    # a hand-edited key with a field of the wrong type names the file and the field
    good = key.to_dict()
    for field, value in [
        ("seed", "abc"),
        ("seed", True),
        ("shape", [1, 16]),
        ("shape", [1, 16, "x"]),
        ("message", 1010),
        ("params", None),
        ("scheme", 3),
    ]:
        (tmp_path / "edited.json").write_text(json.dumps({**good, field: value}))
        with pytest.raises(StorageError, match=f"edited.json.*field '{field}'"):
            WatermarkKey.load(tmp_path / "edited.json")
    with pytest.raises(InputError, match="noise must have shape"):
        _wm().extract(torch.randn(2, 1, 16, 16))


def test_detection_pvalue_is_the_exact_binomial_tail_and_the_score_favours_the_mark():
    """The p-value is the randomised tail of the number of group parities agreeing with the key's message,
    counted by hand; the soft score is larger on marked noise than on unmarked."""
    wm = _wm(seed=3)
    g = torch.Generator().manual_seed(0)
    z = torch.cat([wm.embed(4, generator=g) + 0.7 * torch.randn(4, *SHAPE, generator=g),
                   torch.randn(4, *SHAPE, generator=g)])  # fmt: skip
    det = wm.detect(z, generator=torch.Generator().manual_seed(7))
    e = wm.embedding
    signs = wm.rotation.inverse(z.double().reshape(8, -1)).sign().numpy()  # signs of R^T z, -1 for code bit 1
    expected = 1 - 2 * torch.tensor(wm.key.message)[e.bit_index].numpy()
    matches = [int((signs[i, e.groups.numpy()].prod(-1) == expected).sum()) for i in range(8)]
    n = len(e.groups)
    u = torch.rand(8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    want = [stats.binom.sf(m, n, 0.5) + float(u[i]) * stats.binom.pmf(m, n, 0.5) for i, m in enumerate(matches)]
    torch.testing.assert_close(det.pvalue, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-15)
    assert float(det.score[:4].min()) > float(det.score[4:].max())


def test_hard_decoding_ties_give_zero_and_soft_beta_must_be_positive():
    e = ParityEmbedding(256, 8, seed=2, parity_weight=3)
    assert e.repeats == 8
    code = torch.zeros(1, 256, dtype=torch.int64)
    for repeat in range(4):  # bit 0 sees parity 1 in four of its eight groups: a tie
        code[0, e.groups[repeat * 8, 0]] = 1
    assert int(e.decode(code)[0, 0]) == 0
    code[0, e.groups[4 * 8, 0]] = 1
    assert int(e.decode(code)[0, 0]) == 1
    for beta in (0.0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="soft_beta must be a positive number"):
            _wm(soft_beta=beta)
