// tg::cuda::CudaProgram: one kernel of a loaded CUDA module, launched on the device's stream with its arguments
// packed into one buffer exactly as the kernel's parameters are laid out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_context.h"
#include "runtime.h"

namespace tg::cuda {

// Where one kernel parameter lives in the packed argument buffer.
struct ParamSlot {
  size_t offset = 0;
  size_t size = 0;
};

class CudaProgram final : public Program {
 public:
  // Loads `image` (a cubin, a fatbin or PTX text) with cuModuleLoadData and finds kernel `name` in it. The
  // parameter layout comes from the driver (cuFuncGetParamInfo, CUDA 12.4+); on older drivers it is derived from
  // the arguments of each launch. Throws tg::RuntimeError with the driver's error (CUDA_ERROR_INVALID_IMAGE,
  // CUDA_ERROR_NOT_FOUND naming the kernel).
  CudaProgram(std::shared_ptr<Context> ctx, std::string name, std::string_view image);
  // Waits for queued work (a kernel of the module may be running), then unloads the module. Never throws.
  ~CudaProgram() override;

  const std::string& name() const noexcept override { return name_; }
  const std::string& device() const noexcept override { return ctx_->name(); }

  // Queues the kernel on the device's stream and returns. `dims` nullptr means one block of one thread. Throws
  // tg::UsageError for arguments that do not match the kernel (count, a pointer where an int goes, an int that does
  // not fit 32 bits) and for launch dimensions beyond the kernel's or the device's limits.
  void launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) override;
  // Same, then waits for the kernel; returns its GPU time in seconds, measured with events around it.
  std::optional<double> launch_timed(const KernelArg* args, size_t nargs, const LaunchDims* dims) override;

  // Writes the arguments into `out` (resized) at the kernel's parameter offsets, with no trailing padding: the
  // driver rejects a buffer larger than the parameters (as CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES). Pointers take 8
  // bytes, ints 4 (or 8 for a 64-bit parameter). Throws tg::UsageError like launch().
  void pack(const KernelArg* args, size_t nargs, std::vector<std::uint8_t>& out) const;
  // Makes every later launch give the kernel `bytes` of dynamic shared memory (an `extern __shared__` array), opting
  // in with cuFuncSetAttribute where that is above the default 48 KB. Throws tg::RuntimeError with the driver's
  // error where the device cannot give that much (CUDA_ERROR_INVALID_VALUE).
  void set_dynamic_shared(int bytes);
  int dynamic_shared() const noexcept { return dynamic_shared_; }
  // Whether the kernel's first instruction is griddepcontrol.wait (the renderer's kernels for sm_90 and later): it
  // may then follow another kernel in a graph through a programmatic edge, since it touches no memory before the
  // kernel ahead of it has completed. Set by the loader, which knows the source.
  void set_waits_for_grid(bool waits) noexcept { waits_for_grid_ = waits; }
  bool waits_for_grid() const noexcept { return waits_for_grid_; }
  // Throws tg::UsageError unless every dimension is at least 1 and within the kernel's and the device's limits.
  void check_dims(const LaunchDims& dims) const;

  CUfunction function() const noexcept { return function_; }
  const std::shared_ptr<Context>& context() const noexcept { return ctx_; }
  // The kernel's parameters as the driver reports them; empty when the driver cannot say (layout_known() false).
  const std::vector<ParamSlot>& params() const noexcept { return params_; }
  bool layout_known() const noexcept { return layout_known_; }
  int max_threads_per_block() const noexcept { return max_threads_; }
  int num_regs() const noexcept { return num_regs_; }

 private:
  void enqueue(const KernelArg* args, size_t nargs, const LaunchDims& dims);

  std::shared_ptr<Context> ctx_;
  std::string name_;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  std::vector<ParamSlot> params_;
  bool layout_known_ = false;
  int max_threads_ = 0;
  int num_regs_ = 0;
  int dynamic_shared_ = 0;
  bool waits_for_grid_ = false;
  std::uint32_t max_grid_[3] = {}, max_block_[3] = {};  // the device's limits, read once
  std::vector<std::uint8_t> scratch_;  // packed arguments of the launch in progress (launches are serialised)
  CUevent timing_[2] = {nullptr, nullptr};
};

}  // namespace tg::cuda
