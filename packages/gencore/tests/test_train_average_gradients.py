"""average_gradients / broadcast_state: two gloo processes, each with half a batch, step like one process
with the whole batch (for learners that step their own optimisers, e.g. genrl's agents)."""

from __future__ import annotations

import pytest
import torch

from gencore.train import average_gradients, broadcast_state, launch, setup, teardown

pytestmark = pytest.mark.distributed


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 5, generator=g), torch.randn(16, 3, generator=g)


def _sgd_steps(rank_seed: int, shard: slice, steps: int = 4) -> dict[str, torch.Tensor]:
    torch.manual_seed(rank_seed)  # ranks start from different weights: broadcast_state must fix that
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    net.register_buffer("counter", torch.tensor([float(rank_seed)]))
    frozen = torch.nn.Linear(3, 3)  # a parameter without gradient is left alone
    broadcast_state(net)
    opt = torch.optim.SGD([*net.parameters(), *frozen.parameters()], lr=0.3)  # scale-sensitive, unlike Adam
    x, y = _data()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        (net(x[shard]) - y[shard]).square().sum(1).mean().backward()
        average_gradients(p for group in opt.param_groups for p in group["params"])
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _worker() -> dict[str, torch.Tensor]:
    info = setup("cpu")
    try:
        half = slice(8 * info.rank, 8 * info.rank + 8)
        return _sgd_steps(rank_seed=info.rank, shard=half)
    finally:
        teardown(info)


def test_two_processes_with_half_batches_equal_one_with_the_whole_batch() -> None:
    one = _sgd_steps(rank_seed=0, shard=slice(0, 16))
    two = launch(_worker, nproc=2)
    assert sorted(two) == [0, 1]
    for k, v in one.items():
        torch.testing.assert_close(two[0][k], v, rtol=0, atol=1e-6)
        assert torch.equal(two[0][k], two[1][k]), k  # the replicas stay identical


def test_one_process_is_a_no_op() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    average_gradients([p])
    broadcast_state(torch.nn.Linear(2, 2))
    assert torch.equal(p.grad, torch.full((3,), 2.0))
