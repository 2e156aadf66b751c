// The architecture rules of docs/architecture.md, checked by reading the TypeScript sources (not
// dist/): layering, file-length, header-comment, function-length, exception-cap (how many long
// files and functions may say why), sql (statements only in store/), env (variables read only in
// config/environment*.ts), packages (npm packages per folder, runtime dependencies only) and cycles
// (no value-import cycle). The rule engine (test/architecture-rules.ts, -length-rules.ts,
// -env-rule.ts, -graph-rules.ts) on made-up sources, then on every source file. Needs no services.
// Every violation is collected and reported in one failure, as `file:line: rule: detail`.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { envViolations } from './architecture-env-rule';
import { checkSource, clientStoreViolations, format, LAYERS, RULES, SKIPPED_DIRS, type Rule } from './architecture-rules';
import { exceptionCapViolations, lengthViolations } from './architecture-length-rules';
import { cycleViolations, packageViolations } from './architecture-graph-rules';

const ROOT = path.resolve(__dirname, '..', '..');

// Repo-relative paths of every *.ts file in the layer folders, skipping dist/, node_modules/ and test data.
function sourceFiles(root: string): string[] {
  const files: string[] = [];
  const visit = (rel: string): void => {
    for (const entry of fs.readdirSync(path.join(root, rel), { withFileTypes: true })) {
      const child = `${rel}/${entry.name}`;
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules' && entry.name !== 'dist' && !SKIPPED_DIRS.includes(child)) visit(child);
      } else if (entry.isFile() && entry.name.endsWith('.ts')) {
        files.push(child);
      }
    }
  };
  for (const layer of LAYERS) if (fs.existsSync(path.join(root, layer))) visit(layer);
  return files.sort();
}

const rulesOf = (file: string, source: string, rule: Rule): string[] =>
  [...checkSource(file, source), ...lengthViolations(file, source), ...envViolations(file, source)].filter((v) => v.rule === rule).map(format);

test('the rule engine itself: layering', () => {
  assert.equal(rulesOf('store/x.ts', "// Fake.\nimport { y } from '../engines/y';\n", 'layering').length, 1);
  assert.equal(rulesOf('store/x.ts', "// Fake.\nconst y = () => import('../engines/y');\n", 'layering').length, 1);
  assert.equal(rulesOf('store/x.ts', "// Fake.\nexport { y } from '../engines/y';\n", 'layering').length, 1);
  assert.deepEqual(rulesOf('store/x.ts', "// Fake.\nimport { y } from './y';\nimport fs from 'node:fs';\n", 'layering'), []);
  assert.deepEqual(rulesOf('workers/x.ts', "// Fake.\nconst p = require.resolve('../test/x');\n", 'layering'), []);
  assert.equal(rulesOf('workers/x.ts', "// Fake.\nconst p = require('../test/x');\n", 'layering').length, 1);
  assert.equal(rulesOf('engines/x.ts', "// Fake.\nimport x from '../../outside';\n", 'layering').length, 1);
  assert.equal(rulesOf('store/x.ts', "// Fake.\nimport y = require('../engines/y');\n", 'layering').length, 1);
  assert.equal(rulesOf('store/x.ts', "// Fake.\ntype Y = typeof import('../engines/y');\n", 'layering').length, 1);
});

test('the rule engine itself: type-only imports in workflows and client', () => {
  const typeOnly = [
    "import type { A } from '../activities/a';",
    "import { type B, type C } from '../activities/b';",
    "export type { D } from '../activities/d';",
    "import type { RunConfig } from '../config/run-config';",
    "import { roleTaskQueue, type Role } from '../config/task-queues';",
    "import { proxyActivities } from '@temporalio/workflow';",
    "import type { Duration } from '@temporalio/common/lib/time';",
  ];
  assert.deepEqual(rulesOf('workflows/w.ts', `// Fake.\n${typeOnly.join('\n')}\n`, 'layering'), []);
  const values = [
    "import { a } from '../activities/a';",
    "import { type B, c } from '../activities/b';",
    "import '../activities/side-effect';",
    "import { parseRunConfig } from '../config/run-config';",
    "import fs from 'node:fs';",
    "import { store } from '../store/s';",
    "export * from '../activities/a';",
    "const a = require('../activities/a');",
  ];
  for (const line of values) assert.equal(rulesOf('workflows/w.ts', `// Fake.\n${line}\n`, 'layering').length, 1, line);
  assert.deepEqual(rulesOf('client/c.ts', "// Fake.\nimport type { R } from '../workflows/r';\n", 'layering'), []);
  assert.equal(rulesOf('client/c.ts', "// Fake.\nimport { r } from '../workflows/r';\n", 'layering').length, 1);
  assert.deepEqual(rulesOf('client/c.ts', "// Fake.\nimport { metricSeries } from '../store/metrics';\n", 'layering'), []);
  assert.equal(rulesOf('client/c.ts', "// Fake.\nimport { loadRunContext } from '../training/run-context';\n", 'layering').length, 1);
});

test('the rule engine itself: file length, header comment, function length', () => {
  const body = Array.from({ length: 400 }, (_, i) => `const v${i} = ${i};`).join('\n');
  assert.equal(rulesOf('store/x.ts', `// A long file.\n${body}\n`, 'file-length').length, 1);
  assert.deepEqual(rulesOf('store/x.ts', `// A long table; over\n// 400 lines because it is data.\n${body}\n`, 'file-length'), []);
  assert.deepEqual(rulesOf('store/x.ts', `/* Over 400 lines: data. */\n${body}\n`, 'file-length'), []);
  assert.equal(rulesOf('store/x.ts', "import fs from 'node:fs';\n", 'header-comment').length, 1);
  assert.equal(rulesOf('store/x.ts', '// eslint-disable\nexport {};\n', 'header-comment').length, 1);
  assert.deepEqual(rulesOf('store/x.ts', '\n/**\n * The store.\n */\nexport {};\n', 'header-comment'), []);
  const fn = (name: string, lines: number): string => `export function ${name}() {\n${'  call();\n'.repeat(lines - 2)}}\n`;
  const long = rulesOf('activities/a.ts', `// Fake.\n${fn('tooLong', 81)}${fn('justRight', 80)}`, 'function-length');
  assert.equal(long.length, 1);
  assert.match(long[0], /^activities\/a\.ts:2: function-length: tooLong spans 81 lines/);
  assert.equal(rulesOf('store/a.ts', `// Fake.\n${fn('elsewhere', 81)}`, 'function-length').length, 1);
  assert.equal(rulesOf('bench/a.ts', `// Fake.\n${fn('elsewhere', 81)}`, 'function-length').length, 1);
  assert.deepEqual(rulesOf('test/a.test.ts', `// Fake.\n${fn('inATest', 200)}`, 'function-length'), []);
  const arrow = `// Fake.\nsetHandler(q, () => {\n${'  call();\n'.repeat(80)}});\n`;
  assert.match(rulesOf('workflows/w.ts', arrow, 'function-length')[0], /<anonymous at line 2, passed to setHandler> spans 82 lines/);
});

test('the rule engine itself: a long function says why, and the exceptions are capped', () => {
  const fn = (name: string, lines: number): string => `export function ${name}() {\n${'  call();\n'.repeat(lines - 2)}}\n`;
  const why = '// Over 80 lines because it is one table of cases, each a line.\n';
  // Caught without a reason, or with a reason that is not directly above it or says nothing.
  assert.equal(rulesOf('engines/e.ts', `// Fake.\n${fn('long', 81)}`, 'function-length').length, 1);
  assert.equal(rulesOf('engines/e.ts', `// Fake.\n${why}\n${fn('long', 81)}`, 'function-length').length, 1);
  assert.equal(rulesOf('engines/e.ts', `// Fake.\n// Over 80 lines because\n${fn('long', 81)}`, 'function-length').length, 1);
  assert.equal(rulesOf('engines/e.ts', `// Fake.\n// Long: over 80 lines because of the table.\n${fn('long', 81)}`, 'function-length').length, 1);
  // Accepted with the reason directly above (a line comment, several, or a block); nested code is not excused by it.
  assert.deepEqual(rulesOf('engines/e.ts', `// Fake.\n${why}${fn('long', 81)}`, 'function-length'), []);
  assert.deepEqual(rulesOf('engines/e.ts', `// Fake.\n// Over 80 lines because it is one table\n// of cases, each a line.\n${fn('long', 81)}`, 'function-length'), []);
  assert.deepEqual(rulesOf('cli/c.ts', `// Fake.\n/**\n * Over 80 lines because it is one table.\n */\n${fn('long', 81)}`, 'function-length'), []);
  const nested = `// Fake.\n${why}export function outer() {\n  const inner = () => {\n${'    call();\n'.repeat(81)}  };\n}\n`;
  assert.match(rulesOf('engines/e.ts', nested, 'function-length').join('\n'), /inner spans 83 lines/);
  // The caps: over either, one violation listing every exception it counts.
  const sources = new Map([
    ['engines/a.ts', `// Fake.\n${why}${fn('first', 81)}${why}${fn('second', 90)}`],
    ['cli/b.ts', `// Fake.\n${why}${fn('third', 85)}${fn('short', 10)}`],
    ['test/t.test.ts', `// Fake.\n${why}${fn('inATest', 85)}`],
    ['store/big.ts', `// Over 400 lines because it is data.\n${'const x = 1;\n'.repeat(400)}`],
    ['test/big.test.ts', `// Over 400 lines because it is a table.\n${'const x = 1;\n'.repeat(400)}`],
    ['store/small.ts', '// Over 400 lines because nothing: it is short.\nconst x = 1;\n'],
  ]);
  assert.deepEqual(exceptionCapViolations(sources, { functions: 3, files: 2 }), []);
  const over = exceptionCapViolations(sources, { functions: 2, files: 1 }).map(format);
  assert.equal(over.length, 2);
  assert.match(over[0], /^engines\/a\.ts:3: exception-cap: 3 functions carry "Over 80 lines because" \(cap MAX_LONG_FUNCTION_EXCEPTIONS = 2\)/);
  assert.match(over[0], /engines\/a\.ts:3 first \(81 lines\): Over 80 lines because it is one table of cases/);
  assert.match(over[0], /cli\/b\.ts:3 third \(85 lines\)/);
  assert.doesNotMatch(over[0], /inATest|short/);
  assert.match(over[1], /exception-cap: 2 files carry "Over 400 lines because" \(cap MAX_LONG_FILE_EXCEPTIONS = 1\)[\s\S]*store\/big\.ts \(401 lines\)[\s\S]*test\/big\.test\.ts/);
  assert.doesNotMatch(over[1], /small/);
});

test('the rule engine itself: SQL only in store/ (and test/)', () => {
  const sql = [
    "const q = 'SELECT config FROM runs WHERE run_id = $1';",
    'const q = `SELECT run_id FROM runs WHERE status = ${status}`;',
    "db.query('SELECT 1');",
    "db.query('SELECT version() AS v');",
    "const q = 'INSERT INTO runs (run_id) VALUES ($1)';",
    "const q = 'UPDATE runs SET status = $2 WHERE run_id = $1';",
    "const q = 'DELETE FROM samples WHERE run_id = $1';",
    'const q = `WITH recent AS (SELECT 1) SELECT * FROM recent`;',
    'const q = `CREATE DATABASE ${name}`;',
    "const q = 'ALTER TABLE runs ADD COLUMN x text';",
    'const q = sql`DROP TABLE ${t}`;',
  ];
  for (const line of sql) {
    assert.equal(rulesOf('activities/a.ts', `// Fake.\n${line}\n`, 'sql').length, 1, line);
    assert.equal(rulesOf('bench/b.ts', `// Fake.\n${line}\n`, 'sql').length, 1, line);
    assert.deepEqual(rulesOf('store/s.ts', `// Fake.\n${line}\n`, 'sql'), [], line);
    assert.deepEqual(rulesOf('test/t.test.ts', `// Fake.\n${line}\n`, 'sql'), [], line);
  }
  const prose = [
    "throw new Error('select a model from the list, or update the config and set model.from');",
    "const m = 'could not delete from disk: ' + reason;",
    'const m = `the run config selects SELECTED rows`;',
    "// SELECT config FROM runs in a comment is not a literal\nexport {};",
    "const status = 'selected';",
    "const help = 'Select which runs to show (from the runs table)';",
  ];
  for (const line of prose) assert.deepEqual(rulesOf('cli/c.ts', `// Fake.\n${line}\n`, 'sql'), [], line);
  assert.match(rulesOf('training/t.ts', "// Fake.\n\nconst q = 'SELECT config FROM runs WHERE run_id = $1';\n", 'sql')[0], /^training\/t\.ts:3: sql: a SQL statement outside store\/ \(`SELECT config FROM runs/);
});

test('the rule engine itself: environment variables read only in config/environment*.ts', () => {
  const reads = [
    'const a = process.env.RELAX_X;',
    "const a = process.env['RELAX_X'];",
    'const a = process.env[name];',
    'const a = process.env.RELAX_X?.trim();',
    'export function f(env = process.env) { return env.RELAX_X; }',
    "export function f(env = process.env) { return env['TEMPORAL_TLS'] ?? ''; }",
    'export function f(env = process.env, name = "X") { return env[name]; }',
    'const { RELAX_X } = process.env;',
    'if (process.env.DATABASE_URL) run();',
  ];
  for (const line of reads) {
    assert.equal(rulesOf('workers/w.ts', `// Fake.\n${line}\n`, 'env').length, 1, line);
    assert.deepEqual(rulesOf('config/environment.ts', `// Fake.\n${line}\n`, 'env'), [], line);
    assert.deepEqual(rulesOf('config/environment-workers.ts', `// Fake.\n${line}\n`, 'env'), [], line);
    assert.deepEqual(rulesOf('test/t.test.ts', `// Fake.\n${line}\n`, 'env'), [], line);
  }
  assert.equal(rulesOf('telemetry/tracing.ts', '// Fake.\nconst a = process.env.OTEL_X;\n', 'env').length, 1);
  const allowed = [
    "process.env.TF_CPP_MIN_LOG_LEVEL ??= '2';",
    "process.env.RELAX_X = 'off';",
    'delete process.env.RELAX_X;',
    "export function f(env = process.env) { env.CUDA_VISIBLE_DEVICES = ''; delete env.TEMPORAL_API_KEY; env[name] = v; }",
    'const child = { ...process.env, RELAX_HOME: home };',
    'check(process.env);',
    'export function f(env = process.env) { return sandboxEnv(env); }',
    'for (const [k, v] of Object.entries(process.env)) use(k, v);',
    'env.reset(); env.step(action);',
    'const { reset, step } = env;',
  ];
  for (const line of allowed) assert.deepEqual(rulesOf('rollout/r.ts', `// Fake.\n${line}\n`, 'env'), [], line);
  assert.deepEqual(rulesOf('bench/sandbox.ts', '// Fake.\nconst saved = process.env.RELAX_SANDBOX;\n', 'env'), []);
  assert.equal(rulesOf('bench/sandbox.ts', '// Fake.\nconst saved = process.env.RELAX_METRICS;\n', 'env').length, 1);
  assert.match(rulesOf('cli/c.ts', '// Fake.\n\nconst p = process.env.RELAX_PORT;\n', 'env')[0], /^cli\/c\.ts:3: env: reads RELAX_PORT from the environment outside config\/environment\*\.ts/);
});

test('the rule engine itself: the store/ modules the client reaches stay light', () => {
  const sources = new Map([
    ['client/c.ts', "// Fake.\nimport { metrics } from '../store/metrics';\nimport type { Server } from '../store/embedded';\n"],
    ['store/metrics.ts', "// Fake.\nimport type { Pool } from 'pg';\nimport fs from 'node:fs';\nimport { q } from './queryable';\n"],
    ['store/queryable.ts', "// Fake.\nimport { Pool } from 'pg';\n"],
    ['store/embedded.ts', "// Fake.\nimport { PGlite } from '@electric-sql/pglite';\n"],
  ]);
  assert.deepEqual(clientStoreViolations(sources), []);
  sources.set('store/queryable.ts', "// Fake.\nimport { Pool } from 'pg';\nexport { startEmbedded } from './embedded';\n");
  const found = clientStoreViolations(sources).map(format);
  assert.equal(found.length, 1);
  assert.match(found[0], /^client\/c\.ts:2: layering: client reaches store\/metrics\.ts -> store\/queryable\.ts -> store\/embedded\.ts, which imports '@electric-sql\/pglite'/);
});

test('the sources follow the architecture rules (docs/architecture.md)', () => {
  const files = sourceFiles(ROOT);
  assert.ok(files.length > 0, `no sources found under ${ROOT}`);
  const sources = new Map(files.map((file) => [file, fs.readFileSync(path.join(ROOT, file), 'utf8')]));
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> };
  const runtime = new Set([...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.optionalDependencies ?? {})]);
  const perFile = (file: string, source: string) => [...checkSource(file, source), ...lengthViolations(file, source), ...envViolations(file, source), ...packageViolations(file, source, runtime)];
  const violations = [...files.flatMap((file) => perFile(file, sources.get(file)!)), ...clientStoreViolations(sources), ...exceptionCapViolations(sources), ...cycleViolations(sources)];
  violations.sort((a, b) => RULES.indexOf(a.rule) - RULES.indexOf(b.rule) || a.file.localeCompare(b.file) || a.line - b.line);
  const listing = violations.map(format).join('\n');
  assert.equal(violations.length, 0, `${violations.length} architecture violation(s) in ${files.length} files:\n${listing}`);
});

test('the rule engine itself: npm packages per folder, and no value-import cycles', () => {
  const runtime = new Set(['pg', 'zod', '@tensorflow/tfjs']);
  const pkgs = (file: string, source: string) => packageViolations(file, `// Fake.\n${source}\n`, runtime).map(format);
  assert.deepEqual(pkgs('store/s.ts', "import { Pool } from 'pg';\nimport fs from 'node:fs';\nimport { x } from './x';"), []);
  assert.match(pkgs('store/s.ts', "import { z } from 'zod';")[0], /^store\/s\.ts:2: packages: store\/ may not import 'zod'/);
  assert.match(pkgs('workflows/w.ts', "import type { Pool } from 'pg';")[0], /workflows\/ may not import 'pg'/);
  assert.equal(pkgs('engines/e.ts', "const ort = require('onnxruntime-node');").length, 1, 'a runtime require is an import: onnxruntime-node is allowed in engines/ but not a dependency here');
  assert.deepEqual(pkgs('engines/e.ts', "import * as tf from '@tensorflow/tfjs';\nimport type { Data } from '@tensorflow/tfjs/dist/x';"), []);
  assert.deepEqual(pkgs('test/t.test.ts', "import fc from 'fast-check';"), []);
  const cycle = (files: Record<string, string>) => cycleViolations(new Map(Object.entries(files).map(([f, s]) => [f, `// Fake.\n${s}\n`]))).map(format);
  assert.deepEqual(cycle({ 'engines/a.ts': "import { b } from './b';", 'engines/b.ts': "import type { A } from './a';" }), []);
  const found = cycle({ 'engines/a.ts': "import { b } from './b';", 'engines/b.ts': "import { c } from './c';", 'engines/c.ts': "export { a } from './a';", 'engines/d.ts': "import { a } from './a';" });
  assert.equal(found.length, 1);
  assert.match(found[0], /^engines\/a\.ts:2: cycles: value imports go round engines\/a\.ts <-> engines\/b\.ts <-> engines\/c\.ts/);
});
