// tg::cuda::CudaAllocator: device memory of one GPU, with a cache of freed allocations and the staging ring.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_context.h"
#include "runtime.h"
#include "staging_ring.h"

namespace tg::cuda {

class CudaAllocator final : public Allocator {
 public:
  // `cache_freed`: keep freed allocations for reuse (see free()). Off when the caller caches on its own (tinygrad's
  // LRUAllocator), so that memory is not held twice.
  CudaAllocator(std::shared_ptr<Context> ctx, StagingConfig staging, bool cache_freed = true);
  // Frees the cache. Never throws.
  ~CudaAllocator() override;

  const std::string& device() const noexcept override { return ctx_->name(); }

  // A cached allocation of exactly this size if there is one, else cuMemAlloc_v2. On CUDA_ERROR_OUT_OF_MEMORY the
  // cache is emptied and the allocation retried once; if it still fails, throws tg::OutOfMemory naming the size
  // and CUDA_ERROR_OUT_OF_MEMORY (the process keeps working). 0 bytes allocates 1, so every buffer has an address.
  DevicePtr alloc(size_t nbytes, const AllocOptions& options) override;
  // With the cache on, keeps the allocation for reuse: all work goes to one stream in order, so a later user of the
  // memory runs after every queued user of it, and freeing needs no synchronisation. With it off, waits for the
  // queued work (which may still use the memory), then cuMemFree_v2.
  void free(DevicePtr ptr, size_t nbytes, const AllocOptions& options) noexcept override;
  // Through the staging ring (see staging_ring.h).
  void copyin(DevicePtr dst, const void* src, size_t nbytes) override;
  void copyout(void* dst, DevicePtr src, size_t nbytes) override;
  // From another CudaAllocator: cuMemcpyDtoDAsync_v2 on the same GPU, cuMemcpyPeerAsync between GPUs (ordered
  // after queued work on both and before later work on both). false for any other allocator.
  bool transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) override;

  // Waits for queued work and returns every cached allocation to the driver; returns the bytes released.
  size_t free_cache();
  size_t cached_bytes() const;

  const std::shared_ptr<Context>& context() const noexcept { return ctx_; }
  const StagingRing& staging() const noexcept { return staging_; }

 private:
  // cuMemFree_v2 of everything in the cache; the caller has synchronised. Never throws.
  size_t release_cache_locked() noexcept;

  std::shared_ptr<Context> ctx_;
  StagingRing staging_;
  bool cache_freed_;
  mutable std::mutex mutex_;  // free() may run from a Python finaliser on any thread
  std::unordered_map<size_t, std::vector<CUdeviceptr>> cache_;
  size_t cached_bytes_ = 0;
};

}  // namespace tg::cuda
