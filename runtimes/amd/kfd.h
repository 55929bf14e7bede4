// tg::amd::Kfd and GpuMemory: /dev/kfd, a GPU's VM on it, and memory in that VM.
//
// Every ioctl goes through Kfd::ioctl, which turns a failure into a tg::RuntimeError (tg::OutOfMemory for ENOMEM)
// naming the device, the ioctl (AMDKFD_IOC_...) and the errno. Memory follows the KFD recipe: reserve a CPU range
// (PROT_NONE), ALLOC_MEMORY_OF_GPU at that address (GPU VA = CPU VA, so one pointer serves both), mmap the render
// node over the reservation for a CPU view, MAP_MEMORY_TO_GPU; freeing undoes the steps in reverse.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "amd_os.h"
#include "kfd_abi.h"
#include "topology.h"

namespace tg::amd {

inline constexpr char kKfdPath[] = "/dev/kfd";

// One open /dev/kfd: the process's KFD context. Shared by the devices opened through the same OS table.
class Kfd {
 public:
  // Opens /dev/kfd and checks the API version (major 1). Throws tg::RuntimeError naming KFD when it is missing.
  explicit Kfd(const tg_amd_os* os);
  ~Kfd();
  Kfd(const Kfd&) = delete;
  Kfd& operator=(const Kfd&) = delete;

  const Os& os() const noexcept { return os_; }
  int fd() const noexcept { return fd_; }
  std::uint32_t major() const noexcept { return major_; }
  std::uint32_t minor() const noexcept { return minor_; }

  // The ioctl, or a tg::RuntimeError naming `device`, the ioctl and errno (`what`: what was being done).
  void ioctl(unsigned long request, void* args, const std::string& device, const char* what) const;

 private:
  Os os_;
  int fd_ = -1;
  std::uint32_t major_ = 0, minor_ = 0;
};

// The Kfd of the current OS table, opened on first use and shared while any device holds it.
std::shared_ptr<Kfd> kfd_instance();

enum class MemoryKind { Vram, Gtt, Userptr };

struct MemoryOptions {
  MemoryKind kind = MemoryKind::Vram;
  bool cpu_visible = true;  // VRAM: PUBLIC (needs a resizable BAR) and mapped for the CPU
  bool uncached = false;    // COHERENT | UNCACHED: rings, signals, event pages
  bool executable = false;
};

// One allocation in a GPU's VM, at the same address for CPU and GPU. Freed (unmapped, unmapped from the CPU,
// released) by the destructor.
class GpuMemory {
 public:
  // Allocates `size` bytes (rounded up to pages) on GPU `gpu_id` whose render node is `drm_fd`.
  GpuMemory(std::shared_ptr<Kfd> kfd, std::uint32_t gpu_id, int drm_fd, std::uint64_t size, MemoryOptions options,
            const std::string& device);
  ~GpuMemory();
  GpuMemory(const GpuMemory&) = delete;
  GpuMemory& operator=(const GpuMemory&) = delete;

  std::uint64_t va() const noexcept { return va_; }
  void* cpu() const noexcept { return cpu_mapped_ ? reinterpret_cast<void*>(va_) : nullptr; }
  std::uint64_t size() const noexcept { return size_; }
  std::uint64_t handle() const noexcept { return handle_; }

 private:
  void release() noexcept;

  std::shared_ptr<Kfd> kfd_;
  std::uint32_t gpu_id_;
  std::string device_;
  std::uint64_t va_ = 0, size_ = 0, handle_ = 0;
  bool allocated_ = false, cpu_mapped_ = false, gpu_mapped_ = false;
  bool reserved_ = false;
};

}  // namespace tg::amd
