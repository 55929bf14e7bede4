#include "cpu_library.h"

#include "cpu_device.h"
#include "errors.h"

namespace tg::cpu {

Library::Library(std::string_view image) : os_(host_os()) {
  OsError err;
  handle_ = os_->load_library(image.data(), image.size(), &err);
  if (handle_ == nullptr)
    throw RuntimeError(kDeviceName, err.call, err.text,
                       "could not load kernel library from a " + std::to_string(image.size()) + "-byte image");
}

Library::~Library() { os_->unload_library(handle_); }

void* Library::symbol(const std::string& name) const {
  OsError err;
  void* sym = os_->find_symbol(handle_, name.c_str(), &err);
  if (sym == nullptr)
    throw RuntimeError(kDeviceName, err.call, err.text, "symbol '" + name + "' not found in kernel library");
  return sym;
}

}  // namespace tg::cpu
