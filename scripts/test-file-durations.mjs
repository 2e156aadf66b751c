// A node:test reporter that prints each test file's wall time, slowest first, when the run ends.
// Files run one at a time (--test-concurrency=1), so a file's time is from the previous file's
// last event to its own last one (the runner enqueues every file up front, so first events say
// nothing). With RELAX_TEST_DURATIONS set, each row is also appended to that file as a JSON line
// (scripts/test.js prints the ten slowest suites of the whole run from it at the end).
import { appendFileSync } from 'node:fs';

export default async function* fileDurations(source) {
  const lastEventAt = new Map();
  const counts = new Map();
  const start = Date.now();
  for await (const event of source) {
    const file = event.data?.file;
    if (!file) continue;
    lastEventAt.set(file, Date.now());
    if ((event.type === 'test:pass' || event.type === 'test:fail') && event.data.nesting === 0) {
      const c = counts.get(file) ?? { tests: 0, failed: 0 };
      c.tests++;
      if (event.type === 'test:fail') c.failed++;
      counts.set(file, c);
    }
  }
  let previous = start;
  const rows = [];
  for (const [file, at] of [...lastEventAt].sort((a, b) => a[1] - b[1])) {
    rows.push({ file, seconds: (at - previous) / 1000, ...(counts.get(file) ?? { tests: 0, failed: 0 }) });
    previous = at;
  }
  rows.sort((a, b) => b.seconds - a.seconds);
  if (process.env.RELAX_TEST_DURATIONS) {
    const lane = process.env.RELAX_TEST_LANE ?? '';
    appendFileSync(process.env.RELAX_TEST_DURATIONS, rows.map((r) => `${JSON.stringify({ lane, file: r.file.replace(/^.*\/dist\//, 'dist/'), seconds: r.seconds })}\n`).join(''));
  }
  yield `# file durations (wall, slowest first; total ${((previous - start) / 1000).toFixed(0)} s)\n`;
  for (const r of rows) yield `#   ${r.seconds.toFixed(1).padStart(7)} s  ${String(r.tests).padStart(3)} tests${r.failed ? ` (${r.failed} failed)` : ''}  ${r.file.replace(/^.*\/dist\//, 'dist/')}\n`;
}
