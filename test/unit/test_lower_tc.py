"""The seams of the block-tile lowering (codegen/lower_tc.py): every kind of plan has a tile class, the emitter it
is handed makes each uop once per scope, and every typed TMA argument renders as the CUDA prelude's call. The
kernels themselves are checked byte for byte by test_codegen_corpus.py."""
import doctest

import tinygrad.codegen.emitter as emitter_module
from tinygrad.codegen.emitter import Emitter
from tinygrad.codegen.lower_tc import TILES
from tinygrad.codegen.tensor_cores import TileKind
from tinygrad.codegen.uops import TmaExit, TmaInit, TmaProduce, TmaProducer, TmaRelease, TmaWait, UOps
from tinygrad.dtype import dtypes
from tinygrad.renderer.cuda import CUDALanguage
from tinygrad.shape.symbolic import Variable


def test_every_tile_kind_has_a_tile():
    assert set(TILES) == set(TileKind)


def test_emitter_doctest():
    assert doctest.testmod(emitter_module).failed == 0


def test_emitter_cse_is_scoped():
    em = Emitter([])
    outer = em.add(em.const(2), em.const(3))
    em.open_scope()
    inner = em.mul(outer, em.const(4))
    assert em.mul(outer, em.const(4)) is inner and em.add(em.const(2), em.const(3)) is outer
    em.close_scope()
    # made inside the closed scope: out of reach after it, so made again; the outer value is still shared
    assert em.mul(outer, em.const(4)) is not inner and em.add(em.const(2), em.const(3)) is outer


def test_emitter_lowers_bound_variables():
    em = Emitter([])
    i = Variable("i", 0, 9)
    u = em.uop(UOps.SPECIAL, dtypes.int32, (), (0, "gidx0", 10), False)
    em.bind(i, u)
    out = em.lower_node(i * 4 + 1)
    assert out.uop is UOps.ALU and out.vin[0].vin[0] is u


def test_tma_args_render():
    lang = CUDALanguage()
    ops = ["bars", "a", "b", "c", "d", "e", "f", "g", "h"]
    assert lang.render_tma(TmaInit(4, 8, 2), ops[:2]) == "tg_tma_init<4, 2>(bars, 8, a)"
    produce = lang.render_tma(TmaProduce(4, 100, 200, True, 2, 1), ops)
    assert produce.startswith("tg_tma_produce<4, 100, 200, true, 2, 1>(bars, a, ")
    producer = lang.render_tma(TmaProducer(4, 100, 200, False, 2, 16, 256, 1), ops[:8])
    assert producer.startswith("if (a >= 256) { tg_tma_producer<4, 100, 200, false, 2, 16, 1>(bars, a == 256, ")
    assert lang.render_tma(TmaWait(4), ops[:2]) == "tg_tma_wait<4>(bars, a)"
    assert lang.render_tma(TmaRelease(4, 2), ops[:3]) == "tg_tma_release<4, 2>(bars, a, b)"
    assert lang.render_tma(TmaExit(2), []) == "tg_tma_exit<2>()"
