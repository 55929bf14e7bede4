#include "amd_allocator.h"

#include <algorithm>
#include <cstring>

#include "errors.h"

namespace tg::amd {

DevicePtr AmdAllocator::alloc(size_t nbytes, const AllocOptions& options) {
  MemoryOptions m{options.host_visible ? MemoryKind::Gtt : MemoryKind::Vram, options.host_visible, options.uncached,
                  false};
  auto mem = gpu_->allocate(nbytes, m);
  DevicePtr p = mem->va();
  std::lock_guard<std::mutex> lock(mu_);
  live_[p] = std::move(mem);
  return p;
}

void AmdAllocator::free(DevicePtr ptr, size_t, const AllocOptions&) noexcept {
  std::unique_ptr<GpuMemory> mem;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    mem = std::move(it->second);
    live_.erase(it);
  }
  try {
    gpu_->queue().wait_idle();  // the queue may still run kernels that use it
  } catch (...) {
    // a hung queue: free anyway (a real KFD would evict the queue); the wait's error was raised elsewhere
  }
}

void AmdAllocator::copyin(DevicePtr dst, const void* src, size_t nbytes) {
  AqlQueue& q = gpu_->queue();
  q.wait_idle();  // earlier kernels may still read the old contents
  GpuMemory& staging = gpu_->staging();
  for (size_t done = 0; done < nbytes;) {
    size_t n = std::min<size_t>(nbytes - done, staging.size());
    std::memcpy(staging.cpu(), static_cast<const char*>(src) + done, n);
    gpu_->sdma().copy(dst + done, staging.va(), n, q.timeout_ms());
    done += n;
  }
}

void AmdAllocator::copyout(void* dst, DevicePtr src, size_t nbytes) {
  AqlQueue& q = gpu_->queue();
  q.wait_idle();
  GpuMemory& staging = gpu_->staging();
  for (size_t done = 0; done < nbytes;) {
    size_t n = std::min<size_t>(nbytes - done, staging.size());
    gpu_->sdma().copy(staging.va(), src + done, n, q.timeout_ms());
    std::memcpy(static_cast<char*>(dst) + done, staging.cpu(), n);
    done += n;
  }
}

bool AmdAllocator::transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) {
  auto* other = dynamic_cast<AmdAllocator*>(&src_allocator);
  if (other == nullptr || other->gpu_ != gpu_) return false;
  AqlQueue& q = gpu_->queue();
  q.wait_idle();
  gpu_->sdma().copy(dst, src, nbytes, q.timeout_ms());
  return true;
}

void* AmdAllocator::as_host(DevicePtr ptr) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? nullptr : it->second->cpu();
}

size_t AmdAllocator::live_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

}  // namespace tg::amd
