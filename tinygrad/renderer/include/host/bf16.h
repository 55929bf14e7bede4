static inline float tg_bf16_to_f32(unsigned short b) {
  union { unsigned int u; float f; } c; c.u = ((unsigned int)b) << 16; return c.f;
}
static inline unsigned short tg_f32_to_bf16(float f) {
  union { float f; unsigned int u; } c; c.f = f;
  if ((c.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((c.u >> 16) | 0x40u);
  return (unsigned short)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}
static inline float tg_bf16_round(float f) { return tg_bf16_to_f32(tg_f32_to_bf16(f)); }
