#define TG_VEC_OP(OP) template <class T, int W> __device__ __forceinline__ tg_vec<T, W> \
  operator OP(tg_vec<T, W> a, tg_vec<T, W> b) { \
    tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = a.e[i] OP b.e[i]; return r; \
  }
TG_VEC_OP(+) TG_VEC_OP(-) TG_VEC_OP(*) TG_VEC_OP(/)
template <class T, int W> __device__ __forceinline__ tg_vec<T, W> operator-(tg_vec<T, W> a) {
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = -a.e[i]; return r;
}
template <class T, int W> __device__ __forceinline__ tg_vec<T, W> tg_vmax(tg_vec<T, W> a, tg_vec<T, W> b) {
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = (a.e[i] != a.e[i] || a.e[i] > b.e[i]) ? a.e[i] : b.e[i];
  return r;
}
template <class T, int W> __device__ __forceinline__ tg_vec<T, W> tg_vload(const T* p) {
  if (((unsigned long long)p & (sizeof(T) * W - 1)) == 0) return *(const tg_vec<T, W>*)p;
  tg_vec<T, W> r; for (int i = 0; i < W; i++) r.e[i] = p[i]; return r;
}
template <class T, int W> __device__ __forceinline__ void tg_vstore(T* p, tg_vec<T, W> v) {
  if (((unsigned long long)p & (sizeof(T) * W - 1)) == 0) *(tg_vec<T, W>*)p = v;
  else for (int i = 0; i < W; i++) p[i] = v.e[i];
}
