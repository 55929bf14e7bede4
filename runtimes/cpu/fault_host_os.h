// A HostOS for tests: delegates to another HostOS but fails the next N allocations or library loads on request.
//
// It wraps instead of faking everything so memory allocated before or after the fault is still real and can be
// freed by whichever HostOS is current then (see set_host_os).
#pragma once

#include <atomic>
#include <memory>

#include "host_os.h"

namespace tg::cpu {

class FaultInjectingHostOS final : public HostOS {
 public:
  explicit FaultInjectingHostOS(std::shared_ptr<HostOS> inner) : inner_(std::move(inner)) {}

  void fail_next_allocs(int n) noexcept { failing_allocs_.store(n); }
  void fail_next_loads(int n) noexcept { failing_loads_.store(n); }

  void* allocate(size_t alignment, size_t nbytes) noexcept override;
  void deallocate(void* p) noexcept override { inner_->deallocate(p); }
  void* load_library(const void* image, size_t nbytes, OsError* err) override;
  void* find_symbol(void* library, const char* name, OsError* err) override {
    return inner_->find_symbol(library, name, err);
  }
  void unload_library(void* library) noexcept override { inner_->unload_library(library); }

 private:
  std::shared_ptr<HostOS> inner_;
  std::atomic<int> failing_allocs_{0};
  std::atomic<int> failing_loads_{0};
};

// The test hooks behind Python's tinygrad.runtime._cpu._testing. They install a FaultInjectingHostOS over the real
// one on first use; reset() puts the real one back.
namespace testing {
void fail_next_alloc(int n);  // the next n host allocations return nullptr (-> tg::OutOfMemory)
void fail_next_load(int n);   // the next n library loads fail as if dlopen had (-> tg::RuntimeError)
void reset();
}  // namespace testing

}  // namespace tg::cpu
