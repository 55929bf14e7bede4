template <class T> inline T tg_shfl_down(T v, ushort d) { return simd_shuffle_down(v, d); }
inline long tg_shfl_down(long v, ushort d) { return as_type<long>(simd_shuffle_down(as_type<uint2>(v), d)); }
inline ulong tg_shfl_down(ulong v, ushort d) { return as_type<ulong>(simd_shuffle_down(as_type<uint2>(v), d)); }
inline bool tg_shfl_down(bool v, ushort d) { return simd_shuffle_down((ushort)v, d) != 0; }
