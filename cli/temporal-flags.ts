// The Temporal connection flags of every relax command that connects to Temporal (`--tls`,
// `--tls-cert`, `--tls-key`, `--tls-ca`, `--tls-server-name`, `--api-key-file`). A flag sets the
// temporal CLI's environment variable of the same meaning before the command runs, so the one reader
// (config/temporal-connection.ts) sees flags and environment alike; flags win.
import type { Command } from 'commander';

/** The commands that open a Temporal connection (`serve`, `export`, `trace` read only the database). */
export const TEMPORAL_COMMANDS = ['worker', 'doctor', 'train', 'status', 'stop', 'pause', 'resume'];

const FLAGS: Array<{ flag: string; key: string; variable: string; help: string }> = [
  { flag: '--tls-cert <file>', key: 'tlsCert', variable: 'TEMPORAL_TLS_CERT', help: 'Temporal mTLS: client certificate (PEM) [TEMPORAL_TLS_CERT]' },
  { flag: '--tls-key <file>', key: 'tlsKey', variable: 'TEMPORAL_TLS_KEY', help: "Temporal mTLS: the client certificate's private key (PEM) [TEMPORAL_TLS_KEY]" },
  { flag: '--tls-ca <file>', key: 'tlsCa', variable: 'TEMPORAL_TLS_CA', help: "Temporal TLS: the server's root CA certificate (PEM) [TEMPORAL_TLS_CA]" },
  { flag: '--tls-server-name <name>', key: 'tlsServerName', variable: 'TEMPORAL_TLS_SERVER_NAME', help: 'Temporal TLS: server name to verify (SNI) [TEMPORAL_TLS_SERVER_NAME]' },
  { flag: '--api-key-file <file>', key: 'apiKeyFile', variable: 'TEMPORAL_API_KEY_FILE', help: 'Temporal API key, read from this file (enables TLS) [TEMPORAL_API_KEY_FILE, or TEMPORAL_API_KEY]' },
];

/** Sets the variables the given flag values stand for; returns `env`. */
export function applyTemporalFlags(values: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  if (values.tls === true) env.TEMPORAL_TLS = '1';
  for (const f of FLAGS) {
    const v = values[f.key];
    if (typeof v !== 'string' || v === '') continue;
    env[f.variable] = v;
    // A key file on the command line replaces a key in the environment rather than clashing with it.
    if (f.variable === 'TEMPORAL_API_KEY_FILE') delete env.TEMPORAL_API_KEY;
  }
  return env;
}

/** Adds the flags to each named subcommand of `program`. */
export function addTemporalFlags(program: Command, names: readonly string[] = TEMPORAL_COMMANDS): void {
  for (const command of program.commands) {
    if (!names.includes(command.name())) continue;
    command.option('--tls', 'connect to Temporal with TLS (system roots unless --tls-ca) [TEMPORAL_TLS=1]');
    for (const f of FLAGS) command.option(f.flag, f.help);
    command.hook('preAction', (_self, action) => {
      applyTemporalFlags(action.opts());
    });
  }
}
