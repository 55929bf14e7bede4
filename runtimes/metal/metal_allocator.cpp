#include "metal_allocator.h"

#include <cstdint>
#include <cstring>

#include <unistd.h>

#include "errors.h"

namespace tg::metal {
namespace {

constexpr NSUInteger kStorageModeShared = 0;  // MTLResourceStorageModeShared (and the default CPU cache mode)
size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));  // 16 KB on Apple silicon
  return page;
}

id buffer(DevicePtr p) { return reinterpret_cast<id>(p); }

}  // namespace

DevicePtr MetalAllocator::alloc(size_t nbytes, const AllocOptions& /*options*/) {
  const ObjcApi& a = ctx_->api();
  // Metal refuses a length of 0; a 1-byte buffer keeps the contract's unique non-zero pointer
  id b = send<id>(a, ctx_->device(), a.sel.newBufferWithLength_options, NSUInteger(nbytes ? nbytes : 1),
                  kStorageModeShared);
  if (b == nullptr) throw OutOfMemory(ctx_->name(), "newBufferWithLength:options:", "nil", nbytes);
  return reinterpret_cast<DevicePtr>(b);
}

void MetalAllocator::free(DevicePtr ptr, size_t /*nbytes*/, const AllocOptions& /*options*/) noexcept {
  try {
    ctx_->synchronize();
  } catch (...) {
    // the failure belongs to the launch; it was reported to whoever waited, or is lost with the buffer
  }
  send<void>(ctx_->api(), buffer(ptr), ctx_->api().sel.release);
}

void MetalAllocator::copyin(DevicePtr dst, const void* src, size_t nbytes) {
  ctx_->synchronize();
  std::memcpy(as_host(dst), src, nbytes);
}

void MetalAllocator::copyout(void* dst, DevicePtr src, size_t nbytes) {
  ctx_->synchronize();
  std::memcpy(dst, as_host(src), nbytes);
}

void* MetalAllocator::as_host(DevicePtr ptr) noexcept {
  return send<void*>(ctx_->api(), buffer(ptr), ctx_->api().sel.contents);
}

DevicePtr MetalAllocator::wrap_host(void* host, size_t nbytes) {
  size_t page = page_size();
  if (reinterpret_cast<std::uintptr_t>(host) % page != 0 || nbytes == 0 || nbytes % page != 0) return 0;
  const ObjcApi& a = ctx_->api();
  id b = send<id>(a, ctx_->device(), a.sel.newBufferWithBytesNoCopy_length_options_deallocator, host,
                  NSUInteger(nbytes), kStorageModeShared, static_cast<void*>(nullptr));
  if (b == nullptr)
    throw OutOfMemory(ctx_->name(), "newBufferWithBytesNoCopy:length:options:deallocator:", "nil", nbytes);
  return reinterpret_cast<DevicePtr>(b);
}

DevicePtr HostMemoryAllocator::alloc(size_t nbytes, const AllocOptions& /*options*/) {
  if (nbytes != nbytes_) throw UsageError("a host-memory buffer is exactly the memory it wraps");
  DevicePtr p = shared_.wrap_host(host_, nbytes);
  if (p == 0)
    throw UsageError("Metal wraps host memory only at a page boundary and in whole pages (" +
                     std::to_string(page_size()) + " bytes); copy it into a DeviceBuffer instead");
  return p;
}

void HostMemoryAllocator::free(DevicePtr ptr, size_t nbytes, const AllocOptions& options) noexcept {
  shared_.free(ptr, nbytes, options);  // waits for queued work, then releases the MTLBuffer (not the memory)
  owner_.reset();
}

}  // namespace tg::metal
