// `relax bench <name> [--json]`: benchmarks print ratios measured side by side in one run (these
// machines are noisy; absolute times do not compare across runs). With --json the last line
// printed is one JSON object.

export interface BenchContext {
  json: boolean;
  /** Human-readable progress; silent in --json mode except for the final object. */
  log: (line: string) => void;
  options: Record<string, string>;
}

export type Bench = (ctx: BenchContext) => Promise<Record<string, unknown>>;

const BENCHES: Record<string, { describe: string; load: () => Promise<Bench> }> = {
  engines: {
    describe: 'rollout tokens/s by batch, train tokens/s, weight sync ms, roofline, logprob agreement',
    load: async () => (await import('./engines.js')).enginesBench,
  },
  pipeline: {
    describe: 'the same GRPO steps in-process vs through the workflow on the local stack: orchestration overhead; then monitoring (metrics scraped, health checks) on vs off',
    load: async () => (await import('./pipeline.js')).pipelineBench,
  },
  async: {
    describe: 'the same GRPO work in sync and async mode, rollout and trainer pinned to different cores: speedup, ideal speedup, efficiency, trainer idle',
    load: async () => (await import('./async.js')).asyncBench,
  },
  staleness: {
    describe: 'add2 accuracy after a fixed number of samples for max_staleness 0, 1, 2, 4, 8, without and with off-policy correction (async mode)',
    load: async () => (await import('./staleness.js')).stalenessBench,
  },
  env: {
    describe: 'RL on a multi-turn environment (--set task=calculator|guess-number|gridworld|<module>): success and tool-use / turns curves',
    load: async () => (await import('./env.js')).envBench,
  },
  'real-model': {
    describe: 'GRPO + LoRA on a pretrained model (default smollm2-135m-instruct) through the workflow on the shipped arithmetic data: reward and held-out accuracy per step, rollout/train time per step, memory',
    load: async () => (await import('./real-model.js')).realModelBench,
  },
  multimodal: {
    describe: 'GRPO through the workflow on the media tasks (vision, audio, zoom) from SFT warm starts: held-out accuracy curves, zoom tool-use rate',
    load: async () => (await import('./multimodal.js')).multimodalBench,
  },
  omni: {
    describe: 'an audio-language model from pretrained parts (SmolLM2 + Whisper base encoder + projector + LoRA) through the workflow on spoken arithmetic (espeak-ng): SFT of the projector, then GRPO; held-out accuracy, step time, encoder ms per clip',
    load: async () => (await import('./omni.js')).omniBench,
  },
  chaos: {
    describe: 'reliability: two runs on a relax dev stack while workers of every role, the Temporal server and relax dev itself are killed (--set kills=N) or frozen (--set stops=N): lost / double-trained samples, duplicate versions, corrupt checkpoints, orphan processes, the longest stall',
    load: async () => (await import('./chaos.js')).chaosBench,
  },
  resume: {
    describe: 'deterministic resume: a sync run on a relax dev stack interrupted once a step (workers, Temporal, relax dev killed; --set interruptions=N) against the same config and seed uninterrupted in process: bitwise-equal weights and losses',
    load: async () => (await import('./resume.js')).resumeBench,
  },
  hosts: {
    describe: 'three hosts with only a network between them (network namespaces, as root): services, a train host, a rollout host, checkpoints in the S3 object store; one clean run, one cut off host by host (--set cutoffs=N, cutoff_s=S): runs completed, lost / double-trained samples, files outside the caches',
    load: async () => (await import('./hosts.js')).hostsBench,
  },
  sandbox: {
    describe: 'user code in-process vs in a sandbox thread: add2 reward calls/s (groups of 8) and calculator env steps/s, and the ratios',
    load: async () => (await import('./sandbox.js')).sandboxBench,
  },
  scale: {
    describe: 'rollout workers 1, 2, 4, 8, 16, 32 on one stack (--set workers=...): control-plane time per sync step (outside the activities) and its share of the step',
    load: async () => (await import('./scale.js')).scaleBench,
  },
  'run-memory': {
    describe: 'many one-step runs on one stack (default SmolLM2-135M + LoRA; --set model=tiny, runs=N): each worker role\'s RSS after every run, and the growth from the second run to the last',
    load: async () => (await import('./run-memory.js')).runMemoryBench,
  },
  grpo: {
    describe: 'GRPO on add2 from the SFT warm start: held-out accuracy curve and wall time',
    load: async () => (await import('./grpo.js')).grpoBench,
  },
  algorithms: {
    describe: 'each RL algorithm (grpo, dr_grpo, rloo, gspo, cispo, sapo, dapo, ppo_critic, grpo+mis, grpo+opsm, opd from a >= 95% teacher) on add2 from the same SFT warm start for the same samples: held-out accuracy before and after, wall time, samples to 95%',
    load: async () => (await import('./algorithms.js')).algorithmsBench,
  },
};

export function benchNames(): string[] {
  return Object.keys(BENCHES);
}

export function describeBenches(): string {
  return Object.entries(BENCHES)
    .map(([name, b]) => `  ${name.padEnd(12)} ${b.describe}`)
    .join('\n');
}

export async function loadBench(name: string): Promise<Bench> {
  const entry = BENCHES[name];
  if (!entry) throw new Error(`unknown benchmark "${name}": known benchmarks are ${benchNames().join(', ')}`);
  return entry.load();
}
