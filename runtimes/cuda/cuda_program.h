// tg::cuda::CudaProgram: one kernel of a loaded CUDA module, launched on the device's stream with its arguments
// packed into one buffer exactly as the kernel's parameters are laid out.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
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

// One TMA tensor map a kernel takes as a trailing `const __grid_constant__` 128-byte parameter: the global tensor it
// describes, as the kernel's ProgramSpec gives it (tinygrad/codegen/program.py, TensorMapSpec). The
// runtime encodes it at pack time from the address of the launch's pointer argument `arg`.
struct TensorMapSpec {
  size_t arg = 0;                      // the ordinary argument (a buffer) whose address the map describes
  std::uint64_t offset = 0;            // bytes added to that address: the view's start
  std::uint32_t elem = 0;              // element size in bytes: 1, 2, 4 or 8
  std::vector<std::uint64_t> dims;     // rank (1..5) sizes in elements, innermost first
  std::vector<std::uint64_t> strides;  // rank - 1 byte strides of dims 1..
  std::vector<std::uint32_t> box;      // rank box sizes in elements, each 1..256
  std::uint32_t swizzle = 0;           // shared-memory swizzle in bytes: 0, 32, 64 or 128
};

// The spec as the renderer's annotation spells it ("arg=0 offset=0 elem=2 dims=64,64 ..."), for messages.
std::string describe(const TensorMapSpec& spec);

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
  // bytes, ints 4 (or 8 for a 64-bit parameter). Throws tg::UsageError like launch(). With tensor maps (below),
  // `args` are the ordinary arguments only, and each map is encoded from its buffer argument's address plus its
  // offset into its own 128-byte parameter (re-encoded only when that address changes); throws tg::RuntimeError
  // with the driver's error (CUDA_ERROR_INVALID_VALUE for a misaligned address or stride) where that fails.
  void pack(const KernelArg* args, size_t nargs, std::vector<std::uint8_t>& out) const;
  // Declares the kernel's trailing tensor-map parameters, one spec each, in parameter order (none: clears them).
  // Checks each spec (rank 1..5, box sizes 1..256, element size 1/2/4/8, swizzle 0/32/64/128) and, where the driver
  // reports the layout, that the kernel ends in that many 128-byte parameters after the ordinary ones and that
  // `arg` is one of those, a pointer. The maps go where that layout says (a 64-byte aligned parameter's offset
  // depends on where the driver's parameter space starts), so a driver that reports none (before CUDA 12.4) is
  // refused. Throws tg::UsageError for a spec that does not fit the kernel or a driver without the layout, and
  // tg::RuntimeError where the driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12.0+).
  void set_tensor_maps(std::vector<TensorMapSpec> specs);
  const std::vector<TensorMapSpec>& tensor_maps() const noexcept { return map_specs_; }
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
  // Writes map `i`'s descriptor for `address` at `dst` (128 bytes), from the cache when the address is unchanged.
  void write_tensor_map(size_t i, std::uint64_t address, std::uint8_t* dst) const;
  // Throws the error for a driver without cuTensorMapEncodeTiled.
  [[noreturn]] void no_tensor_maps() const;

  // The last descriptor encoded for one map and the address it was encoded for.
  struct MapCache {
    bool valid = false;
    std::uint64_t address = 0;
    TensorMap encoded{};
  };

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
  std::vector<TensorMapSpec> map_specs_;
  // pack() is const and graphs pack on their own threads' behalf: the cache of encoded maps has its own lock
  mutable std::mutex map_mutex_;
  mutable std::vector<MapCache> map_cache_;
  CUevent timing_[2] = {nullptr, nullptr};
};

}  // namespace tg::cuda
