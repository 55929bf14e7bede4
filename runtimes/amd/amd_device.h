// tg::amd::AmdDevice: the runtime contract (csrc/runtime.h) over one AMD GPU driven through KFD ioctls, with no
// ROCm runtime underneath.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "amd_allocator.h"
#include "amd_gpu.h"
#include "runtime.h"

namespace tg::amd {

class AmdDevice final : public Device, private Queue {
 public:
  explicit AmdDevice(int ordinal);
  const std::string& name() const noexcept override { return gpu_->name(); }
  std::shared_ptr<Allocator> allocator() override { return allocator_; }
  std::shared_ptr<Program> load_program(const std::string& name, std::string_view image) override;
  Queue* queue() noexcept override { return this; }
  std::unique_ptr<Graph> create_graph() override;
  void synchronize() override { gpu_->queue().wait_idle(); }

  const std::shared_ptr<AmdGpu>& gpu() const noexcept { return gpu_; }
  const std::shared_ptr<AmdAllocator>& amd_allocator() const noexcept { return allocator_; }

 private:
  std::shared_ptr<AmdGpu> gpu_;
  std::shared_ptr<AmdAllocator> allocator_;
};

}  // namespace tg::amd
