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


@pytest.mark.parametrize("rate", [16000, 44100, 22050])
def test_reading_a_clip_reads_only_the_frames_it_needs_and_matches_the_whole_file(tmp_path, rate, monkeypatch) -> None:
    """A clip of a long recording equals the head of the whole file read and resampled (bit for bit: the margin
    past the clip covers the resampler's filter), and only about the clip's share of the file is read (the
    whole file was decoded and resampled for every clip)."""
    import soundfile as sf

    sr, clip = 16000, 2 * 16000
    t = np.arange(30 * rate) / rate
    stereo = np.stack([0.5 * np.sin(2 * np.pi * (200 + 300 * t) * t), 0.3 * np.sin(2 * np.pi * 440 * t)], 1)
    sf.write(tmp_path / "long.wav", stereo.astype(np.float32), rate)
    whole = read_wav(tmp_path / "long.wav", sr)[:clip]
    asked = []
    real_read = sf.read
    monkeypatch.setattr(sf, "read", lambda *a, **k: asked.append(k["frames"]) or real_read(*a, **k))
    head = read_wav(tmp_path / "long.wav", sr, clip)
    np.testing.assert_array_equal(head[:clip], whole)
    assert 0 < asked[0] <= 2.2 * rate  # 2 s of the 30 s file, plus the resampling margin


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


def _slaney_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default): linear 3 per 200 Hz below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    return np.where(f < 1000, 3 * f / 200, 15 + 27 * np.log(np.maximum(f, 1e-9) / 1000) / np.log(6.4))


def _direct_log_mel(wave: np.ndarray, cfg: MelConfig) -> np.ndarray:
    """The module docstring's recipe from the formulas: centred STFT (zero padding n_fft/2, periodic Hann window),
    power, triangular Slaney-normalised mel filters, dB relative to the maximum clipped at -top_db, scaled."""
    x = np.pad(np.asarray(wave, np.float64), cfg.n_fft // 2)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(cfg.n_fft) / cfg.n_fft)
    starts = range(0, len(x) - cfg.n_fft + 1, cfg.hop)
    power = np.abs(np.fft.rfft(np.stack([x[s : s + cfg.n_fft] * window for s in starts], 1), axis=0)) ** 2
    mels = np.linspace(0, _slaney_mel(cfg.sr / 2), cfg.n_mels + 2)
    hz = np.array(
        [
            np.interp(m, _slaney_mel(np.linspace(0, cfg.sr / 2, 200001)), np.linspace(0, cfg.sr / 2, 200001))
            for m in mels
        ]
    )
    fft_hz = np.arange(cfg.n_fft // 2 + 1) * cfg.sr / cfg.n_fft
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    tri = np.maximum(0, np.minimum((fft_hz - lo) / (mid - lo), (hi - fft_hz) / (hi - mid)))
    mel = (tri * 2 / (hi - lo)) @ power
    db = np.maximum(10 * np.log10(np.maximum(mel, 1e-300) / mel.max()), -cfg.top_db)
    return 2 * (db + cfg.top_db) / cfg.top_db - 1


def test_log_mel_matches_the_formulas_frame_for_frame() -> None:
    cfg = MelConfig()
    clip = synth_clips(2, cfg, seed=5)[0][1]  # a chirp: every frame differs
    want = _direct_log_mel(clip, cfg)
    assert want.shape == (cfg.n_mels, cfg.frames)  # clip_samples fills exactly `frames` columns, none dropped
    np.testing.assert_allclose(audio_to_mel(clip, cfg)[0].numpy(), want, atol=2e-4)
    short = clip[: cfg.hop * 20]  # 21 frames, then silence padding (-1) up to `frames`
    got = audio_to_mel(short, cfg)[0].numpy()
    np.testing.assert_allclose(got[:, :21], _direct_log_mel(short, cfg), atol=2e-4)
    assert (got[:, 21:] == -1).all()


def test_log_mel_is_relative_to_the_clips_maximum_at_any_level() -> None:
    # dB relative to the clip's maximum: a quiet recording (peak -66 or -86 dBFS) gives the same image. librosa's
    # absolute power floor 1e-10 used to lift its quiet bins (up to 27 dB at a peak of 5e-5)
    cfg = MelConfig()
    clip = synth_clips(2, cfg, seed=1)[0][1]
    loud = audio_to_mel(clip, cfg)
    for gain in (1e-3, 1e-4):
        assert float((audio_to_mel(gain * clip, cfg) - loud).abs().max()) * cfg.top_db / 2 < 0.01  # dB


def test_read_wav_decodes_pcm_widths_floats_and_averages_stereo(tmp_path) -> None:
    import wave

    from scipy.io import wavfile

    sr = 16000
    rng = np.random.default_rng(0)
    q16 = rng.integers(-32768, 32768, (400, 2)).astype("<i2")
    q24 = rng.integers(-(2**23), 2**23, 400)
    q8 = rng.integers(0, 256, 400).astype(np.uint8)  # 8-bit WAV is unsigned, 128 = 0
    for name, width, frames, channels in (
        ("s16.wav", 2, q16.tobytes(), 2),
        ("s24.wav", 3, q24.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes(), 1),
        ("u8.wav", 1, q8.tobytes(), 1),
    ):
        with wave.open(str(tmp_path / name), "wb") as f:
            f.setnchannels(channels)
            f.setsampwidth(width)
            f.setframerate(sr)
            f.writeframes(frames)
    np.testing.assert_array_equal(read_wav(tmp_path / "s16.wav", sr), q16.astype(np.float32).mean(1) / 32768)
    np.testing.assert_array_equal(read_wav(tmp_path / "s24.wav", sr), q24.astype(np.float32) / 2**23)
    np.testing.assert_array_equal(read_wav(tmp_path / "u8.wav", sr), (q8.astype(np.float32) - 128) / 128)
    stereo = rng.uniform(-1, 1, (400, 2)).astype(np.float32)
    wavfile.write(tmp_path / "f32.wav", sr, stereo)
    np.testing.assert_allclose(read_wav(tmp_path / "f32.wav", sr), stereo.mean(1), atol=1e-7)
    stereo[5, 1] = np.nan
    wavfile.write(tmp_path / "nan.wav", sr, stereo)
    with pytest.raises(InputError, match=r"nan\.wav: the audio samples contain NaN"):
        read_wav(tmp_path / "nan.wav", sr)


def test_mel_inversion_is_as_good_as_librosas_on_the_true_mel_power() -> None:
    # before: librosa's mel -> linear step (L-BFGS-B with an absolute tolerance) stopped far from its solution on
    # power scaled to a loudest bin of 1; a tone's round trip was 15.9 dB off against 11.4 dB for librosa given the
    # clip's true mel power, a chirp's 17.2 against 9.0
    import librosa

    cfg = MelConfig()
    t = np.arange(cfg.clip_samples) / cfg.sr
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    chirp = 0.5 * np.sin(2 * np.pi * (300 * t + 600 * t**2 / (2 * t[-1])))

    def error_db(x: torch.Tensor, wave: np.ndarray) -> float:
        again = audio_to_mel(wave.astype(np.float32), cfg)
        return float((again - x).abs()[x > -1].mean()) * cfg.top_db / 2

    for wave in (tone.astype(np.float32), chirp.astype(np.float32)):
        x = audio_to_mel(wave, cfg)
        true_power = librosa.feature.melspectrogram(
            y=wave, sr=cfg.sr, n_fft=cfg.n_fft, hop_length=cfg.hop, n_mels=cfg.n_mels
        )
        reference = librosa.feature.inverse.mel_to_audio(
            true_power, sr=cfg.sr, n_fft=cfg.n_fft, hop_length=cfg.hop, n_iter=64, length=cfg.clip_samples
        )
        assert error_db(x, mel_to_audio(x, cfg)) < error_db(x, reference) + 1.0


def test_mel_to_audio_inverts_the_scaling_and_the_resizing(monkeypatch) -> None:
    import librosa

    from genimage.data.imageset import resize_images

    cfg = MelConfig()
    x = audio_to_mel(synth_clips(1, cfg, seed=2)[0][0], cfg)
    wave = mel_to_audio(resize_images(x[None], 64)[0], cfg, n_iter=4)  # a run trained at --image-size 64
    assert wave.shape == (cfg.clip_samples,) and np.isfinite(wave).all()
    import scipy.optimize

    frames = []  # the mel power handed to the mel -> linear step, one frame per call
    monkeypatch.setattr(scipy.optimize, "nnls", lambda basis, b: frames.append(b) or (np.zeros(basis.shape[1]), 0.0))
    monkeypatch.setattr(librosa, "griffinlim", lambda magnitude, **kw: np.zeros(kw["length"]))
    mel_to_audio(x, cfg)
    seen = [np.stack(frames, axis=1)]
    db = (x[0].double().numpy() + 1) / 2 * cfg.top_db - cfg.top_db  # the inverse of x = 2 (dB + top_db) / top_db - 1
    np.testing.assert_allclose(seen[0], 10 ** (db / 10), rtol=1e-5)
    frames.clear()
    mel_to_audio(resize_images(x[None], 64)[0], cfg)
    seen.append(np.stack(frames, axis=1))
    assert seen[1].shape == (cfg.n_mels, cfg.frames)
    assert np.abs(10 * np.log10(seen[1]) - db).mean() < 3.0  # the 64 x 64 image resized back (not reshaped)
    with pytest.raises(InputError, match=r"one spectrogram image"):
        mel_to_audio(torch.zeros(2, 1, cfg.n_mels, cfg.frames), cfg)


def test_write_wav_round_trips_at_16_bit_and_clips_out_of_range_samples(tmp_path) -> None:
    wave = np.random.default_rng(1).uniform(-1.3, 1.3, 2000).astype(np.float32)
    back = read_wav(write_wav(tmp_path / "w.wav", wave, 8000), 8000)
    assert back.shape == wave.shape
    np.testing.assert_allclose(back, np.clip(wave, -1, 1), atol=1 / 32767)  # saturates, never wraps around


def test_a_hop_longer_than_the_window_is_refused() -> None:
    # hop 2048 > n_fft 1024 used to be accepted: the STFT skipped half the samples and Griffin-Lim returned
    # exact silence for 50% of the clip
    from gencore.errors import ConfigError

    with pytest.raises(ConfigError, match=r"MelConfig\.hop must be at most n_fft = 1024, got 2048"):
        MelConfig(hop=2048)
    cfg = MelConfig(hop=1024)  # hop == n_fft still covers every sample
    wave = mel_to_audio(audio_to_mel(synth_clips(1, cfg)[0][0], cfg), cfg, n_iter=4)
    assert float(np.mean(np.abs(wave) < 1e-7)) < 0.01


def test_nan_waveforms_and_spectrograms_are_one_sentence(tmp_path) -> None:
    cfg = MelConfig()
    wave = synth_clips(1, cfg)[0][0]
    wave[100] = np.nan  # np.clip keeps NaN: it used to be written as a full-scale -32768 sample
    with pytest.raises(InputError, match=r"w\.wav: the waveform to write contains NaN"):
        write_wav(tmp_path / "w.wav", wave, cfg.sr)
    assert not (tmp_path / "w.wav").exists()
    with pytest.raises(InputError, match=r"audio_to_mel needs one finite mono waveform"):
        audio_to_mel(wave, cfg)
    with pytest.raises(InputError, match=r"audio_to_mel needs one finite mono waveform \[samples\], got shape \(2, "):
        audio_to_mel(np.stack([wave, wave]), cfg)  # stereo: librosa would return a [2, n_mels, frames] stack
    x = audio_to_mel(synth_clips(1, cfg)[0][0], cfg)
    x[0, 3, 4] = float("nan")  # a diverged sample: librosa raised its own ParameterError from deep inside
    with pytest.raises(InputError, match=r"mel_to_audio needs a spectrogram image without NaN"):
        mel_to_audio(x, cfg)


@pytest.mark.parametrize("sr", [8000, 16000])
def test_synthetic_chirps_stay_below_nyquist_and_move_one_way(sr) -> None:
    # at 8 kHz a rising chirp up to 3 x 1800 Hz = 5.4 kHz passed Nyquist (4 kHz) and folded back down
    from scipy.signal import stft

    cfg = MelConfig(sr=sr)
    clips, labels = synth_clips(200, cfg, seed=0)
    for clip, k in zip(clips, labels, strict=True):
        if k not in (1, 2):
            continue
        freqs, _, z = stft(clip, fs=sr, nperseg=512, noverlap=384)
        peak = freqs[np.abs(z).argmax(axis=0)][3:-3]  # skip the fades and the padded edges
        step = np.diff(peak) * (1 if k == 1 else -1)
        assert (step >= -2 * (freqs[1] - freqs[0])).all(), (k, peak)
        assert peak.max() < 0.95 * sr / 2
