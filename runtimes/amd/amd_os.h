// tg::amd::os: every operating-system call the AMD runtime makes, behind one C function table.
//
// The runtime talks to the GPU only through /dev/kfd, the render node and sysfs: open/read/close, ioctl, mmap and
// munmap, plus the doorbell store that hands queued packets to the command processor. Routing all of them through
// this table (and nowhere else) lets tests install an in-process fake KFD (test/native/fake_kfd) that serves the
// same calls, executes the queued packets when the doorbell is written and injects faults, with no GPU and no
// LD_PRELOAD. The fake plugs in through _amd.set_os(table address); no C++ type crosses between the libraries.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// Each slot behaves as the libc call of the same name (failure: -1 or MAP_FAILED with errno set); `self` is passed
// back to each. A table handed to set_os_table must stay valid for the life of the process.
struct tg_amd_os {
  void* self;
  int (*open)(void* self, const char* path, int flags);
  int (*close)(void* self, int fd);
  long (*read)(void* self, int fd, void* buf, size_t nbytes);
  int (*ioctl)(void* self, int fd, unsigned long request, void* arg);
  void* (*mmap)(void* self, void* addr, size_t length, int prot, int flags, int fd, std::int64_t offset);
  int (*munmap)(void* self, void* addr, size_t length);
  // Stores `value` to the doorbell at `addr` (a mapping of /dev/kfd) after the packets it announces are visible.
  void (*ring_doorbell)(void* self, volatile std::uint64_t* addr, std::uint64_t value);
};

}  // extern "C"

namespace tg::amd {

// The real calls (libc), for the process's life.
const tg_amd_os* real_os_table() noexcept;
// The table the next call uses (thread-safe); set_os_table(nullptr) restores the real one. Devices keep the table
// they were opened with, so a device outlives a later swap.
const tg_amd_os* os_table() noexcept;
void set_os_table(const tg_amd_os* table) noexcept;

// The table a device was opened with, as methods.
class Os {
 public:
  explicit Os(const tg_amd_os* t) noexcept : t_(t) {}
  int open(const char* path, int flags) const { return t_->open(t_->self, path, flags); }
  int close(int fd) const { return t_->close(t_->self, fd); }
  long read(int fd, void* buf, size_t n) const { return t_->read(t_->self, fd, buf, n); }
  int ioctl(int fd, unsigned long request, void* arg) const { return t_->ioctl(t_->self, fd, request, arg); }
  void* mmap(void* addr, size_t len, int prot, int flags, int fd, std::int64_t off) const {
    return t_->mmap(t_->self, addr, len, prot, flags, fd, off);
  }
  int munmap(void* addr, size_t len) const { return t_->munmap(t_->self, addr, len); }
  void ring_doorbell(volatile std::uint64_t* addr, std::uint64_t v) const { t_->ring_doorbell(t_->self, addr, v); }

 private:
  const tg_amd_os* t_;
};

}  // namespace tg::amd
