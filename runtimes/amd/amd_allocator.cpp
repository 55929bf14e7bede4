#include "amd_allocator.h"

#include <cstring>

#include "errors.h"

namespace tg::amd {

DevicePtr AmdAllocator::alloc(size_t nbytes, const AllocOptions& options) {
  MemoryOptions m{options.host_visible ? MemoryKind::Gtt : MemoryKind::Vram, true, options.uncached, false};
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
  gpu_->queue().wait_idle();  // earlier kernels may still read the old contents
  std::memcpy(reinterpret_cast<void*>(dst), src, nbytes);
}

void AmdAllocator::copyout(void* dst, DevicePtr src, size_t nbytes) {
  gpu_->queue().wait_idle();
  std::memcpy(dst, reinterpret_cast<const void*>(src), nbytes);
}

bool AmdAllocator::transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) {
  auto* other = dynamic_cast<AmdAllocator*>(&src_allocator);
  if (other == nullptr) return false;
  void* to = as_host(dst);
  void* from = other->as_host(src);
  if (to == nullptr || from == nullptr) return false;
  other->gpu_->queue().wait_idle();
  gpu_->queue().wait_idle();
  std::memmove(to, from, nbytes);
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
