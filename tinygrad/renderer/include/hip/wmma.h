#ifndef TG_HOST_WMMA
typedef _Float16 tg_half16 __attribute__((ext_vector_type(16)));
typedef __bf16 tg_bf16x16 __attribute__((ext_vector_type(16)));
typedef short tg_short16 __attribute__((ext_vector_type(16)));
typedef float tg_float8 __attribute__((ext_vector_type(8)));
__device__ __forceinline__ tg_vec<float, 8> tg_wmma_f16(tg_vec<unsigned short, 16> a, tg_vec<unsigned short, 16> b,
    tg_vec<float, 8> c) {
  tg_float8 r = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(tg_half16, a),
      __builtin_bit_cast(tg_half16, b), __builtin_bit_cast(tg_float8, c));
  return __builtin_bit_cast(tg_vec<float, 8>, r);
}
__device__ __forceinline__ tg_vec<float, 8> tg_wmma_bf16(tg_vec<unsigned short, 16> a, tg_vec<unsigned short, 16> b,
    tg_vec<float, 8> c) {
  tg_float8 r = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(__builtin_bit_cast(tg_short16, a),
      __builtin_bit_cast(tg_short16, b), __builtin_bit_cast(tg_float8, c));
  return __builtin_bit_cast(tg_vec<float, 8>, r);
}
#endif
