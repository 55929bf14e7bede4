"""The SentencePiece-style tokenizer a GGUF file describes (`tokenizer.ggml.model = llama`), as llama.cpp runs it.

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
"""
from __future__ import annotations

import heapq
from typing import Any

SPACE = "\u2581"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class Tokenizer:
    """Encode and decode with a GGUF file's vocabulary (see the module docstring)."""

    def __init__(self, tokens: list[str], scores: list[float] | None = None, types: list[int] | None = None,
                 bos: int | None = None, eos: int | None = None, unk: int | None = None, add_bos: bool = True,
                 add_space_prefix: bool = False):
        self.tokens = list(tokens)
        self.scores = list(scores) if scores is not None else [0.0] * len(tokens)
        self.types = list(types) if types is not None else [NORMAL] * len(tokens)
        if not len(self.tokens) == len(self.scores) == len(self.types):
            raise ValueError(f"a vocabulary of {len(self.tokens)} tokens with {len(self.scores)} scores and "
                             f"{len(self.types)} types")
        self.bos, self.eos, self.unk = bos, eos, unk
        self.add_bos, self.add_space_prefix = add_bos, add_space_prefix
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.byte_ids = {}
        for i, (t, ty) in enumerate(zip(self.tokens, self.types)):
            if ty == BYTE and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                self.byte_ids[int(t[3:5], 16)] = i
        # the texts split out before SentencePiece, longest first (ties: lower id first)
        order = sorted(range(len(self.tokens)), key=lambda i: (-len(self.tokens[i]), i))
        self.user_texts = [(self.tokens[i], i) for i in order if self.types[i] == USER_DEFINED and self.tokens[i]]
        # ... and with the control tokens among them, for encode(special=True)
        self.special_texts = [(self.tokens[i], i) for i in order if self.types[i] in (USER_DEFINED, CONTROL) and
                              self.tokens[i]]
        # control tokens that end the model's turn as EOS does (Gemma's <end_of_turn>)
        self.end_ids = {self.ids[t] for t in ("<end_of_turn>", "<|im_end|>", "<|eot_id|>") if t in self.ids and
                        self.types[self.ids[t]] == CONTROL}

    @classmethod
    def from_gguf(cls, kv: dict[str, Any]) -> Tokenizer:
        model = kv.get("tokenizer.ggml.model")
        if model != "llama":
            raise ValueError(f"tokenizer model {model!r} is not supported (only SentencePiece-style 'llama')")
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

        def push(left: int) -> None:
            right = nxt[left]
            if left < 0 or right < 0:
                return
            joined = syms[left] + syms[right]
            tid = self.ids.get(joined)
            if tid is not None:
                # highest score first; the leftmost of equal scores
                heapq.heappush(heap, (-self.scores[tid], left, right, syms[left], syms[right]))

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
        if not 0 <= tid < len(self.tokens):
            raise ValueError(f"token id {tid} is outside the vocabulary of {len(self.tokens)}")
        ty = self.types[tid]
        if ty == BYTE:
            return bytes([int(self.tokens[tid][3:5], 16)])
        if ty in (CONTROL, UNKNOWN, UNUSED):
            return b""
        return self.tokens[tid].replace(SPACE, " ").encode("utf-8")

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


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
