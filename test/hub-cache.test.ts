// Hugging Face Hub ids in model.from: a tiny llama laid out in a temp Hub cache exactly as
// huggingface_hub writes it (blobs/ named by git sha1 or LFS sha256, snapshots/<commit>/ symlinks,
// refs/<revision>) resolves with and without @revision, through HF_HUB_CACHE, HF_HOME and
// XDG_CACHE_HOME, and loads through the normal loader; a missing id is a clear error naming the id,
// the revision and the cache; HF_HUB_OFFLINE=1 never touches the network; a local path wins over an
// id; and the download path (a fake Hub answering @huggingface/hub's requests) fills the same cache.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { lstat, mkdir, mkdtemp, readFile, readlink, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { hubEnvironment, type HubEnvironment } from '../config/environment-hub';
import { parseRunConfig } from '../config/run-config';
import { loadHfModel, writeHfModel } from '../engines/hf-checkpoint';
import { parseHubId } from '../engines/hub-cache';
import { initWeights, type ModelConfig } from '../engines/model';
import { checkModelSource, resolveModelSource } from '../engines/model-sources';

const LLAMA: ModelConfig = { architecture: 'llama', vocabSize: 40, dModel: 16, nLayers: 1, nHeads: 4, nKvHeads: 2, headDim: 4, dFF: 24, contextLength: 64, ropeTheta: 10000, rmsNormEps: 1e-5, tieEmbeddings: false };
const COMMIT = 'a'.repeat(39) + '1';
const REPO = 'TinyOrg/tiny-llama';
let root: string;
let modelDir: string;
let files: Array<{ name: string; data: Buffer; blob: string; lfs: boolean }>;

/** The blob name the Hub client gives a file: the LFS sha256 for weights, the git blob sha1 for text files. */
const gitSha1 = (data: Buffer) => createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex');
const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** A cache under `cacheDir` as huggingface_hub lays it out: relative symlinks from the snapshot into blobs/. */
async function writeHubCache(cacheDir: string, refs: Record<string, string> = { main: COMMIT }): Promise<string> {
  const folder = path.join(cacheDir, `models--${REPO.replace('/', '--')}`);
  const snapshot = path.join(folder, 'snapshots', COMMIT);
  await mkdir(path.join(folder, 'blobs'), { recursive: true });
  await mkdir(snapshot, { recursive: true });
  for (const f of files) {
    await writeFile(path.join(folder, 'blobs', f.blob), f.data);
    await symlink(path.join('..', '..', 'blobs', f.blob), path.join(snapshot, f.name));
  }
  for (const [ref, commit] of Object.entries(refs)) {
    await mkdir(path.dirname(path.join(folder, 'refs', ref)), { recursive: true });
    await writeFile(path.join(folder, 'refs', ref), commit);
  }
  return snapshot;
}

const offline = (cacheDir: string): HubEnvironment => ({ ...hubEnvironment({ HF_HUB_CACHE: cacheDir, HF_HUB_OFFLINE: '1' }) });

before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'relax-hub-'));
  modelDir = path.join(root, 'model');
  await writeHfModel(modelDir, LLAMA, initWeights(LLAMA, 3));
  await writeFile(path.join(modelDir, 'generation_config.json'), JSON.stringify({ eos_token_id: 2 }));
  files = [];
  for (const name of (await readdir(modelDir)).sort()) {
    const data = await readFile(path.join(modelDir, name));
    const lfs = name.endsWith('.safetensors');
    files.push({ name, data, lfs, blob: lfs ? sha256(data) : gitSha1(data) });
  }
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

test('hub ids: org/name and org/name@revision parse; paths, names and malformed ids do not', () => {
  assert.deepEqual(parseHubId('HuggingFaceTB/SmolLM2-135M-Instruct'), { repo: 'HuggingFaceTB/SmolLM2-135M-Instruct', revision: 'main' });
  assert.deepEqual(parseHubId('org/name@v1.0'), { repo: 'org/name', revision: 'v1.0' });
  assert.deepEqual(parseHubId(`org/name@${COMMIT}`), { repo: 'org/name', revision: COMMIT });
  assert.deepEqual(parseHubId('org/name@refs/pr/1'), { repo: 'org/name', revision: 'refs/pr/1' });
  for (const from of ['HuggingFaceTB/SmolLM2-135M-Instruct', `org/name@${COMMIT}`]) {
    assert.equal(parseRunConfig({ task: 'arith', model: { from }, data: { train: 'examples/data/arith-train.jsonl' } }).model.from, from, 'the run config accepts a Hub id');
  }
  for (const bad of ['smollm2-135m-instruct', './org/name', '/abs/path', 'a/b/c', 'org/na--me', 'org/.name', 'org/name@', 'org/name@../x', 'org/name.']) assert.equal(parseHubId(bad), undefined, bad);
});

test('the cache root: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub', () => {
  const all = { HF_HUB_CACHE: '/a', HUGGINGFACE_HUB_CACHE: '/b', HF_HOME: '/c', XDG_CACHE_HOME: '/d' };
  assert.equal(hubEnvironment(all).cacheDir, '/a');
  assert.equal(hubEnvironment({ ...all, HF_HUB_CACHE: '' }).cacheDir, '/b');
  assert.equal(hubEnvironment({ HF_HOME: '/c', XDG_CACHE_HOME: '/d' }).cacheDir, '/c/hub');
  assert.equal(hubEnvironment({ XDG_CACHE_HOME: '/d' }).cacheDir, '/d/huggingface/hub');
  assert.equal(hubEnvironment({}).cacheDir, path.join(homedir(), '.cache', 'huggingface', 'hub'));
  assert.equal(hubEnvironment({ HF_HOME: '~/hf' }).cacheDir, path.join(homedir(), 'hf', 'hub'));
  assert.equal(hubEnvironment({ HF_HUB_OFFLINE: 'yes' }).offline, true);
  assert.equal(hubEnvironment({ TRANSFORMERS_OFFLINE: '1' }).offline, true);
  assert.equal(hubEnvironment({ HF_HUB_OFFLINE: '0' }).offline, false);
  assert.equal(hubEnvironment({ HF_ENDPOINT: 'http://mirror.local/' }).endpoint, 'http://mirror.local');
  assert.throws(() => hubEnvironment({ HF_ENDPOINT: 'mirror.local' }), /HF_ENDPOINT: expected an http\(s\) URL/);
});

test('a cached id resolves to its snapshot, with and without @revision, via HF_HUB_CACHE and HF_HOME, and loads', async () => {
  const cacheDir = path.join(root, 'cache-a');
  const snapshot = await writeHubCache(cacheDir, { main: COMMIT, v1: COMMIT });
  const home = path.join(root, 'home');
  for (const from of [REPO, `${REPO}@main`, `${REPO}@v1`, `${REPO}@${COMMIT}`]) {
    assert.equal(await resolveModelSource(from, { home, hub: offline(cacheDir) }), snapshot, from);
    await checkModelSource(from, home, { hub: offline(cacheDir) });
  }
  // HF_HOME: the cache is HF_HOME/hub.
  const hfHome = path.join(root, 'hf-home');
  const viaHome = await writeHubCache(path.join(hfHome, 'hub'));
  assert.equal(await resolveModelSource(REPO, { home, hub: hubEnvironment({ HF_HOME: hfHome, HF_HUB_OFFLINE: '1' }) }), viaHome);
  // The process environment is what resolveModelSource reads when given no hub settings.
  const saved = { HF_HUB_CACHE: process.env.HF_HUB_CACHE, HF_HUB_OFFLINE: process.env.HF_HUB_OFFLINE };
  Object.assign(process.env, { HF_HUB_CACHE: cacheDir, HF_HUB_OFFLINE: '1' });
  try {
    assert.equal(await resolveModelSource(REPO, { home }), snapshot);
  } finally {
    for (const [k, v] of Object.entries(saved)) v === undefined ? delete process.env[k] : (process.env[k] = v);
  }
  assert.ok((await lstat(path.join(snapshot, 'model.safetensors'))).isSymbolicLink(), 'the snapshot holds symlinks into blobs/');
  const [loaded, original] = [await loadHfModel(snapshot), await loadHfModel(modelDir)];
  assert.deepEqual(loaded.config, original.config);
  assert.deepEqual(loaded.weights, original.weights, 'the snapshot loads the same weights through the normal loader');
});

test('a missing or incomplete id is a clear error naming the id, revision and cache; HF_HUB_OFFLINE never fetches', async () => {
  const cacheDir = path.join(root, 'cache-b');
  await writeHubCache(cacheDir);
  let calls = 0;
  const spy: typeof fetch = async () => {
    calls++;
    throw new TypeError('fetch failed');
  };
  const home = path.join(root, 'home');
  const hub = offline(cacheDir);
  const missing = /Hugging Face Hub model TinyOrg\/other \(revision main\) is not in the Hub cache .*cache-b \(from HF_HUB_CACHE\): .*models--TinyOrg--other.refs.main does not exist; HF_HUB_OFFLINE is set.*huggingface-cli download TinyOrg\/other`.*HF_HUB_CACHE \(or HF_HOME\).*local model directory/;
  await assert.rejects(resolveModelSource('TinyOrg/other', { home, hub, fetch: spy }), missing);
  await assert.rejects(checkModelSource('TinyOrg/other', home, { hub, fetch: spy }), missing);
  await assert.rejects(resolveModelSource(`${REPO}@v2`, { home, hub, fetch: spy }), /model TinyOrg\/tiny-llama \(revision v2\) .*refs.v2 does not exist.*--revision v2/);
  // A snapshot whose weights blob is gone (an interrupted copy) does not count.
  await rm(path.join(cacheDir, `models--TinyOrg--tiny-llama`, 'blobs', files.find((f) => f.lfs)!.blob));
  await assert.rejects(resolveModelSource(REPO, { home, hub, fetch: spy }), /has no model.safetensors or model.safetensors.index.json/);
  assert.equal(calls, 0, 'HF_HUB_OFFLINE: no request at all');
  // Online but without a network: the download is tried, fails fast, and says so.
  const online = { ...hub, offline: false };
  await assert.rejects(resolveModelSource('TinyOrg/other', { home, hub: online, fetch: spy }), /TinyOrg\/other \(revision main\) is not in the Hub cache.*downloading it from https:\/\/huggingface.co failed: fetch failed/);
  await assert.rejects(checkModelSource('TinyOrg/other', home, { hub: online, fetch: spy }), /the Hub at https:\/\/huggingface.co did not resolve it, so a run could not download it: fetch failed/);
  assert.equal(calls, 2);
});

test('a path that exists wins over a Hub id of the same spelling; other sources keep their errors', async () => {
  const cwd = process.cwd();
  process.chdir(root);
  try {
    await mkdir(path.join(root, 'TinyOrg'), { recursive: true });
    await symlink(modelDir, path.join(root, 'TinyOrg', 'tiny-llama'));
    const hub = offline(path.join(root, 'no-cache'));
    assert.equal(await resolveModelSource(REPO, { home: root, hub }), path.join(root, REPO));
    await checkModelSource(REPO, root, { hub });
    await checkModelSource('smollm2-135m-instruct', root, { hub });
    await assert.rejects(checkModelSource('missing.gguf', root, { hub }), /GGUF file .*missing.gguf does not exist/);
    await assert.rejects(checkModelSource('no-such-model', root, { hub }), /model source "no-such-model" is not found.*or a Hugging Face Hub id org\/name/);
    await assert.rejects(checkModelSource('TinyOrg', root, { hub }), /is a directory without config.json/);
  } finally {
    process.chdir(cwd);
  }
});

/** A fake Hub answering the requests @huggingface/hub makes: model info, tree, paths-info and resolve (with Range). */
function fakeHub(endpoint: string, served: typeof files, seen: string[]): typeof fetch {
  const entry = (f: (typeof files)[number]) => ({ type: 'file', path: f.name, size: f.data.length, oid: gitSha1(f.data), ...(f.lfs ? { lfs: { oid: f.blob, size: f.data.length, pointerSize: 130 } } : {}) });
  const extra = [{ type: 'file', path: 'pytorch_model.bin', size: 3, oid: 'b'.repeat(40) }, { type: 'directory', path: 'onnx', size: 0, oid: 'c'.repeat(40) }];
  return async (input, init) => {
    const url = new URL(String(input));
    const route = `${init?.method ?? 'GET'} ${url.pathname}`;
    seen.push(route);
    if (route === `GET /api/models/${REPO}/revision/main`) return Response.json({ _id: 'x', id: REPO, sha: COMMIT, lastModified: '2026-01-01T00:00:00Z' });
    if (route === `GET /api/models/${REPO}/tree/${COMMIT}`) return Response.json([...served.map(entry), ...extra]);
    if (route === `POST /api/models/${REPO}/paths-info/${COMMIT}`) {
      const asked = (JSON.parse(String(init?.body)) as { paths: string[] }).paths;
      return Response.json(served.filter((f) => asked.includes(f.name)).map((f) => ({ ...entry(f), lastCommit: { id: COMMIT, title: 't', date: '2026-01-01T00:00:00Z' } })));
    }
    const f = served.find((s) => url.pathname === `/${REPO}/resolve/${COMMIT}/${s.name}`);
    if (!f || url.origin !== endpoint) return new Response('not found', { status: 404 });
    const range = /bytes=(\d+)-(\d*)/.exec(new Headers(init?.headers).get('Range') ?? '');
    if (!range) return new Response(f.data, { headers: { ETag: `"${f.blob}"` } });
    const end = range[2] ? Math.min(Number(range[2]), f.data.length - 1) : f.data.length - 1;
    return new Response(f.data.subarray(Number(range[1]), end + 1), { status: 206, headers: { 'Content-Range': `bytes ${range[1]}-${end}/${f.data.length}`, ETag: `"${f.blob}"` } });
  };
}

test('online: the id is downloaded with @huggingface/hub into the standard cache layout, then found offline', async () => {
  const cacheDir = path.join(root, 'cache-download');
  const endpoint = 'http://hub.test';
  const seen: string[] = [];
  const hub: HubEnvironment = { cacheDir, cacheSource: 'HF_HUB_CACHE', offline: false, endpoint };
  const origDebug = console.debug;
  console.debug = () => undefined; // the client announces each file on console.debug
  let dir: string;
  try {
    await checkModelSource(REPO, root, { hub, fetch: fakeHub(endpoint, files, seen) });
    dir = await resolveModelSource(REPO, { home: root, hub, fetch: fakeHub(endpoint, files, seen) });
  } finally {
    console.debug = origDebug;
  }
  const folder = path.join(cacheDir, 'models--TinyOrg--tiny-llama');
  assert.equal(dir, path.join(folder, 'snapshots', COMMIT));
  assert.equal((await readFile(path.join(folder, 'refs', 'main'), 'utf8')).trim(), COMMIT);
  for (const f of files) {
    assert.ok((await lstat(path.join(dir, f.name))).isSymbolicLink(), `${f.name} is a symlink`);
    assert.ok((await readlink(path.join(dir, f.name))).includes(path.join('blobs', '')), `${f.name} points into blobs/`);
    assert.deepEqual(await readFile(path.join(dir, f.name)), f.data, `${f.name} has the served bytes`);
  }
  assert.deepEqual((await readdir(dir)).sort(), files.map((f) => f.name).sort(), 'only the model files: no pytorch_model.bin, no onnx/');
  assert.equal((await loadHfModel(dir)).config.dModel, LLAMA.dModel);
  // Now offline: the same id is found in the cache the download filled, without a request.
  const before = seen.length;
  assert.equal(await resolveModelSource(REPO, { home: root, hub: { ...hub, offline: true }, fetch: fakeHub(endpoint, files, seen) }), dir);
  assert.equal(seen.length, before);
});
