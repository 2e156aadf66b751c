// Hugging Face chat templates (the Jinja `chat_template` of tokenizer_config.json), rendered with
// @huggingface/jinja: messages -> the prompt text the model was tuned on, with bos_token and
// eos_token bound as transformers' apply_chat_template binds them.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Template as JinjaTemplate } from '@huggingface/jinja' with { 'resolution-mode': 'import' };
import { tokenString } from './hf';

// An ES module with a CommonJS build (its "require" export); this CommonJS project takes only its types.
const { Template } = require('@huggingface/jinja') as { Template: typeof JinjaTemplate };

export interface ChatMessage {
  role: string;
  content: string;
}

export interface ChatSpecialTokens {
  bosToken?: string;
  eosToken?: string;
  padToken?: string;
}


export class ChatTemplate {
  private readonly template: JinjaTemplate;

  /** `source` names where the template came from in errors. */
  constructor(
    readonly text: string,
    readonly specialTokens: ChatSpecialTokens = {},
    readonly source = 'chat template',
  ) {
    try {
      this.template = new Template(text);
    } catch (err) {
      throw new Error(`${source} is not a valid Jinja template: ${(err as Error).message}`);
    }
  }

  /**
   * The template of `dir`/tokenizer_config.json (`chat_template`: a string, or a list of named
   * templates, "default" preferred), else `dir`/chat_template.jinja; bos/eos tokens from the config.
   */
  static fromTokenizerConfig(dir: string): ChatTemplate {
    const file = path.join(dir, 'tokenizer_config.json');
    let config: Record<string, unknown> = {};
    if (existsSync(file)) {
      try {
        config = JSON.parse(readFileSync(file, 'utf8'));
      } catch (err) {
        throw new Error(`tokenizer config ${file} does not parse as JSON: ${(err as Error).message}`);
      }
    }
    const special = { bosToken: tokenString(config.bos_token), eosToken: tokenString(config.eos_token), padToken: tokenString(config.pad_token) };
    const t = config.chat_template;
    if (typeof t === 'string') return new ChatTemplate(t, special, `${file} chat_template`);
    if (Array.isArray(t)) {
      const entry = (t.find((e) => e?.name === 'default') ?? t[0]) as { template?: unknown } | undefined;
      if (typeof entry?.template === 'string') return new ChatTemplate(entry.template, special, `${file} chat_template`);
    }
    const jinja = path.join(dir, 'chat_template.jinja');
    if (existsSync(jinja)) return new ChatTemplate(readFileSync(jinja, 'utf8'), special, jinja);
    throw new Error(`${dir} has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja): use raw prompts, or add the model's template`);
  }

  /** The prompt text for `messages`; with addGenerationPrompt (default) it ends where the assistant's reply starts. */
  render(messages: readonly ChatMessage[], options: { addGenerationPrompt?: boolean; variables?: Record<string, unknown> } = {}): string {
    for (const [i, m] of messages.entries()) {
      if (typeof m?.role !== 'string' || typeof m.content !== 'string') throw new Error(`chat message ${i} needs string role and content, got ${JSON.stringify(m)}`);
    }
    try {
      return this.template.render({
        messages: messages.map((m) => ({ role: m.role, content: m.content })),
        add_generation_prompt: options.addGenerationPrompt ?? true,
        bos_token: this.specialTokens.bosToken ?? '',
        eos_token: this.specialTokens.eosToken ?? '',
        pad_token: this.specialTokens.padToken ?? '',
        ...options.variables,
      });
    } catch (err) {
      throw new Error(`${this.source} failed to render ${messages.length} messages: ${(err as Error).message}`);
    }
  }
}
