// tg::cuda::PinnedHostBuffer: page-locked host memory owned by the caller, and the direct copies between it and
// device memory.
//
// The staging ring (staging_ring.h) copies from any host memory by first copying through its own pinned slots, so
// its speed is bounded by a host memcpy as well as by the DMA. A PinnedHostBuffer is memory the caller fills or reads
// in place and the GPU's copy engines reach directly, so a copy is a single DMA at full PCIe speed: what a
// bandwidth benchmark measures, and what a caller that reuses one host buffer for many copies wants.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "buffer.h"
#include "cuda_api.h"
#include "cuda_context.h"

namespace tg::cuda {

class PinnedHostBuffer {
 public:
  // Pins `nbytes` with cuMemHostAlloc (0 bytes pins 1, so every buffer has an address). Throws tg::OutOfMemory when
  // the driver reports CUDA_ERROR_OUT_OF_MEMORY and tg::RuntimeError for other failures, both naming the driver's
  // error.
  PinnedHostBuffer(std::shared_ptr<Context> ctx, size_t nbytes);
  // cuMemFreeHost. Never throws.
  ~PinnedHostBuffer() { release(); }
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  size_t nbytes() const noexcept { return nbytes_; }
  // The device whose context pinned the memory (the memory itself is usable with every device, see the .cpp).
  const std::string& device() const noexcept { return ctx_->name(); }
  bool freed() const noexcept { return host_ == nullptr; }

  // The host address. Throws tg::UsageError after free().
  void* host_ptr() const;

  // Unpins the memory now instead of at destruction. Idempotent. Throws tg::BufferInUse while pinned by a user.
  void free();

  // Users (a Python memoryview, a copy running without the GIL) hold the memory with pin()/unpin(), as for
  // tg::Buffer, so free() cannot pull it from under them. Thread-safe; every pin() needs exactly one unpin().
  void pin() noexcept { users_.fetch_add(1, std::memory_order_relaxed); }
  void unpin() noexcept { users_.fetch_sub(1, std::memory_order_relaxed); }
  bool pinned() const noexcept { return users_.load(std::memory_order_relaxed) != 0; }

 private:
  void release() noexcept;

  std::shared_ptr<Context> ctx_;  // kept so the driver still has a context when the memory is unpinned
  size_t nbytes_;
  void* host_ = nullptr;
  std::atomic<int> users_{0};
};

// Copies the first `nbytes` of `src` to the start of CUDA device buffer `dst`: one cuMemcpyHtoDAsync on dst's
// device's stream (after the work queued there), then waits for that stream, so it returns when the copy is done.
// Throws tg::UsageError naming both buffer sizes when `nbytes` exceeds either, or when either buffer was freed.
void copy_pinned_to_device(Buffer& dst, const PinnedHostBuffer& src, size_t nbytes);
// The other way: the first `nbytes` of CUDA device buffer `src` into the start of `dst` (cuMemcpyDtoHAsync, then
// a wait for src's device's stream). Same errors.
void copy_device_to_pinned(PinnedHostBuffer& dst, const Buffer& src, size_t nbytes);

}  // namespace tg::cuda
