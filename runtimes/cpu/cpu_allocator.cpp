#include "cpu_allocator.h"

#include <cstdint>
#include <cstring>

#include "cpu_device.h"
#include "errors.h"
#include "host_os.h"

namespace tg::cpu {

const std::string& CpuAllocator::device() const noexcept {
  static const std::string name = kDeviceName;
  return name;
}

DevicePtr CpuAllocator::alloc(size_t nbytes, const AllocOptions& /*options*/) {
  if (nbytes > SIZE_MAX - kAlignment) throw OutOfMemory(device(), "aligned_alloc", "size overflow", nbytes);
  size_t rounded = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = host_os()->allocate(kAlignment, rounded);
  if (p == nullptr) throw OutOfMemory(device(), "aligned_alloc", "ENOMEM", nbytes);
  return reinterpret_cast<DevicePtr>(p);
}

void CpuAllocator::free(DevicePtr ptr, size_t /*nbytes*/, const AllocOptions& /*options*/) noexcept {
  host_os()->deallocate(reinterpret_cast<void*>(ptr));
}

void CpuAllocator::copyin(DevicePtr dst, const void* src, size_t nbytes) {
  if (nbytes != 0) std::memcpy(reinterpret_cast<void*>(dst), src, nbytes);
}

void CpuAllocator::copyout(void* dst, DevicePtr src, size_t nbytes) {
  if (nbytes != 0) std::memcpy(dst, reinterpret_cast<const void*>(src), nbytes);
}

bool CpuAllocator::transfer(DevicePtr dst, Allocator& src_allocator, DevicePtr src, size_t nbytes) {
  if (dynamic_cast<CpuAllocator*>(&src_allocator) == nullptr) return false;
  if (nbytes != 0) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), nbytes);
  return true;
}

std::shared_ptr<CpuAllocator> cpu_allocator() {
  static const std::shared_ptr<CpuAllocator> allocator = std::make_shared<CpuAllocator>();
  return allocator;
}

}  // namespace tg::cpu
