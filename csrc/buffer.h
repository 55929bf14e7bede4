// tg::Buffer: one owned device allocation, shared by Python objects, graphs and launches through shared_ptr.
//
// It exists so that use-after-free is an exception instead of a crash: the allocation can be released early with
// free() (Python's HostBuffer.free()), after which every access throws tg::UsageError. Launches, graph replays
// and exported Python buffer views "pin" the buffer; free() while pinned throws tg::BufferInUse.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "errors.h"
#include "runtime.h"

namespace tg {

class Buffer {
 public:
  // Allocates `nbytes` from `allocator` (throws what the allocator throws, e.g. tg::OutOfMemory).
  Buffer(std::shared_ptr<Allocator> allocator, size_t nbytes, AllocOptions options = {})
      : allocator_(std::move(allocator)), nbytes_(nbytes), options_(options) {
    ptr_ = allocator_->alloc(nbytes_, options_);
  }
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t nbytes() const noexcept { return nbytes_; }
  const std::string& device() const noexcept { return allocator_->device(); }
  const std::shared_ptr<Allocator>& allocator() const noexcept { return allocator_; }
  bool freed() const noexcept { return ptr_ == 0; }

  // The device address. Throws tg::UsageError after free().
  DevicePtr ptr() const {
    if (ptr_ == 0) throw UsageError("buffer of " + std::to_string(nbytes_) + " bytes was freed");
    return ptr_;
  }

  // A host pointer to the memory. Throws tg::UsageError after free() or if the memory is not host-visible.
  void* host_ptr() const {
    void* p = allocator_->as_host(ptr());
    if (p == nullptr) throw UsageError("buffer on " + device() + " is not host-visible");
    return p;
  }

  // Releases the memory now instead of at destruction. Idempotent. Throws tg::BufferInUse while pinned.
  void free() {
    if (int n = pins_.load(); n != 0)
      throw BufferInUse("cannot free a buffer of " + std::to_string(nbytes_) + " bytes: it has " +
                        std::to_string(n) + " live user(s) (a memoryview, numpy array or running launch)");
    release();
  }

  // Copies `n` bytes from host memory to the start of the buffer. Throws tg::UsageError if n > nbytes().
  void copyin(const void* src, size_t n) {
    check_fits("copyin", n);
    allocator_->copyin(ptr(), src, n);
  }

  // Copies the first `n` bytes of the buffer to host memory. Throws tg::UsageError if n > nbytes().
  void copyout(void* dst, size_t n) const {
    check_fits("copyout", n);
    allocator_->copyout(dst, ptr(), n);
  }

  // Pinning: while the count is non-zero free() refuses. Thread-safe. Every pin() needs exactly one unpin().
  void pin() noexcept { pins_.fetch_add(1, std::memory_order_relaxed); }
  void unpin() noexcept { pins_.fetch_sub(1, std::memory_order_relaxed); }
  // Whether a view or launch holds the buffer now (an allocator cache must not hand pinned memory out again).
  bool pinned() const noexcept { return pins_.load(std::memory_order_relaxed) != 0; }

 private:
  void check_fits(const char* what, size_t n) const {
    if (n > nbytes_)
      throw UsageError(std::string(what) + " of " + std::to_string(n) + " bytes does not fit a buffer of " +
                       std::to_string(nbytes_) + " bytes");
  }
  void release() noexcept {
    if (ptr_ != 0) allocator_->free(ptr_, nbytes_, options_);
    ptr_ = 0;
  }

  std::shared_ptr<Allocator> allocator_;
  DevicePtr ptr_ = 0;
  size_t nbytes_;
  AllocOptions options_;
  std::atomic<int> pins_{0};
};

// RAII pin, for launches and copies that run without the GIL: pins on construction, unpins on destruction. A
// template so other owners of memory with the same pin()/unpin() contract (the CUDA runtime's pinned host buffers)
// are held the same way; `BufferPin pin(buffer)` deduces the type.
template <class T = Buffer>
class BufferPin {
 public:
  explicit BufferPin(T& b) noexcept : b_(&b) { b_->pin(); }
  ~BufferPin() {
    if (b_) b_->unpin();
  }
  BufferPin(BufferPin&& o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
  BufferPin(const BufferPin&) = delete;
  BufferPin& operator=(const BufferPin&) = delete;
  BufferPin& operator=(BufferPin&&) = delete;

 private:
  T* b_;
};

}  // namespace tg
