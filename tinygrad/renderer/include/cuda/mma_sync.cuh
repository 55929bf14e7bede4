template <int P, int W> __device__ __forceinline__ tg_vec<float, 4> tg_mma_${name}(
    tg_vec<unsigned short, 8> a, tg_vec<unsigned short, W> b, tg_vec<float, 4> c) {
  union { tg_vec<unsigned short, 8> v; unsigned int r[4]; } ua; ua.v = a;
  union { tg_vec<unsigned short, W> v; unsigned int r[W / 2]; } ub; ub.v = b;
  asm("mma.sync.aligned.${shape}.row.col.f32.${ty}.${ty}.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c.e[0]), "+f"(c.e[1]), "+f"(c.e[2]), "+f"(c.e[3])
      : "r"(ua.r[0]), "r"(ua.r[1]), "r"(ua.r[2]), "r"(ua.r[3]), "r"(ub.r[2 * P]), "r"(ub.r[2 * P + 1]));
  return c;
}
