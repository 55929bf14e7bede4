#include "amd_gpu.h"

#include <fcntl.h>

#include <map>
#include <mutex>
#include <utility>

#include "errors.h"

namespace tg::amd {

std::shared_ptr<AmdGpu> AmdGpu::open(int ordinal) {
  static std::mutex mu;
  static std::map<std::pair<const tg_amd_os*, int>, std::weak_ptr<AmdGpu>> open_gpus;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(os_table(), ordinal);
  if (auto gpu = open_gpus[key].lock()) return gpu;
  auto gpu = std::make_shared<AmdGpu>(ordinal);
  open_gpus[key] = gpu;
  return gpu;
}

AmdGpu::AmdGpu(int ordinal) : name_(ordinal == 0 ? "AMD" : "AMD:" + std::to_string(ordinal)) {
  kfd_ = kfd_instance();
  std::vector<GpuNode> gpus = discover_gpus(kfd_->os());
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= gpus.size())
    throw RuntimeError(name_, "open", "", "no AMD GPU " + std::to_string(ordinal) + ": the KFD topology has " +
                                              std::to_string(gpus.size()));
  node_ = gpus[static_cast<size_t>(ordinal)];
  std::string render = "/dev/dri/renderD" + std::to_string(node_.render_minor);
  drm_fd_ = kfd_->os().open(render.c_str(), O_RDWR);
  if (drm_fd_ < 0) throw_errno(name_, "open(" + render + ")", "cannot open the GPU's render node");
  try {
    kfd::AcquireVmArgs vm{static_cast<std::uint32_t>(drm_fd_), node_.gpu_id};
    kfd_->ioctl(kfd::kAcquireVm, &vm, name_, "binding the render node's GPU VM to this process");
    queue_ = std::make_unique<AqlQueue>(kfd_, node_, drm_fd_, name_);
    sdma_ = std::make_unique<SdmaQueue>(kfd_, node_, drm_fd_, name_);
    staging_ = allocate(kStagingBytes, MemoryOptions{MemoryKind::Gtt, true, false, false});
  } catch (...) {
    staging_.reset();
    sdma_.reset();
    queue_.reset();
    kfd_->os().close(drm_fd_);
    throw;
  }
}

AmdGpu::~AmdGpu() {
  staging_.reset();
  sdma_.reset();
  queue_.reset();
  if (drm_fd_ >= 0) kfd_->os().close(drm_fd_);
}

}  // namespace tg::amd
