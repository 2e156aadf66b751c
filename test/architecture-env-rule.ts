// The env rule of the architecture test: product code reads environment variables only in
// config/environment.ts and its config/environment-*.ts siblings. Anywhere else (test/ aside) a read
// of one variable is a violation: `process.env.X`, `process.env[anything]`, `env.X` / `env['X']` on
// an identifier named `env` (X in upper case), `env[name]`, and destructuring `{ X } = process.env`
// or `= env`. Writes (assignment targets, `??=` defaults, `delete`) and whole-object uses (spreading
// it into a child's environment, passing it on) are allowed, plus ENV_ALLOWED below, each with its reason.
import { parse } from '@babel/parser';
import { layerOf, lineOf, walk, type AstNode, type Violation } from './architecture-rules';

/** Reads kept outside config/environment*.ts: file -> the variable read ('[computed]': `env[expr]`) -> why. */
export const ENV_ALLOWED: Record<string, Record<string, string>> = {
  'bench/sandbox.ts': { RELAX_SANDBOX: 'saved to restore it after the bench switches the sandbox off to compare the two modes' },
  'bench/monitoring-overhead.ts': { RELAX_METRICS: "saved to restore it after the bench switches metrics off for its stack's workers to compare the two modes" },
  'bench/run-memory.ts': {
    RELAX_RUN_RELEASE_CHECK_S: "saved to restore it after the bench makes its stack's workers release a closed run within a second",
    MALLOC_MMAP_THRESHOLD_: "saved to restore it after the bench sets glibc's mmap threshold for its stack's workers",
  },
  'envs/sandbox-thread.ts': { '[computed]': "that `env` is the user's environment module (its reset/step methods), not the process environment" },
};

const ENV_FILE = /^config\/environment(?:-[\w-]+)?\.ts$/;
const VARIABLE = /^[A-Z][A-Z0-9_]*$/;

const isProcessEnv = (n: AstNode): boolean =>
  n.type === 'MemberExpression' && !n.computed && (n.object as AstNode).type === 'Identifier' && (n.object as AstNode).name === 'process' && (n.property as AstNode).name === 'env';
const isEnvIdentifier = (n: AstNode): boolean => n.type === 'Identifier' && n.name === 'env';

// The variable a member expression on an environment reads ('[computed]' for env[expr]), or undefined when it reads none.
function variableRead(node: AstNode): string | undefined {
  if (node.type !== 'MemberExpression' && node.type !== 'OptionalMemberExpression') return undefined;
  const onProcess = isProcessEnv(node.object as AstNode);
  if (!onProcess && !isEnvIdentifier(node.object as AstNode)) return undefined;
  const property = node.property as AstNode;
  const name = !node.computed ? (property.name as string) : property.type === 'StringLiteral' ? (property.value as string) : '[computed]';
  return onProcess || name === '[computed]' || VARIABLE.test(name) ? name : undefined;
}

// True when `node` is only written: an assignment's target (=, ??=, ...), delete's operand, ++/--.
const isWrite = (node: AstNode, parent: AstNode | null): boolean =>
  !!parent && ((parent.type === 'AssignmentExpression' && parent.left === node) || (parent.type === 'UnaryExpression' && parent.operator === 'delete') || parent.type === 'UpdateExpression');

/** The env rule on one file (repo-relative posix path, its text). Pure; a file that does not parse is the parse rule's. */
export function envViolations(file: string, source: string): Violation[] {
  const layer = layerOf(file);
  if (!layer || layer === 'test' || ENV_FILE.test(file)) return [];
  let ast: AstNode;
  try {
    ast = parse(source, { sourceType: 'module', plugins: ['typescript'], sourceFilename: file }) as unknown as AstNode;
  } catch {
    return [];
  }
  const out: Violation[] = [];
  const report = (node: AstNode, name: string): void => {
    if (ENV_ALLOWED[file]?.[name]) return;
    const shown = name === '[computed]' ? 'a variable named by an expression' : name;
    out.push({ file, line: lineOf(node), rule: 'env', detail: `reads ${shown} from the environment outside config/environment*.ts: parse it there in a function taking \`env = process.env\` and call that` });
  };
  walk(ast, (node, parent) => {
    const name = variableRead(node);
    if (name !== undefined && !isWrite(node, parent)) report(node, name);
    if (node.type === 'VariableDeclarator' && (node.id as AstNode).type === 'ObjectPattern' && node.init && (isProcessEnv(node.init as AstNode) || isEnvIdentifier(node.init as AstNode))) {
      for (const p of (node.id as AstNode).properties as AstNode[]) {
        const key = p.type === 'ObjectProperty' && !p.computed ? ((p.key as AstNode).name as string | undefined) : undefined;
        if (isProcessEnv(node.init as AstNode) || key === undefined || VARIABLE.test(key)) report(p, key ?? '[computed]');
      }
    }
  });
  return out;
}
