"""Report figures are written atomically as real PNG files."""

from __future__ import annotations

import torch

from gencore.plots import image_grid, loss_curve, metric_curves, scatter_grid

PNG = b"\x89PNG\r\n\x1a\n"


def test_figures_are_pngs(tmp_path) -> None:
    g = torch.Generator().manual_seed(0)
    pts = {"a": {1: torch.randn(50, 2, generator=g), 4: torch.randn(50, 2, generator=g)}}
    imgs = {"a": {1: torch.rand(16, 64, generator=g) * 2 - 1}}
    scatter_grid(pts, torch.randn(50, 2, generator=g), tmp_path / "s.png", title="t")
    image_grid(imgs, torch.rand(16, 64, generator=g) * 2 - 1, tmp_path / "i.png")
    metric_curves(
        [{"coupling": "a", "nfe": 1, "w2": 1.0}, {"coupling": "a", "nfe": 4, "w2": 0.5}], "w2", tmp_path / "m.png"
    )
    loss_curve([(s, 1.0 / (s + 1)) for s in range(0, 300, 10)], tmp_path / "l.png")
    for name in ("s.png", "i.png", "m.png", "l.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.png", "l.png", "m.png", "s.png"]
