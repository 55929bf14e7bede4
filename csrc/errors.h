// Errors raised by tinygrad's C++ runtimes.
//
// Plain C++ (no Python): runtimes throw these, and csrc/pybind_helpers.h is the one place that turns them into
// Python exceptions:
//   tg::OutOfMemory   -> MemoryError
//   tg::RuntimeError  -> RuntimeError          (both carry .device, .call, .driver_error as attributes)
//   tg::BufferInUse   -> BufferError
//   tg::UsageError    -> ValueError            (a caller bug: bad sizes, use after free, wrong kind of argument)
//
// Header-only on purpose: every runtime is its own Python extension module, and keeping these inline avoids a
// shared library that all of them would have to link.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tg {

// A call into a driver or the OS failed. what() is the full, human-readable sentence; the parts are kept separately
// so Python code (and tests) can match on them without parsing text.
class RuntimeError : public std::runtime_error {
 public:
  // device: "CPU", "CUDA:0", ...     call: the failing driver/OS call, e.g. "cuMemAlloc_v2" or "dlopen"
  // driver_error: the driver's own name for the failure ("CUDA_ERROR_OUT_OF_MEMORY", dlerror() text, strerror text)
  // message: what tinygrad was trying to do, in words
  RuntimeError(std::string device, std::string call, std::string driver_error, std::string message)
      : std::runtime_error(format(device, call, driver_error, message)),
        device_(std::move(device)),
        call_(std::move(call)),
        driver_error_(std::move(driver_error)),
        message_(std::move(message)) {}

  const std::string& device() const noexcept { return device_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& driver_error() const noexcept { return driver_error_; }
  const std::string& message() const noexcept { return message_; }

 private:
  // "[CPU] dlopen: could not load kernel library (invalid ELF header)"
  static std::string format(const std::string& device, const std::string& call, const std::string& driver_error,
                            const std::string& message) {
    std::string s = "[" + device + "] " + call + ": " + message;
    if (!driver_error.empty()) s += " (" + driver_error + ")";
    return s;
  }

  std::string device_, call_, driver_error_, message_;
};

// An allocation failed. Separate type so Python sees MemoryError and tinygrad's allocator can free its LRU cache
// and retry.
class OutOfMemory : public RuntimeError {
 public:
  OutOfMemory(std::string device, std::string call, std::string driver_error, size_t requested_bytes,
              std::string message = {})
      : RuntimeError(std::move(device), std::move(call), std::move(driver_error),
                     message.empty() ? "out of memory allocating " + std::to_string(requested_bytes) + " bytes"
                                     : std::move(message)),
        requested_bytes_(requested_bytes) {}

  // 0 when the driver did not say how much was asked for (e.g. OOM reported by a launch).
  size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  size_t requested_bytes_;
};

// The caller broke a rule of the API (sizes, argument kinds, use after free). Not a driver failure.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A buffer cannot be freed because something still uses it (a Python memoryview, a running launch).
class BufferInUse : public UsageError {
 public:
  using UsageError::UsageError;
};

namespace detail {
template <class T>
struct identity {
  using type = T;
};
}  // namespace detail

// Checks the status code of a driver call (`ok` and `out_of_memory` convert to the status type, so a plain 0 works).
// `name_of(status)` gives the driver's name for the code (cuGetErrorName,
// hipGetErrorName, ...). A status equal to `out_of_memory` throws OutOfMemory instead of RuntimeError.
template <class Status, class NameOf>
inline void check_status(std::string_view device, std::string_view call, Status status,
                         typename detail::identity<Status>::type ok, NameOf&& name_of,
                         std::optional<typename detail::identity<Status>::type> out_of_memory = std::nullopt) {
  if (status == ok) return;
  std::string name = name_of(status);
  if (out_of_memory && status == *out_of_memory)
    throw OutOfMemory(std::string(device), std::string(call), std::move(name), 0, "out of memory");
  throw RuntimeError(std::string(device), std::string(call), std::move(name), "call failed");
}

// For POSIX calls that report failure through errno. Call it right after the failing call, before errno changes.
[[noreturn]] inline void throw_errno(std::string_view device, std::string_view call, std::string message) {
  int err = errno;
  if (err == ENOMEM) throw OutOfMemory(std::string(device), std::string(call), std::strerror(err), 0, message);
  throw RuntimeError(std::string(device), std::string(call), std::strerror(err), std::move(message));
}

}  // namespace tg

// TG_CHECK("CUDA", cuInit(0), CUDA_SUCCESS, name_fn): evaluates the call once and names it in the error by its
// source text, so error messages always say exactly which call failed.
#define TG_CHECK(device, expr, ok, name_of) ::tg::check_status((device), #expr, (expr), (ok), (name_of))
// Same, but `oom` (e.g. CUDA_ERROR_OUT_OF_MEMORY) becomes tg::OutOfMemory.
#define TG_CHECK_OOM(device, expr, ok, name_of, oom) \
  ::tg::check_status((device), #expr, (expr), (ok), (name_of), (oom))
