// A pretrained model's vocabulary grown for tokens added to its tokenizer (model.add_special_tokens):
// new rows of the token embedding (and of an untied output head) set to the MEAN of the existing
// rows. That is the centre transformers' resize_token_embeddings(mean_resizing=True) draws new rows
// around; its covariance noise is left out so every worker computes the same rows, bit for bit,
// without a seed. A new token then starts as "an average token": its logit is the mean logit, so it
// is neither favoured nor ruled out before training.
import type { PolicyWeights } from './model';

/** The mean of the `rows` rows of a row-major [rows, cols] matrix, summed in float64. */
export function meanRow(data: Float32Array, rows: number, cols: number): Float32Array {
  const sum = new Float64Array(cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) sum[c] += data[r * cols + c];
  return Float32Array.from(sum, (s) => s / rows);
}

/** [rows, cols] with rows appended up to `toRows`, each equal to the mean of the existing ones. */
export function withMeanRows(data: Float32Array, rows: number, cols: number, toRows: number): Float32Array {
  const out = new Float32Array(toRows * cols);
  out.set(data.subarray(0, rows * cols));
  const mean = meanRow(data, rows, cols);
  for (let r = rows; r < toRows; r++) out.set(mean, r * cols);
  return out;
}

/** [rows, cols] with columns appended up to `toCols`, each equal to the mean of the existing columns (a transposed matrix's new rows). */
export function withMeanColumns(data: Float32Array, rows: number, cols: number, toCols: number): Float32Array {
  const out = new Float32Array(rows * toCols);
  for (let r = 0; r < rows; r++) {
    const row = data.subarray(r * cols, (r + 1) * cols);
    let sum = 0;
    for (let c = 0; c < cols; c++) sum += row[c];
    out.set(row, r * toCols);
    out.fill(sum / cols, r * toCols + cols, (r + 1) * toCols);
  }
  return out;
}

/**
 * `weights` with the vocabulary grown to `vocabSize`: tok_emb.weight [V, D] gets mean rows, an untied
 * lm_head.weight ([D, V] here, Hugging Face's [V, D] transposed) mean columns. Existing rows are
 * kept as they are; weights already at least that large come back unchanged.
 */
export function grownVocabularyWeights(weights: PolicyWeights, dModel: number, vocabSize: number): PolicyWeights {
  const emb = weights['tok_emb.weight'];
  if (!emb) throw new Error('the weights have no tok_emb.weight to grow');
  const rows = emb.length / dModel;
  if (!Number.isInteger(rows)) throw new Error(`tok_emb.weight has ${emb.length} values, not a multiple of d_model ${dModel}`);
  if (rows >= vocabSize) return weights;
  const out: PolicyWeights = { ...weights, 'tok_emb.weight': withMeanRows(emb, rows, dModel, vocabSize) };
  const head = weights['lm_head.weight'];
  if (head) out['lm_head.weight'] = withMeanColumns(head, dModel, head.length / dModel, vocabSize);
  return out;
}
