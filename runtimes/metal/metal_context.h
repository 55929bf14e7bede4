// tg::metal::MetalContext: one GPU as the runtime holds it: the MTLDevice, its command queue, and the command buffers
// committed and not yet waited for. Shared by the device, its allocator, programs and graphs.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "objc_api.h"

namespace tg::metal {

class MetalContext {
 public:
  // Opens the system's default GPU: tg::RuntimeError if Metal cannot be loaded or there is no GPU.
  explicit MetalContext(std::shared_ptr<const ObjcApi> api);
  ~MetalContext();  // waits for committed work (errors dropped: destructors never throw), then releases
  MetalContext(const MetalContext&) = delete;
  MetalContext& operator=(const MetalContext&) = delete;

  const ObjcApi& api() const noexcept { return *api_; }
  const std::shared_ptr<const ObjcApi>& api_ptr() const noexcept { return api_; }
  const std::string& name() const noexcept { return name_; }        // "METAL"
  const std::string& gpu_name() const noexcept { return gpu_name_; }  // the MTLDevice's name
  id device() const noexcept { return device_.get(); }
  id queue() const noexcept { return queue_.get(); }
  NSUInteger max_threadgroup_memory() const noexcept { return max_threadgroup_memory_; }
  // Whether graphs replay through indirect command buffers (pipelines are then made able to go into one).
  bool supports_icb() const noexcept { return supports_icb_; }
  // Whether kernels may use simdgroup_matrix (the tensor cores the renderer spells for METAL).
  bool supports_simdgroup_matrix() const noexcept { return supports_simdgroup_matrix_; }

  // Retains the (autoreleased) command buffer, commits it and keeps it until synchronize() has checked it. With more
  // than kMaxInFlight waiting, the oldest is waited for first, so a long stream of launches holds bounded memory.
  void commit(id command_buffer);
  // Waits for every committed command buffer and releases them; throws the first one's error (its NSError's code
  // name, e.g. MTLCommandBufferErrorPageFault), after all have been released.
  void synchronize();
  // Waits for one retained command buffer and throws its error, if any (`what` says what it ran).
  void wait(id command_buffer, const std::string& what) const;

  static constexpr size_t kMaxInFlight = 64;

 private:
  std::shared_ptr<const ObjcApi> api_;
  std::string name_ = "METAL", gpu_name_;
  Owned device_, queue_;
  NSUInteger max_threadgroup_memory_ = 0;
  bool supports_icb_ = false;
  bool supports_simdgroup_matrix_ = false;
  std::mutex mutex_;
  std::deque<Owned> in_flight_;
};

}  // namespace tg::metal
