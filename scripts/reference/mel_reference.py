#!/usr/bin/env python3
# The reference for engines/media/mel.ts, written to test/fixtures/logmel-reference.json: the
# slaney mel filterbank (re-derived in numpy, checked against librosa.filters.mel when librosa is
# installed) and Whisper's log-mel (whisper/audio.py log_mel_spectrogram, with numpy in place of
# torch.stft) of a fixed test signal that test/media-processors.test.ts builds identically.
# Run: .venv-reference/bin/python scripts/reference/mel_reference.py  (needs numpy; librosa optional)
import json
import os
import sys

import numpy as np

SR, N_FFT, HOP, N_MELS = 16000, 400, 160, 80
SECONDS = 0.5


def test_signal():
    # 0.5 sin(2pi 440 t) + 0.25 sin(2pi 3000 t) + 0.2 sin(2pi (200 t + (6000-200)/(2*0.5) t^2))
    t = np.arange(int(SR * SECONDS), dtype=np.float64) / SR
    chirp = np.sin(2 * np.pi * (200 * t + (6000 - 200) / (2 * SECONDS) * t * t))
    return 0.5 * np.sin(2 * np.pi * 440 * t) + 0.25 * np.sin(2 * np.pi * 3000 * t) + 0.2 * chirp


def hz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, f / f_sp)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filterbank(sr=SR, n_fft=N_FFT, n_mels=N_MELS, fmin=0.0, fmax=None):
    # librosa.filters.mel(htk=False, norm='slaney'), in float64
    fmax = sr / 2 if fmax is None else fmax
    fftfreqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    return weights * (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]


def stft_power(audio):
    # whisper/audio.py: torch.stft(center=True, pad_mode='reflect', hann_window periodic), [..., :-1]
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    n_frames = 1 + (len(padded) - N_FFT) // HOP
    frames = np.stack([padded[i * HOP : i * HOP + N_FFT] * window for i in range(n_frames)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # [frames, 201]
    return power[:-1]


def log_mel(audio, filters):
    power = stft_power(audio)
    mel = filters @ power.T  # [n_mels, frames]
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).T  # [frames, n_mels], frame-major like mel.ts


def sig(x, digits=6):
    return float(f"{x:.{digits}g}")


def main():
    filters = mel_filterbank()
    librosa_diff = None
    try:
        import librosa

        lib = librosa.filters.mel(sr=SR, n_fft=N_FFT, n_mels=N_MELS)  # float32, as in Whisper's mel_filters.npz
        librosa_diff = float(np.max(np.abs(lib.astype(np.float64) - filters)))
        print(f"librosa {librosa.__version__}: max |librosa - numpy| filterbank = {librosa_diff:.3e}")
        assert librosa_diff < 1e-7, "the numpy slaney filterbank disagrees with librosa"
        spec = librosa.stft(test_signal(), n_fft=N_FFT, hop_length=HOP, window="hann", center=True, pad_mode="reflect")
        stft_diff = float(np.max(np.abs(np.abs(spec[:, :-1]) ** 2 - stft_power(test_signal()).T)))
        print(f"max |librosa.stft power - numpy power| = {stft_diff:.3e}")
        assert stft_diff < 1e-6, "the numpy STFT disagrees with librosa.stft"
    except ImportError:
        print("librosa not installed: filterbank checked against the numpy derivation only", file=sys.stderr)
    out = log_mel(test_signal(), filters)
    rows = []
    for row in filters:
        nz = np.nonzero(row)[0]
        start = int(nz[0]) if len(nz) else 0
        end = int(nz[-1]) + 1 if len(nz) else 0
        rows.append({"start": start, "values": [sig(v, 9) for v in row[start:end]]})
    fixture = {
        "description": "scripts/reference/mel_reference.py: slaney mel filterbank (sr 16000, n_fft 400, n_mels 80; "
        "per band the nonzero span from start) and Whisper log-mel [frames, 80] of the test signal",
        "signal": "0.5 sin(2pi 440 t) + 0.25 sin(2pi 3000 t) + 0.2 sin(2pi (200 t + (6000-200)/(2*0.5) t^2)), 16 kHz, 0.5 s",
        "librosaMaxAbsDiff": librosa_diff,
        "filterbank": {"nMels": N_MELS, "nBins": N_FFT // 2 + 1, "rows": rows},
        "logMel": {"nFrames": int(out.shape[0]), "nMels": N_MELS, "values": [sig(v) for v in out.reshape(-1)]},
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "fixtures", "logmel-reference.json")
    with open(path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}: {out.shape[0]} frames x {N_MELS} mels")


if __name__ == "__main__":
    main()
