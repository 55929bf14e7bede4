#include "amd_os.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace tg::amd {
namespace {

int real_open(void*, const char* path, int flags) { return ::open(path, flags | O_CLOEXEC); }
int real_close(void*, int fd) { return ::close(fd); }
long real_read(void*, int fd, void* buf, size_t n) { return static_cast<long>(::read(fd, buf, n)); }
int real_ioctl(void*, int fd, unsigned long request, void* arg) {
  int r;
  do {
    r = ::ioctl(fd, request, arg);
  } while (r == -1 && (errno == EINTR || errno == EAGAIN));  // KFD restarts interrupted waits this way too
  return r;
}
void* real_mmap(void*, void* addr, size_t len, int prot, int flags, int fd, std::int64_t off) {
  return ::mmap(addr, len, prot, flags, fd, static_cast<off_t>(off));
}
int real_munmap(void*, void* addr, size_t len) { return ::munmap(addr, len); }
void real_ring_doorbell(void*, volatile std::uint64_t* addr, std::uint64_t value) {
  // the packets (and the write index) must be visible to the GPU before the doorbell is
  std::atomic_thread_fence(std::memory_order_release);
  *addr = value;
}

const tg_amd_os kReal = {nullptr, &real_open, &real_close, &real_read, &real_ioctl, &real_mmap, &real_munmap,
                         &real_ring_doorbell};
std::atomic<const tg_amd_os*> g_current{&kReal};

}  // namespace

const tg_amd_os* real_os_table() noexcept { return &kReal; }
const tg_amd_os* os_table() noexcept { return g_current.load(); }
void set_os_table(const tg_amd_os* table) noexcept { g_current.store(table != nullptr ? table : &kReal); }

}  // namespace tg::amd
