// A fake CUDA driver and NVRTC for tests on machines with no GPU.
//
// It is reached the way the real driver is: the test library exports the driver's bootstrap entry points and
// NVRTC's functions under their own names, and the runtime loads it by path (_cuda.use_driver_library,
// _cuda.nvrtc_load) through the same dlopen, dlsym and cuGetProcAddress code as libcuda.so.1 (the versions and
// flags it asks for are recorded). It simulates:
//  * devices, primary contexts and the calling thread's current context (calls without one fail, as they do on a
//    GPU), with configurable count, compute capability, memory size and driver version;
//  * device memory as host memory (a CUdeviceptr is a host address, readable by tests), with a size limit that
//    makes cuMemAlloc fail with CUDA_ERROR_OUT_OF_MEMORY, and range checks on every copy;
//  * streams as queues of deferred operations: a copy or launch runs only when something waits for it (an event,
//    a stream synchronisation), so code that reads a staging buffer before waiting reads stale bytes;
//  * modules from "fake CUBINs" (FAKECUBIN + CUDA source, as the fake NVRTC makes them), with the kernel parameter
//    layout parsed from the source, so argument packing is checked byte for byte;
//  * kernel launches and CUDA graphs, recorded (kernels do not compute anything); 128-byte `tg_tmap` (CUtensorMap)
//    parameters, encoded by a cuTensorMapEncodeTiled that checks what the real one checks and writes a readable
//    FakeTensorMap;
//  * stream capture: work issued on a stream being captured (copies, NCCL's collectives, kernels) becomes nodes of
//    the capture, other streams join it by waiting on its events and must be joined back before it ends; the
//    graph it makes runs that work again at every launch, also as a child graph of another graph;
//  * failures on demand: the next N calls of an entry point return a chosen error.
// Every call is recorded with its arguments for the tests to inspect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_api.h"

namespace tg::cuda::fake {

struct Config {
  int device_count = 1;
  int driver_version = 12080;
  std::uint64_t memory_bytes = std::uint64_t{1} << 30;  // per device
  int cc_major = 9;
  int cc_minor = 0;
  bool param_info = true;  // offer cuFuncGetParamInfo (drivers >= 12.4 do)
  bool tensor_map = true;  // offer cuTensorMapEncodeTiled (every 12.0+ driver does; false: one that lacks it)
};

// What the fake's cuTensorMapEncodeTiled writes into the 128-byte CUtensorMap (a real driver's encoding is opaque),
// little-endian, zeros past the rank: tests decode it with struct "<QII5Q4Q5I5B4B11x".
struct FakeTensorMap {
  std::uint64_t address;          // globalAddress
  std::uint32_t rank;
  std::uint32_t data_type;        // CUtensorMapDataType
  std::uint64_t dims[5];          // globalDim
  std::uint64_t strides[4];       // globalStrides (rank - 1 of them)
  std::uint32_t box[5];           // boxDim
  std::uint8_t element_strides[5];
  std::uint8_t interleave, swizzle, l2_promotion, oob_fill;  // the enums' values
  std::uint8_t unused[11];
};
static_assert(sizeof(FakeTensorMap) == 128, "a CUtensorMap is 128 bytes");

// One recorded driver or NVRTC call. `args` holds its integer and handle arguments in order, `text` a string
// argument (symbol name, kernel name, compile options joined by spaces), `data` bytes it passed (packed kernel
// arguments).
struct Call {
  std::string name;
  std::vector<std::uint64_t> args;
  std::string text;
  std::string data;
};

// One kernel execution as the fake saw it (from cuLaunchKernel or from each node of a launched graph).
struct Launch {
  std::string kernel;
  unsigned grid[3];
  unsigned block[3];
  std::string args;  // the packed argument bytes
  bool from_graph;
};

// A fresh simulated machine (every previous fake's state is dropped). The runtime sees it once it loads this
// library (driver resolution happens then, through the bootstrap exports).
void install(const Config& config);
// Drops the simulated machine: every entry point then fails (CUDA_ERROR_DEINITIALIZED).
void uninstall();

// The next `count` calls of entry point `call` (base name, e.g. "cuMemAlloc", "nvrtcCompileProgram") return
// `status` instead of doing anything.
void fail_next(const std::string& call, int status, int count);
// The CUresult for a name such as "CUDA_ERROR_OUT_OF_MEMORY" (or an NVRTC one); -1 if unknown.
int status_from_name(const std::string& name);

std::vector<Call> calls();
std::vector<Launch> launches();
void clear_records();

// Device memory, for tests to check copies: throws std::invalid_argument outside a live allocation.
std::string read(std::uint64_t ptr, size_t nbytes);
void write(std::uint64_t ptr, const std::string& bytes);
// Operations queued on streams and not yet run; live device allocations (count, bytes); live pinned buffers.
size_t pending_ops();
std::pair<size_t, std::uint64_t> device_allocations();
size_t pinned_allocations();

}  // namespace tg::cuda::fake
