__device__ __forceinline__ unsigned long long tg_wgmma_desc(const void* p, unsigned lbo,
    unsigned sbo) {
  return (unsigned long long)((tg_smem_addr(p) & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
__device__ __forceinline__ void tg_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
template <int R> __device__ __forceinline__ tg_vec<float, R> tg_wgmma_wait_all(tg_vec<float, R> c) {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(c.e[i]) :: "memory");
  return c;
}
