#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#endif
// the hsa_kernel_dispatch_packet_t of this launch: workgroup sizes (u16) at byte 4, grid sizes in threads (u32) at 12
__device__ __forceinline__ unsigned tg_block_dim(int d) {
  return ((const unsigned short*)__builtin_amdgcn_dispatch_ptr())[2 + d];
}
__device__ __forceinline__ unsigned tg_grid_dim(int d) {
  return ((const unsigned*)__builtin_amdgcn_dispatch_ptr())[3 + d] / tg_block_dim(d);
}
__device__ __forceinline__ void tg_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ __forceinline__ float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
__device__ __forceinline__ unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
__device__ __forceinline__ double __longlong_as_double(long long v) { return __builtin_bit_cast(double, v); }
// `v` of the lane `s` further down the wavefront: ds_bpermute moves 32 bits from the lane its byte address names
template <class T> __device__ __forceinline__ T tg_shfl_down(T v, int s) {
  const int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  const int addr = (lane + s) << 2;
  union { T t; int i[(sizeof(T) + 3) / 4]; } u;
  for (unsigned k = 0; k < (sizeof(T) + 3) / 4; k++) u.i[k] = 0;
  u.t = v;
  for (unsigned k = 0; k < (sizeof(T) + 3) / 4; k++) u.i[k] = __builtin_amdgcn_ds_bpermute(addr, u.i[k]);
  return u.t;
}
