"""`python -m tinygrad.apps.llm --model PATH --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K]
[--top-p P] [--min-p P] [--repeat-penalty R] [--stop TEXT] [--seed S] [--json]`

Prints the generated text as it is made; with --json, one JSON object as the last line instead: prompt_ids (as fed
to the model, BOS included), ids (the generated ones), text, prefill_tok_s, decode_tok_s. `--logits-for IDS_JSON`
prints the final-position logits for the given ids (a JSON list) as a JSON list, for testing against a reference.
`--chat` is an interactive conversation in the model's turn format, written by the file's own chat template
(`tokenizer.chat_template`, rendered with Jinja2: `pip install 'tinygrad[chat]'`); a file without one (a base model)
is refused unless `--chat-template` names a template file or a built-in (chatml). `--serve PORT` is an OpenAI-style
HTTP server (`/v1/completions`, `/v1/chat/completions`, streaming by server-sent events; see server.py), which runs
up to `--slots N` requests at once, batched (each slot a KV cache of --context positions), on `--host` (default
127.0.0.1: this machine only), with `--api-key KEY` required as a Bearer token when given (the environment's
TINYGRAD_API_KEY too) and each answer cut to `--max-tokens-cap N` tokens (default: the context's end).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from tinygrad.helpers import getenv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinygrad.apps.llm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a GGUF file")
    ap.add_argument("--prompt", default="", help="the prompt text")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    ap.add_argument("--top-k", type=int, default=0, help="0: off")
    ap.add_argument("--top-p", type=float, default=1.0, help="1: off")
    ap.add_argument("--min-p", type=float, default=0.0, help="0: off")
    ap.add_argument("--repeat-penalty", type=float, default=1.0, help="1: off")
    ap.add_argument("--stop", action="append", default=[], help="stop at this text (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--logits-for", metavar="IDS_JSON", help="print the final-position logits for these token ids")
    ap.add_argument("--context", type=int, default=4096, help="the most positions the KV cache holds")
    ap.add_argument("--chat", action="store_true", help="an interactive chat (a line of input a turn)")
    ap.add_argument("--chat-template", metavar="FILE_OR_NAME",
                    help="the chat template for --chat and --serve: a Jinja file or 'chatml' (default: the file's own)")
    ap.add_argument("--serve", type=int, metavar="PORT", help="an OpenAI-style HTTP server on this port")
    ap.add_argument("--slots", type=int, default=4, help="--serve: requests generated together (default 4)")
    ap.add_argument("--host", default="127.0.0.1", help="--serve: the address to listen on (0.0.0.0: every one)")
    ap.add_argument("--api-key", default=getenv("TINYGRAD_API_KEY", "") or None,
                    help="--serve: require 'Authorization: Bearer KEY' (default: $TINYGRAD_API_KEY, else none)")
    ap.add_argument("--max-tokens-cap", type=int, default=None,
                    help="--serve: the most tokens one answer may have (default: up to the context's end)")
    ap.add_argument("--max-gap-ms", type=float, default=150.0,
                    help="--serve: the gap between a running stream's tokens that prefilling a new prompt beside it "
                         "aims to stay under (default 150)")
    ap.add_argument("--no-warm", action="store_true",
                    help="--serve: don't make the decode steps' and prefill passes' captures while idle (each is "
                         "then compiled at its first use, inside a request)")
    args = ap.parse_args(argv)
    from tinygrad.profile import show_compile_progress
    show_compile_progress(2.0)  # a cold start compiles for several seconds: say so once it takes over 2 s

    from tinygrad.apps.llm.generate import generate
    from tinygrad.apps.llm.model import Transformer
    from tinygrad.apps.llm.sampling import SamplingParams
    from tinygrad.apps.llm.tokenizer import Tokenizer
    from tinygrad.nn.state_file import CheckpointError
    from tinygrad.nn.state_gguf import gguf_tensors
    try:
        kv, tensors = gguf_tensors(args.model)
        tok = Tokenizer.from_gguf(kv)
        template = None
        if args.chat or args.serve is not None:
            template = _chat_template(ap, args, kv.get("tokenizer.chat_template"), tok)
        model = Transformer(kv, tensors, max_context=args.context, slots=args.slots if args.serve is not None else 1)
    except (OSError, CheckpointError, ValueError, KeyError) as e:
        ap.error(f"can't load {args.model}: {e}")
    # the metadata (its vocabulary lists alone take ~40 MB) and the tensor table have been read into the model and
    # the tokenizer: nothing needs them while generating
    del kv, tensors
    if args.logits_for is not None:
        ids = json.loads(args.logits_for)
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and 0 <= i < model.cfg.vocab
                                                           for i in ids):
            ap.error(f"--logits-for takes a non-empty JSON list of token ids below {model.cfg.vocab}")
        logits = model.forward(ids, 0).numpy()
        print(json.dumps([round(float(v), 5) for v in logits]))
        return 0
    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.repeat_penalty, seed=args.seed)
    try:
        params.check()
    except ValueError as e:
        ap.error(str(e))
    if args.serve is not None:
        from tinygrad.apps.llm.server import serve
        if args.max_tokens_cap is not None and args.max_tokens_cap < 1:
            ap.error("--max-tokens-cap must be at least 1")
        if not args.max_gap_ms > 0:
            ap.error("--max-gap-ms must be above 0")
        return serve(model, tok, args.serve, args.host, name=os.path.basename(args.model), chat_template=template,
                     api_key=args.api_key or None, max_tokens_cap=args.max_tokens_cap, max_gap_s=args.max_gap_ms / 1e3,
                     warm=not args.no_warm)
    if args.chat:
        return _chat(model, tok, template, params, args.max_tokens)
    prompt_ids = tok.encode(args.prompt)
    on_text = None if args.json else (lambda s: (sys.stdout.write(s), sys.stdout.flush()))
    try:
        res = generate(model, tok, prompt_ids, args.max_tokens, params, args.stop, on_text)
    except OSError as e:  # the model file changed under us: no traceback for a user's error
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"prompt_ids": res.prompt_ids, "ids": res.ids, "text": res.text,
                          "prefill_tok_s": round(res.prefill_tok_s, 3), "decode_tok_s": round(res.decode_tok_s, 3)},
                         ensure_ascii=False))
    else:
        sys.stdout.write("\n")
    return 0


def _chat_template(ap: argparse.ArgumentParser, args: argparse.Namespace, source, tok):
    """The template --chat and --serve use: --chat-template's, else the file's own; None for a server whose file has
    none (its chat endpoint answers 400). --chat without one is refused: a base model continues text and has no turn
    format, and an invented one would make it print junk."""
    from tinygrad.apps.llm.chat import ChatTemplate, ChatTemplateError
    try:
        if args.chat_template is not None:
            return ChatTemplate.load(args.chat_template, tok)
        if isinstance(source, str) and source:
            return ChatTemplate.for_tokenizer(source, tok)
    except ChatTemplateError as e:
        if args.chat or args.chat_template is not None:
            ap.error(str(e))
        print(f"warning: {e}; /v1/chat/completions is off", file=sys.stderr)
        return None
    if args.chat:
        ap.error(f"{args.model} has no chat template (tokenizer.chat_template): it looks like a base model, which "
                 "continues text rather than taking turns; use --prompt, or choose a format with --chat-template FILE "
                 "(or --chat-template chatml)")
    print(f"note: {args.model} has no chat template: /v1/chat/completions is off (--chat-template turns it on)",
          file=sys.stderr)
    return None


def _chat(model, tok, template, params, max_tokens: int) -> int:
    """A conversation on stdin/stdout in the model's turn format, the whole history re-read each turn."""
    from tinygrad.apps.llm.generate import generate
    messages = []
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            sys.stdout.write("\n")
            return 0
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line})
        try:
            # the template may refuse the conversation (ChatTemplateError is a ValueError): this turn fails alone
            ids = template.encode(tok, messages)
            res = generate(model, tok, ids, max_tokens, params,
                           on_text=lambda s: (sys.stdout.write(s), sys.stdout.flush()))
        except (OSError, ValueError) as e:
            # this turn fails (the model file changed under us, the template refused, ...); the conversation goes on
            sys.stdout.write("\n")
            print(f"error: {e}", file=sys.stderr, flush=True)
            messages.pop()
            continue
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": res.text})


if __name__ == "__main__":
    sys.exit(main())
