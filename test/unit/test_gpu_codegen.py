"""The linearizer's GPU path (output dims on the grid, SPECIAL uops, guards) and its optimisations, checked by running
the rendered CUDA kernels on the host: the host C++ compiler builds them with a shim in which blockIdx/threadIdx are
globals and a launch is a loop over every block and thread (x fastest), or one std::thread per thread of a block
where the kernel has barriers. Results are compared with numpy (and, for optimised kernels, with the same kernel
unoptimised), over odd sizes, sizes that no block or tile divides, size-1 dims and symbolic dims."""
import ctypes
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrad import Tensor, Variable, dtypes
from tinygrad.codegen.gpu_dims import CUDA_GLOBAL_MAX, CUDA_LOCAL_MAX, plan_grid
from tinygrad.codegen.kernel import LinearizerOptions, Opt, OptOps
from tinygrad.codegen.linearizer import Linearizer
from tinygrad.codegen.uops import UOps
from tinygrad.engine.schedule import create_schedule_with_vars
from tinygrad.helpers import Context
from tinygrad.ops import BufferOps
from tinygrad.renderer.cuda import (
    _MMA_TYPES,
    _WGMMA_TYPES,
    HALF_PRELUDE,
    MMA_FN,
    MMA_PRELUDE,
    TMA_PRELUDE,
    WGMMA_PRELUDE,
    WGMMA_SIZES,
    CUDALanguage,
    CUDARenderer,
    wgmma_fn,
)
from tinygrad.renderer.gpu import DYNAMIC_SHARED, VEC_PRELUDE
from tinygrad.shape.symbolic import sym_infer

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run rendered kernels on the host")

CUDA = LinearizerOptions("CUDA", has_local=True, has_shared=True, supports_upcast=True, max_vector_bytes=16,
                         global_max=CUDA_GLOBAL_MAX, local_max=CUDA_LOCAL_MAX)

_SHIM = r"""
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <math.h>
#include <pthread.h>
#include <thread>
#include <vector>
struct tg_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local tg_dim3 threadIdx, blockIdx;
static tg_dim3 gridDim, blockDim;
static pthread_barrier_t tg_block_bar, tg_wg_bar;
static unsigned tg_producers = 0;  // threads at the end of the block that never multiply (a TMA producer warp)
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
static void __syncthreads() { pthread_barrier_wait(&tg_block_bar); }
static float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static float tg_f16_to_f32(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static unsigned short tg_f32_to_f16(float f) { _Float16 x = (_Float16)f; unsigned short h; std::memcpy(&h, &x, 2);
  return h; }
static float tg_f16_round(float f) { return tg_f16_to_f32(tg_f32_to_f16(f)); }
// every block in turn; its threads one after another, or (with barriers) all at once
static void tg_run(const unsigned* g, const unsigned* l, bool together, void (*thread)(void**, const int*),
                   void** ptrs, const int* ints) {
  gridDim.x = g[0]; gridDim.y = g[1]; gridDim.z = g[2];
  blockDim.x = l[0]; blockDim.y = l[1]; blockDim.z = l[2];
  unsigned n = l[0] * l[1] * l[2];
  if (together) pthread_barrier_init(&tg_block_bar, nullptr, n);
  if (together) pthread_barrier_init(&tg_wg_bar, nullptr, n - tg_producers);
  for (unsigned bz = 0; bz < g[2]; bz++) for (unsigned by = 0; by < g[1]; by++) for (unsigned bx = 0; bx < g[0]; bx++) {
    tg_dim3 b; b.x = bx; b.y = by; b.z = bz;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; t++) {
      tg_dim3 th; th.x = t % l[0]; th.y = (t / l[0]) % l[1]; th.z = t / (l[0] * l[1]);
      auto body = [=] { blockIdx = b; threadIdx = th; thread(ptrs, ints); };
      if (together) threads.emplace_back(body); else body();
    }
    for (auto& t : threads) t.join();
  }
  if (together) pthread_barrier_destroy(&tg_block_bar);
  if (together) pthread_barrier_destroy(&tg_wg_bar);
}
"""


class Kernel:
    """A kernel linearized for CUDA: its Linearizer, ProgramSpec, source, and the buffers of its schedule item."""

    def __init__(self, out: Tensor, opts: list | None = None, lopts: LinearizerOptions = CUDA):
        items = [si for si in create_schedule_with_vars([out.lazydata])[0] if si.ast[0].op is BufferOps.STORE]
        assert len(items) == 1, "the expressions tested here are one kernel each"
        self.si = items[0]
        self.lin = Linearizer(self.si.ast, lopts)
        if opts is not None:
            # exactly these optimisations (none for []): the heuristic does not run
            for o in opts:
                self.lin.apply_opt(o)
            with Context(NOOPT=1):
                self.lin.linearize()
        self.lin.linearize()
        self.spec = CUDARenderer(self.lin.name, self.lin.uops)
        self.src = self.spec.src

    def launch(self, var_vals: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
        gs = tuple(sym_infer(g, var_vals) for g in self.lin.global_size)
        ls = tuple(self.lin.local_size)
        assert all(1 <= g <= m for g, m in zip(gs, CUDA_GLOBAL_MAX)), gs
        assert all(1 <= lc <= m for lc, m in zip(ls, CUDA_LOCAL_MAX)) and math.prod(ls) <= 1024, ls
        m = re.search(r"__launch_bounds__\((\d+)\)", self.src)
        assert m is None or int(m.group(1)) >= math.prod(ls), "a block larger than the kernel's launch bounds"
        return gs, ls


# tensor cores on the host: each thread of a warp leaves its part (a fragment, or a row address for ldmatrix) in the
# warp's slots, and after a barrier takes what it gets from the whole warp's (a kernel calls them in every thread)
_MMA_EMU = r"""
static unsigned short tg_mma_a[32][32][8], tg_mma_b[32][32][4];
static const unsigned short* tg_ldsm_rows[32][32];
static unsigned tg_warp_lane(unsigned* lane) {
  unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  *lane = tid % 32;
  return tid / 32;
}
template <int N, bool T> static tg_vec<unsigned short, 2 * N> tg_ldsm(const void* p) {
  unsigned l, w = tg_warp_lane(&l);
  tg_ldsm_rows[w][l] = (const unsigned short*)p;
  __syncthreads();
  tg_vec<unsigned short, 2 * N> out;
  for (int m = 0; m < N; m++)
    for (int e = 0; e < 2; e++)
      out.e[2 * m + e] = T ? tg_ldsm_rows[w][8 * m + 2 * (l % 4) + e][l / 4]
                           : tg_ldsm_rows[w][8 * m + l / 4][2 * (l % 4) + e];
  __syncthreads();
  return out;
}
#define tg_ldsm_x4 tg_ldsm<4, false>
#define tg_ldsm_x4_t tg_ldsm<4, true>
#define tg_ldsm_x2 tg_ldsm<2, false>
#define tg_ldsm_x2_t tg_ldsm<2, true>
static float tg_mma_f16(unsigned short h) { return tg_f16_to_f32(h); }
static float tg_mma_bf16(unsigned short b) { unsigned u = (unsigned)b << 16; float f; std::memcpy(&f, &u, 4);
  return f; }
template <float (*CVT)(unsigned short), int P, int W>
static tg_vec<float, 4> tg_mma_emu(tg_vec<unsigned short, 8> a, tg_vec<unsigned short, W> b, tg_vec<float, 4> c) {
  unsigned l, w = tg_warp_lane(&l);
  for (int i = 0; i < 8; i++) tg_mma_a[w][l][i] = a.e[i];
  for (int i = 0; i < 4; i++) tg_mma_b[w][l][i] = b.e[4 * P + i];
  __syncthreads();
  unsigned g = l / 4, t = l % 4;
  for (int e = 0; e < 4; e++) {
    unsigned row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float s = 0;
    for (int k = 0; k < 16; k++)
      s += CVT(tg_mma_a[w][4 * (row % 8) + (k % 8) / 2][((row >= 8) + 2 * (k >= 8)) * 2 + k % 2]) *
           CVT(tg_mma_b[w][4 * col + (k % 8) / 2][(k >= 8) * 2 + k % 2]);
    c.e[e] += s;
  }
  __syncthreads();
  return c;
}
static void tg_cp_async16(void* d, const void* s, bool valid) {
  if (valid) std::memcpy(d, s, 16); else std::memset(d, 0, 16);
}
static void tg_cp_async_commit() {}
template <int N> static void tg_cp_async_wait() {}
template <int P, int W> static tg_vec<float, 4> tg_mma_m16n8k16_f16(tg_vec<unsigned short, 8> a,
    tg_vec<unsigned short, W> b, tg_vec<float, 4> c) { return tg_mma_emu<tg_mma_f16, P, W>(a, b, c); }
template <int P, int W> static tg_vec<float, 4> tg_mma_m16n8k16_bf16(tg_vec<unsigned short, 8> a,
    tg_vec<unsigned short, W> b, tg_vec<float, 4> c) { return tg_mma_emu<tg_mma_bf16, P, W>(a, b, c); }
// m16n8k8 TF32: lane 4g+t holds A (g, t), (g+8, t), (g, t+4), (g+8, t+4) and B (k t, n g), (k t+4, n g) as floats
// (two 16-bit halves each, low first), whose low 13 mantissa bits the tensor cores ignore
static unsigned tg_mma_a32[32][32][4], tg_mma_b32[32][32][2];
static float tg_tf32(unsigned u) { u &= 0xFFFFE000u; float f; std::memcpy(&f, &u, 4); return f; }
template <int P, int W> static tg_vec<float, 4> tg_mma_m16n8k8_tf32(tg_vec<unsigned short, 8> a,
    tg_vec<unsigned short, W> b, tg_vec<float, 4> c) {
  unsigned l, w = tg_warp_lane(&l);
  for (int i = 0; i < 4; i++) tg_mma_a32[w][l][i] = a.e[2 * i] | ((unsigned)a.e[2 * i + 1] << 16);
  for (int i = 0; i < 2; i++) tg_mma_b32[w][l][i] = b.e[4 * P + 2 * i] | ((unsigned)b.e[4 * P + 2 * i + 1] << 16);
  __syncthreads();
  unsigned g = l / 4, t = l % 4;
  for (int e = 0; e < 4; e++) {
    unsigned row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float s = 0;
    for (int k = 0; k < 8; k++)
      s += tg_tf32(tg_mma_a32[w][4 * (row % 8) + k % 4][(row >= 8) + 2 * (k >= 4)]) *
           tg_tf32(tg_mma_b32[w][4 * col + k % 4][k >= 4]);
    c.e[e] += s;
  }
  __syncthreads();
  return c;
}
// wgmma: each thread computes its own accumulators (rows 16w+g(+8), columns 8j+2q(+1) of its warpgroup's tile)
// from shared memory read as the hardware reads it: K-major rows of 128 bytes, or N-major atoms of 64 columns by 8
// rows of K (1024 bytes) ATOMS bytes apart along N, through the 128-byte swizzle of the address
static const unsigned short* tg_swz(const unsigned short* base, unsigned off) {
  unsigned long long a = (unsigned long long)base + off;
  return (const unsigned short*)(a ^ (((a >> 7) & 7) << 4));
}
template <float (*CVT)(unsigned short), int N, bool BK, int ATOMS>
static tg_vec<float, N / 2> tg_wgmma_emu(const unsigned short* a, const unsigned short* b, tg_vec<float, N / 2> c) {
  unsigned tid = threadIdx.x, w = (tid % 128) / 32, l = tid % 32, g = l / 4, q = l % 4;
  for (int i = 0; i < N / 2; i++) {
    unsigned row = 16 * w + g + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * q + i % 2;
    float s = 0;
    for (unsigned k = 0; k < 64; k++) {
      unsigned boff = BK ? col * 128 + k * 2 : (col / 64) * ATOMS + (k / 8) * 1024 + (k % 8) * 128 + (col % 64) * 2;
      s += CVT(*tg_swz(a, row * 128 + k * 2)) * CVT(*tg_swz(b, boff));
    }
    c.e[i] += s;
  }
  // the warp's lanes leave together (the instructions are .sync.aligned): a lane that frees the stage (TMA) speaks
  // for the whole warp (all the multiplying threads wait here: a producer warp never multiplies)
  pthread_barrier_wait(&tg_wg_bar);
  return c;
}
#define TG_WGMMA(N) \
  template <bool BK, int ATOMS, int WAIT> static tg_vec<float, N / 2> tg_wgmma_f16_n##N(const unsigned short* a, \
      const unsigned short* b, tg_vec<float, N / 2> c) { return tg_wgmma_emu<tg_mma_f16, N, BK, ATOMS>(a, b, c); } \
  template <bool BK, int ATOMS, int WAIT> static tg_vec<float, N / 2> tg_wgmma_bf16_n##N(const unsigned short* a, \
      const unsigned short* b, tg_vec<float, N / 2> c) { return tg_wgmma_emu<tg_mma_bf16, N, BK, ATOMS>(a, b, c); }
TG_WGMMA(64) TG_WGMMA(128) TG_WGMMA(256)
static void tg_fence_proxy_async() {}
template <int R> static tg_vec<float, R> tg_wgmma_wait_all(tg_vec<float, R> c) { return c; }
"""


# TMA on the host (blocks of one, no clusters): mbarriers as counters of arrivals and bytes with a phase, which
# threads wait on (the copies land at once, counting their bytes down); a tensor map as the box's geometry and the
# host address of its start; a copy writes the box row after row with the 128-byte swizzle, zeros out of bounds
_TMA_EMU = r"""
struct tg_tmap { const unsigned char* base; unsigned long long elem, swizzle, dims[2], stride, box[2]; };
struct tg_mbar_state { unsigned count, pending, phase; long long tx; };
static std::mutex tg_mbar_mu;
static std::condition_variable tg_mbar_cv;
static std::map<const void*, tg_mbar_state> tg_mbars;
static void tg_mbar_settle(tg_mbar_state& b) {
  if (b.pending == 0 && b.tx == 0) { b.phase++; b.pending = b.count; tg_mbar_cv.notify_all(); }
}
static void tg_mbar_init(unsigned long long* bar, unsigned count) {
  std::lock_guard<std::mutex> g(tg_mbar_mu); tg_mbars[bar] = tg_mbar_state{count, count, 0, 0};
}
static void tg_mbar_expect(unsigned long long* bar, unsigned bytes) {
  std::lock_guard<std::mutex> g(tg_mbar_mu); tg_mbar_state& b = tg_mbars.at(bar);
  b.tx += bytes; b.pending--; tg_mbar_settle(b);
}
static void tg_mbar_arrive(unsigned long long* bar) {
  std::lock_guard<std::mutex> g(tg_mbar_mu); tg_mbar_state& b = tg_mbars.at(bar);
  if (b.pending == 0) std::abort();  // more arrivals than the barrier counts
  b.pending--; tg_mbar_settle(b);
}
static void tg_mbar_wait(unsigned long long* bar, unsigned parity) {
  std::unique_lock<std::mutex> g(tg_mbar_mu);
  if (!tg_mbar_cv.wait_for(g, std::chrono::seconds(20), [&] { return (tg_mbars.at(bar).phase & 1) != parity; })) {
    tg_mbar_state& b = tg_mbars.at(bar);
    fprintf(stderr, "mbar wait timeout: thread %u bar %p parity %u phase %u pending %u tx %lld\n", threadIdx.x,
            (void*)bar, parity, b.phase, b.pending, b.tx);
    std::abort();
  }
}
static void tg_mbar_init_fence() {}
static unsigned tg_cluster_rank() { return 0; }
static void tg_cluster_sync() { __syncthreads(); }
static void tg_mbar_arrive_cluster(unsigned long long* bar, unsigned cta) {
  if (cta) std::abort();
  tg_mbar_arrive(bar);
}
static void tg_tma_2d(void* dst, const tg_tmap* m, int c0, int c1, unsigned long long* bar) {
  unsigned long long e = m->elem;
  for (unsigned long long y = 0; y < m->box[1]; y++)
    for (unsigned long long x = 0; x < m->box[0]; x++) {
      unsigned long long gx = c0 + x, gy = c1 + y, a = (unsigned long long)dst + (y * m->box[0] + x) * e;
      if (m->swizzle == 128) a ^= ((a >> 7) & 7) << 4;
      if (gx < m->dims[0] && gy < m->dims[1]) std::memcpy((void*)a, m->base + gy * m->stride + gx * e, e);
      else std::memset((void*)a, 0, e);
    }
  std::lock_guard<std::mutex> g(tg_mbar_mu); tg_mbar_state& b = tg_mbars.at(bar);
  b.tx -= (long long)(m->box[0] * m->box[1] * e); tg_mbar_settle(b);
}
static void tg_tma_2d_mc(void*, const tg_tmap*, int, int, unsigned long long*, unsigned short) { std::abort(); }
"""


class HostTensorMap(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("elem", ctypes.c_ulonglong), ("swizzle", ctypes.c_ulonglong),
                ("dims", ctypes.c_ulonglong * 2), ("stride", ctypes.c_ulonglong), ("box", ctypes.c_ulonglong * 2)]


def _emulate_mma(src: str) -> str:
    """`src` with its tensor-core functions replaced by the host emulation."""
    if "tg_smem_addr" not in src:
        return src
    src = src.replace(MMA_PRELUDE, "").replace(WGMMA_PRELUDE, "")
    if TMA_PRELUDE in src:
        # (the generic helpers, tg_tma_init and the rest, stay: they are written in terms of the emulated ones)
        keep = TMA_PRELUDE[TMA_PRELUDE.index("template <int S, int CLUSTER>"):]
        src = src.replace(TMA_PRELUDE, _TMA_EMU + keep)
    for name, (shape, ty) in _MMA_TYPES.items():
        src = src.replace(MMA_FN.substitute(name=name, shape=shape, ty=ty), "")
    for name, ty in _WGMMA_TYPES.items():
        for n in WGMMA_SIZES:
            src = src.replace(wgmma_fn(name, ty, n), "")
    return src.replace(VEC_PRELUDE, VEC_PRELUDE + _MMA_EMU)


def _compile(kernels: list[Kernel]) -> list:
    """One host library for all `kernels`: a launcher per kernel, (grid, block, arrays, ints) -> None."""
    parts = [_SHIM]
    for k, kern in enumerate(kernels):
        src = kern.src
        m = re.search(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(?:__cluster_dims__\([\d, ]+\) )?'
                      r'(\w+)\((.*)\) \{', src)
        args, nptr, nint, nmap = [], 0, 0, 0
        for p in [p.replace("__restrict__", "").rsplit(" ", 1)[0].strip() for p in m.group(2).split(", ")]:
            if p.endswith("tg_tmap"):
                # tensor maps come last, their host structures after the buffers' addresses (see _run)
                args.append(f"*(const tg_tmap*)ptrs[{nptr + nmap}]")
                nmap += 1
            elif p.endswith("*"):
                args.append(f"({p})ptrs[{nptr}]")
                nptr += 1
            else:
                args.append(f"ints[{nint}]")
                nint += 1
        body = _emulate_mma(src).replace(HALF_PRELUDE, "").replace(f" {m.group(1)}(", f" tg_kernel{k}(")
        body = body.replace('extern "C" ', "")
        # dynamic shared memory: an array of the size the launch would give (static: one block runs at a time)
        body = body.replace(CUDALanguage.dynamic_shared.format(DYNAMIC_SHARED),
                            f"static unsigned char {DYNAMIC_SHARED}[{kern.spec.dynamic_shared}] __align__(1024);")
        together = "true" if "__syncthreads" in src else "false"
        parts.append(f"namespace k{k} {{\n{body}\n"
                     f"static void thread(void** ptrs, const int* ints) {{ tg_kernel{k}({', '.join(args)}); }}\n}}\n"
                     f'extern "C" void tg_launch{k}(const unsigned* g, const unsigned* l, void** p, const int* i) '
                     f"{{ tg_producers = {32 if 'tg_tma_producer<' in src else 0}; "
                     f"tg_run(g, l, {together}, k{k}::thread, p, i); }}\n")
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
    launchers = []
    for k in range(len(kernels)):
        fn = getattr(lib, f"tg_launch{k}")
        fn.argtypes = [ctypes.c_void_p] * 4
        launchers.append(fn)
    return launchers


def _run(kernels: list[Kernel], var_vals: dict | None = None, launchers: list | None = None) -> list[np.ndarray]:
    """Run each kernel on the host on its schedule item's input buffers; its output buffer, as numpy. `launchers`:
    the kernels compiled already (by _compile)."""
    var_vals = var_vals or {}
    outs = []
    for kern, fn in zip(kernels, launchers or _compile(kernels)):
        gs, ls = kern.launch(var_vals)
        arrays = []
        for i, b in enumerate(kern.si.bufs):
            if i == 0:
                # NaN (or a marker) everywhere: an element no thread writes shows up
                fill = np.nan if dtypes.is_float(b.dtype) else 123
                arrays.append(np.full(b.size, fill, dtype=b.dtype.np))
            else:
                arrays.append(np.frombuffer(b.as_buffer(), dtype=b.dtype.np).copy())
        ints = [var_vals[v] for v in kern.lin.vars]
        maps = [HostTensorMap(arrays[t.arg].ctypes.data + t.offset, t.elem, t.swizzle, t.dims, t.strides[0], t.box)
                for t in kern.spec.tensor_maps]
        addrs = [a.ctypes.data for a in arrays] + [ctypes.addressof(tm) for tm in maps]
        ptrs = (ctypes.c_void_p * len(addrs))(*addrs)
        fn((ctypes.c_uint * 3)(*gs), (ctypes.c_uint * 3)(*ls), ptrs, (ctypes.c_int * max(1, len(ints)))(*ints))
        outs.append(arrays[0])
    return outs


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _t(a: np.ndarray) -> Tensor:
    return Tensor(a).realize()


# --- the grid: SPECIALs, guards and launch sizes ------------------------------------------------------------------


def test_elementwise_and_matmul_take_the_grid_with_launch_sizes_as_data():
    add = Kernel(_t(_rand(1000)) + _t(_rand(1000)), opts=[])
    assert add.lin.gpu and add.spec.launch is None
    assert add.lin.global_size == (4, 1, 1) and add.lin.local_size == (250, 1, 1)
    assert [u.arg[:2] for u in add.lin.uops if u.uop is UOps.SPECIAL] == [(0, "idx0")]
    assert not any(u.uop is UOps.LOOP for u in add.lin.uops)
    mm = Kernel(_t(_rand(64, 64)) @ _t(_rand(64, 64)))
    assert mm.lin.gpu and sum(u.uop is UOps.LOOP for u in mm.lin.uops) == 1  # only the reduce is a loop
    # memory-bound reductions stay with the renderer: a full sum, and rows read contiguously
    assert not Kernel(_t(_rand(70001)).sum()).lin.gpu
    assert not Kernel(_t(_rand(40, 1001)).sum(axis=1)).lin.gpu
    # a reduction over a strided dim with many outputs is a thread per output, reading coalesced
    assert Kernel(_t(_rand(300, 2000)).sum(axis=0)).lin.gpu


def test_grid_kernels_match_numpy():
    a, b, row, col = _rand(37, 53, seed=1), _rand(37, 53, seed=2), _rand(53, seed=3), _rand(37, 1, seed=4)
    m1, m2 = _rand(33, 65, seed=5), _rand(65, 17, seed=6)
    x, w = _rand(2, 3, 9, 11, seed=7), _rand(4, 3, 3, 3, seed=8)
    cases = [
        (_t(a) + _t(b), a + b),
        (_t(a) * _t(row) - _t(col), a * row - col),  # broadcasts along either dim
        (_t(a).permute(1, 0).exp2(), np.exp2(a.T)),
        (_t(a)[::2, 3:40:3] * 2, a[::2, 3:40:3] * 2),
        (_t(a).pad(((1, 2), (0, 3))) + 1, np.pad(a, ((1, 2), (0, 3))) + 1),
        (_t(_rand(1, 7, 1, 5)) * 3, _rand(1, 7, 1, 5) * 3),
        (_t(m1) @ _t(m2), m1 @ m2),
        (_t(_rand(1, 65, seed=9)) @ _t(m2), _rand(1, 65, seed=9) @ m2),
        (_t(_rand(300, 1500)).sum(axis=0), _rand(300, 1500).sum(axis=0)),
        (_t(_rand(2000, 3)).max(axis=1), _rand(2000, 3).max(axis=1)),
        (_t(x).conv2d(_t(w)), None),
    ]
    kernels = [Kernel(t) for t, _ in cases]
    assert [k.lin.name for k in kernels if not k.lin.gpu] == []
    outs = _run(kernels)
    conv = np.zeros((2, 4, 7, 9), np.float32)
    for i in range(7):
        for j in range(9):
            conv[:, :, i, j] = np.einsum("bchw,ochw->bo", x[:, :, i:i + 3, j:j + 3], w)
    for (_, want), got, k in zip(cases, outs, kernels):
        want = conv if want is None else want
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4, err_msg=k.src)


def test_symbolic_dims_evaluate_their_launch_per_call():
    n = Variable("n", 1, 3000)
    src = _rand(7, 3000, seed=11)
    k = Kernel(_t(src).shrink(((0, 7), (0, n.bind(100)))) * 2)
    assert any(not isinstance(g, int) for g in k.lin.global_size)
    launchers = _compile([k])
    for val in (1, 7, 250, 251, 2999):
        (out,) = _run([k], {n: val}, launchers)
        got = out[:7 * val].reshape(7, val)
        np.testing.assert_array_equal(got, src[:, :val] * 2)
        assert np.isnan(out[7 * val:]).all()


def test_guarded_threads_write_nothing_past_the_end():
    # 1000003 is prime: no block divides it, so the last block has threads past the end that must return
    a = _rand(1000003, seed=12)
    k = Kernel(_t(a) + 1)
    assert k.lin.global_size[0] * k.lin.local_size[0] > 1000003
    (out,) = _run([k])
    np.testing.assert_array_equal(out, a + 1)


def test_plan_grid_gives_asked_blocks_within_limits():
    assert plan_grid((64, 64), local={0: 16, 1: 16}).local_size == (16, 16, 1)
    assert plan_grid((64, 64), local={1: 2048}).local_size[0] == 1024  # clamped to the hardware's limit
    p = plan_grid((3, 5), local={0: 16, 1: 16})  # more threads than elements: guarded
    assert p.local_size == (16, 16, 1) and p.guarded == (True, True, False)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=4), st.dictionaries(st.integers(0, 3), st.integers(1, 40)))
def test_plan_grid_with_asked_blocks_covers_every_element_once(shape, local):
    from itertools import product
    plan = plan_grid(shape, local={a: n for a, n in local.items() if a < len(shape)})
    assert math.prod(plan.local_size) <= 1024
    seen = []
    for block in product(*[range(g) for g in plan.global_size]):
        for thread in product(*[range(lc) for lc in plan.local_size]):
            idx = plan.index(block, thread)
            if idx is not None:
                seen.append(idx + (0,) * (len(shape) - len(idx)))
    assert sorted(seen) == sorted(product(*[range(s) for s in shape]))


# --- optimisations on the grid ------------------------------------------------------------------------------------


def test_heuristic_tiles_matmul_in_registers_with_vector_loads():
    # a plain float32 matmul is staged in shared memory (SMEM, test_tensor_cores.py); one with an op fused into its
    # operand (A + 1) takes register tiles
    assert Kernel(_t(_rand(256, 128)) @ _t(_rand(128, 256))).lin.applied_opts[0].op is OptOps.SMEM
    k = Kernel((_t(_rand(256, 128)) + 1) @ _t(_rand(128, 256)))
    ops = {(o.op, o.axis): o.amt for o in k.lin.applied_opts}
    assert ops[(OptOps.VECTORIZE, 1)] == 4 and ops[(OptOps.UPCAST, 0)] == 8 and ops[(OptOps.UNROLL, 2)] == 16
    assert ops[(OptOps.LOCAL, 1)] == 16 and ops[(OptOps.LOCAL, 0)] == 16 and k.lin.local_size == (16, 16, 1)
    # a 8x4 tile a thread: 8 vector accumulators, B's rows as 16-byte loads shared by the 8 rows of A
    assert k.src.count("tg_vec<float, 4> acc") == 8 and "tg_vload<float, 4>(data" in k.src
    assert k.src.count("tg_vstore<float, 4>(data0+") == 8
    # a 3x3 convolution: the kernel's width unrolled whole, then its input channels
    x, w = _t(_rand(2, 16, 20, 20)), _t(_rand(32, 16, 3, 3))
    conv = {(o.op, o.axis): o.amt for o in Kernel(x.conv2d(w, padding=1)).lin.applied_opts}
    assert conv[(OptOps.UNROLL, 7)] == 3 and conv[(OptOps.UNROLL, 5)] == 4
    e = Kernel(_t(_rand(64, 1024)) * 2)
    assert e.lin.applied_opts == [Opt(OptOps.VECTORIZE, 1, 4)] and "tg_vload<float, 4>(data1+" in e.src
    assert Kernel(_t(_rand(63, 1023)) * 2).lin.applied_opts == []  # no vector divides the rows


def _opt_cases(draw_shape):
    """(tensor, numpy result) for a kernel kind and its sizes."""
    kind, a, b, c = draw_shape
    if kind == "elementwise":
        x, y = _rand(a, b, seed=a), _rand(1, b, seed=b)
        return _t(x) * _t(y) + 1, x * y + 1
    if kind == "matmul":
        x, y = _rand(a, c, seed=a), _rand(c, b, seed=b)
        return _t(x) @ _t(y), x @ y
    if kind == "batched":
        x, y = _rand(2, a, c, seed=a), _rand(2, c, b, seed=b)
        return _t(x) @ _t(y), x @ y
    x = _rand(c, a, b, seed=c)  # a strided reduction with many outputs: max over the outer dim
    return _t(x).max(axis=0), x.max(axis=0)


_OPS = [OptOps.UPCAST, OptOps.UNROLL, OptOps.VECTORIZE, OptOps.LOCAL, OptOps.GROUP]


def _draw_opts(data, lin_of) -> list[Opt]:
    """Up to 4 optimisations that fit the kernel, drawn one at a time (amounts among the divisors left)."""
    applied: list[Opt] = []
    for _ in range(data.draw(st.integers(0, 4))):
        lin = lin_of(applied)
        op = data.draw(st.sampled_from(_OPS))
        axis = data.draw(st.integers(0, len(lin.full_shape) - 1))
        left = lin.full_shape[axis] // lin.upcasts[axis]
        if op is OptOps.LOCAL:
            amt = data.draw(st.sampled_from([1, 2, 3, 8, 16, 32]))
        else:
            amt = data.draw(st.sampled_from([a for a in range(1, min(left, 8) + 1) if left % a == 0] + [0]))
        try:
            lin.apply_opt(Opt(op, axis, amt))
            applied.append(Opt(op, axis, amt))
        except ValueError:  # not this kernel's (a reduced axis upcast, a second vector axis...): drawn again
            pass
    return applied


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.tuples(st.sampled_from(["elementwise", "matmul", "batched", "maxcols"]), st.integers(1, 24),
                 st.integers(1, 40), st.integers(1, 20)), st.data())
def test_random_opts_match_numpy(shape, data):
    t, want = _opt_cases(shape)
    kernels = [Kernel(t, opts=[])]

    def lin_of(opts):
        lin = Linearizer(kernels[0].si.ast, CUDA)
        for o in opts:
            lin.apply_opt(o)
        return lin
    for _ in range(3):
        kernels.append(Kernel(t, opts=_draw_opts(data, lin_of)))
    kernels.append(Kernel(t))  # and the heuristic's choice
    for k, got in zip(kernels, _run(kernels)):
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{k.lin.applied_opts}\n{k.src}")


def test_opts_with_symbolic_dims_and_misaligned_vectors():
    n = Variable("n", 1, 64)
    x, y = _rand(64, 48, seed=21), _rand(48, 36, seed=22)
    mm = Kernel(_t(x).shrink(((0, n.bind(10)), (0, 48))) @ _t(y))
    assert mm.lin.applied_opts and mm.lin.gpu  # tiles on the int dims; the symbolic dim is the guarded grid
    launchers = _compile([mm])
    for val in (1, 5, 64):
        (out,) = _run([mm], {n: val}, launchers)
        np.testing.assert_allclose(out[:val * 36].reshape(val, 36), x[:val] @ y, rtol=1e-4, atol=1e-4)
    # rows that start 1 element past a vector boundary: wide accesses fall back to single elements
    a = _rand(8, 9, seed=23)
    k = Kernel(_t(a)[:, 1:] * 2, opts=[Opt(OptOps.VECTORIZE, 1, 4)])
    assert "tg_vload<float, 4>" in k.src
    (out,) = _run([k])
    np.testing.assert_array_equal(out.reshape(8, 8), a[:, 1:] * 2)


# --- GROUP: a reduction split across the threads of a block, combined through shared memory ------------------------


def test_grouptop_nolocals_and_padto_match_numpy():
    # GROUPTOP: each of a group's threads sums a run of consecutive steps (here of a column sum, strided); NOLOCALS:
    # blocks of one thread
    a, x, w = _rand(96, 40, seed=33), _rand(1, 256, seed=34), _rand(256, 1100, seed=35)
    top = Kernel(_t(a).sum(axis=0), opts=[Opt(OptOps.GROUPTOP, 0, 8)])
    top_mv = Kernel(_t(x) @ _t(w), opts=[Opt(OptOps.GROUPTOP, 2, 16), Opt(OptOps.LOCAL, 1, 8)])
    alone = Kernel(_t(x) @ _t(w), opts=[Opt(OptOps.NOLOCALS, 0, 0)])
    assert top.lin.group_top and top.lin.local_size[2] == 8 and alone.lin.local_size == (1, 1, 1)
    # the loop variable of a GROUPTOP thread starts at its run: group index times the steps of a run
    got = _run([top, top_mv, alone])
    np.testing.assert_allclose(got[0], a.sum(axis=0), rtol=1e-5, atol=1e-5)
    for g in got[1:]:
        np.testing.assert_allclose(g.reshape(1, 1100), x @ w, rtol=1e-4, atol=1e-4)
    # PADTO on the grid: 45 outputs a row padded to 48 and upcast by 4, the reduced 70 padded to 96 and unrolled
    m, k2 = _rand(33, 70, seed=36), _rand(70, 45, seed=37)
    pad = Kernel(_t(m) @ _t(k2), opts=[Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.PADTO, 2, 32),
                                       Opt(OptOps.UNROLL, 2, 8), Opt(OptOps.LOCAL, 1, 4)])
    got, = _run([pad])
    np.testing.assert_allclose(got.reshape(33, 45), m @ k2, rtol=1e-4, atol=1e-4)
    lin = Linearizer(top.si.ast, CUDA)
    lin.apply_opt(Opt(OptOps.NOLOCALS, 0, 0))
    for bad in (Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.GROUP, 0, 8), Opt(OptOps.NOLOCALS, 0, 0)):
        with pytest.raises(ValueError, match="NOLOCALS"):
            lin.apply_opt(bad)


def test_heuristic_groups_a_matvec_down_columns():
    x, w = _rand(1, 512, seed=31), _rand(512, 1100, seed=32)
    k = Kernel(_t(x) @ _t(w))
    assert k.lin.gpu and Opt(OptOps.GROUP, 2, 16) in k.lin.applied_opts
    # a thread per output (no tile: loads in flight are what count), 64 outputs of a block, 16 threads each
    assert not any(o.op in (OptOps.UPCAST, OptOps.VECTORIZE) for o in k.lin.applied_opts)
    assert k.lin.local_size == (64, 1, 16) and math.prod(k.lin.local_size) <= 1024
    # every thread reaches the barrier: guards are gates on the store, no early return
    assert "__syncthreads();" in k.src and "__shared__ __align__(16) float temp" in k.src and "return;" not in k.src
    (got,) = _run([k])
    np.testing.assert_allclose(got.reshape(1, 1100), x @ w, rtol=1e-4, atol=1e-4)


def test_no_group_on_a_device_without_shared_memory():
    import dataclasses
    x, w = _rand(1, 512, seed=31), _rand(512, 1100, seed=32)
    si = [si for si in create_schedule_with_vars([(_t(x) @ _t(w)).lazydata])[0] if si.ast[0].op is BufferOps.STORE][0]
    lin = Linearizer(si.ast, dataclasses.replace(CUDA, has_shared=False)).linearize()
    assert lin.gpu and not any(o.op is OptOps.GROUP for o in lin.applied_opts)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.integers(1, 7), st.integers(1, 37), st.sampled_from([2, 3, 4, 8]), st.sampled_from([1, 3, 16]),
       st.booleans(), st.booleans())
def test_group_with_other_opts_matches_numpy(m, n, group, local, vec, maxred):
    x, w = _rand(m, 48, seed=m), _rand(48, n, seed=n)
    t, want = (_t(x) @ _t(w), x @ w) if not maxred else (_t(w).max(axis=0), w.max(axis=0))
    raxis = 2 if not maxred else 0
    oaxis = 1 if not maxred else 1
    opts = [Opt(OptOps.UNROLL, raxis, 2), Opt(OptOps.GROUP, raxis, group), Opt(OptOps.LOCAL, oaxis, local)]
    if vec and n % 2 == 0:
        opts.insert(0, Opt(OptOps.VECTORIZE, oaxis, 2))
    if not maxred and m % 3 == 0:
        opts.insert(0, Opt(OptOps.UPCAST, 0, 3))
    kernels = [Kernel(t, opts=opts)]
    if not maxred:  # a symbolic number of rows: the grid's y extent is a variable
        v = Variable("m", 1, 7)
        kernels.append(Kernel(_t(_rand(7, 48, seed=m)).shrink(((0, v.bind(m)), (0, 48))) @ _t(w),
                              opts=[o for o in opts if o.axis != 0]))
    outs = _run(kernels[:1])
    np.testing.assert_allclose(outs[0].reshape(want.shape), want, rtol=1e-4, atol=1e-4, err_msg=kernels[0].src)
    if not maxred:
        (got,) = _run(kernels[1:], {v: m})
        np.testing.assert_allclose(got[:m * n].reshape(m, n), _rand(7, 48, seed=m)[:m] @ w, rtol=1e-4, atol=1e-4)


def test_group_needs_a_reduced_dim_that_it_divides():
    lin = Linearizer(Kernel(_t(_rand(30, 40)).sum(axis=0), opts=[]).si.ast, CUDA)
    with pytest.raises(ValueError):
        lin.apply_opt(Opt(OptOps.GROUP, 1, 2))  # an output dim
    with pytest.raises(ValueError):
        lin.apply_opt(Opt(OptOps.GROUP, 0, 7))  # 7 does not divide 30
    lin.apply_opt(Opt(OptOps.GROUP, 0, 5))
    with pytest.raises(ValueError):
        lin.apply_opt(Opt(OptOps.UNROLL, 0, 2))  # the grouped dim takes no more opts


def test_half_kernels_with_tiles_and_groups():
    # half buffers: float registers, vectors of float accumulators, half loads and stores one element at a time
    x, w = (_rand(64, 96) * 0.5).astype(np.float16), (_rand(96, 128, seed=3) * 0.5).astype(np.float16)
    xv, wv = _rand(1, 512, seed=5).astype(np.float16), _rand(512, 1100, seed=6).astype(np.float16)
    mm, mv = Kernel(_t(x) @ _t(w)), Kernel(_t(xv) @ _t(wv))
    assert any(o.op is OptOps.UPCAST for o in mm.lin.applied_opts)
    assert any(o.op is OptOps.GROUP for o in mv.lin.applied_opts)
    got_mm, got_mv = _run([mm, mv])
    for got, a, b in ((got_mm, x, w), (got_mv, xv, wv)):
        want = a.astype(np.float32) @ b.astype(np.float32)
        np.testing.assert_allclose(got.astype(np.float32).reshape(want.shape), want, rtol=5e-3, atol=0.1)


def test_warp_rows_take_the_vector_width_that_fills_their_lanes():
    from tinygrad.codegen.gpu_plan import _warp_width, vector_width
    assert vector_width(1) == 16 and vector_width(4) == 4 and vector_width(8) == 2
    # 640 int8: 40 vectors of 16 leave the second round of 32 lanes a quarter full; 160 of 4 fill five rounds
    assert _warp_width(640, 16, 32) == 4
    assert _warp_width(256, 16, 32) == 8     # 16 of 16 would leave half the lanes idle, 32 of 8 none
    assert _warp_width(1024, 16, 32) == 16   # already full: the widest of equals
    assert _warp_width(300, 4, 32) == 2      # 75 vectors of 4 (78% of three rounds), 150 of 2 (94%)
    assert _warp_width(640, 16, 64) == 4     # 64-lane wavefronts: 40 or 80 vectors fill 63%, 160 fill 83%


# --- half and bfloat16 as packed vectors of their bits (LinearizerOptions.half_vectors) ------------------------------


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_packed_halves_match_the_scalar_kernel_bit_for_bit(dt):
    # 16-byte loads and stores of 16-bit patterns, each lane converted on its own: the same bits as the scalar kernel,
    # for aligned rows, a view whose rows start off a 16-byte boundary (the runtime check takes the scalar path), a
    # padded (masked) input, a cast to float32 (4 lanes) and a row length 8 does not divide (no vectors at all)
    import dataclasses
    packed = dataclasses.replace(CUDA, half_vectors=True)
    rng = np.random.default_rng(3)
    a = _t(rng.standard_normal((16, 264)).astype(np.float32)).cast(dt).realize()
    b = _t(rng.standard_normal((16, 257)).astype(np.float32)).cast(dt).realize()
    exprs = [a.gelu(), a + 1, a.silu() * a, a[:, 1:257] * 2, a.pad(((0, 0), (8, 0))) + 3, a.float() * 0.5,
             b.sigmoid(), a.cast(dtypes.float32).cast(dt) - a]
    for e in exprs:
        k, k0 = Kernel(e, lopts=packed), Kernel(e)
        got, want = _run([k, k0])
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), k.src
    vec = Kernel(a + 1, lopts=packed)
    assert "tg_vload<unsigned short, 8>" in vec.src and "tg_vstore<unsigned short, 8>" in vec.src
    assert "tg_vload" not in Kernel(a + 1).src
