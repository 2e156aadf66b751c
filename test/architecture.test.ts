// The architecture rules, checked by reading the TypeScript sources (not dist/) with @babel/parser:
// the layering table, the 400-line file limit (unless the first comment says why), a first comment
// saying each file's job, and the 80-line function limit in workflows/ and activities/. Needs no
// services. Every violation is collected and reported in one failure, as `file:line: rule: detail`.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse } from '@babel/parser';

type Layer =
  | 'activities' | 'api' | 'bench' | 'cli' | 'client' | 'config' | 'engines' | 'envs'
  | 'rollout' | 'store' | 'test' | 'training' | 'workers' | 'workflows';

// The layering table; docs/architecture.md describes it (compare the two when either changes).
// Each layer may import its own folder and the layers listed here, nothing else. On top of this:
// workflows import activities type-only, and config type-only except `config/task-queues`; their
// npm value imports come only from WORKFLOW_VALUE_PACKAGES. client imports workflows type-only.
const ALLOWED_IMPORTS: Record<Layer, Layer[]> = {
  config: [],
  engines: ['config'],
  envs: ['engines', 'config'],
  store: [],
  rollout: ['engines', 'envs', 'store', 'config'],
  training: ['rollout', 'engines', 'envs', 'store', 'config'],
  activities: ['training', 'rollout', 'engines', 'envs', 'store', 'config'],
  workflows: ['activities', 'config'],
  workers: ['activities', 'workflows', 'training', 'rollout', 'engines', 'envs', 'store', 'config'],
  client: ['workflows', 'config'],
  api: ['client', 'config'],
  cli: ['activities', 'api', 'bench', 'client', 'config', 'engines', 'envs', 'rollout', 'store', 'training', 'workers', 'workflows'],
  bench: ['activities', 'client', 'config', 'engines', 'envs', 'rollout', 'store', 'training', 'workers', 'workflows'],
  test: ['activities', 'api', 'bench', 'cli', 'client', 'config', 'engines', 'envs', 'rollout', 'store', 'training', 'workers', 'workflows'],
};
const LAYERS = Object.keys(ALLOWED_IMPORTS) as Layer[];
// Per importing layer: the target layers it may import only type-only, and the modules exempt from that.
const TYPE_ONLY_IMPORTS: Partial<Record<Layer, { targets: Layer[]; valueModules: string[] }>> = {
  workflows: { targets: ['activities', 'config'], valueModules: ['config/task-queues', 'config/json-limits', 'config/failure-types', 'config/hyperparameters', 'config/placement'] },
  client: { targets: ['workflows'], valueModules: [] },
};
const WORKFLOW_VALUE_PACKAGES = ['@temporalio/workflow', '@temporalio/common'];
const MAX_FILE_LINES = 400;
const MAX_FUNCTION_LINES = 80;
const FUNCTION_LIMIT_LAYERS: Layer[] = ['workflows', 'activities'];
const SKIPPED_DIRS = ['test/fixtures', 'test/histories'];

type Rule = 'parse' | 'layering' | 'file-length' | 'header-comment' | 'function-length';
const RULES: Rule[] = ['parse', 'layering', 'file-length', 'header-comment', 'function-length'];
interface Violation { file: string; line: number; rule: Rule; detail: string }
const format = (v: Violation): string => `${v.file}:${v.line}: ${v.rule}: ${v.detail}`;

interface AstNode { type: string; loc?: { start: { line: number }; end: { line: number } } | null; [key: string]: unknown }
const isNode = (value: unknown): value is AstNode =>
  typeof value === 'object' && value !== null && typeof (value as { type?: unknown }).type === 'string';
const NOT_CHILDREN = new Set(['loc', 'leadingComments', 'trailingComments', 'innerComments', 'extra', 'comments', 'tokens']);

function walk(node: AstNode, visit: (node: AstNode, parent: AstNode | null) => void, parent: AstNode | null = null): void {
  visit(node, parent);
  for (const [key, value] of Object.entries(node)) {
    if (NOT_CHILDREN.has(key)) continue;
    if (Array.isArray(value)) {
      for (const child of value) if (isNode(child)) walk(child, visit, node);
    } else if (isNode(value)) {
      walk(value, visit, node);
    }
  }
}

const lineOf = (node: AstNode): number => node.loc?.start.line ?? 1;
const layerOf = (file: string): Layer | undefined => {
  const top = file.split('/')[0];
  return (LAYERS as string[]).includes(top) ? (top as Layer) : undefined;
};

// One module reference in a file: what it names, where, and whether it is erased at compile time.
interface ImportRef { specifier: string; line: number; typeOnly: boolean; kind: string }

function stringArgument(node: unknown): string | undefined {
  if (!isNode(node)) return undefined;
  if (node.type === 'StringLiteral') return node.value as string;
  if (node.type === 'TSLiteralType') return stringArgument(node.literal);
  if (node.type === 'TemplateLiteral' && (node.expressions as unknown[]).length === 0) {
    return ((node.quasis as AstNode[])[0].value as { cooked: string }).cooked;
  }
  return undefined;
}

const everySpecifier = (node: AstNode, kindKey: 'importKind' | 'exportKind'): boolean => {
  const specifiers = (node.specifiers as AstNode[] | undefined) ?? [];
  return specifiers.length > 0 && specifiers.every((s) => s[kindKey] === 'type');
};

function collectImports(ast: AstNode): ImportRef[] {
  const refs: ImportRef[] = [];
  const add = (specifier: string | undefined, node: AstNode, typeOnly: boolean, kind: string): void => {
    if (specifier !== undefined) refs.push({ specifier, line: lineOf(node), typeOnly, kind });
  };
  walk(ast, (node) => {
    switch (node.type) {
      case 'ImportDeclaration':
        add(stringArgument(node.source), node, node.importKind === 'type' || everySpecifier(node, 'importKind'), 'import');
        break;
      case 'ExportNamedDeclaration':
      case 'ExportAllDeclaration':
        if (node.source) add(stringArgument(node.source), node, node.exportKind === 'type' || everySpecifier(node, 'exportKind'), 'export');
        break;
      case 'TSImportEqualsDeclaration': {
        const ref = node.moduleReference as AstNode;
        if (ref.type === 'TSExternalModuleReference') add(stringArgument(ref.expression), node, node.importKind === 'type', 'import =');
        break;
      }
      case 'TSImportType':
        add(stringArgument(node.argument), node, true, 'import() type');
        break;
      case 'ImportExpression':
        add(stringArgument(node.source), node, false, 'import()');
        break;
      case 'CallExpression': {
        // require.resolve(...) has a MemberExpression callee, so it is not counted as an import.
        const callee = node.callee as AstNode;
        const first = (node.arguments as unknown[])[0];
        if (callee.type === 'Import') add(stringArgument(first), node, false, 'import()');
        else if (callee.type === 'Identifier' && callee.name === 'require') add(stringArgument(first), node, false, 'require()');
        break;
      }
    }
  });
  return refs;
}

const isRelative = (specifier: string): boolean =>
  specifier === '.' || specifier === '..' || specifier.startsWith('./') || specifier.startsWith('../');
const stripExtension = (p: string): string => p.replace(/\.(?:[cm]?js|[cm]?ts)$/, '');
const packageName = (specifier: string): string =>
  specifier.split('/').slice(0, specifier.startsWith('@') ? 2 : 1).join('/');

function layeringViolations(file: string, ast: AstNode): Violation[] {
  const layer = layerOf(file);
  if (!layer) return [];
  const out: Violation[] = [];
  const report = (ref: ImportRef, detail: string): void => {
    out.push({ file, line: ref.line, rule: 'layering', detail: `${detail} (${ref.kind} '${ref.specifier}')` });
  };
  for (const ref of collectImports(ast)) {
    if (!isRelative(ref.specifier)) {
      if (layer === 'workflows' && !ref.typeOnly && !WORKFLOW_VALUE_PACKAGES.includes(packageName(ref.specifier))) {
        report(ref, `workflows value-import npm/node modules only from ${WORKFLOW_VALUE_PACKAGES.join(' and ')}`);
      }
      continue;
    }
    const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(file), ref.specifier));
    if (resolved === '..' || resolved.startsWith('../')) {
      report(ref, 'resolves outside the repository');
      continue;
    }
    const top = resolved.split('/')[0];
    const target = (LAYERS as string[]).includes(top) ? (top as Layer) : undefined;
    if (!target) {
      report(ref, `${resolved.includes('/') ? `${top}/` : `repo-root file ${top}`} is not a layer in the table`);
      continue;
    }
    if (target === layer) continue;
    if (!ALLOWED_IMPORTS[layer].includes(target)) {
      report(ref, `${layer} may not import ${target}`);
      continue;
    }
    const typeOnly = TYPE_ONLY_IMPORTS[layer];
    if (typeOnly && typeOnly.targets.includes(target) && !ref.typeOnly && !typeOnly.valueModules.includes(stripExtension(resolved))) {
      const except = typeOnly.valueModules.filter((m) => m.startsWith(`${target}/`));
      report(ref, `${layer} may import ${target} only type-only${except.length ? ` (by value only ${except.join(', ')})` : ''}`);
    }
  }
  return out;
}

// The file's first comment block (leading `//` lines, or a leading `/* */` block), markers removed
// and whitespace collapsed; undefined when the first non-empty line is not a comment.
function firstComment(source: string): { text: string | undefined; line: number; firstLine: string } {
  const lines = source.split(/\r?\n/);
  let i = lines[0]?.startsWith('#!') ? 1 : 0;
  while (i < lines.length && lines[i].trim() === '') i++;
  const firstLine = (lines[i] ?? '').trim();
  const line = i + 1;
  const parts: string[] = [];
  if (firstLine.startsWith('//')) {
    for (let j = i; j < lines.length && lines[j].trim().startsWith('//'); j++) parts.push(lines[j].trim().replace(/^\/\/+/, ''));
  } else if (firstLine.startsWith('/*')) {
    for (let j = i; j < lines.length; j++) {
      const end = lines[j].indexOf('*/', j === i ? lines[j].indexOf('/*') + 2 : 0);
      parts.push((end >= 0 ? lines[j].slice(0, end) : lines[j]).trim().replace(/^\/\*+/, '').replace(/^\*+/, ''));
      if (end >= 0) break;
    }
  } else {
    return { text: undefined, line, firstLine };
  }
  return { text: parts.join(' ').replace(/\s+/g, ' ').trim(), line, firstLine };
}

const lineCount = (source: string): number => {
  const lines = source.split(/\r?\n/);
  return lines[lines.length - 1] === '' ? lines.length - 1 : lines.length;
};

function fileLengthViolations(file: string, source: string): Violation[] {
  const lines = lineCount(source);
  if (lines <= MAX_FILE_LINES) return [];
  const { text } = firstComment(source);
  if (text !== undefined && /over\s+400\s+lines/i.test(text)) return [];
  return [{ file, line: 1, rule: 'file-length', detail: `${lines} lines (limit ${MAX_FILE_LINES}) and the first comment does not say why ("Over 400 lines because ...")` }];
}

const DIRECTIVE = /^(?:eslint|@ts-|tslint:|prettier-ignore|#region|istanbul|c8 )/;

function headerViolations(file: string, source: string): Violation[] {
  const { text, line, firstLine } = firstComment(source);
  if (text === undefined) {
    const shown = firstLine ? `starts with \`${firstLine.slice(0, 60)}\`` : 'is empty';
    return [{ file, line, rule: 'header-comment', detail: `${shown}; it must start with a comment saying the file's one job` }];
  }
  if (text === '' || DIRECTIVE.test(text)) {
    return [{ file, line, rule: 'header-comment', detail: "the first comment is empty or a tool directive; it must say the file's one job" }];
  }
  return [];
}

const FUNCTION_TYPES = new Set([
  'FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression', 'ClassMethod', 'ClassPrivateMethod', 'ObjectMethod',
]);

function keyName(key: unknown): string | undefined {
  if (!isNode(key)) return undefined;
  if (key.type === 'Identifier') return key.name as string;
  if (key.type === 'StringLiteral' || key.type === 'NumericLiteral') return String(key.value);
  if (key.type === 'PrivateName') return `#${keyName(key.id)}`;
  if (key.type === 'MemberExpression' && !key.computed) {
    const object = keyName(key.object) ?? (isNode(key.object) && key.object.type === 'ThisExpression' ? 'this' : undefined);
    return object ? `${object}.${keyName(key.property)}` : keyName(key.property);
  }
  return undefined;
}

function functionName(node: AstNode, parent: AstNode | null): string {
  const own = keyName(node.id) ?? keyName(node.key);
  if (own) return own;
  if (parent) {
    if (parent.type === 'VariableDeclarator') return keyName(parent.id) ?? '<anonymous>';
    if (['ObjectProperty', 'ClassProperty', 'ClassPrivateProperty'].includes(parent.type)) return keyName(parent.key) ?? '<anonymous>';
    if (parent.type === 'AssignmentExpression') return keyName(parent.left) ?? '<anonymous>';
    if (parent.type === 'CallExpression' || parent.type === 'NewExpression') {
      const callee = keyName(parent.callee);
      if (callee) return `<anonymous at line ${lineOf(node)}, passed to ${callee}>`;
    }
  }
  return `<anonymous at line ${lineOf(node)}>`;
}

function functionLengthViolations(file: string, ast: AstNode): Violation[] {
  const layer = layerOf(file);
  if (!layer || !FUNCTION_LIMIT_LAYERS.includes(layer)) return [];
  const out: Violation[] = [];
  walk(ast, (node, parent) => {
    if (!FUNCTION_TYPES.has(node.type) || !node.loc) return;
    const length = node.loc.end.line - node.loc.start.line + 1;
    if (length > MAX_FUNCTION_LINES) {
      out.push({ file, line: lineOf(node), rule: 'function-length', detail: `${functionName(node, parent)} spans ${length} lines (limit ${MAX_FUNCTION_LINES})` });
    }
  });
  return out;
}

// Every rule on one file, given its repo-relative path (posix separators) and its text. Pure.
function checkSource(file: string, source: string): Violation[] {
  const out = [...fileLengthViolations(file, source), ...headerViolations(file, source)];
  let ast: AstNode;
  try {
    ast = parse(source, { sourceType: 'module', plugins: ['typescript'], sourceFilename: file }) as unknown as AstNode;
  } catch (err) {
    const loc = (err as { loc?: { line: number } }).loc;
    return [...out, { file, line: loc?.line ?? 1, rule: 'parse', detail: (err as Error).message }];
  }
  return [...out, ...layeringViolations(file, ast), ...functionLengthViolations(file, ast)];
}

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
  checkSource(file, source).filter((v) => v.rule === rule).map(format);

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
  assert.deepEqual(rulesOf('store/a.ts', `// Fake.\n${fn('elsewhere', 81)}`, 'function-length'), []);
  const arrow = `// Fake.\nsetHandler(q, () => {\n${'  call();\n'.repeat(80)}});\n`;
  assert.match(rulesOf('workflows/w.ts', arrow, 'function-length')[0], /<anonymous at line 2, passed to setHandler> spans 82 lines/);
});

test('the sources follow the architecture rules (docs/architecture.md)', () => {
  const files = sourceFiles(ROOT);
  assert.ok(files.length > 0, `no sources found under ${ROOT}`);
  const violations = files.flatMap((file) => checkSource(file, fs.readFileSync(path.join(ROOT, file), 'utf8')));
  violations.sort((a, b) => RULES.indexOf(a.rule) - RULES.indexOf(b.rule) || a.file.localeCompare(b.file) || a.line - b.line);
  const listing = violations.map(format).join('\n');
  assert.equal(violations.length, 0, `${violations.length} architecture violation(s) in ${files.length} files:\n${listing}`);
});
