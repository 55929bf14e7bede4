// The host twin of a HIP kernel: what test/amd_twin.py force-includes (g++ -include) before the renderer's HIP
// source to compile it for the host, so the fake KFD (fake_kfd.cpp) can run the very kernel a GPU would.
//
// The renderer's HIP uses only clang builtins (renderer/hip.py); they are defined here as macros over a small
// workgroup scheduler. Workgroups run one after another; the work-items of a workgroup run one after another when
// the kernel never synchronises, else as fibers (ucontext) that switch at each barrier and at each cross-lane
// exchange (ds_bpermute, RDNA3's WMMA), which then waits for the lanes of its wavefront. Test-only: never shipped.
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tg_twin {

enum State { kRun, kBarrier, kWave, kDone };
struct Lane {
  unsigned id[3];
  unsigned flat;
  State state;
  ucontext_t ctx;
};

inline const void* g_packet = nullptr;
inline unsigned g_group[3], g_local[3];
inline unsigned g_wave = 32;
inline Lane* g_cur = nullptr;
inline std::vector<Lane>* g_lanes = nullptr;
inline ucontext_t g_sched;
inline void (*g_body)(void*) = nullptr;
inline void* g_ctx = nullptr;
inline int g_slots[1024];
inline char* g_stacks = nullptr;
constexpr size_t kStack = 256 * 1024;

inline unsigned lane() { return g_cur->flat % g_wave; }

inline void yield(State why) {
  Lane* me = g_cur;
  me->state = why;
  swapcontext(&me->ctx, &g_sched);
}
inline void block_barrier() {
  if (g_lanes != nullptr) yield(kBarrier);
}
inline int bpermute(int addr, int v) {
  if (g_lanes == nullptr) {
    std::fprintf(stderr, "hip_twin: ds_bpermute in a kernel run without fibers\n");
    std::abort();
  }
  const unsigned flat = g_cur->flat, base = flat - flat % g_wave;
  g_slots[flat] = v;
  yield(kWave);
  const unsigned src = base + (static_cast<unsigned>(addr) >> 2) % g_wave;
  const int r = src < g_lanes->size() ? g_slots[src] : v;
  yield(kWave);
  return r;
}

// v_wmma_f32_16x16x16_{f16,bf16} (wave32): every lane of the wavefront gives its A (row l % 16, K 0-15), its B
// (column l % 16) and its part of C (rows 2v + l / 16 of column l % 16); once all have, each lane computes its part of
// D from the others' operands. The hardware reads lanes 16-31 as repeats of lanes 0-15: a kernel whose halves differ
// relies on which half it reads, so the twin stops there.
inline const void* g_wmma[1024][3];
template <class V16, class V8, class F>
V8 wmma(const V16& a, const V16& b, const V8& c, F to_f32) {
  if (g_lanes == nullptr || g_wave != 32) {
    std::fprintf(stderr, "hip_twin: wave32 WMMA in a kernel run without fibers or on a wave64 target\n");
    std::abort();
  }
  const unsigned flat = g_cur->flat, base = flat - flat % g_wave, l = flat % g_wave;
  g_wmma[flat][0] = &a;
  g_wmma[flat][1] = &b;
  g_wmma[flat][2] = &c;
  yield(kWave);
  if (l < 16 && (std::memcmp(g_wmma[flat][0], g_wmma[flat + 16][0], sizeof(V16)) != 0 ||
                 std::memcmp(g_wmma[flat][1], g_wmma[flat + 16][1], sizeof(V16)) != 0)) {
    std::fprintf(stderr, "hip_twin: WMMA lanes %u and %u hold different A or B\n", l, l + 16);
    std::abort();
  }
  V8 d;
  for (unsigned v = 0; v < 8; ++v) {
    const unsigned row = 2 * v + l / 16, col = l % 16;
    const V16& ra = *static_cast<const V16*>(g_wmma[base + row][0]);
    const V16& cb = *static_cast<const V16*>(g_wmma[base + col][1]);
    float acc = c.e[v];
    for (int k = 0; k < 16; ++k) acc += to_f32(ra.e[k]) * to_f32(cb.e[k]);
    d.e[v] = acc;
  }
  yield(kWave);  // no lane leaves (and frees its operands) before every lane has read them
  return d;
}
inline float f16_bits(unsigned short h) {
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
inline float bf16_bits(unsigned short b) {
  const unsigned u = static_cast<unsigned>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void entry() {
  Lane* me = g_cur;
  g_body(g_ctx);
  me->state = kDone;
}

// Runs every lane of the current workgroup as a fiber until all are done.
inline void run_fibers(std::vector<Lane>& lanes) {
  if (g_stacks == nullptr) {
    void* p = mmap(nullptr, kStack * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    g_stacks = static_cast<char*>(p);
  }
  g_lanes = &lanes;
  for (size_t i = 0; i < lanes.size(); ++i) {
    getcontext(&lanes[i].ctx);
    lanes[i].ctx.uc_stack.ss_sp = g_stacks + i * kStack;
    lanes[i].ctx.uc_stack.ss_size = kStack;
    lanes[i].ctx.uc_link = &g_sched;
    makecontext(&lanes[i].ctx, entry, 0);
  }
  const size_t waves = (lanes.size() + g_wave - 1) / g_wave;
  for (;;) {
    for (Lane& l : lanes) {
      if (l.state != kRun) continue;
      g_cur = &l;
      swapcontext(&g_sched, &l.ctx);
    }
    bool all_done = true, released = false;
    for (size_t w = 0; w < waves; ++w) {
      bool any_wave = false, all_wave = true;
      for (size_t i = w * g_wave; i < lanes.size() && i < (w + 1) * g_wave; ++i) {
        if (lanes[i].state == kDone) continue;
        all_done = false;
        any_wave = any_wave || lanes[i].state == kWave;
        all_wave = all_wave && lanes[i].state == kWave;
      }
      if (any_wave && all_wave) {
        for (size_t i = w * g_wave; i < lanes.size() && i < (w + 1) * g_wave; ++i)
          if (lanes[i].state == kWave) lanes[i].state = kRun;
        released = true;
      }
    }
    if (all_done) break;
    if (released) continue;
    bool all_barrier = true;
    for (Lane& l : lanes) all_barrier = all_barrier && (l.state == kBarrier || l.state == kDone);
    if (!all_barrier) {
      std::fprintf(stderr, "hip_twin: work-items of a workgroup wait at different barriers (deadlock)\n");
      std::abort();
    }
    for (Lane& l : lanes)
      if (l.state == kBarrier) l.state = kRun;
  }
  g_lanes = nullptr;
}

// Runs `body` (one work-item's kernel call, reading its arguments from `ctx`) over the packet's grid.
inline void launch(const void* packet, void (*body)(void*), void* ctx, bool fibers, unsigned wave) {
  std::uint16_t wg[3];
  std::uint32_t grid[3];
  std::memcpy(wg, static_cast<const char*>(packet) + 4, sizeof(wg));
  std::memcpy(grid, static_cast<const char*>(packet) + 12, sizeof(grid));
  g_packet = packet;
  g_body = body;
  g_ctx = ctx;
  g_wave = wave;
  unsigned groups[3];
  for (int d = 0; d < 3; ++d) {
    g_local[d] = wg[d];
    groups[d] = (grid[d] + wg[d] - 1) / wg[d];
  }
  std::vector<Lane> lanes;
  for (unsigned gz = 0; gz < groups[2]; ++gz)
    for (unsigned gy = 0; gy < groups[1]; ++gy)
      for (unsigned gx = 0; gx < groups[0]; ++gx) {
        g_group[0] = gx;
        g_group[1] = gy;
        g_group[2] = gz;
        lanes.clear();
        // HSA: a partial last workgroup has only the work-items inside the grid
        for (unsigned z = 0; z < g_local[2] && gz * g_local[2] + z < grid[2]; ++z)
          for (unsigned y = 0; y < g_local[1] && gy * g_local[1] + y < grid[1]; ++y)
            for (unsigned x = 0; x < g_local[0] && gx * g_local[0] + x < grid[0]; ++x)
              lanes.push_back(Lane{{x, y, z}, x + g_local[0] * (y + g_local[1] * z), kRun, {}});
        if (fibers) {
          run_fibers(lanes);
        } else {
          for (Lane& l : lanes) {
            g_cur = &l;
            body(ctx);
          }
        }
      }
}

template <class T>
T arg(const void* kernargs, size_t offset) {
  T v;
  std::memcpy(&v, static_cast<const char*>(kernargs) + offset, sizeof(T));
  return v;
}

}  // namespace tg_twin

#define __device__
#define __shared__ static
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __builtin_amdgcn_workgroup_id_x() (tg_twin::g_group[0])
#define __builtin_amdgcn_workgroup_id_y() (tg_twin::g_group[1])
#define __builtin_amdgcn_workgroup_id_z() (tg_twin::g_group[2])
#define __builtin_amdgcn_workitem_id_x() (tg_twin::g_cur->id[0])
#define __builtin_amdgcn_workitem_id_y() (tg_twin::g_cur->id[1])
#define __builtin_amdgcn_workitem_id_z() (tg_twin::g_cur->id[2])
#define __builtin_amdgcn_dispatch_ptr() (tg_twin::g_packet)
#define __builtin_amdgcn_s_barrier() tg_twin::block_barrier()
#define __builtin_amdgcn_fence(order, scope) ((void)0)
#define __builtin_amdgcn_mbcnt_lo(mask, x) ((x) + (tg_twin::lane() < 32 ? tg_twin::lane() : 32u))
#define __builtin_amdgcn_mbcnt_hi(mask, x) ((x) + (tg_twin::lane() > 32 ? tg_twin::lane() - 32 : 0u))
#define __builtin_amdgcn_ds_bpermute(addr, v) tg_twin::bpermute((addr), (v))
// the renderer's WMMA functions (hip.WMMA_PRELUDE steps aside for these)
#define TG_HOST_WMMA 1
template <class V16, class V8>
inline V8 tg_wmma_f16(V16 a, V16 b, V8 c) { return tg_twin::wmma(a, b, c, tg_twin::f16_bits); }
template <class V16, class V8>
inline V8 tg_wmma_bf16(V16 a, V16 b, V8 c) { return tg_twin::wmma(a, b, c, tg_twin::bf16_bits); }
