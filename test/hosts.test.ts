// Relax across three hosts with only a network between them, CI-sized (`relax bench hosts` is the
// full figure): network namespaces made here as root (bench/hosts-net.ts), PostgreSQL, Temporal,
// SeaweedFS and the control worker on one, the train worker on a second, two rollout workers on a
// third, each host with its own RELAX_HOME. A clean run completes; a second run has the train host
// and then the rollout host cut off (link down 15 s, past the heartbeat timeout) and completes too,
// with no sample lost or trained twice, every version in the object store and no checkpoint file
// on a host outside its cache.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runHostsCheck } from '../bench/hosts';
import { netnsUnavailable } from '../bench/hosts-net';

test('three hosts, no shared filesystem: runs complete through cut-offs of the train and the rollout host, exactly once', async (t) => {
  assert.equal(netnsUnavailable(), undefined, 'this suite makes network namespaces: run it as root with iproute2 installed (CI does)');
  const report = await runHostsCheck({ steps: 6, cutoffs: 2, cutoffSeconds: 15, log: (line) => t.diagnostic(line) });
  t.diagnostic(JSON.stringify({ ...report, problems: report.problems.length }));
  assert.deepEqual(report.problems, []);
  assert.equal(report.hosts, 3);
  assert.equal(report.shared_filesystem, false);
  assert.equal(report.runs_completed, 2);
  assert.deepEqual(report.cut.map((c) => c.split('@')[0]), ['train', 'rollout']);
  for (const key of ['lost_samples', 'double_trained_samples', 'duplicate_versions', 'corrupt_checkpoints', 'stray_files'] as const) assert.equal(report[key], 0, key);
});
