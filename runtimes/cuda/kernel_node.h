// A launch as a graph kernel node: what CudaGraph and CudaMultiGraph both give cuGraphAddKernelNode and
// cuGraphExecKernelNodeSetParams for one kernel with packed arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_api.h"
#include "cuda_program.h"
#include "runtime.h"

namespace tg::cuda {

inline bool same_dims(const LaunchDims& a, const LaunchDims& b) {
  for (int i = 0; i < 3; ++i)
    if (a.global[i] != b.global[i] || a.local[i] != b.local[i]) return false;
  return true;
}

// The node's parameters for `program` at `dims` with the arguments packed in `packed` (`packed_size` bytes). `extra`
// is filled to point at them, and the result points at `extra`: all three must stay where they are while the
// driver reads the parameters (it copies the packed arguments into the node).
inline KernelNodeParams kernel_node_params(const CudaProgram& program, const LaunchDims& dims,
                                           std::vector<std::uint8_t>& packed, size_t& packed_size, void* (&extra)[5]) {
  extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
  extra[1] = packed.data();
  extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
  extra[3] = &packed_size;
  extra[4] = CU_LAUNCH_PARAM_END;
  KernelNodeParams p{};
  p.func = program.function();  // its module's context decides the GPU the node runs on
  p.gridDimX = dims.global[0];
  p.gridDimY = dims.global[1];
  p.gridDimZ = dims.global[2];
  p.blockDimX = dims.local[0];
  p.blockDimY = dims.local[1];
  p.blockDimZ = dims.local[2];
  p.sharedMemBytes = static_cast<unsigned>(program.dynamic_shared());
  p.kernelParams = nullptr;
  p.extra = packed_size != 0 ? extra : nullptr;
  return p;
}

}  // namespace tg::cuda
