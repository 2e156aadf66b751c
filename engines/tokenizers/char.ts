// A character-level tokenizer over an explicit alphabet, for synthetic tasks (add2) where the
// vocabulary is a dozen symbols and every id must mean exactly one character; optional extra
// special tokens (e.g. the `<image>` / `<audio>` media placeholders) are one id each.
import type { Tokenizer } from './tokenizer';

export const CHAR_PAD_ID = 0;
export const CHAR_BOS_ID = 1;
export const CHAR_EOS_ID = 2;
const SPECIAL_NAMES = ['<pad>', '<bos>', '<eos>'];

/** Ids 0/1/2 are pad/bos/eos; the alphabet's characters follow from id 3 in the order given, then `specials`. */
export class CharTokenizer implements Tokenizer {
  readonly padId = CHAR_PAD_ID;
  readonly bosId = CHAR_BOS_ID;
  readonly eosId = CHAR_EOS_ID;
  readonly vocabSize: number;
  readonly alphabet: readonly string[];
  /** Extra special tokens (each one id, matched whole in text), after the alphabet. */
  readonly specials: readonly string[];
  private readonly idOf: Map<string, number>;

  constructor(alphabet: string | readonly string[], options: { specials?: readonly string[] } = {}) {
    this.alphabet = typeof alphabet === 'string' ? Array.from(alphabet) : [...alphabet];
    if (this.alphabet.length === 0) throw new Error('CharTokenizer alphabet is empty: pass the characters the task uses');
    this.idOf = new Map();
    this.alphabet.forEach((ch, i) => {
      if (Array.from(ch).length !== 1) {
        throw new Error(`CharTokenizer alphabet entry ${i} is ${JSON.stringify(ch)}: each entry must be exactly one character`);
      }
      if (this.idOf.has(ch)) throw new Error(`CharTokenizer alphabet repeats ${JSON.stringify(ch)} (entry ${i}): list each character once`);
      this.idOf.set(ch, SPECIAL_NAMES.length + i);
    });
    this.specials = [...(options.specials ?? [])];
    this.specials.forEach((name, i) => {
      if (Array.from(name).length < 2 || SPECIAL_NAMES.includes(name) || this.specials.indexOf(name) !== i) {
        throw new Error(`CharTokenizer special token ${JSON.stringify(name)} must be at least two characters, not pad/bos/eos, and listed once`);
      }
    });
    this.vocabSize = SPECIAL_NAMES.length + this.alphabet.length + this.specials.length;
  }

  /** The id of special token `name` (e.g. "<image>"), or undefined. */
  specialId(name: string): number | undefined {
    const i = this.specials.indexOf(name);
    return i < 0 ? undefined : SPECIAL_NAMES.length + this.alphabet.length + i;
  }

  encode(text: string): number[] {
    const chars = Array.from(text);
    const ids: number[] = [];
    for (let position = 0; position < chars.length; position++) {
      const special = this.specials.length ? this.specials.find((name) => chars.slice(position, position + Array.from(name).length).join('') === name) : undefined;
      if (special !== undefined) {
        ids.push(this.specialId(special) as number);
        position += Array.from(special).length - 1;
        continue;
      }
      const ch = chars[position];
      const id = this.idOf.get(ch);
      if (id === undefined) {
        throw new Error(
          `character ${JSON.stringify(ch)} at position ${position} of ${JSON.stringify(text)} is not in the alphabet ${JSON.stringify(this.alphabet.join(''))}`,
        );
      }
      ids.push(id);
    }
    return ids;
  }

  decode(ids: readonly number[], opts: { skipSpecial?: boolean } = {}): string {
    let text = '';
    ids.forEach((id, position) => {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new Error(`token id ${id} at position ${position} is outside this vocabulary of ${this.vocabSize} ids`);
      }
      if (id < SPECIAL_NAMES.length) {
        if (!opts.skipSpecial) text += SPECIAL_NAMES[id];
      } else if (id < SPECIAL_NAMES.length + this.alphabet.length) {
        text += this.alphabet[id - SPECIAL_NAMES.length];
      } else if (!opts.skipSpecial) {
        text += this.specials[id - SPECIAL_NAMES.length - this.alphabet.length];
      }
    });
    return text;
  }
}
