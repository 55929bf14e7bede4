#include "cuda_device.h"

#include "cuda_graph.h"
#include "cuda_program.h"
#include "driver.h"

namespace tg::cuda {

CudaDevice::CudaDevice(int ordinal, StagingConfig staging, bool cache_freed)
    : ctx_(std::make_shared<Context>(driver(), ordinal)),
      allocator_(std::make_shared<CudaAllocator>(ctx_, staging, cache_freed)),
      queue_(ctx_) {}

std::shared_ptr<Program> CudaDevice::load_program(const std::string& name, std::string_view image) {
  return std::make_shared<CudaProgram>(ctx_, name, image);
}

std::unique_ptr<Graph> CudaDevice::create_graph() { return std::make_unique<CudaGraph>(ctx_); }

}  // namespace tg::cuda
