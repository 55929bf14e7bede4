__device__ __forceinline__ unsigned int tg_smem_addr(const void* p) {
  unsigned int a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a;
}
#define TG_LDSM(NAME, N, SUFFIX) __device__ __forceinline__ tg_vec<unsigned short, 2 * N> NAME( \
    const void* p) { \
  union { tg_vec<unsigned short, 2 * N> v; unsigned int r[4]; } u; \
  if (N == 4) asm volatile("ldmatrix.sync.aligned.m8n8.x4" SUFFIX ".shared.b16 {%0,%1,%2,%3}, [%4];" \
      : "=r"(u.r[0]), "=r"(u.r[1]), "=r"(u.r[2]), "=r"(u.r[3]) : "r"(tg_smem_addr(p))); \
  else asm volatile("ldmatrix.sync.aligned.m8n8.x2" SUFFIX ".shared.b16 {%0,%1}, [%2];" \
      : "=r"(u.r[0]), "=r"(u.r[1]) : "r"(tg_smem_addr(p))); \
  return u.v; \
}
TG_LDSM(tg_ldsm_x4, 4, "") TG_LDSM(tg_ldsm_x4_t, 4, ".trans")
TG_LDSM(tg_ldsm_x2, 2, "") TG_LDSM(tg_ldsm_x2_t, 2, ".trans")
__device__ __forceinline__ void tg_cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
      :: "r"(tg_smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void tg_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tg_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
