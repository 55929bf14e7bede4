"""Chat templates: a GGUF file's `tokenizer.chat_template` (Jinja) rendered as transformers and llama.cpp render it,
and a conversation's token ids with every message's text kept plain.

Rendering: a sandboxed Jinja2 environment (the template comes from a model file and is untrusted: attribute tricks
such as `''.__class__` or `messages.append(...)` fail with a ChatTemplateError), `trim_blocks` and `lstrip_blocks`,
the `loopcontrols` extension, `raise_exception(msg)`, `strftime_now(fmt)` and a `tojson` filter that keeps non-ASCII
text; the variables are `messages`, `add_generation_prompt`, `bos_token` and `eos_token` (the texts of the
vocabulary's BOS and EOS tokens), with `tools` and `documents` None. Jinja2 is an optional extra
(`pip install 'tinygrad[chat]'`), imported only when a template is built.

Token ids (`ChatTemplate.encode`): the template's own text is tokenized with special tokens parsed (its
`<|im_start|>` is one control token) and each message's text as plain text (a `<|im_end|>` typed by a user stays
text). The conversation is rendered twice: once as it is, and once with each message's content replaced by one
character of Unicode's private-use area (a marker). Splitting the marked render on its markers gives the template's
own pieces; the real render is then read as those pieces with a message's text between each two, and the text found
there is tokenized plain. Templates that transform a content are followed where the result can be told apart:
`| trim` and `.strip()`/`.lstrip()`/`.rstrip()` (Llama 3, Gemma), and any part of the content (Qwen3 keeps only what
follows a `</think>`). A template whose own text depends on what a content says (a test like
`content.startswith('<tool_response>')` that comes out otherwise for the marker) can't be read this way: encode
raises ChatTemplateError naming the message rather than guess. Empty contents need no marker and get none.

Raw text on either side of a boundary between template text and message text is tokenized as one run, as llama.cpp
does when it tokenizes the whole rendered prompt, so a normal conversation's ids equal llama.cpp's exactly.

What encode asks of the tokenizer: `encode(text, add_bos=False, special=False)` for raw text, `special_texts` (the
texts of its control and user-defined tokens with their ids, longest first), `bos`, `eos`, `add_bos` (and `add_eos`
where it has one) and `vocab.text(id)`.

BOS follows llama.cpp's chat path: when the vocabulary adds BOS and the render starts with the BOS text (templates
that write `{{ bos_token }}`), that text is dropped and the tokenizer's BOS is the one BOS; likewise EOS at the end
for vocabularies that add EOS.
"""
from __future__ import annotations

import datetime
import json
import re
from typing import Any, Callable

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# templates a user may name instead of a file (`--chat-template chatml`): a choice made explicitly, never a default
BUILTIN = {"chatml": CHATML}

# marker ranges (first code point, size) tried in turn: the supplementary private-use planes 15 and 16 (their last
# two code points are noncharacters), then the BMP's private-use area
MARKER_RANGES = ((0xF0000, 0xFFFE), (0x100000, 0xFFFE), (0xE000, 0x1900))
# candidate ends of one message's text tried at most (a next piece that occurs very often: keep the search short)
MAX_ENDS = 256
# choices the reading of a render makes at most before giving up (each a candidate end tried; see _align)
MAX_STEPS = 100_000


class ChatTemplateError(ValueError):
    """A template that can't be loaded or rendered, or a conversation it refuses (its `raise_exception`)."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
            sort_keys: bool = False) -> str:
    # transformers' tojson: the JSON text as is (Jinja's own escapes HTML characters, which no template wants)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment(now: Callable[[], datetime.datetime]):
    """The sandboxed Jinja2 environment templates render in (built on first use: Jinja2 is an optional extra)."""
    try:
        import jinja2.ext
        from jinja2.exceptions import SecurityError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ChatTemplateError("chat templates need Jinja2: pip install 'tinygrad[chat]'") from None

    class _Generation(jinja2.ext.Extension):
        # transformers' `{% generation %}...{% endgeneration %}` marks the assistant's text for training masks;
        # rendering keeps what is inside
        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class _Sandbox(ImmutableSandboxedEnvironment):
        # Jinja's sandbox answers an unsafe attribute with an undefined value that prints as nothing; a template
        # that reaches for one is hostile or broken, and either way must fail loudly
        def unsafe_undefined(self, obj: Any, attribute: str):
            raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} object is unsafe")

    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: now().strftime(fmt)
    return env


class ChatTemplate:
    """A Jinja chat template with the BOS/EOS texts it renders with (see the module docstring).

    >>> t = ChatTemplate(BUILTIN["chatml"])
    >>> t.render([{"role": "user", "content": "hi"}])
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "",
                 now: Callable[[], datetime.datetime] = datetime.datetime.now):
        self.source, self.bos_token, self.eos_token = source, bos_token, eos_token
        env = _environment(now)
        try:
            self._template = env.from_string(source)
        except Exception as e:  # noqa: BLE001 - any Jinja error: a template that doesn't parse
            raise ChatTemplateError(f"the chat template doesn't parse: {type(e).__name__}: {e}") from None

    @classmethod
    def for_tokenizer(cls, source: str, tok: Any, **kw: Any) -> ChatTemplate:
        """The template with `tok`'s BOS and EOS texts (empty where the vocabulary has none)."""
        def text(tid: int | None) -> str:
            return tok.vocab.text(tid) if tid is not None and 0 <= tid < len(tok.vocab) else ""
        return cls(source, text(tok.bos), text(tok.eos), **kw)

    @classmethod
    def load(cls, choice: str, tok: Any) -> ChatTemplate:
        """A built-in template by name (`chatml`) or the text of a template file."""
        if choice in BUILTIN:
            return cls.for_tokenizer(BUILTIN[choice], tok)
        try:
            with open(choice, encoding="utf-8") as f:
                return cls.for_tokenizer(f.read(), tok)
        except OSError as e:
            raise ChatTemplateError(f"can't read the chat template {choice!r} (a file, or one of "
                                    f"{', '.join(BUILTIN)}): {e}") from None

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The conversation as the template writes it (BOS text included where the template writes it)."""
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token, tools=None,
                                         documents=None)
        except ChatTemplateError:
            raise
        except Exception as e:  # noqa: BLE001 - Jinja's errors, and a template's own (`'a' + none`): one kind
            raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: {e}") from None

    def segments(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> list[tuple[str, bool]]:
        """The render as [(text, is_template_text)]: the template's own text, and the text of messages between."""
        contents = [m.get("content") if isinstance(m, dict) else None for m in messages]
        # markers that occur nowhere in the template or the messages
        taken = {ord(ch) for ch in self.source + "".join(c for c in contents if isinstance(c, str))}
        base = next((b for b, size in MARKER_RANGES if len(messages) <= size and
                     not any(b <= ch < b + len(messages) for ch in taken)), None)
        if base is None:
            raise ChatTemplateError("the conversation's text uses characters of every private-use marker range")
        marked = []
        for i, (m, c) in enumerate(zip(messages, contents)):
            marked.append({**m, "content": chr(base + i)} if isinstance(c, str) and c else m)
        real = self.render(messages, add_generation_prompt)
        parts = re.split(f"([{re.escape(chr(base))}-{re.escape(chr(base + max(len(messages) - 1, 0)))}])",
                         self.render(marked, add_generation_prompt))
        pieces, order = parts[0::2], [ord(p) - base for p in parts[1::2]]
        found = _align(real, pieces, [contents[i] for i in order])
        if found is None:
            raise ChatTemplateError(
                "the chat template writes its own text differently depending on what a message says, so the "
                "messages' text can't be told apart from the template's: "
                f"messages {sorted(set(order))} (of roles {[messages[i].get('role') for i in sorted(set(order))]})")
        return found

    def encode(self, tok: Any, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> list[int]:
        """The conversation's token ids: the template's text with special tokens parsed, messages' text plain."""
        segs = self.segments(messages, add_generation_prompt)
        add_bos = bool(tok.add_bos) and tok.bos is not None
        add_eos = bool(getattr(tok, "add_eos", False)) and tok.eos is not None
        # llama.cpp's chat path: a BOS the template wrote is dropped when the tokenizer adds its own
        if add_bos and self.bos_token and segs and segs[0][1] and segs[0][0].startswith(self.bos_token):
            segs[0] = (segs[0][0][len(self.bos_token):], True)
        if add_eos and self.eos_token and segs and segs[-1][1] and segs[-1][0].endswith(self.eos_token):
            segs[-1] = (segs[-1][0][:len(segs[-1][0]) - len(self.eos_token)], True)
        # fragments: control tokens of the template's text split out, raw text joined across boundaries
        frags: list[str | int] = []
        for text, is_template in segs:
            for piece in (_split_special(text, tok.special_texts) if is_template else [text]):
                if isinstance(piece, str) and frags and isinstance(frags[-1], str):
                    frags[-1] += piece
                elif piece != "":
                    frags.append(piece)
        out = [tok.bos] if add_bos else []
        for f in frags:
            if isinstance(f, int):
                out.append(f)
            elif f:
                out.extend(tok.encode(f, add_bos=False, special=False))
        if add_eos:
            out.append(tok.eos)
        return out


def _split_special(text: str, specials: list[tuple[str, int]]) -> list[str | int]:
    """`text` as raw pieces and ids of the special texts in it, each special text split out in turn (the list is
    longest first, as the tokenizer keeps it, so `<|im_start|>` is found before any shorter text inside it)."""
    parts: list[str | int] = [text] if text else []
    for special, tid in specials:
        nxt: list[str | int] = []
        for p in parts:
            if isinstance(p, int) or special not in p:
                nxt.append(p)
                continue
            subs = p.split(special)
            for j, sub in enumerate(subs):
                if sub:
                    nxt.append(sub)
                if j != len(subs) - 1:
                    nxt.append(tid)
        parts = nxt
    return parts


def _content_ends(real: str, pos: int, content: str, nxt: str, last: bool) -> list[int]:
    """Where a message's text that starts at `pos` of the real render may end: the next template piece `nxt`
    follows there (and ends the render, when `last`). Known transforms first, then any part of the content."""
    ends: list[int] = []

    def fits(end: int) -> bool:
        return real.startswith(nxt, end) and (not last or end + len(nxt) == len(real))
    for text in (content, content.strip(), content.lstrip(), content.rstrip()):
        if real.startswith(text, pos) and fits(pos + len(text)) and pos + len(text) not in ends:
            ends.append(pos + len(text))
    # the latest first: the longest stretch of message text, so where two readings fit, more is kept plain
    if last:
        cands = [len(real) - len(nxt)]
    elif nxt:
        cands, end = [], real.rfind(nxt, pos)
        while end >= pos and len(cands) < MAX_ENDS:
            cands.append(end)
            end = real.rfind(nxt, pos, end + len(nxt) - 1)
    else:
        cands = []
    for end in cands:
        if end >= pos and end not in ends and fits(end) and real[pos:end] in content:
            ends.append(end)
    return ends


def _align(real: str, pieces: list[str], contents: list[str]) -> list[tuple[str, bool]] | None:
    """Read `real` as pieces[0], contents[0]', pieces[1], ... where each contents[k]' is what the template made of
    contents[k] (see _content_ends), backtracking when a choice leads nowhere; None when no reading fits."""
    if not real.startswith(pieces[0]):
        return None
    if not contents:
        return [(real, True)] if real == pieces[0] else None
    # a depth-first search kept on a list (a conversation of thousands of messages must not recurse)
    stack = [(0, len(pieces[0]), _content_ends(real, len(pieces[0]), contents[0], pieces[1], len(contents) == 1))]
    chosen: list[int] = []  # chosen[k]: where contents[k]' ends
    steps = 0
    while stack:
        k, pos, ends = stack[-1]
        if not ends:
            stack.pop()
            continue
        steps += 1
        if steps > MAX_STEPS:  # readings that fail late, over and over: give up rather than search for ever
            return None
        end = ends.pop(0)
        del chosen[k:]
        chosen.append(end)
        if k + 1 == len(contents):
            break
        nxt = end + len(pieces[k + 1])
        stack.append((k + 1, nxt, _content_ends(real, nxt, contents[k + 1], pieces[k + 2], k + 2 == len(contents))))
    else:
        return None
    out, pos = [(pieces[0], True)], len(pieces[0])
    for k, end in enumerate(chosen):
        out.append((real[pos:end], False))
        out.append((pieces[k + 1], True))
        pos = end + len(pieces[k + 1])
    return out
