// `relax dev` as a supervisor, with real processes: stack.json is 0600 and the printed database URL
// is masked; a port held by another process is refused, naming the port and the pid (and a Temporal
// child that cannot bind is never taken for up); a worker killed again and again comes back after
// growing delays (1 s, 2 s, 4 s); a Temporal server killed with SIGKILL comes back on the same port
// and the workers serve a new workflow through it; and after `kill -9` of relax dev itself, every
// process it started is gone within seconds.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Client, Connection, WorkflowFailedError } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { freePort } from '../workers/ports';
import { RestartBackoff, restartDelayMs } from '../workers/supervisor';
import { startTemporalServer } from '../workers/temporal-server';
import { spawnRelax, uniqueId, waitFor, type TestProcess } from './helpers';

interface StackJson {
  temporalAddress: string;
  databaseUrl: string;
  pid: number;
  children: { temporal?: number; temporalWatchdog?: number; workers: Record<string, number[]> };
}

let home: string;
let temporalPort: number;
let dev: TestProcess;
const extra: TestProcess[] = [];
const env = { TEMPORAL_ADDRESS: '', DATABASE_URL: '' };

const stackFile = () => path.join(home, 'stack.json');
const readStack = (): StackJson => JSON.parse(fs.readFileSync(stackFile(), 'utf8'));

/** Alive and not a zombie (an orphan nobody reaped yet counts as gone). */
function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Every process whose parent chain leads to `root`. */
function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      parent.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  let frontier = [root];
  while (frontier.length) {
    const next = [...parent].filter(([, ppid]) => frontier.includes(ppid)).map(([pid]) => pid);
    found.push(...next);
    frontier = next;
  }
  return found;
}

/** True once the rollout worker with this pid polls relax-rollout on the stack's Temporal server. */
async function pollsRollout(pid: number): Promise<true | undefined> {
  const connection = await Connection.connect({ address: readStack().temporalAddress });
  try {
    const { pollers } = await connection.workflowService.describeTaskQueue({
      namespace: 'default',
      taskQueue: { name: 'relax-rollout' },
      taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    });
    return pollers?.some((p) => p.identity?.includes(`:${pid}:`)) ? true : undefined;
  } finally {
    await connection.close();
  }
}

before(async () => {
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-supervisor-'));
  temporalPort = await freePort();
  // A stack.json left world-readable by an older version: relax dev must replace it with a 0600 one.
  fs.writeFileSync(stackFile(), '{}', { mode: 0o644 });
  // A file an older version left readable and writable by everyone: relax dev makes it private.
  fs.writeFileSync(path.join(home, 'left-by-an-older-version'), 'x');
  fs.chmodSync(path.join(home, 'left-by-an-older-version'), 0o666);
  fs.chmodSync(home, 0o755);
  dev = spawnRelax(['dev', '--data-dir', home, '--temporal-port', String(temporalPort), '--ui-port', '0', '--train-workers', '0', '--reference-workers', '0', '--judge-workers', '0', '--api-port', '0', '--quiet'], env);
  await dev.waitForLine(/^Press Ctrl-C to stop/, 80_000);
});

after(async () => {
  await Promise.all([dev, ...extra].map((p) => p.stop('SIGKILL')));
  fs.rmSync(home, { recursive: true, force: true });
});

test('restart delays double from 1 s up to 30 s and start over after a minute up', () => {
  assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 20].map((n) => restartDelayMs(n)), [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
  const backoff = new RestartBackoff();
  assert.deepEqual([100, 100, 100].map((up) => backoff.next(up).delayMs), [1_000, 2_000, 4_000]);
  assert.deepEqual(backoff.next(61_000), { delayMs: 1_000, restart: 1 });
});

test('stack.json is 0600 and the printed database URL hides the password', () => {
  assert.equal(fs.statSync(stackFile()).mode & 0o777, 0o600);
  const stack = readStack();
  assert.equal(stack.pid, dev.child.pid);
  const password = new URL(stack.databaseUrl).password;
  const shown = dev.output.find((l) => l.trim().startsWith('Database:'));
  assert.ok(shown, 'relax dev prints the database');
  if (password) {
    assert.ok(shown.includes(':***@'), `masked: ${shown}`);
    for (const line of dev.output) assert.ok(!line.includes(password), `a printed line shows the password: ${line}`);
  }
});

test('a port held by another process is refused, naming the port and its pid', async () => {
  // It answers nothing: every connection is closed at once (an open one would keep this process up).
  const held = net.createServer((socket) => socket.destroy());
  const port = await freePort();
  await new Promise<void>((resolve) => held.listen(port, '127.0.0.1', resolve));
  try {
    const other = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-supervisor-2-'));
    const attempts = [
      { port, owner: process.pid },
      { port: temporalPort, owner: readStack().children.temporal }, // the first stack's Temporal server
    ];
    for (const a of attempts) {
      const second = spawnRelax(['dev', '--data-dir', other, '--temporal-port', String(a.port), '--ui-port', '0', '--api-port', '0', '--quiet'], env);
      extra.push(second);
      const code = await second.exited;
      assert.notEqual(code, 0);
      const message = second.output.join('\n');
      assert.match(message, new RegExp(`--temporal-port ${a.port}: port ${a.port} is held by pid ${a.owner}\\b`));
      assert.ok(!message.includes('is up'), message);
    }
    assert.equal(fs.existsSync(path.join(other, 'stack.json')), false);
    fs.rmSync(other, { recursive: true, force: true });
  } finally {
    held.close();
  }
});

test('a Temporal child that cannot serve its port is never reported up: the start fails with its output', async () => {
  // It answers nothing: every connection is closed at once (an open one would keep this process up).
  const held = net.createServer((socket) => socket.destroy());
  const port = await freePort();
  await new Promise<void>((resolve) => held.listen(port, '127.0.0.1', resolve));
  try {
    const err = await startTemporalServer({ port, startTimeoutMs: 30_000 }).then(() => undefined, (e: Error) => e);
    assert.ok(err, 'startTemporalServer resolved although another process holds the port');
    assert.match(err.message, new RegExp(`did not start on 127\\.0\\.0\\.1:${port}: (the server process exited|port ${port} is served by pid ${process.pid})`));
  } finally {
    held.close();
  }
});

test('a Temporal server killed with SIGKILL comes back on its port, and workflows run through it', async () => {
  const before = readStack();
  process.kill(before.children.temporal!, 'SIGKILL');
  await dev.waitForLine(/Temporal dev server restarted on/, 40_000);
  const now = readStack();
  assert.equal(now.temporalAddress, before.temporalAddress);
  assert.ok(now.children.temporal && now.children.temporal !== before.children.temporal && alive(now.children.temporal));

  // The control worker (same process, reconnected by itself) runs the workflow: it rejects the config.
  const connection = await Connection.connect({ address: now.temporalAddress });
  try {
    const client = new Client({ connection });
    const handle = await client.workflow.start('trainingRun', { taskQueue: 'relax-control', workflowId: uniqueId('after-restart'), args: [{ no_such_field: 1 }] });
    const err = await handle.result().then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof WorkflowFailedError, String(err));
    assert.match(String(err.cause?.message), /no_such_field/);
  } finally {
    await connection.close();
  }
});

test('a worker killed again and again is restarted after growing delays', async () => {
  const delays: number[] = [];
  for (let kill = 1; kill <= 3; kill++) {
    const [pid] = readStack().children.workers.rollout;
    const killedAt = Date.now();
    process.kill(pid, 'SIGKILL');
    const line = await dev.waitForLine(new RegExp(`restarting \\[rollout#0\\] in (\\d+) s \\(restart ${kill}\\)`), 20_000);
    const delayS = Number(/in (\d+) s/.exec(line)![1]);
    delays.push(delayS);
    const replacement = await waitFor('the replacement rollout worker', async () => {
      const now = readStack().children.workers.rollout?.[0];
      return now !== undefined && now !== pid ? now : undefined;
    }, 30_000, 50);
    assert.ok(Date.now() - killedAt >= delayS * 1000 - 50, `restart ${kill} waited its ${delayS} s`);
    assert.ok(alive(replacement));
    if (kill === 3) await waitFor('the last replacement to poll its task queue', () => pollsRollout(replacement), 40_000, 250);
  }
  assert.deepEqual(delays, [1, 2, 4]);
});

test('no file or directory under the data directory is readable or writable by others (RELAX_UMASK 077)', () => {
  const open: string[] = [];
  const walk = (p: string): number => {
    // The stack is running: a file may go between listing and stat (sqlite's temporal.db-journal did in CI).
    const st = fs.lstatSync(p, { throwIfNoEntry: false });
    if (!st || st.isSymbolicLink()) return 0;
    if ((st.mode & 0o077) !== 0) open.push(`${path.relative(home, p) || '.'} ${(st.mode & 0o777).toString(8)}`);
    const names = st.isDirectory() ? ((): string[] => {
      try {
        return fs.readdirSync(p);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
        throw err;
      }
    })() : [];
    return 1 + names.reduce((n, name) => n + walk(path.join(p, name)), 0);
  };
  const seen = walk(home);
  // The embedded database (hundreds of files), the Temporal dev server's, the logs, the API token, stack.json.
  assert.ok(seen > 100 && fs.existsSync(path.join(home, 'pglite')), `walked ${seen} entries`);
  assert.deepEqual(open, [], 'group or other bits set');
  assert.equal(fs.statSync(home).mode & 0o777, 0o700);
  assert.equal(fs.statSync(path.join(home, 'left-by-an-older-version')).mode & 0o777, 0o600, 'an older 0666 file was made private');
});

test('after kill -9 of relax dev, every process it started exits within seconds', async () => {
  const stack = readStack();
  const recorded = [stack.children.temporal!, stack.children.temporalWatchdog!, ...Object.values(stack.children.workers).flat()];
  const started = new Set([...recorded, ...descendants(dev.child.pid!)]);
  assert.ok(started.size >= 4, `temporal, its watchdog and 2 workers: ${[...started]}`);
  for (const pid of recorded) assert.ok(alive(pid), `pid ${pid} from stack.json runs; output:\n${dev.output.filter((l) => l.startsWith("[relax]")).join("\n")}`);
  const killedAt = Date.now();
  await dev.stop('SIGKILL');
  await waitFor('every child of relax dev to exit', async () => ([...started].some(alive) ? undefined : true), 15_000, 100);
  const goneS = (Date.now() - killedAt) / 1000;
  console.log(`[supervisor] ${started.size} children gone ${goneS.toFixed(1)} s after kill -9 of relax dev`);
  assert.ok(goneS < 10);
});
