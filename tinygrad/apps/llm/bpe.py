"""The byte-level BPE tokenizer a GGUF file describes (`tokenizer.ggml.model = gpt2`), as llama.cpp runs it.

From the metadata: the tokens' texts and types (`tokenizer.ggml.tokens`, `token_type`), the merges by rank
(`tokenizer.ggml.merges`, "left right", the first the most wanted) and the pre-tokenizer (`tokenizer.ggml.pre`).
Encoding:

1. Special texts are split out first, longest (in UTF-8 bytes) first: user-defined tokens always, control and
   unknown tokens only when `special` is asked for (llama.cpp, after Hugging Face's tokenizers, does the same).
2. Each remaining piece is cut into words by the pre-tokenizer (pretokenize.py), and each word's UTF-8 bytes are
   written as GPT-2's printable stand-ins (`bytes_to_unicode`: a space is "Ġ", a newline "Ċ").
3. A word starts as one symbol per stand-in; the adjacent pair with the lowest merge rank is joined (the leftmost of
   equal ranks), again and again until no pair has a rank. Pre-tokenizers that "ignore merges" (Llama 3) take a
   word that is a token whole. Each symbol is then its token (a symbol that is none, which a consistent vocabulary
   never leaves, becomes the tokens of its ASCII bytes, as llama.cpp does).

Words repeat (" the", " of"), so their ids are cached. Decoding maps each token's stand-ins back to bytes; a token
may end inside a UTF-8 character, which `StreamDecoder` (tokenizer.py) holds back until it is complete.
"""
from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from tinygrad.apps.llm.pretokenize import PreTokenizer
from tinygrad.apps.llm.tokenizer import BYTE, CONTROL, TOKENIZER_MODELS, UNKNOWN, UNUSED, USER_DEFINED, Tokenizer

_CACHE_WORDS = 1 << 16  # the word cache is emptied when it reaches this many words


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the other 68 (control
    characters, space, soft hyphen...) for U+0100 onwards in byte order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


# str.translate tables, so that encoding and decoding run in C: a byte (as a latin-1 character) to its stand-in,
# and a stand-in back to its byte (as a latin-1 character)
_BYTE_TO_CHAR = bytes_to_unicode()
_CHAR_TO_BYTE = {ord(c): b for b, c in _BYTE_TO_CHAR.items()}


class BPETokenizer(Tokenizer):
    """Encode and decode with a GGUF file's byte-level BPE vocabulary (see the module docstring)."""
    model_name = "byte-level BPE"

    def __init__(self, tokens: list[str], merges: list[str], types: list[int] | None = None, pre: str | None = None,
                 bos: int | None = None, eos: int | None = None, unk: int | None = None, add_bos: bool | None = None,
                 add_eos: bool = False):
        self.pre = PreTokenizer(pre)
        # llama.cpp's default for the pre-tokenizer when the file does not say
        super().__init__(tokens, None, types, bos=bos, eos=eos, unk=unk,
                         add_bos=self.pre.add_bos if add_bos is None else add_bos)
        self.add_eos = add_eos
        # of a merge listed twice, the first rank counts; "left right" is looked up as written
        self.ranks: dict[str, int] = {}
        for rank, merge in enumerate(merges):
            self.ranks.setdefault(merge, rank)
        # llama.cpp's order for special texts: longest in UTF-8 bytes first; unknown tokens count as control ones
        ids = np.flatnonzero(np.isin(self.types, (CONTROL, USER_DEFINED, UNKNOWN))).tolist()
        special = [(t, i) for t, i in ((self.vocab.text(i), i) for i in ids) if t]
        special.sort(key=lambda ti: (-len(ti[0].encode("utf-8")), ti[1]))
        self.special_texts = special
        self.user_texts = [(t, i) for t, i in special if self.types[i] == USER_DEFINED]
        self._words: dict[str, list[int]] = {}

    @classmethod
    def from_gguf(cls, kv: dict[str, Any]) -> BPETokenizer:
        if "tokenizer.ggml.merges" not in kv:
            raise ValueError("a gpt2 (byte-level BPE) tokenizer without tokenizer.ggml.merges")
        return cls(kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.merges"], kv.get("tokenizer.ggml.token_type"),
                   pre=kv.get("tokenizer.ggml.pre"), bos=kv.get("tokenizer.ggml.bos_token_id"),
                   eos=kv.get("tokenizer.ggml.eos_token_id"), unk=kv.get("tokenizer.ggml.unknown_token_id"),
                   add_bos=kv.get("tokenizer.ggml.add_bos_token"),
                   add_eos=kv.get("tokenizer.ggml.add_eos_token", False))

    # ---- encoding ----
    def encode(self, text: str, add_bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of `text`: BOS first and EOS last where the vocabulary asks for them (`add_bos=False`: neither,
        `True`: BOS even where it does not); control tokens' texts are tokens only when `special`."""
        out = [self.bos] if (self.add_bos if add_bos is None else add_bos) and self.bos is not None else []
        for piece, tid in self._split_special(text, special):
            if tid is not None:
                out.append(tid)
                continue
            for word in self.pre(piece):
                ids = self._words.get(word)
                if ids is None:
                    if len(self._words) >= _CACHE_WORDS:
                        self._words.clear()
                    ids = self._words[word] = self._bpe(word.encode("utf-8").decode("latin-1").translate(_BYTE_TO_CHAR))
                out.extend(ids)
        if self.add_eos and add_bos is not False and self.eos is not None:
            out.append(self.eos)
        return out

    def _bpe(self, word: str) -> list[int]:
        """The merges of one word written in stand-ins (see the module docstring)."""
        lookup = self.vocab.get
        if self.pre.ignore_merges:
            tid = lookup(word)
            if tid is not None:
                return [tid]
        syms = list(word)
        nxt = list(range(1, len(syms) + 1))
        nxt[-1] = -1
        prev = list(range(-1, len(syms) - 1))
        ranks = self.ranks
        heap: list[tuple[int, int, int, str]] = []

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            rank = ranks.get(syms[left] + " " + syms[right])
            if rank is not None:
                heapq.heappush(heap, (rank, left, right, syms[left] + syms[right]))

        for i in range(len(syms) - 1):
            push(i, i + 1)
        while heap:
            _, left, right, joined = heapq.heappop(heap)
            # stale: one side was merged into something else since the pair was queued
            if not syms[left] or not syms[right] or syms[left] + syms[right] != joined:
                continue
            syms[left], syms[right] = joined, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])
        out: list[int] = []
        i = 0
        while i >= 0:
            tid = lookup(syms[i])
            if tid is not None:
                out.append(tid)
            else:
                out.extend(t for t in (lookup(chr(b)) for b in syms[i].encode("utf-8") if b < 0x80) if t is not None)
            i = nxt[i]
        return out

    # ---- decoding ----
    def token_bytes(self, tid: int, special: bool = False) -> bytes:
        """The bytes token `tid` stands for in text (control and unknown tokens: their text only if `special`)."""
        if not 0 <= tid < len(self.vocab):
            raise ValueError(f"token id {tid} is outside the vocabulary of {len(self.vocab)}")
        ty = self.types[tid]
        if ty in (CONTROL, UNKNOWN):
            return self.vocab.raw(tid) if special else b""
        if ty == USER_DEFINED:
            return self.vocab.raw(tid)
        if ty == BYTE:
            return bytes([int(self.vocab.text(tid)[3:5], 16)])
        if ty == UNUSED:
            return b""
        text = self.vocab.text(tid).translate(_CHAR_TO_BYTE)
        try:
            return text.encode("latin-1")
        except UnicodeEncodeError:
            # a character above U+00FF that stands for no byte (not in a consistent vocabulary): its own UTF-8
            return b"".join(c.encode("latin-1") if c < "\u0100" else c.encode("utf-8") for c in text)

    def decode(self, ids: list[int], special: bool = False) -> str:
        return b"".join(self.token_bytes(i, special) for i in ids).decode("utf-8", errors="replace")


TOKENIZER_MODELS["gpt2"] = BPETokenizer
