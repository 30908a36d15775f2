"""Audio as images: WAV folders, log-mel spectrograms, Griffin-Lim inversion, offline demo audio.

A clip becomes a log-mel spectrogram (librosa: STFT with ``n_fft`` and ``hop``, ``n_mels`` mel bands,
power to dB relative to the clip's maximum, clipped to ``[-top_db, 0]``; a silent clip is all ``-top_db``)
scaled to ``[-1, 1]`` as ``x = 2 (dB + top_db) / top_db - 1``, cut or padded (silence = -1) to ``frames``
columns: an image ``[1, n_mels, frames]`` that trains through the same models as pictures. :func:`mel_to_audio` inverts
it (dB -> mel power -> linear spectrogram by NNLS -> Griffin-Lim, Griffin & Lim 1984) so generated
spectrograms can be listened to; the loudness is relative (the dB reference is lost).

Demo audio without network: :func:`synth_clips` makes seeded tones, rising and falling chirps and
two-tone chords (4 classes); :func:`espeak_clips` speaks the words "zero" .. "nine" with espeak-ng
when it is installed (Debian ``espeak-ng``), at several speeds and pitches.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError
from genimage.data.imageset import ImageSet, resize_images

SYNTH_CLASSES = ["tone", "chirp-up", "chirp-down", "chord"]
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@dataclass(frozen=True, kw_only=True)
class MelConfig:
    """Spectrogram settings (defaults: 16 kHz, 32 mel bands, hop 256, 32 frames ~ 0.5 s)."""

    sr: int = 16000
    n_fft: int = 1024
    hop: int = 256
    n_mels: int = 32
    frames: int = 32
    top_db: float = 80.0

    def __post_init__(self) -> None:
        for name in ("sr", "n_fft", "hop", "n_mels"):
            check_int(getattr(self, name), f"MelConfig.{name}", low=1)
        check_int(self.frames, "MelConfig.frames", low=2)  # one frame would be a clip of no samples
        if self.hop > self.n_fft:  # the windows would skip samples: Griffin-Lim returns silence between them
            raise ConfigError(f"MelConfig.hop must be at most n_fft = {self.n_fft}, got {self.hop}.")
        if isinstance(self.top_db, bool) or not isinstance(self.top_db, int | float) or not 0 < self.top_db < math.inf:
            raise ConfigError(f"MelConfig.top_db must be a positive number of decibels, got {self.top_db!r}.")

    @property
    def clip_samples(self) -> int:
        return self.hop * (self.frames - 1)


RESAMPLE_MARGIN_S = 0.1  # source audio read past the end of a clip, so that the resampler's filter sees it


def read_wav(path: str | os.PathLike, sr: int, max_samples: int | None = None) -> np.ndarray:
    """Mono float32 waveform of a WAV/FLAC/OGG file resampled to ``sr`` (soundfile + librosa).

    ``max_samples``: only the first ``max_samples`` output samples are wanted, so only the source frames they
    need (plus ``RESAMPLE_MARGIN_S`` for the resampler) are read: an hour-long recording is not loaded whole
    for a two-second clip. The result may be longer than ``max_samples``; crop it.
    """
    import soundfile as sf

    try:
        frames = -1
        if max_samples is not None:
            rate = sf.info(str(path)).samplerate
            frames = math.ceil(max_samples * rate / sr) + (0 if rate == sr else math.ceil(RESAMPLE_MARGIN_S * rate))
        data, rate = sf.read(str(path), frames=frames, dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError, OSError) as exc:
        raise InputError(f"{path}: not a readable audio file ({exc}).") from exc
    if not len(data):  # would become a clip of digital silence, indistinguishable from a silent recording
        raise InputError(f"{path}: holds no audio samples.")
    if not np.isfinite(data).all():
        raise InputError(f"{path}: the audio samples contain NaN or inf values.")
    wave = data.mean(axis=1)
    if rate != sr:
        import librosa

        wave = librosa.resample(wave, orig_sr=rate, target_sr=sr)
    return wave.astype(np.float32)


def write_wav(path: str | os.PathLike, wave: np.ndarray, sr: int) -> Path:
    """Write a mono float waveform as 16-bit PCM WAV, atomically."""
    import soundfile as sf

    from gencore.io import atomic_path

    if np.isnan(wave).any():  # np.clip keeps NaN, which PCM_16 stores as a full-scale -32768 click
        raise InputError(f"{path}: the waveform to write contains NaN values.")
    with atomic_path(path) as tmp:
        sf.write(str(tmp), np.clip(wave, -1, 1), sr, subtype="PCM_16", format="WAV")
    return Path(path)


def audio_to_mel(wave: np.ndarray, cfg: MelConfig) -> torch.Tensor:
    """Waveform -> scaled log-mel image ``[1, n_mels, frames]`` in ``[-1, 1]`` (module docstring)."""
    import librosa

    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim != 1 or not np.isfinite(wave).all():
        raise InputError(f"audio_to_mel needs one finite mono waveform [samples], got shape {wave.shape}.")
    mel = librosa.feature.melspectrogram(y=wave, sr=cfg.sr, n_fft=cfg.n_fft, hop_length=cfg.hop, n_mels=cfg.n_mels)
    if not mel.max() > 1e-10:  # digital silence (power_to_db's floor): no maximum to be relative to
        db = np.full_like(mel, -cfg.top_db)
    else:  # the floor amin is relative too (librosa's absolute 1e-10 would lift every bin of a quiet clip)
        db = librosa.power_to_db(mel, ref=np.max, amin=float(mel.max()) * 10 ** (-cfg.top_db / 10), top_db=cfg.top_db)
    x = torch.from_numpy(np.clip(2 * (db + cfg.top_db) / cfg.top_db - 1, -1, 1)).float()
    if x.shape[1] < cfg.frames:
        x = torch.nn.functional.pad(x, (0, cfg.frames - x.shape[1]), value=-1.0)
    return x[None, :, : cfg.frames]


def mel_to_audio(x: torch.Tensor, cfg: MelConfig, n_iter: int = 64) -> np.ndarray:
    """Scaled log-mel image ``[1, n_mels, frames]`` (or ``[n_mels, frames]``) -> waveform by Griffin-Lim.

    An image of another size ``[1, H, W]`` (a run trained with ``image_size`` != ``n_mels``, as
    :func:`load_mel_set` resizes) is first resized back to ``n_mels x frames``.
    """
    import librosa
    import scipy.optimize

    if not torch.is_tensor(x) or x.dim() not in (2, 3) or (x.dim() == 3 and x.shape[0] != 1) or 0 in x.shape:
        got = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
        raise InputError(
            f"mel_to_audio needs one spectrogram image [1, n_mels, frames] or [n_mels, frames], got {got}."
        )
    if bool(torch.isnan(x).any()):  # clip(-1, 1) keeps NaN; an infinite value is clipped like any other
        raise InputError("mel_to_audio needs a spectrogram image without NaN values.")
    a = x.detach().cpu().float().reshape(1, 1, *x.shape[-2:])
    if a.shape[-2:] != (cfg.n_mels, cfg.frames):  # as resize_images, to a rectangle
        a = torch.nn.functional.interpolate(
            a, size=(cfg.n_mels, cfg.frames), mode="bilinear", antialias=True, align_corners=False
        )
    a = a[0, 0].numpy()
    db = (a.clip(-1, 1).astype(np.float64) + 1) / 2 * cfg.top_db - cfg.top_db
    power = librosa.db_to_power(db)  # the loudest bin is 1
    # mel power -> linear-frequency power by exact non-negative least squares per frame; librosa's mel_to_stft
    # stops its L-BFGS-B on an absolute gradient tolerance, far from the solution at this scale (17 % residual on
    # a pure tone), which cost the round trip 5-8 dB against 2-4 dB here
    basis = librosa.filters.mel(sr=cfg.sr, n_fft=cfg.n_fft, n_mels=cfg.n_mels).astype(np.float64)
    stft_power = np.stack([scipy.optimize.nnls(basis, frame)[0] for frame in power.T], axis=1)
    return librosa.griffinlim(
        np.sqrt(stft_power), n_iter=n_iter, hop_length=cfg.hop, n_fft=cfg.n_fft, length=cfg.clip_samples, random_state=0
    ).astype(np.float32)


def synth_clips(n: int, cfg: MelConfig, seed: int = 0) -> tuple[list[np.ndarray], list[int]]:
    """``n`` seeded clips of the 4 synthetic classes (tones, up/down chirps, chords), with labels.

    Base frequencies are uniform in 200 .. 1800 Hz, the top capped at ``0.15 sr`` so that a chirp's end (up to
    3x its start) stays below Nyquist.
    """
    rng = np.random.default_rng(seed)
    # the highest frequency is 3 f0 (a rising chirp): keep it below 0.9 of Nyquist, or it folds back down (aliasing)
    f_max = min(1800.0, 0.15 * cfg.sr)
    if f_max <= 200:
        raise ConfigError(f"synthetic clips need MelConfig.sr above 1333 Hz, got {cfg.sr}.")
    t = np.arange(cfg.clip_samples) / cfg.sr
    dur = t[-1]
    clips, labels = [], []
    for i in range(n):
        k = i % len(SYNTH_CLASSES)
        f0 = rng.uniform(200, f_max)
        if k == 0:
            phase = 2 * np.pi * f0 * t
        elif k in (1, 2):
            f1 = f0 * rng.uniform(1.8, 3.0) if k == 1 else f0 / rng.uniform(1.8, 3.0)
            phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * dur))
        else:
            phase = None
        if phase is None:
            ratio = rng.choice([1.25, 1.5, 2.0])
            wave = 0.5 * (np.sin(2 * np.pi * f0 * t) + np.sin(2 * np.pi * f0 * ratio * t))
        else:
            wave = np.sin(phase)
        env = np.minimum(1.0, np.minimum(t, dur - t) / 0.02)  # 20 ms fades
        clips.append((0.5 * env * wave + 0.003 * rng.standard_normal(t.shape)).astype(np.float32))
        labels.append(k)
    return clips, labels


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def espeak_clips(cfg: MelConfig, voices: int = 8) -> tuple[list[np.ndarray], list[int]]:
    """Spoken digits "zero".."nine" from espeak-ng at ``voices`` speed/pitch settings each."""
    if not espeak_available():
        raise ConfigError("espeak-ng is not installed (Debian package espeak-ng); use synthetic clips instead.")
    clips, labels = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for v in range(voices):
            speed, pitch = 120 + 20 * (v % 4), 30 + 10 * (v // 4)
            for k, word in enumerate(WORDS):
                path = Path(tmp) / f"{k}-{v}.wav"
                subprocess.run(
                    ["espeak-ng", "-s", str(speed), "-p", str(pitch), "-w", str(path), word], check=True, timeout=30
                )
                wave = read_wav(path, cfg.sr, cfg.clip_samples)[: cfg.clip_samples]
                clips.append(np.pad(wave, (0, cfg.clip_samples - len(wave))))
                labels.append(k)
    return clips, labels


def load_wav_folder(
    root: str | os.PathLike, cfg: MelConfig, *, skip_bad: bool = False
) -> tuple[list[np.ndarray], list[int] | None, list[str], list[str]]:
    """Clips (first ``clip_samples`` of every file) from ``root/<class>/*.wav`` or ``root/*.wav``.

    Suffixes ``.wav``, ``.flac`` and ``.ogg`` in any case; the layout rules are the image folders'
    (:func:`~genimage.data.folder.list_labelled_files`: hidden files and folders are ignored, a sub-folder
    without audio files is not a class).

    Returns ``(clips, labels or None, class names, skipped files)``: an unreadable file raises
    :class:`InputError` naming it, or with ``skip_bad=True`` is skipped and listed.
    """
    from genimage.data.folder import decode_files, list_labelled_files

    files, labels, classes = list_labelled_files(root, (".wav", ".flac", ".ogg"), "audio files")

    def clip(path: Path) -> np.ndarray:
        wave = read_wav(path, cfg.sr, cfg.clip_samples)[: cfg.clip_samples]
        return np.pad(wave, (0, cfg.clip_samples - len(wave)))

    clips, kept, skipped = decode_files(files, clip, skip_bad, root, "audio file")
    return clips, (None if labels is None else [labels[i] for i in kept]), classes or [], skipped


def load_mel_set(
    path: str | os.PathLike | None = None,
    *,
    cfg: MelConfig | None = None,
    n: int = 1024,
    image_size: int | None = None,
    skip_bad: bool = False,
) -> ImageSet:
    """Log-mel images of a WAV folder (``path``), or of espeak-ng speech / synthetic clips (``path=None``).

    ``skip_bad``: unreadable audio files are skipped and listed in ``ImageSet.skipped`` instead of raising.
    """
    cfg = cfg or MelConfig()
    skipped: list[str] = []
    if path is not None:
        clips, labels, names, skipped = load_wav_folder(path, cfg, skip_bad=skip_bad)
        name = Path(path).name
    elif espeak_available():
        clips, labels = espeak_clips(cfg)
        names, name = WORDS, "espeak-digits"
    else:
        clips, labels = synth_clips(n, cfg)
        names, name = SYNTH_CLASSES, "synth-audio"
    x = torch.stack([audio_to_mel(c, cfg) for c in clips])
    if image_size is not None:
        x = resize_images(x, image_size)
    y = None if labels is None else torch.tensor(labels, dtype=torch.long)
    return ImageSet(x, y, names if labels is not None else None, name=name, skipped=skipped)
