// A character-level tokenizer over an explicit alphabet, for synthetic tasks (add2) where the
// vocabulary is a dozen symbols and every id must mean exactly one character.
import type { Tokenizer } from './tokenizer';

export const CHAR_PAD_ID = 0;
export const CHAR_BOS_ID = 1;
export const CHAR_EOS_ID = 2;
const SPECIAL_NAMES = ['<pad>', '<bos>', '<eos>'];

/** Ids 0/1/2 are pad/bos/eos; the alphabet's characters follow from id 3 in the order given. */
export class CharTokenizer implements Tokenizer {
  readonly padId = CHAR_PAD_ID;
  readonly bosId = CHAR_BOS_ID;
  readonly eosId = CHAR_EOS_ID;
  readonly vocabSize: number;
  readonly alphabet: readonly string[];
  private readonly idOf: Map<string, number>;

  constructor(alphabet: string | readonly string[]) {
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
    this.vocabSize = SPECIAL_NAMES.length + this.alphabet.length;
  }

  encode(text: string): number[] {
    const chars = Array.from(text);
    return chars.map((ch, position) => {
      const id = this.idOf.get(ch);
      if (id === undefined) {
        throw new Error(
          `character ${JSON.stringify(ch)} at position ${position} of ${JSON.stringify(text)} is not in the alphabet ${JSON.stringify(this.alphabet.join(''))}`,
        );
      }
      return id;
    });
  }

  decode(ids: readonly number[], opts: { skipSpecial?: boolean } = {}): string {
    let text = '';
    ids.forEach((id, position) => {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new Error(`token id ${id} at position ${position} is outside this vocabulary of ${this.vocabSize} ids`);
      }
      if (id < SPECIAL_NAMES.length) {
        if (!opts.skipSpecial) text += SPECIAL_NAMES[id];
      } else {
        text += this.alphabet[id - SPECIAL_NAMES.length];
      }
    });
    return text;
  }
}
