// Whisper's log-mel spectrogram in plain TypeScript: the slaney mel filterbank (librosa.filters.mel,
// the one in Whisper's mel_filters.npz), the power STFT (periodic Hann 400, hop 160, center=True
// with reflect padding, as torch.stft in whisper/audio.py log_mel_spectrogram) and the log/clamp/
// rescale steps. n_fft = 400 is not a power of two, which fft.js requires, so the DFT runs as
// Bluestein's chirp-z transform on a 1024-point fft.js FFT: exact (to float64 rounding) for any n.
import FFT from 'fft.js';

export const WHISPER_SAMPLE_RATE = 16000;
export const WHISPER_N_FFT = 400;
export const WHISPER_HOP = 160;

export interface MelFilterbankOptions {
  sampleRate: number;
  nFft: number;
  nMels: number;
  /** Lowest band edge in Hz (librosa fmin, default 0). */
  fMin?: number;
  /** Highest band edge in Hz (librosa fmax, default sampleRate / 2). */
  fMax?: number;
}

export interface MelFilterbank {
  /** [nMels, nBins] row-major: weights[m * nBins + k] is band m's weight on FFT bin k. */
  weights: Float64Array;
  nMels: number;
  /** nFft / 2 + 1. */
  nBins: number;
  /** Band m's weights are zero outside bins [first[m], end[m]) (each triangle spans a few bins). */
  first: Int32Array;
  end: Int32Array;
}

export interface LogMelOptions {
  /** 80 (Whisper up to large-v2) or 128 (large-v3). */
  nMels: number;
  /** The longest clip accepted, in seconds (Whisper's window is 30). */
  maxSeconds: number;
}

export interface LogMel {
  /** [nFrames, nMels] row-major (frame-major: Whisper's [nMels, nFrames] transposed). */
  frames: Float32Array;
  nFrames: number;
}

// The slaney mel scale (librosa htk=False): linear below 1 kHz (200/3 Hz a mel), logarithmic above.
const F_SP = 200 / 3;
const MIN_LOG_HZ = 1000;
const MIN_LOG_MEL = MIN_LOG_HZ / F_SP;
const LOG_STEP = Math.log(6.4) / 27;

export const hzToMelSlaney = (hz: number): number =>
  hz >= MIN_LOG_HZ ? MIN_LOG_MEL + Math.log(hz / MIN_LOG_HZ) / LOG_STEP : hz / F_SP;
export const melToHzSlaney = (mel: number): number =>
  mel >= MIN_LOG_MEL ? MIN_LOG_HZ * Math.exp(LOG_STEP * (mel - MIN_LOG_MEL)) : F_SP * mel;

const filterbanks = new Map<string, MelFilterbank>();

/**
 * librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm='slaney'): triangles between
 * nMels + 2 points evenly spaced in slaney mels, each scaled by 2 / (its width in Hz) so every band
 * has the same area. Computed in float64 (librosa returns float32; they differ by < 1e-9 here).
 */
export function melFilterbank(options: MelFilterbankOptions): MelFilterbank {
  const { sampleRate, nFft, nMels } = options;
  const fMin = options.fMin ?? 0;
  const fMax = options.fMax ?? sampleRate / 2;
  for (const [name, v] of [['sampleRate', sampleRate], ['nFft', nFft], ['nMels', nMels]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`melFilterbank: ${name} must be a positive integer, got ${v}`);
  }
  if (!(fMin >= 0 && fMax > fMin && fMax <= sampleRate / 2)) {
    throw new Error(`melFilterbank: need 0 <= fMin < fMax <= sampleRate/2 (${sampleRate / 2}), got fMin ${fMin}, fMax ${fMax}`);
  }
  const key = `${sampleRate}/${nFft}/${nMels}/${fMin}/${fMax}`;
  const cached = filterbanks.get(key);
  if (cached) return cached;
  const nBins = Math.floor(nFft / 2) + 1;
  // np.linspace(0, sr/2, nBins) and mel_frequencies(nMels + 2, fmin, fmax): linspace in mels
  const fftFreqs = Array.from({ length: nBins }, (_, k) => (k * (sampleRate / 2)) / (nBins - 1));
  const melMin = hzToMelSlaney(fMin);
  const melMax = hzToMelSlaney(fMax);
  const melF = Array.from({ length: nMels + 2 }, (_, i) => melToHzSlaney(melMin + (i * (melMax - melMin)) / (nMels + 1)));
  const weights = new Float64Array(nMels * nBins);
  for (let m = 0; m < nMels; m++) {
    const lowDiff = melF[m + 1] - melF[m];
    const highDiff = melF[m + 2] - melF[m + 1];
    const enorm = 2 / (melF[m + 2] - melF[m]);
    for (let k = 0; k < nBins; k++) {
      const lower = (fftFreqs[k] - melF[m]) / lowDiff;
      const upper = (melF[m + 2] - fftFreqs[k]) / highDiff;
      weights[m * nBins + k] = Math.max(0, Math.min(lower, upper)) * enorm;
    }
  }
  const first = new Int32Array(nMels);
  const end = new Int32Array(nMels);
  for (let m = 0; m < nMels; m++) {
    let lo = 0;
    while (lo < nBins && weights[m * nBins + lo] === 0) lo++;
    let hi = nBins;
    while (hi > lo && weights[m * nBins + hi - 1] === 0) hi--;
    first[m] = lo;
    end[m] = hi;
  }
  const bank = { weights, nMels, nBins, first, end };
  filterbanks.set(key, bank);
  return bank;
}

// Bluestein: X[k] = c[k] * sum_n (x[n] c[n]) conj(c[k - n]) with c[m] = exp(-i pi m^2 / n), a
// linear convolution done as a circular one of size M >= 2n - 1 (a power of two) with fft.js.
interface DftPlan {
  n: number;
  fft: FFT;
  /** c[m] for m < n, interleaved re/im. */
  chirp: Float64Array;
  /** FFT of the conj-chirp kernel b (b[m] = b[M - m] = conj(c[m])), interleaved. */
  kernelSpectrum: Float64Array;
  a: Float64Array;
  spectrum: Float64Array;
  conv: Float64Array;
}

const plans = new Map<number, DftPlan>();

function dftPlan(n: number): DftPlan {
  const cached = plans.get(n);
  if (cached) return cached;
  let size = 2;
  while (size < 2 * n - 1) size *= 2;
  const fft = new FFT(size);
  const chirp = new Float64Array(2 * n);
  for (let m = 0; m < n; m++) {
    const angle = (-Math.PI * ((m * m) % (2 * n))) / n; // m^2 mod 2n keeps the angle exact
    chirp[2 * m] = Math.cos(angle);
    chirp[2 * m + 1] = Math.sin(angle);
  }
  const kernel = new Float64Array(2 * size);
  for (let m = 0; m < n; m++) {
    for (const at of m === 0 ? [0] : [m, size - m]) {
      kernel[2 * at] = chirp[2 * m];
      kernel[2 * at + 1] = -chirp[2 * m + 1];
    }
  }
  const kernelSpectrum = new Float64Array(2 * size);
  fft.transform(kernelSpectrum, kernel);
  const plan = { n, fft, chirp, kernelSpectrum, a: new Float64Array(2 * size), spectrum: new Float64Array(2 * size), conv: new Float64Array(2 * size) };
  plans.set(n, plan);
  return plan;
}

/**
 * |X[k]|^2 for k = 0 .. floor(n/2) of the n-point DFTs of two real frames at once (b optional):
 * one complex transform of z = a + i b, split by conjugate symmetry, A[k] = (Z[k] + conj Z[n-k]) / 2
 * and B[k] = (Z[k] - conj Z[n-k]) / 2i. Half the FFTs of one transform per frame, exact to rounding.
 */
export function powerSpectra(a: ArrayLike<number>, b: ArrayLike<number> | undefined, outA: Float64Array, outB?: Float64Array): void {
  const n = a.length;
  if (b && b.length !== n) throw new Error(`powerSpectra: frames of ${n} and ${b.length} samples; both must have the same length`);
  const p = dftPlan(n);
  const { a: z, spectrum, conv, chirp, kernelSpectrum } = p;
  z.fill(0);
  for (let m = 0; m < n; m++) {
    const re = a[m];
    const im = b ? b[m] : 0;
    z[2 * m] = re * chirp[2 * m] - im * chirp[2 * m + 1];
    z[2 * m + 1] = re * chirp[2 * m + 1] + im * chirp[2 * m];
  }
  p.fft.transform(spectrum, z);
  for (let i = 0; i < spectrum.length; i += 2) {
    const re = spectrum[i] * kernelSpectrum[i] - spectrum[i + 1] * kernelSpectrum[i + 1];
    const im = spectrum[i] * kernelSpectrum[i + 1] + spectrum[i + 1] * kernelSpectrum[i];
    spectrum[i] = re;
    spectrum[i + 1] = im;
  }
  p.fft.inverseTransform(conv, spectrum);
  // Z[k] = c[k] conv[k] for every k < n (the split needs Z[n - k] as well), in place.
  for (let k = 0; k < n; k++) {
    const vr = conv[2 * k];
    const vi = conv[2 * k + 1];
    conv[2 * k] = chirp[2 * k] * vr - chirp[2 * k + 1] * vi;
    conv[2 * k + 1] = chirp[2 * k] * vi + chirp[2 * k + 1] * vr;
  }
  const nBins = Math.floor(n / 2) + 1;
  for (let k = 0; k < nBins; k++) {
    const j = (n - k) % n;
    const zr = conv[2 * k];
    const zi = conv[2 * k + 1];
    const yr = conv[2 * j];
    const yi = conv[2 * j + 1];
    outA[k] = ((zr + yr) * (zr + yr) + (zi - yi) * (zi - yi)) / 4;
    if (outB) outB[k] = ((zi + yi) * (zi + yi) + (zr - yr) * (zr - yr)) / 4;
  }
}

/** |X[k]|^2 for k = 0 .. floor(n/2) of the n-point DFT of the real frame, written into out. */
export function powerSpectrum(frame: ArrayLike<number>, out: Float64Array): void {
  powerSpectra(frame, undefined, out);
}

/** The periodic Hann window (torch.hann_window(n), periodic=True): 0.5 - 0.5 cos(2 pi i / n). */
export function hannPeriodic(n: number): Float64Array {
  return Float64Array.from({ length: n }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / n));
}

/**
 * The power STFT as Whisper takes it: torch.stft(x, nFft, hop, hann_window(nFft), center=True,
 * pad_mode='reflect'), |.|^2, the last frame dropped (stft[..., :-1]). Returns [nFrames, nBins]
 * row-major with nFrames = floor(len / hop). Needs len > nFft / 2 (torch's reflect-pad limit).
 */
export function stftPower(samples: ArrayLike<number>, nFft = WHISPER_N_FFT, hop = WHISPER_HOP): { power: Float64Array; nFrames: number; nBins: number } {
  const len = samples.length;
  const pad = Math.floor(nFft / 2);
  if (len <= pad) {
    throw new Error(`audio too short for the STFT: ${len} samples, need more than ${pad} (n_fft/2) for reflect padding; pad the clip with silence first`);
  }
  const padded = new Float64Array(len + 2 * pad);
  for (let i = 0; i < len; i++) padded[pad + i] = samples[i];
  for (let i = 1; i <= pad; i++) {
    padded[pad - i] = samples[i];
    padded[pad + len - 1 + i] = samples[len - 1 - i];
  }
  const window = hannPeriodic(nFft);
  const nBins = Math.floor(nFft / 2) + 1;
  const nFrames = Math.floor((padded.length - nFft) / hop) + 1 - 1; // torch's frame count, minus the last
  const power = new Float64Array(nFrames * nBins);
  const frames = [new Float64Array(nFft), new Float64Array(nFft)];
  const rows = [new Float64Array(nBins), new Float64Array(nBins)];
  for (let t = 0; t < nFrames; t += 2) {
    const pair = Math.min(2, nFrames - t); // two frames a transform (powerSpectra), the last maybe alone
    for (let f = 0; f < pair; f++) {
      const start = (t + f) * hop;
      for (let i = 0; i < nFft; i++) frames[f][i] = padded[start + i] * window[i];
    }
    powerSpectra(frames[0], pair === 2 ? frames[1] : undefined, rows[0], rows[1]);
    for (let f = 0; f < pair; f++) power.set(rows[f], (t + f) * nBins);
  }
  return { power, nFrames, nBins };
}

/**
 * Whisper's log_mel_spectrogram for 16 kHz mono samples, without its padding to 30 s: mel =
 * filters @ |stft|^2, log10(max(mel, 1e-10)), floored at (its max - 8), then (x + 4) / 4.
 * A clip longer than maxSeconds is refused.
 */
export function logMel(samples16k: ArrayLike<number>, options: LogMelOptions): LogMel {
  const { nMels, maxSeconds } = options;
  if (!(maxSeconds > 0)) throw new Error(`logMel: maxSeconds must be a positive number of seconds, got ${maxSeconds}`);
  const seconds = samples16k.length / WHISPER_SAMPLE_RATE;
  if (seconds > maxSeconds) {
    throw new Error(`audio clip is ${seconds.toFixed(3)} s long, over the ${maxSeconds} s limit (maxSeconds): trim or split the clip, or raise maxSeconds`);
  }
  const bank = melFilterbank({ sampleRate: WHISPER_SAMPLE_RATE, nFft: WHISPER_N_FFT, nMels });
  const { power, nFrames, nBins } = stftPower(samples16k, WHISPER_N_FFT, WHISPER_HOP);
  const logs = new Float64Array(nFrames * nMels);
  let max = -Infinity;
  for (let t = 0; t < nFrames; t++) {
    const p = t * nBins;
    for (let m = 0; m < nMels; m++) {
      const w = m * nBins;
      let sum = 0;
      for (let k = bank.first[m]; k < bank.end[m]; k++) sum += bank.weights[w + k] * power[p + k];
      const v = Math.log10(Math.max(sum, 1e-10));
      logs[t * nMels + m] = v;
      if (v > max) max = v;
    }
  }
  const floor = max - 8;
  const frames = new Float32Array(logs.length);
  for (let i = 0; i < logs.length; i++) frames[i] = (Math.max(logs[i], floor) + 4) / 4;
  return { frames, nFrames };
}
