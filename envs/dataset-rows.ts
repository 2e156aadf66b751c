// One dataset row, validated: a prompt string or chat messages, the reference answer, and optionally a
// demonstration (the text init.sft trains on when it differs from the graded answer: a worked
// solution, or "9 + 5 = 14" where the reward reads the last number). envs/datasets.ts reads files of them.
import type { MediaFields, RowMedia } from './dataset-media';

export type ChatRole = 'system' | 'user' | 'assistant';
export interface ChatMessage {
  role: ChatRole;
  content: string;
}
/** The model's chat template: messages to the prompt text, generation prompt included. */
export type RenderChat = (messages: ChatMessage[]) => string;

/** Which fields of a row hold what (config/data-config.ts defaults). */
export interface DatasetFields extends MediaFields {
  prompt_field?: string;
  messages_field?: string;
  /** Default: "answer", falling back to "label". */
  answer_field?: string;
  /** The field with what init.sft trains on instead of the answer (data.demonstration_field); none by default. */
  demonstration_field?: string;
}

/** One validated row: a prompt string or chat messages, the answer as a string, and its media (images, audio) when it has some. */
export interface DatasetRow extends RowMedia {
  prompt?: string;
  messages?: ChatMessage[];
  answer: string;
  /** What the supervised warm start trains on, when not the answer. */
  demonstration?: string;
  /** Where the row came from, for errors: "examples/data/x.jsonl line 17". */
  source: string;
}

const ROLES: readonly ChatRole[] = ['system', 'user', 'assistant'];

/** A value as short JSON, for errors. */
export function describe(value: unknown): string {
  const json = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
  if (json === undefined) return String(value);
  return json.length > 60 ? `${json.slice(0, 57)}...` : json;
}

const present = (row: Record<string, unknown>, key: string): boolean => row[key] !== undefined && row[key] !== null;

function validateMessages(value: unknown, field: string): ChatMessage[] {
  if (!Array.isArray(value)) throw new Error(`field "${field}" must be an array of {role, content} messages, got ${describe(value)}`);
  if (value.length === 0) throw new Error(`field "${field}" is an empty array: give at least one {role: "user", content} message`);
  const messages = value.map((m: unknown, i): ChatMessage => {
    if (m === null || typeof m !== 'object' || Array.isArray(m)) throw new Error(`${field}[${i}] must be an object {role, content}, got ${describe(m)}`);
    const { role, content } = m as { role?: unknown; content?: unknown };
    if (typeof role !== 'string' || !(ROLES as string[]).includes(role)) {
      throw new Error(`${field}[${i}].role is ${describe(role)}: roles are "system", "user" or "assistant"`);
    }
    if (typeof content !== 'string') throw new Error(`${field}[${i}].content must be a string, got ${describe(content)}`);
    return { role: role as ChatRole, content };
  });
  if (messages[messages.length - 1].role !== 'user') {
    throw new Error(`field "${field}" ends with a "${messages[messages.length - 1].role}" message: a prompt ends with the user message the model answers (drop the trailing ones)`);
  }
  return messages;
}

/** Validates one parsed row; throws an Error naming the field (the caller adds where the row is). */
export function validateRow(raw: unknown, fields: DatasetFields, source: string): DatasetRow {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`a row must be a JSON object, got ${describe(raw)}`);
  const row = raw as Record<string, unknown>;
  const promptField = fields.prompt_field ?? 'prompt';
  const messagesField = fields.messages_field ?? 'messages';
  const answerFields = fields.answer_field ? [fields.answer_field] : ['answer', 'label'];

  const answerField = answerFields.find((f) => present(row, f));
  if (answerField === undefined) {
    const need = answerFields.length === 1 ? `"${answerFields[0]}" (data.answer_field)` : '"answer" or "label"';
    throw new Error(`field "${answerFields[0]}" is missing (rows need ${need})`);
  }
  const a = row[answerField];
  let answer: string;
  if (typeof a === 'string') {
    if (a.trim() === '') throw new Error(`field "${answerField}" is an empty string: give the reference answer`);
    answer = a;
  } else if (typeof a === 'number') {
    if (!Number.isFinite(a)) throw new Error(`field "${answerField}" is ${a}: an answer is a string or a finite number`);
    answer = String(a);
  } else if (typeof a === 'bigint') {
    answer = a.toString();
  } else {
    throw new Error(`field "${answerField}" must be a string or a number, got ${describe(a)}`);
  }

  const demoField = fields.demonstration_field;
  const demonstration = demoField === undefined ? undefined : row[demoField];
  if (demoField !== undefined && (typeof demonstration !== 'string' || demonstration.trim() === '')) {
    throw new Error(`field "${demoField}" (data.demonstration_field) must be a non-empty string, the text init.sft trains on; got ${describe(demonstration)}`);
  }
  const graded = { answer, source, ...(typeof demonstration === 'string' ? { demonstration } : {}) };

  // Messages win when a row has both; an array in the prompt field is read as messages (TRL's conversational format).
  if (present(row, messagesField)) return { messages: validateMessages(row[messagesField], messagesField), ...graded };
  if (present(row, promptField)) {
    const p = row[promptField];
    if (Array.isArray(p)) return { messages: validateMessages(p, promptField), ...graded };
    if (typeof p !== 'string') throw new Error(`field "${promptField}" must be a string (or an array of messages), got ${describe(p)}`);
    if (p.trim() === '') throw new Error(`field "${promptField}" is an empty string: give the prompt text`);
    return { prompt: p, ...graded };
  }
  throw new Error(`has neither field "${promptField}" nor "${messagesField}" (rows need a prompt string or chat messages; see data.prompt_field, data.messages_field)`);
}
