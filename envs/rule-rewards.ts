// Built-in rule rewards for dataset tasks: small pure functions that extract an answer from a
// response (last number, last \boxed{...}, a regex), compare it with the reference (exact after
// normalization, numeric within a tolerance, regex), and ruleReward, which combines them with an
// optional format check into one reward in [0, 1].
import type { DataRewardConfig } from '../config/data-config';

/** A resolved reward spec (config/data-config.ts DataRewardConfig): extract is always set. */
export type RuleRewardSpec = DataRewardConfig;

const SURROUNDING_PAIRS: ReadonlyArray<readonly [string, string]> = [['$', '$'], ['"', '"'], ["'", "'"], ['`', '`'], ['**', '**']];
const TRAILING_PUNCTUATION = /[.,;:!?]+$/;
/** A comma between digit groups: "1,234,567". Only groups of exactly three digits count. */
const THOUSANDS_SEPARATOR = /(?<=\d),(?=\d{3}(?!\d))/g;

/**
 * The canonical form exactMatch compares: trimmed; surrounding $...$, quotes, backticks and **bold**
 * and trailing . , ; : ! ? removed (repeatedly, so '"42."' becomes 42); whitespace collapsed to one
 * space; lowercased; thousands separators removed from numbers ("1,234" becomes "1234").
 */
export function normalizeAnswer(text: string): string {
  let s = text.trim();
  for (;;) {
    const before = s;
    s = s.replace(TRAILING_PUNCTUATION, '').trim();
    for (const [open, close] of SURROUNDING_PAIRS) {
      if (s.length >= open.length + close.length && s.startsWith(open) && s.endsWith(close)) {
        s = s.slice(open.length, s.length - close.length).trim();
      }
    }
    if (s === before) break;
  }
  return s.replace(/\s+/g, ' ').toLowerCase().replace(THOUSANDS_SEPARATOR, '');
}

// A number as a model writes it: optional sign, digits (optionally grouped by thousands commas) or a
// leading-dot decimal, optional decimals and exponent, optionally "/ denominator" (a fraction).
const UNSIGNED = String.raw`(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+`;
const NUMBER_IN_TEXT = new RegExp(String.raw`(-?)(${UNSIGNED})(?:\s*/\s*(${UNSIGNED}))?`, 'g');

/**
 * The last number in the text, thousands separators removed: "The answer is 1,234." gives "1234",
 * "x = -3.5" gives "-3.5", "1/2" gives "1/2" (a fraction stays one number). A minus sign counts only
 * when no letter, digit or ")" comes right before it, so "5-3" gives "3", not "-3". Undefined when
 * the text has no number.
 */
export function extractLastNumber(text: string): string | undefined {
  let last: string | undefined;
  for (const m of text.matchAll(NUMBER_IN_TEXT)) {
    const before = m.index > 0 ? text[m.index - 1] : '';
    const sign = m[1] && !/[\w)]/.test(before) ? '-' : '';
    const num = m[2].replace(/,/g, '');
    last = m[3] === undefined ? sign + num : `${sign}${num}/${m[3].replace(/,/g, '')}`;
  }
  return last;
}

/**
 * The content of the last \boxed{...} (or \fbox{...}) in the text, nested braces included:
 * "\boxed{\frac{1}{2}}" gives "\frac{1}{2}". Undefined when there is none or its braces never close.
 */
export function extractBoxed(text: string): string | undefined {
  const starts = [...text.matchAll(/\\(?:boxed|fbox)\s*\{/g)];
  for (let k = starts.length - 1; k >= 0; k--) {
    const open = starts[k].index + starts[k][0].length;
    let depth = 1;
    for (let i = open; i < text.length; i++) {
      if (text[i] === '{') depth++;
      else if (text[i] === '}' && --depth === 0) return text.slice(open, i).trim();
    }
  }
  return undefined;
}

const regexCache = new Map<string, RegExp>();

/** Compiles `source` with `flags` (cached); throws an error that names the pattern. */
export function compileRegex(source: string, flags = ''): RegExp {
  const key = `${flags}/${source}`;
  let re = regexCache.get(key);
  if (!re) {
    try {
      re = new RegExp(source, flags);
    } catch (err) {
      throw new Error(`regex ${JSON.stringify(source)} is invalid (${(err as Error).message}): fix the pattern`);
    }
    if (regexCache.size > 1000) regexCache.clear();
    regexCache.set(key, re);
  }
  return re;
}

/**
 * The last match of `pattern` in the text: its first capture group when the pattern has one and it
 * took part in the match, else the whole match; trimmed. Undefined when nothing matches.
 */
export function extractByRegex(text: string, pattern: string | RegExp): string | undefined {
  const source = typeof pattern === 'string' ? pattern : pattern.source;
  const flags = typeof pattern === 'string' ? 'g' : pattern.flags.includes('g') ? pattern.flags : pattern.flags + 'g';
  let last: string | undefined;
  for (const m of text.matchAll(compileRegex(source, flags))) last = (m[1] ?? m[0]).trim();
  return last;
}

/** True when both are equal after normalizeAnswer. */
export function exactMatch(response: string, answer: string): boolean {
  return normalizeAnswer(response) === normalizeAnswer(answer);
}

const PLAIN_NUMBER = /^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$/;

function parsePlain(s: string): number | undefined {
  const t = s.trim().replace(THOUSANDS_SEPARATOR, '');
  return PLAIN_NUMBER.test(t) ? Number(t) : undefined;
}

/**
 * A number from an answer string, or undefined: "42", "-3.5", "+2", "1,234" (thousands commas),
 * "1e-3", "$5", "50%" (read as 50, the % is dropped), "1/2" and "\frac{1}{2}" (also \dfrac, \tfrac,
 * with a leading "-") as fractions, after normalizeAnswer's stripping of quotes, $ and trailing
 * punctuation. Anything else (words, "1,2", "2x") is not a number.
 */
export function parseNumber(text: string): number | undefined {
  const s = normalizeAnswer(text).replace(/^\\?\$\s*/, '').replace(/\s*\\?%$/, '');
  const frac =
    /^([-+]?)\s*\\[dt]?frac\s*\{([^{}]+)\}\s*\{([^{}]+)\}$/.exec(s) ?? /^([-+]?)\s*\(?([^/()]+)\/([^/()]+?)\)?$/.exec(s);
  let value: number | undefined;
  if (frac) {
    const num = parsePlain(frac[2]);
    const den = parsePlain(frac[3]);
    value = num === undefined || den === undefined || den === 0 ? undefined : (frac[1] === '-' ? -1 : 1) * (num / den);
  } else {
    value = parsePlain(s);
  }
  return value !== undefined && Number.isFinite(value) ? value : undefined;
}

/**
 * True when both parse as numbers (parseNumber) and |response - answer| <= tolerance * max(1, |answer|):
 * an absolute tolerance for answers below 1 in size, a relative one above. False when either does not parse.
 */
export function numericMatch(response: string, answer: string, tolerance = 1e-6): boolean {
  if (!(tolerance >= 0)) throw new Error(`numeric tolerance is ${tolerance}: pass a non-negative number`);
  const a = parseNumber(response);
  const b = parseNumber(answer);
  if (a === undefined || b === undefined) return false;
  return Math.abs(a - b) <= tolerance * Math.max(1, Math.abs(b));
}

/** True when the whole text (trimmed) matches `pattern`, i.e. `^(?:pattern)$`. */
export function regexMatch(text: string, pattern: string): boolean {
  return compileRegex(`^(?:${pattern})$`).test(text.trim());
}

/** The response up to the first occurrence of any stop string (the whole text when none occurs). */
export function cutAtStop(text: string, stopStrings: readonly string[]): string {
  let end = text.length;
  for (const stop of stopStrings) {
    if (stop === '') continue;
    const i = text.indexOf(stop);
    if (i >= 0 && i < end) end = i;
  }
  return text.slice(0, end);
}

/** The part of the response `spec.extract` selects, or undefined when it finds nothing. */
export function extractAnswer(spec: Pick<RuleRewardSpec, 'extract' | 'pattern'>, response: string): string | undefined {
  switch (spec.extract) {
    case 'none':
      return response;
    case 'last_number':
      return extractLastNumber(response);
    case 'boxed':
      return extractBoxed(response);
    case 'regex':
      if (spec.pattern === undefined) throw new Error('reward extract "regex" needs a pattern: set data.reward.pattern');
      return extractByRegex(response, spec.pattern);
  }
}

/** Whether the extracted text is right for `answer` under `spec.kind`. */
export function answerMatches(spec: Pick<RuleRewardSpec, 'kind' | 'tolerance'>, extracted: string, answer: string): boolean {
  switch (spec.kind) {
    case 'exact':
      return exactMatch(extracted, answer);
    case 'numeric':
      return numericMatch(extracted, answer, spec.tolerance ?? 1e-6);
    case 'regex':
      return regexMatch(extracted, answer);
  }
}

/**
 * The reward of one response in [0, 1]: the response is cut at the first stop string (e.g. the
 * chat template's end-of-turn "<|im_end|>"; a response without one is graded as it is), the answer
 * is extracted (spec.extract) and compared (spec.kind): 1 or 0. With spec.format_pattern the reward
 * is (1 - format_weight) * correct + format_weight * (whole trimmed response matches format_pattern,
 * with `.` matching newlines).
 */
export function ruleReward(spec: RuleRewardSpec, responseText: string, answer: string, stopStrings: readonly string[] = []): number {
  const response = cutAtStop(responseText, stopStrings);
  const extracted = extractAnswer(spec, response);
  const correct = extracted !== undefined && answerMatches(spec, extracted, answer) ? 1 : 0;
  if (spec.format_pattern === undefined) return correct;
  const weight = spec.format_weight ?? 0.1;
  const formatted = compileRegex(`^(?:${spec.format_pattern})$`, 's').test(response.trim()) ? 1 : 0;
  return (1 - weight) * correct + weight * formatted;
}
