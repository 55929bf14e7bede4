#include "metal_device.h"

namespace tg::metal {

MetalDevice::MetalDevice()
    : ctx_(std::make_shared<MetalContext>(objc())), allocator_(std::make_shared<MetalAllocator>(ctx_)) {}

std::shared_ptr<Program> MetalDevice::load_program(const std::string& name, std::string_view image) {
  return std::make_shared<MetalProgram>(ctx_, name, image);
}

}  // namespace tg::metal
