// tg::cpu::HostOS: the operating-system calls the CPU runtime makes, behind one virtual interface.
//
// Keeping them here (and nowhere else) lets tests swap in a fake that fails on demand, so the error paths of the
// allocator and the loader are exercised without exhausting memory or corrupting files. The fake lives in the tests
// (test/native), not in the module: it plugs in through the C function table below (_cpu.set_host_os), so no C++
// type crosses between the two libraries.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

extern "C" {

// What went wrong in an OS call, as C: NUL-terminated texts, truncated to fit.
struct tg_os_error {
  char call[64];
  char text[448];
};

// The HostOS (below) as a C function table. Every slot behaves as the HostOS method of the same name; `self` is
// passed back to each. A table handed to set_host_os_table must stay valid for the life of the process.
struct tg_host_os {
  void* self;
  void* (*allocate)(void* self, size_t alignment, size_t nbytes);
  void (*deallocate)(void* self, void* p);
  void* (*load_library)(void* self, const void* image, size_t nbytes, tg_os_error* err);
  void* (*find_symbol)(void* self, void* library, const char* name, tg_os_error* err);
  void (*unload_library)(void* self, void* library);
};

}  // extern "C"

namespace tg::cpu {

// What went wrong in an OS call: the call's name and the OS's text (dlerror(), strerror()).
struct OsError {
  std::string call;
  std::string text;
};

class HostOS {
 public:
  virtual ~HostOS() = default;

  // Memory aligned to `alignment` (a power of two); `nbytes` is a non-zero multiple of it. nullptr on failure.
  virtual void* allocate(size_t alignment, size_t nbytes) noexcept = 0;
  // Frees memory from allocate(). nullptr is a no-op.
  virtual void deallocate(void* p) noexcept = 0;

  // Loads a shared object from an in-memory image; returns an opaque library handle, or nullptr with *err set.
  // The image may be dropped after the call.
  virtual void* load_library(const void* image, size_t nbytes, OsError* err) = 0;
  // Address of `name` in a loaded library, or nullptr with *err set.
  virtual void* find_symbol(void* library, const char* name, OsError* err) = 0;
  // Unloads a library from load_library(). Its symbols must no longer be in use.
  virtual void unload_library(void* library) noexcept = 0;
};

// The real implementation (posix_memalign, memfd_create + dlopen, ...). Lives for the whole process.
std::shared_ptr<HostOS> real_host_os();

// The implementation used by the next call into the CPU runtime. Thread-safe.
std::shared_ptr<HostOS> host_os();

// Installs a replacement (nullptr restores the real one). Affects later calls only, and objects keep the HostOS
// that created them where it matters (a library is unloaded by the HostOS that loaded it). Memory is always
// freed through the current HostOS, so a replacement must free what the real one allocated: wrap the real one,
// as test/native's fault injector does.
void set_host_os(std::shared_ptr<HostOS> os);

// The real implementation as a C table (for a replacement to delegate to), and set_host_os for a C table
// (nullptr restores the real one).
const tg_host_os* real_host_os_table();
void set_host_os_table(const tg_host_os* table);

}  // namespace tg::cpu
