"""A language-model runtime for GGUF files (`python -m tinygrad.apps.llm`): the model (`model.py`), its tokenizer
(`tokenizer.py`) and generation (`generate.py`)."""
from tinygrad.apps.llm import bpe  # noqa: F401 - registers the byte-level BPE tokenizer ('gpt2') with Tokenizer
from tinygrad.apps.llm.model import FAMILIES, Config, Transformer
from tinygrad.apps.llm.tokenizer import StreamDecoder, Tokenizer

__all__ = ["FAMILIES", "Config", "Transformer", "StreamDecoder", "Tokenizer"]
