// tg::amd::SdmaQueue: a user-mode SDMA queue of one GPU, the DMA engine that copies between host-visible staging
// memory and VRAM the CPU cannot map (GPUs without a resizable BAR), and within VRAM.
//
// copy() writes COPY_LINEAR packets of at most 4 MiB and a FENCE that stores a rising value once they are done,
// rings the doorbell with the new write pointer (bytes) and waits for the fence, up to the timeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kfd.h"
#include "topology.h"

namespace tg::amd {

class SdmaQueue {
 public:
  SdmaQueue(std::shared_ptr<Kfd> kfd, const GpuNode& gpu, int drm_fd, const std::string& device,
            std::uint32_t ring_bytes = 256 * 1024);
  ~SdmaQueue();
  SdmaQueue(const SdmaQueue&) = delete;
  SdmaQueue& operator=(const SdmaQueue&) = delete;

  // Copies `nbytes` from GPU address `src` to `dst` (both mapped in this GPU's VM) and waits until done.
  void copy(std::uint64_t dst, std::uint64_t src, std::uint64_t nbytes, std::uint32_t timeout_ms);
  std::uint64_t copies() const noexcept { return fence_value_; }

 private:
  void create(const GpuNode& gpu, int drm_fd, std::uint32_t ring_bytes);
  void release() noexcept;
  void emit(const std::uint32_t* dwords, std::uint32_t n);

  std::shared_ptr<Kfd> kfd_;
  std::string device_;
  std::unique_ptr<GpuMemory> ring_, pointers_, fence_;
  std::uint32_t queue_id_ = 0;
  bool queue_created_ = false;
  void* doorbell_map_ = nullptr;
  volatile std::uint64_t* doorbell_ = nullptr;
  std::uint64_t wptr_ = 0;  // bytes written, ever (the ring offset is wptr_ % size)
  std::uint32_t fence_value_ = 0;
};

}  // namespace tg::amd
