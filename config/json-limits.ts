// Limits on any JSON a user sends (a run config, an HTTP body), checked iteratively BEFORE any
// recursive code (schema validation, JSON.stringify for messages) walks it: a value nested 5,000
// deep or holding millions of nodes is refused at once with the path where it went too far. And
// the one helper that shortens a long value before it goes into an error message.

export interface JsonLimits {
  /** Nesting depth of objects and arrays (the top-level value is depth 1). */
  maxDepth: number;
  /** Values in total (every object, array, string, number, boolean and null). */
  maxNodes: number;
  /** Characters in any one string (object keys included). */
  maxStringChars: number;
}

/** Limits for a run config: far above any real config, far below what breaks validation. */
export const RUN_CONFIG_JSON_LIMITS: JsonLimits = { maxDepth: 32, maxNodes: 20_000, maxStringChars: 4_096 };

/** Limits for an HTTP request body of the OpenAI-compatible endpoint (media travel as base64 strings). */
export const HTTP_BODY_JSON_LIMITS: JsonLimits = { maxDepth: 32, maxNodes: 200_000, maxStringChars: 48 * 1024 * 1024 };

export interface JsonLimitProblem {
  /** Where, as a dotted path with [i] for array items ("" = the top level). */
  path: string;
  message: string;
}

function joinPath(parent: string, key: string | number): string {
  if (typeof key === 'number') return `${parent}[${key}]`;
  const safe = /^[A-Za-z_$][A-Za-z0-9_$-]*$/.test(key) ? key : JSON.stringify(shortened(key, 40));
  return parent ? `${parent}.${safe}` : safe;
}

/**
 * The first way `value` breaks `limits`, or null. Iterative (an explicit stack), so it cannot
 * overflow the call stack however deep the value is, and it stops at the first problem.
 */
export function checkJsonLimits(value: unknown, limits: JsonLimits): JsonLimitProblem | null {
  const stack: Array<{ value: unknown; depth: number; path: string }> = [{ value, depth: 1, path: '' }];
  let nodes = 0;
  while (stack.length) {
    const item = stack.pop()!;
    nodes += 1;
    if (nodes > limits.maxNodes) return { path: item.path, message: `more than ${limits.maxNodes} values in total: send less` };
    const v = item.value;
    if (typeof v === 'string') {
      if (v.length > limits.maxStringChars) return { path: item.path, message: `a string of ${v.length} characters: at most ${limits.maxStringChars}` };
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (item.depth > limits.maxDepth) return { path: item.path, message: `nested deeper than ${limits.maxDepth} levels: flatten it` };
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], depth: item.depth + 1, path: joinPath(item.path, i) });
      continue;
    }
    for (const key of Object.keys(v)) {
      if (key.length > limits.maxStringChars) return { path: item.path, message: `a key of ${key.length} characters: at most ${limits.maxStringChars}` };
      stack.push({ value: (v as Record<string, unknown>)[key], depth: item.depth + 1, path: joinPath(item.path, key) });
    }
  }
  return null;
}

/** `text` cut to at most `max` characters, saying how much was cut, for error messages. */
export function shortened(text: string, max = 120): string {
  if (text.length <= max) return text;
  const keep = Math.max(0, max - 30);
  return `${text.slice(0, keep)}... (${text.length - keep} more characters)`;
}
