#include "amd_program.h"

#include <cstring>

#include "errors.h"

namespace tg::amd {

AmdProgram::AmdProgram(std::shared_ptr<AmdGpu> gpu, const std::string& name, std::string_view image)
    : gpu_(std::move(gpu)), name_(name) {
  CodeObject co = parse_code_object(image, gpu_->name());
  kernel_ = co.kernel(name);
  const elf::KernelDescriptor& kd = kernel_.descriptor;
  if (kd.private_segment_fixed_size != 0)
    throw RuntimeError(gpu_->name(), "load_program", "",
                       "kernel " + name + " needs " + std::to_string(kd.private_segment_fixed_size) +
                           " bytes of scratch a work-item; this runtime gives kernels no scratch yet");
  if (kd.group_segment_fixed_size > gpu_->node().lds_size_kb * 1024u)
    throw RuntimeError(gpu_->name(), "load_program", "",
                       "kernel " + name + " needs " + std::to_string(kd.group_segment_fixed_size) +
                           " bytes of LDS; the GPU has " + std::to_string(gpu_->node().lds_size_kb) + " KB");
  std::string mach = gfx_target_of_mach(co.e_flags);
  if (!mach.empty() && mach != gpu_->node().gfx)
    throw RuntimeError(gpu_->name(), "load_program", "",
                       "the code object is for " + mach + ", the GPU is " + gpu_->node().gfx);
  kernarg_size_ = kd.kernarg_size;
  code_ = gpu_->allocate(co.image.size(), MemoryOptions{MemoryKind::Vram, true, false, true});
  std::string& bytes = co.image;
  for (const auto& [offset, addend] : co.relative_relocs) {
    std::uint64_t v = code_->va() + static_cast<std::uint64_t>(addend);
    std::memcpy(bytes.data() + offset, &v, 8);
  }
  std::memcpy(code_->cpu(), bytes.data(), bytes.size());
}

std::vector<size_t> AmdProgram::arg_offsets(const KernelArg* args, size_t nargs) {
  std::vector<size_t> out;
  size_t at = 0;
  for (size_t i = 0; i < nargs; ++i) {
    size_t size = args[i].kind == KernelArg::Kind::Pointer ? 8 : 4;
    at = (at + size - 1) / size * size;
    out.push_back(at);
    at += size;
  }
  out.push_back(at);  // the end
  return out;
}

std::string AmdProgram::pack_args(const KernelArg* args, size_t nargs) const {
  std::vector<size_t> at = arg_offsets(args, nargs);
  if (at.back() > kernarg_size_)
    throw UsageError("kernel " + name_ + " takes " + std::to_string(kernarg_size_) + " bytes of arguments; " +
                     std::to_string(nargs) + " arguments need " + std::to_string(at.back()));
  std::string out(kernarg_size_, '\0');
  for (size_t i = 0; i < nargs; ++i) {
    if (args[i].kind == KernelArg::Kind::Pointer) {
      std::uint64_t p = args[i].bits;
      std::memcpy(out.data() + at[i], &p, 8);
    } else {
      auto v = static_cast<std::int32_t>(args[i].as_int());
      std::memcpy(out.data() + at[i], &v, 4);
    }
  }
  return out;
}

hsa::DispatchPacket AmdProgram::packet(const LaunchDims* dims) const {
  LaunchDims d = dims != nullptr ? *dims : LaunchDims{};
  std::uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (d.global[i] == 0 || d.local[i] == 0) throw UsageError("kernel " + name_ + ": a launch dimension is 0");
    if (d.local[i] > 1024) throw UsageError("kernel " + name_ + ": workgroup dimension over 1024");
    threads *= d.local[i];
    if (std::uint64_t{d.global[i]} * d.local[i] > 0xffffffffull)
      throw UsageError("kernel " + name_ + ": grid of more than 2^32 work-items in one dimension");
  }
  if (threads > 1024) throw UsageError("kernel " + name_ + ": workgroup of " + std::to_string(threads) +
                                       " work-items (at most 1024)");
  hsa::DispatchPacket p{};
  p.header = static_cast<std::uint16_t>(hsa::kPacketKernelDispatch | (1u << hsa::kHeaderBarrier) |
                                        (hsa::kScopeSystem << hsa::kHeaderAcquireScope) |
                                        (hsa::kScopeSystem << hsa::kHeaderReleaseScope));
  p.setup = 3 << hsa::kSetupDimensions;
  p.workgroup_size_x = static_cast<std::uint16_t>(d.local[0]);
  p.workgroup_size_y = static_cast<std::uint16_t>(d.local[1]);
  p.workgroup_size_z = static_cast<std::uint16_t>(d.local[2]);
  p.grid_size_x = d.global[0] * d.local[0];
  p.grid_size_y = d.global[1] * d.local[1];
  p.grid_size_z = d.global[2] * d.local[2];
  p.private_segment_size = kernel_.descriptor.private_segment_fixed_size;
  p.group_segment_size = kernel_.descriptor.group_segment_fixed_size;
  p.kernel_object = descriptor_address();
  p.completion_signal = gpu_->queue().signal_address();
  return p;
}

void AmdProgram::launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) {
  hsa::DispatchPacket p = packet(dims);
  std::string bytes = pack_args(args, nargs);
  AqlQueue& q = gpu_->queue();
  void* kernargs = q.kernargs(bytes.size(), 16);
  std::memcpy(kernargs, bytes.data(), bytes.size());
  p.kernarg_address = reinterpret_cast<std::uint64_t>(kernargs);
  q.write(p);
  q.ring();
}

}  // namespace tg::amd
