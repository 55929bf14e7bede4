template <class T> __device__ __forceinline__ T tg_max(T a, T b) { return (a != a || a > b) ? a : b; }
