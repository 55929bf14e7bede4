// Compile-time check of cuda_api.h against NVIDIA's own headers: every DriverApi slot must have the signature of the
// PFN typedef (cudaTypedefs.h) of the variant cuGetProcAddress returns at kPinnedCudaVersion, every constant its
// cuda.h value, and KernelNodeParams the layout of CUDA_KERNEL_NODE_PARAMS_v2. Not part of the module (which must
// build without a toolkit): test/unit/test_cuda_runtime.py compiles it with -fsyntax-only where a toolkit exists:
//   c++ -std=c++17 -fsyntax-only -I<cuda>/include -Iruntimes/cuda runtimes/cuda/abi_check.cpp
#include <cstddef>
#include <type_traits>

#include "cuda_api.h"

// (DriverApi slot, the PFN typedef suffix of the variant resolved at CUDA 12.0)
#define TG_ABI_SLOTS(X)                                                                                          \
  X(cuInit, cuInit_v2000)                                                                                        \
  X(cuDriverGetVersion, cuDriverGetVersion_v2020)                                                                \
  X(cuGetErrorName, cuGetErrorName_v6000)                                                                        \
  X(cuGetErrorString, cuGetErrorString_v6000)                                                                    \
  X(cuDeviceGetCount, cuDeviceGetCount_v2000)                                                                    \
  X(cuDeviceGet, cuDeviceGet_v2000)                                                                              \
  X(cuDeviceGetName, cuDeviceGetName_v2000)                                                                      \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute_v2000)                                                            \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v3020)                                                                    \
  X(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer_v4000)                                                          \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_v7000)                                                    \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v11000)                                                 \
  X(cuCtxGetCurrent, cuCtxGetCurrent_v4000)                                                                      \
  X(cuCtxSetCurrent, cuCtxSetCurrent_v4000)                                                                      \
  X(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess_v4000)                                                          \
  X(cuMemGetInfo, cuMemGetInfo_v3020)                                                                            \
  X(cuMemAlloc, cuMemAlloc_v3020)                                                                                \
  X(cuMemFree, cuMemFree_v3020)                                                                                  \
  X(cuMemHostAlloc, cuMemHostAlloc_v2020)                                                                        \
  X(cuMemFreeHost, cuMemFreeHost_v2000)                                                                          \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v3020)                                                                  \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v3020)                                                                  \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v3020)                                                                  \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync_v4000)                                                                  \
  X(cuModuleLoadData, cuModuleLoadData_v2000)                                                                    \
  X(cuModuleGetFunction, cuModuleGetFunction_v2000)                                                              \
  X(cuModuleUnload, cuModuleUnload_v2000)                                                                        \
  X(cuFuncGetAttribute, cuFuncGetAttribute_v2020)                                                                \
  X(cuFuncSetAttribute, cuFuncSetAttribute_v9000)                                                                \
  X(cuLaunchKernel, cuLaunchKernel_v4000)                                                                        \
  X(cuStreamCreate, cuStreamCreate_v2000)                                                                        \
  X(cuStreamDestroy, cuStreamDestroy_v4000)                                                                      \
  X(cuStreamSynchronize, cuStreamSynchronize_v2000)                                                              \
  X(cuStreamWaitEvent, cuStreamWaitEvent_v3020)                                                                  \
  X(cuEventCreate, cuEventCreate_v2000)                                                                          \
  X(cuEventDestroy, cuEventDestroy_v4000)                                                                        \
  X(cuEventRecord, cuEventRecord_v2000)                                                                          \
  X(cuEventQuery, cuEventQuery_v2000)                                                                            \
  X(cuEventSynchronize, cuEventSynchronize_v2000)                                                                \
  X(cuEventElapsedTime, cuEventElapsedTime_v2000)                                                                \
  X(cuGraphCreate, cuGraphCreate_v10000)                                                                         \
  X(cuGraphAddKernelNode, cuGraphAddKernelNode_v12000)                                                           \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags_v11040)                                             \
  X(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams_v12000)                                       \
  X(cuGraphLaunch, cuGraphLaunch_v10000)                                                                         \
  X(cuGraphExecDestroy, cuGraphExecDestroy_v10000)                                                               \
  X(cuGraphDestroy, cuGraphDestroy_v10000)                                                                       \
  X(cuStreamBeginCapture, cuStreamBeginCapture_v10010)                                                           \
  X(cuStreamEndCapture, cuStreamEndCapture_v10000)                                                               \
  X(cuGraphAddChildGraphNode, cuGraphAddChildGraphNode_v10000)                                                   \
  X(cuGraphExecChildGraphNodeSetParams, cuGraphExecChildGraphNodeSetParams_v11010)                               \
  X(cuFuncGetParamInfo, cuFuncGetParamInfo_v12040)                                                               \
  X(cuGraphAddDependencies, cuGraphAddDependencies_v12030)                                                       \
  X(cuTensorMapEncodeTiled, cuTensorMapEncodeTiled_v12000)

// The slot types, taken before cuda.h is included: its macros rename cuMemAlloc to cuMemAlloc_v2 and so on.
#define TG_ALIAS(member, pfn) using member##_t = decltype(tg::cuda::DriverApi::member);
namespace mine {
TG_ABI_SLOTS(TG_ALIAS)
using get_proc_address_t = tg::cuda::GetProcAddressFn;
inline void* const launch_param_end = tg::cuda::CU_LAUNCH_PARAM_END;
constexpr unsigned host_alloc_portable = tg::cuda::CU_MEMHOSTALLOC_PORTABLE;
}  // namespace mine
#undef TG_ALIAS

#include <cudaTypedefs.h>

// Signatures compared with enums replaced by their (signed) underlying type: cuda.h passes CUresult and attribute
// enums where cuda_api.h uses int, which is the same ABI.
template <class T, bool = std::is_enum_v<T>>
struct canon {
  using type = T;
};
template <class T>
struct canon<T, true> {
  using type = std::make_signed_t<std::underlying_type_t<T>>;
};
template <class T>
struct canon<T*, false> {
  using type = typename canon<T>::type*;
};
template <class T>
struct canon<const T, false> {
  using type = const typename canon<T>::type;
};
template <>
struct canon<CUDA_KERNEL_NODE_PARAMS_v2, false> {
  using type = tg::cuda::KernelNodeParams;
};
template <>
struct canon<CUgraphEdgeData, false> {
  using type = tg::cuda::GraphEdgeData;
};
template <>
struct canon<CUtensorMap, false> {
  using type = tg::cuda::TensorMap;
};
template <class R, class... A>
struct canon<R (*)(A...), false> {
  using type = typename canon<R>::type (*)(typename canon<A>::type...);
};
template <class A, class B>
constexpr bool same_abi = std::is_same_v<typename canon<A>::type, typename canon<B>::type>;

#define TG_CHECK_SLOT(member, pfn) \
  static_assert(same_abi<mine::member##_t, PFN_##pfn>, #member " does not have the signature of PFN_" #pfn);
TG_ABI_SLOTS(TG_CHECK_SLOT)
#undef TG_CHECK_SLOT
static_assert(same_abi<mine::get_proc_address_t, PFN_cuGetProcAddress_v12000>, "cuGetProcAddress_v2");

namespace t = tg::cuda;
static_assert(std::is_same_v<t::CUdeviceptr, CUdeviceptr>);
static_assert(std::is_same_v<t::CUdevice, CUdevice>);
static_assert(std::is_same_v<t::CUstream, CUstream> && std::is_same_v<t::CUgraphExec, CUgraphExec>);

static_assert(sizeof(t::GraphEdgeData) == sizeof(CUgraphEdgeData));
static_assert(offsetof(t::GraphEdgeData, from_port) == offsetof(CUgraphEdgeData, from_port));
static_assert(offsetof(t::GraphEdgeData, to_port) == offsetof(CUgraphEdgeData, to_port));
static_assert(offsetof(t::GraphEdgeData, type) == offsetof(CUgraphEdgeData, type));
static_assert(t::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC);
static_assert(t::kGraphKernelNodePortProgrammatic == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC);  // a macro there

static_assert(sizeof(t::TensorMap) == sizeof(CUtensorMap) && alignof(t::TensorMap) >= alignof(CUtensorMap));
static_assert(t::CU_TENSOR_MAP_DATA_TYPE_UINT8 == CU_TENSOR_MAP_DATA_TYPE_UINT8);
static_assert(t::CU_TENSOR_MAP_DATA_TYPE_UINT16 == CU_TENSOR_MAP_DATA_TYPE_UINT16);
static_assert(t::CU_TENSOR_MAP_DATA_TYPE_UINT32 == CU_TENSOR_MAP_DATA_TYPE_UINT32);
static_assert(t::CU_TENSOR_MAP_DATA_TYPE_UINT64 == CU_TENSOR_MAP_DATA_TYPE_UINT64);
static_assert(t::CU_TENSOR_MAP_INTERLEAVE_NONE == CU_TENSOR_MAP_INTERLEAVE_NONE);
static_assert(t::CU_TENSOR_MAP_SWIZZLE_NONE == CU_TENSOR_MAP_SWIZZLE_NONE);
static_assert(t::CU_TENSOR_MAP_SWIZZLE_32B == CU_TENSOR_MAP_SWIZZLE_32B);
static_assert(t::CU_TENSOR_MAP_SWIZZLE_64B == CU_TENSOR_MAP_SWIZZLE_64B);
static_assert(t::CU_TENSOR_MAP_SWIZZLE_128B == CU_TENSOR_MAP_SWIZZLE_128B);
static_assert(t::CU_TENSOR_MAP_L2_PROMOTION_L2_256B == CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
static_assert(t::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);

static_assert(sizeof(t::KernelNodeParams) == sizeof(CUDA_KERNEL_NODE_PARAMS_v2));
#define TG_CHECK_FIELD(f) \
  static_assert(offsetof(t::KernelNodeParams, f) == offsetof(CUDA_KERNEL_NODE_PARAMS_v2, f), "field " #f);
TG_CHECK_FIELD(func)
TG_CHECK_FIELD(gridDimX)
TG_CHECK_FIELD(gridDimZ)
TG_CHECK_FIELD(blockDimX)
TG_CHECK_FIELD(blockDimZ)
TG_CHECK_FIELD(sharedMemBytes)
TG_CHECK_FIELD(kernelParams)
TG_CHECK_FIELD(extra)
TG_CHECK_FIELD(kern)
TG_CHECK_FIELD(ctx)
#undef TG_CHECK_FIELD

static_assert(t::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(t::CUDA_SUCCESS == CUDA_SUCCESS && t::CUDA_ERROR_INVALID_VALUE == CUDA_ERROR_INVALID_VALUE);
static_assert(t::CUDA_ERROR_OUT_OF_MEMORY == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(t::CUDA_ERROR_NOT_INITIALIZED == CUDA_ERROR_NOT_INITIALIZED);
static_assert(t::CUDA_ERROR_DEINITIALIZED == CUDA_ERROR_DEINITIALIZED);
static_assert(t::CUDA_ERROR_NO_DEVICE == CUDA_ERROR_NO_DEVICE);
static_assert(t::CUDA_ERROR_INVALID_DEVICE == CUDA_ERROR_INVALID_DEVICE);
static_assert(t::CUDA_ERROR_INVALID_IMAGE == CUDA_ERROR_INVALID_IMAGE);
static_assert(t::CUDA_ERROR_INVALID_CONTEXT == CUDA_ERROR_INVALID_CONTEXT);
static_assert(t::CUDA_ERROR_INVALID_HANDLE == CUDA_ERROR_INVALID_HANDLE);
static_assert(t::CUDA_ERROR_NOT_FOUND == CUDA_ERROR_NOT_FOUND && t::CUDA_ERROR_NOT_READY == CUDA_ERROR_NOT_READY);
static_assert(t::CUDA_ERROR_ILLEGAL_ADDRESS == CUDA_ERROR_ILLEGAL_ADDRESS);
static_assert(t::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
static_assert(t::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
static_assert(t::CUDA_ERROR_UNKNOWN == CUDA_ERROR_UNKNOWN);
static_assert(t::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
static_assert(t::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
static_assert(t::CUDA_ERROR_STREAM_CAPTURE_UNJOINED == CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
static_assert(t::CUDA_ERROR_STREAM_CAPTURE_ISOLATION == CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
static_assert(t::CU_STREAM_CAPTURE_MODE_GLOBAL == CU_STREAM_CAPTURE_MODE_GLOBAL);
static_assert(t::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(t::CU_STREAM_CAPTURE_MODE_RELAXED == CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK == CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X == CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y == CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z == CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X == CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y == CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z == CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
static_assert(t::CU_DEVICE_ATTRIBUTE_WARP_SIZE == CU_DEVICE_ATTRIBUTE_WARP_SIZE);
static_assert(t::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(t::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
static_assert(t::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT == CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
static_assert(t::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(t::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(t::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(t::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
static_assert(t::CU_FUNC_ATTRIBUTE_NUM_REGS == CU_FUNC_ATTRIBUTE_NUM_REGS);
static_assert(t::CU_STREAM_NON_BLOCKING == CU_STREAM_NON_BLOCKING && t::CU_EVENT_DEFAULT == CU_EVENT_DEFAULT);
static_assert(t::CU_EVENT_DISABLE_TIMING == CU_EVENT_DISABLE_TIMING);
static_assert(mine::host_alloc_portable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(t::CU_GET_PROC_ADDRESS_LEGACY_STREAM == CU_GET_PROC_ADDRESS_LEGACY_STREAM);
static_assert(t::CU_GET_PROC_ADDRESS_SUCCESS == CU_GET_PROC_ADDRESS_SUCCESS);
static_assert(t::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
static_assert(t::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
static_assert(CU_LAUNCH_PARAM_END_AS_INT == 0 && CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT == 1 &&
              CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT == 2);

// NVRTC, where its header is installed (the CUDA toolkit has it; the pip wheel does not).
#if __has_include(<nvrtc.h>)
#include <nvrtc.h>
#define TG_CHECK_NVRTC(fn) \
  static_assert(same_abi<decltype(tg::cuda::NvrtcApi::fn), decltype(&::fn)>, #fn " does not match nvrtc.h");
TG_CHECK_NVRTC(nvrtcGetErrorString)
TG_CHECK_NVRTC(nvrtcVersion)
TG_CHECK_NVRTC(nvrtcGetNumSupportedArchs)
TG_CHECK_NVRTC(nvrtcGetSupportedArchs)
TG_CHECK_NVRTC(nvrtcCreateProgram)
TG_CHECK_NVRTC(nvrtcDestroyProgram)
TG_CHECK_NVRTC(nvrtcCompileProgram)
TG_CHECK_NVRTC(nvrtcGetProgramLogSize)
TG_CHECK_NVRTC(nvrtcGetProgramLog)
TG_CHECK_NVRTC(nvrtcGetCUBINSize)
TG_CHECK_NVRTC(nvrtcGetCUBIN)
TG_CHECK_NVRTC(nvrtcGetPTXSize)
TG_CHECK_NVRTC(nvrtcGetPTX)
#undef TG_CHECK_NVRTC
static_assert(tg::cuda::NVRTC_SUCCESS == NVRTC_SUCCESS);
static_assert(tg::cuda::NVRTC_ERROR_COMPILATION == NVRTC_ERROR_COMPILATION);
#endif
