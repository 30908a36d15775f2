"""The ``genimage`` command.

genimage train    --data digits --steps 300 --out runs/d          # DiT, flow matching, class-conditional
genimage train    --data photos --lwd --steps 2000 --out runs/p   # Latent Wavelet Diffusion loss mask
genimage train    --data mnist --layersync --out runs/m           # LayerSync regulariser
genimage train    --data moving-mnist --frames 8 --patch-size 4 --out runs/v   # video DiT on Moving MNIST
genimage sample   --run runs/d --n 64 --out grid.png --nfe 32 --cfg-scale 2
genimage sample   --run runs/v --n 16 --out videos.gif                 # an animated grid of generated videos
genimage evaluate --run runs/d --json m.json
genimage demo     --out report/genimage
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from gencore.command import (
    add_device_argument,
    add_engine_options,
    name_list,
    output_file,
    output_folder,
    package_parser,
    refuse_overwriting_input,
    report_finished,
    resolve_device,
    run,
    seed_int,
)
from gencore.config import config_from_flags
from gencore.errors import ConfigError, StorageError
from gencore.io import write_json
from gencore.solvers import FIXED_STEP_METHODS
from gencore.tables import format_table
from gencore.train.config import SCHEDULES
from genimage import __version__
from genimage.config import BACKBONES, OBJECTIVES, ImageTrainConfig
from genimage.data import DATA_SOURCES
from genimage.models import DIT_SIZES
from genimage.watermark.command import register as register_watermark

DESCRIPTION = "Image, video and audio-spectrogram generation on gencore's flow-matching math."


def _add_train(commands: argparse._SubParsersAction) -> None:
    tr = commands.add_parser("train", help="train a DiT or UNet on images, videos or spectrograms (gencore engine)")
    tr.add_argument("--out", required=True, type=output_folder, help="run folder")
    tr.add_argument("--config", type=Path, help="YAML file of ImageTrainConfig fields; flags override it")
    d = tr.add_argument_group("data")
    d.add_argument("--data", help=f"one of {', '.join(DATA_SOURCES)} (default digits)")
    d.add_argument("--data-path", dest="data_path", help="image folder, tar shards, WAV folder (mel) or video folder")
    d.add_argument("--frames", type=int, help="video data: frames per clip (default 8)")
    d.add_argument("--image-size", dest="image_size", type=int, help="square size (digits 8, others 32 by default)")
    d.add_argument("--channels", type=int, choices=(1, 3), help="folders: grayscale or RGB (default: detect)")
    d.add_argument(
        "--skip-bad", action="store_true", default=None, help="skip and count unreadable images instead of stopping"
    )
    m = tr.add_argument_group("model and objective")
    m.add_argument("--model", help=f"one of {', '.join(BACKBONES)} (default dit)")
    m.add_argument("--dit-size", dest="dit_size", help=f"one of {', '.join(DIT_SIZES)} (default DiT-Mi)")
    m.add_argument("--patch-size", dest="patch_size", type=int, help="DiT patch size (default 2)")
    m.add_argument(
        "--temporal-patch", dest="temporal_patch", type=int, help="video DiT: frames per tubelet (default 1)"
    )
    m.add_argument(
        "--video-attention",
        dest="video_attention",
        help="video DiT: full (space-time, default) | factorised (blocks alternate within frames / across frames)",
    )
    m.add_argument("--objective", help=f"one of {', '.join(OBJECTIVES)} (flow matching by default)")
    m.add_argument("--time-sampler", dest="time_sampler", help="uniform | logit_normal | beta")
    m.add_argument("--unconditional", action="store_true", help="ignore class labels")
    m.add_argument("--label-dropout", dest="label_dropout", type=float, help="null-label probability (CFG; 0.1)")
    o = tr.add_argument_group("optimisation")
    o.add_argument("--steps", type=int, help="optimiser steps (default 2000)")
    o.add_argument("--batch-size", dest="batch_size", type=int, help="global batch (default 128)")
    o.add_argument("--lr", type=float, help="AdamW peak learning rate (default 5e-4)")
    o.add_argument("--warmup-steps", dest="warmup_steps", type=int, help="linear warm-up steps (default 100)")
    o.add_argument(
        "--lr-schedule",
        dest="lr_schedule",
        choices=SCHEDULES,
        help="after warm-up: cosine decay to 0 at --steps (default) or constant",
    )
    o.add_argument(
        "--ema-decay", dest="ema_decay", type=float, help="EMA decay of the weights used for sampling (default 0.999)"
    )
    o.add_argument("--seed", type=seed_int, help="seed of initialisation, batches and noise (default 0)")
    o.add_argument(
        "--init-from",
        dest="init_from",
        help="fine-tune: start from this finished run's EMA weights (and VAE); same architecture, any image size",
    )
    r = tr.add_argument_group("methods")
    r.add_argument("--layersync", action="store_true", default=None, help="LayerSync regulariser (gencore.train)")
    r.add_argument(
        "--layersync-pairs", dest="layersync_pairs", type=name_list, help="weak:strong,... e.g. blocks.1:blocks.3"
    )
    r.add_argument("--layersync-weight", dest="layersync_weight", type=float, help="default 0.2")
    r.add_argument("--lwd", action="store_true", default=None, help="Latent Wavelet Diffusion wavelet loss mask")
    r.add_argument("--lwd-floor", dest="lwd_floor", type=float, help="LWD mask floor l (default 0.1)")
    r.add_argument(
        "--lwd-energy", dest="lwd_energy", choices=("noisy", "clean"), help="LWD energy map of x_t (default) or x_1"
    )
    r.add_argument(
        "--latent", action="store_true", default=None, help="train a KL-VAE first and diffuse in its latent space"
    )
    r.add_argument("--vae-steps", dest="vae_steps", type=int, help="KL-VAE training steps with --latent (default 1500)")
    r.add_argument("--vae-scale-weight", dest="vae_scale_weight", type=float, help="LWD scale consistency (0.5)")
    r.add_argument("--sample-nfe", dest="sample_nfe", type=int, help="NFE of the sample grids (default 32)")
    e = tr.add_argument_group("training engine (gencore.train)")
    e.add_argument("--nproc", type=int, default=1, help="processes (DDP; gloo on CPU)")
    e.add_argument("--resume", help="'auto' or a checkpoint folder")
    e.add_argument("--sample-every", dest="sample_every", type=int, help="steps between sample grids in OUT/samples")
    add_engine_options(e)
    tr.add_argument("--no-progress", action="store_true", help="hide progress bars")
    tr.set_defaults(func=cmd_train)


def train_config(args: argparse.Namespace) -> ImageTrainConfig:
    """The run configuration from ``--config`` and the flags (a flag not given keeps the file's value)."""
    extra: dict[str, bool] = {}
    if args.unconditional:
        extra["class_conditional"] = False
    if args.layersync_pairs:
        extra["layersync"] = True
    return config_from_flags(ImageTrainConfig, args, **extra).validate()


def cmd_train(args: argparse.Namespace) -> int:
    from gencore.train import interruption
    from genimage.training import train

    cfg = train_config(args)
    engine = {
        k: getattr(args, k)
        for k in (
            "resume",
            "checkpoint_every",
            "keep_last",
            "precision",
            "nan_policy",
            "clip_grad_norm",
            "sample_every",
            "parallel",
        )
        if getattr(args, k) is not None
    }
    outcome = train(cfg, args.out, nproc=args.nproc, **engine)
    if outcome.interrupted:
        raise interruption(args.out)
    if outcome.already_finished:
        return report_finished(args.out)
    skipped = outcome.config.get("skipped_files") or []
    if skipped:
        print(f"skipped {len(skipped)} unreadable file(s), e.g. {skipped[0]}")
    print(f"trained {cfg.model} on {cfg.data} for {cfg.steps} steps in {outcome.seconds:.0f} s")
    pictures = "samples.png, samples.gif" if cfg.is_video else "samples.png"
    print(f"wrote {args.out}/: config.json, model/, checkpoints/, metrics.jsonl, samples/, {pictures}, loss.png")
    return 0


def _add_sampling_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="run folder written by genimage train")
    p.add_argument(
        "--nfe", type=int, default=32, help="network evaluations, a multiple of the solver's per step (default 32)"
    )
    p.add_argument("--cfg-scale", dest="cfg_scale", type=float, default=1.0, help="classifier-free guidance (1: none)")
    p.add_argument(
        "--solver", default="euler", choices=FIXED_STEP_METHODS, help="fixed-step ODE solver (default euler)"
    )
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the starting noise (default 0)")
    p.add_argument(
        "--batch-size", dest="batch_size", type=int, default=256, help="images generated at a time (default 256)"
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _check_sampling_flags(args: argparse.Namespace) -> None:
    for flag in ("n", "batch_size"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}.")


def _refuse_earlier_files(folder: str | Path | None, flag: str, *patterns: str) -> None:
    """A second sample into one --individual or --wav folder overwrote the first's files up to its own --n and left
    the rest: a folder of two samples that reads as one (refused before any work, as ``watermark embed`` does)."""
    if folder is None or not Path(folder).is_dir():
        return
    held = sorted(p.name for pattern in patterns for p in Path(folder).glob(pattern))
    if held:
        raise StorageError(
            f"{flag} {str(folder)!r} already holds the files of an earlier sample ({held[0]}); choose a new folder."
        )


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from genimage.data.video import save_video_gif, write_video_grid
    from genimage.imageio import grid_format, save_images, write_grid
    from genimage.runs import load_run
    from genimage.sampling import sample_images

    _check_sampling_flags(args)
    _refuse_earlier_files(args.individual, "--individual", "img-*.png", "video-*.gif")
    _refuse_earlier_files(args.wav, "--wav", "sample-*.wav")
    gif = Path(args.out).suffix.lower() == ".gif"
    if not gif:
        grid_format(args.out)  # a grid file name without a known suffix is refused before sampling
    run_ = load_run(args.run, device=resolve_device(args.device))
    video = len(run_.image_shape) == 4
    if gif and not video:
        raise ConfigError(f"{args.out}: a .gif grid is for video runs; {args.run} generates images (use .png).")
    labels = None
    if run_.num_classes:
        if args.label is not None and not 0 <= args.label < run_.num_classes:
            raise ConfigError(f"--label must be in 0..{run_.num_classes - 1}, got {args.label}.")
        labels = (
            torch.full((args.n,), args.label) if args.label is not None else torch.arange(args.n) % run_.num_classes
        )
    elif args.label is not None:
        raise ConfigError(f"the run in {args.run} is unconditional; drop --label.")
    if args.wav is not None and run_.config.get("data") != "mel":  # before sampling and writing anything
        raise ConfigError("--wav needs a run trained on --data mel.")
    images = sample_images(
        run_,
        args.n,
        labels,
        nfe=args.nfe,
        cfg_scale=args.cfg_scale,
        solver=args.solver,
        seed=args.seed,
        batch_size=args.batch_size,
        progress=not args.no_progress,
    )
    nrow = run_.num_classes if run_.num_classes and args.n >= run_.num_classes else None
    if gif:
        write_video_grid(args.out, images, nrow=nrow)
    elif video:  # one row of frames per video
        n, c, t, h, w = images.shape
        write_grid(args.out, images.transpose(1, 2).reshape(n * t, c, h, w), nrow=t)
    else:
        write_grid(args.out, images, nrow=nrow)
    written = [str(args.out)]
    if args.individual is not None and video:
        for i in range(args.n):
            save_video_gif(Path(args.individual) / f"video-{i:05d}.gif", images[i])
        written.append(f"{args.individual}/ ({args.n} GIF files)")
    elif args.individual is not None:
        save_images(args.individual, images)
        written.append(f"{args.individual}/ ({args.n} PNG files)")
    if args.wav is not None:
        from genimage.data.audio import MelConfig, mel_to_audio, write_wav

        mel = MelConfig()
        for i in range(args.n):
            write_wav(Path(args.wav) / f"sample-{i:05d}.wav", mel_to_audio(images[i], mel), mel.sr)
        written.append(f"{args.wav}/ ({args.n} WAV files, Griffin-Lim)")
    print(f"wrote {', '.join(written)}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from genimage.evaluate import evaluate_run
    from genimage.runs import load_run, run_files

    _check_sampling_flags(args)
    refuse_overwriting_input(args.json, "--json", *run_files(args.run))
    record = evaluate_run(
        load_run(args.run),
        n=args.n,
        nfe=args.nfe,
        cfg_scale=args.cfg_scale,
        solver=args.solver,
        seed=args.seed,
        input_px=args.input_px,
        bpd_images=args.bpd_images,
        batch_size=args.batch_size,
        progress=not args.no_progress,
    )
    keys = [
        k
        for k in (
            "fd_efflite0",
            "kid_efflite0",
            "fd_classifier",
            "precision_knn",
            "recall_knn",
            "bits_per_dim",
            "hf_spectral_error",
        )
        if record.get(k) is not None
    ]
    print(format_table([record], keys))
    if args.json is not None:
        write_json(args.json, record)
        print(f"wrote {args.json}")
    return 0


def cmd_shards(args: argparse.Namespace) -> int:
    from genimage.data.shards import shard_image_folder

    paths, count, skipped = shard_image_folder(
        args.folder, args.out, shard_size=args.shard_size, skip_bad=args.skip_bad, progress=not args.no_progress
    )
    note = f"; skipped {len(skipped)} unreadable: {', '.join(skipped[:3])}" + (" ..." if len(skipped) > 3 else "")
    print(f"wrote {count} images into {len(paths)} shards in {args.out}{note if skipped else ''}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from genimage.demo import run_demo

    run_demo(args.out, steps=args.steps, progress=not args.no_progress)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser, commands = package_parser("genimage", __version__, DESCRIPTION)
    _add_train(commands)
    sp = commands.add_parser("sample", help="sample a trained run into a picture grid or GIF (and files / WAVs)")
    _add_sampling_flags(sp)
    sp.add_argument("--n", type=int, default=64, help="number of images (default 64)")
    sp.add_argument(
        "--out",
        required=True,
        type=output_file,
        help="picture grid to write (.png, .jpg or .webp; a video run: frame rows, or an animated .gif)",
    )
    sp.add_argument("--label", type=int, help="one class for every image (default: cycle through the classes)")
    sp.add_argument(
        "--individual", type=output_folder, help="also write one PNG per image (GIF per video) into this folder"
    )
    sp.add_argument("--wav", type=output_folder, help="mel runs: also write Griffin-Lim audio into this folder")
    add_device_argument(sp)
    sp.set_defaults(func=cmd_sample)
    ev = commands.add_parser(
        "evaluate", help="FD-EffLite0, KID, classifier FD, precision/recall, bits/dim, spectra (videos: + motion)"
    )
    _add_sampling_flags(ev)
    ev.add_argument("--n", type=int, default=500, help="generated and reference images or clips (default 500)")
    ev.add_argument("--input-px", dest="input_px", type=int, default=224, help="EfficientNet-Lite0 input size")
    ev.add_argument("--bpd-images", dest="bpd_images", type=int, default=32, help="images for bits/dim (0: skip)")
    ev.add_argument("--json", type=output_file, help="write the metrics here")
    ev.set_defaults(func=cmd_evaluate)
    sh = commands.add_parser(
        "shards", help="pack an image folder into WebDataset-style tar shards for --data shards (streamed)"
    )
    sh.add_argument("folder", help="image folder: images directly in it, or in one sub-folder per class")
    sh.add_argument("--out", required=True, type=output_folder, help="new folder for shard-XXXXX.tar and classes.json")
    sh.add_argument("--shard-size", dest="shard_size", type=int, default=1000, help="images per shard (default 1000)")
    sh.add_argument("--skip-bad", action="store_true", help="skip and name unreadable images instead of stopping")
    sh.add_argument("--no-progress", action="store_true", help="hide progress bars")
    sh.set_defaults(func=cmd_shards)
    demo = commands.add_parser("demo", help="train a tiny DiT on digits, sample, evaluate, write a report")
    demo.add_argument("--out", type=output_folder, default="report/genimage", help="report folder")
    demo.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    demo.add_argument("--no-progress", action="store_true", help="hide progress bars")
    demo.set_defaults(func=cmd_demo)
    register_watermark(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
