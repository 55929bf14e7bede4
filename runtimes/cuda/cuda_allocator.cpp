#include "cuda_allocator.h"

#include <algorithm>
#include <utility>

#include "errors.h"

namespace tg::cuda {

CudaAllocator::CudaAllocator(std::shared_ptr<Context> ctx, StagingConfig staging, bool cache_freed)
    : ctx_(std::move(ctx)), staging_(*ctx_, staging), cache_freed_(cache_freed) {}

CudaAllocator::~CudaAllocator() {
  try {
    ctx_->synchronize();
  } catch (...) {  // a failed GPU cannot run anything more either; free what we can
  }
  std::lock_guard<std::mutex> lock(mutex_);
  release_cache_locked();
}

DevicePtr CudaAllocator::alloc(size_t nbytes, const AllocOptions& /*options*/) {
  const size_t n = std::max<size_t>(nbytes, 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(n);
    if (it != cache_.end() && !it->second.empty()) {
      CUdeviceptr p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= n;
      return static_cast<DevicePtr>(p);
    }
  }
  ctx_->make_current();
  const DriverApi& d = ctx_->api();
  CUdeviceptr p = 0;
  CUresult r = d.cuMemAlloc(&p, n);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && cached_bytes() > 0) {
    free_cache();  // memory we hold for reuse may be what is missing
    r = d.cuMemAlloc(&p, n);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free_bytes = 0, total_bytes = 0;
    std::string detail;
    if (d.cuMemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS)
      detail = " (" + std::to_string(free_bytes) + " of " + std::to_string(total_bytes) + " bytes free)";
    throw OutOfMemory(ctx_->name(), "cuMemAlloc_v2", error_name(d, r), nbytes,
                      "out of memory allocating " + std::to_string(nbytes) + " bytes" + detail);
  }
  ctx_->check("cuMemAlloc_v2", r, "allocating device memory");
  return static_cast<DevicePtr>(p);
}

void CudaAllocator::free(DevicePtr ptr, size_t nbytes, const AllocOptions& /*options*/) noexcept {
  const size_t n = std::max<size_t>(nbytes, 1);
  if (cache_freed_) {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      cache_[n].push_back(static_cast<CUdeviceptr>(ptr));
      cached_bytes_ += n;
      return;
    } catch (...) {  // no memory for the cache's bookkeeping: give the allocation back instead
    }
  }
  try {
    ctx_->synchronize();
  } catch (...) {
  }
  ctx_->api().cuMemFree(static_cast<CUdeviceptr>(ptr));
}

void CudaAllocator::copyin(DevicePtr dst, const void* src, size_t nbytes) {
  staging_.copyin(static_cast<CUdeviceptr>(dst), src, nbytes);
}

void CudaAllocator::copyout(void* dst, DevicePtr src, size_t nbytes) {
  staging_.copyout(dst, static_cast<CUdeviceptr>(src), nbytes);
}

bool CudaAllocator::transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) {
  auto* other = dynamic_cast<CudaAllocator*>(&src_allocator);
  if (other == nullptr) return false;
  if (nbytes == 0) return true;
  const DriverApi& d = ctx_->api();
  if (other->ctx_ == ctx_) {
    ctx_->make_current();
    ctx_->check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync(dst, src, nbytes, ctx_->stream()),
                "queueing a device-to-device copy");
    return true;
  }
  // Across GPUs the copy goes on our stream: first wait for the work queued on the source GPU (it may still be
  // writing `src`), and afterwards make the source GPU's later work wait for the copy (it may overwrite `src`).
  CudaEvent source_ready(other->ctx_, /*timing=*/false);
  ctx_->make_current();
  ctx_->check("cuStreamWaitEvent", d.cuStreamWaitEvent(ctx_->stream(), source_ready.handle(), 0),
              "ordering a peer copy after the source GPU's work");
  ctx_->enable_peer_access(*other->ctx_);
  ctx_->check("cuMemcpyPeerAsync",
              d.cuMemcpyPeerAsync(dst, ctx_->context(), src, other->ctx_->context(), nbytes, ctx_->stream()),
              "queueing a copy between GPUs");
  CudaEvent copied(ctx_, /*timing=*/false);
  other->ctx_->make_current();
  other->ctx_->check("cuStreamWaitEvent", d.cuStreamWaitEvent(other->ctx_->stream(), copied.handle(), 0),
                     "ordering the source GPU's later work after a peer copy");
  return true;
}

size_t CudaAllocator::free_cache() {
  ctx_->synchronize();
  std::lock_guard<std::mutex> lock(mutex_);
  return release_cache_locked();
}

size_t CudaAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

size_t CudaAllocator::release_cache_locked() noexcept {
  try {
    ctx_->make_current();
  } catch (...) {
  }
  size_t released = 0;
  for (auto& [size, ptrs] : cache_) {
    for (CUdeviceptr p : ptrs) ctx_->api().cuMemFree(p);
    released += size * ptrs.size();
  }
  cache_.clear();
  cached_bytes_ = 0;
  return released;
}

}  // namespace tg::cuda
