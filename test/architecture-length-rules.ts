// The length rules of the architecture test (test/architecture.test.ts), as pure functions over a
// source file's text: files within MAX_FILE_LINES unless the first comment says why (file-length);
// functions within MAX_FUNCTION_LINES in every folder but test/ unless the comment directly above says
// why (function-length); and caps on how many of either exception the tree holds (exception-cap).
import { parse } from '@babel/parser';
import { firstComment, isNode, LAYERS, layerOf, lineCount, lineOf, walk, type AstNode, type Layer, type Violation } from './architecture-rules';

const MAX_FILE_LINES = 400;
const MAX_FUNCTION_LINES = 80;
// Every layer but test/ keeps functions within MAX_FUNCTION_LINES, unless the comment directly above
// the function starts "Over 80 lines because" and says why; there may be at most
// MAX_LONG_FUNCTION_EXCEPTIONS such functions, and at most MAX_LONG_FILE_EXCEPTIONS files (test/
// included) over MAX_FILE_LINES whose first comment says why. Lower a cap when an exception goes;
// raising one needs a reason in review, not a new sentence.
const FUNCTION_LIMIT_LAYERS: Layer[] = LAYERS.filter((layer) => layer !== 'test');
export const MAX_LONG_FUNCTION_EXCEPTIONS = 9;
export const MAX_LONG_FILE_EXCEPTIONS = 10;
const LONG_FUNCTION_REASON = /^over\s+80\s+lines\s+because\s+\S/i;
/** A file over MAX_FILE_LINES whose first comment says why ("Over 400 lines because ..."). */
const isLongFileException = (source: string): boolean => {
  if (lineCount(source) <= MAX_FILE_LINES) return false;
  const { text } = firstComment(source);
  return text !== undefined && /over\s+400\s+lines/i.test(text);
};

function fileLengthViolations(file: string, source: string): Violation[] {
  const lines = lineCount(source);
  if (lines <= MAX_FILE_LINES) return [];
  if (isLongFileException(source)) return [];
  return [{ file, line: 1, rule: 'file-length', detail: `${lines} lines (limit ${MAX_FILE_LINES}) and the first comment does not say why ("Over 400 lines because ...")` }];
}

const FUNCTION_TYPES = new Set([
  'FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression', 'ClassMethod', 'ClassPrivateMethod', 'ObjectMethod',
]);

function keyName(key: unknown): string | undefined {
  if (!isNode(key)) return undefined;
  if (key.type === 'Identifier') return key.name as string;
  if (key.type === 'StringLiteral' || key.type === 'NumericLiteral') return String(key.value);
  if (key.type === 'PrivateName') return `#${keyName(key.id)}`;
  if (key.type === 'MemberExpression' && !key.computed) {
    const object = keyName(key.object) ?? (isNode(key.object) && key.object.type === 'ThisExpression' ? 'this' : undefined);
    return object ? `${object}.${keyName(key.property)}` : keyName(key.property);
  }
  return undefined;
}

function functionName(node: AstNode, parent: AstNode | null): string {
  const own = keyName(node.id) ?? keyName(node.key);
  if (own) return own;
  if (parent) {
    if (parent.type === 'VariableDeclarator') return keyName(parent.id) ?? '<anonymous>';
    if (['ObjectProperty', 'ClassProperty', 'ClassPrivateProperty'].includes(parent.type)) return keyName(parent.key) ?? '<anonymous>';
    if (parent.type === 'AssignmentExpression') return keyName(parent.left) ?? '<anonymous>';
    if (parent.type === 'CallExpression' || parent.type === 'NewExpression') {
      const callee = keyName(parent.callee);
      if (callee) return `<anonymous at line ${lineOf(node)}, passed to ${callee}>`;
    }
  }
  return `<anonymous at line ${lineOf(node)}>`;
}

// The comment lines that end on the line directly above `line` (1-based): `//` lines, or a `/* */`
// block, each with its markers removed; [] when that line is not a comment.
function commentAbove(lines: string[], line: number): string[] {
  const parts: string[] = [];
  let i = line - 2;
  if (i >= 0 && lines[i].trim().endsWith('*/')) {
    for (; i >= 0; i--) {
      const start = lines[i].indexOf('/*');
      parts.unshift((start >= 0 ? lines[i].slice(start) : lines[i]).trim().replace(/\*\/$/, '').replace(/^\/\*+/, '').replace(/^\*+/, ''));
      if (start >= 0) break;
    }
  } else {
    for (; i >= 0 && lines[i].trim().startsWith('//'); i--) parts.unshift(lines[i].trim().replace(/^\/\/+/, ''));
  }
  return parts.map((part) => part.trim());
}

// The reason a long function gives: the comment directly above it from its line starting "Over 80
// lines because" down to the function (a file's header comment may run into it); undefined if none.
function longFunctionReason(lines: string[], line: number): string | undefined {
  const above = commentAbove(lines, line);
  let from = above.length - 1;
  while (from >= 0 && !/^over\s+80\s+lines\s+because\b/i.test(above[from])) from--;
  const reason = from < 0 ? '' : above.slice(from).join(' ').replace(/\s+/g, ' ').trim();
  return LONG_FUNCTION_REASON.test(reason) ? reason : undefined;
}

/** A function of a checked layer longer than MAX_FUNCTION_LINES; `reason`: the comment directly above it when that says why. */
export interface LongFunction { file: string; line: number; name: string; length: number; reason?: string }

export function longFunctions(file: string, ast: AstNode, source: string): LongFunction[] {
  const layer = layerOf(file);
  if (!layer || !FUNCTION_LIMIT_LAYERS.includes(layer)) return [];
  const lines = source.split(/\r?\n/);
  const out: LongFunction[] = [];
  walk(ast, (node, parent) => {
    if (!FUNCTION_TYPES.has(node.type) || !node.loc) return;
    const length = node.loc.end.line - node.loc.start.line + 1;
    if (length <= MAX_FUNCTION_LINES) return;
    const reason = longFunctionReason(lines, lineOf(node));
    out.push({ file, line: lineOf(node), name: functionName(node, parent), length, ...(reason ? { reason } : {}) });
  });
  return out;
}

function functionLengthViolations(file: string, ast: AstNode, source: string): Violation[] {
  return longFunctions(file, ast, source)
    .filter((f) => f.reason === undefined)
    .map((f) => ({ file, line: f.line, rule: 'function-length' as const, detail: `${f.name} spans ${f.length} lines (limit ${MAX_FUNCTION_LINES}): split it, or say why in a comment directly above it starting "Over 80 lines because"` }));
}

/**
 * The exception caps over the whole tree (`sources`: repo-relative path -> text): at most
 * `caps.functions` functions over MAX_FUNCTION_LINES with an "Over 80 lines because" comment, at
 * most `caps.files` files over MAX_FILE_LINES with an "Over 400 lines because" first comment. A cap
 * exceeded is one violation that lists every exception it counts.
 */
export function exceptionCapViolations(
  sources: ReadonlyMap<string, string>,
  caps: { functions: number; files: number } = { functions: MAX_LONG_FUNCTION_EXCEPTIONS, files: MAX_LONG_FILE_EXCEPTIONS },
): Violation[] {
  const functions: LongFunction[] = [];
  const files: string[] = [];
  for (const [file, source] of sources) {
    if (isLongFileException(source)) files.push(`${file} (${lineCount(source)} lines)`);
    try {
      const ast = parse(source, { sourceType: 'module', plugins: ['typescript'], sourceFilename: file }) as unknown as AstNode;
      functions.push(...longFunctions(file, ast, source).filter((f) => f.reason !== undefined));
    } catch {
      // the parse rule reports it
    }
  }
  const out: Violation[] = [];
  if (functions.length > caps.functions) {
    const listing = functions.map((f) => `\n    ${f.file}:${f.line} ${f.name} (${f.length} lines): ${f.reason}`).join('');
    out.push({ file: functions[0].file, line: functions[0].line, rule: 'exception-cap', detail: `${functions.length} functions carry "Over 80 lines because" (cap MAX_LONG_FUNCTION_EXCEPTIONS = ${caps.functions}): split some:${listing}` });
  }
  if (files.length > caps.files) {
    out.push({ file: files[0].split(' ')[0], line: 1, rule: 'exception-cap', detail: `${files.length} files carry "Over 400 lines because" (cap MAX_LONG_FILE_EXCEPTIONS = ${caps.files}): split some:${files.map((f) => `\n    ${f}`).join('')}` });
  }
  return out;
}

/** file-length and function-length on one file, given its repo-relative path and its text. Pure. */
export function lengthViolations(file: string, source: string): Violation[] {
  let ast: AstNode;
  try {
    ast = parse(source, { sourceType: 'module', plugins: ['typescript'], sourceFilename: file }) as unknown as AstNode;
  } catch {
    return fileLengthViolations(file, source); // the parse rule reports it
  }
  return [...fileLengthViolations(file, source), ...functionLengthViolations(file, ast, source)];
}
