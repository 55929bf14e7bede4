// The CUDA driver and NVRTC APIs as tinygrad uses them: types, constants and one function-pointer table each.
//
// Declared here by hand (no cuda.h, no nvrtc.h) so the module builds on any Linux machine, with or without a CUDA
// toolkit, and links nothing but -ldl. The declarations follow NVIDIA's ABI exactly; test/unit/test_cuda_runtime.py
// checks them against the real headers with test/native/abi_check.cpp wherever a toolkit is installed.
//
// Every driver and NVRTC call of the runtime goes through a DriverApi / NvrtcApi table. The real tables are filled
// from libcuda.so.1 and libnvrtc.so.* (driver.cpp, nvrtc_compiler.cpp); tests load a fake library through the same
// path instead (test/native/fake_cuda, see use_driver_library in driver.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// Opaque driver handles. Declared at global scope with the driver's own tag names, as cuda.h does, so that the
// handle types here and in cuda.h are the same types (which lets abi_check.cpp compare signatures exactly).
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphNode_st;
struct CUgraphExec_st;
struct CUkern_st;
struct _nvrtcProgram;

namespace tg::cuda {

// ---------------------------------------------------------------------------------------------------------------
// Driver types and constants (values from cuda.h, CUDA 12/13; stable across versions)
// ---------------------------------------------------------------------------------------------------------------
using CUresult = int;                    // enum cudaError_enum
using CUdevice = int;                    // CUdevice_v1
using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2 on 64-bit hosts
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUgraph = CUgraph_st*;
using CUgraphNode = CUgraphNode_st*;
using CUgraphExec = CUgraphExec_st*;
using CUkernel = CUkern_st*;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_IMAGE = 200;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
inline constexpr CUresult CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701;
inline constexpr CUresult CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704;
inline constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900;
inline constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901;
inline constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904;
inline constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

// cuDeviceGetAttribute (CUdevice_attribute)
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
inline constexpr int CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10;
inline constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr int CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
inline constexpr int CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// cuFuncGetAttribute (CUfunction_attribute)
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
inline constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
// cuFuncSetAttribute: how much dynamic shared memory launches may ask for (above 48 KB a kernel must opt in)
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// flags
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DEFAULT = 0x0;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x1;
// cuStreamBeginCapture (CUstreamCaptureMode): which other calls of the process a capture forbids meanwhile
inline constexpr int CU_STREAM_CAPTURE_MODE_GLOBAL = 0;
inline constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
inline constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;
inline constexpr std::uint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 0x1;
inline constexpr int CU_GET_PROC_ADDRESS_SUCCESS = 0;
inline constexpr int CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
inline constexpr int CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2;

// cuLaunchKernel's `extra` array: one packed argument buffer instead of an array of argument pointers
inline void* const CU_LAUNCH_PARAM_END = reinterpret_cast<void*>(0x00);
inline void* const CU_LAUNCH_PARAM_BUFFER_POINTER = reinterpret_cast<void*>(0x01);
inline void* const CU_LAUNCH_PARAM_BUFFER_SIZE = reinterpret_cast<void*>(0x02);

// CUDA_KERNEL_NODE_PARAMS_v2: what cuGraphAddKernelNode and cuGraphExecKernelNodeSetParams take when resolved at
// CUDA version 12000 or later (the v1 layout lacks the last two fields; abi_check.cpp checks this layout).
struct KernelNodeParams {
  CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
  CUkernel kern;   // used only when func is null
  CUcontext ctx;   // ignored when func is set
};

// CUgraphEdgeData (CUDA 12.3): an edge's kind. A programmatic edge out of a kernel's programmatic port lets the next
// kernel start launching once every block of this one has exited, before its completion is flushed; the next kernel
// waits for that with griddepcontrol.wait (its first instruction, where the renderer writes one: cuda.py).
struct GraphEdgeData {
  unsigned char from_port;
  unsigned char to_port;
  unsigned char type;
  unsigned char reserved[5];
};
inline constexpr unsigned char CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1;
inline constexpr unsigned char kGraphKernelNodePortProgrammatic = 1;  // CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
inline constexpr int kEdgeDataCudaVersion = 12030;

// CUtensorMap: the 128-byte descriptor of a global tensor that Hopper's TMA copies tiles of (cp.async.bulk.tensor).
// Opaque: cuTensorMapEncodeTiled writes it, a kernel takes it as a __grid_constant__ parameter aligned to 64 bytes
// (the renderer's tg_tmap), where the driver's parameter layout says. The host copy the driver writes is aligned to
// 128, what CUDA 13's cuda.h asks (CUDA 12's asked 64).
struct alignas(128) TensorMap {
  std::uint64_t opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "a CUtensorMap is 128 bytes");
// cuTensorMapEncodeTiled's enums (CUtensorMapDataType, ...Interleave, ...Swizzle, ...L2promotion, ...FloatOOBfill).
// TMA only moves bits, so the unsigned integer type of each element size is enough for any dtype.
inline constexpr int CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0;
inline constexpr int CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1;
inline constexpr int CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2;
inline constexpr int CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4;
inline constexpr int CU_TENSOR_MAP_INTERLEAVE_NONE = 0;
inline constexpr int CU_TENSOR_MAP_SWIZZLE_NONE = 0;
inline constexpr int CU_TENSOR_MAP_SWIZZLE_32B = 1;
inline constexpr int CU_TENSOR_MAP_SWIZZLE_64B = 2;
inline constexpr int CU_TENSOR_MAP_SWIZZLE_128B = 3;
inline constexpr int CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3;
inline constexpr int CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;  // out-of-bounds elements read as zeros
inline constexpr int kTensorMapMaxRank = 5;

// The oldest driver ABI this table is written against: every entry point is resolved at this version, so its
// signature is the one declared below even on newer drivers (cuGetProcAddress returns the newest variant whose
// signature existed at the requested version).
inline constexpr int kPinnedCudaVersion = 12000;
// cuFuncGetParamInfo (the exact parameter layout of a kernel) appeared in 12.4; optional below that.
inline constexpr int kParamInfoCudaVersion = 12040;
// cuTensorMapEncodeTiled (TMA descriptors, for sm_90 kernels) appeared in 12.0.
inline constexpr int kTensorMapCudaVersion = 12000;

// ---------------------------------------------------------------------------------------------------------------
// The driver as a table of entry points
// ---------------------------------------------------------------------------------------------------------------
struct DriverApi {
  // The library the table came from ("libcuda.so.1", or the path given to use_driver_library) and the driver's
  // version (12080 = 12.8).
  std::string source;
  int version = 0;

  // bootstrap: resolved with dlsym (they exist under these exact names in every driver since 12.0)
  CUresult (*cuInit)(unsigned int flags) = nullptr;
  CUresult (*cuDriverGetVersion)(int* version) = nullptr;
  CUresult (*cuGetErrorName)(CUresult error, const char** name) = nullptr;
  CUresult (*cuGetErrorString)(CUresult error, const char** text) = nullptr;

  // everything else: cuGetProcAddress(base name, kPinnedCudaVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM)
  CUresult (*cuDeviceGetCount)(int* count) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*cuDeviceGetName)(char* name, int len, CUdevice device) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t* bytes, CUdevice device) = nullptr;                   // _v2
  CUresult (*cuDeviceCanAccessPeer)(int* can, CUdevice device, CUdevice peer) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device) = nullptr;                         // _v2
  CUresult (*cuCtxGetCurrent)(CUcontext* ctx) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext ctx) = nullptr;
  CUresult (*cuCtxEnablePeerAccess)(CUcontext peer, unsigned int flags) = nullptr;
  CUresult (*cuMemGetInfo)(size_t* free, size_t* total) = nullptr;                          // _v2
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes) = nullptr;                         // _v2
  CUresult (*cuMemFree)(CUdeviceptr ptr) = nullptr;                                         // _v2
  CUresult (*cuMemHostAlloc)(void** ptr, size_t bytes, unsigned int flags) = nullptr;
  CUresult (*cuMemFreeHost)(void* ptr) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) = nullptr;  // _v2
  CUresult (*cuMemcpyDtoHAsync)(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) = nullptr;        // _v2
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) = nullptr;  // _v2
  CUresult (*cuMemcpyPeerAsync)(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                size_t bytes, CUstream stream) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule module) = nullptr;
  CUresult (*cuFuncGetAttribute)(int* value, int attribute, CUfunction function) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int shared_bytes, CUstream stream,
                             void** params, void** extra) = nullptr;
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned int flags) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream stream) = nullptr;                                   // _v2
  CUresult (*cuStreamSynchronize)(CUstream stream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned int flags) = nullptr;
  CUresult (*cuEventCreate)(CUevent* event, unsigned int flags) = nullptr;
  CUresult (*cuEventDestroy)(CUevent event) = nullptr;                                      // _v2
  CUresult (*cuEventRecord)(CUevent event, CUstream stream) = nullptr;
  CUresult (*cuEventQuery)(CUevent event) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent event) = nullptr;
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end) = nullptr;          // v1 at 12000
  CUresult (*cuGraphCreate)(CUgraph* graph, unsigned int flags) = nullptr;
  CUresult (*cuGraphAddKernelNode)(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t ndeps,
                                   const KernelNodeParams* params) = nullptr;               // _v2 params
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec* exec, CUgraph graph, unsigned long long flags) = nullptr;
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec exec, CUgraphNode node,
                                             const KernelNodeParams* params) = nullptr;     // _v2 params
  CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream stream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec exec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph graph) = nullptr;
  // Stream capture and child graphs: how work the runtime does not issue as explicit nodes (NCCL's collectives,
  // copies between GPUs) gets into a graph (cuda_multi_graph.h).
  CUresult (*cuStreamBeginCapture)(CUstream stream, int mode) = nullptr;                   // _v2 (with a mode)
  CUresult (*cuStreamEndCapture)(CUstream stream, CUgraph* graph) = nullptr;
  CUresult (*cuGraphAddChildGraphNode)(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t ndeps,
                                       CUgraph child) = nullptr;
  CUresult (*cuGraphExecChildGraphNodeSetParams)(CUgraphExec exec, CUgraphNode node, CUgraph child) = nullptr;

  // (optional) resolved at kParamInfoCudaVersion when the driver has it; nullptr otherwise
  CUresult (*cuFuncGetParamInfo)(CUfunction function, size_t index, size_t* offset, size_t* size) = nullptr;
  // (optional) resolved at kEdgeDataCudaVersion (the signature with edge data); nullptr otherwise
  CUresult (*cuGraphAddDependencies)(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                     const GraphEdgeData* edges, size_t count) = nullptr;
  // (optional) resolved at kTensorMapCudaVersion; nullptr where the driver lacks it (kernels with tensor-map
  // parameters then cannot be launched). Writes the 128-byte descriptor into `map`; needs no context.
  CUresult (*cuTensorMapEncodeTiled)(TensorMap* map, int data_type, std::uint32_t rank, void* global_address,
                                     const std::uint64_t* global_dim, const std::uint64_t* global_strides,
                                     const std::uint32_t* box_dim, const std::uint32_t* element_strides,
                                     int interleave, int swizzle, int l2_promotion, int oob_fill) = nullptr;
};

// The bootstrap entry point everything else is resolved through (cuGetProcAddress_v2, CUDA 12.0+).
using GetProcAddressFn = CUresult (*)(const char* symbol, void** pfn, int cuda_version, std::uint64_t flags,
                                      int* symbol_status);

// ---------------------------------------------------------------------------------------------------------------
// NVRTC
// ---------------------------------------------------------------------------------------------------------------
using nvrtcResult = int;
using nvrtcProgram = _nvrtcProgram*;
inline constexpr nvrtcResult NVRTC_SUCCESS = 0;
inline constexpr nvrtcResult NVRTC_ERROR_COMPILATION = 6;

struct NvrtcApi {
  std::string source;  // the library (candidate name or path) that was loaded
  const char* (*nvrtcGetErrorString)(nvrtcResult result) = nullptr;
  nvrtcResult (*nvrtcVersion)(int* major, int* minor) = nullptr;
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int* count) = nullptr;
  nvrtcResult (*nvrtcGetSupportedArchs)(int* archs) = nullptr;
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                                    const char* const* headers, const char* const* include_names) = nullptr;
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram* prog) = nullptr;
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram prog, int num_options, const char* const* options) = nullptr;
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t* size) = nullptr;
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram prog, char* log) = nullptr;
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram prog, size_t* size) = nullptr;
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram prog, char* cubin) = nullptr;
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram prog, size_t* size) = nullptr;
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram prog, char* ptx) = nullptr;
};

}  // namespace tg::cuda
