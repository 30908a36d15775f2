"""Shared tests over every registered SAE architecture: shapes, gradients, save/load, invariants."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError, StorageError
from geninterp.saes import ARCHITECTURES, SparseAutoencoder, make_objective, make_sae

D, W, K = 8, 32, 4


def build(arch: str, **extra) -> SparseAutoencoder:
    torch.manual_seed(0)
    fields = {"d_in": D, "width": W, **extra}
    if arch != "relu":
        fields["k"] = K
    if arch == "temporal":
        fields |= {"n_heads": 2, "attn_dim": 8}
    return make_sae(arch, **fields)


def inputs(sae: SparseAutoencoder) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(3, 5, D, generator=g) if sae.is_sequence else torch.randn(15, D, generator=g)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_shapes(arch):
    sae = build(arch)
    x = inputs(sae)
    out = sae(x)
    assert out.recon.shape == x.shape
    assert out.codes.shape == (*x.shape[:-1], W)
    assert torch.all(out.codes >= 0)
    assert sae.encode(x).shape == out.codes.shape
    if arch != "relu":
        assert int((out.codes > 0).sum(-1).max()) <= K
    if sae.is_sequence:
        assert out.pred_recon.shape == x.shape and out.novel_recon.shape == x.shape
        # the reconstruction is exactly the two parts plus the bias
        total = out.pred_recon + out.novel_recon + sae.b_dec / sae.config.act_scale
        torch.testing.assert_close(total, out.recon)
    else:
        torch.testing.assert_close(sae.decode(out.codes), out.recon)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_input_of_another_precision_is_one_sentence(arch):
    # before: a float32 SAE given float64 activations raised torch's matmul dtype traceback
    sae = build(arch)
    with pytest.raises(InputError, match=r"weights are torch\.float32 but its input is torch\.float64"):
        sae(inputs(sae).double())
    out = sae.double()(inputs(sae).double())  # the same precision on both sides works
    assert out.recon.dtype == torch.float64


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_gradients_reach_every_parameter(arch):
    sae = build(arch)
    loss, metrics = make_objective(arch)(sae, inputs(sae))
    loss.backward()
    for name, p in sae.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    assert {"mse", "fvu", "l0"} <= set(metrics)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_save_load_round_trip(arch, tmp_path):
    sae = build(arch, act_scale=0.7)
    with torch.no_grad():
        for p in sae.parameters():
            p.add_(0.01 * torch.randn_like(p))
    sae.save_pretrained(tmp_path / "sae")
    loaded = SparseAutoencoder.from_pretrained(tmp_path / "sae")
    assert type(loaded) is type(sae) and loaded.config == sae.config
    x = inputs(sae)
    torch.testing.assert_close(loaded(x).recon, sae(x).recon, rtol=0, atol=0)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_scale_equivariance(arch):
    """Scaling the input by c and act_scale by 1/c leaves the codes unchanged and scales the recon by c."""
    sae = build(arch, act_scale=1.0)
    other = build(arch, act_scale=0.5)
    other.load_state_dict(sae.state_dict())
    x = inputs(sae)
    a, b = sae(x), other(2 * x)
    torch.testing.assert_close(b.codes, a.codes)
    torch.testing.assert_close(b.recon, 2 * a.recon)


def test_atoms_are_unit_norm():
    sae = build("topk")
    with torch.no_grad():
        sae.W_dec.mul_(torch.rand(W, 1) * 5 + 0.1)
    torch.testing.assert_close(sae.atoms.norm(dim=1), torch.ones(W))


def test_topk_keeps_the_largest():
    from geninterp.saes import topk_relu

    pre = torch.tensor([[3.0, -1.0, 2.0, 0.5], [-2.0, -1.0, -3.0, 4.0]])
    torch.testing.assert_close(topk_relu(pre, 2), torch.tensor([[3.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 4.0]]))


def test_relu_l1_penalty_is_the_code_sum():
    sae = build("relu")
    x = inputs(sae)
    base, _ = make_objective("relu", l1_coeff=0.0)(sae, x)
    pen, m = make_objective("relu", l1_coeff=0.5)(sae, x)
    torch.testing.assert_close(pen - base, 0.5 * sae(x).codes.sum(-1).mean())
    assert m["l1"] > 0


def test_auxk_is_active_only_with_dead_latents():
    sae = build("topk")
    x = inputs(sae)
    objective = make_objective("topk", dead_after_tokens=1)
    sae.tokens_since_fired.zero_()
    # after one batch every latent that did not fire has been silent for >= 1 token: dead
    loss, m = objective(sae, x)
    assert m["dead_frac"] > 0 and m["auxk"] > 0
    loss.backward()
    fired = (sae(x).codes > 0).reshape(-1, W).any(0)
    assert torch.all(sae.tokens_since_fired[fired] == 0)
    quiet = make_objective("topk", dead_after_tokens=10**9)
    _, m2 = quiet(sae, x)
    assert m2["auxk"] == 0 and m2["dead_frac"] == 0


def test_registry_errors(tmp_path):
    with pytest.raises(ConfigError, match="arch must be one of"):
        make_sae("nope", d_in=4, width=8)
    with pytest.raises(ConfigError, match="no setting"):
        make_sae("relu", d_in=4, width=8, k=3)
    with pytest.raises(ConfigError, match="k must be in"):
        make_sae("topk", d_in=4, width=8, k=9)
    with pytest.raises(StorageError):
        SparseAutoencoder.from_pretrained(tmp_path / "missing")


def test_make_objective_refuses_a_setting_no_objective_takes():
    """A typo must not silently train with the default (settings of another architecture stay allowed)."""
    with pytest.raises(ConfigError, match="no SAE objective has setting"):
        make_objective("topk", aux_coef=0.5)
    assert make_objective("topk", l1_coeff=1.0, aux_coeff=0.5).aux_coeff == 0.5
    assert make_objective("relu", aux_k=4, l1_coeff=0.1).l1_coeff == 0.1


def test_an_infinite_act_scale_is_refused():
    with pytest.raises(ConfigError, match="act_scale must be a positive finite number"):
        make_sae("relu", d_in=4, width=8, act_scale=float("inf"))


def _perturbed(arch: str, act_scale: float = 0.7) -> SparseAutoencoder:
    """A float64 SAE with every parameter (biases, decoder norms) away from its initial value."""
    sae = build(arch, act_scale=act_scale).double()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in sae.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        sae.W_dec.mul_(torch.rand(W, 1, generator=g, dtype=torch.float64) * 3 + 0.2)
    return sae


@pytest.mark.parametrize("arch", ["relu", "topk"])
def test_forward_is_the_documented_formula(arch):
    """``z = act((x s - b_dec) W_enc + b_enc)``, ``x_hat = (z D / |D| + b_dec) / s``, with every term non-trivial."""
    sae = _perturbed(arch)
    x = torch.randn(15, D, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    s = sae.config.act_scale
    pre = (x * s - sae.b_dec) @ sae.W_enc + sae.b_enc
    if arch == "relu":
        codes = torch.relu(pre)
    else:  # brute force: zero all but the K largest of each row, then ReLU
        codes = torch.zeros_like(pre)
        for i, row in enumerate(pre):
            keep = sorted(range(W), key=lambda j: -float(row[j].detach()))[:K]
            codes[i, keep] = torch.relu(row[keep])
    atoms = sae.W_dec / sae.W_dec.norm(dim=1, keepdim=True)
    out = sae(x)
    torch.testing.assert_close(out.pre_codes, pre)
    torch.testing.assert_close(out.codes, codes)
    torch.testing.assert_close(out.recon, (codes @ atoms + sae.b_dec) / s)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_reconstruction_terms_are_the_documented_sums(arch):
    """``mse``: mean over tokens and features of the squared error in the scaled space; ``fvu``: summed squared error
    over the summed squared deviation from the batch mean (scale-free)."""
    from geninterp.saes import reconstruction_terms

    sae = _perturbed(arch, act_scale=2.5)
    x = 3 * inputs(sae).double() + 1
    out = sae(x)
    terms = reconstruction_terms(sae, x, out)
    err, flat = (x - out.recon).reshape(-1, D), x.reshape(-1, D)
    torch.testing.assert_close(terms["mse"], (2.5 * err).pow(2).mean())
    torch.testing.assert_close(terms["fvu"], err.pow(2).sum() / (flat - flat.mean(0)).pow(2).sum())


@pytest.mark.parametrize("arch", ["topk", "temporal"])
@pytest.mark.parametrize(("aux_k", "k_aux"), [(3, 3), (None, D // 2)])
def test_auxk_loss_against_a_brute_force_computation(arch, aux_k, k_aux):
    """Gao et al.'s AuxK with ``act_scale != 1`` and ``k_aux`` below the number of dead latents (``aux_k``, by default
    ``d_in // 2``): the top ``k_aux`` dead pre-activations (ReLU) reconstruct the detached residual ``(x - x_hat) s``,
    normalised by the residual's variance; the loss is ``mse + aux_coeff * auxk`` in value and in gradient. A latent
    silent for exactly ``dead_after_tokens`` tokens is dead."""
    from geninterp.saes import reconstruction_terms

    sae = _perturbed(arch, act_scale=1.7)
    x = inputs(sae).double()
    tokens = x.reshape(-1, D).shape[0]
    objective = make_objective(arch, aux_k=aux_k, aux_coeff=0.25, dead_after_tokens=tokens)
    sae.tokens_since_fired.zero_()
    loss, metrics = objective(sae, x)  # one batch: the latents that did not fire in it are dead, exactly
    out = sae(x)
    fired = (out.codes.reshape(-1, W) > 0).any(0)
    dead = ~fired
    assert int(dead.sum()) > k_aux and torch.equal(sae.tokens_since_fired == tokens, dead)
    residual = ((x - out.recon) * 1.7).reshape(-1, D).detach()
    pre = out.pre_codes.reshape(-1, W)
    atoms = sae.W_dec / sae.W_dec.norm(dim=1, keepdim=True)
    dead_idx = dead.nonzero().flatten().tolist()
    aux_codes = torch.zeros_like(pre)
    for i, row in enumerate(pre):
        top = sorted(dead_idx, key=lambda j: -float(row[j].detach()))[:k_aux]
        aux_codes[i, top] = torch.relu(row[top])
    want = (aux_codes @ atoms - residual).pow(2).sum() / (residual - residual.mean(0)).pow(2).sum()
    torch.testing.assert_close(metrics["auxk"], want.detach())
    want_loss = reconstruction_terms(sae, x, out)["mse"] + 0.25 * want
    torch.testing.assert_close(loss, want_loss)
    got_grads = torch.autograd.grad(loss, list(sae.parameters()), allow_unused=True)
    want_grads = torch.autograd.grad(want_loss, list(sae.parameters()), allow_unused=True)
    for (name, _), a, b in zip(sae.named_parameters(), got_grads, want_grads, strict=True):
        if a is None or b is None:
            assert a is None and b is None, name
        else:
            torch.testing.assert_close(a, b, msg=name)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_inputs_of_the_wrong_width_are_named_in_one_sentence(arch):
    from gencore.errors import InputError

    sae = build(arch)
    x = torch.randn(3, 5, D + 1) if sae.is_sequence else torch.randn(15, D + 1)
    with pytest.raises(InputError, match=f"{D}"):
        sae(x)
    with pytest.raises(InputError, match=f"{D}"):
        sae.encode(x)


@pytest.mark.parametrize("field", ["d_in", "width", "k"])
def test_non_integer_sizes_are_config_errors(field):
    fields = {"d_in": D, "width": W, "k": K, field: 2.5}
    with pytest.raises(ConfigError, match=field):
        make_sae("topk", **fields)
    with pytest.raises(ConfigError, match=field):
        make_sae("topk", **{**fields, field: True})


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_encoder_starts_as_the_decoder_transpose(arch):
    """Initialisation (Gao et al. 2024; Anthropic, April 2024): unit-norm atoms, ``W_enc = W_dec^T``, zero biases."""
    sae = build(arch)
    torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(W))
    torch.testing.assert_close(sae.W_enc, sae.W_dec.T, rtol=0, atol=0)
    assert not sae.b_enc.any() and not sae.b_dec.any()


@pytest.mark.parametrize("arch", ["topk", "temporal"])
def test_k_equal_d_with_a_signed_identity_dictionary_reconstructs_exactly(arch):
    """Atoms ``[I; -I]`` (width 2d), encoder their transpose, ``k = d``: at most d of each token's 2d pre-activations
    ``(u_i, -u_i)`` are positive, so TopK keeps all of them and ``x_hat = x`` for any decoder bias and ``act_scale``;
    the Temporal SAE's novel codes then reconstruct whatever its predicted part leaves, so it is exact too."""
    fields = {"d_in": D, "width": 2 * D, "k": D, "act_scale": 0.3}
    if arch == "temporal":
        fields |= {"n_heads": 2, "attn_dim": 8}
    torch.manual_seed(0)
    sae = make_sae(arch, **fields).double()
    signed = torch.cat([torch.eye(D), -torch.eye(D)]).double()
    with torch.no_grad():
        sae.W_dec.copy_(3 * signed)  # any positive row norms: the atoms are normalised
        sae.W_enc.copy_(signed.T)
        sae.b_enc.zero_()
        sae.b_dec.normal_()
    x = 5 * inputs(sae).double() + 2
    out = sae(x)
    torch.testing.assert_close(out.recon, x, rtol=0, atol=1e-12)
    assert int((out.codes > 0).sum(-1).max()) <= D


def test_objective_settings_that_would_train_nothing_are_refused():
    """An infinite coefficient makes every loss non-finite (the engine would skip every step and save the untrained
    SAE); a fractional aux_k cannot pick latents."""
    with pytest.raises(ConfigError, match="l1_coeff must be a non-negative finite number"):
        make_objective("relu", l1_coeff=float("inf"))
    with pytest.raises(ConfigError, match="aux_coeff must be a non-negative finite number"):
        make_objective("topk", aux_coeff=float("inf"))
    with pytest.raises(ConfigError, match="aux_k must be a positive integer"):
        make_objective("topk", aux_k=2.5)
    with pytest.raises(ConfigError, match="dead_after_tokens at least 1"):
        make_objective("topk", dead_after_tokens=0)


@pytest.mark.parametrize(("n_heads", "attn_dim"), [(2, 0), (2.0, 4), (True, 4)])
def test_temporal_attention_sizes_must_be_positive_integers(n_heads, attn_dim):
    """``attn_dim = 0`` used to build zero-width queries and keys (uniform attention), a float a traceback."""
    with pytest.raises(ConfigError, match="n_heads and attn_dim must be positive integers"):
        make_sae("temporal", d_in=D, width=W, k=K, n_heads=n_heads, attn_dim=attn_dim)


def test_an_act_scale_that_is_not_a_number_is_a_config_error():
    """A string (say from a hand-edited config) used to reach ``>`` and raise a TypeError."""
    with pytest.raises(ConfigError, match="act_scale must be a positive finite number, got '2'"):
        make_sae("relu", d_in=4, width=8, act_scale="2")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.pop("d_in"), "lacks the 'topk' SAE setting\\(s\\) d_in"),
        (lambda c: c.update(act_scale="x"), "act_scale must be a positive finite number, got 'x'"),
        (lambda c: c.update(act_scale=None), "act_scale must be a positive finite number, got None"),
        (lambda c: c.update(k="2"), "k must be in \\[1, width=8\\], got '2'"),
        (lambda c: c.update(extra=1), "has no setting\\(s\\) extra"),
        (lambda c: c.update(arch=["topk"]), "unknown SAE architecture"),
        (lambda c: c.update(width=16), "do not fit the 'topk' SAE"),
    ],
)
def test_a_bad_config_json_is_one_storage_error_naming_the_folder(tmp_path, edit, message):
    """A missing field, a value of the wrong type or a width the weights do not have used to raise TypeError,
    RuntimeError (size mismatch) or a ConfigError that did not say which folder was at fault."""
    import json

    make_sae("topk", d_in=4, width=8, k=2).save_pretrained(tmp_path / "sae")
    path = tmp_path / "sae" / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    with pytest.raises(StorageError, match=message) as info:
        SparseAutoencoder.from_pretrained(tmp_path / "sae")
    assert str(tmp_path / "sae") in str(info.value)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_loaded_sae_keeps_the_saved_precision(arch, dtype, tmp_path):
    """A float64 (or bfloat16) SAE used to come back as float32: rounded weights, and a float64 input then raised a
    dtype-mismatch RuntimeError. The loaded SAE encodes and reconstructs bit for bit like the saved one."""
    sae = build(arch, act_scale=0.37).to(dtype)
    with torch.no_grad():
        for p in sae.parameters():
            p.add_(0.01 * torch.randn_like(p))
    sae.save_pretrained(tmp_path / "sae")
    loaded = SparseAutoencoder.from_pretrained(tmp_path / "sae")
    assert all(p.dtype == dtype for p in loaded.parameters())
    x = inputs(sae).to(dtype)
    a, b = sae(x), loaded(x)
    torch.testing.assert_close(b.codes, a.codes, rtol=0, atol=0)
    torch.testing.assert_close(b.recon, a.recon, rtol=0, atol=0)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_objective_l0_and_dead_fraction_by_hand(arch):
    """``l0``: non-zero codes per token (a mean over tokens, not a batch total); ``dead_frac``: the share of latents
    that did not fire in a batch as long as ``dead_after_tokens``, counted here code by code."""
    sae = _perturbed(arch)
    x = inputs(sae).double()
    tokens = x.reshape(-1, D).shape[0]
    settings = {} if arch == "relu" else {"dead_after_tokens": tokens}
    if arch != "relu":
        sae.tokens_since_fired.zero_()
    _, metrics = make_objective(arch, **settings)(sae, x)
    codes = sae(x).codes.reshape(-1, W).tolist()
    nonzero = sum(1 for row in codes for v in row if v != 0)
    assert float(metrics["l0"]) == pytest.approx(nonzero / tokens)
    if arch != "relu":
        silent = sum(1 for j in range(W) if all(row[j] == 0 for row in codes))
        assert 0 < silent < W and float(metrics["dead_frac"]) == pytest.approx(silent / W)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_init_from_data_puts_the_empty_reconstruction_at_the_data_mean(arch):
    """``b_dec`` lives in the scaled space: after ``init_from_data(mean)`` the reconstruction from all-zero codes is
    ``mean`` in input units, whatever ``act_scale``."""
    sae = build(arch, act_scale=0.37).double()
    mean = torch.randn(D, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    sae.init_from_data(mean)
    torch.testing.assert_close(sae.decode(torch.zeros(2, W, dtype=torch.float64)), mean.expand(2, D))
