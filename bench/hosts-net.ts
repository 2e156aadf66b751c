// Hosts with real network boundaries on one Linux machine, for `relax bench hosts`: each host is a
// network namespace (`ip netns`, as root) with its own loopback and one veth link to a bridge in the
// machine's own namespace, where the bench itself sits as a client. Processes run in a host with
// `ip netns exec`, so all they share with the other hosts is that network: no loopback, and no
// directory unless one is handed to several (the bench gives each its own). A host is cut off by
// taking its link down (packets are dropped, as when a cable or a switch port fails: no reset reaches
// either side) and comes back when it is brought up again.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export interface NetHost {
  name: string;
  /** The network namespace. */
  ns: string;
  /** Its address on the bridge. */
  ip: string;
  /** The host end of its link, in the machine's namespace (what a cut-off takes down). */
  link: string;
}

const ip = (...args: string[]): string => execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** Whether this process can make network namespaces (root, and iproute2 installed); the reason when not. */
export function netnsUnavailable(): string | undefined {
  if (process.platform !== 'linux') return `network namespaces are Linux only (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return 'making network namespaces needs root (run the bench as root, or in CI)';
  try {
    ip('-V');
  } catch {
    return 'the `ip` command (Debian package iproute2) is not installed';
  }
  return undefined;
}

/** A bridge and one namespace per host name, made at create() and removed by destroy(). */
export class NetworkHosts {
  readonly hosts = new Map<string, NetHost>();
  private readonly bridge: string;
  /** The bench's own address on the bridge. */
  readonly clientIp: string;
  private readonly subnet: string;

  private constructor(private readonly tag: string) {
    this.bridge = `rxb${tag}`;
    // 10.200-249.x.0/24, chosen from the tag so two benches on one machine do not collide.
    const n = parseInt(tag, 16);
    this.subnet = `10.${200 + (n % 50)}.${Math.floor(n / 50) % 256}`;
    this.clientIp = `${this.subnet}.254`;
  }

  /** Makes the bridge and one host per name, each reachable from the others and from the bench. */
  static create(names: readonly string[]): NetworkHosts {
    const why = netnsUnavailable();
    if (why) throw new Error(why);
    const net = new NetworkHosts(randomBytes(2).toString('hex'));
    try {
      ip('link', 'add', net.bridge, 'type', 'bridge');
      ip('addr', 'add', `${net.clientIp}/24`, 'dev', net.bridge);
      ip('link', 'set', net.bridge, 'up');
      names.forEach((name, i) => net.addHost(name, i + 1));
    } catch (err) {
      net.destroy();
      throw err;
    }
    return net;
  }

  private addHost(name: string, index: number): void {
    const host: NetHost = { name, ns: `rx${this.tag}-${name}`, ip: `${this.subnet}.${index}`, link: `rx${this.tag}h${index}` };
    ip('netns', 'add', host.ns);
    this.hosts.set(name, host);
    ip('netns', 'exec', host.ns, 'ip', 'link', 'set', 'lo', 'up');
    ip('link', 'add', host.link, 'type', 'veth', 'peer', 'name', `${host.link}p`);
    ip('link', 'set', `${host.link}p`, 'netns', host.ns);
    ip('netns', 'exec', host.ns, 'ip', 'link', 'set', `${host.link}p`, 'name', 'eth0');
    ip('netns', 'exec', host.ns, 'ip', 'addr', 'add', `${host.ip}/24`, 'dev', 'eth0');
    ip('netns', 'exec', host.ns, 'ip', 'link', 'set', 'eth0', 'up');
    ip('link', 'set', host.link, 'master', this.bridge);
    ip('link', 'set', host.link, 'up');
  }

  host(name: string): NetHost {
    const h = this.hosts.get(name);
    if (!h) throw new Error(`no host "${name}" (hosts: ${[...this.hosts.keys()].join(', ')})`);
    return h;
  }

  /** Starts `argv` inside host `name` (`ip netns exec` execs it: the child's pid is the program's). */
  spawn(name: string, argv: readonly string[], env: NodeJS.ProcessEnv): ChildProcess {
    return spawn('ip', ['netns', 'exec', this.host(name).ns, ...argv], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /** Takes host `name`'s link down: nothing reaches it or leaves it until restore(). */
  cut(name: string): void {
    ip('link', 'set', this.host(name).link, 'down');
  }

  restore(name: string): void {
    ip('link', 'set', this.host(name).link, 'up');
  }

  /** Removes the namespaces (their links go with them) and the bridge; safe to call twice. */
  destroy(): void {
    for (const h of this.hosts.values()) {
      try {
        ip('netns', 'del', h.ns);
      } catch {
        // already gone
      }
    }
    try {
      ip('link', 'del', this.bridge);
    } catch {
      // already gone
    }
  }
}
