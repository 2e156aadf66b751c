// Hydra-style `key=value` overrides of a run config, as RL users type them after the config file:
// `train.steps=3 rollout.temperature=0.7 rollout.agent.command=[python,agent.py]`. Each value is a
// YAML scalar or flow collection (numbers, booleans, null, [lists], {maps}; anything else is a
// string), set at its dot path in the RAW input (creating the sections on the way); `+key=value`
// and `++key=value` are accepted as the same, `~key` removes a key. The result is validated by the
// run config's one schema, so an unknown key or a wrong type is reported with its dot path exactly
// like a problem in the file.
import { parse as parseYaml } from 'yaml';
import { ConfigInputError } from './config-file';
import { parseRunConfig, type ParseRunConfigOptions, type RunConfigInput } from './run-config';

/** One parsed override: set `path` to `value`, or delete it. */
export type Override = { arg: string; path: string[] } & ({ op: 'set'; value: unknown } | { op: 'delete' });

const SEGMENT = /^(?:[A-Za-z_][A-Za-z0-9_-]*|\d+)$/;
/** Keys that would reach Object.prototype instead of the config. */
const FORBIDDEN = new Set(['__proto__', 'prototype', 'constructor']);

function parsePath(key: string, arg: string): string[] {
  const path = key.split('.');
  if (!key || path.some((s) => !SEGMENT.test(s) || FORBIDDEN.has(s))) {
    throw new ConfigInputError(`override "${arg}": expected key=value with a dotted key such as train.steps=3 (letters, digits, "_" and "-" between the dots)`);
  }
  return path;
}

/**
 * An override's value: a YAML scalar or flow collection. Text that YAML would read as a block
 * mapping or sequence ("answer: (\S+)", "- x") stays a string, as does text YAML cannot parse unless
 * it opens a flow collection ("[" or "{": then the syntax error is reported). `key=` is "".
 */
export function parseOverrideValue(raw: string, arg = raw): unknown {
  if (raw === '') return '';
  const flow = /^\s*[[{]/.test(raw);
  let value: unknown;
  try {
    value = parseYaml(raw, { uniqueKeys: true, maxAliasCount: 0 });
  } catch (err) {
    if (flow) throw new ConfigInputError(`override "${arg}": the value is not a valid YAML flow ${raw.trimStart()[0] === '[' ? 'list' : 'mapping'}: ${(err as Error).message.split('\n')[0]}`);
    return raw;
  }
  if (value !== null && typeof value === 'object' && !flow) return raw;
  return value ?? null;
}

/** Parses `key=value`, `+key=value`, `++key=value` and `~key` arguments; a malformed one throws ConfigInputError naming it. */
export function parseOverrides(args: readonly string[]): Override[] {
  return args.map((arg) => {
    if (arg.startsWith('~')) {
      const key = arg.slice(1).replace(/=$/, '');
      if (key.includes('=')) throw new ConfigInputError(`override "${arg}": ~key removes a key and takes no value (write ~${key.split('=')[0]})`);
      return { arg, path: parsePath(key, arg), op: 'delete' as const };
    }
    const eq = arg.indexOf('=');
    if (eq < 0) {
      const file = /\.(ya?ml|json)$/i.test(arg) ? `; to read ${arg} as the config, write --config ${arg}` : '';
      throw new ConfigInputError(`override "${arg}": expected key=value, e.g. train.steps=3 (or ~key to remove a key)${file}`);
    }
    const key = arg.slice(0, eq).replace(/^\+{1,2}/, '');
    return { arg, path: parsePath(key, arg), op: 'set' as const, value: parseOverrideValue(arg.slice(eq + 1), arg) };
  });
}

type Node = Record<string, unknown> | unknown[];

function isNode(v: unknown): v is Node {
  return v !== null && typeof v === 'object';
}

/** In a list, a key is a position from 0 up to its length (the length appends). */
function checkIndex(node: Node, where: string[], key: string, arg: string): void {
  if (!Array.isArray(node)) return;
  if (!/^\d+$/.test(key) || Number(key) > node.length) {
    throw new ConfigInputError(`override ${arg}: ${where.join('.')} is a list of ${node.length}: index it by position 0-${node.length} (e.g. ${where.join('.')}.0), or set the whole list (${where.join('.')}=[a,b])`);
  }
}

/** The copied container at `path` (parents created as mappings); throws when a scalar is in the way. */
function containerAt(root: Record<string, unknown>, path: string[], arg: string): Node {
  let node: Node = root;
  for (let i = 0; i < path.length; i++) {
    const key = path[i];
    checkIndex(node, path.slice(0, i), key, arg);
    const existing: unknown = (node as Record<string, unknown>)[key];
    if (existing !== undefined && !isNode(existing)) {
      throw new ConfigInputError(`override ${arg}: ${path.slice(0, i + 1).join('.')} is ${JSON.stringify(existing)}, not a section: set ${path.slice(0, i + 1).join('.')} itself, or remove it first`);
    }
    const copy: Node = existing === undefined ? {} : Array.isArray(existing) ? [...existing] : { ...existing };
    (node as Record<string, unknown>)[key] = copy;
    node = copy;
  }
  return node;
}

/** One override applied to a copy of `input` (only the containers on its path are copied). */
export function applyOverride(input: Record<string, unknown>, o: Override): Record<string, unknown> {
  const root = { ...input };
  const arg = `"${o.arg}"`;
  const parent = containerAt(root, o.path.slice(0, -1), arg);
  const last = o.path[o.path.length - 1];
  checkIndex(parent, o.path.slice(0, -1), last, arg);
  if (o.op === 'delete') {
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  } else (parent as Record<string, unknown>)[last] = o.value;
  return root;
}

/** The raw input with the overrides applied in order, not validated (withOverrides validates). */
export function applyOverrides(input: RunConfigInput | Record<string, unknown>, args: readonly string[]): Record<string, unknown> {
  return parseOverrides(args).reduce(applyOverride, { ...(input as Record<string, unknown>) });
}

/**
 * `withOverrides(config, ['train.steps=3', 'rollout.temperature=0.7'])`: the raw config with the
 * overrides applied, validated by the run config schema (RunConfigError names each bad field by
 * its dot path); a malformed override throws ConfigInputError. Returns the raw input (defaults are
 * filled when the run starts), so it can be sent as is.
 */
export function withOverrides(config: RunConfigInput | Record<string, unknown>, args: readonly string[], options: ParseRunConfigOptions = {}): RunConfigInput {
  const out = applyOverrides(config, args);
  parseRunConfig(out, options);
  return out as RunConfigInput;
}
