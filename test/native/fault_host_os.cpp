#include "fault_host_os.h"

#include <atomic>
#include <cstring>

namespace tg::test {
namespace {

std::atomic<const tg_host_os*> g_inner{nullptr};
std::atomic<int> g_failing_allocs{0};
std::atomic<int> g_failing_loads{0};

// Decrements `counter` if positive; true means "fail this call".
bool take_fault(std::atomic<int>& counter) noexcept {
  int n = counter.load();
  while (n > 0 && !counter.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}

const tg_host_os& inner() { return *g_inner.load(); }

void* allocate(void*, size_t alignment, size_t nbytes) {
  if (take_fault(g_failing_allocs)) return nullptr;
  return inner().allocate(inner().self, alignment, nbytes);
}
void deallocate(void*, void* p) { inner().deallocate(inner().self, p); }
void* load_library(void*, const void* image, size_t nbytes, tg_os_error* err) {
  if (take_fault(g_failing_loads)) {
    std::strcpy(err->call, "dlopen");
    std::strcpy(err->text, "injected failure (tinygrad test hook)");
    return nullptr;
  }
  return inner().load_library(inner().self, image, nbytes, err);
}
void* find_symbol(void*, void* library, const char* name, tg_os_error* err) {
  return inner().find_symbol(inner().self, library, name, err);
}
void unload_library(void*, void* library) { inner().unload_library(inner().self, library); }

const tg_host_os kTable = {nullptr, &allocate, &deallocate, &load_library, &find_symbol, &unload_library};

}  // namespace

const tg_host_os* fault_host_os(const tg_host_os* inner) {
  g_inner.store(inner);
  g_failing_allocs.store(0);
  g_failing_loads.store(0);
  return &kTable;
}

void fail_next_allocs(int n) { g_failing_allocs.store(n); }
void fail_next_loads(int n) { g_failing_loads.store(n); }

}  // namespace tg::test
