"""Watermark benchmark: Spherical Watermark's sparse construction against the dense reference, and detection cost.

    python bench_watermark.py OUT.json

1. Spherical Watermark at ``D = 1024, 3072, 4096, 16384`` (1 x 32 x 32 and 3 x 32 x 32: genimage's MNIST
   and photo runs; 16384 = 4 x 64 x 64, the Stable Diffusion latent the paper and its reference code use):
   key construction, embedding and extraction throughput of this suite's sparse GF(2) transform +
   structured rotation (float64), against the dense construction of the reference code (a ``D x D``
   binary matrix and a dense Haar rotation from a QR decomposition, float32).
   The dense version is timed where it fits (``D <= 4096``); at ``D = 16384`` its memory (two
   ``D x D`` float32 matrices, 2 GiB) and QR time (``~D^3``) are reported as extrapolations, marked so.
2. Detection cost per scheme on a 32 x 32 DiT-Mi (random weights: the cost does not depend on training):
   network evaluations (NFE) and seconds per image to check one image.

Wall-clock numbers on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import math
import platform
import time

import torch

from gencore.command import benchmark_parser
from gencore.io import write_json
from gencore.tables import format_table
from genimage.watermark.keys import new_key
from genimage.watermark.spherical import SphericalWatermark


def _time(fn, repeat=3):
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


class DenseSpherical:
    """The reference construction: dense binary transform (as float32 0/1) and dense Haar rotation."""

    def __init__(self, sparse: SphericalWatermark) -> None:
        d = sparse.dim
        self.t = sparse.embedding.sparse_matrix().to_dense().to(torch.float32)
        g = torch.Generator().manual_seed(0)
        q, r = torch.linalg.qr(torch.randn(d, d, generator=g))
        self.r = q * torch.sign(torch.diagonal(r))
        self.sparse = sparse

    def embed(self, n: int, g: torch.Generator) -> torch.Tensor:
        e = self.sparse.embedding
        msg = self.sparse.key.message_tensor().expand(n, -1)
        source = torch.randint(0, 2, (n, e.dim), generator=g)
        source[:, e.groups[:, 0]] = msg[:, e.bit_index]
        code = (source.to(torch.float32) @ self.t.T) % 2
        u = (1 - 2 * code) / e.dim**0.5
        radius = torch.randn(n, e.dim, generator=g).norm(dim=1, keepdim=True)
        return radius * (u @ self.r.T)

    def extract(self, z: torch.Tensor) -> torch.Tensor:
        e = self.sparse.embedding
        code = ((z @ self.r) < 0).to(torch.float32)
        source = ((code @ self.t.T) % 2).long()  # T is its own inverse over GF(2): s = T c
        votes = source[:, e.groups[:, 0]].reshape(z.shape[0], e.repeats, e.message_bits)
        return (2 * votes.sum(1) > e.repeats).long()


def _key_bytes(wm: SphericalWatermark) -> int:
    """Bytes held by the sparse key after one embed and one extract (tables, angles, cached cos/sin)."""
    rot = wm.rotation
    tensors = [wm.embedding.groups, wm.embedding.bit_index, rot._to_natural, rot._from_natural]
    tensors += rot.perms + rot.angles + rot._gathers + rot._scatters
    tensors += [t for tables in rot._cache.values() for pair in tables.trig for t in pair]  # CPU: no index copies
    return sum(t.numel() * t.element_size() for t in tensors)


def bench_construction(batch: int = 64) -> list[dict]:
    rows = []
    for c, h in ((1, 32), (3, 32), (4, 32), (4, 64)):
        shape = (c, h, h)
        d = c * h * h
        key = new_key("spherical", shape, seed=1, message_bits=256 if d >= 16384 else 32)
        t_build, wm = _time(lambda k=key: SphericalWatermark(k), repeat=1)
        g = torch.Generator().manual_seed(0)
        t_embed, z = _time(lambda w=wm, g=g: w.embed(batch, g))
        t_extract, bits = _time(lambda w=wm, zz=z: w.extract(zz, soft=False))
        assert bool((bits == key.message_tensor()).all())
        rows.append(
            {
                "D": d,
                "construction": "sparse (ours)",
                "dtype": "float64",
                "key_build_s": t_build,
                "embed_img_per_s": batch / t_embed,
                "extract_img_per_s": batch / t_extract,
                "key_memory_mb": _key_bytes(wm) / 2**20,
                "measured": True,
            }
        )
        if d <= 4096:
            t_dense, dense = _time(lambda w=wm: DenseSpherical(w), repeat=1)
            td_embed, zd = _time(lambda dense=dense, g=g: dense.embed(batch, g))
            td_extract, bits_d = _time(lambda dense=dense, zd=zd: dense.extract(zd))
            assert bool((bits_d == key.message_tensor()).all())
            rows.append(
                {
                    "D": d,
                    "construction": "dense reference",
                    "dtype": "float32",
                    "key_build_s": t_dense,
                    "embed_img_per_s": batch / td_embed,
                    "extract_img_per_s": batch / td_extract,
                    "key_memory_mb": 2 * d * d * 4 / 2**20,
                    "measured": True,
                }
            )
            last_dense = (d, t_dense, td_embed, td_extract)
        else:
            d0, tb, te, tx = last_dense
            rows.append(
                {
                    "D": d,
                    "construction": "dense reference (extrapolated)",
                    "dtype": "float32",
                    "key_build_s": tb * (d / d0) ** 3,
                    "embed_img_per_s": batch / (te * (d / d0) ** 2),
                    "extract_img_per_s": batch / (tx * (d / d0) ** 2),
                    "key_memory_mb": 2 * d * d * 4 / 2**20,
                    "measured": False,
                }
            )
    return rows


def bench_detection(n: int = 16, steps: int = 50) -> list[dict]:
    from genimage.models.dit import DiT
    from genimage.watermark.generators import FlowGenerator
    from genimage.watermark.hidden import HiddenConfig, HiddenDecoder
    from genimage.watermark.schemes import noise_scheme

    torch.manual_seed(0)
    net = DiT(image_size=32, channels=1, patch_size=4, size="DiT-Mi").eval()
    gen = FlowGenerator(lambda x, t: net(x, t), (1, 32, 32), steps=steps)
    images = torch.rand(n, 1, 32, 32) * 2 - 1
    rows = []
    with torch.no_grad():
        t_inv, z = _time(lambda: gen.invert(images), repeat=1)
        for scheme in ("spherical", "tree-ring", "gaussian-shading"):
            wm = noise_scheme(new_key(scheme, (1, 32, 32), seed=1))
            t_det, _ = _time(lambda w=wm: w.detect(z))
            rows.append(
                {
                    "scheme": scheme,
                    "detect_nfe": steps,
                    "inversion_s_per_img": t_inv / n,
                    "decode_s_per_img": t_det / n,
                    "total_s_per_img": (t_inv + t_det) / n,
                }
            )
        dec = HiddenDecoder(HiddenConfig(channels=1, message_bits=32)).eval()
        t_dec, _ = _time(lambda: dec(images))
        for scheme in ("guidance", "hidden", "molm"):
            rows.append(
                {
                    "scheme": scheme,
                    "detect_nfe": 0,
                    "inversion_s_per_img": 0.0,
                    "decode_s_per_img": t_dec / n,
                    "total_s_per_img": t_dec / n,
                }
            )
    return rows


def main(out: str) -> None:
    torch.set_num_threads(1)
    construction = bench_construction()
    detection = bench_detection()
    print(format_table(construction))
    print()
    print(format_table(detection))
    write_json(
        out,
        {
            "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": 1},
            "construction": construction,
            "detection": detection,
        },
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_watermark.json")
    args = parser.parse_args()
    main(args.out_json)
