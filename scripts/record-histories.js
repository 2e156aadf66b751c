#!/usr/bin/env node
// Records workflow histories from real runs on a local stack into test/histories/, for the replay
// test (test/replay.test.ts) to check that changed workflow code still replays them. Run after
// `npm run setup`:  node scripts/record-histories.js [name...]
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const dist = (p) => require(path.join(root, 'dist', p));
const { startEphemeralStack } = dist('workers/local-stack.js');
const { RelaxClient } = dist('client/index.js');
const { execFileSync } = require('node:child_process');
const { findTemporalBinary } = dist('config/environment.js');

// A tiny add2 run with the KL term on (so every activity type runs), in both modes.
const TINY = {
  model: { context_length: 16 },
  algorithm: { group_size: 4, kl_coef: 0.01 },
  rollout: { prompts_per_step: 4, parallelism: 2 },
  train: { steps: 3, eval_every: 2 },
};

// One history per way a run drives the loop: sync, async and colocated (long enough for steps
// queued behind the one in flight). All recorded by
// the current code: a change to workflow code ships as a new worker build (docs/architecture.md
// "What running executions are promised"), so only the current build's histories must replay.
const RUNS = [
  { name: 'training-run', start: (client) => client.startTraining(TINY, 'history-training-run') },
  { name: 'training-run-async', start: (client) => client.startTraining({ ...TINY, mode: 'async', max_staleness: 1 }, 'history-training-run-async') },
  { name: 'training-run-colocated', start: (client) => client.startTraining({ ...TINY, placement: 'colocated', rollout: { ...TINY.rollout, parallelism: 1 }, train: { steps: 5, eval_every: 2 } }, 'history-training-run-colocated') },
];
// `node scripts/record-histories.js <name>...` records only those.
const only = process.argv.slice(2);

async function main() {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-histories-'));
  const stack = await startEphemeralStack(home);
  process.env.RELAX_HOME = home;
  try {
    const client = await RelaxClient.connect(stack.temporalAddress);
    for (const run of RUNS.filter((r) => !only.length || only.includes(r.name))) {
      const handle = await run.start(client);
      await handle.result();
      const file = path.join(root, 'test', 'histories', `${run.name}.json`);
      // The temporal CLI writes the canonical proto-JSON that historyFromJSON reads back.
      const json = execFileSync(findTemporalBinary().path, ['workflow', 'show', '--address', stack.temporalAddress, '--workflow-id', handle.workflowId, '--output', 'json'], { maxBuffer: 64 << 20 });
      fs.writeFileSync(file, json);
      console.log(`recorded ${file}`);
    }
    await client.close();
  } finally {
    await stack.stop();
    fs.rmSync(home, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
