"""The CUDA renderer's kernels compiled with the host C++ compiler and run on the CPU through a small CUDA shim (a
std::thread per GPU thread, real barriers and warp shuffles), checked against numpy: vector tails, misaligned
pointers, views, and every reduction form, with no GPU needed."""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_cuda_runtime import _render_all

_SHIM = r"""
#include <atomic>
#include <cstring>
#include <math.h>
#include <pthread.h>
#include <thread>
#include <vector>
struct tg_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local tg_dim3 threadIdx, blockIdx;
static tg_dim3 gridDim, blockDim;
static pthread_barrier_t tg_block_bar, tg_warp_bar[32];
static unsigned char tg_lanes[1024][8];
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(n)
static void __syncthreads() { pthread_barrier_wait(&tg_block_bar); }
static void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T __shfl_down_sync(unsigned, T v, int s) {
  unsigned t = threadIdx.x;
  std::memcpy(tg_lanes[t], &v, sizeof(T));
  pthread_barrier_wait(&tg_warp_bar[t >> 5]);
  T out = v;
  if ((t & 31) + s < 32) std::memcpy(&out, tg_lanes[t + s], sizeof(T));
  pthread_barrier_wait(&tg_warp_bar[t >> 5]);
  return out;
}
static float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static void tg_run(unsigned grid, unsigned block, void (*thread)(void**, const int*), void** ptrs, const int* ints) {
  gridDim.x = grid;
  blockDim.x = block;
  pthread_barrier_init(&tg_block_bar, nullptr, block);
  for (int w = 0; w < 32; w++) pthread_barrier_init(&tg_warp_bar[w], nullptr, 32);
  for (unsigned b = 0; b < grid; b++) {  // blocks one after another, the threads of a block together
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; t++)
      threads.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; thread(ptrs, ints); });
    for (auto& th : threads) th.join();
  }
  pthread_barrier_destroy(&tg_block_bar);
  for (int w = 0; w < 32; w++) pthread_barrier_destroy(&tg_warp_bar[w]);
}
"""
# the device half conversions are PTX: on the host, the compiler's _Float16
_HOST_HALF = """static float tg_f16_to_f32(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static unsigned short tg_f32_to_f16(float f) { _Float16 x = (_Float16)f; unsigned short h; std::memcpy(&h, &x, 2);
  return h; }
static float tg_f16_round(float f) { return tg_f16_to_f32(tg_f32_to_f16(f)); }
"""


def _host_kernels(cases: dict) -> dict:
    """Compiles rendered kernels for the host shim, all in one library: {case: launch(grid, block, bufs, ints)}."""
    import ctypes
    import re
    import tempfile

    from tinygrad.renderer.cuda import HALF_PRELUDE
    parts = [_SHIM]
    for k, src in enumerate(cases.values()):
        m = re.search(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\((.*)\) \{', src)
        params = [p.replace("__restrict__", "").rsplit(" ", 1)[0].strip() for p in m.group(2).split(", ")]
        args, nptr, nint = [], 0, 0
        for p in params:
            if p.endswith("*"):
                args.append(f"({p})ptrs[{nptr}]")
                nptr += 1
            else:
                args.append(f"ints[{nint}]")
                nint += 1
        body = src.replace(HALF_PRELUDE, _HOST_HALF).replace(f" {m.group(1)}(", f" tg_kernel{k}(")
        body = body.replace('extern "C" ', "")
        parts.append(f"namespace k{k} {{\n{body}\n"
                     f"static void thread(void** ptrs, const int* ints) {{ tg_kernel{k}({', '.join(args)}); }}\n}}\n"
                     f'extern "C" void tg_launch{k}(unsigned g, unsigned b, void** p, const int* i) '
                     f"{{ tg_run(g, b, k{k}::thread, p, i); }}\n")
    folder = tempfile.mkdtemp()
    src_path, lib_path = os.path.join(folder, "kernels.cpp"), os.path.join(folder, "kernels.so")
    Path(src_path).write_text("\n".join(parts))
    out = subprocess.run(["g++", "-std=c++17", "-O1", "-w", "-shared", "-fPIC", "-pthread", src_path, "-o", lib_path],
                         capture_output=True, text=True, timeout=300)
    try:
        assert out.returncode == 0, out.stderr[:4000]
        lib = ctypes.CDLL(lib_path)
    finally:
        # a loaded library stays mapped once its file is gone: nothing is left in the temporary folder
        shutil.rmtree(folder, ignore_errors=True)

    def launcher(k: int):
        fn = getattr(lib, f"tg_launch{k}")
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]

        def launch(grid: int, block: int, bufs: list[np.ndarray], ints: tuple = ()) -> None:
            p = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
            i = (ctypes.c_int * max(1, len(ints)))(*ints)
            fn(grid, block, p, i)
        return launch
    return {name: launcher(k) for k, name in enumerate(cases)}


def _placed(data: np.ndarray, misalign: int = 0) -> np.ndarray:
    """A copy of `data` (flat) at an address `misalign` elements past a 16-byte boundary."""
    raw = np.zeros(data.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 16 + misalign * data.itemsize
    view = raw[start:start + data.nbytes].view(data.dtype)
    view[:] = data.ravel()
    return view


def _qmatvec(empty, out: int, inner: int, groups: int):
    """An LLM's quantized matrix-vector product: int8 weights (out, inner), a float scale per group of each row."""
    from tinygrad import dtypes
    qs, d, x = empty(out, inner, dtype=dtypes.int8), empty(out, groups), empty(1, inner)
    w = qs.cast(dtypes.float32).reshape(out, groups, inner // groups) * d.reshape(out, groups, 1)
    return (x.reshape(1, 1, groups, inner // groups) * w).sum((-2, -1))


@pytest.fixture(scope="module")
def host():
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to run rendered kernels on the host")
    from tinygrad import Tensor, Variable, dtypes

    def empty(*shape, dtype=dtypes.float32):
        return Tensor.empty(*shape, dtype=dtype).realize()
    f = empty(70001)
    v = Variable("w", 1, 3000).bind(100)
    # NOTE: the elementwise kernels are rendered as loops (grid=False): the renderer's plan for them is tested here,
    # the linearizer's grid in test_gpu_codegen.py
    cases = {
        "add": _render_all(empty(1003) + empty(1003), grid=False),
        "strided": _render_all(empty(2001)[::2] * 2, grid=False),
        "bcast": _render_all(empty(7, 301) + empty(301), grid=False),
        "flip": _render_all(empty(1003).flip(0) * 2, grid=False),
        "pad": _render_all(empty(1000).pad(((3, 5),)) + 1, grid=False),
        "sum": _render_all(f.sum()),
        "sum_off": _render_all(f[1:].sum()),
        "rows": _render_all(empty(40, 1001).sum(axis=1)),
        "rows_max": _render_all(empty(40, 1001).max(axis=1)),
        "half_sum": _render_all(empty(70001, dtype=dtypes.float16).sum()),
        "int_sum": _render_all(empty(70001, dtype=dtypes.int32).sum()),
        "int8_add": _render_all(empty(1003, dtype=dtypes.int8) + 3, grid=False),
        "double_max": _render_all(empty(70001, dtype=dtypes.float64).max()),
        "symbolic": _render_all(empty(3000).shrink(((0, v),)) * 2, grid=False),
        "rows_long": _render_all(empty(40, 4001).sum(axis=1)),
        "sum_long": _render_all(empty(1 << 22).sum()),
        "qmatvec": _render_all(_qmatvec(empty, 300, 640, 20)),
        "qmatvec_many": _render_all(_qmatvec(empty, 20000, 256, 8)),
    }
    srcs = {k: s[-1] for k, s in cases.items()}
    # short rows get a warp each (shuffles, no shared memory), long ones a block; int8 weights move up to 16 at a
    # time, fewer where that fills the lanes of a row's last round better (640 of them: 40 vectors of 16 on 32
    # lanes, or 160 of 4; 256: 16 of 16, or 32 of 8)
    for k in ("rows", "qmatvec", "qmatvec_many"):
        assert "tg_red" not in srcs[k] and "__syncthreads" not in srcs[k], k
    assert "tg_red" in srcs["rows_long"]
    assert "tg_vec<signed char, 4>" in srcs["qmatvec"] and "tg_vec<signed char, 8>" in srcs["qmatvec_many"]
    # every case moves whole vectors, but a strided view keeps a thread per element
    assert all(("tg_vec<" in s) == (k != "strided") for k, s in srcs.items())
    return _host_kernels(srcs)


# launches: (grid, block); reductions need whole warps, elementwise kernels take any block
_LAUNCHES = [(1, 32), (3, 64), (5, 96)]


@pytest.mark.parametrize("misalign", [0, 1, 3])
@pytest.mark.parametrize("launch", _LAUNCHES + [(2, 33)])
def test_host_elementwise_vectors_tails_and_misaligned_pointers(host, misalign, launch):
    r = np.random.default_rng(misalign)
    a, b = r.standard_normal(1003).astype(np.float32), r.standard_normal(1003).astype(np.float32)
    out = _placed(np.full(1003, np.nan, np.float32), misalign)
    host["add"](*launch, [out, _placed(a, misalign), _placed(b)])
    np.testing.assert_array_equal(out, a + b)  # every element written once, vector lanes and tail alike
    x = r.integers(-100, 100, 1003).astype(np.int8)
    out = _placed(np.zeros(1003, np.int8), misalign)
    host["int8_add"](*launch, [out, _placed(x, misalign)])  # 16 lanes a vector
    np.testing.assert_array_equal(out, x + 3)


@pytest.mark.parametrize("launch", _LAUNCHES)
def test_host_views_broadcast_and_symbolic_sizes(host, launch):
    r = np.random.default_rng(1)
    a = r.standard_normal(2001).astype(np.float32)
    out = _placed(np.full(1001, np.nan, np.float32))
    host["strided"](*launch, [out, _placed(a)])
    np.testing.assert_array_equal(out, a[::2] * 2)
    m, row = r.standard_normal((7, 301)).astype(np.float32), r.standard_normal(301).astype(np.float32)
    out = _placed(np.full(7 * 301, np.nan, np.float32))
    host["bcast"](*launch, [out, _placed(m), _placed(row)])
    np.testing.assert_array_equal(out.reshape(7, 301), m + row)
    f = r.standard_normal(1003).astype(np.float32)
    out = _placed(np.full(1003, np.nan, np.float32))
    host["flip"](*launch, [out, _placed(f)])  # read one at a time, backwards; written a vector at a time
    np.testing.assert_array_equal(out, f[::-1] * 2)
    out = _placed(np.full(1008, np.nan, np.float32))
    host["pad"](*launch, [out, _placed(f[:1000])])  # gated reads stay in the body
    np.testing.assert_array_equal(out, np.pad(f[:1000], (3, 5)) + 1)
    s = _placed(r.standard_normal(3000).astype(np.float32))
    for w in (1, 7, 100, 2999):
        out = _placed(np.full(3000, np.nan, np.float32))
        host["symbolic"](*launch, [out, s], (w,))
        np.testing.assert_array_equal(out[:w], s[:w] * 2)
        assert np.isnan(out[w:]).all()


@pytest.mark.parametrize("launch", _LAUNCHES + [(20, 64)])  # 20 blocks: more than the 17 partial slots written
def test_host_grid_reduction_any_launch(host, launch):
    r = np.random.default_rng(2)
    a = r.random(70001).astype(np.float32)
    out = _placed(np.zeros(1, np.float32))
    for misalign in (0, 1, 3):  # the view a[1:] is aligned where the buffer starts 3 elements past a boundary
        host["sum"](*launch, [out, _placed(a, misalign)])
        np.testing.assert_allclose(out[0], a.astype(np.float64).sum(), rtol=1e-5)
        host["sum_off"](*launch, [out, _placed(a, misalign)])
        np.testing.assert_allclose(out[0], a[1:].astype(np.float64).sum(), rtol=1e-5)
    h = (r.random(70001) * 0.01).astype(np.float16)
    out = _placed(np.zeros(1, np.float16))
    host["half_sum"](*launch, [out, _placed(h, 5)])  # 8 lanes a vector, accumulated in float
    np.testing.assert_allclose(float(out[0]), h.astype(np.float64).sum(), rtol=1e-3)
    i = r.integers(-1000, 1000, 70001).astype(np.int32)
    out = _placed(np.zeros(1, np.int64))
    host["int_sum"](*launch, [out, _placed(i, 2)])
    assert out[0] == i.astype(np.int64).sum()
    d = r.standard_normal(70001)
    d[12345] = 40.0
    out = _placed(np.zeros(1, np.float64))
    host["double_max"](*launch, [out, _placed(d, 1)])
    assert out[0] == 40.0


@pytest.mark.parametrize("launch", [(1, 32), (2, 64)])
def test_host_long_sum_stays_within_a_few_ulp(host, launch):
    # 2**22 elements on 32 or 128 threads: each thread takes 2**15 or more of them, folded into its accumulator
    # every SUM_BLOCK additions (codegen/accumulate.py), so the error is a few ulp per level, not per element
    # values near 0.1: a running sum rounds each one the same way, so an unblocked thread drifts by 1e-4 of the sum
    a = (np.float32(0.1) + np.random.default_rng(4).random(1 << 22).astype(np.float32) * np.float32(1e-3))
    out = _placed(np.zeros(1, np.float32))
    host["sum_long"](*launch, [out, _placed(a)])
    exact = a.astype(np.float64).sum()
    assert abs(float(out[0]) - exact) <= 24 * float(np.finfo(np.float32).eps) * exact


@pytest.mark.parametrize("launch", _LAUNCHES)
def test_host_block_per_row_reduction(host, launch):
    # rows of 1001 floats: every row starts at another alignment, so rows take the vector and the scalar paths
    r = np.random.default_rng(3)
    m = r.standard_normal((40, 1001)).astype(np.float32)
    m[7, 500] = np.nan
    out = _placed(np.zeros(40, np.float32))
    host["rows"](*launch, [out, _placed(m)])
    np.testing.assert_allclose(out, m.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4)
    host["rows_max"](*launch, [out, _placed(m)])
    np.testing.assert_array_equal(out, m.max(axis=1))  # the NaN row is NaN, as numpy's max


@pytest.mark.parametrize("launch", _LAUNCHES + [(2, 256)])
def test_host_warp_per_row_quantized_matvec(host, launch):
    # int8 weights in 16-lane vectors beside 16 floats of x (four 16-byte loads), a scale per group of each row;
    # x misaligned takes the scalar path; 20,000 rows (more than a block per row would take) also get a warp each
    r = np.random.default_rng(4)
    for (out, inner, groups), case in (((300, 640, 20), "qmatvec"), ((20000, 256, 8), "qmatvec_many")):
        qs = r.integers(-128, 128, (out, inner)).astype(np.int8)
        d = r.random((out, groups)).astype(np.float32)
        w = (qs.astype(np.float64).reshape(out, groups, -1) * d[:, :, None]).reshape(out, inner)
        for misalign in (0, 1):
            x = r.standard_normal(inner).astype(np.float32)
            y = _placed(np.full(out, np.nan, np.float32))
            host[case](*launch, [y, _placed(x, misalign), _placed(d), _placed(qs)])
            np.testing.assert_allclose(y, w @ x, rtol=1e-4, atol=1e-3)
    m = r.standard_normal((40, 4001)).astype(np.float32)
    y = _placed(np.zeros(40, np.float32))
    host["rows_long"](*launch, [y, _placed(m)])
    np.testing.assert_allclose(y, m.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4)
