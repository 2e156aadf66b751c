// Decoding prompt media to raw arrays, plus the small encoders tests and generated tasks use.
// Images (PNG via pngjs, JPEG via jpeg-js) decode to 8-bit RGB, 3 channels, row-major; an alpha
// channel is composited onto white (a transparent pixel becomes white, not whatever colour its
// invisible RGB happens to hold). The pixel count is read from the header (PNG IHDR, JPEG SOFn)
// and checked against `maxPixels` before any pixel is decoded, so a decompression bomb (a tiny file
// declaring a huge image) is refused with MediaTooLarge; jpeg-js's own resolution and memory limits
// are set as a second guard. Audio (WAV via wavefile: 8/16/24/32-bit PCM or 32-bit float) decodes
// to mono float samples in [-1, 1], channels averaged; the duration is computed from the header and
// checked against `maxSeconds` before the samples are converted. 16-bit PCM, the common case, is
// read from the data chunk wavefile extracts and encodeWav writes the canonical 44-byte header
// itself: wavefile's per-sample packing took more time than the log-mel of the clip.
import * as jpeg from 'jpeg-js';
import { PNG } from 'pngjs';
import { WaveFile } from 'wavefile';
import { MediaError, sniffFormat, type MediaFormat } from './sources';

export interface RgbImage {
  width: number;
  height: number;
  /** width * height * 3 bytes, RGB, row-major. */
  data: Uint8Array;
}

export interface MonoAudio {
  sampleRate: number;
  /** Mono samples in [-1, 1]. */
  samples: Float32Array;
}

export const DEFAULT_MAX_PIXELS = 4096 * 4096;

export interface DecodeImageOptions {
  /** The most pixels (width * height) accepted (default 4096 * 4096). */
  maxPixels?: number;
}

export interface DecodeAudioOptions {
  /** The longest clip accepted, in seconds (default: no limit). */
  maxSeconds?: number;
}

const decodeError = (what: string, err: unknown): MediaError =>
  new MediaError('MediaDecode', `${what} could not be decoded (${err instanceof Error ? err.message : String(err)}): the file is truncated or not a valid ${what.split(' ')[1]}; re-export it`);

/** Width and height from a PNG's IHDR chunk (bytes 16..24, big-endian). */
function pngSize(bytes: Uint8Array): { width: number; height: number } | undefined {
  if (bytes.length < 24) return undefined;
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { width: v.getUint32(16), height: v.getUint32(20) };
}

/** Width and height from a JPEG's first start-of-frame marker (SOF0..SOF15 but DHT, JPG, DAC). */
function jpegSize(bytes: Uint8Array): { width: number; height: number } | undefined {
  let i = 2;
  while (i + 9 < bytes.length) {
    if (bytes[i] !== 0xff) { i++; continue; }
    const marker = bytes[i + 1];
    if (marker === 0xff) { i++; continue; }
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) { i += 2; continue; }
    const length = (bytes[i + 2] << 8) | bytes[i + 3];
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      return { height: (bytes[i + 5] << 8) | bytes[i + 6], width: (bytes[i + 7] << 8) | bytes[i + 8] };
    }
    if (marker === 0xd9 || marker === 0xda) return undefined; // end of image / start of scan before a frame
    i += 2 + length;
  }
  return undefined;
}

function checkPixels(what: string, size: { width: number; height: number } | undefined, maxPixels: number): void {
  if (!size) return; // the decoder reports the malformed header
  const pixels = size.width * size.height;
  if (pixels > maxPixels) {
    throw new MediaError('MediaTooLarge',
      `${what} declares ${size.width}x${size.height} = ${pixels} pixels, over the limit of ${maxPixels} pixels: downscale the image before passing it (or raise maxPixels)`);
  }
}

/** RGBA (4 bytes a pixel) to RGB, compositing alpha onto white. */
function rgbaToRgb(rgba: Uint8Array, width: number, height: number): Uint8Array {
  const n = width * height;
  const out = new Uint8Array(n * 3);
  for (let p = 0; p < n; p++) {
    const a = rgba[p * 4 + 3];
    for (let c = 0; c < 3; c++) {
      const v = rgba[p * 4 + c];
      out[p * 3 + c] = a === 255 ? v : Math.round((v * a + 255 * (255 - a)) / 255);
    }
  }
  return out;
}

/** Decode a PNG or JPEG to RGB; see the file comment for alpha and the pixel limit. */
export function decodeImage(bytes: Uint8Array, format: MediaFormat, options: DecodeImageOptions = {}): RgbImage {
  const maxPixels = options.maxPixels ?? DEFAULT_MAX_PIXELS;
  const sniffed = sniffFormat(bytes);
  if (sniffed !== format || (format !== 'png' && format !== 'jpeg')) {
    throw new MediaError('MediaFormat', `decodeImage was asked for ${format} but the bytes are ${sniffed ?? 'no supported format'}: images must be PNG or JPEG (resolve the source with resolveMediaSource first)`);
  }
  if (format === 'png') {
    checkPixels('the PNG image', pngSize(bytes), maxPixels);
    let png: PNG;
    try {
      png = PNG.sync.read(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    } catch (err) {
      throw decodeError('the PNG image', err);
    }
    return { width: png.width, height: png.height, data: rgbaToRgb(png.data, png.width, png.height) };
  }
  checkPixels('the JPEG image', jpegSize(bytes), maxPixels);
  let img: { width: number; height: number; data: Uint8Array };
  try {
    img = jpeg.decode(bytes, {
      useTArray: true,
      formatAsRGBA: true,
      maxResolutionInMP: Math.ceil(maxPixels / 1e6) + 1,
      // RGBA output plus the decoder's component buffers: a few bytes a pixel, with headroom.
      maxMemoryUsageInMB: Math.max(64, Math.ceil((maxPixels * 12) / (1024 * 1024))),
    });
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    if (/limit exceeded/.test(message)) throw new MediaError('MediaTooLarge', `the JPEG image is too large to decode (${message}): downscale it before passing it`);
    throw decodeError('the JPEG image', err);
  }
  return { width: img.width, height: img.height, data: rgbaToRgb(img.data, img.width, img.height) };
}

interface WavFmt { audioFormat: number; numChannels: number; sampleRate: number; bitsPerSample: number }
const SUPPORTED_BIT_DEPTHS = ['8', '16', '24', '32', '32f'];

/** Decode a WAV clip to mono float samples in [-1, 1]; see the file comment. */
export function decodeAudio(bytes: Uint8Array, options: DecodeAudioOptions = {}): MonoAudio {
  if (sniffFormat(bytes) !== 'wav') {
    throw new MediaError('MediaFormat', 'decodeAudio needs a WAV file (RIFF....WAVE): convert the clip to WAV (PCM 8/16/24/32-bit or 32-bit float)');
  }
  const header = new WaveFile();
  try {
    header.fromBuffer(bytes, false); // chunks only, no samples yet
  } catch (err) {
    throw decodeError('the WAV audio', err);
  }
  const fmt = header.fmt as WavFmt;
  const depth = (header as unknown as { bitDepth: string }).bitDepth;
  if (!SUPPORTED_BIT_DEPTHS.includes(depth) || ![1, 3, 0xfffe].includes(fmt.audioFormat)) {
    throw new MediaError('MediaFormat',
      `the WAV audio has encoding ${fmt.audioFormat} at bit depth ${depth}, which is not supported: supported are PCM 8/16/24/32-bit and 32-bit float (convert it, e.g. ffmpeg -i in.wav -c:a pcm_s16le out.wav)`);
  }
  if (!(fmt.numChannels > 0) || !(fmt.sampleRate > 0)) {
    throw new MediaError('MediaDecode', `the WAV audio declares ${fmt.numChannels} channels at ${fmt.sampleRate} Hz: the header is broken; re-export the clip`);
  }
  const dataBytes = (header.data as { chunkSize: number }).chunkSize;
  const frames = Math.floor(dataBytes / (fmt.numChannels * Math.ceil(fmt.bitsPerSample / 8)));
  const seconds = frames / fmt.sampleRate;
  if (options.maxSeconds !== undefined && seconds > options.maxSeconds) {
    throw new MediaError('MediaTooLarge',
      `the WAV audio is ${seconds.toFixed(2)} s long, over the limit of ${options.maxSeconds} s: trim the clip before passing it (or raise the audio length limit)`);
  }
  const pcm16 = pcm16Samples(bytes, fmt, depth);
  if (pcm16) return { sampleRate: fmt.sampleRate, samples: pcm16 };
  let channels: Float32Array[];
  try {
    // Raw sample values, scaled here: wavefile's toBitDepth('32f') takes seconds for a minute of audio.
    const got = new WaveFile(bytes).getSamples(false, Float32Array) as unknown as Float32Array | Float32Array[];
    channels = Array.isArray(got) ? got : [got];
  } catch (err) {
    throw decodeError('the WAV audio', err);
  }
  // 8-bit PCM is unsigned around 128; wider PCM is signed, full scale 2^(bits-1); float is as is.
  const offset = depth === '8' ? 128 : 0;
  const scale = depth === '32f' ? 1 : 2 ** (fmt.bitsPerSample - 1);
  const n = channels[0]?.length ?? 0;
  const samples = new Float32Array(n);
  for (const ch of channels) for (let i = 0; i < n; i++) samples[i] += ch[i] - offset;
  const k = channels.length * scale;
  for (let i = 0; i < n; i++) samples[i] = Math.max(-1, Math.min(1, samples[i] / k));
  return { sampleRate: fmt.sampleRate, samples };
}

/**
 * 16-bit little-endian PCM (the common case, and what encodeWav writes) read from the data chunk's
 * raw bytes as wavefile extracts them, channels averaged as below: wavefile's own sample unpacking
 * (getSamples) costs ~3 ms for a second of audio. Undefined for any other layout (RIFX, other
 * depths, float), which takes wavefile's path.
 */
function pcm16Samples(bytes: Uint8Array, fmt: WavFmt, depth: string): Float32Array | undefined {
  if (depth !== '16') return undefined;
  const wav = new WaveFile();
  try {
    wav.fromBuffer(bytes, true);
  } catch (err) {
    throw decodeError('the WAV audio', err);
  }
  if (wav.container !== 'RIFF') return undefined;
  const raw = (wav.data as { samples: Uint8Array }).samples;
  const channels = fmt.numChannels;
  const n = Math.floor(raw.byteLength / (2 * channels));
  const view = new DataView(raw.buffer, raw.byteOffset, n * 2 * channels);
  const samples = new Float32Array(n);
  const k = channels * 32768;
  for (let i = 0; i < n; i++) {
    let sum = 0;
    for (let c = 0; c < channels; c++) sum += view.getInt16((i * channels + c) * 2, true);
    samples[i] = Math.max(-1, Math.min(1, sum / k));
  }
  return samples;
}

/** Encode RGB (3 bytes a pixel, row-major) as an opaque 8-bit PNG. */
export function encodePng(image: RgbImage): Uint8Array {
  const { width, height, data } = image;
  if (data.length !== width * height * 3) {
    throw new MediaError('MediaInvalid', `encodePng got ${data.length} bytes for a ${width}x${height} RGB image, which needs ${width * height * 3}`);
  }
  const png = new PNG({ width, height });
  for (let p = 0; p < width * height; p++) {
    png.data[p * 4] = data[p * 3];
    png.data[p * 4 + 1] = data[p * 3 + 1];
    png.data[p * 4 + 2] = data[p * 3 + 2];
    png.data[p * 4 + 3] = 255;
  }
  const buf = PNG.sync.write(png);
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** Encode mono float samples in [-1, 1] as a 16-bit PCM WAV. */
export function encodeWav(audio: MonoAudio): Uint8Array {
  const pcm = new Int16Array(audio.samples.length);
  for (let i = 0; i < pcm.length; i++) {
    const s = Math.max(-1, Math.min(1, audio.samples[i]));
    // The inverse of decodeAudio's x / 32768, so a round trip is off by at most half a step (1.0 itself clips to 32767).
    pcm[i] = Math.min(32767, Math.round(s * 32768));
  }
  return pcm16Wav(audio.sampleRate, pcm);
}

/**
 * The canonical 44-byte RIFF/WAVE header (fmt chunk: PCM, mono, 16-bit) and the samples, little
 * endian: wavefile's fromScratch packs sample by sample and takes ~6 ms for a second of audio.
 */
function pcm16Wav(sampleRate: number, pcm: Int16Array): Uint8Array {
  const dataBytes = pcm.length * 2;
  const out = new Uint8Array(44 + dataBytes);
  const view = new DataView(out.buffer);
  const ascii = (at: number, text: string) => {
    for (let i = 0; i < text.length; i++) out[at + i] = text.charCodeAt(i);
  };
  ascii(0, 'RIFF');
  view.setUint32(4, 36 + dataBytes, true);
  ascii(8, 'WAVE');
  ascii(12, 'fmt ');
  view.setUint32(16, 16, true); // fmt chunk size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // channels
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true); // byte rate
  view.setUint16(32, 2, true); // block align
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, 'data');
  view.setUint32(40, dataBytes, true);
  for (let i = 0; i < pcm.length; i++) view.setInt16(44 + 2 * i, pcm[i], true);
  return out;
}
