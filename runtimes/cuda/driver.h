// Finding the CUDA driver: loading libcuda.so.1, resolving the entry points at a pinned ABI version, and turning
// driver status codes into tg:: exceptions.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "cuda_api.h"

namespace tg::cuda {

inline constexpr char kDriverLibrary[] = "libcuda.so.1";

// The five entry points looked up by name before anything else; the rest come from get_proc_address.
struct Bootstrap {
  GetProcAddressFn get_proc_address = nullptr;  // cuGetProcAddress_v2
  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
};

// Initialises the driver (cuInit(0)), checks that it is at least CUDA 12.0 and resolves every DriverApi entry
// through get_proc_address at kPinnedCudaVersion with CU_GET_PROC_ADDRESS_LEGACY_STREAM (so launches and copies
// on our explicit stream never pick up per-thread default-stream variants). Throws tg::RuntimeError naming the
// failing call, the driver's version or the missing symbol. `source` names the table in messages.
std::shared_ptr<const DriverApi> resolve_driver(const Bootstrap& boot, const std::string& source);

// dlopen(path) + resolve_driver. Throws tg::RuntimeError(device "CUDA", call "dlopen", the dlerror() text) when the
// library cannot be loaded, and names the missing bootstrap symbol when it is not a CUDA 12+ driver.
std::shared_ptr<const DriverApi> load_driver_library(const std::string& path);

// The driver new devices use: the driver library (libcuda.so.1 unless use_driver_library named another), loaded on
// the first call and kept. Thread-safe. A failed load is remembered and re-thrown on every call (the environment
// will not change) until use_driver_library is called again.
std::shared_ptr<const DriverApi> driver();

// Makes driver() load `path` instead of libcuda.so.1 (nullopt: libcuda.so.1 again): any library that exports the
// five bootstrap entry points (a driver installed in an unusual place, or a test's fake driver, test/native). Forgets
// the driver loaded so far, so the next driver() loads again; devices already open keep theirs.
void use_driver_library(const std::optional<std::string>& path);

// A CUDA version number as people write it: 12080 -> "12.8".
std::string cuda_version_text(int version);

// The driver's name for a status ("CUDA_ERROR_OUT_OF_MEMORY") and its description ("out of memory"); a generic
// text when the driver does not know the code.
std::string error_name(const DriverApi& api, CUresult status);
std::string error_text(const DriverApi& api, CUresult status);

// Throws for a failed driver call: tg::OutOfMemory for CUDA_ERROR_OUT_OF_MEMORY, tg::RuntimeError otherwise, both
// carrying `device`, `call` (the driver's ABI name, e.g. "cuMemAlloc_v2") and the driver's error name.
[[noreturn]] void throw_status(const DriverApi& api, const std::string& device, const char* call, CUresult status,
                               const std::string& what);

inline void check(const DriverApi& api, const std::string& device, const char* call, CUresult status,
                  const char* what) {
  if (status != CUDA_SUCCESS) throw_status(api, device, call, status, what);
}

}  // namespace tg::cuda
