// Hugging Face Hub ids in `model.from` (`org/name`, `org/name@revision`): found in the standard Hub
// cache as huggingface_hub and @huggingface/hub write it (<cache>/models--{org}--{name}/refs/{revision}
// holds a commit hash; snapshots/{hash}/ is the model directory, its files symlinks into blobs/), or,
// where the Hub answers and HF_HUB_OFFLINE is not set, downloaded into that cache with @huggingface/hub
// (the model's top-level config, tokenizer and safetensors files only). The cache root and settings
// come from config/environment-hub.ts; engines/model-sources.ts decides when a source is a Hub id.
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { HubEnvironment } from '../config/environment-hub';

export interface HubId {
  /** `org/name`. */
  repo: string;
  /** A branch, tag or full commit sha; "main" when the id names none. */
  revision: string;
}

/** A full commit sha: such a revision names snapshots/{sha} directly. */
export const COMMIT_SHA = /^[0-9a-f]{40}$/;
// huggingface_hub's repo id rule: word characters, '.', '-'; starts and ends with a word character; no '--' or '..'.
const PART = String.raw`\w(?:[\w.-]*\w)?`;
const HUB_ID = new RegExp(`^(${PART})/(${PART})(?:@(\\S+))?$`);

/** `from` as a Hub id, or undefined when it does not have the form `org/name[@revision]`. */
export function parseHubId(from: string): HubId | undefined {
  const m = HUB_ID.exec(from);
  if (!m) return undefined;
  const repo = `${m[1]}/${m[2]}`;
  if (repo.includes('--') || repo.includes('..')) return undefined;
  const revision = m[3] ?? 'main';
  if (revision.split('/').some((s) => s === '' || s === '.' || s === '..')) return undefined;
  return { repo, revision };
}

/** How an id is written back in messages: `org/name` or `org/name@revision`. */
export const hubIdText = (id: HubId): string => (id.revision === 'main' ? id.repo : `${id.repo}@${id.revision}`);

/** <cache>/models--{org}--{name}: the id's folder in the cache. */
export function hubRepoFolder(cacheDir: string, repo: string): string {
  return path.join(cacheDir, `models--${repo.split('/').join('--')}`);
}

export interface CachedSnapshot {
  /** The snapshot directory, when it holds a loadable model. */
  dir?: string;
  /** What was looked at and why it does not count, when dir is undefined. */
  problem?: string;
}

/** Why `dir` is not a model directory (config.json and safetensors weights, every shard present), or undefined. */
async function snapshotProblem(dir: string): Promise<string | undefined> {
  if (!existsSync(dir)) return `${dir} does not exist`;
  if (!existsSync(path.join(dir, 'config.json'))) return `${dir} has no config.json (or its blob is missing)`;
  if (existsSync(path.join(dir, 'model.safetensors'))) return undefined;
  const index = path.join(dir, 'model.safetensors.index.json');
  if (!existsSync(index)) return `${dir} has no model.safetensors or model.safetensors.index.json`;
  const weightMap = (JSON.parse(await readFile(index, 'utf8')) as { weight_map?: Record<string, string> }).weight_map ?? {};
  const missing = [...new Set(Object.values(weightMap))].filter((shard) => !existsSync(path.join(dir, shard)));
  return missing.length ? `${dir} lacks the shards ${missing.join(', ')} of model.safetensors.index.json` : undefined;
}

/** The commit a revision names in the cache: itself when it is a full sha, else the content of refs/{revision}. */
async function cachedCommit(folder: string, revision: string): Promise<{ commit?: string; problem?: string }> {
  if (COMMIT_SHA.test(revision)) return { commit: revision };
  const ref = path.join(folder, 'refs', revision);
  if (!existsSync(ref)) return { problem: `${ref} does not exist` };
  const commit = (await readFile(ref, 'utf8')).trim();
  return COMMIT_SHA.test(commit) ? { commit } : { problem: `${ref} holds "${commit.slice(0, 80)}", not a commit hash` };
}

/** The id's snapshot in the cache at `cacheDir`, when it holds config.json and the weights. */
export async function findCachedSnapshot(id: HubId, cacheDir: string): Promise<CachedSnapshot> {
  const folder = hubRepoFolder(cacheDir, id.repo);
  const { commit, problem } = await cachedCommit(folder, id.revision);
  if (!commit) return { problem };
  const dir = path.join(folder, 'snapshots', commit);
  const why = await snapshotProblem(dir);
  return why ? { problem: why } : { dir };
}

/** How long the Hub may take to start answering one request before the download gives up. */
export const HUB_ANSWER_TIMEOUT_MS = 20_000;

export interface HubClientOptions {
  hub: HubEnvironment;
  /** The fetch the client uses (tests count calls with it); default: global fetch. */
  fetch?: typeof fetch;
  /** Default HUB_ANSWER_TIMEOUT_MS. */
  answerTimeoutMs?: number;
  log?: (line: string) => void;
}

/** `base`, aborted when the response headers have not come within `ms`: without a network, no hang. */
function answeringFetch(base: typeof fetch, ms: number): typeof fetch {
  return async (input, init) => {
    const timer = new AbortController();
    const t = setTimeout(() => timer.abort(new Error(`the Hub did not answer within ${ms / 1000} s`)), ms);
    const signal = init?.signal ? AbortSignal.any([init.signal, timer.signal]) : timer.signal;
    try {
      return await base(input, { ...init, signal });
    } finally {
      clearTimeout(t);
    }
  };
}

/** What every @huggingface/hub call takes: the repo, the endpoint, the token, the guarded fetch. */
function clientParams(id: HubId, o: HubClientOptions) {
  const f = answeringFetch(o.fetch ?? fetch, o.answerTimeoutMs ?? HUB_ANSWER_TIMEOUT_MS);
  return { repo: id.repo, hubUrl: o.hub.endpoint, fetch: f, ...(o.hub.token ? { accessToken: o.hub.token } : {}) };
}

/** The commit the Hub resolves the id's revision to (asks the Hub unless it is a full sha). */
export async function hubCommit(id: HubId, o: HubClientOptions): Promise<string> {
  if (COMMIT_SHA.test(id.revision)) return id.revision;
  const { modelInfo } = await import('@huggingface/hub');
  const { repo, ...params } = clientParams(id, o);
  const info = await modelInfo({ ...params, name: repo, revision: id.revision, additionalFields: ['sha'] });
  if (!info.sha) throw new Error(`the Hub gave no commit for ${hubIdText(id)}`);
  return info.sha;
}

/** The files a model needs: top-level JSON (config, tokenizer, index), safetensors, chat templates, sentencepiece. */
const MODEL_FILE = /^(?:[^/]+\.(?:json|safetensors|jinja|txt)|tokenizer\.model)$/;

/** Downloads the id's model files into the cache (as `huggingface-cli download` lays them out) and returns the snapshot. */
export async function downloadHubModel(id: HubId, o: HubClientOptions): Promise<string> {
  const { listFiles, downloadFileToCacheDir } = await import('@huggingface/hub');
  const params = clientParams(id, o);
  const commit = await hubCommit(id, o);
  const files: string[] = [];
  for await (const entry of listFiles({ ...params, revision: commit })) if (entry.type === 'file' && MODEL_FILE.test(entry.path)) files.push(entry.path);
  if (!files.includes('config.json')) throw new Error(`${hubIdText(id)} at ${commit} has no config.json: not a transformers model repository`);
  for (const file of files) {
    o.log?.(`[model] downloading ${id.repo}/${file} (${commit.slice(0, 12)}) into ${o.hub.cacheDir}`);
    await downloadFileToCacheDir({ ...params, path: file, revision: commit, cacheDir: o.hub.cacheDir });
  }
  const folder = hubRepoFolder(o.hub.cacheDir, id.repo);
  // The ref is written last, as huggingface_hub does after the files: a broken download leaves no ref to a partial snapshot.
  if (id.revision !== commit) {
    await mkdir(path.dirname(path.join(folder, 'refs', id.revision)), { recursive: true });
    await writeFile(path.join(folder, 'refs', id.revision), commit);
  }
  const snapshot = await findCachedSnapshot({ repo: id.repo, revision: commit }, o.hub.cacheDir);
  if (!snapshot.dir) throw new Error(`downloaded ${hubIdText(id)}, but ${snapshot.problem}`);
  return snapshot.dir;
}

/** The error for an id that is neither cached nor downloadable: the id, the revision, where it looked, how to fix. */
export function hubMissError(id: HubId, hub: HubEnvironment, problem: string | undefined, why: string): Error {
  const where = `${hub.cacheDir}${hub.cacheSource === 'default' ? '' : ` (from ${hub.cacheSource})`}`;
  const revisionFlag = id.revision === 'main' ? '' : ` --revision ${id.revision}`;
  return new Error(
    `Hugging Face Hub model ${id.repo} (revision ${id.revision}) is not in the Hub cache ${where}: ${problem ?? 'no snapshot'}; ${why}. ` +
      `To fix: where there is a network run \`huggingface-cli download ${id.repo}${revisionFlag}\` and copy its ${path.basename(hubRepoFolder(hub.cacheDir, id.repo))} folder into ${hub.cacheDir}, ` +
      'or set HF_HUB_CACHE (or HF_HOME) to a cache that holds it, or give model.from a local model directory',
  );
}
