// NVRTC, the CUDA runtime compiler, loaded with dlopen: CUDA C source -> CUBIN (or PTX) in memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda_api.h"

namespace tg::cuda {

// The first of `candidates` (library names or paths) that dlopen loads, with every NVRTC entry point looked up.
// Loaded once per process: later calls return the library already loaded (or the override, see below) whatever
// they ask for. Throws
// tg::RuntimeError naming each candidate tried and the last dlerror() text.
std::shared_ptr<const NvrtcApi> load_nvrtc(const std::vector<std::string>& candidates);

// The NVRTC the compiler uses: the override if one is installed (tests), else the one load_nvrtc loaded. Throws
// tg::RuntimeError if neither exists yet.
std::shared_ptr<const NvrtcApi> nvrtc();
void set_nvrtc_override(std::shared_ptr<const NvrtcApi> api);

// NVRTC's version, e.g. {13, 0}, and the real architectures it can build CUBINs for (75, 80, ..., 90, ...).
std::pair<int, int> nvrtc_version(const NvrtcApi& api);
std::vector<int> nvrtc_supported_archs(const NvrtcApi& api);

struct CompileOutput {
  std::string binary;  // the CUBIN, or the PTX text when `ptx` was asked for
  std::string log;     // NVRTC's messages (warnings), often empty
};

// Compiles `source` (program name `name`.cu, no headers) with `options`. `ptx` selects PTX output instead of CUBIN
// (for a virtual --gpu-architecture=compute_XX, where NVRTC makes no CUBIN). Throws tg::RuntimeError with call
// "nvrtcCompileProgram", NVRTC's error name and its full log when the source does not compile, and for an empty
// CUBIN (a virtual architecture asked for CUBIN). Thread-safe: each call has its own NVRTC program.
CompileOutput nvrtc_compile(const NvrtcApi& api, const std::string& source, const std::string& name,
                            const std::vector<std::string>& options, bool ptx);

}  // namespace tg::cuda
