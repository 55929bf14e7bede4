template <bool T> inline tg_vec<half, 2> tg_sg_load(const threadgroup half* p, ulong stride) {
  simdgroup_half8x8 m;
  simdgroup_load(m, p, stride, ulong2(0, 0), T);
  return tg_vec<half, 2>{{m.thread_elements()[0], m.thread_elements()[1]}};
}
inline tg_vec<float, 2> tg_sg_mma_f16(tg_vec<half, 2> a, tg_vec<half, 2> b, tg_vec<float, 2> c) {
  simdgroup_half8x8 ma, mb;
  simdgroup_float8x8 mc;
  for (int i = 0; i < 2; i++) {
    ma.thread_elements()[i] = a.e[i];
    mb.thread_elements()[i] = b.e[i];
    mc.thread_elements()[i] = c.e[i];
  }
  simdgroup_multiply_accumulate(mc, ma, mb, mc);
  return tg_vec<float, 2>{{mc.thread_elements()[0], mc.thread_elements()[1]}};
}
inline void tg_sg_store(threadgroup float* p, ulong stride, tg_vec<float, 2> c) {
  simdgroup_float8x8 m;
  m.thread_elements()[0] = c.e[0];
  m.thread_elements()[1] = c.e[1];
  simdgroup_store(m, p, stride, ulong2(0, 0), false);
}
