__device__ __forceinline__ float tg_bf16_to_f32(unsigned short b) {
  return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short tg_f32_to_bf16(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // one instruction (sm_80 on), rounding to nearest even as below; a NaN becomes the canonical quiet NaN
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
__device__ __forceinline__ float tg_bf16_round(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
