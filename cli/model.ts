// `relax model ...`: pretrained models. `relax model import <file.gguf|dir|name>` resolves a model
// source into a Hugging Face model directory (importing and caching it under the data directory)
// and prints where it is, its parameter count and its tensor dtypes.
import { cp } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { relaxEnvironment } from '../config/environment';
import { describeHfWeights, readHfModelConfig } from '../engines/hf-checkpoint';
import { MODEL_SHORTCUTS, readImportMarker, resolveModelSource } from '../engines/model-sources';
import { AUDIO_ENCODER_SHORTCUTS, readAudioEncoderInfo, resolveAudioEncoder } from '../engines/whisper';

const counts = (c: Record<string, number>) => Object.entries(c).map(([k, n]) => `${k} x${n}`).join(', ');

export function registerModelCommands(program: Command): void {
  const model = program.command('model').description('pretrained models: import GGUF files or named models as Hugging Face directories');
  model
    .command('import <source>')
    .description(`import a model: a .gguf file, a Hugging Face model directory, a name (${Object.keys(MODEL_SHORTCUTS).join(', ')}; audio encoders for model.audio.from: ${Object.keys(AUDIO_ENCODER_SHORTCUTS).join(', ')}), or a Hub id org/name[@revision] (from the Hub cache, HF_HUB_CACHE / HF_HOME, or downloaded); prints the directory, parameter count and dtypes`)
    .option('--out <dir>', 'also copy the resulting Hugging Face directory here')
    .option('--data-dir <dir>', 'project data directory (imports are cached under <dir>/models)', relaxEnvironment().home)
    .action(async (source: string, o: { out?: string; dataDir: string }) => {
      const t0 = performance.now();
      if (AUDIO_ENCODER_SHORTCUTS[source]) {
        const encoderDir = await resolveAudioEncoder(source, { home: path.resolve(o.dataDir), log: (line) => console.log(line) });
        const info = await readAudioEncoderInfo(encoderDir);
        console.log(`audio encoder directory: ${encoderDir}`);
        console.log(`  architecture:  ${info.architecture} encoder: ${info.nLayers} layers, width ${info.dModel}, ${info.nHeads} heads, ffn ${info.dFF}, ${info.nMels} mel bins, window up to ${info.maxFrames} frames (${info.maxFrames / 100} s), exact GELU`);
        console.log(`  parameters:    ${info.parameterCount.toLocaleString('en-US')} (float16, as in the source)`);
        console.log(`  imported from: ${info.source} (model.bin sha256 ${info.sha256.slice(0, 16)}...)`);
        console.log(`  use it as:     model.audio.from: "${source}"`);
        console.log(`  took ${((performance.now() - t0) / 1000).toFixed(1)} s`);
        return;
      }
      let dir = await resolveModelSource(source, { home: path.resolve(o.dataDir), log: (line) => console.log(line) });
      if (o.out) {
        const out = path.resolve(o.out);
        if (out !== dir) {
          await cp(dir, out, { recursive: true, force: true });
          dir = out;
        }
      }
      const info = await readHfModelConfig(dir);
      const weights = await describeHfWeights(dir);
      const marker = await readImportMarker(dir);
      const c = info.config;
      console.log(`model directory: ${dir}`);
      console.log(`  architecture:  ${info.architecture}: ${c.nLayers} layers, width ${c.dModel}, ${c.nHeads} heads (${c.nKvHeads ?? c.nHeads} kv), ffn ${c.dFF}, vocab ${c.vocabSize}, context ${c.contextLength}${c.tieEmbeddings ? ', tied embeddings' : ''}`);
      console.log(`  parameters:    ${weights.parameterCount.toLocaleString('en-US')} in ${weights.tensors} tensors`);
      console.log(`  dtypes:        ${counts(weights.dtypes)}`);
      if (marker) console.log(`  imported from: ${marker.source} (${counts(marker.sourceTypes)}; sha256 ${marker.sha256.slice(0, 16)}...)`);
      console.log(`  tokenizer:     ${info.tokenizerPath ?? '(none)'}${info.chatTemplate ? ', chat template' : ''}; eos ids ${JSON.stringify(info.eosTokenIds)}`);
      console.log(`  took ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    });
}
