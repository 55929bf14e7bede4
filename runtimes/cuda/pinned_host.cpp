#include "pinned_host.h"

#include <algorithm>
#include <string>
#include <utility>

#include "cuda_allocator.h"
#include "errors.h"

namespace tg::cuda {
namespace {

// The context of a buffer of this backend: the copy runs on its device's stream, with its context current.
const Context& context_of(const Buffer& buffer) {
  const auto* cuda = dynamic_cast<const CudaAllocator*>(buffer.allocator().get());
  if (cuda == nullptr) throw UsageError("a pinned copy needs a CUDA device buffer, got one on " + buffer.device());
  return *cuda->context();
}

// Both sizes in the message: which of the two buffers is too small is what the caller needs to know.
void check_fits(const char* direction, size_t nbytes, size_t host_nbytes, size_t device_nbytes) {
  if (nbytes > host_nbytes || nbytes > device_nbytes)
    throw UsageError("copying " + std::to_string(nbytes) + " bytes " + direction +
                     " does not fit: the pinned host buffer has " + std::to_string(host_nbytes) +
                     " bytes and the device buffer " + std::to_string(device_nbytes) + " bytes");
}

}  // namespace

PinnedHostBuffer::PinnedHostBuffer(std::shared_ptr<Context> ctx, size_t nbytes)
    : ctx_(std::move(ctx)), nbytes_(nbytes) {
  ctx_->make_current();
  // PORTABLE: pinned for every context, so the memory copies at full speed to and from any GPU of the process,
  // not only the one whose context happened to be current here.
  CUresult r = ctx_->api().cuMemHostAlloc(&host_, std::max<size_t>(nbytes_, 1), CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    host_ = nullptr;
    ctx_->fail("cuMemHostAlloc", r, "allocating " + std::to_string(nbytes_) + " bytes of pinned host memory");
  }
}

void* PinnedHostBuffer::host_ptr() const {
  if (host_ == nullptr) throw UsageError("pinned host buffer of " + std::to_string(nbytes_) + " bytes was freed");
  return host_;
}

void PinnedHostBuffer::free() {
  if (int n = users_.load(); n != 0)
    throw BufferInUse("cannot free a pinned host buffer of " + std::to_string(nbytes_) + " bytes: it has " +
                      std::to_string(n) + " live user(s) (a memoryview, numpy array or running copy)");
  release();
}

void PinnedHostBuffer::release() noexcept {
  if (host_ == nullptr) return;
  try {
    ctx_->make_current();
  } catch (...) {  // a failing driver may still free the memory; unpinning is best effort either way
  }
  ctx_->api().cuMemFreeHost(host_);
  host_ = nullptr;
}

void copy_pinned_to_device(Buffer& dst, const PinnedHostBuffer& src, size_t nbytes) {
  check_fits("from pinned host memory to the device", nbytes, src.nbytes(), dst.nbytes());
  const void* host = src.host_ptr();  // both throw if freed, before anything is queued
  CUdeviceptr device = static_cast<CUdeviceptr>(dst.ptr());
  const Context& ctx = context_of(dst);
  if (nbytes == 0) return;
  ctx.make_current();
  ctx.check("cuMemcpyHtoDAsync_v2", ctx.api().cuMemcpyHtoDAsync(device, host, nbytes, ctx.stream()),
            "queueing a copy from pinned host memory");
  ctx.synchronize();
}

void copy_device_to_pinned(PinnedHostBuffer& dst, const Buffer& src, size_t nbytes) {
  check_fits("from the device to pinned host memory", nbytes, dst.nbytes(), src.nbytes());
  void* host = dst.host_ptr();
  CUdeviceptr device = static_cast<CUdeviceptr>(src.ptr());
  const Context& ctx = context_of(src);
  if (nbytes == 0) return;
  ctx.make_current();
  ctx.check("cuMemcpyDtoHAsync_v2", ctx.api().cuMemcpyDtoHAsync(host, device, nbytes, ctx.stream()),
            "queueing a copy to pinned host memory");
  ctx.synchronize();
}

}  // namespace tg::cuda
