"""The times MOLM's joint phase trains at: uniform on ``[0.3, 1) * t_end`` (the data half of the path, with ``t = 0``
noise and ``t = 1`` data; :func:`genimage.watermark.molm.train_molm`'s docstring), the same for the unmarked and
the marked pass of a step, and the noisy point handed to the network drawn on the run's path at that time."""

from __future__ import annotations

import pytest
import torch

from genimage.task import make_path
from genimage.watermark import molm


class _Recorder(torch.nn.Module):
    """The run's exact prediction when every data point is ``c``, recording every ``(x_t, t)`` it is called with."""

    def __init__(self, objective: str, c: torch.Tensor) -> None:
        super().__init__()
        self.path, self.prediction, _ = make_path(objective)
        self.c, self.dummy, self.calls = c, torch.nn.Parameter(torch.zeros(())), []

    def forward(self, x, t, y=None):
        self.calls.append((x.detach().clone(), t.detach().clone()))
        _, co = self.path.coefficients(t, x)
        eps = (x - co.alpha * self.c) / co.sigma
        return eps if self.prediction == "noise" else co.d_alpha * self.c + co.d_sigma * eps


@pytest.mark.parametrize(("objective", "t_end"), [("flow", 1.0), ("flow", 0.8), ("vp", None)])
def test_joint_phase_times_are_uniform_on_the_data_side(objective, t_end):
    c = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8
    path, prediction, run_t_end = make_path(objective)
    t_end = run_t_end if t_end is None else t_end
    net = _Recorder(objective, c)
    molm.train_molm(net, c.expand(16, -1, -1, -1).clone(), bits=4, steps=25, batch_size=32, progress=False,
                    path=path, prediction=prediction, t_end=t_end)  # fmt: skip
    assert len(net.calls) == 50  # per step: the unmarked pass, then the marked one, at the same points
    for (x_base, t_base), (x_marked, t_marked) in zip(net.calls[::2], net.calls[1::2], strict=True):
        assert torch.equal(t_base, t_marked) and torch.equal(x_base, x_marked)
    t = torch.cat([t for _, t in net.calls[::2]]) / t_end  # 800 times, in units of t_end
    assert t.shape == (800,) and t.min() >= 0.3 and t.max() < 1.0
    assert t.min() < 0.31 and t.max() > 0.99  # the whole range: [0.4, 1) or [0.3, 0.9) fail
    # uniform on [0.3, 1): the empirical CDF within 0.06 of (u - 0.3) / 0.7 everywhere (KS 1 % point: 0.058)
    u = t.sort().values
    cdf = (u - 0.3) / 0.7
    k = torch.arange(1, 801) / 800
    assert torch.maximum((k - cdf).abs(), (k - 1 / 800 - cdf).abs()).max() < 0.06
    # the point handed to the network lies on the run's path at the time handed with it: x_t = alpha c + sigma eps
    x = torch.cat([x for x, _ in net.calls[::2]])
    _, co = path.coefficients(t * t_end, x)
    eps = ((x - co.alpha * c) / co.sigma).flatten(1)  # [800, 64], standard normal per sample
    assert eps.mean().abs() < 0.02 and (eps.std() - 1).abs() < 0.02
    assert (eps.std(dim=1) - 1).abs().max() < 0.5
