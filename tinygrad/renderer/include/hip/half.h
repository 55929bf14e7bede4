__device__ __forceinline__ float tg_f16_to_f32(unsigned short h) {
  return (float)__builtin_bit_cast(_Float16, h);
}
__device__ __forceinline__ unsigned short tg_f32_to_f16(float f) {
  return __builtin_bit_cast(unsigned short, (_Float16)f);
}
__device__ __forceinline__ float tg_f16_round(float f) { return tg_f16_to_f32(tg_f32_to_f16(f)); }
