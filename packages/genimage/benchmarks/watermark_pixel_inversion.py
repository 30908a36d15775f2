"""Where a pixel-space run loses Spherical Watermark's noise: the sampler's inversion error or the clipping.

    python watermark_pixel_inversion.py RUN OUT.json [--grid euler:20,heun:20,heun:25] [--n 64] [--bits 16]
        [--refine 0]

For ``n`` marked noises ``z0`` (a Spherical Watermark key of ``--bits`` message bits, seeded) and each
``solver:steps`` of ``--grid`` (used for generation and inversion alike, as ``genimage watermark`` does), the
script generates the images unclipped and clipped to ``[-1, 1]`` (what is saved and what ``detect`` reads),
inverts both, and reports per row:

* ``clipped_pixels``: the share of generated pixels outside ``[-1, 1]``;
* ``noise_error``: ``||z0_hat - z0|| / ||z0||``; ``sign_agreement``: the share of noise coordinates whose sign is
  recovered; ``code_bit_error``: the share of Spherical Watermark's code bits (signs after the key's rotation)
  read wrong; ``bit_accuracy``: its decoded message bits (soft vote), as ``watermark evaluate`` reports them.

``--refine K`` (K > 0) adds, for the clipped images, K Adam steps (lr 0.05) on the noise that minimise
``||clip(G(z)) - x||^2`` through the whole sampler from the ODE inversion: an exact inversion of the discrete
sampler that leaves the clipped pixels free (only ``G(z) <= -1`` or ``>= 1`` is known there).
"""

from __future__ import annotations

import argparse

import torch

from gencore.io import write_json
from gencore.tables import format_table
from genimage.watermark import SphericalWatermark, new_key
from genimage.watermark.generators import RunGenerator


def refine(gen: RunGenerator, z: torch.Tensor, images: torch.Tensor, steps: int, lr: float = 0.05) -> torch.Tensor:
    z = z.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        x = gen.generate_with_grad(z, last_steps=gen.steps).cpu()
        ((x.clamp(-1, 1) - images) ** 2).sum().backward()
        opt.step()
    return z.detach()


def row(wm: SphericalWatermark, z0: torch.Tensor, z: torch.Tensor, **label) -> dict:
    """How much of the marked noise ``z0`` the recovered ``z`` keeps (see the module docstring)."""
    return {
        **label,
        "noise_error": float((z - z0).norm() / z0.norm()),
        "sign_agreement": float(((z > 0) == (z0 > 0)).float().mean()),
        "code_bit_error": float((wm.code_bits(z) != wm.code_bits(z0)).float().mean()),
        "bit_accuracy": float((wm.extract(z) == wm.key.message_tensor()).float().mean()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a pixel-space genimage run folder")
    p.add_argument("out", help="output JSON")
    p.add_argument("--grid", default="euler:20,heun:20,heun:25", help="comma-separated solver:steps")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--bits", type=int, default=16, help="message bits (evaluate's default: noise dims / 64)")
    p.add_argument("--refine", type=int, default=0, help="Adam steps of sampler inversion on the clipped images")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    rows = []
    for item in args.grid.split(","):
        solver, steps = item.split(":")
        gen = RunGenerator(args.run, steps=int(steps), solver=solver)
        if not gen.pixel_space:
            raise SystemExit(f"{args.run} is a latent run; see watermark_latent_inversion.py.")
        key = new_key("spherical", gen.noise_shape, seed=args.seed, message_bits=args.bits)
        wm = SphericalWatermark(key)
        z0 = wm.embed(args.n, generator=torch.Generator().manual_seed(args.seed + 1))
        with torch.no_grad():
            raw = gen.generate_with_grad(z0, last_steps=1).cpu()  # the unclipped images generate() would clip
        clipped = raw.clamp(-1, 1)

        share = float((raw.abs() > 1).float().mean())
        label = {"solver": solver, "steps": int(steps), "clipped_pixels": share}
        rows.append(row(wm, z0, gen.invert(raw), images="unclipped", **label))
        z_hat = gen.invert(clipped)
        rows.append(row(wm, z0, z_hat, images="clipped", **label))
        if args.refine > 0:
            z_ref = refine(gen, z_hat, clipped, args.refine)
            rows.append(row(wm, z0, z_ref, images=f"clipped, refined {args.refine}", **label))
        print(format_table(rows[-(3 if args.refine > 0 else 2) :]), flush=True)
    write_json(args.out, {"setup": {k: v for k, v in vars(args).items() if k != "out"}, "rows": rows})
    print(format_table(rows))


if __name__ == "__main__":
    main()
