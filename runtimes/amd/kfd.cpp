#include "kfd.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "errors.h"

namespace tg::amd {
namespace {

std::string errno_text(int err) {
  const char* name = strerrorname_np(err);
  return std::string(name != nullptr ? name : "errno " + std::to_string(err)) + ": " + std::strerror(err);
}

}  // namespace

const char* kfd::ioctl_name(unsigned long request) {
  switch (ioc_nr(request)) {
    case 0x01: return "AMDKFD_IOC_GET_VERSION";
    case 0x02: return "AMDKFD_IOC_CREATE_QUEUE";
    case 0x03: return "AMDKFD_IOC_DESTROY_QUEUE";
    case 0x08: return "AMDKFD_IOC_CREATE_EVENT";
    case 0x09: return "AMDKFD_IOC_DESTROY_EVENT";
    case 0x0C: return "AMDKFD_IOC_WAIT_EVENTS";
    case 0x15: return "AMDKFD_IOC_ACQUIRE_VM";
    case 0x16: return "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU";
    case 0x17: return "AMDKFD_IOC_FREE_MEMORY_OF_GPU";
    case 0x18: return "AMDKFD_IOC_MAP_MEMORY_TO_GPU";
    case 0x19: return "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU";
    default: return "AMDKFD_IOC_(unknown)";
  }
}

Kfd::Kfd(const tg_amd_os* os) : os_(os) {
  fd_ = os_.open(kKfdPath, O_RDWR);
  if (fd_ < 0) {
    int err = errno;
    throw RuntimeError("AMD", std::string("open(") + kKfdPath + ")", errno_text(err),
                       "cannot open the KFD, the amdgpu kernel driver's compute interface: no AMD GPU driver here, "
                       "or this user may not use it (the 'render' group)");
  }
  kfd::GetVersionArgs v{};
  try {
    ioctl(kfd::kGetVersion, &v, "AMD", "asking the KFD for its version");
  } catch (...) {
    os_.close(fd_);
    throw;
  }
  major_ = v.major_version;
  minor_ = v.minor_version;
  if (major_ != 1) {
    os_.close(fd_);
    throw RuntimeError("AMD", "AMDKFD_IOC_GET_VERSION", "", "KFD API " + std::to_string(major_) + "." +
                                                                std::to_string(minor_) + " is not 1.x");
  }
}

Kfd::~Kfd() {
  if (fd_ >= 0) os_.close(fd_);
}

void Kfd::ioctl(unsigned long request, void* args, const std::string& device, const char* what) const {
  if (os_.ioctl(fd_, request, args) == 0) return;
  int err = errno;
  if (err == ENOMEM)
    throw OutOfMemory(device, kfd::ioctl_name(request), errno_text(err), 0, std::string(what) + ": out of memory");
  throw RuntimeError(device, kfd::ioctl_name(request), errno_text(err), what);
}

std::shared_ptr<Kfd> kfd_instance() {
  static std::mutex mu;
  static std::weak_ptr<Kfd> shared;
  static const tg_amd_os* shared_os = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  const tg_amd_os* os = os_table();
  std::shared_ptr<Kfd> k = shared.lock();
  if (k && shared_os == os) return k;
  k = std::make_shared<Kfd>(os);
  shared = k;
  shared_os = os;
  return k;
}

GpuMemory::GpuMemory(std::shared_ptr<Kfd> kfd, std::uint32_t gpu_id, int drm_fd, std::uint64_t size,
                     MemoryOptions options, const std::string& device)
    : kfd_(std::move(kfd)), gpu_id_(gpu_id), device_(device) {
  const Os& os = kfd_->os();
  size_ = (std::max<std::uint64_t>(size, 1) + kfd::kPageSize - 1) & ~(kfd::kPageSize - 1);
  bool userptr = options.kind == MemoryKind::Userptr;
  // the address first: a CPU range nobody else will take, which the GPU mapping then shares
  void* at = os.mmap(nullptr, size_, userptr ? PROT_READ | PROT_WRITE : PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | (userptr ? 0 : MAP_NORESERVE), -1, 0);
  if (at == MAP_FAILED) throw_errno(device_, "mmap", "reserving " + std::to_string(size_) + " bytes of address space");
  va_ = reinterpret_cast<std::uint64_t>(at);
  reserved_ = true;
  try {
    kfd::AllocMemoryArgs a{};
    a.va_addr = va_;
    a.size = size_;
    a.gpu_id = gpu_id_;
    a.flags = kfd::kMemWritable | kfd::kMemNoSubstitute | (options.executable ? kfd::kMemExecutable : 0);
    switch (options.kind) {
      case MemoryKind::Vram: a.flags |= kfd::kMemVram | (options.cpu_visible ? kfd::kMemPublic : 0); break;
      case MemoryKind::Gtt: a.flags |= kfd::kMemGtt; break;
      case MemoryKind::Userptr: a.flags |= kfd::kMemUserptr; a.mmap_offset = va_; break;
    }
    if (options.uncached) a.flags |= kfd::kMemCoherent | kfd::kMemUncached;
    kfd_->ioctl(kfd::kAllocMemory, &a, device_, "allocating GPU memory");
    handle_ = a.handle;
    allocated_ = true;
    if (!userptr && (options.kind == MemoryKind::Gtt || options.cpu_visible)) {
      void* view = os.mmap(at, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, drm_fd,
                           static_cast<std::int64_t>(a.mmap_offset));
      if (view == MAP_FAILED) throw_errno(device_, "mmap", "mapping GPU memory for the CPU (render node)");
      cpu_mapped_ = true;
    }
    cpu_mapped_ = cpu_mapped_ || userptr;
    kfd::MapMemoryArgs m{};
    std::uint32_t ids[1] = {gpu_id_};
    m.handle = handle_;
    m.device_ids_array_ptr = reinterpret_cast<std::uint64_t>(ids);
    m.n_devices = 1;
    kfd_->ioctl(kfd::kMapMemory, &m, device_, "mapping memory into the GPU's VM");
    if (m.n_success != 1)
      throw RuntimeError(device_, "AMDKFD_IOC_MAP_MEMORY_TO_GPU", "", "mapped to " + std::to_string(m.n_success) +
                                                                          " of 1 GPUs");
    gpu_mapped_ = true;
  } catch (...) {
    release();
    throw;
  }
}

GpuMemory::~GpuMemory() { release(); }

void GpuMemory::release() noexcept {
  const Os& os = kfd_->os();
  if (gpu_mapped_) {
    kfd::MapMemoryArgs m{};
    std::uint32_t ids[1] = {gpu_id_};
    m.handle = handle_;
    m.device_ids_array_ptr = reinterpret_cast<std::uint64_t>(ids);
    m.n_devices = 1;
    os.ioctl(kfd_->fd(), kfd::kUnmapMemory, &m);  // nothing to do about a failure while freeing
    gpu_mapped_ = false;
  }
  if (reserved_) {
    os.munmap(reinterpret_cast<void*>(va_), size_);
    reserved_ = cpu_mapped_ = false;
  }
  if (allocated_) {
    kfd::FreeMemoryArgs f{handle_};
    os.ioctl(kfd_->fd(), kfd::kFreeMemory, &f);
    allocated_ = false;
  }
}

}  // namespace tg::amd
