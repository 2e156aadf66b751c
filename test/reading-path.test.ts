// docs/architecture.md's reading path ("One sync step, workflow to tensor kernel") against the
// code: at most 8 files, each exists, the first is the workflow, and every later one is imported
// (value or type) by a file listed before it, so following the list is following the step's own
// imports. Reads the TypeScript sources with @babel/parser; needs no services.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse } from '@babel/parser';

const root = path.resolve(__dirname, '..', '..');
const MAX_FILES = 8;

/** The numbered files of the section: `1. **\`workflows/training-run.ts\`**: ...`. */
export function readingPath(doc: string): string[] {
  const section = doc.split('## One sync step, workflow to tensor kernel')[1]?.split(/\n## /)[0];
  assert.ok(section, 'docs/architecture.md has a "## One sync step, workflow to tensor kernel" section');
  return [...section.matchAll(/^\d+\. \*\*`([^`]+)`\*\*/gm)].map((m) => m[1]);
}

/** The repository files a source file imports or re-exports (relative specifiers; type-only included). */
function importsOf(file: string): string[] {
  const source = fs.readFileSync(path.join(root, file), 'utf8');
  const ast = parse(source, { sourceType: 'module', plugins: ['typescript'] });
  const out: string[] = [];
  for (const node of ast.program.body) {
    const specifier = 'source' in node && node.source && typeof node.source.value === 'string' ? node.source.value : undefined;
    if (!specifier?.startsWith('.')) continue;
    const base = path.normalize(path.join(path.dirname(file), specifier));
    const resolved = [`${base}.ts`, path.join(base, 'index.ts')].find((f) => fs.existsSync(path.join(root, f)));
    if (resolved) out.push(resolved);
  }
  return out;
}

test('the reading path of one sync step: at most 8 files, each imported by one before it', () => {
  const files = readingPath(fs.readFileSync(path.join(root, 'docs', 'architecture.md'), 'utf8'));
  assert.ok(files.length >= 2 && files.length <= MAX_FILES, `the reading path lists ${files.length} files (${files.join(', ')}): at most ${MAX_FILES}`);
  assert.equal(files[0], 'workflows/training-run.ts', 'the reading path starts at the workflow');
  for (const file of files) assert.ok(fs.existsSync(path.join(root, file)), `the reading path names ${file}, which does not exist`);
  const problems: string[] = [];
  files.slice(1).forEach((file, i) => {
    const before = files.slice(0, i + 1);
    if (!before.some((b) => importsOf(b).includes(file))) problems.push(`${file} is imported by none of the files listed before it (${before.join(', ')})`);
  });
  assert.deepEqual(problems, [], 'each file of the reading path is what an earlier one imports: reorder the list, or name the file that does');
});

test('the check parses a numbered list and sees a file no earlier one imports', () => {
  const doc = '## One sync step, workflow to tensor kernel\n\n1. **`workflows/training-run.ts`**: the loop.\n2. **`engines/model.ts`**: kernels.\n\n## Next\n3. **`x.ts`**: not in the section.\n';
  assert.deepEqual(readingPath(doc), ['workflows/training-run.ts', 'engines/model.ts']);
  assert.ok(!importsOf('workflows/training-run.ts').includes('engines/model.ts'), 'the workflow does not import the kernels: the rule would report this list');
});
