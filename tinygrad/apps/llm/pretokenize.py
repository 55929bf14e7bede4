"""Pre-tokenizers of byte-level BPE vocabularies: how text is cut into words before merges, by `tokenizer.ggml.pre`.

Each pre-tokenizer is a cascade of rules, as llama.cpp runs it: the first rule cuts the text into pieces, the next
cuts each of those pieces again, and so on (a piece never grows back across a cut). A rule is one of:

- a hand-written scanner for a pattern llama.cpp itself scans by hand (`gpt2`, `llama3`, `qwen2`, `qwen35`), with
  the same quirks: `\\s+(?!\\S)` leaves the last space of a run to the word after it, digits go in groups of 1-3
  from the left (llama3) or one by one (qwen2), contractions are ASCII-only and case-insensitive for llama3/qwen2
  (`'S`, `'Ll`) but lower case only for gpt2, qwen35 keeps combining marks in words;
- a regular expression llama.cpp hands to std::regex. Those use \\p{L}, \\p{N}, \\p{P}... which Python's `re`
  lacks, so, as llama.cpp does, the text is first "collapsed" to one character per code point (ASCII kept, every
  other code point a marker of its class: letters 0xD2, numbers 0xD1, punctuation 0xD3, marks 0xD4, symbols 0xD5,
  whitespace 0x0B, anything else 0xD0) and the pattern, written against those markers, runs on that with
  `re.ASCII` (where `\\s` is the same six ASCII characters as std::regex's).

Classes come from `unicodedata.category` (L*, N*, P*, S*, M*), whitespace from llama.cpp's own list (Python's
`str.isspace` also counts U+001C..U+001F, which llama.cpp does not).
"""
from __future__ import annotations

import functools
import re
import unicodedata
from typing import Callable

# llama.cpp's whitespace code points (its \s)
_WHITESPACE = frozenset(chr(c) for c in (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000))
_NOT_WORD = frozenset("WLN")  # the classes [^\s\p{L}\p{N}] excludes
_NOT_WORD_MARKS = frozenset("WLNM")  # ... and [^\s\p{L}\p{M}\p{N}]
_COLLAPSED = {"L": "\xd2", "N": "\xd1", "P": "\xd3", "M": "\xd4", "S": "\xd5", "W": "\x0b", "O": "\xd0"}


@functools.lru_cache(maxsize=1 << 16)
def char_class(c: str) -> str:
    """One letter for the class of code point `c`: W(hitespace), L(etter), N(umber), P(unctuation), S(ymbol),
    M(ark) or O(ther)."""
    if c in _WHITESPACE:
        return "W"
    cat = unicodedata.category(c)[0]
    return cat if cat in "LNPSM" else "O"


def classes(text: str) -> str:
    return "".join(map(char_class, text))


def collapse(text: str) -> str:
    """llama.cpp's one-character-per-code-point stand-in for `text` (see the module docstring)."""
    return "".join(c if c < "\x80" else _COLLAPSED[char_class(c)] for c in text)


def _gpt2(s: str) -> list[int]:
    """Cut ends of 's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+ in `s`."""
    k, n, pos, ends = classes(s), len(s), 0, []
    while pos < n:
        c = s[pos]
        if c == "'" and pos + 1 < n:
            if s[pos + 1] in "stmd":
                pos += 2
                ends.append(pos)
                continue
            if pos + 2 < n and s[pos + 1:pos + 3] in ("re", "ve", "ll"):
                pos += 3
                ends.append(pos)
                continue
        # a leading space joins the run after it; a space at the very end has no class after it ("")
        f2 = (k[pos + 1] if pos + 1 < n else "") if c == " " else k[pos]
        if f2 in ("L", "N"):
            pos += c == " "
            while pos < n and k[pos] == f2:
                pos += 1
            ends.append(pos)
            continue
        if f2 and f2 not in _NOT_WORD:
            pos += c == " "
            while pos < n and k[pos] not in _NOT_WORD:
                pos += 1
            ends.append(pos)
            continue
        pos = _whitespace(k, n, pos, s, False)
        ends.append(pos)
    return ends


def _whitespace(k: str, n: int, pos: int, s: str, newlines: bool) -> int:
    """The end of the whitespace word at `pos`: with `newlines`, \\s*[\\r\\n]+ first (up to the last CR/LF of the
    run); then \\s+(?!\\S), which leaves the run's last space to the word after it unless the run ends the piece;
    then \\s+; a code point that matches nothing is a word of its own."""
    num, last_rn = 0, 0
    while pos + num < n and k[pos + num] == "W":
        if newlines and s[pos + num] in "\r\n":
            last_rn = pos + num + 1
        num += 1
    if last_rn:
        return last_rn
    if num > 1 and pos + num < n:
        return pos + num - 1
    return pos + max(num, 1)


def _llama3(s: str, digits: int, marks: bool = False) -> list[int]:
    """Cut ends of (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,digits}|
    ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+ in `s` (Llama 3: digits=3, Qwen 2: digits=1);
    with `marks` (Qwen 3.5) words are [\\p{L}\\p{M}]+ and marks are not punctuation."""
    k, n, pos, ends = classes(s), len(s), 0, []
    word, not_word = ("LM", _NOT_WORD_MARKS) if marks else ("L", _NOT_WORD)
    while pos < n:
        c, f = s[pos], k[pos]
        if c == "'" and pos + 1 < n:
            if s[pos + 1] in "sStTmMdD":
                pos += 2
                ends.append(pos)
                continue
            if pos + 2 < n and s[pos + 1:pos + 3].lower() in ("re", "ve", "ll") and s[pos + 1:pos + 3].isascii():
                pos += 3
                ends.append(pos)
                continue
        if c not in "\r\n" and f != "N" and (f in word or (pos + 1 < n and k[pos + 1] in word)):
            pos += 1
            while pos < n and k[pos] in word:
                pos += 1
            ends.append(pos)
            continue
        if f == "N":
            start = pos
            while pos < n and k[pos] == "N" and pos - start < digits:
                pos += 1
            ends.append(pos)
            continue
        f2 = (k[pos + 1] if pos + 1 < n else "") if c == " " else f
        if f2 not in not_word:  # also a space that ends the piece: it is a word of its own either way
            pos += c == " "
            while pos < n and k[pos] not in not_word:
                pos += 1
            while pos < n and s[pos] in "\r\n":
                pos += 1
            ends.append(pos)
            continue
        pos = _whitespace(k, n, pos, s, True)
        ends.append(pos)
    return ends


def _regex(pattern: str) -> Callable[[str], list[int]]:
    """A rule from a pattern over collapsed text: its matches are words, and so is the text between them."""
    rx = re.compile(pattern, re.ASCII)

    def cut(s: str) -> list[int]:
        ends = []
        for m in rx.finditer(collapse(s)):
            if not ends or ends[-1] != m.start():
                ends.append(m.start())
            ends.append(m.end())
        if ends and ends[0] == 0:
            ends.pop(0)
        if not ends or ends[-1] != len(s):
            ends.append(len(s))
        return ends
    return cut


# \p{...} classes as they read over collapsed text, for use inside [...]
_L, _N, _P = "\xd2A-Za-z", "\xd10-9", "\xd3!-#%-*,-/:-;?-@\\[-\\]_{}"
_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
# Mistral's Tekken: words of upper-then-lower case letters, digits alone, and "/" kept after punctuation
_TEKKEN = (f"[^\\r\\n{_L}{_N}]?(?:(?=[{_L}])[^a-z])*(?:(?=[{_L}])[^A-Z])+|"
           f"[^\\r\\n{_L}{_N}]?(?:(?=[{_L}])[^a-z])+(?:(?=[{_L}])[^A-Z])*|"
           f"[{_N}]| ?[^\\s{_L}{_N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# GPT-4o and Llama 4: as Tekken, with contractions after a word and digits in groups of 1-3
_GPT4O = (f"[^\\r\\n{_L}{_N}]?(?:(?=[{_L}])[^a-z])*(?:(?=[{_L}])[^A-Z])+{_CONTRACTIONS}?|"
          f"[^\\r\\n{_L}{_N}]?(?:(?=[{_L}])[^a-z])+(?:(?=[{_L}])[^A-Z])*{_CONTRACTIONS}?|"
          f"[{_N}]{{1,3}}| ?[^\\s{_L}{_N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def _rules(kind: str) -> list[Callable[[str], list[int]]]:
    gpt2 = _gpt2
    if kind == "default":
        return [_regex(f"[{_P}\\$\\+<=>\\^~\\|]+"), gpt2, _regex(f"[{_N}]+"), _regex("[0-9][0-9][0-9]")]
    if kind == "gpt2":
        return [gpt2]
    if kind == "starcoder":
        return [_regex(f"[{_N}]"), gpt2]
    if kind == "llama3":
        return [functools.partial(_llama3, digits=3)]
    if kind == "qwen2":
        return [functools.partial(_llama3, digits=1)]
    if kind == "qwen35":
        return [functools.partial(_llama3, digits=1, marks=True)]
    if kind == "tekken":
        return [_regex(_TEKKEN)]
    if kind == "gpt4o":
        return [_regex(_GPT4O)]
    raise AssertionError(kind)


# `tokenizer.ggml.pre` names -> (rules, ignore_merges, BOS by default), from llama.cpp's table; "ignore merges"
# takes a whole word that is a token as that token without merging it
PRE_TOKENIZERS: dict[str, tuple[str, bool, bool]] = {
    "default": ("default", False, False),
    **{name: ("gpt2", False, False) for name in ("gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "mellum",
                                                 "a.x-4.0", "gigachat", "trillion", "granite-docling")},
    **{name: ("starcoder", False, False) for name in ("starcoder", "refact", "command-r", "smollm", "codeshell",
                                                      "exaone", "minerva-7b", "mellum2")},
    **{name: ("llama3", True, True) for name in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                                 "pixtral", "midm-2.0", "lfm2")},
    "dbrx": ("llama3", False, False),
    "smaug-bpe": ("llama3", False, False),
    **{name: ("qwen2", False, False) for name in ("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "kormo")},
    "qwen35": ("qwen35", False, False),
    "tekken": ("tekken", True, True),
    **{name: ("gpt4o", False, False) for name in ("gpt-4o", "llama4")},
}


class PreTokenizer:
    """Cuts text into words as llama.cpp's pre-tokenizer `name` does: `pre(text) -> list[str]`."""

    def __init__(self, name: str | None):
        # llama.cpp takes a file without `tokenizer.ggml.pre` as "default" (with a warning about quality)
        name = name or "default"
        if name not in PRE_TOKENIZERS:
            supported = ", ".join(sorted(PRE_TOKENIZERS))
            raise ValueError(f"pre-tokenizer {name!r} is not supported (supported: {supported})")
        self.name = name
        kind, self.ignore_merges, self.add_bos = PRE_TOKENIZERS[name]
        self.rules = _rules(kind)

    def __call__(self, text: str) -> list[str]:
        pieces = [text] if text else []
        for rule in self.rules:
            nxt = []
            for piece in pieces:
                start = 0
                for end in rule(piece):
                    nxt.append(piece[start:end])
                    start = end
            pieces = nxt
        return pieces
