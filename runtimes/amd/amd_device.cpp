#include "amd_device.h"

#include "amd_graph.h"
#include "amd_program.h"

namespace tg::amd {

AmdDevice::AmdDevice(int ordinal)
    : gpu_(AmdGpu::open(ordinal)), allocator_(std::make_shared<AmdAllocator>(gpu_)) {}

std::shared_ptr<Program> AmdDevice::load_program(const std::string& name, std::string_view image) {
  return std::make_shared<AmdProgram>(gpu_, name, image);
}

std::unique_ptr<Graph> AmdDevice::create_graph() { return std::make_unique<AmdGraph>(gpu_); }

}  // namespace tg::amd
