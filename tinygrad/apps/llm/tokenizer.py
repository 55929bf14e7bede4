"""The SentencePiece-style tokenizer a GGUF file describes (`tokenizer.ggml.model = llama`), as llama.cpp runs it
(byte-level BPE, `gpt2`, is bpe.py's `BPETokenizer`, which `Tokenizer.from_gguf` returns for such a file).

From the metadata: the tokens' texts (`tokenizer.ggml.tokens`), their scores and their types (1 normal, 2 unknown,
3 control, 4 user-defined, 5 unused, 6 byte). Encoding:

1. Special texts are split out first, longest first: user-defined tokens always (runs of spaces and newlines, HTML
   tags), control tokens (bos, eos, turn markers) only when `special` is asked for.
2. Each remaining piece has its spaces written as U+2581 (and one put in front when `add_space_prefix`), starts as
   one symbol per character, and the adjacent pair whose joined text is a token with the highest score is merged,
   again and again (the leftmost of equal scores first), until no pair is a token.
3. A symbol that is a token is its id; one that is not is taken apart into the pieces it was merged from, and a
   single character that is no token becomes its UTF-8 bytes' tokens `<0xXX>` (byte fallback).

Decoding joins the tokens' texts (U+2581 back to spaces, byte tokens as bytes); `StreamDecoder` gives text as ids
arrive without ever splitting a UTF-8 character.

Storage: a vocabulary of 262,144 tokens as Python objects (a list of str, a dict from text to id, a list of float
scores) takes ~50 MB; `Vocab` keeps the texts as one UTF-8 blob with offsets and finds ids through a hash table in
numpy arrays (~10 MB), with the same results.
"""
from __future__ import annotations

import heapq
from typing import Any

import numpy as np

SPACE = "\u2581"
SPACE_UTF8 = SPACE.encode("utf-8")
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class Vocab:
    """Token texts by id and ids by text, in a few flat arrays: `vocab.text(i)`, `vocab.raw(i)` (its UTF-8 bytes),
    `vocab[text]` / `vocab.get(text)` / `text in vocab` (of texts that appear twice, the last id, as a dict built
    in id order would keep), `len(vocab)`.

    The lookup is open addressing over a table twice the vocabulary's size (so probe chains stay short): slot
    `hash(text) & mask` and those after it hold ids; a slot holding -1 ends the chain. Python's str hash is
    salted per process, which is fine for a table built in the process that uses it."""

    def __init__(self, texts: list[str]):
        n = len(texts)
        # one text's bytes at a time for the lengths, and one big encode for the blob: no list of 262,144 bytes
        # objects, whose freed small blocks would stay in the process's heap
        self.blob = "".join(texts).encode("utf-8", "surrogatepass")
        self._offsets = np.zeros(n + 1, np.int64)
        lengths = (len(t.encode("utf-8", "surrogatepass")) for t in texts)
        np.cumsum(np.fromiter(lengths, np.int64, n), out=self._offsets[1:])
        self._hashes = np.fromiter(map(hash, texts), np.int64, n)
        size = 1 << max(3, (2 * n - 1).bit_length())
        self._mask = size - 1
        self._table = np.full(size, -1, np.int32)
        # insert all at once, a round per probe step: of the ids that reach a free slot together the highest takes
        # it and the rest move on; ids of equal texts share a chain, so the highest (the last) is found first
        pending = np.arange(n - 1, -1, -1)
        slot = self._hashes[pending] & self._mask
        while pending.size:
            free = np.flatnonzero(self._table[slot] < 0)
            taken, first = np.unique(slot[free], return_index=True)
            self._table[taken] = pending[free[first]]
            stay = np.ones(pending.size, bool)
            stay[free[first]] = False
            pending, slot = pending[stay], (slot[stay] + 1) & self._mask
        # memoryviews: indexing one from Python gives a plain int, several times faster than a numpy scalar
        self._off, self._hash, self._slots = (memoryview(a) for a in (self._offsets, self._hashes, self._table))

    def __len__(self) -> int:
        return len(self._hashes)

    def raw(self, tid: int) -> bytes:
        return self.blob[self._off[tid]:self._off[tid + 1]]

    def text(self, tid: int) -> str:
        return self.raw(tid).decode("utf-8", "surrogatepass")

    def get(self, text: str, default: int | None = None) -> int | None:
        # the hot path of encoding (a lookup per candidate pair): attributes read once, text compared as bytes
        h = hash(text)
        mask, slots, hashes, off = self._mask, self._slots, self._hash, self._off
        s = h & mask
        tid = slots[s]
        while tid >= 0:
            if hashes[tid] == h and self.blob[off[tid]:off[tid + 1]] == text.encode("utf-8", "surrogatepass"):
                return tid
            s = (s + 1) & mask
            tid = slots[s]
        return default

    def __getitem__(self, text: str) -> int:
        tid = self.get(text)
        if tid is None:
            raise KeyError(text)
        return tid

    def __contains__(self, text: str) -> bool:
        return self.get(text) is not None


class Tokenizer:
    """Encode and decode with a GGUF file's vocabulary (see the module docstring)."""
    model_name = "SentencePiece"

    def __init__(self, tokens: list[str], scores: list[float] | None = None, types: list[int] | None = None,
                 bos: int | None = None, eos: int | None = None, unk: int | None = None, add_bos: bool = True,
                 add_space_prefix: bool = False):
        n = len(tokens)
        # float64: the scores compare exactly as the given Python floats do (GGUF's float32 ones fit)
        self.scores = np.asarray(scores if scores is not None else np.zeros(n), np.float64)
        self.types = np.asarray(types if types is not None else np.full(n, NORMAL), np.int32)
        if not n == len(self.scores) == len(self.types):
            raise ValueError(f"a vocabulary of {n} tokens with {len(self.scores)} scores and {len(self.types)} types")
        self.vocab = self.ids = Vocab(tokens)
        self._score = memoryview(self.scores)
        self.bos, self.eos, self.unk = bos, eos, unk
        self.add_bos, self.add_space_prefix = add_bos, add_space_prefix
        self.byte_ids = {}
        for i in np.flatnonzero(self.types == BYTE).tolist():
            t = self.vocab.text(i)
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                self.byte_ids[int(t[3:5], 16)] = i
        # the texts split out before SentencePiece, longest first (ties: lower id first)
        ids = np.flatnonzero(np.isin(self.types, (USER_DEFINED, CONTROL))).tolist()
        special = sorted(((t, i) for t, i in ((self.vocab.text(i), i) for i in ids) if t),
                         key=lambda ti: (-len(ti[0]), ti[1]))
        self.user_texts = [(t, i) for t, i in special if self.types[i] == USER_DEFINED]
        # ... and with the control tokens among them, for encode(special=True)
        self.special_texts = special
        # control tokens that end the model's turn as EOS does (Gemma's <end_of_turn>)
        ends = (self.vocab.get(t) for t in ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>"))
        self.end_ids = {i for i in ends if i is not None and self.types[i] == CONTROL}

    @classmethod
    def from_gguf(cls, kv: dict[str, Any]) -> Tokenizer:
        model = kv.get("tokenizer.ggml.model")
        kind = TOKENIZER_MODELS.get(model)
        if kind is None:
            names = ", ".join(f"{m!r} ({k.model_name})" for m, k in sorted(TOKENIZER_MODELS.items()))
            raise ValueError(f"tokenizer model {model!r} is not supported (supported: {names})")
        if kind is not Tokenizer:
            return kind.from_gguf(kv)
        return cls(kv["tokenizer.ggml.tokens"], kv.get("tokenizer.ggml.scores"), kv.get("tokenizer.ggml.token_type"),
                   bos=kv.get("tokenizer.ggml.bos_token_id"), eos=kv.get("tokenizer.ggml.eos_token_id"),
                   unk=kv.get("tokenizer.ggml.unknown_token_id"), add_bos=kv.get("tokenizer.ggml.add_bos_token", True),
                   add_space_prefix=kv.get("tokenizer.ggml.add_space_prefix", False))

    # ---- encoding ----
    def encode(self, text: str, add_bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of `text`, with BOS first where the vocabulary asks for it (or `add_bos` says so); control
        tokens' texts are tokens only when `special`."""
        out = [self.bos] if (self.add_bos if add_bos is None else add_bos) and self.bos is not None else []
        first = True
        for piece, tid in self._split_special(text, special):
            if tid is not None:
                out.append(tid)
            else:
                if self.add_space_prefix and first:
                    piece = " " + piece
                out.extend(self._spm(piece))
            first = False
        return out

    def _split_special(self, text: str, special: bool) -> list[tuple[str, int | None]]:
        """`text` as [(piece, None) of raw text, or (text, id) of a special token], each special text split out of
        every raw piece in turn, longest first."""
        parts: list[tuple[str, int | None]] = [(text, None)] if text else []
        for tok, tid in (self.special_texts if special else self.user_texts):
            nxt: list[tuple[str, int | None]] = []
            for piece, pid in parts:
                if pid is not None or tok not in piece:
                    nxt.append((piece, pid))
                    continue
                pieces = piece.split(tok)
                for j, sub in enumerate(pieces):
                    if sub:
                        nxt.append((sub, None))
                    if j != len(pieces) - 1:
                        nxt.append((tok, tid))
            parts = nxt
        return parts

    def _spm(self, text: str) -> list[int]:
        """SentencePiece's merges of one raw piece (see the module docstring)."""
        text = text.replace(" ", SPACE)
        syms = list(text)
        if not syms:
            return []
        prev = list(range(-1, len(syms) - 1))
        nxt = list(range(1, len(syms) + 1))
        nxt[-1] = -1
        alive = [True] * len(syms)
        merged_from: dict[str, tuple[str, str]] = {}
        heap: list[tuple[float, int, int, str, str]] = []
        lookup, score = self.vocab.get, self._score

        def push(left: int) -> None:
            right = nxt[left]
            if left < 0 or right < 0:
                return
            joined = syms[left] + syms[right]
            tid = lookup(joined)
            if tid is not None:
                # highest score first; the leftmost of equal scores
                heapq.heappush(heap, (-score[tid], left, right, syms[left], syms[right]))

        for i in range(len(syms) - 1):
            push(i)
        while heap:
            _, left, right, ltext, rtext = heapq.heappop(heap)
            # a stale pair: one side was merged into something else since it was queued
            if not (alive[left] and alive[right] and nxt[left] == right and syms[left] == ltext and
                    syms[right] == rtext):
                continue
            joined = ltext + rtext
            merged_from.setdefault(joined, (ltext, rtext))
            syms[left] = joined
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left])
            push(left)
        out: list[int] = []
        i = 0
        while i >= 0:
            self._resegment(syms[i], merged_from, out)
            i = nxt[i]
        return out

    def _resegment(self, text: str, merged_from: dict[str, tuple[str, str]], out: list[int]) -> None:
        stack = [text]
        while stack:
            t = stack.pop()
            tid = self.ids.get(t)
            if tid is not None:
                out.append(tid)
            elif t in merged_from:
                left, right = merged_from[t]
                stack.append(right)
                stack.append(left)
            else:
                for b in t.encode("utf-8"):
                    if b in self.byte_ids:
                        out.append(self.byte_ids[b])
                    elif self.unk is not None:
                        out.append(self.unk)

    # ---- decoding ----
    def token_bytes(self, tid: int) -> bytes:
        """The bytes token `tid` stands for in text (control tokens: none)."""
        if not 0 <= tid < len(self.vocab):
            raise ValueError(f"token id {tid} is outside the vocabulary of {len(self.vocab)}")
        ty = self.types[tid]
        if ty == BYTE:
            return bytes([int(self.vocab.text(tid)[3:5], 16)])
        if ty in (CONTROL, UNKNOWN, UNUSED):
            return b""
        # U+2581's UTF-8 bytes can't occur inside another character's: replacing them in the bytes is exact
        return self.vocab.raw(tid).replace(SPACE_UTF8, b" ")

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


# tokenizer.ggml.model -> the class that reads it: SentencePiece here; bpe.py, which builds on this module, adds
# byte-level BPE ('gpt2') when the package imports it
TOKENIZER_MODELS: dict[str, type[Tokenizer]] = {"llama": Tokenizer}


class StreamDecoder:
    """Text as token ids arrive: `feed(id)` returns what can be printed now; bytes of a UTF-8 character that is not
    complete yet wait for the next ids (`flush` gives what is left at the end)."""

    def __init__(self, tok: Tokenizer):
        self.tok, self.pending = tok, b""

    def feed(self, tid: int) -> str:
        self.pending += self.tok.token_bytes(tid)
        cut = _complete_prefix(self.pending)
        text, self.pending = self.pending[:cut].decode("utf-8", errors="replace"), self.pending[cut:]
        return text

    def flush(self) -> str:
        text, self.pending = self.pending.decode("utf-8", errors="replace"), b""
        return text


def _complete_prefix(b: bytes) -> int:
    """The length of the longest prefix of `b` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(b)) + 1):
        c = b[-back]
        if c & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for the character's lead byte
        need = 1 if c < 0x80 else 2 if c >> 5 == 0b110 else 3 if c >> 4 == 0b1110 else 4 if c >> 3 == 0b11110 else 1
        return len(b) if back >= need else len(b) - back
    return len(b)
