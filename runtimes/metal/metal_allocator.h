// tg::metal::MetalAllocator: MTLBuffers in shared storage. Apple GPUs share memory with the CPU, so a buffer's
// `contents` is its host view: copies are memcpy after the GPU work that may use the buffer has finished.
#pragma once

#include <memory>
#include <string>

#include "metal_context.h"
#include "runtime.h"

namespace tg::metal {

class MetalAllocator final : public Allocator {
 public:
  explicit MetalAllocator(std::shared_ptr<MetalContext> ctx) : ctx_(std::move(ctx)) {}
  const std::string& device() const noexcept override { return ctx_->name(); }
  // newBufferWithLength:options: (shared storage); the DevicePtr is the id<MTLBuffer>. tg::OutOfMemory on nil.
  DevicePtr alloc(size_t nbytes, const AllocOptions& options) override;
  // Waits for committed work first: a launch still queued may use the buffer.
  void free(DevicePtr ptr, size_t nbytes, const AllocOptions& options) noexcept override;
  void copyin(DevicePtr dst, const void* src, size_t nbytes) override;
  void copyout(void* dst, DevicePtr src, size_t nbytes) override;
  void* as_host(DevicePtr ptr) noexcept override;
  // newBufferWithBytesNoCopy:length:options:deallocator: over `host` (page-aligned, a whole number of pages): the
  // GPU reads and writes that memory in place. The caller keeps it alive until the buffer is freed. Returns 0 when
  // the memory is not page-aligned (the caller then copies).
  DevicePtr wrap_host(void* host, size_t nbytes);

 private:
  std::shared_ptr<MetalContext> ctx_;
};

// The allocator of one buffer over host memory the caller owns (zero-copy: Apple GPUs share memory with the CPU).
// `owner` keeps the memory alive while the buffer lives. alloc() wraps the memory once (tg::UsageError where it is not
// page-aligned or the size differs).
class HostMemoryAllocator final : public Allocator {
 public:
  HostMemoryAllocator(std::shared_ptr<MetalContext> ctx, void* host, size_t nbytes, std::shared_ptr<const void> owner)
      : ctx_(ctx), shared_(std::move(ctx)), host_(host), nbytes_(nbytes), owner_(std::move(owner)) {}
  const std::string& device() const noexcept override { return ctx_->name(); }
  DevicePtr alloc(size_t nbytes, const AllocOptions& options) override;
  void free(DevicePtr ptr, size_t nbytes, const AllocOptions& options) noexcept override;
  void copyin(DevicePtr dst, const void* src, size_t nbytes) override { shared_.copyin(dst, src, nbytes); }
  void copyout(void* dst, DevicePtr src, size_t nbytes) override { shared_.copyout(dst, src, nbytes); }
  void* as_host(DevicePtr ptr) noexcept override { return shared_.as_host(ptr); }

 private:
  std::shared_ptr<MetalContext> ctx_;
  MetalAllocator shared_;
  void* host_;
  size_t nbytes_;
  std::shared_ptr<const void> owner_;
};

}  // namespace tg::metal
