"""Audio as images: the log-mel scaling, the Griffin-Lim round trip, WAV folders, synthetic clips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gencore.errors import InputError
from genimage.data.audio import MelConfig, audio_to_mel, load_mel_set, mel_to_audio, read_wav, synth_clips, write_wav


def test_mel_image_scaling() -> None:
    cfg = MelConfig()
    t = np.arange(cfg.clip_samples) / cfg.sr
    x = audio_to_mel(0.5 * np.sin(2 * np.pi * 1000 * t), cfg)
    assert x.shape == (1, cfg.n_mels, cfg.frames)
    assert float(x.max()) == pytest.approx(1.0)  # the loudest bin is 0 dB -> +1
    assert float(x.min()) >= -1.0
    # the energy of a 1 kHz tone sits in one band region: the brightest band is the one containing 1 kHz
    import librosa

    freqs = librosa.mel_frequencies(n_mels=cfg.n_mels + 2, fmax=cfg.sr / 2)[1:-1]
    band = int(x[0].mean(dim=1).argmax())
    assert abs(freqs[band] - 1000) < 0.25 * 1000


def _round_trip_db(cfg: MelConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    clips, _ = synth_clips(4, cfg, seed=3)
    mels = torch.stack([audio_to_mel(c, cfg) for c in clips])
    again = torch.stack([audio_to_mel(mel_to_audio(m, cfg, n_iter=100), cfg) for m in mels])
    return mels, (again - mels).abs() * cfg.top_db / 2, (mels.roll(1, 0) - mels).abs() * cfg.top_db / 2


def test_mel_round_trip_keeps_spectral_error_small() -> None:
    # 128 bands: audio -> mel -> Griffin-Lim -> mel is within a few dB everywhere, far below the
    # difference between two different clips (so the bound is not vacuous)
    _, err, other = _round_trip_db(MelConfig(n_mels=128))
    assert float(err.mean()) < 5.0 and float(err.mean()) < 0.5 * float(other.mean())
    # the 32-band images the models train on: within 6 dB wherever the clip is within 40 dB of its peak
    mels, err32, _ = _round_trip_db(MelConfig())
    assert float(err32[mels > 0].mean()) < 6.0


def test_wav_folder(tmp_path) -> None:
    import librosa

    cfg = MelConfig()
    clips, labels = synth_clips(4, cfg)
    for i, (c, k) in enumerate(zip(clips, labels, strict=True)):
        (tmp_path / f"class{k}").mkdir(exist_ok=True)
        rate = 8000 if i % 2 else cfg.sr  # odd clips stored at 8 kHz, resampled on reading
        wave = c if rate == cfg.sr else librosa.resample(c, orig_sr=cfg.sr, target_sr=rate)
        write_wav(tmp_path / f"class{k}" / f"{i}.wav", wave, rate)
    wave = read_wav(tmp_path / "class1" / "1.wav", cfg.sr)
    assert abs(len(wave) - cfg.clip_samples) <= 2
    data = load_mel_set(tmp_path, cfg=cfg)
    assert data.shape == (1, 32, 32) and data.labels.tolist() == [0, 1, 2, 3] and data.num_classes == 4
    bad = tmp_path / "class2" / "bad.wav"
    bad.write_bytes(b"RIFFjunk")
    with pytest.raises(InputError, match=r"bad\.wav: not a readable audio file"):
        load_mel_set(tmp_path, cfg=cfg)
    data = load_mel_set(tmp_path, cfg=cfg, skip_bad=True)
    assert data.labels.tolist() == [0, 1, 2, 3] and data.skipped == [str(bad)]


def test_synthetic_set_is_seeded() -> None:
    a = load_mel_set(n=8)
    b = load_mel_set(n=8)
    assert torch.equal(a.images, b.images) and a.num_classes in (4, 10)


def test_silence_is_the_quietest_image_not_the_loudest() -> None:
    cfg = MelConfig()
    x = audio_to_mel(np.zeros(cfg.clip_samples, dtype=np.float32), cfg)
    assert x.shape == (1, cfg.n_mels, cfg.frames) and bool((x == -1).all())  # -top_db everywhere, as padding
    t = np.arange(cfg.clip_samples) / cfg.sr
    quiet = audio_to_mel(1e-3 * np.sin(2 * np.pi * 500 * t), cfg)  # quiet but not silent: relative to its maximum
    assert float(quiet.max()) == pytest.approx(1.0)


def test_wav_folder_suffix_case_hidden_files_and_empty_class_folders(tmp_path) -> None:
    cfg = MelConfig()
    clips, _ = synth_clips(2, cfg)
    for name, clip in zip(("LOUD", "soft"), clips, strict=True):
        (tmp_path / name).mkdir()
        write_wav(tmp_path / name / "CLIP.WAV", clip, cfg.sr)  # upper-case suffix, as some recorders write
        (tmp_path / name / "._CLIP.WAV").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (tmp_path / "aa-empty").mkdir()
    (tmp_path / ".Trash").mkdir()
    data = load_mel_set(tmp_path, cfg=cfg)
    assert data.class_names == ["LOUD", "soft"] and data.labels.tolist() == [0, 1]
