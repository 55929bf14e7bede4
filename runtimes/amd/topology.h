// tg::amd::discover_gpus: the GPUs KFD exposes, read from its topology in sysfs (through the OS table, so the fake
// KFD of the tests serves its own machines).
//
// Each node under /sys/devices/virtual/kfd/kfd/topology/nodes/<n>/ has `gpu_id` (0 for CPU nodes; the handle every
// ioctl takes) and `properties` ("name value" lines). Nodes are numbered from 0 without gaps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "amd_os.h"

namespace tg::amd {

inline constexpr char kTopologyRoot[] = "/sys/devices/virtual/kfd/kfd/topology/nodes";

struct GpuNode {
  std::uint32_t node = 0;     // the topology node number
  std::uint32_t gpu_id = 0;
  std::uint32_t gfx_target_version = 0;  // e.g. 110000, 90010, 90402
  std::string gfx;                       // "gfx1100", "gfx90a", "gfx942"
  std::uint32_t render_minor = 0;        // /dev/dri/renderD<minor>
  std::uint32_t cu_count = 0;            // compute units (simd_count / simd_per_cu)
  std::uint32_t simd_per_cu = 0, max_waves_per_simd = 0, num_xcc = 1;
  std::uint32_t lds_size_kb = 0;
  std::uint32_t wave_size = 0;           // of compiled kernels: 32 on RDNA (gfx10+), 64 on CDNA
  std::map<std::string, std::uint64_t> properties;  // everything the properties file says
};

// "gfx" + major + minor and stepping as hex digits: 110000 -> gfx1100, 90010 -> gfx90a, 90402 -> gfx942.
std::string gfx_name(std::uint32_t gfx_target_version);

// The GPU nodes under `root` in node order (CPU nodes skipped). Throws tg::RuntimeError naming KFD when the topology
// is missing (no amdgpu driver) or a file is malformed.
std::vector<GpuNode> discover_gpus(const Os& os, const std::string& root = kTopologyRoot);

}  // namespace tg::amd
