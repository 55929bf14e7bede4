// tg::amd::CodeObject: an AMDGPU code object (an ELF64 shared object from clang/lld), parsed for loading.
//
// What a loader needs (AMDGPUUsage): the allocatable sections placed at base + sh_addr (their file offsets differ),
// the kernels, found by their "<name>.kd" symbols (the 64-byte kernel descriptor the dispatch packet points at),
// and the R_AMDGPU_RELATIVE64 relocations to apply once the base is known. Every offset and size is checked against
// the image, so a truncated or foreign file is a tg::RuntimeError naming what is wrong, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kfd_abi.h"

namespace tg::amd {

struct CodeObjectKernel {
  std::string name;                 // without ".kd"
  std::uint64_t descriptor_offset;  // of the descriptor, from the image base (64-byte aligned)
  elf::KernelDescriptor descriptor;
  std::uint64_t entry_offset() const {
    return descriptor_offset + static_cast<std::uint64_t>(descriptor.kernel_code_entry_byte_offset);
  }
};

struct CodeObject {
  std::uint32_t e_flags = 0;      // EF_AMDGPU_MACH in the low byte (0x41: gfx1100, 0x3f: gfx90a, 0x4c: gfx942)
  std::uint8_t abi_version = 0;   // 3 for code object v5
  std::string image;              // the loaded image: every allocatable section at its sh_addr, .bss zeroed
  std::vector<CodeObjectKernel> kernels;
  std::vector<std::pair<std::uint64_t, std::int64_t>> relative_relocs;  // (offset, addend): *(base+offset) = base+addend

  // The kernel `name`, or tg::RuntimeError listing the kernels there are.
  const CodeObjectKernel& kernel(const std::string& name) const;
};

// Parses `bytes`; `device` names the device in errors.
CodeObject parse_code_object(std::string_view bytes, const std::string& device);

// The gfx target of an EF_AMDGPU_MACH value ("gfx1100"), or "" if unknown.
std::string gfx_target_of_mach(std::uint32_t mach);

}  // namespace tg::amd
