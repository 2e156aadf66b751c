// Tokenizers: the character tokenizer and a Hugging Face tokenizer.json, round trips and specials.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CharTokenizer, HfTokenizer } from '../engines/tokenizers';

test('CharTokenizer: specials at 0/1/2, the alphabet from 3 in order', () => {
  const tok = new CharTokenizer('ab+');
  assert.equal(tok.vocabSize, 6);
  assert.deepEqual([tok.padId, tok.bosId, tok.eosId], [0, 1, 2]);
  assert.deepEqual(tok.encode('ab+a'), [3, 4, 5, 3]);
  assert.deepEqual(tok.encode(''), []);
  assert.equal(tok.decode([1, 3, 4, 5, 2, 0]), '<bos>ab+<eos><pad>');
  assert.equal(tok.decode([1, 3, 4, 5, 2, 0], { skipSpecial: true }), 'ab+');
  assert.equal(tok.decode(tok.encode('b+ab')), 'b+ab');
});

test('CharTokenizer names an unknown character and its position', () => {
  const tok = new CharTokenizer('0123456789+=');
  assert.throws(() => tok.encode('12-3'), /character "-" at position 2 of "12-3" is not in the alphabet "0123456789\+="/);
  assert.throws(() => tok.decode([3, 15]), /token id 15 at position 1 is outside this vocabulary of 15 ids/);
  assert.throws(() => new CharTokenizer('abca'), /repeats "a"/);
  assert.throws(() => new CharTokenizer(['a', 'bc']), /entry 1 is "bc"/);
  assert.throws(() => new CharTokenizer(''), /alphabet is empty/);
});

// A tiny BPE model in the Hugging Face tokenizer.json format: characters h e l o w r d, merges
// building "hello", whitespace pre-tokenizer. <pad> is in the vocabulary but not an added special token.
const TOKENIZER_JSON = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [
    { id: 1, content: '<s>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    { id: 2, content: '</s>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
  ],
  normalizer: null,
  pre_tokenizer: { type: 'Whitespace' },
  post_processor: null,
  decoder: { type: 'BPEDecoder', suffix: '</w>' },
  model: {
    type: 'BPE',
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    vocab: { '<pad>': 0, '<s>': 1, '</s>': 2, h: 3, e: 4, l: 5, o: 6, he: 7, ll: 8, hell: 9, hello: 10, w: 11, r: 12, d: 13 },
    merges: ['h e', 'l l', 'he ll', 'hell o'],
  },
};

function withDir(fn: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'relax-tokenizer-'));
  try {
    fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('HfTokenizer loads a local BPE tokenizer.json and resolves specials by name', () => {
  withDir((dir) => {
    const path = join(dir, 'tokenizer.json');
    writeFileSync(path, JSON.stringify(TOKENIZER_JSON));
    const tok = HfTokenizer.fromFile(path, { padToken: '<pad>', bosToken: '<s>', eosToken: '</s>' });
    assert.deepEqual([tok.padId, tok.bosId, tok.eosId], [0, 1, 2]);
    assert.equal(tok.vocabSize, 14);
    // merges apply: "hello" is one token; "world" has no merges, so it stays characters
    assert.deepEqual(tok.encode('hello'), [10]);
    assert.deepEqual(tok.encode('hell'), [9]);
    assert.deepEqual(tok.encode('hello world'), [10, 11, 6, 12, 5, 13]);
    // no bos/eos added by encode
    assert.deepEqual(tok.encode('he'), [7]);
    assert.equal(tok.decode([10]), 'hello');
    assert.equal(tok.decode([1, 10, 2]), '<s>hello</s>');
    assert.equal(tok.decode([1, 10, 2, 0, 0], { skipSpecial: true }), 'hello');
  });
});

test('HfTokenizer takes unnamed specials from tokenizer_config.json beside the file', () => {
  withDir((dir) => {
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(TOKENIZER_JSON));
    writeFileSync(
      join(dir, 'tokenizer_config.json'),
      JSON.stringify({ bos_token: '<s>', eos_token: { content: '</s>', special: true }, pad_token: '<pad>' }),
    );
    const tok = HfTokenizer.fromFile(join(dir, 'tokenizer.json'));
    assert.deepEqual([tok.padId, tok.bosId, tok.eosId], [0, 1, 2]);
    // an explicit name wins over the config
    assert.equal(HfTokenizer.fromFile(join(dir, 'tokenizer.json'), { padToken: '</s>' }).padId, 2);
  });
});

test('HfTokenizer errors name the missing special token, and the file that does not parse', () => {
  withDir((dir) => {
    const path = join(dir, 'tokenizer.json');
    writeFileSync(path, JSON.stringify(TOKENIZER_JSON));
    assert.throws(() => HfTokenizer.fromFile(path, { bosToken: '<s>', eosToken: '</s>' }), /no pad token is named; pass padToken/);
    assert.throws(
      () => HfTokenizer.fromFile(path, { padToken: '[PAD]', bosToken: '<s>', eosToken: '</s>' }),
      /the pad token "\[PAD\]" is not in its vocabulary/,
    );
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{"model": {"type": "BPE",');
    assert.throws(() => HfTokenizer.fromFile(broken), (err: Error) => err.message.includes(broken) && /does not parse as JSON/.test(err.message));
    const missing = join(dir, 'nope.json');
    assert.throws(() => HfTokenizer.fromFile(missing), (err: Error) => err.message.includes(`cannot read tokenizer file ${missing}`));
    const notTokenizer = join(dir, 'not-a-tokenizer.json');
    writeFileSync(notTokenizer, JSON.stringify({ hello: 'world' }));
    assert.throws(() => HfTokenizer.fromFile(notTokenizer), (err: Error) => err.message.includes(notTokenizer));
  });
});
