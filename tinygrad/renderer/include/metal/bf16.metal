inline float tg_bf16_to_f32(ushort b) { return as_type<float>(((uint)b) << 16); }
inline ushort tg_f32_to_bf16(float f) {
  uint u = as_type<uint>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float tg_bf16_round(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
