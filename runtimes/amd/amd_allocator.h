// tg::amd::AmdAllocator: device memory of one AMD GPU. Buffers are VRAM the CPU does not map (no resizable BAR
// needed) or, with host_visible, GTT system memory the CPU maps. Copies wait for the kernels queued before them, then
// go through the SDMA engine, staged through host-visible memory 4 MiB at a time; copies between two buffers of one
// GPU are one SDMA copy, and between GPUs they go through the host (the caller's fallback).
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
  // Within this GPU (one SDMA copy after the queued kernels); false for another GPU's memory.
  bool transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) override;
  size_t live_allocations() const;

 private:
  std::shared_ptr<AmdGpu> gpu_;
  mutable std::mutex mu_;
  std::map<DevicePtr, std::unique_ptr<GpuMemory>> live_;
};

}  // namespace tg::amd
