// tg::amd::AmdProgram: one kernel of a code object, loaded into GPU memory and launched with AQL dispatch packets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "amd_gpu.h"
#include "code_object.h"
#include "runtime.h"

namespace tg::amd {

class AmdProgram final : public Program {
 public:
  // Parses the code object, copies its image to executable GPU memory (relocated) and finds kernel `name`.
  AmdProgram(std::shared_ptr<AmdGpu> gpu, const std::string& name, std::string_view image);
  const std::string& name() const noexcept override { return name_; }
  const std::string& device() const noexcept override { return gpu_->name(); }
  void launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) override;

  // The packet of a launch with these dimensions, its kernarg address still 0 (graphs prebuild these).
  hsa::DispatchPacket packet(const LaunchDims* dims) const;
  // The kernarg bytes of these arguments: pointers 8 bytes, ints 4, each at its natural alignment, padded with
  // zeros to the descriptor's kernarg size. tg::UsageError if they outgrow it.
  std::string pack_args(const KernelArg* args, size_t nargs) const;
  // Offset of argument `i` in pack_args' bytes (same layout rule).
  static std::vector<size_t> arg_offsets(const KernelArg* args, size_t nargs);

  const elf::KernelDescriptor& descriptor() const noexcept { return kernel_.descriptor; }
  std::uint64_t descriptor_address() const noexcept { return code_->va() + kernel_.descriptor_offset; }
  std::uint64_t kernarg_size() const noexcept { return kernarg_size_; }
  const std::shared_ptr<AmdGpu>& gpu() const noexcept { return gpu_; }

 private:
  std::shared_ptr<AmdGpu> gpu_;
  std::string name_;
  CodeObjectKernel kernel_;
  std::unique_ptr<GpuMemory> code_;
  std::uint64_t kernarg_size_ = 0;
};

}  // namespace tg::amd
