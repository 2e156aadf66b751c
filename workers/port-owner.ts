// Which process listens on a TCP port, and whether a port is free: `relax dev` refuses ports another
// process holds (naming it) and checks its Temporal child is the one answering. Linux: the LISTEN
// sockets of /proc/net/tcp{,6} matched to /proc/<pid>/fd socket inodes (no tools needed; only our
// own user's processes are visible); elsewhere `lsof` when installed; else the pid is unknown.
// Hand-written: no maintained npm package maps a port to its pid without shelling out to lsof/ss.
import fs from 'node:fs';
import net from 'node:net';
import { execFileSync } from 'node:child_process';

/** True when nothing listens on host:port (we can bind it now). */
export function portIsFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** The pid listening on `port` (any local address), or undefined when it cannot be found. */
export function findPortOwner(port: number): number | undefined {
  if (fs.existsSync('/proc/net/tcp')) {
    const inodes = listeningInodes(port);
    if (inodes.size) return pidOfSocket(inodes);
  }
  return lsofOwner(port);
}

/** "port 7233 is held by pid 123 (temporal)" or "... by another process (pid unknown)". */
export function describePortOwner(port: number): string {
  const pid = findPortOwner(port);
  if (pid === undefined) return `port ${port} is held by another process (pid unknown)`;
  const name = processName(pid);
  return `port ${port} is held by pid ${pid}${name ? ` (${name})` : ''}`;
}

export function processName(pid: number): string | undefined {
  try {
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    return cmd.slice(0, 3).join(' ') || undefined;
  } catch {
    return undefined;
  }
}

function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== '0A') continue; // 0A = LISTEN
      const localPort = parseInt(f[1].split(':').pop() ?? '', 16);
      if (localPort === port && f[9] !== '0') inodes.add(f[9]);
    }
  }
  return inodes;
}

function pidOfSocket(inodes: Set<string>): number | undefined {
  const wanted = new Set([...inodes].map((i) => `socket:[${i}]`));
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = fs.readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue; // another user's process, or gone
    }
    for (const fd of fds) {
      try {
        if (wanted.has(fs.readlinkSync(`/proc/${entry}/fd/${fd}`))) return Number(entry);
      } catch {
        // closed meanwhile
      }
    }
  }
  return undefined;
}

function lsofOwner(port: number): number | undefined {
  try {
    const out = execFileSync('lsof', ['-nP', `-iTCP:${port}`, '-sTCP:LISTEN', '-t'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5_000 });
    const pid = Number(out.trim().split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
