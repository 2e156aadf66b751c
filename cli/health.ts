// `relax health`: the health manager's view (workflows/health-manager.ts) as a table: each role's
// workers, external engines, running runs' step times, the disk, open problems and recent actions.
import type { Command } from 'commander';
import { RelaxClient } from '../client';
import type { HealthStatus } from '../workflows/health-manager';
import { plainTable } from './table';
import { outputOption, wantsJson } from './config-args';

export function formatHealth(status: HealthStatus & { execution: string }, actions = 10): string {
  const r = status.lastReport;
  const lines = [`health manager: ${status.execution.toLowerCase()}, every ${status.config.interval_secs} s; ${status.open.length ? `open: ${status.open.join(', ')}` : 'no open problem'}`];
  if (r) {
    const roles = r.roles.map((x) => [x.role, String(x.slots), String(x.up), x.down.join(',') || '-', x.hung.join(',') || '-']);
    lines.push(`checked ${r.at}`, plainTable(roles, ['ROLE', 'WORKERS', 'UP', 'DOWN/STARTING', 'NOT POLLING']));
    for (const e of r.engines) lines.push(`engine ${e.engineId} ${e.url}: ${e.ok ? 'answers' : `DOES NOT ANSWER (${e.problem})`}`);
    for (const run of r.runs) lines.push(`run ${run.runId}: last step ${run.lastStepSecsAgo.toFixed(0)} s ago, median step ${run.medianStepSecs.toFixed(1)} s${run.stalled ? '  STALLED' : ''}`);
    if (r.disk) lines.push(`disk: ${r.disk.freeMb} MiB free in ${r.disk.path}${r.disk.low ? '  LOW' : ''}`);
  }
  const recent = status.actions.slice(-actions);
  if (recent.length) lines.push('recent actions:', ...recent.map((a) => `  ${a.at}  ${a.action}${a.target ? ` ${a.target}` : ''}: ${a.reason}`));
  return lines.join('\n');
}

export function registerHealthCommand(program: Command): void {
  program
    .command('health')
    .description("the health manager's last check (workers per role, external engines, runs' step times, disk), open problems and recent actions")
    .addOption(outputOption())
    .option('--json', 'the same as --output json: the whole status as JSON')
    .action(async (o: { json?: boolean; output: string }) => {
      const client = await RelaxClient.connect();
      try {
        const status = await client.rollout.healthManager();
        console.log(wantsJson(o) ? JSON.stringify(status, null, 2) : formatHealth(status));
      } finally {
        await client.close();
      }
    });
}
