// tg::amd::AmdAllocator: device memory of one AMD GPU. Buffers are CPU-visible VRAM (PUBLIC, which needs a
// resizable BAR) or, with host_visible, GTT system memory; copies wait for the queue and copy through the CPU
// mapping (an SDMA queue for copies is not written yet), device-to-device copies too.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "amd_gpu.h"
#include "runtime.h"

namespace tg::amd {

class AmdAllocator final : public Allocator {
 public:
  explicit AmdAllocator(std::shared_ptr<AmdGpu> gpu) : gpu_(std::move(gpu)) {}
  const std::string& device() const noexcept override { return gpu_->name(); }
  DevicePtr alloc(size_t nbytes, const AllocOptions& options) override;
  void free(DevicePtr ptr, size_t nbytes, const AllocOptions& options) noexcept override;
  void copyin(DevicePtr dst, const void* src, size_t nbytes) override;
  void copyout(void* dst, DevicePtr src, size_t nbytes) override;
  void* as_host(DevicePtr ptr) noexcept override;
  // From another AMD device (or this one): waits for both queues, then copies through the CPU mappings.
  bool transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) override;
  size_t live_allocations() const;

 private:
  std::shared_ptr<AmdGpu> gpu_;
  mutable std::mutex mu_;
  std::map<DevicePtr, std::unique_ptr<GpuMemory>> live_;
};

}  // namespace tg::amd
