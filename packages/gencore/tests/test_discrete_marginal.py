"""Marginal-transition discrete diffusion (DiGress noise): forward marginals, posterior consistency, exact
reverse chain."""

from __future__ import annotations

import itertools

import pytest
import torch

from gencore.discrete.marginal import MarginalTransitionDiffusion
from gencore.errors import ConfigError

M = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)


def test_forward_endpoints_and_normalisation() -> None:
    proc = MarginalTransitionDiffusion(M * 5)  # normalised internally
    clean = torch.tensor([0, 1, 2])
    torch.testing.assert_close(proc.forward_probs(clean, 0.0), M.expand(3, -1))
    torch.testing.assert_close(proc.forward_probs(clean, 1.0), torch.eye(3, dtype=torch.float64))
    p = proc.forward_probs(clean, torch.tensor([0.2, 0.5, 0.9]))
    torch.testing.assert_close(p.sum(-1), torch.ones(3, dtype=torch.float64))


def test_posterior_marginalises_to_forward() -> None:
    """sum_v q_t(v|c) q(x_s = j | x_t = v, c) = q_s(j | c) for every clean class c."""
    proc = MarginalTransitionDiffusion(M)
    t, s = 0.3, 0.7
    for c in range(3):
        p_clean = torch.nn.functional.one_hot(torch.tensor([c] * 3), 3).double()
        post = proc.posterior_probs(torch.arange(3), p_clean, t, s)  # rows: v
        post = post / post.sum(-1, keepdim=True)
        q_t = proc.forward_probs(torch.tensor(c), t)
        torch.testing.assert_close(q_t @ post, proc.forward_probs(torch.tensor(c), s))


def test_exact_denoiser_reverse_chain_samples_data() -> None:
    """With the exact p(c | x_t) the reverse chain of one variable reproduces the data law for any step count
    (the posterior step is exact; DiGress factorises it over variables, which is exact for a single one)."""
    proc = MarginalTransitionDiffusion(M, schedule="linear")
    data = torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64)

    def exact_p_clean(x: torch.Tensor, t: float) -> torch.Tensor:
        lik = proc.forward_probs(torch.arange(3), t)[:, x].T  # [B, c] = q_t(x | c)
        w = data * lik
        return w / w.sum(-1, keepdim=True)

    g = torch.Generator().manual_seed(0)
    n = 20000
    x = proc.prior((n,), generator=g)
    grid = torch.linspace(0, 1, 5).tolist()
    for t, s in itertools.pairwise(grid):
        x = torch.multinomial(proc.posterior_probs(x, exact_p_clean(x, t), t, s).float(), 1, generator=g)[:, 0]
    freq = torch.bincount(x, minlength=3).double() / n
    torch.testing.assert_close(freq, data, atol=0.015, rtol=0)


def test_rejects_bad_marginal_and_step() -> None:
    with pytest.raises(ConfigError):
        MarginalTransitionDiffusion(torch.tensor([1.0, -0.5]))
    with pytest.raises(ConfigError):
        MarginalTransitionDiffusion(M).posterior_probs(torch.tensor([0]), torch.ones(1, 3), 0.5, 0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_prior_draws_on_the_generators_device() -> None:
    """The marginal lives on the CPU; a CUDA generator used to be refused by the draw on the CPU."""
    proc = MarginalTransitionDiffusion(M)
    x = proc.prior((4, 5), generator=torch.Generator(device="cuda").manual_seed(0))
    assert x.device.type == "cuda" and x.shape == (4, 5)
    cpu = proc.prior((4, 5), generator=torch.Generator().manual_seed(0))
    assert cpu.device.type == "cpu"
