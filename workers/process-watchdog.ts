// A tiny Node wrapper that runs a program we cannot change (the `temporal` binary) as its child and
// ends it when the wrapper's parent goes away, even by SIGKILL: the parent spawns this file with an
// IPC channel, and the channel closing ('disconnect') is the parent's death. Node has no
// prctl(PR_SET_PDEATHSIG), and a pipe's EOF works on every OS. Usage (by workers/temporal-server.ts):
//   node process-watchdog.js <program> [args...]   (spawned with stdio [.., .., .., 'ipc'])
// It reports {pid} of the program, forwards SIGTERM/SIGINT to it, and reports {exit} before it exits.
import { spawn } from 'node:child_process';

/** What the watchdog sends its parent over the IPC channel. */
export type WatchdogMessage = { pid: number } | { exit: { code: number | null; signal: NodeJS.Signals | null } };

const KILL_GRACE_MS = 5_000;

function main(): void {
  const [program, ...args] = process.argv.slice(2);
  if (!program || !process.send) {
    console.error('process-watchdog: run me with a program and an IPC channel (spawn stdio [..., "ipc"])');
    process.exit(2);
  }
  // The program writes straight into our stdout/stderr pipes, which the parent reads.
  const child = spawn(program, args, { stdio: ['ignore', 'inherit', 'inherit'] });
  let ending = false;
  const end = (signal: NodeJS.Signals) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    if (ending) return;
    ending = true;
    setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS).unref();
  };
  process.on('SIGTERM', () => end('SIGTERM'));
  process.on('SIGINT', () => end('SIGTERM'));
  // The parent died (or closed the channel): take the program with us.
  process.on('disconnect', () => end('SIGTERM'));
  child.once('error', (err) => {
    console.error(`process-watchdog: cannot start ${program}: ${err.message}`);
    process.exit(127);
  });
  child.once('spawn', () => process.send?.({ pid: child.pid! } satisfies WatchdogMessage));
  child.once('exit', (code, signal) => {
    const exitCode = code ?? 1;
    if (process.connected) process.send!({ exit: { code, signal } } satisfies WatchdogMessage, () => process.exit(exitCode));
    else process.exit(exitCode);
  });
}

if (require.main === module) main();
