// Internal to the fake Metal (fake_objc.cpp, fake_metal_exec.cpp): MSL libraries built for the host and run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fake_objc.h"

namespace tg::metal::fake {

// One `kernel void` function of a library: which [[buffer(n)]] slots it reads, and its host entry point.
struct HostKernel {
  std::string name;
  std::vector<int> buffer_slots;  // device pointers
  std::vector<int> bytes_slots;   // `constant T&` values (setBytes)
  bool fibers = false;            // it has barriers or shuffles: its threads run as fibers
  bool (*run)(void**, const unsigned*, const unsigned*, int) = nullptr;
};

struct HostLibrary {
  void* handle = nullptr;
  std::vector<HostKernel> kernels;
  ~HostLibrary();
  const HostKernel* find(const std::string& name) const;
};

// Builds MSL `source` for the host (cached by content in cfg.cache_dir): nullptr and the compiler's output in `log`
// when it does not compile.
std::shared_ptr<HostLibrary> build_library(const Config& cfg, const std::string& source, std::string* log);

}  // namespace tg::metal::fake
