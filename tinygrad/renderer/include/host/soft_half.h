static inline float tg_f16_to_f32(unsigned short h) {
  union { unsigned int u; float f; } c;
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16, exp = ((unsigned int)h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  /* zero or subnormal: man * 2^-24, exact in float */
    c.f = (float)man * 5.9604644775390625e-8f; c.u |= sign; return c.f;
  }
  c.u = sign | (exp == 0x1fu ? 0x7f800000u : (exp + 112u) << 23) | (man << 13);  /* inf/nan keep the payload */
  return c.f;
}
static inline unsigned short tg_f32_to_f16(float f) {
  union { float f; unsigned int u; } c; c.f = f;
  unsigned int sign = (c.u >> 16) & 0x8000u, a = c.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* nan stays a quiet nan */
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  /* from 65520 (the tie above 65504) on: inf */
  if (a >= 0x38800000u) {  /* a normal half: rebias the exponent, round the 13 dropped bits to nearest even */
    unsigned int h = a - 0x38000000u;
    return (unsigned short)(sign | ((h + 0xfffu + ((h >> 13) & 1u)) >> 13));
  }
  unsigned int e = a >> 23;  /* a subnormal half (or zero): round m * 2^(e-126) to an integer, nearest even */
  if (e < 102u) return (unsigned short)sign;
  unsigned int m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e, q = m >> shift;
  unsigned int rem = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
  if (rem > tie || (rem == tie && (q & 1u))) q++;
  return (unsigned short)(sign | q);
}
static inline float tg_f16_round(float f) {  /* tg_f16_to_f32(tg_f32_to_f16(f)) without branches */
  union { float f; unsigned int u; } c; c.f = f;
  c.u = (c.u + 0xfffu + ((c.u >> 13) & 1u)) & ~0x1fffu;  /* normal: 10 mantissa bits, nearest even */
  float a = __builtin_fabsf(f), sub = __builtin_copysignf((a + 0.5f) - 0.5f, f);  /* subnormal: n * 2^-24 */
  float r = a < 6.103515625e-05f ? sub : c.f;
  r = __builtin_fabsf(r) > 65504.0f ? __builtin_copysignf(__builtin_inff(), f) : r;
  return f != f ? f : r;
}
static inline float tg_f16_from_f64(double d) {
  union { float f; unsigned int u; } c; c.f = (float)d;
  if ((double)c.f != d && d == d && !(c.u & 1u)) {  /* inexact and even: the neighbour on d's side is odd */
    if (__builtin_fabs((double)c.f) > __builtin_fabs(d)) c.u--; else c.u++;
  }
  return tg_f16_round(c.f);
}
#define tg_f16_cast(x) _Generic((x), double: tg_f16_from_f64, default: tg_f16_round)(x)
