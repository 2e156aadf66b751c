// The architecture rules as pure functions over a source file's text (test/architecture.test.ts runs
// them over the tree and over made-up sources), read with @babel/parser: the layering table (and the
// client reaching only store/ modules without heavy packages), the 400-line file limit (unless the
// first comment says why), a first comment saying each file's job, and SQL statements only in store/ (sql: no string literal or template
// outside store/ and test/ holds one); the env rule is in test/architecture-env-rule.ts, the length
// rules (file-length, function-length, exception-cap) in test/architecture-length-rules.ts. A violation
// reads `file:line: rule: detail`.
import { builtinModules } from 'node:module';
import path from 'node:path';
import { parse } from '@babel/parser';

export type Layer =
  | 'activities' | 'api' | 'bench' | 'cli' | 'client' | 'config' | 'engines' | 'envs'
  | 'rollout' | 'security' | 'serving' | 'store' | 'telemetry' | 'test' | 'training' | 'workers' | 'workflows';

// The layering table; docs/architecture.md describes it (compare the two when either changes).
// Each layer may import its own folder and the layers listed here, nothing else. On top of this:
// workflows import activities type-only, and config type-only except `config/task-queues`; their
// npm value imports come only from WORKFLOW_VALUE_PACKAGES. client imports workflows type-only, and
// the store/ modules it reaches import no npm package but CLIENT_STORE_PACKAGES (the published
// client must not load the embedded database).
const ALLOWED_IMPORTS: Record<Layer, Layer[]> = {
  config: [],
  engines: ['config'],
  envs: ['engines', 'config'],
  store: [],
  security: ['config'],
  telemetry: ['config'],
  rollout: ['engines', 'envs', 'store', 'config'],
  serving: ['rollout', 'engines', 'envs', 'security', 'config'],
  training: ['rollout', 'engines', 'envs', 'store', 'config'],
  // telemetry: a run's TensorBoard files are written where its metrics are recorded (activities/run-tensorboard.ts).
  activities: ['training', 'serving', 'rollout', 'engines', 'envs', 'store', 'telemetry', 'config'],
  workflows: ['activities', 'config'],
  workers: ['activities', 'workflows', 'training', 'serving', 'rollout', 'engines', 'envs', 'store', 'security', 'telemetry', 'config'],
  client: ['workflows', 'store', 'security', 'telemetry', 'config'],
  api: ['client', 'security', 'config'],
  cli: ['activities', 'api', 'bench', 'client', 'config', 'engines', 'envs', 'rollout', 'security', 'serving', 'store', 'telemetry', 'training', 'workers', 'workflows'],
  bench: ['activities', 'client', 'config', 'engines', 'envs', 'rollout', 'security', 'store', 'telemetry', 'training', 'workers', 'workflows'],
  test: ['activities', 'api', 'bench', 'cli', 'client', 'config', 'engines', 'envs', 'rollout', 'security', 'serving', 'store', 'telemetry', 'training', 'workers', 'workflows'],
};
export const LAYERS = Object.keys(ALLOWED_IMPORTS) as Layer[];
// Per importing layer: the target layers it may import only type-only, and the modules exempt from that.
const TYPE_ONLY_IMPORTS: Partial<Record<Layer, { targets: Layer[]; valueModules: string[] }>> = {
  workflows: { targets: ['activities', 'config'], valueModules: ['config/task-queues', 'config/json-limits', 'config/failure-types', 'config/hyperparameters', 'config/placement', 'config/evaluation', 'config/reference-role'] }, // config/evaluation: the evaluateRun workflow checks its input (plain code, no imports); config/reference-role: whether an iteration runs the reference stage (plain code, no imports)
  client: { targets: ['workflows'], valueModules: [] },
};
// Modules every layer but workflows may import whatever its row says: the one logger (telemetry/log.ts), which all service code writes through, and its fastify options.
const SHARED_MODULES = ['telemetry/log', 'telemetry/http-log'];
// ms: pure duration parsing/formatting, already in every workflow bundle through @temporalio/common.
const WORKFLOW_VALUE_PACKAGES = ['@temporalio/workflow', '@temporalio/common', 'ms'];
// The npm packages a store/ module that client/ reaches (by value imports, transitively) may value-import; node builtins are fine.
const CLIENT_STORE_PACKAGES = ['pg'];
// Layers whose string literals and templates may hold SQL statements: the data plane and the tests.
const SQL_LAYERS: Layer[] = ['store', 'test'];
export const SKIPPED_DIRS = ['test/fixtures', 'test/histories'];

export type Rule = 'parse' | 'layering' | 'file-length' | 'header-comment' | 'function-length' | 'exception-cap' | 'sql' | 'env' | 'packages' | 'cycles';
export const RULES: Rule[] = ['parse', 'layering', 'file-length', 'header-comment', 'function-length', 'exception-cap', 'sql', 'env', 'packages', 'cycles'];
export interface Violation { file: string; line: number; rule: Rule; detail: string }
export const format = (v: Violation): string => `${v.file}:${v.line}: ${v.rule}: ${v.detail}`;

export interface AstNode { type: string; loc?: { start: { line: number }; end: { line: number } } | null; [key: string]: unknown }
export const isNode = (value: unknown): value is AstNode =>
  typeof value === 'object' && value !== null && typeof (value as { type?: unknown }).type === 'string';
const NOT_CHILDREN = new Set(['loc', 'leadingComments', 'trailingComments', 'innerComments', 'extra', 'comments', 'tokens']);

export function walk(node: AstNode, visit: (node: AstNode, parent: AstNode | null) => void, parent: AstNode | null = null): void {
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

export const lineOf = (node: AstNode): number => node.loc?.start.line ?? 1;
export const layerOf = (file: string): Layer | undefined => {
  const top = file.split('/')[0];
  return (LAYERS as string[]).includes(top) ? (top as Layer) : undefined;
};

// One module reference in a file: what it names, where, and whether it is erased at compile time.
export interface ImportRef { specifier: string; line: number; typeOnly: boolean; kind: string }

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

export function collectImports(ast: AstNode): ImportRef[] {
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

export const isRelative = (specifier: string): boolean =>
  specifier === '.' || specifier === '..' || specifier.startsWith('./') || specifier.startsWith('../');
const stripExtension = (p: string): string => p.replace(/\.(?:[cm]?js|[cm]?ts)$/, '');
export const packageName = (specifier: string): string =>
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
    if (layer !== 'workflows' && SHARED_MODULES.includes(stripExtension(resolved))) continue;
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
export function firstComment(source: string): { text: string | undefined; line: number; firstLine: string } {
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

export const lineCount = (source: string): number => {
  const lines = source.split(/\r?\n/);
  return lines[lines.length - 1] === '' ? lines.length - 1 : lines.length;
};

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

// A SQL statement, by its upper-case keywords (the sources write SQL in upper case, so prose such as
// "select a model from the list" or "delete from disk" is not taken for one).
const SQL_STATEMENT: RegExp[] = [
  /^\s*SELECT\b/, // SELECT 1, SELECT version()
  /\bSELECT\b[\s\S]*\bFROM\b/,
  /^\s*WITH\s+\w+\s+AS\s*\(/,
  /\bINSERT\s+INTO\b/,
  /\bUPDATE\s+\w+\s+SET\b/,
  /\bDELETE\s+FROM\b/,
  /\b(?:CREATE|ALTER|DROP)\s+(?:TABLE|DATABASE|(?:UNIQUE\s+)?INDEX|SCHEMA|VIEW|EXTENSION)\b/,
];

// The text of a string literal or template literal (each `${...}` read as `_`), else undefined.
function literalText(node: AstNode): string | undefined {
  if (node.type === 'StringLiteral') return node.value as string;
  if (node.type === 'TemplateLiteral') {
    return (node.quasis as AstNode[]).map((q) => { const v = q.value as { cooked?: string | null; raw: string }; return v.cooked ?? v.raw; }).join('_');
  }
  return undefined;
}

function sqlViolations(file: string, ast: AstNode): Violation[] {
  const layer = layerOf(file);
  if (!layer || SQL_LAYERS.includes(layer)) return [];
  const out: Violation[] = [];
  walk(ast, (node) => {
    const text = literalText(node);
    if (text === undefined || !SQL_STATEMENT.some((re) => re.test(text))) return;
    const shown = text.replace(/\s+/g, ' ').trim();
    out.push({ file, line: lineOf(node), rule: 'sql', detail: `a SQL statement outside store/ (\`${shown.length > 70 ? `${shown.slice(0, 70)}...` : shown}\`): move it into a store/ module as a named function` });
  });
  return out;
}

// Every rule on one file, given its repo-relative path (posix separators) and its text. Pure.
export function checkSource(file: string, source: string): Violation[] {
  const out = headerViolations(file, source);
  let ast: AstNode;
  try {
    ast = parse(source, { sourceType: 'module', plugins: ['typescript'], sourceFilename: file }) as unknown as AstNode;
  } catch (err) {
    const loc = (err as { loc?: { line: number } }).loc;
    return [...out, { file, line: loc?.line ?? 1, rule: 'parse', detail: (err as Error).message }];
  }
  return [...out, ...layeringViolations(file, ast), ...sqlViolations(file, ast)];
}

const NODE_BUILTINS = new Set(builtinModules);
export const isBuiltin = (specifier: string): boolean => specifier.startsWith('node:') || NODE_BUILTINS.has(specifier.split('/')[0]);

// The repo-relative file a relative specifier of `from` names, among `sources` (x.ts or x/index.ts).
export function resolveSource(from: string, specifier: string, sources: ReadonlyMap<string, string>): string | undefined {
  const base = stripExtension(path.posix.normalize(path.posix.join(path.posix.dirname(from), specifier)));
  return [`${base}.ts`, `${base}/index.ts`].find((candidate) => sources.has(candidate));
}

/**
 * client/ may import store/, but only modules light enough for the published client: following the
 * value imports of every client/ file (through any layer), each store/ module reached may value-import
 * no npm package but CLIENT_STORE_PACKAGES (so never PGlite, store/embedded.ts). Reported at the
 * client file's import that leads there. `sources`: repo-relative path -> text of every source file.
 */
export function clientStoreViolations(sources: ReadonlyMap<string, string>): Violation[] {
  const importsOf = new Map<string, ImportRef[]>();
  const valueImports = (file: string): ImportRef[] => {
    let refs = importsOf.get(file);
    if (!refs) {
      try {
        refs = collectImports(parse(sources.get(file)!, { sourceType: 'module', plugins: ['typescript'], sourceFilename: file }) as unknown as AstNode).filter((r) => !r.typeOnly);
      } catch {
        refs = []; // the parse rule reports it
      }
      importsOf.set(file, refs);
    }
    return refs;
  };
  const out: Violation[] = [];
  for (const file of [...sources.keys()].filter((f) => layerOf(f) === 'client')) {
    for (const first of valueImports(file).filter((r) => isRelative(r.specifier))) {
      const start = resolveSource(file, first.specifier, sources);
      if (!start) continue;
      const seen = new Set<string>([start]);
      const queue: Array<{ at: string; via: string[] }> = [{ at: start, via: [start] }];
      for (let item = queue.shift(); item; item = queue.shift()) {
        for (const ref of valueImports(item.at)) {
          if (isRelative(ref.specifier)) {
            const next = resolveSource(item.at, ref.specifier, sources);
            if (next && !seen.has(next)) {
              seen.add(next);
              queue.push({ at: next, via: [...item.via, next] });
            }
          } else if (layerOf(item.at) === 'store' && !isBuiltin(ref.specifier) && !CLIENT_STORE_PACKAGES.includes(packageName(ref.specifier))) {
            out.push({ file, line: first.line, rule: 'layering', detail: `client reaches ${item.via.join(' -> ')}, which imports '${ref.specifier}' (store/ modules the client uses import only ${CLIENT_STORE_PACKAGES.join(', ')} and node builtins)` });
          }
        }
      }
    }
  }
  return out;
}

