// Failpoints, the named places in the workers where a chaos test freezes the process at a chosen
// moment. `relax bench chaos --set stops=N` freezes the trainer in the middle of publishing a
// version and a rollout worker in the middle of a weight sync with them. Off unless RELAX_FAILPOINTS_DIR is set, and then each is
// armed once by a file of its name in that directory: the first process to reach the place takes the
// file (an atomic rename to `<name>.taken-<pid>`, which tells the test who took it) and stops itself
// with SIGSTOP. What happens next is the test's: SIGCONT later, or never (relax dev's liveness check
// then kills and restarts the worker). With the variable unset a failpoint is one environment read;
// set, one rename attempt.
import fs from 'node:fs';
import path from 'node:path';
import { failpointsDir } from './environment-workers';

export const FAILPOINTS = {
  /** training/policy-versions.ts publishPolicyVersion: the version's files written, its registry row not yet. */
  'train.publish': 'the trainer has written a version and not yet registered it',
  /** rollout/policy-engine.ts atVersion: the new weights fetched, the engine not yet switched to them. */
  'rollout.sync': 'a rollout worker has fetched a version and not yet loaded it',
} as const;

export type FailpointName = keyof typeof FAILPOINTS;

/** The file a process leaves when it takes `name` (its pid after the dash). */
export const takenPrefix = (name: FailpointName) => `${name}.taken-`;

/** Stops this process (SIGSTOP) if `name` is armed and this process takes it; else returns at once. */
export function failpoint(name: FailpointName, dir = failpointsDir()): void {
  if (!dir) return;
  try {
    fs.renameSync(path.join(dir, name), path.join(dir, `${takenPrefix(name)}${process.pid}`));
  } catch {
    return; // not armed, or another process took it
  }
  process.kill(process.pid, 'SIGSTOP');
}
