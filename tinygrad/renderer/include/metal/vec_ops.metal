#define TG_VEC_OP(OP) template <class T, int W> inline tg_vec<T, W> operator OP(tg_vec<T, W> a, \
    tg_vec<T, W> b) { tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = a.e[i] OP b.e[i]; return r; }
TG_VEC_OP(+) TG_VEC_OP(-) TG_VEC_OP(*) TG_VEC_OP(/)
template <class T, int W> inline tg_vec<T, W> operator-(tg_vec<T, W> a) {
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = -a.e[i]; return r;
}
template <class T, int W> inline tg_vec<T, W> tg_vmax(tg_vec<T, W> a, tg_vec<T, W> b) {
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = (a.e[i] != a.e[i] || a.e[i] > b.e[i]) ? a.e[i] : b.e[i];
  return r;
}
// P: a pointer into any address space (device or threadgroup), deduced
template <class T, int W, class P> inline tg_vec<T, W> tg_vload(P p) {
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = p[i]; return r;
}
template <class T, int W, class P> inline void tg_vstore(P p, tg_vec<T, W> v) {
  for (int i = 0; i < W; i++) p[i] = v.e[i];
}
