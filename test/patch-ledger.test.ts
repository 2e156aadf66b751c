// The patch ledger (docs/architecture.md "Patch ledger") against the workflow code: every
// patched() and deprecatePatch() call in workflows/ has a row (with the kind of call it is), every
// row names a live call, at most two are live (worker versioning does the rest), and no patch
// outlives its "retire after" date.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

const root = path.resolve(__dirname, '..', '..');

interface LedgerRow {
  id: string;
  added: string;
  kind: string;
  retireAfter: string;
}

function ledger(): LedgerRow[] {
  const doc = fs.readFileSync(path.join(root, 'docs', 'architecture.md'), 'utf8');
  const section = doc.split('### Patch ledger')[1]?.split(/\n#+ |\nThe `/)[0];
  assert.ok(section, 'docs/architecture.md has a "### Patch ledger" section');
  return [...section.matchAll(/^\| `([^`]+)` \| (\d{4}-\d{2}-\d{2}) \| (\w+) \| (\d{4}-\d{2}-\d{2}) \|/gm)].map((m) => ({ id: m[1], added: m[2], kind: m[3], retireAfter: m[4] }));
}

const MAX_LIVE_PATCHES = 2;

/** The workflow source files: name and text. */
function workflowSources(): Array<{ file: string; source: string }> {
  const dir = path.join(root, 'workflows');
  return fs.readdirSync(dir).filter((f) => f.endsWith('.ts')).map((file) => ({ file, source: fs.readFileSync(path.join(dir, file), 'utf8') }));
}

/** Patch id -> the kinds of call made with it, over the given workflow sources. */
function patchCalls(sources = workflowSources()): Map<string, Set<string>> {
  const calls = new Map<string, Set<string>>();
  for (const { file, source } of sources) {
    const constants = new Map([...source.matchAll(/const (\w+) = '([^']+)'/g)].map((m) => [m[1], m[2]]));
    for (const m of source.matchAll(/\b(patched|deprecatePatch)\((\w+|'[^']+')\)/g)) {
      const id = m[2].startsWith("'") ? m[2].slice(1, -1) : constants.get(m[2]);
      assert.ok(id, `${file}: ${m[0]} names a patch by a constant defined in the same file or a string literal`);
      const kinds = calls.get(id) ?? new Set<string>();
      kinds.add(m[1] === 'patched' ? 'patched' : 'deprecated');
      calls.set(id, kinds);
    }
  }
  return calls;
}

test('every patch in the workflow code is in the ledger, with its kind, and every ledger row is live', () => {
  const rows = ledger();
  const calls = patchCalls();
  for (const [id, kinds] of calls) {
    const row = rows.find((r) => r.id === id);
    assert.ok(row, `patch "${id}" is not in the ledger of docs/architecture.md: add its row (added, kind, retire after, why)`);
    assert.ok(kinds.has(row.kind), `patch "${id}": the ledger says ${row.kind}, the code calls ${[...kinds].join(' and ')}`);
  }
  for (const row of rows) assert.ok(calls.has(row.id), `the ledger lists "${row.id}", which no workflow calls any more: remove its row`);
});

test('no patch outlives its retire-after date', () => {
  const today = new Date().toISOString().slice(0, 10);
  for (const row of ledger()) {
    assert.ok(row.added <= row.retireAfter, `patch "${row.id}": retire after ${row.retireAfter} is before it was added (${row.added})`);
    assert.ok(
      today <= row.retireAfter,
      `patch "${row.id}" was to be retired after ${row.retireAfter}: remove its branch for old executions and the histories only they needed (docs/architecture.md "Patch ledger"), or move the date with a reason`,
    );
  }
});

test('at most two patches are live', () => {
  const calls = patchCalls();
  assert.ok(calls.size <= MAX_LIVE_PATCHES, `${calls.size} live patches (${[...calls.keys()].join(', ')}): at most ${MAX_LIVE_PATCHES}; ship the change as a new worker build instead (docs/architecture.md "What running executions are promised") or retire one`);
});

test('the ledger check finds patch calls by constant and by literal (it would see one added)', () => {
  const calls = patchCalls([{ file: 'x.ts', source: "export const A = 'patch-a';\nif (patched(A)) f();\ndeprecatePatch('patch-b');\n" }]);
  assert.deepEqual([...calls].map(([id, kinds]) => [id, [...kinds]]), [['patch-a', ['patched']], ['patch-b', ['deprecated']]]);
});
