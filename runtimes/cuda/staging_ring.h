// tg::cuda::StagingRing: host <-> device copies through a ring of pinned (page-locked) host buffers.
//
// Only page-locked memory copies asynchronously and at full PCIe speed, and pinning is expensive (tens of ms for
// 256 MiB), so a few pinned slots are allocated once and reused. A copy is cut into slot-sized chunks; each chunk's
// DMA is queued on the device's stream and followed by an event, and a slot is reused only after its event has
// fired. So the host's memcpy of one chunk overlaps the DMA of the previous ones; a large chunk's memcpy is split
// across a few threads, since one core's memcpy is slower than the DMA.
#pragma once

#include <cstddef>
#include <vector>

#include "cuda_api.h"

namespace tg::cuda {

class Context;

struct StagingConfig {
  size_t slot_bytes = size_t{4} << 20;  // 4 MiB: large enough for full DMA speed, small enough to overlap
  int slots = 8;
};

class StagingRing {
 public:
  // Slots are allocated on first use, so a process that never copies pins nothing. Throws tg::UsageError for a
  // config with no slots or zero-sized ones.
  StagingRing(const Context& ctx, StagingConfig config);
  // Waits for copies still reading or writing the slots, then frees them. Never throws.
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // Queues the copy of `nbytes` from host `src` to device `dst`. Returns once `src` has been read (copied into the
  // slots): the DMA of the last chunks may still be in flight, ordered on the stream before any later work.
  void copyin(CUdeviceptr dst, const void* src, size_t nbytes);
  // Copies `nbytes` from device `src` to host `dst`, after everything queued on the stream before it; returns when
  // `dst` holds the data.
  void copyout(void* dst, CUdeviceptr src, size_t nbytes);

  const StagingConfig& config() const noexcept { return config_; }
  // How many slots have been pinned so far.
  int pinned_slots() const noexcept;

 private:
  struct Slot {
    void* host = nullptr;
    CUevent done = nullptr;  // recorded after the last DMA that used the slot
    bool in_flight = false;  // `done` has been recorded and not yet waited for
  };
  // The next slot in ring order, allocated if new and waited for if a DMA still uses it.
  Slot& next_slot();
  void wait(Slot& slot);

  const Context& ctx_;
  StagingConfig config_;
  std::vector<Slot> slots_;
  size_t next_ = 0;
};

}  // namespace tg::cuda
