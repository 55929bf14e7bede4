struct __align__(64) tg_tmap { unsigned long long v[16]; };
__device__ __forceinline__ void tg_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(tg_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void tg_mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
      :: "r"(tg_smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tg_mbar_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(tg_smem_addr(bar)), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void tg_mbar_arrive(unsigned long long* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(tg_smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void tg_mbar_arrive_cluster(unsigned long long* bar, unsigned cta) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" :: "r"(tg_smem_addr(bar)), "r"(cta)
      : "memory");
}
__device__ __forceinline__ void tg_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ unsigned tg_cluster_rank() {
  unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}
__device__ __forceinline__ void tg_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
__device__ __forceinline__ void tg_tma_2d(void* dst, const tg_tmap* map, int c0, int c1, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];" :: "r"(tg_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(tg_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void tg_tma_2d_mc(void* dst, const tg_tmap* map, int c0, int c1, unsigned long long* bar,
    unsigned short mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%2, %3}], [%4], %5;"
      :: "r"(tg_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(tg_smem_addr(bar)), "h"(mask) : "memory");
}
template <int S, int CLUSTER> __device__ __forceinline__ void tg_tma_init(unsigned long long* bars, unsigned arrivals,
    int tid) {
  if (tid == 0) {
    for (int s = 0; s < S; s++) { tg_mbar_init(bars + s, 1); tg_mbar_init(bars + S + s, arrivals); }
    tg_mbar_init_fence();
  }
  if (CLUSTER > 1) tg_cluster_sync(); else __syncthreads();
}
// step j's slices into stage j % S: A's box at (K j*64, row), B's at (K, column) staged K-major, else its 64-column
// atoms at (column + 64 i, K), 4096 elements apart; in a cluster, this block's share of B into every block
template <int S, int SA, int SB, bool BK, int NB, int CLUSTER> __device__ __forceinline__ void tg_tma_produce(
    unsigned long long* bars, bool go, int j, unsigned short* sa, unsigned short* sb, const tg_tmap& ma,
    const tg_tmap& mb, int row, int col) {
  if (!go) return;
  const int s = j % S, k0 = j * 64;
  if (j >= S) tg_mbar_wait(bars + S + s, (j / S - 1) & 1);
  tg_mbar_expect(bars + s, (SA + SB) * 2);
  tg_tma_2d(sa + s * SA, &ma, k0, row, bars + s);
  unsigned short* b = sb + s * SB;
  if (CLUSTER == 1) {
    if (BK) tg_tma_2d(b, &mb, k0, col, bars + s);
    else for (int i = 0; i < NB; i++) tg_tma_2d(b + i * 4096, &mb, col + 64 * i, k0, bars + s);
  } else {
    const int r = (int)tg_cluster_rank();
    const unsigned short mask = (unsigned short)((1u << CLUSTER) - 1);
    if (BK) tg_tma_2d_mc(b + r * (SB / CLUSTER), &mb, k0, col + r * (SB / CLUSTER / 64), bars + s, mask);
    else for (int i = r * (NB / CLUSTER); i < (r + 1) * (NB / CLUSTER); i++)
      tg_tma_2d_mc(b + i * 4096, &mb, col + 64 * i, k0, bars + s, mask);
  }
}
// the producer warp's loop: every step's slices, in order, by its first thread
template <int S, int SA, int SB, bool BK, int NB, int STEPS, int CLUSTER> __device__ __forceinline__ void
tg_tma_producer(unsigned long long* bars, bool first, unsigned short* sa, unsigned short* sb, const tg_tmap& ma,
    const tg_tmap& mb, int row, int col) {
  if (first)
    for (int j = 0; j < STEPS; j++) tg_tma_produce<S, SA, SB, BK, NB, CLUSTER>(bars, true, j, sa, sb, ma, mb, row, col);
}
template <int S> __device__ __forceinline__ void tg_tma_wait(unsigned long long* bars, int k) {
  tg_mbar_wait(bars + k % S, (k / S) & 1);
}
template <int S, int CLUSTER> __device__ __forceinline__ void tg_tma_release(unsigned long long* bars, int k,
    bool go) {
  if (!go) return;
  if (CLUSTER == 1) tg_mbar_arrive(bars + S + k % S);
  else for (int c = 0; c < CLUSTER; c++) tg_mbar_arrive_cluster(bars + S + k % S, c);
}
template <int CLUSTER> __device__ __forceinline__ void tg_tma_exit() { if (CLUSTER > 1) tg_cluster_sync(); }
