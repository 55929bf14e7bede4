// A fake Objective-C runtime with a fake Metal framework, for tests on machines without a Mac (tests only, never
// shipped). This library exports the entry points the Metal runtime resolves by name (objc_getClass,
// sel_registerName, objc_msgSend, objc_autoreleasePoolPush/Pop, MTLCreateSystemDefaultDevice, dispatch_data_create),
// so _metal loads it in place of libobjc and Metal through _metal.use_libraries.
//
// Classes and selectors are registered by name; every message is checked: its receiver must be a live object (or a
// class) that implements the selector, object arguments must be of the expected class, and retains and releases are
// counted (an over-release, a message to a freed object or an object autoreleased with no pool is a violation, and
// live_objects() shows leaks). Kernels run on the host: a library's MSL is compiled with the host C++ compiler against
// msl_host.h, and a dispatch runs the kernel's threadgroups. Failures on demand: the next library build, buffer
// allocation or command buffer fails with Metal's own error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tg::metal::fake {

struct Config {
  std::string compiler = "g++";  // builds the MSL for the host
  std::string shim;              // path of msl_host.h
  std::string cache_dir;         // compiled kernels by source hash (reused across runs)
  unsigned max_threads = 1024;   // each pipeline's maxTotalThreadsPerThreadgroup
  std::uint64_t memory_bytes = std::uint64_t{1} << 32;  // allocations past this fail (nil, as Metal's do)
  bool icb = true;               // supportsFamily: an Apple7 GPU (compute ICBs, simdgroup_matrix), else Apple3
};

struct Dispatch {
  std::string kernel;
  unsigned grid[3], block[3];
  std::uint64_t command_buffer;  // which command buffer it ran in (an id)
};

void install(const Config& cfg);  // a fresh fake machine (objects of the last one must be gone)
void uninstall();

// `what`: "library" (the next library build fails: MTLLibraryErrorCompileFailure), "buffer" (the next allocation
// returns nil), "command_buffer" (the next committed command buffer ends with MTLCommandBufferError `code`).
void fail_next(const std::string& what, long code, int count);

std::map<std::string, long> live_objects();  // class name -> objects alive
std::vector<std::string> violations();       // broken rules, in order
std::vector<Dispatch> dispatches();
std::uint64_t messages();                    // messages sent so far
std::uint64_t committed();                   // command buffers committed so far
void clear_records();

}  // namespace tg::metal::fake
