// tg::metal::MetalProgram: one kernel as a compute pipeline, from MSL source or a metallib, launched as one command
// buffer (an autorelease pool around each launch releases the command buffer and encoder Metal hands back).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "metal_context.h"
#include "runtime.h"

namespace tg::metal {

// A library from `image`: a metallib (it starts with "MTLB") through newLibraryWithData:error:, else MSL source
// through newLibraryWithSource:options:error:. tg::RuntimeError with the compiler's log on failure.
Owned new_library(MetalContext& ctx, std::string_view image);

class MetalProgram final : public Program {
 public:
  MetalProgram(std::shared_ptr<MetalContext> ctx, std::string name, std::string_view image);
  const std::string& name() const noexcept override { return name_; }
  const std::string& device() const noexcept override { return ctx_->name(); }
  // Encodes one dispatch in a command buffer of its own and commits it (no wait). `dims` is required: Metal has no
  // default grid. tg::UsageError for more threads per threadgroup than the pipeline allows.
  void launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) override;
  // The same, then waits: GPUEndTime - GPUStartTime of the command buffer.
  std::optional<double> launch_timed(const KernelArg* args, size_t nargs, const LaunchDims* dims) override;

  // Sets the pipeline and the arguments on a compute encoder and dispatches (for launches and graphs).
  void encode(id encoder, const KernelArg* args, size_t nargs, const LaunchDims& dims) const;
  void check_dims(const LaunchDims* dims) const;
  id pipeline() const noexcept { return pipeline_.get(); }
  NSUInteger max_threads() const noexcept { return max_threads_; }
  NSUInteger simd_width() const noexcept { return simd_width_; }

 private:
  id commit_launch(const KernelArg* args, size_t nargs, const LaunchDims* dims, bool keep);

  std::shared_ptr<MetalContext> ctx_;
  std::string name_;
  Owned library_, function_, pipeline_;
  NSUInteger max_threads_ = 0, simd_width_ = 0;
};

}  // namespace tg::metal
