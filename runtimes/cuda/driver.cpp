#include "driver.h"

#include <dlfcn.h>

#include <exception>
#include <mutex>
#include <type_traits>
#include <utility>

#include "errors.h"

namespace tg::cuda {
namespace {

constexpr char kDevice[] = "CUDA";

std::string name_from(CUresult (*get_name)(CUresult, const char**), CUresult status) {
  const char* name = nullptr;
  if (get_name != nullptr && get_name(status, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUDA error " + std::to_string(status);
}

const char* status_name(int symbol_status) {
  switch (symbol_status) {
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND:
      return "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
      return "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT";
    default:
      return "no function returned";
  }
}

// Resolves one entry point. `name` is the base name (cuMemAlloc, not cuMemAlloc_v2): the driver picks the variant
// whose signature matches `version`. An unknown symbol is not an error for cuGetProcAddress (it returns success
// with a null pointer), so the pointer and the symbol status are both checked.
template <class Fn>
void resolve(const Bootstrap& boot, const char* name, Fn* slot, int version, bool required) {
  void* pfn = nullptr;
  int symbol_status = -1;
  CUresult r = boot.get_proc_address(name, &pfn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &symbol_status);
  if (r == CUDA_SUCCESS && pfn != nullptr && symbol_status == CU_GET_PROC_ADDRESS_SUCCESS) {
    *slot = reinterpret_cast<Fn>(pfn);
    return;
  }
  if (!required) return;
  if (r != CUDA_SUCCESS)
    throw RuntimeError(kDevice, "cuGetProcAddress_v2", name_from(boot.cuGetErrorName, r),
                       std::string("could not resolve ") + name + " at CUDA " + cuda_version_text(version));
  throw RuntimeError(kDevice, "cuGetProcAddress_v2", status_name(symbol_status),
                     std::string("the CUDA driver has no ") + name + " for CUDA " + cuda_version_text(version));
}

std::mutex g_mutex;
std::string g_path = kDriverLibrary;    // what driver() loads
std::shared_ptr<const DriverApi> g_api;  // what it loaded, or
std::exception_ptr g_error;             // how loading it failed

}  // namespace

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::shared_ptr<const DriverApi> resolve_driver(const Bootstrap& boot, const std::string& source) {
  auto api = std::make_shared<DriverApi>();
  api->source = source;
  api->cuInit = boot.cuInit;
  api->cuDriverGetVersion = boot.cuDriverGetVersion;
  api->cuGetErrorName = boot.cuGetErrorName;
  api->cuGetErrorString = boot.cuGetErrorString;

  CUresult r = boot.cuInit(0);
  if (r != CUDA_SUCCESS)
    throw RuntimeError(kDevice, "cuInit", name_from(boot.cuGetErrorName, r),
                       "the CUDA driver (" + source + ") failed to initialise: is there a usable NVIDIA GPU?");
  r = boot.cuDriverGetVersion(&api->version);
  if (r != CUDA_SUCCESS)
    throw RuntimeError(kDevice, "cuDriverGetVersion", name_from(boot.cuGetErrorName, r), "call failed");
  // Asking cuGetProcAddress for a version newer than the driver fails for every symbol: say so once, clearly.
  if (api->version < kPinnedCudaVersion)
    throw RuntimeError(kDevice, "cuDriverGetVersion", "driver too old",
                       "the CUDA driver supports CUDA " + cuda_version_text(api->version) + "; tinygrad needs CUDA " +
                           cuda_version_text(kPinnedCudaVersion) + " or newer");

  const int v = kPinnedCudaVersion;
  resolve(boot, "cuDeviceGetCount", &api->cuDeviceGetCount, v, true);
  resolve(boot, "cuDeviceGet", &api->cuDeviceGet, v, true);
  resolve(boot, "cuDeviceGetName", &api->cuDeviceGetName, v, true);
  resolve(boot, "cuDeviceGetAttribute", &api->cuDeviceGetAttribute, v, true);
  resolve(boot, "cuDeviceTotalMem", &api->cuDeviceTotalMem, v, true);
  resolve(boot, "cuDeviceCanAccessPeer", &api->cuDeviceCanAccessPeer, v, true);
  resolve(boot, "cuDevicePrimaryCtxRetain", &api->cuDevicePrimaryCtxRetain, v, true);
  resolve(boot, "cuDevicePrimaryCtxRelease", &api->cuDevicePrimaryCtxRelease, v, true);
  resolve(boot, "cuCtxGetCurrent", &api->cuCtxGetCurrent, v, true);
  resolve(boot, "cuCtxSetCurrent", &api->cuCtxSetCurrent, v, true);
  resolve(boot, "cuCtxEnablePeerAccess", &api->cuCtxEnablePeerAccess, v, true);
  resolve(boot, "cuMemGetInfo", &api->cuMemGetInfo, v, true);
  resolve(boot, "cuMemAlloc", &api->cuMemAlloc, v, true);
  resolve(boot, "cuMemFree", &api->cuMemFree, v, true);
  resolve(boot, "cuMemHostAlloc", &api->cuMemHostAlloc, v, true);
  resolve(boot, "cuMemFreeHost", &api->cuMemFreeHost, v, true);
  resolve(boot, "cuMemcpyHtoDAsync", &api->cuMemcpyHtoDAsync, v, true);
  resolve(boot, "cuMemcpyDtoHAsync", &api->cuMemcpyDtoHAsync, v, true);
  resolve(boot, "cuMemcpyDtoDAsync", &api->cuMemcpyDtoDAsync, v, true);
  resolve(boot, "cuMemcpyPeerAsync", &api->cuMemcpyPeerAsync, v, true);
  resolve(boot, "cuModuleLoadData", &api->cuModuleLoadData, v, true);
  resolve(boot, "cuModuleGetFunction", &api->cuModuleGetFunction, v, true);
  resolve(boot, "cuModuleUnload", &api->cuModuleUnload, v, true);
  resolve(boot, "cuFuncGetAttribute", &api->cuFuncGetAttribute, v, true);
  resolve(boot, "cuFuncSetAttribute", &api->cuFuncSetAttribute, v, true);
  resolve(boot, "cuLaunchKernel", &api->cuLaunchKernel, v, true);
  resolve(boot, "cuStreamCreate", &api->cuStreamCreate, v, true);
  resolve(boot, "cuStreamDestroy", &api->cuStreamDestroy, v, true);
  resolve(boot, "cuStreamSynchronize", &api->cuStreamSynchronize, v, true);
  resolve(boot, "cuStreamWaitEvent", &api->cuStreamWaitEvent, v, true);
  resolve(boot, "cuEventCreate", &api->cuEventCreate, v, true);
  resolve(boot, "cuEventDestroy", &api->cuEventDestroy, v, true);
  resolve(boot, "cuEventRecord", &api->cuEventRecord, v, true);
  resolve(boot, "cuEventQuery", &api->cuEventQuery, v, true);
  resolve(boot, "cuEventSynchronize", &api->cuEventSynchronize, v, true);
  resolve(boot, "cuEventElapsedTime", &api->cuEventElapsedTime, v, true);
  resolve(boot, "cuGraphCreate", &api->cuGraphCreate, v, true);
  resolve(boot, "cuGraphAddKernelNode", &api->cuGraphAddKernelNode, v, true);
  // NOTE: by this exact name: "cuGraphInstantiate" resolves to cuGraphInstantiate_v2, a different signature
  resolve(boot, "cuGraphInstantiateWithFlags", &api->cuGraphInstantiateWithFlags, v, true);
  resolve(boot, "cuGraphExecKernelNodeSetParams", &api->cuGraphExecKernelNodeSetParams, v, true);
  resolve(boot, "cuGraphLaunch", &api->cuGraphLaunch, v, true);
  resolve(boot, "cuGraphExecDestroy", &api->cuGraphExecDestroy, v, true);
  resolve(boot, "cuGraphDestroy", &api->cuGraphDestroy, v, true);
  resolve(boot, "cuStreamBeginCapture", &api->cuStreamBeginCapture, v, true);
  resolve(boot, "cuStreamEndCapture", &api->cuStreamEndCapture, v, true);
  resolve(boot, "cuGraphAddChildGraphNode", &api->cuGraphAddChildGraphNode, v, true);
  resolve(boot, "cuGraphExecChildGraphNodeSetParams", &api->cuGraphExecChildGraphNodeSetParams, v, true);
  if (api->version >= kParamInfoCudaVersion)
    resolve(boot, "cuFuncGetParamInfo", &api->cuFuncGetParamInfo, kParamInfoCudaVersion, false);
  resolve(boot, "cuTensorMapEncodeTiled", &api->cuTensorMapEncodeTiled, kTensorMapCudaVersion, false);
  if (api->version >= kEdgeDataCudaVersion)
    resolve(boot, "cuGraphAddDependencies", &api->cuGraphAddDependencies, kEdgeDataCudaVersion, false);
  return api;
}

std::shared_ptr<const DriverApi> load_driver_library(const std::string& path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    throw RuntimeError(kDevice, "dlopen", e ? e : "unknown dlopen error",
                       "could not load the CUDA driver " + path + " (no NVIDIA driver installed?)");
  }
  // NOTE: never dlclosed: the driver stays loaded for the life of the process, as every CUDA program does
  Bootstrap boot;
  auto sym = [&](const char* name, auto* slot) {
    void* p = dlsym(lib, name);
    if (p == nullptr)
      throw RuntimeError(kDevice, "dlsym", name + std::string(" not found"),
                         path + " is not a CUDA 12+ driver (it has no " + name + ")");
    *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(p);
  };
  sym("cuGetProcAddress_v2", &boot.get_proc_address);
  sym("cuInit", &boot.cuInit);
  sym("cuDriverGetVersion", &boot.cuDriverGetVersion);
  sym("cuGetErrorName", &boot.cuGetErrorName);
  sym("cuGetErrorString", &boot.cuGetErrorString);
  return resolve_driver(boot, path);
}

std::shared_ptr<const DriverApi> driver() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_api) return g_api;
  if (g_error) std::rethrow_exception(g_error);
  try {
    g_api = load_driver_library(g_path);
  } catch (...) {
    g_error = std::current_exception();
    throw;
  }
  return g_api;
}

void use_driver_library(const std::optional<std::string>& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_path = path ? *path : kDriverLibrary;
  g_api.reset();
  g_error = nullptr;
}

std::string error_name(const DriverApi& api, CUresult status) { return name_from(api.cuGetErrorName, status); }

std::string error_text(const DriverApi& api, CUresult status) {
  const char* text = nullptr;
  if (api.cuGetErrorString != nullptr && api.cuGetErrorString(status, &text) == CUDA_SUCCESS && text != nullptr)
    return text;
  return "unknown error";
}

void throw_status(const DriverApi& api, const std::string& device, const char* call, CUresult status,
                  const std::string& what) {
  std::string name = error_name(api, status);
  std::string message = what + ": " + error_text(api, status);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(device, call, std::move(name), 0, std::move(message));
  throw RuntimeError(device, call, std::move(name), std::move(message));
}

}  // namespace tg::cuda
