// Temporal over TLS and mTLS, for real: the dev server listens in plaintext only, so a Node TLS
// server (ALPN h2, certificates made with openssl here) terminates TLS in front of it and pipes the
// bytes through. A client, a real `relax worker` process and `relax doctor` connect through it with
// TLS and with mTLS; a client without a certificate is refused under mTLS. The option reader's rules
// and error messages are checked without a server.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, test } from 'node:test';
import { Connection } from '@temporalio/client';
import { RelaxClient } from '../client';
import { roleTaskQueue } from '../config/task-queues';
import { sdkConnectionOptions, temporalConnectionOptions, TemporalConnectionConfigError } from '../security/temporal-connection';
import { freshDatabase, sharedTemporalAddress, spawnRelax, waitFor, type TestDatabase } from './helpers';

const SERVER_NAME = 'relax-test-server';
let dir: string;
let files: Record<'ca' | 'serverCert' | 'serverKey' | 'clientCert' | 'clientKey' | 'apiKey', string>;
let tlsProxy: Proxy;
let mtlsProxy: Proxy;
let db: TestDatabase;

interface Proxy {
  address: string;
  /** The subject CN of each client certificate that completed a handshake (mTLS). */
  peers: string[];
  close(): Promise<void>;
}

function openssl(...args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

/** A CA, a server certificate for SERVER_NAME and 127.0.0.1, and a client certificate (P-256, v3 extensions rustls accepts). */
function makeCertificates(): void {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=relax-test-ca', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  for (const [name, cn, ext] of [
    ['server', SERVER_NAME, `subjectAltName=DNS:${SERVER_NAME},IP:127.0.0.1\nextendedKeyUsage=serverAuth`],
    ['client', 'relax-test-client', 'subjectAltName=DNS:relax-test-client\nextendedKeyUsage=clientAuth'],
  ]) {
    fs.writeFileSync(path.join(dir, `${name}.ext`), `basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n${ext}\n`);
    openssl('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`);
  }
  fs.writeFileSync(path.join(dir, 'api-key'), 'relax-test-secret-api-key-0123456789\n', { mode: 0o600 });
  const at = (f: string) => path.join(dir, f);
  files = { ca: at('ca.crt'), serverCert: at('server.crt'), serverKey: at('server.key'), clientCert: at('client.crt'), clientKey: at('client.key'), apiKey: at('api-key') };
}

/** TLS in front of the plaintext dev server; with `mutual`, only clients with a certificate from the CA get through. */
async function startProxy(mutual: boolean): Promise<Proxy> {
  const [host, port] = sharedTemporalAddress().split(':');
  const peers: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = tls.createServer(
    { key: fs.readFileSync(files.serverKey), cert: fs.readFileSync(files.serverCert), ca: fs.readFileSync(files.ca), requestCert: mutual, rejectUnauthorized: mutual, ALPNProtocols: ['h2'] },
    (client) => {
      if (mutual) peers.push(String(client.getPeerCertificate().subject?.CN));
      const upstream = net.connect(Number(port), host);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('error', () => undefined);
        s.on('close', () => {
          sockets.delete(s);
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    },
  );
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    peers,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-tls-'));
  makeCertificates();
  [tlsProxy, mtlsProxy, db] = await Promise.all([startProxy(false), startProxy(true), freshDatabase()]);
});
after(async () => {
  await Promise.all([tlsProxy?.close(), mtlsProxy?.close(), db?.close()]);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the options follow the temporal CLI variables; errors name the variable and the file', () => {
  assert.deepEqual(temporalConnectionOptions({}), { tls: false, summary: 'plaintext' });
  assert.deepEqual(temporalConnectionOptions({ TEMPORAL_TLS: '1' }), { tls: {}, summary: 'TLS (system roots)' });
  const ca = temporalConnectionOptions({ TEMPORAL_TLS_CA: files.ca, TEMPORAL_TLS_SERVER_NAME: SERVER_NAME });
  assert.equal(ca.summary, `TLS (server name ${SERVER_NAME}, CA file ${files.ca})`);
  assert.deepEqual(ca.tls && ca.tls.serverRootCACertificate, fs.readFileSync(files.ca));
  const m = temporalConnectionOptions({ TEMPORAL_TLS_CERT: files.clientCert, TEMPORAL_TLS_KEY: files.clientKey, TEMPORAL_TLS_CA: files.ca });
  assert.match(m.summary, /^mTLS \(client cert .*client\.crt, CA file /);
  assert.ok(m.tls && m.tls.clientCertPair?.key.length);

  // An API key turns TLS on, as the SDK does, unless TEMPORAL_TLS=0 says plaintext; never in the summary.
  const key = temporalConnectionOptions({ TEMPORAL_API_KEY_FILE: files.apiKey });
  assert.deepEqual(key.tls, {});
  assert.equal(key.apiKey, 'relax-test-secret-api-key-0123456789');
  assert.equal(key.summary, 'TLS (system roots), API key (from TEMPORAL_API_KEY_FILE)');
  assert.deepEqual(sdkConnectionOptions(temporalConnectionOptions({ TEMPORAL_API_KEY: 'k', TEMPORAL_TLS: '0' })), { tls: false, apiKey: 'k' });
  assert.equal(temporalConnectionOptions({ TEMPORAL_API_KEY: 'k', TEMPORAL_TLS: '0' }).summary, 'plaintext, API key (from TEMPORAL_API_KEY)');

  const fails = (env: NodeJS.ProcessEnv, pattern: RegExp) =>
    assert.throws(() => temporalConnectionOptions(env), (err: Error) => err instanceof TemporalConnectionConfigError && pattern.test(err.message));
  fails({ TEMPORAL_TLS_CA: '/nonexistent/ca.pem' }, /^TEMPORAL_TLS_CA=\/nonexistent\/ca\.pem: cannot read the file \(ENOENT\)/);
  fails({ TEMPORAL_TLS_CERT: files.clientCert }, /TEMPORAL_TLS_CERT is set but TEMPORAL_TLS_KEY is not/);
  fails({ TEMPORAL_TLS_KEY: files.clientKey }, /TEMPORAL_TLS_KEY is set but TEMPORAL_TLS_CERT is not/);
  fails({ TEMPORAL_TLS_CERT: files.clientCert, TEMPORAL_TLS_KEY: '/nonexistent/key.pem' }, /^TEMPORAL_TLS_KEY=\/nonexistent\/key\.pem: cannot read/);
  fails({ TEMPORAL_API_KEY_FILE: '/nonexistent/key' }, /^TEMPORAL_API_KEY_FILE=\/nonexistent\/key: cannot read/);
  fails({ TEMPORAL_API_KEY: 'a', TEMPORAL_API_KEY_FILE: files.apiKey }, /both TEMPORAL_API_KEY and TEMPORAL_API_KEY_FILE/);
  fails({ TEMPORAL_TLS: '0', TEMPORAL_TLS_CA: files.ca }, /TEMPORAL_TLS=0 \(plaintext\) contradicts TEMPORAL_TLS_CA/);
  fails({ TEMPORAL_TLS: 'maybe' }, /TEMPORAL_TLS=maybe: expected 1/);
});

test('a client connects through TLS (server CA and name); an API key rides along', async () => {
  const security = temporalConnectionOptions({ TEMPORAL_TLS_CA: files.ca, TEMPORAL_TLS_SERVER_NAME: SERVER_NAME, TEMPORAL_API_KEY_FILE: files.apiKey });
  const client = await RelaxClient.connect(tlsProxy.address, 'default', security);
  try {
    const info = await client.client.workflowService.getSystemInfo({});
    assert.ok(info.capabilities, 'the dev server answered through the TLS proxy');
  } finally {
    await client.close();
  }
  // Plaintext against the TLS port fails (the error names what was tried).
  await assert.rejects(RelaxClient.connect(tlsProxy.address, 'default', temporalConnectionOptions({})), /cannot reach Temporal at 127\.0\.0\.1:\d+ \(plaintext\)/);
});

test('under mTLS a client with the certificate connects and one without is refused', async () => {
  const withCert = temporalConnectionOptions({ TEMPORAL_TLS_CA: files.ca, TEMPORAL_TLS_SERVER_NAME: SERVER_NAME, TEMPORAL_TLS_CERT: files.clientCert, TEMPORAL_TLS_KEY: files.clientKey });
  const client = await RelaxClient.connect(mtlsProxy.address, 'default', withCert);
  try {
    await client.client.workflowService.getSystemInfo({});
  } finally {
    await client.close();
  }
  assert.ok(mtlsProxy.peers.includes('relax-test-client'), `the proxy saw the client certificate: ${mtlsProxy.peers}`);
  const noCert = temporalConnectionOptions({ TEMPORAL_TLS_CA: files.ca, TEMPORAL_TLS_SERVER_NAME: SERVER_NAME });
  await assert.rejects(Connection.connect({ address: mtlsProxy.address, connectTimeout: 3_000, ...sdkConnectionOptions(noCert) }));
});

test('a real relax worker polls through mTLS (flags), and relax doctor reports mTLS and the API key source, never the key', async () => {
  const flags = ['--tls-ca', files.ca, '--tls-server-name', SERVER_NAME, '--tls-cert', files.clientCert, '--tls-key', files.clientKey];
  const env = { TEMPORAL_ADDRESS: mtlsProxy.address, DATABASE_URL: db.url };
  const worker = spawnRelax(['worker', '--role', 'rollout', '--device', 'cpu', ...flags], env);
  try {
    const ready = await worker.waitForLine(/^relax worker ready: (\S+)/, 60_000);
    const identity = /^relax worker ready: (\S+)/.exec(ready)![1];
    const security = temporalConnectionOptions({ TEMPORAL_TLS_CA: files.ca, TEMPORAL_TLS_SERVER_NAME: SERVER_NAME, TEMPORAL_TLS_CERT: files.clientCert, TEMPORAL_TLS_KEY: files.clientKey });
    const client = await RelaxClient.connect(mtlsProxy.address, 'default', security);
    try {
      const pollers = await waitFor('the worker polling the rollout queue', async () => {
        const r = await client.client.workflowService.describeTaskQueue({ namespace: 'default', taskQueue: { name: roleTaskQueue('rollout') }, taskQueueType: 2 });
        return r.pollers?.some((p) => p.identity === identity) ? r.pollers : undefined;
      }, 20_000);
      assert.ok(pollers.length >= 1);
    } finally {
      await client.close();
    }
  } finally {
    await worker.stop();
  }

  const doctor = spawnRelax(['doctor', ...flags, '--api-key-file', files.apiKey], { ...env, RELAX_HOME: '/nonexistent-relax-home' });
  await doctor.exited;
  const text = doctor.output.join('\n');
  assert.match(text, new RegExp(`^ok\\s+temporal server\\s+${mtlsProxy.address.replace(/\./g, '\\.')}, mTLS \\(client cert .*client\\.crt, server name ${SERVER_NAME}, CA file .*ca\\.crt\\), API key \\(from TEMPORAL_API_KEY_FILE\\), namespace default`, 'm'), text);
  assert.doesNotMatch(text, /relax-test-secret-api-key/);

  // A certificate without its key: the worker says which variable is missing.
  const broken = spawnRelax(['worker', '--role', 'rollout', '--device', 'cpu', '--tls-cert', files.clientCert], env);
  assert.equal(await broken.exited, 1);
  assert.match(broken.output.join('\n'), /TEMPORAL_TLS_CERT is set but TEMPORAL_TLS_KEY is not/);
});
