// The image processor: pure functions turning a decoded RGB image into a vision encoder's input.
// Bilinear resize (half-pixel centers), the patch-budget size choice, (x/255 - mean)/std
// normalization and patchify into [n, patchSize*patchSize*3] rows in raster order. Deterministic,
// no I/O, no tensors: the caller feeds the Float32Array to whichever engine runs the encoder.

/** A decoded image: RGB, 3 bytes a pixel, rows top to bottom, pixels left to right. */
export interface RgbImage {
  width: number;
  height: number;
  data: Uint8Array;
}

export interface Size {
  width: number;
  height: number;
}

export interface PatchGrid {
  /** [rows*cols, patchSize*patchSize*3]: patches in raster order, each one's pixels row-major, channel-last. */
  patches: Float32Array;
  rows: number;
  cols: number;
}

export interface ImageProcessorOptions {
  /** The side of a square patch in pixels (14 for CLIP/SigLIP ViT-L/14, 16 for many others). */
  patchSize: number;
  /** The most patches the image may become; the image is resized to the largest grid within it. */
  maxPatches: number;
  /** Per-channel mean of x/255, [r, g, b] (e.g. CLIP: [0.48145466, 0.4578275, 0.40821073]). */
  mean: [number, number, number];
  /** Per-channel std of x/255, [r, g, b] (e.g. CLIP: [0.26862954, 0.26130258, 0.27577711]). */
  std: [number, number, number];
}

export interface ProcessedImage extends PatchGrid {
  /** How many patches (rows * cols). */
  count: number;
  /** The resized image's size, each side a multiple of patchSize. */
  width: number;
  height: number;
}

const CHANNELS = 3;

function checkPositiveInteger(value: number, what: string, hint: string): void {
  if (!Number.isInteger(value) || value < 1) throw new Error(`${what} must be a positive integer, got ${value}: ${hint}`);
}

/** Throws naming what is wrong unless img is a well-formed RGB image. */
export function checkImage(img: RgbImage, what = 'image'): void {
  if (!img || typeof img !== 'object') throw new Error(`${what} must be { width, height, data: Uint8Array }, got ${String(img)}`);
  checkPositiveInteger(img.width, `${what}.width`, 'decode the image before processing it');
  checkPositiveInteger(img.height, `${what}.height`, 'decode the image before processing it');
  if (!(img.data instanceof Uint8Array)) throw new Error(`${what}.data must be a Uint8Array of RGB bytes`);
  const expected = img.width * img.height * CHANNELS;
  if (img.data.length !== expected) {
    throw new Error(`${what}.data has ${img.data.length} bytes but ${img.width}x${img.height} RGB needs ${expected} (3 a pixel); decode to RGB without alpha`);
  }
}

// For one output axis: the two source indices and the weight of the second, per output index.
// Half-pixel centers: src = (dst + 0.5) * in/out - 0.5, clamped to [0, in - 1].
function axisTaps(inSize: number, outSize: number): { i0: Int32Array; i1: Int32Array; frac: Float64Array } {
  const i0 = new Int32Array(outSize);
  const i1 = new Int32Array(outSize);
  const frac = new Float64Array(outSize);
  const scale = inSize / outSize;
  for (let d = 0; d < outSize; d++) {
    const src = Math.min(Math.max((d + 0.5) * scale - 0.5, 0), inSize - 1);
    const lo = Math.floor(src);
    i0[d] = lo;
    i1[d] = Math.min(lo + 1, inSize - 1);
    frac[d] = src - lo;
  }
  return { i0, i1, frac };
}

/**
 * Bilinear resize with half-pixel centers (align_corners=False): output pixel d samples the input
 * at (d + 0.5) * in/out - 0.5, clamped to the edge; no antialiasing when shrinking. This is
 * torch.nn.functional.interpolate(mode='bilinear', align_corners=False, antialias=False),
 * torchvision's resize with antialias=False and OpenCV's INTER_LINEAR; PIL's BILINEAR agrees when
 * enlarging (PIL widens its filter, i.e. antialiases, when shrinking). Values are rounded to the
 * nearest byte (halves up), as a uint8 image resize does.
 */
export function resizeBilinear(img: RgbImage, width: number, height: number): RgbImage {
  checkImage(img);
  checkPositiveInteger(width, 'resize width', 'pass the target size in pixels');
  checkPositiveInteger(height, 'resize height', 'pass the target size in pixels');
  if (width === img.width && height === img.height) return { width, height, data: Uint8Array.from(img.data) };
  const xs = axisTaps(img.width, width);
  const ys = axisTaps(img.height, height);
  const src = img.data;
  const out = new Uint8Array(width * height * CHANNELS);
  const rowStride = img.width * CHANNELS;
  for (let y = 0; y < height; y++) {
    const r0 = ys.i0[y] * rowStride;
    const r1 = ys.i1[y] * rowStride;
    const fy = ys.frac[y];
    for (let x = 0; x < width; x++) {
      const c0 = xs.i0[x] * CHANNELS;
      const c1 = xs.i1[x] * CHANNELS;
      const fx = xs.frac[x];
      const o = (y * width + x) * CHANNELS;
      for (let c = 0; c < CHANNELS; c++) {
        const top = src[r0 + c0 + c] * (1 - fx) + src[r0 + c1 + c] * fx;
        const bottom = src[r1 + c0 + c] * (1 - fx) + src[r1 + c1 + c] * fx;
        const v = top * (1 - fy) + bottom * fy;
        // the 1e-9 keeps exact halves computed as x.4999999 rounding up, as the exact value would
        out[o + c] = Math.min(255, Math.max(0, Math.floor(v + 0.5 + 1e-9)));
      }
    }
  }
  return { width, height, data: out };
}

/**
 * The size that keeps img's aspect ratio, fits within maxSide on both sides and has each side a
 * multiple of multipleOf: both sides scaled by maxSide / longest side, then floored to a multiple
 * (never below one multiple). Enlarges a small image. Returns the size; resize with resizeBilinear.
 */
export function fitWithin(img: Size, maxSide: number, multipleOf: number): Size {
  checkPositiveInteger(img.width, 'image width', 'pass a decoded image');
  checkPositiveInteger(img.height, 'image height', 'pass a decoded image');
  checkPositiveInteger(multipleOf, 'multipleOf', 'pass the patch size in pixels');
  checkPositiveInteger(maxSide, 'maxSide', 'pass the longest side allowed in pixels');
  if (maxSide < multipleOf) throw new Error(`maxSide ${maxSide} is below one patch of ${multipleOf} pixels: raise maxSide to at least ${multipleOf}`);
  const longest = Math.max(img.width, img.height);
  const side = (s: number): number => Math.max(multipleOf, Math.floor((s * maxSide) / longest / multipleOf) * multipleOf);
  return { width: side(img.width), height: side(img.height) };
}

/**
 * The largest patch grid within maxPatches that keeps the aspect ratio: the grid at scale s is
 * cols = max(1, floor(width*s/patch)), rows = max(1, floor(height*s/patch)); both grow with s, so
 * the answer is the grid at the largest s whose rows*cols <= maxPatches. That s is one of the
 * breakpoints s = k*patch/width or k*patch/height (k = 1..maxPatches), all of which are tried.
 * Each side stays within one patch of the exactly scaled side (unless clamped to one patch).
 */
export function patchGridFor(img: Size, patchSize: number, maxPatches: number): { rows: number; cols: number } {
  checkPositiveInteger(img.width, 'image width', 'pass a decoded image');
  checkPositiveInteger(img.height, 'image height', 'pass a decoded image');
  checkPositiveInteger(patchSize, 'patchSize', 'pass the encoder patch side in pixels (e.g. 14)');
  checkPositiveInteger(maxPatches, 'maxPatches', 'allow at least one patch per image');
  const { width: w, height: h } = img;
  // At breakpoint k along the width (s = k*p/w): cols = k, rows = floor(k*h/w). Likewise for height.
  let best = { rows: 1, cols: 1, scale: 0 };
  for (let k = 1; k <= maxPatches; k++) {
    const byWidth = { cols: k, rows: Math.max(1, Math.floor((k * h) / w)), scale: k / w };
    const byHeight = { rows: k, cols: Math.max(1, Math.floor((k * w) / h)), scale: k / h };
    for (const g of [byWidth, byHeight]) {
      if (g.rows * g.cols <= maxPatches && g.scale > best.scale) best = g;
    }
  }
  return { rows: best.rows, cols: best.cols };
}

/** (x/255 - mean[c]) / std[c] per channel, channel-last: [height, width, 3] as a Float32Array. */
export function normalize(img: RgbImage, mean: readonly number[], std: readonly number[]): Float32Array {
  checkImage(img);
  checkChannelTriple(mean, 'mean', false);
  checkChannelTriple(std, 'std', true);
  const out = new Float32Array(img.data.length);
  const scale = std.map((s) => 1 / s);
  for (let i = 0; i < img.data.length; i += CHANNELS) {
    for (let c = 0; c < CHANNELS; c++) out[i + c] = (img.data[i + c] / 255 - mean[c]) * scale[c];
  }
  return out;
}

function checkChannelTriple(values: readonly number[], what: string, positive: boolean): void {
  const ok = Array.isArray(values) && values.length === CHANNELS && values.every((v) => Number.isFinite(v) && (!positive || v > 0));
  if (!ok) {
    throw new Error(`${what} must be three finite numbers [r, g, b]${positive ? ' above 0' : ''}, got ${JSON.stringify(values)}: take them from the model's preprocessor_config.json (image_${what})`);
  }
}

/**
 * Cuts [height, width, 3] pixels into square patches: result row i (= r * cols + c, raster order)
 * holds patch (r, c)'s patchSize*patchSize pixels row-major, each pixel's 3 channels together.
 */
export function patchify(pixels: Float32Array, width: number, height: number, patchSize: number): PatchGrid {
  checkPositiveInteger(patchSize, 'patchSize', 'pass the encoder patch side in pixels');
  checkPositiveInteger(width, 'width', 'pass the image width in pixels');
  checkPositiveInteger(height, 'height', 'pass the image height in pixels');
  if (pixels.length !== width * height * CHANNELS) {
    throw new Error(`pixels has ${pixels.length} values but ${width}x${height}x3 needs ${width * height * CHANNELS}: pass normalize()'s output with its size`);
  }
  if (width % patchSize !== 0 || height % patchSize !== 0) {
    throw new Error(`${width}x${height} is not a whole number of ${patchSize}-pixel patches: resize to multiples of ${patchSize} first (processImage does)`);
  }
  const rows = height / patchSize;
  const cols = width / patchSize;
  const rowLen = patchSize * CHANNELS;
  const patchLen = patchSize * rowLen;
  const patches = new Float32Array(rows * cols * patchLen);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const base = (r * cols + c) * patchLen;
      for (let py = 0; py < patchSize; py++) {
        const from = ((r * patchSize + py) * width + c * patchSize) * CHANNELS;
        patches.set(pixels.subarray(from, from + rowLen), base + py * rowLen);
      }
    }
  }
  return { patches, rows, cols };
}

/**
 * An image to encoder input: resized (bilinear, half-pixel) to the largest grid of
 * rows*cols <= maxPatches patches keeping the aspect ratio (patchGridFor), normalized, patchified.
 */
export function processImage(img: RgbImage, options: ImageProcessorOptions): ProcessedImage {
  checkImage(img);
  if (!options || typeof options !== 'object') throw new Error('processImage needs options { patchSize, maxPatches, mean, std }');
  const { patchSize, maxPatches, mean, std } = options;
  checkChannelTriple(mean, 'mean', false);
  checkChannelTriple(std, 'std', true);
  const { rows, cols } = patchGridFor(img, patchSize, maxPatches);
  const width = cols * patchSize;
  const height = rows * patchSize;
  const resized = resizeBilinear(img, width, height);
  const grid = patchify(normalize(resized, mean, std), width, height, patchSize);
  return { ...grid, count: rows * cols, width, height };
}
