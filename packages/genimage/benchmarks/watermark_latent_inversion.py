"""How much of the initial noise can a latent run give back? The diagnosis behind the README's latent rows.

    python watermark_latent_inversion.py RUN OUT.json [--steps 20] [--solver euler] [--n 32]
        [--attacks none,jpeg75,blur,noise0.1] [--refine 0,200]

Initial-noise watermarks (Spherical Watermark, Tree-Ring, Gaussian Shading) read the noise back by inverting
the sampler. On a latent run that needs the latent first, from the image. For ``n`` noises ``z0`` this script
generates the latents ``z1`` and the images ``D(z1)`` (clipped), then recovers ``z1`` from each (attacked) image
and integrates the ODE back to ``t = 0``. It reports, per attack and latent-recovery method:

* ``latent_error``: ``||z1_hat - z1|| / ||z1||``;
* ``noise_error``: ``||z0_hat - z0|| / ||z0||``, and ``sign_agreement``: the share of coordinates where
  ``sign(z0_hat) = sign(z0)`` (what Spherical Watermark and Gaussian Shading decode);
* the row ``direct`` inverts ``z1`` itself (no VAE): the sampler's own inversion error.

Latent recovery: ``encoder`` is the VAE encoder's mean (what ``genimage watermark detect`` does);
``decoder-inversion-K`` then runs K Adam steps (lr 0.05) on ``||D(z) - x||^2`` from it, the decoder inversion of
Hong et al. 2024 ("On Exact Inversion of DPM-Solvers", CVPR), which aims at exact inversion of clean images.
"""

from __future__ import annotations

import argparse

import torch

from gencore.io import write_json
from gencore.tables import format_table
from genimage.watermark.attacks import apply_attack
from genimage.watermark.generators import RunGenerator


def decoder_inversion(gen: RunGenerator, images: torch.Tensor, steps: int, lr: float = 0.05) -> torch.Tensor:
    z = gen.to_state(images).detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        ((gen.to_image(z) - images) ** 2).mean().backward()
        opt.step()
    return z.detach()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--solver", default="euler")
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--attacks", default="none,jpeg75,blur,noise0.1")
    p.add_argument("--refine", default="0,200", help="decoder-inversion steps to try (0: the encoder alone)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    gen = RunGenerator(args.run, steps=args.steps, solver=args.solver)
    if gen.pixel_space:
        raise SystemExit(f"{args.run} is a pixel-space run: there is no latent to recover.")
    z0 = torch.randn(args.n, *gen.noise_shape, generator=torch.Generator().manual_seed(args.seed))
    t1 = gen.run.t_end
    with torch.no_grad():
        z1 = gen._solve(z0, 0.0, t1)
        images = gen.generate(z0)
        outside = float((gen.to_image(z1).abs() > 1).float().mean())  # pixels the clipping changes

    def row(attack: str, method: str, z1_hat: torch.Tensor) -> dict:
        with torch.no_grad():
            z0_hat = gen._solve(z1_hat, t1, 0.0)
        return {
            "attack": attack,
            "latent recovery": method,
            "latent_error": float((z1_hat - z1).norm() / z1.norm()),
            "noise_error": float((z0_hat - z0).norm() / z0.norm()),
            "sign_agreement": float(((z0_hat > 0) == (z0 > 0)).float().mean()),
        }

    rows = [row("-", "direct (no VAE)", z1)]
    for attack in args.attacks.split(","):
        x = images if attack == "none" else apply_attack(images, attack, seed=args.seed + 1)
        for k in (int(v) for v in args.refine.split(",")):
            if k == 0:
                with torch.no_grad():
                    rows.append(row(attack, "encoder", gen.to_state(x)))
            else:
                rows.append(row(attack, f"decoder-inversion-{k}", decoder_inversion(gen, x, k)))
        print(format_table(rows[-len(args.refine.split(",")) :]), flush=True)
    setup = {k: v for k, v in vars(args).items() if k != "out"}
    setup["pixels_outside_unit_range"] = outside
    write_json(args.out, {"setup": setup, "rows": rows})
    print(format_table(rows))


if __name__ == "__main__":
    main()
