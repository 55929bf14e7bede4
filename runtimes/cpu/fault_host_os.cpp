#include "fault_host_os.h"

#include <mutex>

namespace tg::cpu {
namespace {

// Decrements `counter` if positive; true means "fail this call".
bool take_fault(std::atomic<int>& counter) noexcept {
  int n = counter.load();
  while (n > 0 && !counter.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}

}  // namespace

void* FaultInjectingHostOS::allocate(size_t alignment, size_t nbytes) noexcept {
  if (take_fault(failing_allocs_)) return nullptr;
  return inner_->allocate(alignment, nbytes);
}

void* FaultInjectingHostOS::load_library(const void* image, size_t nbytes, OsError* err) {
  if (take_fault(failing_loads_)) {
    *err = {"dlopen", "injected failure (tinygrad test hook)"};
    return nullptr;
  }
  return inner_->load_library(image, nbytes, err);
}

namespace testing {
namespace {

std::mutex g_mutex;
std::shared_ptr<FaultInjectingHostOS> g_fault;

std::shared_ptr<FaultInjectingHostOS> installed() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_fault) {
    g_fault = std::make_shared<FaultInjectingHostOS>(real_host_os());
    set_host_os(g_fault);
  }
  return g_fault;
}

}  // namespace

void fail_next_alloc(int n) { installed()->fail_next_allocs(n); }
void fail_next_load(int n) { installed()->fail_next_loads(n); }

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fault.reset();
  set_host_os(nullptr);
}

}  // namespace testing
}  // namespace tg::cpu
