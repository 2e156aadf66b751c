// Two architecture rules over the import graph (docs/architecture.md): `packages`, which npm
// packages each folder may import (and that product code imports only runtime dependencies of
// package.json, never a devDependency), and `cycles`, no cycle of value imports between modules
// (type-only imports are erased, so they may point back). Used by test/architecture.test.ts.
import { parse } from '@babel/parser';
import { collectImports, isBuiltin, isRelative, layerOf, packageName, resolveSource, type AstNode, type ImportRef, type Layer, type Violation } from './architecture-rules';

/**
 * The npm packages each folder may import (value or type). A new package, or one used in a new
 * folder, is a decision: add it here, with the folder's reason in docs/architecture.md's table.
 */
export const ALLOWED_PACKAGES: Partial<Record<Layer, readonly string[]>> = {
  workflows: ['@temporalio/workflow', '@temporalio/common', 'ms'],
  activities: ['@temporalio/activity', 'exponential-backoff', 'pg'],
  training: ['@tensorflow/tfjs', 'pg', 'zod'],
  rollout: ['pg'],
  serving: ['fastify', 'zod'],
  // engines/hub-cache.ts: @huggingface/hub downloads Hub ids of model.from into the standard Hub cache.
  // engines/storage/objects.ts: @aws-sdk/client-s3 and lib-storage (multipart) reach an S3-compatible object store.
  engines: ['@aws-sdk/client-s3', '@aws-sdk/lib-storage', '@huggingface/gguf', '@huggingface/hub', '@huggingface/jinja', '@huggingface/tokenizers', '@tensorflow/tfjs', '@tensorflow/tfjs-backend-wasm', '@tensorflow/tfjs-node', '@tensorflow/tfjs-node-gpu', 'fft.js', 'jpeg-js', 'onnxruntime-node', 'pngjs', 'protobufjs', 'wavefile', 'zod'],
  envs: ['exponential-backoff', 'hyparquet'],
  store: ['@electric-sql/pglite', '@electric-sql/pglite-socket', 'pg'],
  config: ['yaml', 'zod'], // yaml: run configs are read from YAML files and Hydra-style overrides (config/config-file.ts, config/overrides.ts)
  security: ['@temporalio/envconfig'], // the temporal CLI's config profiles, read with Temporal's own loader (temporal-connection.ts)
  telemetry: ['crc-32', 'protobufjs', 'pino', 'fastify', '@opentelemetry/api', '@opentelemetry/context-async-hooks', '@opentelemetry/core', '@opentelemetry/exporter-trace-otlp-http', '@opentelemetry/resources', '@opentelemetry/sdk-trace-base', '@temporalio/client', '@temporalio/interceptors-opentelemetry', '@temporalio/worker', '@temporalio/workflow'],
  workers: ['@temporalio/activity', '@temporalio/client', '@temporalio/common', 'exponential-backoff', '@temporalio/testing', '@temporalio/worker', 'prom-client'],
  client: ['@temporalio/client', '@temporalio/common', 'ms', 'pg'],
  api: ['@fastify/swagger', '@fastify/swagger-ui', '@temporalio/client', 'chart.js', 'fastify', 'fastify-type-provider-zod', 'prom-client', 'zod'],
  cli: ['@temporalio/client', '@temporalio/worker', '@tensorflow/tfjs', 'asciichart', 'cli-progress', 'cli-table3', 'commander', 'pg'],
  bench: ['@temporalio/client', '@tensorflow/tfjs', 'asciichart', 'onnxruntime-node', 'pg', 'zod'],
};

/**
 * devDependencies a product file may load with `await import()` inside a try that turns their
 * absence into a fix message: workers/temporal-server.ts falls back to the SDK's dev-server download
 * (tests and dev installs only; a production install says "run npm run setup / set TEMPORAL_CLI_PATH").
 */
const OPTIONAL_DEV_IMPORTS: Readonly<Record<string, readonly string[]>> = {
  'workers/temporal-server.ts': ['@temporalio/testing'],
};

const importsOf = (file: string, source: string): ImportRef[] => {
  try {
    return collectImports(parse(source, { sourceType: 'module', plugins: ['typescript'], sourceFilename: file }) as unknown as AstNode);
  } catch {
    return []; // the parse rule reports it
  }
};

/** `packages`: every npm import of a product file is allowed for its folder and is a runtime dependency. */
export function packageViolations(file: string, source: string, runtimeDependencies: ReadonlySet<string>): Violation[] {
  const layer = layerOf(file);
  if (!layer || layer === 'test') return [];
  const allowed = ALLOWED_PACKAGES[layer] ?? [];
  const out: Violation[] = [];
  for (const ref of importsOf(file, source)) {
    if (isRelative(ref.specifier) || isBuiltin(ref.specifier) || ref.specifier.startsWith('/')) continue;
    const pkg = packageName(ref.specifier);
    if (!allowed.includes(pkg)) {
      out.push({ file, line: ref.line, rule: 'packages', detail: `${layer}/ may not import '${pkg}' (it may import ${allowed.join(', ') || 'no npm package'}): use it from the folder that owns it, or add it to ALLOWED_PACKAGES in test/architecture-graph-rules.ts with the reason in docs/architecture.md` });
    } else if (!ref.typeOnly && !runtimeDependencies.has(pkg) && !(ref.kind === 'import()' && OPTIONAL_DEV_IMPORTS[file]?.includes(pkg))) {
      out.push({ file, line: ref.line, rule: 'packages', detail: `'${pkg}' is not a dependency (or optional dependency) of package.json: product code may not load a devDependency` });
    }
  }
  return out;
}

/** `cycles`: strongly connected groups of two or more modules in the value-import graph, each reported once. */
export function cycleViolations(sources: ReadonlyMap<string, string>): Violation[] {
  const edges = new Map<string, Array<{ to: string; line: number }>>();
  for (const [file, source] of sources) {
    if (layerOf(file) === 'test') continue;
    const next = importsOf(file, source)
      .filter((r) => !r.typeOnly && isRelative(r.specifier))
      .flatMap((r) => {
        const to = resolveSource(file, r.specifier, sources);
        return to && layerOf(to) !== 'test' ? [{ to, line: r.line }] : [];
      });
    edges.set(file, next);
  }
  // Tarjan's strongly connected components, iteratively deep enough for this graph.
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const groups: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const { to } of edges.get(v) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(v, Math.min(low.get(v)!, low.get(to)!));
      } else if (onStack.has(to)) low.set(v, Math.min(low.get(v)!, index.get(to)!));
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) groups.push(group.sort());
    }
  };
  for (const file of [...edges.keys()].sort()) if (!index.has(file)) visit(file);
  return groups.map((group) => {
    const first = group[0];
    const edge = (edges.get(first) ?? []).find((e) => group.includes(e.to));
    return { file: first, line: edge?.line ?? 1, rule: 'cycles' as const, detail: `value imports go round ${group.join(' <-> ')}: move what both need into a module of its own, or make one side's import type-only` };
  });
}
