// The Kubernetes manifests (deploy/kubernetes) cannot be applied here (no cluster), so this checks them
// two ways. Against the Kubernetes API: kubeconform, in strict mode (no unknown fields, no duplicate
// keys), validates every resource the kustomization lists against the JSON schemas of the Kubernetes
// releases scripts/test-tools.js installs (`npm run setup -- --test-tools`), and rejects a typo. Against
// the code, as test/deployment.test.ts does for docker-compose.yml: every variable the Relax pods get is
// one config/environment*.ts reads and parses with the code's own parsers; one Deployment per role of
// config/task-queues.ts with `relax worker`'s arguments; one GPU per train / rollout / reference / judge
// pod; the rollout pods' grace period covers RELAX_WORKER_SHUTDOWN_GRACE_MS; the API listens on its pod
// IP at the code's default port behind a ClusterIP Service; nothing is exposed (no LoadBalancer,
// NodePort, host port or host network); every pod runs as non-root; no shared volume; the secrets and
// addresses agree; the HPA reads the rollout task queue's backlog. Reads files only; starts nothing.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { DEFAULT_API_PORT } from '../cli/api';
import { objectStorageSettings, relaxEnvironment, rolloutConcurrency, taskQueuePrefix, workerShutdownGrace } from '../config/environment';
import { DEVICE_ROLES, OPTIONAL_ROLES, ROLES, roleTaskQueue } from '../config/task-queues';

const root = path.resolve(__dirname, '..', '..');
const dir = path.join(root, 'deploy', 'kubernetes');
const read = (p: string) => fs.readFileSync(path.join(root, p), 'utf8');
const tools = require(path.join(root, 'scripts', 'test-tools.js')) as { kubeconformPaths(): { bin: string; schemaLocation: string; kubernetesVersions: string[] }; KUBECONFORM_VERSION: string };

/** How many resources deploy/kubernetes holds: a resource added or dropped changes this on purpose. */
const EXPECTED_RESOURCES = 19;
/** The Relax images (kustomization.yaml's `images` replaces them): CPU for control and the API, CUDA for the device roles. */
const CPU_IMAGE = 'ghcr.io/relax/relax';
const GPU_IMAGE = 'ghcr.io/relax/relax-gpu';

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string }; secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string; key: string } };
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }>;
  ports?: Array<{ name?: string; containerPort: number; hostPort?: number }>;
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
  securityContext?: { allowPrivilegeEscalation?: boolean; readOnlyRootFilesystem?: boolean; capabilities?: { drop?: string[] } };
  volumeMounts?: Array<{ name: string; mountPath: string }>;
}
interface Volume {
  name: string;
  emptyDir?: { sizeLimit?: string };
  secret?: { secretName: string };
  configMap?: { name: string };
  persistentVolumeClaim?: unknown;
  hostPath?: unknown;
}
interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  volumes?: Volume[];
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number; seccompProfile?: { type: string } };
  enableServiceLinks?: boolean;
  hostNetwork?: boolean;
  terminationGracePeriodSeconds?: number;
}
interface Resource {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  data?: Record<string, string>;
  stringData?: Record<string, string>;
  // Each kind's spec, read where it is checked.
  spec?: any;
}

const kustomization = parse(fs.readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8')) as { namespace: string; resources: string[]; images: Array<{ name: string }> };
const files = kustomization.resources.map((f) => path.join(dir, f));
const resources: Resource[] = files.flatMap((file) =>
  parseAllDocuments(fs.readFileSync(file, 'utf8')).map((doc) => {
    assert.deepEqual(doc.errors, [], `${path.basename(file)} parses`);
    return doc.toJS() as Resource;
  }),
);
const find = (kind: string, name: string): Resource => {
  const r = resources.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(r, `${kind} ${name} exists`);
  return r;
};
const podSpecs = (): Array<[string, PodSpec]> =>
  resources.filter((r) => ['Deployment', 'StatefulSet', 'Job'].includes(r.kind)).map((r) => [`${r.kind} ${r.metadata.name}`, r.spec.template.spec as PodSpec]);
const isRelax = (c: Container) => c.image.startsWith(`${CPU_IMAGE}:`) || c.image.startsWith(`${GPU_IMAGE}:`);

function kubeconform(args: string[]) {
  const { bin, schemaLocation } = tools.kubeconformPaths();
  if (!fs.existsSync(bin)) throw new Error(`kubeconform is not installed at ${bin}: fix: \`npm run setup -- --test-tools\` (scripts/test-tools.js) installs it and the Kubernetes schemas`);
  const r = spawnSync(bin, ['-strict', '-summary', '-verbose', '-output', 'json', '-schema-location', schemaLocation, ...args], { encoding: 'utf8' });
  assert.ok(r.stdout, `kubeconform printed a report (stderr: ${r.stderr})`);
  const report = JSON.parse(r.stdout) as { resources: Array<{ filename: string; kind: string; name: string; status: string; msg: string }>; summary: Record<string, number> };
  return { status: r.status, report };
}

test('kubeconform --strict: every resource of deploy/kubernetes is valid against the Kubernetes API schemas', () => {
  const listed = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f) && f !== 'kustomization.yaml').sort();
  assert.deepEqual([...kustomization.resources].sort(), listed, 'kustomization.yaml lists every manifest of the folder');
  assert.equal(resources.length, EXPECTED_RESOURCES);
  for (const version of tools.kubeconformPaths().kubernetesVersions) {
    const { status, report } = kubeconform(['-kubernetes-version', version, ...files]);
    const bad = report.resources.filter((r) => r.status !== 'statusValid').map((r) => `${path.basename(r.filename)} ${r.kind} ${r.name}: ${r.status} ${r.msg}`);
    assert.deepEqual(bad, [], `Kubernetes ${version}: every resource valid`);
    assert.equal(status, 0);
    assert.equal(report.resources.length, EXPECTED_RESOURCES, `Kubernetes ${version}: every resource validated, none skipped`);
    assert.deepEqual(report.summary, { valid: EXPECTED_RESOURCES, invalid: 0, errors: 0, skipped: 0 });
  }
});

test('kubeconform --strict rejects a misspelt field and an unknown kind (the check can fail)', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-kubeconform-'));
  try {
    const broken = path.join(tmp, 'workers.yaml');
    fs.writeFileSync(broken, fs.readFileSync(path.join(dir, 'workers.yaml'), 'utf8').replace('terminationGracePeriodSeconds:', 'terminationGracePeriodSecond:'));
    const typo = kubeconform(['-kubernetes-version', tools.kubeconformPaths().kubernetesVersions[0], broken]);
    assert.equal(typo.status, 1);
    assert.deepEqual(typo.report.resources.filter((r) => r.status !== 'statusValid').map((r) => r.name), ['relax-rollout']);
    assert.match(typo.report.resources.find((r) => r.name === 'relax-rollout')!.msg, /terminationGracePeriodSecond/);
    const kustomize = kubeconform(['-kubernetes-version', tools.kubeconformPaths().kubernetesVersions[0], path.join(dir, 'kustomization.yaml')]);
    assert.equal(kustomize.status, 1, 'a kind without a schema is an error, not a skip');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

/** The environment a container gets, values resolved from the ConfigMaps and Secrets (fieldRefs as <path>). */
function containerEnv(c: Container): Record<string, string> {
  const env: Record<string, string> = {};
  const key = (kind: 'ConfigMap' | 'Secret', name: string, k: string) => {
    const r = find(kind, name);
    const v = (kind === 'ConfigMap' ? r.data : r.stringData)?.[k];
    assert.ok(v !== undefined, `${c.name}: ${kind} ${name} has the key ${k}`);
    return v;
  };
  for (const from of c.envFrom ?? []) {
    if (from.configMapRef) Object.assign(env, find('ConfigMap', from.configMapRef.name).data);
    if (from.secretRef) Object.assign(env, find('Secret', from.secretRef.name).stringData);
  }
  for (const e of c.env ?? []) {
    const ref = e.valueFrom;
    env[e.name] = e.value ?? (ref?.secretKeyRef ? key('Secret', ref.secretKeyRef.name, ref.secretKeyRef.key) : ref?.configMapKeyRef ? key('ConfigMap', ref.configMapKeyRef.name, ref.configMapKeyRef.key) : `<${ref?.fieldRef?.fieldPath}>`);
  }
  return env;
}

test('every variable a Relax pod gets is one config/environment*.ts reads, and parses there', () => {
  const configSource = fs
    .readdirSync(path.join(root, 'config'))
    .filter((f) => /^environment(?:-[\w-]+)?\.ts$/.test(f))
    .map((f) => read(path.join('config', f)))
    .join('\n');
  let checked = 0;
  for (const [where, spec] of podSpecs()) {
    for (const c of [...(spec.initContainers ?? []), ...spec.containers].filter(isRelax)) {
      const env = containerEnv(c);
      for (const name of Object.keys(env)) {
        // A variable only the manifest uses: Kubernetes expands $(NAME) in command and args (the API's --host $(POD_IP)).
        const forArgs = [...(c.command ?? []), ...(c.args ?? [])].some((a) => a.includes(`$(${name})`));
        if (forArgs) assert.ok(c.env?.find((e) => e.name === name)?.valueFrom?.fieldRef, `${where}: ${name} comes from the downward API`);
        else assert.match(configSource, new RegExp(`\\b${name}\\b`), `${where}: ${name} is not a variable config/environment*.ts reads`);
        checked++;
      }
      // The code's own parsers accept the values (each throws naming the variable otherwise).
      assert.doesNotThrow(() => [relaxEnvironment(env), objectStorageSettings(env), workerShutdownGrace(env), rolloutConcurrency(env), taskQueuePrefix(env)], where);
      assert.ok(relaxEnvironment(env).databaseUrl, `${where}: DATABASE_URL`);
      assert.equal(relaxEnvironment(env).home, env.RELAX_HOME, `${where}: RELAX_HOME is absolute`);
    }
  }
  assert.ok(checked > 0);
});

test('one Deployment per role of config/task-queues.ts, running `relax worker` with one GPU for each device role', () => {
  const workers = resources.filter((r) => r.kind === 'Deployment' && r.spec.template.spec.containers[0].args?.[0] === 'worker');
  const roleOf = (r: Resource) => (r.spec.template.spec as PodSpec).containers[0].args![2];
  assert.deepEqual(workers.map(roleOf).sort(), [...ROLES].sort(), 'the roles match the code');
  for (const w of workers) {
    const role = roleOf(w) as (typeof ROLES)[number];
    const spec = w.spec.template.spec as PodSpec;
    assert.equal(spec.containers.length, 1);
    const [c] = spec.containers;
    assert.equal(w.metadata.name, `relax-${role}`);
    assert.deepEqual(c.command, ['node', 'bin/relax.js']);
    const device = DEVICE_ROLES.includes(role);
    assert.deepEqual(c.args, ['worker', '--role', role, ...(device ? ['--device', 'cuda:0'] : [])], `${role}: the pod's one GPU is cuda:0`);
    assert.ok(c.image.startsWith(`${device ? GPU_IMAGE : CPU_IMAGE}:`), `${role}: ${c.image}`);
    if (device) {
      assert.equal(Number(c.resources?.limits?.['nvidia.com/gpu']), 1, `${role}: one GPU per worker process`);
      const noSurge = w.spec.strategy?.type === 'Recreate' || w.spec.strategy?.rollingUpdate?.maxSurge === 0;
      assert.ok(noSurge, `${role}: an update stops a pod before starting its successor (no spare GPU needed)`);
    } else {
      assert.equal(c.resources?.limits?.['nvidia.com/gpu'], undefined, `${role} is CPU only`);
    }
    assert.equal(w.spec.replicas, (OPTIONAL_ROLES as readonly string[]).includes(role) ? 0 : 1, `${role}: replicas`);
  }
  // Rollout: a scaled-in pod finishes its rollouts within the grace the code is given, inside Kubernetes' own.
  const rollout = find('Deployment', 'relax-rollout').spec.template.spec as PodSpec;
  const graceMs = workerShutdownGrace(containerEnv(rollout.containers[0])).shutdownGraceMs;
  assert.equal(graceMs, 120_000, 'RELAX_WORKER_SHUTDOWN_GRACE_MS as docker-compose.yml sets it');
  assert.ok(rollout.terminationGracePeriodSeconds! > graceMs! / 1000, `terminationGracePeriodSeconds ${rollout.terminationGracePeriodSeconds} > ${graceMs! / 1000}`);
  assert.ok(rolloutConcurrency(containerEnv(rollout.containers[0])).maxConcurrentActivityTaskExecutions, 'a bounded rollout concurrency, so work beyond capacity shows as backlog');
  for (const image of [CPU_IMAGE, GPU_IMAGE]) assert.ok(kustomization.images.some((i) => i.name === image), `kustomization.yaml replaces ${image}`);
});

test('the API listens on its pod IP at the default port, behind a ClusterIP Service; nothing is exposed', () => {
  const api = find('Deployment', 'relax-api').spec.template.spec as PodSpec;
  const [c] = api.containers;
  assert.deepEqual(c.args, ['api', '--host', '$(POD_IP)', '--port', String(DEFAULT_API_PORT)]);
  assert.equal(c.env?.find((e) => e.name === 'POD_IP')?.valueFrom?.fieldRef?.fieldPath, 'status.podIP');
  assert.deepEqual(c.ports?.map((p) => p.containerPort), [DEFAULT_API_PORT]);
  const service = find('Service', 'relax-api').spec;
  assert.equal(service.type, 'ClusterIP');
  assert.deepEqual(service.ports.map((p: { port: number; targetPort: string }) => [p.port, p.targetPort]), [[DEFAULT_API_PORT, c.ports![0].name]]);
  // The bearer token is a file from its Secret.
  const tokenFile = containerEnv(c).RELAX_API_TOKEN_FILE;
  const mount = c.volumeMounts?.find((m) => tokenFile.startsWith(`${m.mountPath}/`));
  assert.equal(api.volumes?.find((v) => v.name === mount?.name)?.secret?.secretName, 'relax-api-token');
  assert.ok(find('Secret', 'relax-api-token').stringData!.token.length >= 16);
  for (const r of resources) {
    if (r.kind === 'Service') assert.ok(!['LoadBalancer', 'NodePort'].includes(r.spec.type), `Service ${r.metadata.name} is ${r.spec.type}`);
    assert.ok(!['Ingress', 'Gateway', 'HTTPRoute'].includes(r.kind), `${r.kind} ${r.metadata.name}`);
    if (r.kind !== 'Namespace') assert.equal(r.metadata.namespace ?? kustomization.namespace, 'relax', `${r.kind} ${r.metadata.name} in namespace relax`);
  }
  for (const [where, spec] of podSpecs()) {
    assert.ok(!spec.hostNetwork, `${where}: no host network`);
    for (const c2 of spec.containers) for (const p of c2.ports ?? []) assert.equal(p.hostPort, undefined, `${where}: no host port`);
  }
});

/** A Kubernetes quantity in MiB (the suffixes used here). */
const mib = (q: string) => Number(q.replace(/(Gi|Mi)$/, '')) * (q.endsWith('Gi') ? 1024 : 1);

test('every pod runs as non-root, locked down; Relax pods keep RELAX_HOME on an emptyDir and share no volume', () => {
  for (const [where, spec] of podSpecs()) {
    assert.equal(spec.securityContext?.runAsNonRoot, true, `${where}: runAsNonRoot`);
    assert.ok((spec.securityContext?.runAsUser ?? 0) > 0, `${where}: a numeric non-root user (the images name none)`);
    assert.equal(spec.securityContext?.seccompProfile?.type, 'RuntimeDefault', `${where}: seccomp`);
    for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
      assert.equal(c.securityContext?.allowPrivilegeEscalation, false, `${where}/${c.name}: no privilege escalation`);
      assert.equal(c.securityContext?.readOnlyRootFilesystem, true, `${where}/${c.name}: read-only root filesystem`);
      assert.deepEqual(c.securityContext?.capabilities?.drop, ['ALL'], `${where}/${c.name}: no capabilities`);
    }
    assert.ok(!spec.volumes?.some((v) => v.hostPath), `${where}: no hostPath`);
    if (!spec.containers.some(isRelax)) continue;
    // Service links would set <SERVICE>_PORT variables: a Service named relax-metrics would set RELAX_METRICS_PORT.
    assert.equal(spec.enableServiceLinks, false, `${where}: no Service environment links`);
    assert.ok(!spec.volumes?.some((v) => v.persistentVolumeClaim), `${where}: no shared volume (object storage instead)`);
    const [c] = spec.containers;
    const env = containerEnv(c);
    const home = c.volumeMounts?.find((m) => m.mountPath === env.RELAX_HOME);
    const volume = spec.volumes?.find((v) => v.name === home?.name);
    assert.ok(volume?.emptyDir?.sizeLimit, `${where}: RELAX_HOME ${env.RELAX_HOME} is a bounded emptyDir`);
    if (env.AWS_ACCESS_KEY_ID) {
      const cache = objectStorageSettings(env)!;
      assert.equal(path.dirname(cache.cacheDir), env.RELAX_HOME);
      assert.ok(mib(volume.emptyDir.sizeLimit) > cache.cacheBytes / 2 ** 20, `${where}: the object cache (${cache.cacheBytes / 2 ** 20} MiB) fits in RELAX_HOME's ${volume.emptyDir.sizeLimit}`);
    }
  }
});

test('the addresses and credentials agree: database, object store, Temporal setup, and the HPA on the rollout backlog', () => {
  const config = find('ConfigMap', 'relax-config').data!;
  // The database: the URL's password, user and database are the server's.
  const db = find('Secret', 'relax-database').stringData!;
  const url = new URL(db.DATABASE_URL);
  const pg = find('StatefulSet', 'relax-postgresql').spec.template.spec.containers[0] as Container;
  const pgEnv = Object.fromEntries((pg.env ?? []).map((e) => [e.name, e.value]));
  assert.equal(decodeURIComponent(url.password), db.POSTGRES_PASSWORD);
  assert.equal(url.username, pgEnv.POSTGRES_USER);
  assert.equal(url.pathname, `/${pgEnv.POSTGRES_DB}`);
  assert.equal(url.hostname, `relax-postgresql.${kustomization.namespace}.svc`);
  assert.equal(find('Service', 'relax-postgresql').spec.ports[0].port, Number(url.port));
  // The object store: Relax's endpoint is the SeaweedFS Service, and its key pair is an identity SeaweedFS knows.
  const storage = objectStorageSettings(containerEnv((find('Deployment', 'relax-train').spec.template.spec as PodSpec).containers[0]))!;
  assert.equal(storage.bucket, 'relax');
  const endpoint = new URL(config.RELAX_S3_ENDPOINT);
  assert.equal(endpoint.hostname, `seaweedfs.${kustomization.namespace}.svc`);
  assert.equal(find('Service', 'seaweedfs').spec.ports[0].port, Number(endpoint.port));
  const weed = find('StatefulSet', 'seaweedfs').spec.template.spec.containers[0] as Container;
  assert.ok(weed.args?.includes('-s3') && weed.args.includes(`-s3.port=${endpoint.port}`));
  const s3 = find('Secret', 'relax-s3').stringData!;
  const identities = (JSON.parse(s3['s3.json']) as { identities: Array<{ credentials: Array<{ accessKey: string; secretKey: string }>; actions: string[] }> }).identities;
  const identity = identities.find((i) => i.credentials.some((k) => k.accessKey === s3.AWS_ACCESS_KEY_ID && k.secretKey === s3.AWS_SECRET_ACCESS_KEY));
  assert.ok(identity, 's3.json has the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY pair');
  assert.ok(identity.actions.includes('Admin'), 'Relax may create its bucket');
  // Temporal: the setup Job runs deploy/temporal/setup-namespace.sh as it is, with the admin-tools of docker-compose.yml.
  assert.equal(find('ConfigMap', 'relax-temporal-setup').data!['setup-namespace.sh'], read('deploy/temporal/setup-namespace.sh'));
  const composeTools = /temporalio\/admin-tools:\$\{TEMPORAL_VERSION:-([^}]+)\}/.exec(read('docker-compose.yml'))![1];
  assert.equal(find('Job', 'relax-temporal-setup').spec.template.spec.containers[0].image, `temporalio/admin-tools:${composeTools}`);
  // The HPA scales the rollout Deployment on the backlog of the queue rollout workers poll.
  const hpa = find('HorizontalPodAutoscaler', 'relax-rollout');
  assert.equal(hpa.apiVersion, 'autoscaling/v2');
  assert.deepEqual(hpa.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: 'relax-rollout' });
  const [metric] = hpa.spec.metrics;
  assert.equal(metric.type, 'External');
  assert.equal(metric.external.metric.selector.matchLabels.taskqueue, roleTaskQueue('rollout', taskQueuePrefix(config)));
  assert.equal(metric.external.metric.selector.matchLabels.task_type, 'Activity');
  // The docs name the way to apply and the validator CI runs.
  const docs = read('docs/deployment.md');
  assert.match(docs, /kubectl apply -k deploy\/kubernetes/);
  assert.ok(docs.includes(`kubeconform ${tools.KUBECONFORM_VERSION}`), `docs/deployment.md names kubeconform ${tools.KUBECONFORM_VERSION}`);
});
