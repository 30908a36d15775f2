"""Where random draws happen (gencore.rng): on the generator's device, returned on the data's."""

from __future__ import annotations

import pytest
import torch

from gencore.discrete.ctmc import sample_categorical
from gencore.rng import draw_device, rand_with, randn_like_with, seeded_init

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_draw_device_is_the_generators_else_the_default_else_the_cpu() -> None:
    assert draw_device(torch.Generator()) == torch.device("cpu")
    assert draw_device(torch.Generator(), "meta") == torch.device("cpu")  # the generator wins over the default
    assert draw_device(None, "meta") == torch.device("meta")
    assert draw_device(None) == torch.device("cpu")


def test_draws_are_those_of_the_generator_with_the_requested_shape_and_dtype() -> None:
    x = torch.zeros(3, 4, dtype=torch.float64)
    expected = torch.randn(3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(randn_like_with(x, torch.Generator().manual_seed(5)), expected)
    u = rand_with((2, 7), torch.Generator().manual_seed(6), device="cpu", dtype=torch.float64)
    assert torch.equal(u, torch.rand(2, 7, generator=torch.Generator().manual_seed(6), dtype=torch.float64))


@cuda
def test_a_cpu_generator_drives_cuda_data_with_the_cpu_numbers() -> None:
    x = torch.zeros(3, 4, device="cuda")
    noise = randn_like_with(x, torch.Generator().manual_seed(0))
    assert noise.device.type == "cuda"
    assert torch.equal(noise.cpu(), torch.randn(3, 4, generator=torch.Generator().manual_seed(0)))
    probs = torch.tensor([[0.2, 0.3, 0.5]] * 64)
    on_cpu = sample_categorical(probs, generator=torch.Generator().manual_seed(1))
    on_cuda = sample_categorical(probs.to("cuda"), generator=torch.Generator().manual_seed(1))
    assert on_cuda.device.type == "cuda" and torch.equal(on_cuda.cpu(), on_cpu)


def test_seeded_init_gives_the_seeds_weights_and_leaves_the_callers_stream_alone() -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    with seeded_init(11):
        a = torch.nn.Linear(4, 2).weight.detach().clone()
    assert torch.equal(torch.rand(3), expected)  # the caller's stream goes on as if nothing had happened
    torch.manual_seed(11)
    assert torch.equal(torch.nn.Linear(4, 2).weight, a)  # the same draws as a plain reseed
