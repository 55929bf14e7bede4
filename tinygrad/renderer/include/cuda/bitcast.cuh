template <class T, class F> __device__ __forceinline__ T tg_bitcast(F x) {
  static_assert(sizeof(T) == sizeof(F), "bitcast between types of different sizes");
  union { F f; T t; } u; u.f = x; return u.t;
}
