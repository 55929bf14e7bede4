// The real HostOS, and the process-wide "current" one.
#include "host_os.h"

#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tg::cpu {
namespace {

// What load_library hands out. The memfd stays open while the library is loaded: glibc recognises an already
// loaded object by its path, and "/proc/self/fd/N" would name a different library once N is reused, so N must not
// be reused until the object is gone. NOTE: dlclose need not unload it (another dlopen of the same path holds it,
// or the object is marked not to be deleted), so a path is also checked before it is used, and an fd whose object
// outlives dlclose is never closed.
struct LoadedLibrary {
  void* dl;
  int fd;  // -1 when loaded from a temporary file
};

// Whether an object loaded in this process has the name `path` (dlopen of that path would return it).
bool name_is_loaded(const std::string& path) {
  struct Search {
    const char* path;
    bool found;
  } search{path.c_str(), false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::strcmp(info->dlpi_name, s->path) == 0) {
          s->found = true;
          return 1;
        }
        return 0;
      },
      &search);
  return search.found;
}

std::string errno_text() { return std::strerror(errno); }

std::string dl_error_text() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

bool write_all(int fd, const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::write(fd, p, nbytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    nbytes -= static_cast<size_t>(n);
  }
  return true;
}

// Preferred: an anonymous in-memory file, so nothing touches the disk and nothing is left behind on a crash.
void* load_via_memfd(const void* image, size_t nbytes, OsError* err) {
#if defined(__linux__) && defined(MFD_CLOEXEC)
  int fd = memfd_create("tinygrad-kernel", MFD_CLOEXEC);
  if (fd < 0) {
    *err = {"memfd_create", errno_text()};
    return nullptr;
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  // a number whose path still names a loaded object would load that object again: move to a free one
  for (int tries = 0; tries < 64 && name_is_loaded(path); tries++) {
    int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
    if (moved < 0) break;
    ::close(fd);
    fd = moved;
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  if (name_is_loaded(path)) {
    *err = {"dlopen", path + " still names a loaded library"};
  } else if (!write_all(fd, image, nbytes)) {
    *err = {"write", errno_text()};
  } else if (::access(path.c_str(), R_OK) != 0) {  // /proc not mounted (some containers)
    *err = {"access", path + ": " + errno_text()};
  } else if (void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    return new LoadedLibrary{dl, fd};
  } else {
    *err = {"dlopen", dl_error_text()};
  }
  ::close(fd);
  return nullptr;
#else
  (void)image;
  (void)nbytes;
  *err = {"memfd_create", "not available on this OS"};
  return nullptr;
#endif
}

// Fallback: a temporary file, unlinked right after dlopen (the mapping keeps the contents alive).
void* load_via_tempfile(const void* image, size_t nbytes, OsError* err) {
  const char* dir = std::getenv("TMPDIR");
  std::string templ = std::string(dir && *dir ? dir : "/tmp") + "/tinygrad-kernel-XXXXXX";
  std::vector<char> path(templ.begin(), templ.end());
  path.push_back('\0');
  int fd = ::mkstemp(path.data());
  if (fd < 0) {
    *err = {"mkstemp", templ + ": " + errno_text()};
    return nullptr;
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  void* dl = nullptr;
  if (!write_all(fd, image, nbytes)) {
    *err = {"write", errno_text()};
  } else if ((dl = dlopen(path.data(), RTLD_NOW | RTLD_LOCAL)) == nullptr) {
    *err = {"dlopen", dl_error_text()};
  }
  ::unlink(path.data());
  ::close(fd);
  return dl ? new LoadedLibrary{dl, -1} : nullptr;
}

class RealHostOS final : public HostOS {
 public:
  void* allocate(size_t alignment, size_t nbytes) noexcept override {
    void* p = nullptr;
    return posix_memalign(&p, alignment, nbytes) == 0 ? p : nullptr;
  }

  void deallocate(void* p) noexcept override { std::free(p); }

  void* load_library(const void* image, size_t nbytes, OsError* err) override {
    OsError memfd_err, file_err;
    if (void* lib = load_via_memfd(image, nbytes, &memfd_err)) return lib;
    // Also retried after a dlopen failure: some systems refuse to map executable code from a memfd.
    if (void* lib = load_via_tempfile(image, nbytes, &file_err)) return lib;
    // A dlopen error from the memfd path is about the image itself; report that one. Otherwise the memfd path was
    // unavailable and the temporary file's error is the relevant one.
    *err = memfd_err.call == "dlopen" ? memfd_err : file_err;
    return nullptr;
  }

  void* find_symbol(void* library, const char* name, OsError* err) override {
    dlerror();  // clear: a NULL result is only an error if dlerror() says so
    void* sym = dlsym(static_cast<LoadedLibrary*>(library)->dl, name);
    if (sym == nullptr) {
      const char* e = dlerror();
      *err = {"dlsym", e ? e : std::string(name) + " resolves to NULL"};
    }
    return sym;
  }

  void unload_library(void* library) noexcept override {
    auto* lib = static_cast<LoadedLibrary*>(library);
    dlclose(lib->dl);
    if (lib->fd >= 0) {
      // an object that outlives dlclose keeps its fd, so its path never comes to name another library
      if (!name_is_loaded("/proc/self/fd/" + std::to_string(lib->fd))) ::close(lib->fd);
    }
    delete lib;
  }
};

std::mutex g_mutex;
std::shared_ptr<HostOS> g_current;  // null means the real one

// ---- C tables <-> HostOS ----

void copy_text(char* dst, size_t size, const std::string& src) noexcept {
  size_t n = src.size() < size - 1 ? src.size() : size - 1;
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

void to_c(const OsError& e, tg_os_error* out) noexcept {
  copy_text(out->call, sizeof(out->call), e.call);
  copy_text(out->text, sizeof(out->text), e.text);
}

// A HostOS that calls a C table (what set_host_os_table installs).
class TableHostOS final : public HostOS {
 public:
  explicit TableHostOS(const tg_host_os* table) : t_(table) {}
  void* allocate(size_t alignment, size_t nbytes) noexcept override {
    return t_->allocate(t_->self, alignment, nbytes);
  }
  void deallocate(void* p) noexcept override { t_->deallocate(t_->self, p); }
  void* load_library(const void* image, size_t nbytes, OsError* err) override {
    return from_c(t_->load_library(t_->self, image, nbytes, &c_err_), err);
  }
  void* find_symbol(void* library, const char* name, OsError* err) override {
    return from_c(t_->find_symbol(t_->self, library, name, &c_err_), err);
  }
  void unload_library(void* library) noexcept override { t_->unload_library(t_->self, library); }

 private:
  void* from_c(void* result, OsError* err) {
    if (result == nullptr) *err = {c_err_.call, c_err_.text};
    return result;
  }
  const tg_host_os* t_;
  // NOTE: thread_local: a HostOS may be called from several threads at once (loads with the GIL released)
  static thread_local tg_os_error c_err_;
};
thread_local tg_os_error TableHostOS::c_err_;

// The real HostOS as a C table.
void* real_allocate(void*, size_t alignment, size_t nbytes) { return real_host_os()->allocate(alignment, nbytes); }
void real_deallocate(void*, void* p) { real_host_os()->deallocate(p); }
void* real_load_library(void*, const void* image, size_t nbytes, tg_os_error* err) {
  OsError e;
  void* lib = real_host_os()->load_library(image, nbytes, &e);
  if (lib == nullptr) to_c(e, err);
  return lib;
}
void* real_find_symbol(void*, void* library, const char* name, tg_os_error* err) {
  OsError e;
  void* sym = real_host_os()->find_symbol(library, name, &e);
  if (sym == nullptr) to_c(e, err);
  return sym;
}
void real_unload_library(void*, void* library) { real_host_os()->unload_library(library); }

const tg_host_os kRealTable = {nullptr,          &real_allocate,    &real_deallocate, &real_load_library,
                               &real_find_symbol, &real_unload_library};

}  // namespace

std::shared_ptr<HostOS> real_host_os() {
  static const std::shared_ptr<HostOS> real = std::make_shared<RealHostOS>();
  return real;
}

std::shared_ptr<HostOS> host_os() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_current) return g_current;
  }
  return real_host_os();
}

void set_host_os(std::shared_ptr<HostOS> os) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_current = std::move(os);
}

}  // namespace tg::cpu

namespace tg::cpu {

const tg_host_os* real_host_os_table() { return &kRealTable; }

void set_host_os_table(const tg_host_os* table) {
  set_host_os(table != nullptr && table != &kRealTable ? std::make_shared<TableHostOS>(table) : nullptr);
}

}  // namespace tg::cpu
