// tg::cpu::Library: a shared object loaded from an in-memory image (what the C compiler produced).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "host_os.h"

namespace tg::cpu {

class Library {
 public:
  // Loads the image through the current HostOS. Throws tg::RuntimeError with the loader's text (dlerror()) if the
  // image is not a loadable shared object.
  explicit Library(std::string_view image);
  // Unloads through the HostOS that loaded it. Programs hold a shared_ptr to their Library, so this runs only
  // when no function from it can be called any more.
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // Address of a symbol. Throws tg::RuntimeError naming the symbol if it is missing. Thread-safe.
  void* symbol(const std::string& name) const;

 private:
  std::shared_ptr<HostOS> os_;
  void* handle_;
};

}  // namespace tg::cpu
