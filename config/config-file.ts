// Reading a run config as users write it: a JSON or YAML file, or an inline JSON/YAML string (YAML
// 1.2 reads JSON as is). Errors name the file (or the inline text) and the flag it came from; a
// syntax error gives line:col. What comes back is the raw input: parseRunConfig validates it.
import fs from 'node:fs';
import { parse as parseYaml, YAMLParseError } from 'yaml';

/** The largest config file read (a run config is a few KiB; the JSON limits bound its shape after parsing). */
export const CONFIG_FILE_MAX_BYTES = 1024 * 1024;

/** A config that cannot be read or parsed (not a schema problem: those are RunConfigError). */
export class ConfigInputError extends Error {
  override readonly name = 'ConfigInputError';
}

export interface ConfigSource {
  /** A file path, or the inline text itself when `inline` is true. */
  value: string;
  /** The text is the config itself, not a path. */
  inline?: boolean;
  /** The flag it came from, named in errors (default "--config"). */
  flag?: string;
}

/** A `--config` value that starts with "{" is inline JSON (or flow YAML), not a file path. */
export function isInlineConfig(value: string): boolean {
  return value.trimStart().startsWith('{');
}

function readConfigFile(file: string, flag: string): string {
  let size: number;
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) throw new ConfigInputError(`${flag} ${file}: not a file (give a .yaml or .json run config)`);
    size = stat.size;
  } catch (err) {
    if (err instanceof ConfigInputError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigInputError(code === 'ENOENT' ? `${flag} ${file}: no such file (check the path; it is relative to ${process.cwd()})` : `${flag} ${file}: cannot read it (${(err as Error).message})`);
  }
  if (size > CONFIG_FILE_MAX_BYTES) throw new ConfigInputError(`${flag} ${file}: ${size} bytes, more than a run config's ${CONFIG_FILE_MAX_BYTES} (is it the right file?)`);
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigInputError(`${flag} ${file}: cannot read it (${(err as Error).message})`);
  }
}

/** The first line of the yaml library's message, without its own " at line L, column C" (we put line:col first). */
function yamlReason(err: YAMLParseError): string {
  return err.message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
}

/**
 * Parses a config's text (JSON or YAML) into the raw object; `where` names it in errors (a path, or
 * "--config (inline)"). An empty document is the empty config; anything but a mapping is refused.
 */
export function parseConfigText(text: string, where: string): Record<string, unknown> {
  let value: unknown;
  try {
    // uniqueKeys: a key given twice is an error, not a silent last-wins; aliases are capped (no alias bombs).
    value = parseYaml(text, { uniqueKeys: true, maxAliasCount: 100, prettyErrors: true });
  } catch (err) {
    if (err instanceof YAMLParseError) {
      const pos = err.linePos?.[0];
      throw new ConfigInputError(`${where}${pos ? `:${pos.line}:${pos.col}` : ''}: not valid YAML or JSON: ${yamlReason(err)}`);
    }
    throw new ConfigInputError(`${where}: not valid YAML or JSON: ${(err as Error).message}`);
  }
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ConfigInputError(`${where}: a run config is one mapping of keys (task, train, rollout, ...), got ${Array.isArray(value) ? 'a list' : `the ${typeof value} ${JSON.stringify(value).slice(0, 60)}`}`);
  }
  return value as Record<string, unknown>;
}

/** Reads a run config from a file, or from inline text; no source is the empty config (all defaults). */
export function readRunConfigInput(source: ConfigSource | undefined): Record<string, unknown> {
  if (!source) return {};
  const flag = source.flag ?? '--config';
  if (source.inline) return parseConfigText(source.value, `${flag} (inline)`);
  return parseConfigText(readConfigFile(source.value, flag), source.value);
}

/** A `--config` value as the CLI takes it: inline when it starts with "{", else a file path. */
export function configSourceOf(value: string | undefined, flag = '--config'): ConfigSource | undefined {
  return value === undefined ? undefined : { value, inline: isInlineConfig(value), flag };
}
