// Every package the repository installs supports the Node versions the repository says it runs on:
// package-lock.json's `engines.node` of each entry must admit the lowest Node of the root's
// `engines.node`, or `npm install` warns EBADENGINE (issue 34: cookie@2 via fastify's
// light-my-request, content-disposition@3 via @fastify/swagger-ui 6, @apidevtools/swagger-parser 13
// each wanted Node >= 22). A failure names the package, its range and who pulls it in.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import semver from 'semver';

const ROOT = path.resolve(__dirname, '..', '..');

interface LockEntry {
  version?: string;
  engines?: Record<string, string> | string[];
  optional?: boolean;
}

test("every locked package's engines.node admits the root package's lowest Node", () => {
  const root = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } };
  const lowest = semver.minVersion(root.engines.node);
  assert.ok(lowest, `package.json engines.node ${root.engines.node} is a range`);
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  const refused: string[] = [];
  for (const [at, entry] of Object.entries(lock.packages)) {
    const range = entry.engines && !Array.isArray(entry.engines) ? entry.engines.node : undefined;
    if (!at || !range || entry.optional) continue;
    if (!semver.satisfies(lowest, range)) refused.push(`${at}@${entry.version} wants node ${range} (see \`npm ls ${at.split('node_modules/').at(-1)}\`)`);
  }
  assert.deepEqual(refused, [], `packages npm warns EBADENGINE about on Node ${lowest.version}:\n  ${refused.join('\n  ')}\npin an older version or an override in package.json`);
});
