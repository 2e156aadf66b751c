// Types for the parts of fft.js (a radix-4 FFT, CommonJS, `module.exports = FFT`) that the media
// processors use; its bundled lib/fft.d.ts types everything as any. Complex arrays are interleaved
// [re0, im0, re1, im1, ...] of length 2 * size; any indexable number array works (Float64Array here).
declare module 'fft.js' {
  type NumberArray = number[] | Float64Array | Float32Array;
  class FFT {
    /** size must be a power of two above 1. */
    constructor(size: number);
    readonly size: number;
    createComplexArray(): number[];
    /** Forward complex FFT of data into out (out !== data). */
    transform(out: NumberArray, data: NumberArray): void;
    /** Inverse complex FFT of data into out, scaled by 1/size (out !== data). */
    inverseTransform(out: NumberArray, data: NumberArray): void;
    /** Forward FFT of real data; fills the first half of out (complete it with completeSpectrum). */
    realTransform(out: NumberArray, data: NumberArray): void;
    completeSpectrum(spectrum: NumberArray): void;
  }
  export = FFT;
}
