// tg::amd::AmdGpu: what every object of one AMD device shares: the KFD, the GPU's topology node, its render node
// with the VM acquired for this process, its AQL queue for kernels and its SDMA queue for copies. Devices, allocators, programs and graphs hold it by
// shared_ptr, so the queue and the VM outlive the last of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "aql_queue.h"
#include "kfd.h"
#include "sdma_queue.h"
#include "topology.h"

namespace tg::amd {

class AmdGpu {
 public:
  // The GPU `ordinal` of the current OS table, shared with every device open on it: KFD lets a process bind a GPU's
  // VM to one render-node file only (a second ACQUIRE_VM is EBUSY), so there is one AmdGpu per GPU at a time.
  static std::shared_ptr<AmdGpu> open(int ordinal);

  // Opens GPU `ordinal` (among the topology's GPU nodes) of the current OS table: KFD, render node, ACQUIRE_VM,
  // the queue. Throws tg::RuntimeError naming KFD (no driver), the GPU count (no such GPU) or the failing call.
  explicit AmdGpu(int ordinal);
  ~AmdGpu();
  AmdGpu(const AmdGpu&) = delete;
  AmdGpu& operator=(const AmdGpu&) = delete;

  const std::string& name() const noexcept { return name_; }
  const GpuNode& node() const noexcept { return node_; }
  const std::shared_ptr<Kfd>& kfd() const noexcept { return kfd_; }
  int drm_fd() const noexcept { return drm_fd_; }
  AqlQueue& queue() noexcept { return *queue_; }
  SdmaQueue& sdma() noexcept { return *sdma_; }
  // Host-visible GTT memory that copies to and from VRAM pass through (kStagingBytes).
  GpuMemory& staging() noexcept { return *staging_; }
  static constexpr std::uint64_t kStagingBytes = std::uint64_t{4} << 20;

  std::unique_ptr<GpuMemory> allocate(std::uint64_t size, MemoryOptions options) {
    return std::make_unique<GpuMemory>(kfd_, node_.gpu_id, drm_fd_, size, options, name_);
  }

 private:
  std::string name_;
  GpuNode node_;
  std::shared_ptr<Kfd> kfd_;
  int drm_fd_ = -1;
  std::unique_ptr<AqlQueue> queue_;
  std::unique_ptr<SdmaQueue> sdma_;
  std::unique_ptr<GpuMemory> staging_;
};

}  // namespace tg::amd
