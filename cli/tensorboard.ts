// `relax tensorboard <runId>`: where the run's TensorBoard event files are (as this machine's
// RELAX_HOME / RELAX_TENSORBOARD_DIR place them: config/environment.ts tensorboardDir) and the
// command that shows them (docs/monitoring.md#tensorboard).
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { PACKAGE_ROOT, tensorboardDir } from '../config/environment';

/** The project venv's tensorboard (`npm run setup -- --test-tools` installs it). */
const VENV_TENSORBOARD = path.join(PACKAGE_ROOT, '.venv', 'bin', 'tensorboard');

/** What `relax tensorboard` prints for the run: its log dir, how many event files it holds, the command. */
export function tensorboardLines(runId: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const dir = tensorboardDir(runId, env);
  if (!dir) throw new Error('RELAX_TENSORBOARD_DIR is off: workers write no TensorBoard files; unset it (or set a directory) before the run starts');
  const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.startsWith('events.out.tfevents.')).length : 0;
  const state = files ? `(${files} event file${files === 1 ? '' : 's'})` : '(no event file yet: the run has recorded no step on this machine, or its workers use another RELAX_HOME / RELAX_TENSORBOARD_DIR)';
  const lines = [`log dir: ${dir} ${state}`, `tensorboard --logdir ${dir}`];
  if (fs.existsSync(VENV_TENSORBOARD)) lines.push(`(the project's own: ${VENV_TENSORBOARD} --logdir ${dir})`);
  return lines;
}

export function registerTensorboardCommand(program: Command): void {
  program
    .command('tensorboard <runId>')
    .description("the run's TensorBoard log dir (scalars of every step, the config as text) and the command that shows it")
    .action((runId: string) => {
      for (const line of tensorboardLines(runId)) console.log(line);
    });
}
