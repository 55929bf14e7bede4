"""A corpus of kernels rendered for every language and tensor-core kind, and what each renderer said about it.

The fixture (test/fixtures/codegen_corpus.json.gz) holds, for every case, the kernel source and its launch facts
(grid, block, persistent launch, dynamic shared memory, tensor maps). test_codegen_corpus.py renders the corpus again
and wants the same bytes: refactors of the linearizer, the tensor-core lowering and the renderers must not change a
kernel. `python test/unit/codegen_corpus.py --update` rewrites the fixture (only for a change meant to alter kernels,
said so in its commit).

Cases are kernels of one schedule item each, linearized with fixed LinearizerOptions (never the host's or a GPU's),
by the heuristic or by given Opts, so the corpus is the same on every machine.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from tinygrad import Tensor, Variable, dtypes
from tinygrad.codegen.gpu_dims import CUDA_GLOBAL_MAX, CUDA_LOCAL_MAX
from tinygrad.codegen.kernel import LinearizerOptions, Opt, OptOps
from tinygrad.codegen.tensor_cores import TC_CONFIGS
from tinygrad.helpers import Context

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "codegen_corpus.json.gz"

_GPU = dict(has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16)
CUDA = LinearizerOptions("CUDA", **_GPU, global_max=CUDA_GLOBAL_MAX, local_max=CUDA_LOCAL_MAX)
CUDA_SYNC = dataclasses.replace(CUDA, tensor_cores=("m16n8k16",))
CUDA_ASYNC = dataclasses.replace(CUDA, tensor_cores=("m16n8k16", "cp.async"), shared_max=227 * 1024)
CUDA_WGMMA = dataclasses.replace(CUDA_ASYNC, tensor_cores=("m16n8k16", "cp.async", "wgmma"))
CUDA_TMA = dataclasses.replace(CUDA_ASYNC, tensor_cores=("m16n8k16", "cp.async", "wgmma", "tma"))
CUDA_TF32 = dataclasses.replace(CUDA_ASYNC, tensor_cores=("m16n8k16", "cp.async", "tf32"))
AMD = LinearizerOptions("AMD", **_GPU, global_max=(2**31 - 1, 65535, 65535), local_max=(1024, 1024, 1024),
                        shared_max=64 * 1024)
AMD_WMMA = dataclasses.replace(AMD, tensor_cores=("wmma_gfx11",))
METAL = LinearizerOptions("METAL", **_GPU, global_max=(2**32 - 1, 2**32 - 1, 2**32 - 1), local_max=(1024, 1024, 1024),
                          shared_max=32 * 1024)
METAL_SIMD = dataclasses.replace(METAL, tensor_cores=("simdgroup",))
CLANG_PLAIN = LinearizerOptions("CLANG", has_local=False, has_shared=False)
CLANG_AVX2 = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True, max_vector_bytes=32,
                               vector_registers=16, threads=1, narrow_vectors=True, vector_math=True)
CLANG_AVX512 = LinearizerOptions("CLANG", has_local=False, has_shared=False, supports_upcast=True,
                                 max_vector_bytes=64, vector_registers=32, threads=4, narrow_vectors=True,
                                 vector_math=True)


def _renderers() -> dict[str, tuple[LinearizerOptions, Callable]]:
    from tinygrad.renderer.cstyle import ClangRenderer, soft_half_clang_renderer
    from tinygrad.renderer.cuda import CUDARenderer
    from tinygrad.renderer.hip import hip_renderer
    from tinygrad.renderer.metal import MetalRenderer
    return {
        "clang_plain": (CLANG_PLAIN, ClangRenderer), "clang_avx2": (CLANG_AVX2, ClangRenderer),
        "clang_avx512": (CLANG_AVX512, ClangRenderer), "clang_softhalf": (CLANG_AVX2, soft_half_clang_renderer),
        "cuda": (CUDA, CUDARenderer), "cuda_sync": (CUDA_SYNC, CUDARenderer), "cuda_async": (CUDA_ASYNC, CUDARenderer),
        "cuda_wgmma": (CUDA_WGMMA, CUDARenderer), "cuda_tma": (CUDA_TMA, CUDARenderer),
        "cuda_tf32": (CUDA_TF32, CUDARenderer),
        "hip32": (AMD, hip_renderer(32)), "hip64": (AMD, hip_renderer(64)), "hip_wmma": (AMD_WMMA, hip_renderer(32)),
        "metal": (METAL, MetalRenderer), "metal_simd": (METAL_SIMD, MetalRenderer),
    }


def _r(*shape, seed=0, dtype=dtypes.float32) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).cast(dtype).realize()


def _tc(bm, bn, wm, wn, pred=lambda c: True) -> int:
    return next(i for i, c in enumerate(TC_CONFIGS) if (c.bm, c.bn, c.wm, c.wn) == (bm, bn, wm, wn) and pred(c))


def _expressions() -> dict[str, Callable[[], Tensor]]:
    """Tensor expressions, each one kernel (made lazily: a case builds its own inputs)."""
    h = dtypes.half
    v = Variable("n", 1, 64).bind(17)
    return {
        "add": lambda: _r(33, 65) + _r(33, 65, seed=1),
        "muladd_const": lambda: _r(64) * 1.0001 + 0.5,
        "int_ops": lambda: (_r(100).cast(dtypes.int32) * 3 + 7) // 2 % 5,
        "where_cmp": lambda: (_r(48, 17) > 0).where(_r(48, 17, seed=1), 2.0),
        "unary": lambda: (_r(257).exp() + _r(257, seed=1).abs().sqrt().log() + _r(257, seed=2).sin()),
        "cast_half": lambda: (_r(130, dtype=h) * 2 + 1).cast(dtypes.float32),
        "bf16": lambda: (_r(66, dtype=dtypes.bfloat16) + 1),
        "sum_rows": lambda: _r(45, 129).sum(axis=1),
        "sum_cols": lambda: _r(129, 45).sum(axis=0),
        "sum_all": lambda: _r(1000).sum(),
        "sum_long": lambda: Tensor.ones(2**20).contiguous().realize().sum(),
        "max_rows": lambda: _r(31, 200).max(axis=1),
        "mean_2d": lambda: _r(8, 16, 32).mean(axis=(0, 2)),
        "matvec": lambda: _r(1, 256) @ _r(256, 1000, seed=1),
        "matmul_f32": lambda: _r(128, 96) @ _r(96, 160, seed=1),
        "matmul_odd": lambda: _r(37, 53) @ _r(53, 71, seed=1),
        "matmul_half": lambda: _r(256, 128, dtype=h) @ _r(128, 256, seed=1, dtype=h),
        "matmul_half_odd": lambda: _r(250, 40, dtype=h) @ _r(40, 257, seed=1, dtype=h),
        "matmul_half_bt": lambda: _r(128, 96, dtype=h) @ _r(128, 96, seed=1, dtype=h).T,
        "matmul_half_big": lambda: _r(512, 256, dtype=h) @ _r(256, 512, seed=1, dtype=h),
        "bmm_half": lambda: _r(4, 64, 64, dtype=h) @ _r(4, 64, 64, seed=1, dtype=h),
        "conv2d": lambda: _r(2, 8, 14, 14).conv2d(_r(16, 8, 3, 3, seed=1), padding=1),
        "pad_shrink": lambda: _r(10, 10).pad(((1, 2), (3, 0))).shrink(((0, 12), (1, 11))) * 2,
        "symbolic_add": lambda: Tensor.ones(64, 8).contiguous().realize().shrink(((0, v), (0, 8))) + 1,
        "argmax": lambda: _r(20, 50).argmax(axis=1),
        "cumsum": lambda: _r(300).cumsum(),
    }


def _cases() -> list[tuple[str, str, str, list[Opt] | None]]:
    """(case name, expression, renderer, Opts or None for the heuristic)."""
    plain = ["add", "muladd_const", "int_ops", "where_cmp", "unary", "cast_half", "sum_rows", "sum_cols", "sum_all",
             "sum_long", "max_rows", "mean_2d", "matvec", "matmul_f32", "matmul_odd", "conv2d", "pad_shrink",
             "symbolic_add", "argmax", "cumsum"]
    cases = []
    for r in ("clang_plain", "clang_avx2", "clang_avx512", "cuda", "hip32", "hip64", "metal"):
        cases += [(f"{e}/{r}", e, r, None) for e in plain]
    cases += [(f"bf16/{r}", "bf16", r, None) for r in ("clang_avx2", "cuda", "hip32")]
    cases += [(f"{e}/clang_softhalf", e, "clang_softhalf", None) for e in ("cast_half", "matmul_half")]
    half = ["matmul_half", "matmul_half_odd", "matmul_half_bt", "bmm_half"]
    for r in ("cuda_sync", "cuda_async", "cuda_wgmma", "cuda_tma", "hip_wmma", "metal_simd"):
        cases += [(f"{e}/{r}", e, r, None) for e in half]
    cases += [(f"{e}/cuda_tf32", e, "cuda_tf32", None) for e in ("matmul_f32", "matmul_odd")]
    cases += [(f"matmul_f32/{r}", "matmul_f32", r, None) for r in ("cuda_async", "cuda_wgmma")]  # SIMT tiles
    # every tensor-core config the CUDA renderer has, chosen explicitly
    for i, c in enumerate(TC_CONFIGS):
        r = "cuda_tma" if c.tma else "cuda_wgmma" if c.wgmma else "cuda_async"
        cases.append((f"matmul_half_big/tc{i}/{r}", "matmul_half_big", r, [Opt(OptOps.TC, 0, i)]))
    mid = _tc(64, 64, 2, 2, lambda c: not c.wgmma)
    cases += [(f"matmul_half/tc{mid}/{r}", "matmul_half", r, [Opt(OptOps.TC, 0, mid)])
              for r in ("cuda_sync", "hip_wmma", "metal_simd")]
    # hand-picked opts: upcasts, locals, groups, unrolls
    cases += [
        ("sum_rows/group/cuda", "sum_rows", "cuda", [Opt(OptOps.GROUPTOP, 1, 3)]),
        ("matmul_f32/upcast_local/cuda", "matmul_f32", "cuda",
         [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 8)]),
        ("matmul_f32/unroll/clang_avx2", "matmul_f32", "clang_avx2", [Opt(OptOps.UNROLL, 2, 4)]),
        ("matmul_f32/noopt/metal", "matmul_f32", "metal", []),
    ]
    return cases


def render_case(expr: str, renderer: str, opts: list[Opt] | None) -> dict:
    """One case's source and launch facts, as the renderer gives them."""
    from tinygrad.codegen.linearizer import Linearizer
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.ops import BufferOps
    lopts, render = _renderers()[renderer]
    out = _expressions()[expr]()
    items = [si for si in create_schedule_with_vars([out.lazydata])[0] if si.ast[0].op is BufferOps.STORE]
    lin = Linearizer(items[-1].ast, lopts)
    if opts is not None:
        for o in opts:
            try:
                lin.apply_opt(o)
            except ValueError as e:  # a config this shape can't take: its refusal is part of the corpus too
                return {"refused": str(e)}
        with Context(NOOPT=1):
            lin.linearize()
    lin.linearize()
    spec = render(lin.name, lin.uops)
    dims = spec.launch
    maps = [dataclasses.asdict(m) for m in spec.tensor_maps]
    # NOTE: the fixture was written when these facts were read from marker comments, with the persistent flag and
    # the shared bytes kept only for kernels with a renderer's launch: it still records them so
    return {"name": lin.name, "src": spec.src, "launch": [list(d) for d in dims] if dims else None,
            "persistent": spec.persistent if dims else False, "shared": spec.dynamic_shared if dims else 0,
            "tensor_maps": json.loads(json.dumps(maps)),
            "global_size": [str(g) for g in lin.global_size] if lin.global_size else None,
            "local_size": [str(s) for s in lin.local_size] if lin.local_size else None,
            "opts": [str(o) for o in lin.applied_opts]}


def render_corpus() -> dict[str, dict]:
    with Context(BEAM=0, NOOPT=0, DEBUG=0):
        return {name: render_case(expr, r, opts) for name, expr, r, opts in _cases()}


def load_fixture() -> dict[str, dict]:
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


if __name__ == "__main__":
    if "--update" not in sys.argv:
        sys.exit("usage: python test/unit/codegen_corpus.py --update  (rewrites " + str(FIXTURE) + ")")
    corpus = render_corpus()
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(FIXTURE, "wb", mtime=0) as f:
        f.write(json.dumps(corpus, indent=1, sort_keys=True).encode())
    print(f"{len(corpus)} kernels -> {FIXTURE}")
