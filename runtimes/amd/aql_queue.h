// tg::amd::AqlQueue: a user-mode AQL compute queue of one GPU, its completion signal and the kernarg arena.
//
// The ring holds 64-byte HSA dispatch packets; the CP reads them between its read index and the write index the
// host advances, after the doorbell tells it the new last index. Every packet sets the barrier bit, so kernels run
// in submission order, and names one completion signal that the host raised by one per packet and the CP lowers by
// one as each finishes: the queue is idle when it is back at zero. Waits poll it and sleep in
// AMDKFD_IOC_WAIT_EVENTS on the signal's event (the CP writes its mailbox and interrupts), up to a timeout after
// which the queue counts as hung and the wait throws.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kfd.h"
#include "kfd_abi.h"
#include "topology.h"

namespace tg::amd {

class AqlQueue {
 public:
  // Creates the queue on `gpu` (render node `drm_fd`, VM already acquired). `ring_packets`: a power of two.
  AqlQueue(std::shared_ptr<Kfd> kfd, const GpuNode& gpu, int drm_fd, const std::string& device,
           std::uint32_t ring_packets = 1024, std::uint64_t kernarg_bytes = std::uint64_t{16} << 20);
  ~AqlQueue();
  AqlQueue(const AqlQueue&) = delete;
  AqlQueue& operator=(const AqlQueue&) = delete;

  // Kernarg memory for one launch: `size` bytes at `align`, CPU-writable. Waits for the queue (and reuses the arena
  // from its start) when the arena is full.
  void* kernargs(std::uint64_t size, std::uint64_t align = 16);

  // Writes `packet` (header last) into the next slot, without ringing the doorbell. Waits for a free slot.
  void write(const hsa::DispatchPacket& packet);
  // Announces the packets written since the last ring to the CP (nothing if there are none, unless `force`).
  void ring(bool force = false);
  // Blocks until every packet has completed; tg::RuntimeError (the queue is hung) after the timeout.
  void wait_idle();

  std::uint64_t signal_address() const noexcept;
  std::uint32_t timeout_ms() const noexcept { return timeout_ms_; }
  void set_timeout_ms(std::uint32_t ms) noexcept { timeout_ms_ = ms; }
  std::uint64_t submitted() const noexcept { return written_; }

 private:
  void create(const GpuNode& gpu, int drm_fd, std::uint64_t kernarg_bytes);
  void release() noexcept;  // undoes create(), as far as it got
  void wait_signal();       // until the completion signal is back at zero, or the timeout
  hsa::Signal* signal() const noexcept;
  hsa::QueueIndices* indices() const noexcept;

  std::shared_ptr<Kfd> kfd_;
  std::string device_;
  std::uint32_t gpu_id_;
  std::uint32_t ring_packets_;
  std::unique_ptr<GpuMemory> ring_, indices_, eop_, ctx_save_, signal_page_, event_page_, kernarg_;
  std::uint32_t queue_id_ = 0;
  bool queue_created_ = false;
  std::uint32_t event_id_ = 0;
  bool event_created_ = false;
  void* doorbell_map_ = nullptr;
  volatile std::uint64_t* doorbell_ = nullptr;
  std::uint64_t written_ = 0;          // packets written to the ring (the next write index)
  std::uint64_t rung_ = 0;             // written_ when the doorbell was last rung
  std::uint64_t kernarg_used_ = 0;
  std::uint32_t timeout_ms_ = 30000;
};

// The sizes CREATE_QUEUE's context save/restore area must have for `gpu`, following the kernel's
// kfd_queue_ctx_save_restore_size (not checked on hardware: see the notes in aql_queue.cpp).
struct CwsrSizes {
  std::uint32_t ctl_stack_size, ctx_save_restore_size, debug_memory_size;
};
CwsrSizes cwsr_sizes(const GpuNode& gpu);

}  // namespace tg::amd
