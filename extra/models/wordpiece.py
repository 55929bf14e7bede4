"""A BERT WordPiece tokenizer (the uncased one all-MiniLM-L6-v2 uses), from a vocab.txt, in pure Python.

Two stages, as BERT defines them:

1. Basic tokenization: drop NUL, U+FFFD and control, format and private-use characters and turn every kind of
   whitespace into a space; put spaces around CJK ideographs (Chinese text has no spaces, so each ideograph is a
   word); split on whitespace; lowercase and strip accents (NFD, then drop the combining marks, category Mn);
   split every punctuation character off as a word of its own.
2. WordPiece: each word becomes the longest vocabulary entry that starts it, then the longest "##"-prefixed entry
   that continues from there, and so on; a word with a piece that matches nothing, or longer than 100 characters,
   becomes one [UNK].

Special tokens written in the text ("[MASK]", "[SEP]"...) are kept whole, as the Hugging Face tokenizers do.
`encode` adds [CLS] ... [SEP] and truncates to `max_length` tokens, the two specials included.

The reference is the Hugging Face fast tokenizer that sentence-transformers loads; where it departs from BERT's
original Python tokenizer this one follows it (noted where it happens). Character classes come from Python's
`unicodedata` (Unicode 14 on Python 3.11); the reference's Rust tables are older, so about 500 code points added
to Unicode since (new punctuation and combining marks of rare scripts) tokenize differently.

>>> tok = WordPieceTokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "un": 4, "##aff": 5, "##able": 6,
...                          "!": 7})
>>> tok.tokenize("Unaffable!")
['un', '##aff', '##able', '!']
>>> tok.encode("Unaffable!")
[2, 4, 5, 6, 7, 3]
"""
from __future__ import annotations

import os
import re
import unicodedata

# the special tokens every BERT vocabulary has, and which the text may name directly
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_WORD_CHARS = 100  # longer words become [UNK] without trying to split them (BERT's max_input_chars_per_word)

# the CJK Unified Ideograph blocks and their extensions and compatibility blocks: the characters BERT splits into
# one word each. NOTE: Hiragana, Katakana and Hangul are not in here (they are written with spaces or split by
# WordPiece), as in BERT. Extension E starts at 0x2B920 here, not at 0x2B820 as in BERT's Python tokenizer: the
# Hugging Face fast tokenizer (the reference) has it so, and 0x2B820..0x2B91F then stay inside words.
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_whitespace(ch: str) -> bool:
    """Space, tab, newline, carriage return and the Unicode space separators (category Zs)."""
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch: str) -> bool:
    """Control, format and private-use characters (Cc, Cf, Co), except tab, newline and carriage return, which
    count as whitespace. NOTE: BERT's original Python tokenizer drops only Cc and Cf; the reference this project
    checks against (Hugging Face's fast tokenizer, which sentence-transformers loads) drops private-use characters
    too, so one inside a word does not turn the word into [UNK]. Unassigned code points (Cn) are kept by both."""
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Co")


def is_punctuation(ch: str) -> bool:
    """Unicode punctuation (P*), plus every non-alphanumeric printable ASCII character: BERT splits "$", "^",
    "`" and the like off too, though Unicode calls them symbols."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def load_vocab(path: str | os.PathLike) -> dict[str, int]:
    """A vocab.txt: one token per line, its id the line number from 0."""
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            token = line.rstrip("\n").rstrip("\r")
            # NOTE: a repeated token keeps its first id (BERT's own vocabularies have no repeats)
            vocab.setdefault(token, i)
    if not vocab:
        raise ValueError(f"{path}: the vocabulary is empty")
    return vocab


class WordPieceTokenizer:
    """Text -> BERT token ids with an uncased WordPiece vocabulary (token -> id)."""

    def __init__(self, vocab: dict[str, int], max_length: int = 256, lowercase: bool = True):
        missing = [t for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]") if t not in vocab]
        if missing:
            raise ValueError(f"the vocabulary lacks the special tokens {missing}")
        if not isinstance(max_length, int) or max_length < 2:
            raise ValueError(f"max_length must be an int >= 2 (room for [CLS] and [SEP]), got {max_length!r}")
        self.vocab, self.max_length, self.lowercase = vocab, max_length, lowercase
        self.unk_id, self.cls_id, self.sep_id, self.pad_id = (vocab[t] for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]"))
        specials = [t for t in SPECIAL_TOKENS if t in vocab]
        self._special_re = re.compile("(" + "|".join(re.escape(t) for t in specials) + ")")

    @classmethod
    def from_file(cls, path: str | os.PathLike, max_length: int = 256) -> WordPieceTokenizer:
        return cls(load_vocab(path), max_length=max_length)

    # ---- stage 1: basic tokenization ----
    def _clean(self, text: str) -> str:
        out = []
        for ch in text:
            if ch == "\0" or ch == "\ufffd" or is_control(ch):
                continue
            out.append(" " if is_whitespace(ch) else f" {ch} " if is_cjk(ch) else ch)
        return "".join(out)

    def _normalize(self, word: str) -> str:
        if not self.lowercase:
            return word
        # NOTE: lowercased one character at a time: str.lower() would make a word-final sigma "ς", which the
        # reference (Hugging Face's fast tokenizer) leaves as "σ"
        word = unicodedata.normalize("NFD", "".join(ch.lower() for ch in word))
        return "".join(ch for ch in word if unicodedata.category(ch) != "Mn")

    def basic_tokenize(self, text: str) -> list[str]:
        """Cleaned, lowercased, accent-stripped words, punctuation split off (no special-token handling)."""
        words = []
        for word in self._clean(text).split():
            current: list[str] = []
            for ch in self._normalize(word):
                if is_punctuation(ch):
                    if current:
                        words.append("".join(current))
                        current = []
                    words.append(ch)
                elif is_whitespace(ch):
                    # NOTE: lowercasing and NFD never make whitespace in practice; split on it anyway
                    if current:
                        words.append("".join(current))
                        current = []
                else:
                    current.append(ch)
            if current:
                words.append("".join(current))
        return words

    # ---- stage 2: WordPiece ----
    def wordpiece(self, word: str) -> list[str]:
        """Greedy longest-match-first pieces of one word, or ["[UNK]"]."""
        if len(word) > MAX_WORD_CHARS:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece tokens of `text`, without [CLS]/[SEP] and without truncation."""
        if not isinstance(text, str):
            raise TypeError(f"the tokenizer takes a str, got {type(text).__name__}")
        tokens: list[str] = []
        # the capturing split alternates plain text (even positions) and special tokens (odd positions)
        for i, part in enumerate(self._special_re.split(text)):
            if i % 2:
                tokens.append(part)
            else:
                for word in self.basic_tokenize(part):
                    tokens.extend(self.wordpiece(word))
        return tokens

    def encode(self, text: str) -> list[int]:
        """[CLS] + the ids of `text`'s tokens + [SEP], truncated to max_length ids in all."""
        ids = [self.vocab[t] for t in self.tokenize(text)]
        return [self.cls_id] + ids[:self.max_length - 2] + [self.sep_id]

    def encode_batch(self, texts: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        """(ids, attention mask) of each text, padded with [PAD] to the longest; the mask is 1 on real tokens."""
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a list of str; use encode for one text")
        encoded = [self.encode(t) for t in texts]
        width = max((len(e) for e in encoded), default=0)
        ids = [e + [self.pad_id] * (width - len(e)) for e in encoded]
        mask = [[1] * len(e) + [0] * (width - len(e)) for e in encoded]
        return ids, mask
