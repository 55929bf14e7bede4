#include "cpu_device.h"

#include "cpu_allocator.h"
#include "cpu_graph.h"
#include "cpu_library.h"
#include "cpu_program.h"

namespace tg::cpu {

const std::string& CpuDevice::name() const noexcept {
  static const std::string name = kDeviceName;
  return name;
}

std::shared_ptr<Allocator> CpuDevice::allocator() { return cpu_allocator(); }

std::shared_ptr<Program> CpuDevice::load_program(const std::string& name, std::string_view image) {
  return std::make_shared<CpuProgram>(std::make_shared<Library>(image), name);
}

std::unique_ptr<Graph> CpuDevice::create_graph() { return std::make_unique<CpuGraph>(); }

std::shared_ptr<CpuDevice> cpu_device() {
  static const std::shared_ptr<CpuDevice> device = std::make_shared<CpuDevice>();
  return device;
}

}  // namespace tg::cpu
