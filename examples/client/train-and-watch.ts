// The typed client end to end (docs/client.md): start a run, watch its progress, read its result,
// metric series and published versions, and find it in the run list. It needs a running stack
// (`relax dev`, or TEMPORAL_ADDRESS and DATABASE_URL set) and takes an optional run config as JSON:
//   node dist/examples/client/train-and-watch.js '{"task":"add2","train":{"steps":20,"eval_every":10}}'
import { RelaxClient, RunFailedError, type RunConfigInput } from 'relax/client';

async function main(): Promise<void> {
  const config: RunConfigInput = process.argv[2] ? JSON.parse(process.argv[2]) : { task: 'add2', train: { steps: 20, eval_every: 10 } };
  const client = await RelaxClient.connect();
  try {
    const run = await client.start(config);
    console.log(`started ${run.runId}`);

    // One value per change of step, status or evaluation, until the run closes.
    for await (const p of run.watch({ intervalMs: 500 })) {
      const accuracy = p.lastAccuracy === undefined ? '-' : `${(p.lastAccuracy * 100).toFixed(1)}%`;
      console.log(`progress: ${p.status} step ${p.step}/${p.totalSteps} v${p.policyVersion} held-out ${accuracy}`);
    }

    const result = await run.result();
    console.log(`result: ${result.steps} steps, policy v${result.policyVersion}, held-out accuracy ${result.evalAccuracy ?? '-'}`);

    // Every series the run recorded (name -> [step, value] pairs), or only the named ones.
    const metrics = await client.metrics(run.runId);
    console.log(`metrics: ${Object.entries(metrics).map(([name, points]) => `${name} (${points.length} point${points.length === 1 ? '' : 's'})`).join(', ')}`);
    const { eval_accuracy: accuracy = [] } = await client.metrics(run.runId, { names: ['eval_accuracy'] });
    console.log(`eval_accuracy: ${JSON.stringify(accuracy)}`);

    const versions = await client.checkpoints(run.runId);
    console.log(`checkpoints: ${versions.map((v) => `v${v.policyVersion}${v.prunedAt ? ' (pruned)' : ''}`).join(', ')}`);

    const listed = await client.list({ limit: 50 });
    console.log(`listed: ${listed.some((r) => r.runId === run.runId) ? 'yes' : 'no'}`);
  } finally {
    await client.close();
  }
}

main().catch((err: unknown) => {
  // A failed run's message is the workflow's cause chain (e.g. the unknown task it names).
  console.error(err instanceof RunFailedError ? err.message : err);
  process.exitCode = 1;
});
