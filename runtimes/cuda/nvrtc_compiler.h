// NVRTC, the CUDA runtime compiler, loaded with dlopen: CUDA C source -> CUBIN (or PTX) in memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda_api.h"

namespace tg::cuda {

// The first of `candidates` (library names or paths) that dlopen loads, with every NVRTC entry point looked up; its
// `source` is the candidate that loaded. Loaded once: later calls return the library already loaded whatever they
// ask for, until unload_nvrtc(). Throws tg::RuntimeError naming each candidate tried and the last dlerror() text.
std::shared_ptr<const NvrtcApi> load_nvrtc(const std::vector<std::string>& candidates);

// Forgets the NVRTC loaded so far, so the next load_nvrtc loads from its candidates again (switching NVRTC
// libraries, e.g. to a test's fake). The library itself stays mapped: compilations may still be running in it.
void unload_nvrtc();

// The NVRTC the compiler uses: the one load_nvrtc loaded. Throws tg::RuntimeError if none is loaded.
std::shared_ptr<const NvrtcApi> nvrtc();

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
