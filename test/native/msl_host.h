// Metal Shading Language compiled for the host, for the fake Objective-C runtime (fake_metal_exec.cpp): MSL's types,
// address spaces, attributes and built-ins as plain C++17, and a threadgroup's threads run as fibers on one OS thread
// (ucontext), switching at barriers and SIMD shuffles, so kernels that cooperate through threadgroup memory run as
// they would on the GPU, deterministically. Included (-include) before the kernel source; the fake rewrites each
// declaration `threadgroup T x[N];` to `static T x[N];` (one array shared by the fibers of the threadgroup running).
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
struct uint3 {
  uint x, y, z;
};
struct uint2 {
  uint x, y;
};
struct ulong2 {
  ulong x, y;
  ulong2(ulong a = 0, ulong b = 0) : x(a), y(b) {}
};

// address spaces and the kernel qualifier mean nothing on the host
#define kernel
#define device
#define constant
#define threadgroup

namespace tg_host {

constexpr int kMaxThreads = 1024;
constexpr int kSimd = 32;
constexpr size_t kStack = 64 * 1024;

// One threadgroup being run: its threads as fibers, and the state of its barriers and shuffles.
struct Group {
  int n = 0;                 // threads in the threadgroup
  bool fibers = false;       // false: threads run one after another (a kernel without barriers or shuffles)
  int self = 0;              // the thread running now
  bool deadlock = false;     // a barrier some threads can never reach
  ucontext_t main;
  ucontext_t ctx[kMaxThreads];
  bool done[kMaxThreads];
  unsigned gen_block = 0;    // barrier generations: a waiting thread leaves when its barrier's generation moves on
  int arrived_block = 0;
  unsigned gen_simd[kMaxThreads / kSimd];
  int arrived_simd[kMaxThreads / kSimd];
  unsigned char lanes[kMaxThreads][8];
  const void* mats[kMaxThreads][3];  // simdgroup_multiply_accumulate's operands, by lane
  char* stacks = nullptr;
  void (*thread)(void**, uint3, uint3, uint3, uint3) = nullptr;
  void** bufs = nullptr;
  uint3 gid{}, bdim{}, gdim{};
};

inline Group g_group;

inline uint3 lid_of(int i) {
  Group& g = g_group;
  return {uint(i % g.bdim.x), uint(i / g.bdim.x % g.bdim.y), uint(i / (g.bdim.x * g.bdim.y))};
}

inline void yield() { swapcontext(&g_group.ctx[g_group.self], &g_group.main); }

// Waits until `size` threads have arrived at the barrier counted by (arrived, gen).
inline void wait_barrier(int& arrived, unsigned& gen, int size) {
  if (!g_group.fibers) return;
  unsigned mine = gen;
  if (++arrived == size) {
    arrived = 0;
    ++gen;
    return;
  }
  while (gen == mine && !g_group.deadlock) yield();
}

inline int simd_size(int simd) {
  int rest = g_group.n - simd * kSimd;
  return rest < kSimd ? rest : kSimd;
}

inline void fiber_main() {
  Group& g = g_group;
  int i = g.self;
  g.thread(g.bufs, g.gid, lid_of(i), g.bdim, g.gdim);
  g.done[i] = true;
}

// Runs every threadgroup of the grid; returns false where a threadgroup deadlocked at a barrier.
inline bool run_grid(void (*thread)(void**, uint3, uint3, uint3, uint3), void** bufs, const uint* grid,
                     const uint* block, bool fibers) {
  Group& g = g_group;
  g.thread = thread;
  g.bufs = bufs;
  g.bdim = {block[0], block[1], block[2]};
  g.gdim = {grid[0], grid[1], grid[2]};
  g.n = int(block[0] * block[1] * block[2]);
  g.fibers = fibers;
  g.deadlock = false;
  if (fibers && g.stacks == nullptr) g.stacks = static_cast<char*>(std::malloc(kStack * kMaxThreads));
  for (uint z = 0; z < grid[2]; ++z)
    for (uint y = 0; y < grid[1]; ++y)
      for (uint x = 0; x < grid[0]; ++x) {
        g.gid = {x, y, z};
        if (!fibers) {
          for (int i = 0; i < g.n; ++i) thread(bufs, g.gid, lid_of(i), g.bdim, g.gdim);
          continue;
        }
        g.gen_block = 0;
        g.arrived_block = 0;
        for (int s = 0; s < kMaxThreads / kSimd; ++s) g.gen_simd[s] = g.arrived_simd[s] = 0;
        for (int i = 0; i < g.n; ++i) {
          g.done[i] = false;
          getcontext(&g.ctx[i]);
          g.ctx[i].uc_stack.ss_sp = g.stacks + size_t(i) * kStack;
          g.ctx[i].uc_stack.ss_size = kStack;
          g.ctx[i].uc_link = &g.main;
          makecontext(&g.ctx[i], fiber_main, 0);
        }
        int left = g.n;
        while (left > 0) {
          unsigned before = g.gen_block;
          int finished = 0, simd_moves = 0;
          unsigned simd_before[kMaxThreads / kSimd];
          for (int s = 0; s < kMaxThreads / kSimd; ++s) simd_before[s] = g.gen_simd[s];
          for (int i = 0; i < g.n; ++i) {
            if (g.done[i]) continue;
            g.self = i;
            swapcontext(&g.main, &g.ctx[i]);
            if (g.done[i]) ++finished;
          }
          for (int s = 0; s < kMaxThreads / kSimd; ++s) simd_moves += g.gen_simd[s] != simd_before[s];
          left -= finished;
          if (left > 0 && finished == 0 && g.gen_block == before && simd_moves == 0) {
            // every live thread waits at a barrier that the finished ones will never reach: a GPU would hang
            g.deadlock = true;
            for (int i = 0; i < g.n; ++i)
              if (!g.done[i]) {
                g.self = i;
                swapcontext(&g.main, &g.ctx[i]);
              }
            return false;
          }
        }
      }
  return true;
}

}  // namespace tg_host

namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };

template <class T, class F>
inline T as_type(F f) {
  static_assert(sizeof(T) == sizeof(F), "as_type between types of different sizes");
  T t;
  std::memcpy(&t, &f, sizeof(T));
  return t;
}

using std::exp2;
using std::fmod;
using std::log2;
using std::sqrt;
namespace precise {
inline float sin(float x) { return std::sin(x); }
}  // namespace precise

inline void threadgroup_barrier(mem_flags) {
  tg_host::Group& g = tg_host::g_group;
  tg_host::wait_barrier(g.arrived_block, g.gen_block, g.n);
}

template <class T>
inline T simd_shuffle_down(T v, ushort delta) {
  static_assert(sizeof(T) <= 8, "a SIMD shuffle moves at most 8 bytes");
  tg_host::Group& g = tg_host::g_group;
  int i = g.self, simd = i / tg_host::kSimd, lane = i % tg_host::kSimd, size = tg_host::simd_size(simd);
  std::memcpy(g.lanes[i], &v, sizeof(T));
  tg_host::wait_barrier(g.arrived_simd[simd], g.gen_simd[simd], size);
  T out = v;
  if (lane + delta < size) std::memcpy(&out, g.lanes[i + delta], sizeof(T));
  tg_host::wait_barrier(g.arrived_simd[simd], g.gen_simd[simd], size);
  return out;
}

// simdgroup_matrix<T, 8, 8>: each lane holds thread_elements() = 2 of the 64 elements. Which two is the compiler's
// business (kernels move values in and out only by simdgroup_load and simdgroup_store); the host uses the spread
// reverse-engineered on Apple GPUs: lane l holds row 4 (l / 16) + (l / 2) % 4, columns 4 ((l / 8) % 2) + 2 (l % 2)
// and the next one. The multiply exchanges the operands across the SIMD group as the hardware does.
template <class T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the host implements 8x8 simdgroup matrices only");
  T e[2];
  T* thread_elements() { return e; }
  const T* thread_elements() const { return e; }
};
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;

inline int sg_lane() { return tg_host::g_group.self % tg_host::kSimd; }
inline int sg_row(int lane) { return 4 * (lane / 16) + (lane / 2) % 4; }
inline int sg_col(int lane) { return 4 * ((lane / 8) % 2) + 2 * (lane % 2); }
// the lane holding element (row, col), and which of its two it is
inline int sg_owner(int row, int col) { return 16 * (row / 4) + 2 * (row % 4) + 8 * (col / 4) + (col % 4) / 2; }

// element (row i, column j) of the matrix at `p` is p[i * stride + j], or p[j * stride + i] transposed
template <class T>
inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, const T* p, ulong stride, ulong2 origin = ulong2(),
                           bool transpose = false) {
  const int l = sg_lane();
  for (int k = 0; k < 2; ++k) {
    const ulong i = sg_row(l) + origin.y, j = sg_col(l) + k + origin.x;
    d.e[k] = transpose ? p[j * stride + i] : p[i * stride + j];
  }
}
template <class T>
inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& m, T* p, ulong stride, ulong2 origin = ulong2(),
                            bool transpose = false) {
  const int l = sg_lane();
  for (int k = 0; k < 2; ++k) {
    const ulong i = sg_row(l) + origin.y, j = sg_col(l) + k + origin.x;
    (transpose ? p[j * stride + i] : p[i * stride + j]) = m.e[k];
  }
}
// d = a * b + c over the SIMD group: every lane publishes its parts, then computes its two elements of d
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  tg_host::Group& g = tg_host::g_group;
  const int i = g.self, simd = i / tg_host::kSimd, l = i % tg_host::kSimd, size = tg_host::simd_size(simd);
  if (!g.fibers || size != tg_host::kSimd) {
    std::fprintf(stderr, "msl_host: simdgroup_multiply_accumulate outside a whole SIMD group of fibers\n");
    std::abort();
  }
  g.mats[i][0] = &a;
  g.mats[i][1] = &b;
  g.mats[i][2] = &c;
  tg_host::wait_barrier(g.arrived_simd[simd], g.gen_simd[simd], size);
  const int base = simd * tg_host::kSimd;
  TD out[2];
  for (int k = 0; k < 2; ++k) {
    const int row = sg_row(l), col = sg_col(l) + k;
    float acc = static_cast<float>(c.e[k]);
    for (int x = 0; x < 8; ++x) {
      const int oa = sg_owner(row, x), ob = sg_owner(x, col);
      const auto& ma = *static_cast<const simdgroup_matrix<TA, 8, 8>*>(g.mats[base + oa][0]);
      const auto& mb = *static_cast<const simdgroup_matrix<TB, 8, 8>*>(g.mats[base + ob][1]);
      acc += static_cast<float>(ma.e[x % 2]) * static_cast<float>(mb.e[col % 2]);
    }
    out[k] = static_cast<TD>(acc);
  }
  // no lane overwrites d (which may be its c) or leaves before every lane has read its operands
  tg_host::wait_barrier(g.arrived_simd[simd], g.gen_simd[simd], size);
  d.e[0] = out[0];
  d.e[1] = out[1];
}

}  // namespace metal
