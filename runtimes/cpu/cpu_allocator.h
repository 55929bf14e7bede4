// tg::cpu::CpuAllocator: host memory as device memory for the CPU backend.
#pragma once

#include <memory>
#include <string>

#include "runtime.h"

namespace tg::cpu {

class CpuAllocator final : public Allocator {
 public:
  // 64 bytes: a cache line, and enough for the widest vector loads rendered kernels use (AVX-512).
  static constexpr size_t kAlignment = 64;

  const std::string& device() const noexcept override;
  // Rounds the size up to a multiple of kAlignment (at least one), so a 0-byte buffer still has a unique address
  // and kernels may load whole vectors at the tail. Throws tg::OutOfMemory naming `nbytes` on failure.
  DevicePtr alloc(size_t nbytes, const AllocOptions& options) override;
  void free(DevicePtr ptr, size_t nbytes, const AllocOptions& options) noexcept override;
  void copyin(DevicePtr dst, const void* src, size_t nbytes) override;
  void copyout(void* dst, DevicePtr src, size_t nbytes) override;
  void* as_host(DevicePtr ptr) noexcept override { return reinterpret_cast<void*>(ptr); }
  // Direct memcpy when the source is also CPU memory.
  bool transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) override;
};

// The process-wide CPU allocator (stateless: every call goes to the current HostOS).
std::shared_ptr<CpuAllocator> cpu_allocator();

}  // namespace tg::cpu
