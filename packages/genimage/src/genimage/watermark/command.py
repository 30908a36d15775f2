"""``genimage watermark keygen|train|embed|detect|attack|evaluate``.

    genimage watermark keygen   --scheme spherical --run runs/d --bits 32 --out key.json
    genimage watermark embed    --key key.json --run runs/d --n 16 --out marked/
    genimage watermark attack   --images marked/ --attack jpeg75 --out attacked/
    genimage watermark detect   --key key.json --run runs/d --images attacked/ --json det.json
    genimage watermark train    --scheme molm --run runs/d --bits 16 --out molm-scheme/
    genimage watermark embed    --scheme-dir molm-scheme/ --run runs/d --n 16 --out marked/
    genimage watermark detect   --scheme-dir molm-scheme/ --run runs/d --images marked/ --json det.json
    genimage watermark evaluate --run runs/d --schemes spherical,tree-ring,gaussian-shading \\
                                --attacks none,jpeg75,blur --n 64 --json wm.json

The noise-space schemes (spherical, tree-ring, gaussian-shading) need only a key file (``keygen``). The trained
schemes (hidden, guidance, molm) are trained once on the run's own samples by ``train``, exactly as ``evaluate``
builds them, and saved as a folder (``scheme.json`` + safetensors, see :mod:`genimage.watermark.scheme_files`) that
``embed`` and ``detect`` take as ``--scheme-dir`` instead of ``--key``, for that run only (its weights' fingerprint
is checked). Guidance and MOLM mark while sampling, HiDDeN marks the generated images post hoc; detection reads the
pixels with the scheme's decoder (no inversion) and p-values come from its saved Gaussian null.

``--run`` is a ``genimage train`` run folder, or ``gaussian:C,H,W`` for the exact analytic flow of
``N(0, 0.5^2 I)`` data (closed-form inversion; a check of the pipeline without a model). ``train``, ``embed``,
``detect`` and ``evaluate`` take ``--device auto|cpu|cuda``: the run's network (sampling, inversion, regeneration)
and the HiDDeN and MOLM training run there; keys, attacks and metrics run on the CPU.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from gencore.command import (
    add_commands,
    add_device_argument,
    name_list,
    output_file,
    output_folder,
    refuse_overwriting_input,
    resolve_device,
    seed_int,
)
from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import ensure_dir, save_tensors, write_json
from gencore.tables import format_table

__all__ = ["register"]


def _generator(spec: str, steps: int, solver: str, device: str = "cpu"):
    """The generator of ``--run`` (an analytic ``gaussian:`` flow has no network and stays on the CPU)."""
    from genimage.watermark.generators import GaussianFlowGenerator, RunGenerator

    if spec.startswith("gaussian:"):
        try:
            shape = tuple(int(v) for v in spec.split(":", 1)[1].replace("x", ",").split(","))
        except ValueError:
            raise ConfigError(f"--run {spec!r}: expected gaussian:C,H,W such as gaussian:1,32,32.") from None
        if len(shape) != 3 or min(shape) < 1:
            raise ConfigError(f"--run {spec!r}: expected three positive sizes C,H,W.")
        return GaussianFlowGenerator(torch.zeros(shape), torch.full(shape, 0.5), steps=steps, solver=solver)
    if not Path(spec).is_dir():
        raise StorageError(f"run folder {spec!r} does not exist (train one with `genimage train`).")
    return RunGenerator(spec, steps=steps, solver=solver, device=device)


def _refuse_overwriting_run(output: str | Path | None, flag: str, run: str) -> None:
    """Refuse an output file that is one of the files ``--run`` loads (its configs and weights): writing results over
    them destroyed the run (a ``gaussian:`` spec has no files)."""
    if output is None or run.startswith("gaussian:"):
        return
    from genimage.runs import run_files

    refuse_overwriting_input(output, flag, *run_files(run))


def _read_images(paths: list[Path]) -> tuple[torch.Tensor, list[Path]]:
    from genimage.data.folder import GRAY_MODES, decode_still
    from genimage.imageio import from_uint8

    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix.lower() in (".png", ".jpg", ".jpeg"))
        elif p.is_file():
            files.append(p)
        else:
            raise StorageError(f"image path {str(p)!r} does not exist.")
    if not files:
        raise InputError("no PNG/JPEG images found in the given --images paths.")
    arrays = []
    for f in files:
        try:
            im = decode_still(f, repr(str(f)))  # 16-bit gray scaled to 8 bits, EXIF orientation applied
        except InputError as exc:
            raise StorageError(str(exc)) from None
        pixels = np.array(im.convert("L" if im.mode in GRAY_MODES and im.mode != "P" else "RGB"))
        if im.mode == "P" and (pixels[..., :1] == pixels[..., 1:]).all():  # a gray palette stays one channel
            pixels = pixels[..., 0]
        arrays.append(torch.from_numpy(pixels))
    shapes = {tuple(a.shape) for a in arrays}
    if len(shapes) != 1:
        raise InputError(f"all images must have one size; found {sorted(shapes)}.")
    return from_uint8(torch.stack(arrays).numpy()), files


def _key_params(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--param {item!r}: expected NAME=VALUE such as radius=5.")
        k, v = item.split("=", 1)
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def cmd_keygen(args: argparse.Namespace) -> int:
    from genimage.watermark.keys import new_key, parse_message
    from genimage.watermark.schemes import noise_scheme

    if Path(args.out).exists():  # a key replaced by a fresh random one leaves the images marked with it undetectable
        raise StorageError(
            f"key file {str(args.out)!r} already exists; a key is never overwritten, so name a new --out."
        )
    if args.shape:
        try:
            shape = tuple(int(v) for v in args.shape.split(","))
        except ValueError:
            raise ConfigError(f"--shape {args.shape!r}: expected three positive sizes C,H,W such as 1,32,32.") from None
        if len(shape) != 3 or min(shape) < 1:
            raise ConfigError(f"--shape {args.shape!r}: expected three positive sizes C,H,W such as 1,32,32.")
    elif args.run:
        shape = _generator(args.run, 1, "euler").noise_shape
    else:
        raise ConfigError("give --shape C,H,W or --run RUN_DIR to size the key.")
    if args.scheme == "tree-ring" and (args.message is not None or args.bits is not None):  # were dropped silently
        flag = "--message" if args.message is not None else "--bits"
        raise ConfigError(f"{flag}: a tree-ring key is zero-bit and carries no message; leave {flag} out.")
    message = args.message
    if message is not None and args.bits is not None:  # --bits was dropped: it sizes a hex message, checks a 0/1 one
        message = parse_message(message, args.bits)
    bits = 32 if args.bits is None else args.bits
    key = new_key(args.scheme, shape, seed=args.seed, message=message, message_bits=bits, **_key_params(args.param))
    noise_scheme(key)  # validates the parameters against the shape
    key.save(args.out)
    print(f"wrote {args.scheme} key for noise {shape} ({len(key.message)} message bits) to {args.out}")
    return 0


def default_message_bits(noise_shape) -> int:
    """The paper's density, 256 bits in 16384 noise dimensions, at most 32 bits (evaluate's and train's default)."""
    c, h, w = noise_shape
    return max(1, min(32, c * h * w // 64))


def _key_or_scheme_dir(args: argparse.Namespace) -> None:
    if (args.key is None) == (args.scheme_dir is None):
        raise ConfigError(
            "give exactly one of --key (a noise-scheme key file) and --scheme-dir (a folder from `watermark train`)."
        )


def cmd_embed(args: argparse.Namespace) -> int:
    from genimage.imageio import save_images, write_grid
    from genimage.watermark.keys import WatermarkKey
    from genimage.watermark.schemes import noise_scheme

    _key_or_scheme_dir(args)
    if args.n < 1:
        raise ConfigError(f"--n must be a positive integer, got {args.n}.")
    # a second embed into one folder left the first's extra images beside the second's noise (refused before work)
    held = [name for name in ("images", "noise.safetensors", "grid.png") if (Path(args.out) / name).exists()]
    if held:
        raise StorageError(f"{str(args.out)!r} already holds marked images ({held[0]}); choose a new --out folder.")
    if args.scheme_dir is not None:
        from genimage.watermark.image_schemes import generate_batched
        from genimage.watermark.scheme_files import load_scheme

        gen = _generator(args.run, args.steps, args.solver, resolve_device(args.device))
        scheme = load_scheme(args.scheme_dir, gen)
        noise = torch.randn(args.n, *gen.noise_shape, generator=torch.Generator().manual_seed(args.seed))
        clean = generate_batched(gen, noise) if scheme.name == "hidden" else None
        images = scheme.mark(gen, noise, clean)
        how = f"with the trained {scheme.name} scheme"
    else:
        key = WatermarkKey.load(args.key)
        gen = _generator(args.run, args.steps, args.solver, resolve_device(args.device))
        if tuple(gen.noise_shape) != tuple(key.shape):
            raise InputError(f"key {args.key} is for noise {key.shape} but the run's noise is {gen.noise_shape}.")
        noise = noise_scheme(key).embed(args.n, generator=torch.Generator().manual_seed(args.seed))
        images = gen.generate(noise)
        how = f"({gen.nfe} NFE each)"
    out = ensure_dir(args.out)
    save_images(out / "images", images, prefix="marked")
    write_grid(out / "grid.png", images)
    save_tensors(out / "noise.safetensors", {"noise": noise})
    print(f"wrote {args.n} marked images {how} to {out / 'images'}, a grid and the noise")
    return 0


def cmd_attack(args: argparse.Namespace) -> int:
    from genimage.imageio import save_png
    from genimage.watermark.attacks import apply_attack

    images, files = _read_images(args.images)
    first: dict[str, Path] = {}
    for f in files:  # every output is OUT/<stem>.png: two inputs of one stem would overwrite each other
        if f.stem in first:
            raise InputError(
                f"{str(first[f.stem])!r} and {str(f)!r} would both be written as {f.stem}.png; give inputs with "
                "distinct names."
            )
        first[f.stem] = f
        target = Path(args.out) / (f.stem + ".png")
        if target.is_file() and os.path.samefile(target, f):  # --out the folder of the originals replaced them
            raise StorageError(
                f"--out {str(args.out)!r} would overwrite the input image {str(f)!r}; choose another folder."
            )
        if target.exists():  # a second attack into one folder replaced the first's images
            raise StorageError(
                f"--out {str(args.out)!r} already holds {target.name} from an earlier attack; choose a new folder."
            )
    attacked = apply_attack(images, args.attack, seed=args.seed)
    out = ensure_dir(args.out)
    for f, img in zip(files, attacked):
        save_png(out / (f.stem + ".png"), img)
    print(f"wrote {len(files)} images attacked with {args.attack} to {out}")
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    from genimage.watermark.keys import WatermarkKey
    from genimage.watermark.schemes import noise_scheme

    if not 0.0 < args.alpha < 1.0:  # 1.5 called every image marked, NaN none
        raise ConfigError(f"--alpha must be a p-value threshold in (0, 1), got {args.alpha}.")
    _key_or_scheme_dir(args)
    if args.scheme_dir is not None:
        return _detect_with_scheme_dir(args)
    refuse_overwriting_input(args.json, "--json", args.key)
    _refuse_overwriting_run(args.json, "--json", args.run)
    key = WatermarkKey.load(args.key)
    wm = noise_scheme(key)
    gen = _generator(args.run, args.steps, args.solver, resolve_device(args.device))
    images, files = _read_images(args.images)
    refuse_overwriting_input(args.json, "--json", *files)
    if tuple(images.shape[1:]) != tuple(gen.image_shape):
        raise InputError(f"images have shape {tuple(images.shape[1:])} but the run makes {gen.image_shape}.")
    if tuple(gen.noise_shape) != tuple(key.shape):
        raise InputError(f"key {args.key} is for noise {key.shape} but the run's noise is {gen.noise_shape}.")
    det = wm.detect(gen.invert(images), generator=torch.Generator().manual_seed(args.seed))
    records = []
    for i, f in enumerate(files):
        rec = {"image": str(f), "pvalue": float(det.pvalue[i]), "marked": bool(det.pvalue[i] < args.alpha)}
        if det.bits is not None:
            rec["bits"] = "".join(str(int(b)) for b in det.bits[i])
            rec["bit_accuracy"] = float((det.bits[i] == key.message_tensor()).double().mean())
        records.append(rec)
    print(format_table(records, [c for c in ("image", "pvalue", "marked", "bit_accuracy") if c in records[0]]))
    if args.json:
        write_json(args.json, {"key": str(args.key), "inversion_nfe": gen.nfe, "records": records})
    return 0


def _detect_with_scheme_dir(args: argparse.Namespace) -> int:
    """``detect --scheme-dir``: the trained scheme's decoder reads the pixels (no inversion); same JSON as a key's."""
    from genimage.watermark.scheme_files import load_scheme

    refuse_overwriting_input(args.json, "--json", *sorted(Path(args.scheme_dir).rglob("*")))  # its JSON and weights
    _refuse_overwriting_run(args.json, "--json", args.run)
    gen = _generator(args.run, args.steps, args.solver, resolve_device(args.device))
    scheme = load_scheme(args.scheme_dir, gen)
    images, files = _read_images(args.images)
    refuse_overwriting_input(args.json, "--json", *files)
    if tuple(images.shape[1:]) != tuple(gen.image_shape):
        raise InputError(f"images have shape {tuple(images.shape[1:])} but the run makes {gen.image_shape}.")
    det = scheme.detect(images)
    records = []
    for i, f in enumerate(files):
        records.append(
            {
                "image": str(f),
                "pvalue": float(det.pvalue[i]),
                "marked": bool(det.pvalue[i] < args.alpha),
                "bits": "".join(str(int(b)) for b in det.bits[i]),
                "bit_accuracy": float((det.bits[i] == scheme.message).double().mean()),
                "score": float(det.score[i]),
            }
        )
    print(format_table(records, ("image", "pvalue", "marked", "bit_accuracy")))
    if args.json:
        write_json(
            args.json,
            {"scheme_dir": str(args.scheme_dir), "scheme": scheme.name, "inversion_nfe": 0, "records": records},
        )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """``watermark train``: a trained scheme built as ``evaluate`` builds it, saved as a folder."""
    import secrets

    from genimage.watermark.scheme_files import check_new_folder, parse_scheme_message, run_fingerprint, save_scheme

    check_new_folder(args.out)  # before any training
    if args.bits is not None and args.bits < 1:
        raise ConfigError(f"--bits must be a positive integer, got {args.bits}.")
    if args.hidden_steps < 1:
        raise ConfigError(f"--hidden-steps must be at least 1, got {args.hidden_steps}.")
    args.schemes = (args.scheme,)
    _check_scheme_options(args)
    message = parse_scheme_message(args.message, args.bits)
    if args.seed is None:
        args.seed = secrets.randbits(32)
    gen = _generator(args.run, args.steps, args.solver, resolve_device(args.device))
    if message is not None:
        args.bits = len(message)
    elif args.bits is None:
        args.bits = default_message_bits(gen.noise_shape)
    fingerprint = run_fingerprint(gen)  # before MOLM attaches its markers to the network
    scheme = _image_scheme(args.scheme, gen, args, {}, message=message)
    options = {"bits": args.bits, "steps": args.steps, "solver": args.solver}
    if args.scheme in ("hidden", "guidance"):
        options["hidden_steps"] = args.hidden_steps
    if args.scheme == "guidance":
        options["guidance_scale"] = args.guidance_scale
    if args.scheme == "molm":
        options.update({k: getattr(args, k) for k in MOLM_OPTIONS})
    save_scheme(args.out, scheme, fingerprint=fingerprint, seed=args.seed, options=options, run=args.run)
    print(f"wrote the trained {args.scheme} scheme ({args.bits} message bits, seed {args.seed}) to {args.out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from genimage.watermark.evaluate import (
        HEADLINE_COLUMNS,
        IMAGE_SCHEMES,
        EvaluationConfig,
        evaluate_watermarks,
        known_schemes,
    )
    from genimage.watermark.report import write_examples, write_figure, write_markdown

    for s in args.schemes:
        if s not in known_schemes():
            raise ConfigError(f"unknown scheme {s!r}; expected one of: {', '.join(known_schemes())}.")
    _check_scheme_options(args)
    md = args.markdown or args.json.with_suffix(".md")
    fig = args.figure or args.json.with_suffix(".png")
    ex = args.examples or args.json.with_suffix(".examples.png")
    outputs = {"--json": args.json, "--markdown": md, "--figure": fig, "--examples": ex}
    for flag, path in outputs.items():
        _refuse_overwriting_run(path, flag, args.run)
    written: dict[str, str] = {}
    for flag, path in outputs.items():  # the later write replaced the earlier: a .md in the JSON file, say
        other = written.setdefault(os.path.abspath(path), flag)
        if other != flag:
            raise ConfigError(f"{flag} and {other} are both {str(path)!r}; give each output its own file.")
    gen = _generator(args.run, args.steps, args.solver, resolve_device(args.device))
    if args.bits is None:
        args.bits = default_message_bits(gen.noise_shape)
    cfg = EvaluationConfig(
        n=args.n,
        seed=args.seed,
        message_bits=args.bits,
        progress=not args.no_progress,
        noise_samples=args.noise_samples,
    )
    shared: dict = {}
    schemes = [_image_scheme(s, gen, args, shared) if s in IMAGE_SCHEMES else s for s in args.schemes]
    t0 = time.perf_counter()
    examples: dict = {}
    records = evaluate_watermarks(
        gen, schemes, args.attacks, cfg, quality=_fd_quality if args.fd else None, examples=examples
    )
    config = {
        "run": args.run,
        "schemes": list(args.schemes),
        "attacks": list(args.attacks),
        "n": args.n,
        "seed": args.seed,
        "message_bits": args.bits,
        "steps": args.steps,
        "solver": args.solver,
        "fd": args.fd,
        **({"guidance_scale": args.guidance_scale} if "guidance" in args.schemes else {}),
        **({k: getattr(args, k) for k in MOLM_OPTIONS} if "molm" in args.schemes else {}),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    write_json(args.json, {"config": config, "records": records})
    write_markdown(md, records)
    write_figure(fig, records)
    write_examples(ex, examples)
    print(format_table(records, HEADLINE_COLUMNS))
    print(f"wrote {args.json}, {md}, {fig} and {ex}")
    return 0


MOLM_OPTIONS = ("molm_steps", "molm_sampler_steps", "molm_finetune_steps", "molm_fidelity", "molm_routing")


def _fd_quality(images: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    from genimage.metrics.efflite import efflite0_features
    from genimage.metrics.frechet import frechet_distance

    return {"fd_efflite0": frechet_distance(efflite0_features(images), efflite0_features(reference))}


def _check_scheme_options(args: argparse.Namespace) -> None:
    """The trained schemes' options, checked before any scheme trains (the HiDDeN that guidance and hidden share
    trains first, so a bad option checked in its own scheme's turn was refused only after that work)."""
    if "guidance" in args.schemes and not (math.isfinite(args.guidance_scale) and args.guidance_scale >= 0):
        raise ConfigError(f"--guidance-scale must be a finite number >= 0, got {args.guidance_scale}.")
    if "molm" not in args.schemes:
        return
    if args.molm_steps < 1:
        raise ConfigError(f"--molm-steps must be at least 1, got {args.molm_steps}.")
    for flag in ("sampler", "finetune"):
        if getattr(args, f"molm_{flag}_steps") < 0:
            raise ConfigError(f"--molm-{flag}-steps must be at least 0, got {getattr(args, f'molm_{flag}_steps')}.")
    if not (math.isfinite(args.molm_fidelity) and args.molm_fidelity >= 0):  # inf: trained to NaN scores
        raise ConfigError(f"--molm-fidelity must be a finite number >= 0, got {args.molm_fidelity}.")


def _image_scheme(name: str, gen, args: argparse.Namespace, shared: dict, message=None):
    """Guidance and post-hoc HiDDeN share one HiDDeN trained on the run's samples (``evaluate`` and ``train``);
    ``message``: the bits to mark with (default drawn from the seed)."""
    progress = not args.no_progress
    if name in ("guidance", "hidden"):
        from genimage.watermark.image_schemes import HIDDEN_STEPS, GuidanceScheme, HiddenScheme, train_for_generator

        if "hidden" not in shared:
            steps = getattr(args, "hidden_steps", HIDDEN_STEPS)
            shared["hidden"] = train_for_generator(
                gen, message_bits=args.bits, seed=args.seed, steps=steps, progress=progress
            )
        kw = {"message_bits": args.bits, "seed": args.seed, "progress": progress, "trained": shared["hidden"]}
        kw["message"] = message
        if name == "hidden":
            return HiddenScheme.build(gen, **kw)
        return GuidanceScheme.build(gen, scale=args.guidance_scale, **kw)
    from genimage.watermark.molm import MOLMScheme

    return MOLMScheme.build(
        gen,
        message_bits=args.bits,
        seed=args.seed,
        steps=args.molm_steps,
        sampler_steps=args.molm_sampler_steps,
        finetune_steps=args.molm_finetune_steps,
        routing=args.molm_routing,
        fidelity=args.molm_fidelity,
        progress=progress,
        message=message,
    )


def _add_generator_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run folder from `genimage train`, or gaussian:C,H,W")
    p.add_argument("--steps", type=int, default=20, help="ODE steps for generation and inversion (default 20)")
    p.add_argument(
        "--solver", default="euler",
        help="euler, midpoint, heun or rk4 (default euler; heun inverts far more exactly, which the initial-noise "
        "schemes need on pixel-space runs: see the README)",
    )  # fmt: skip
    add_device_argument(p)


def _add_trained_scheme_options(p: argparse.ArgumentParser) -> None:
    """The trained schemes' options, shared by ``evaluate`` and ``train``."""
    from genimage.watermark.molm import FINETUNE_STEPS, JOINT_STEPS, ROUTINGS, SAMPLER_STEPS

    p.add_argument(
        "--guidance-scale",
        type=float,
        default=1.0,
        dest="guidance_scale",
        help="strength of the watermark guidance step of the guidance scheme (default 1)",
    )
    p.add_argument(
        "--molm-steps",
        type=int,
        default=JOINT_STEPS,
        dest="molm_steps",
        help="joint training steps of MOLM's markers",
    )
    p.add_argument(
        "--molm-sampler-steps",
        type=int,
        default=SAMPLER_STEPS,
        dest="molm_sampler_steps",
        help="then steps of MOLM's markers and extractor trained through the sampler's last two steps (0: none)",
    )
    p.add_argument(
        "--molm-finetune-steps",
        type=int,
        default=FINETUNE_STEPS,
        dest="molm_finetune_steps",
        help="then steps of MOLM's extractor alone on 1,024 fully sampled marked images (0: none)",
    )
    p.add_argument(
        "--molm-fidelity",
        type=float,
        default=1.0,
        dest="molm_fidelity",
        help="scale of MOLM's fidelity weights in its first two phases (larger: closer to the unmarked samples, "
        "fewer bits read)",
    )
    p.add_argument(
        "--molm-routing",
        choices=ROUTINGS,
        default="bit",
        dest="molm_routing",
        help="bit: every key bit picks one of two adapters in every layer (default); segment: the paper's "
        "key segments, each picking one of 2^k adapters of one layer",
    )


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``genimage watermark`` and its sub-verbs."""
    from genimage.watermark.attacks import ATTACK_NAMES
    from genimage.watermark.image_schemes import HIDDEN_STEPS
    from genimage.watermark.scheme_files import TRAINED_SCHEMES
    from genimage.watermark.schemes import NOISE_SCHEMES

    wm = commands.add_parser("watermark", help="watermark keys, embedding, detection, attacks and evaluation")
    sub = add_commands(wm)

    kg = sub.add_parser("keygen", help="write a seeded watermark key file (JSON)")
    kg.add_argument(
        "--scheme", required=True, choices=tuple(NOISE_SCHEMES), help="the noise-space scheme the key is for"
    )
    kg.add_argument(
        "--out", required=True, type=output_file, help="new key file to write (JSON; an existing key is kept)"
    )
    kg.add_argument("--shape", help="noise shape C,H,W (or give --run)")
    kg.add_argument("--run", help="run folder whose image shape sizes the key")
    kg.add_argument("--bits", type=int, help="message length in bits (default 32, or the --message's own length)")
    kg.add_argument("--message", help="message as 0/1 string or 0x-hex (default: seeded random bits)")
    kg.add_argument("--seed", type=int, help="key seed (default: 62 fresh random bits)")
    kg.add_argument("--param", action="append", help="scheme parameter NAME=VALUE (repeatable), e.g. radius=5")
    kg.set_defaults(func=cmd_keygen)

    tr = sub.add_parser(
        "train",
        help="train a hidden, guidance or molm scheme on the run's own samples and save it as a folder",
        description="Train a scheme exactly as `watermark evaluate` builds it and write it atomically as a new "
        "folder: scheme.json (message, seed, options, the detection null, the run and its weights' fingerprint) "
        "plus safetensors weights. `embed` and `detect` take it as --scheme-dir, for this run only.",
    )
    tr.add_argument("--scheme", required=True, choices=TRAINED_SCHEMES, help="the trained scheme")
    _add_generator_options(tr)
    tr.add_argument(
        "--out", required=True, type=output_folder, help="new scheme folder (an existing non-empty one is kept)"
    )
    tr.add_argument(
        "--bits", type=int, help="message bits (default: noise dims / 64, at most 32, or the --message's length)"
    )
    tr.add_argument("--message", help="message as 0/1 string or 0x-hex (default: bits drawn from the seed)")
    tr.add_argument("--seed", type=seed_int, help="seed of the training and the message (default: fresh random)")
    tr.add_argument(
        "--hidden-steps",
        type=int,
        default=HIDDEN_STEPS,
        dest="hidden_steps",
        help=f"HiDDeN training steps of the hidden and guidance schemes (default {HIDDEN_STEPS}, as evaluate)",
    )
    _add_trained_scheme_options(tr)
    tr.add_argument("--no-progress", action="store_true", help="hide progress bars")
    tr.set_defaults(func=cmd_train)

    em = sub.add_parser("embed", help="generate marked images with a key or a trained scheme")
    em.add_argument("--key", type=Path, help="key file from `genimage watermark keygen`")
    em.add_argument(
        "--scheme-dir", type=Path, dest="scheme_dir", help="or a trained scheme folder from `genimage watermark train`"
    )
    _add_generator_options(em)
    em.add_argument("--n", type=int, default=16, help="marked images to generate (default 16)")
    em.add_argument("--seed", type=seed_int, default=0, help="seed of the marked noise (default 0)")
    em.add_argument("--out", required=True, type=output_folder, help="folder for the marked images")
    em.set_defaults(func=cmd_embed)

    at = sub.add_parser("attack", help=f"attack PNG images ({', '.join(ATTACK_NAMES)}; combine with +)")
    at.add_argument("--images", required=True, type=Path, nargs="+", help="PNG files to attack")
    at.add_argument(
        "--attack", required=True, help="an attack name with an optional strength, e.g. jpeg75, or several joined by +"
    )
    at.add_argument("--seed", type=seed_int, default=0, help="seed of the random attacks (default 0)")
    at.add_argument("--out", required=True, type=output_folder, help="folder for the attacked images")
    at.set_defaults(func=cmd_attack)

    de = sub.add_parser(
        "detect", help="test images against a key (inverting them) or a trained scheme (reading their pixels)"
    )
    de.add_argument("--key", type=Path, help="key file from `genimage watermark keygen`")
    de.add_argument(
        "--scheme-dir", type=Path, dest="scheme_dir", help="or a trained scheme folder from `genimage watermark train`"
    )
    _add_generator_options(de)
    de.add_argument("--images", required=True, type=Path, nargs="+", help="PNG files to test")
    de.add_argument("--alpha", type=float, default=0.01, help="p-value threshold for 'marked' (default 0.01)")
    de.add_argument("--seed", type=seed_int, default=0, help="seed of the randomised p-values")
    de.add_argument("--json", type=output_file, help="also write the per-image results here")
    de.set_defaults(func=cmd_detect)

    ev = sub.add_parser("evaluate", help="every scheme under every attack on the same images; table + figure")
    _add_generator_options(ev)
    ev.add_argument(
        "--schemes",
        type=name_list,
        default=("spherical", "tree-ring", "gaussian-shading"),
        help="comma-separated, from spherical, tree-ring, gaussian-shading, guidance, hidden, molm "
        "(default spherical,tree-ring,gaussian-shading)",
    )
    ev.add_argument(
        "--attacks",
        type=name_list,
        default=("none", "jpeg75", "blur"),
        help="comma-separated attacks as in `watermark attack` (default none,jpeg75,blur)",
    )
    ev.add_argument("--n", type=int, default=64, help="marked (and unmarked) images per scheme")
    ev.add_argument("--bits", type=int, help="message bits of multi-bit schemes (default: noise dims / 64, at most 32)")
    ev.add_argument("--fd", action="store_true", help="quality cost: FD-EffLite0 between marked and unmarked sets")
    ev.add_argument(
        "--seed",
        type=seed_int,
        default=0,
        help="seed of keys, noise, attacks, p-values and trained markers (default 0)",
    )
    ev.add_argument(
        "--noise-samples", type=int, default=300, dest="noise_samples", help="marked noises for the Gaussianity tests"
    )
    _add_trained_scheme_options(ev)
    ev.add_argument("--json", required=True, type=output_file, help="where to write the results")
    ev.add_argument("--markdown", type=output_file, help="Markdown table (default: beside --json)")
    ev.add_argument("--figure", type=output_file, help="PNG figure (default: beside --json)")
    ev.add_argument(
        "--examples",
        type=output_file,
        help="PNG of the first 8 unmarked and marked images of every scheme (default: beside --json, .examples.png)",
    )
    ev.add_argument("--no-progress", action="store_true", help="hide progress bars")
    ev.set_defaults(func=cmd_evaluate)
