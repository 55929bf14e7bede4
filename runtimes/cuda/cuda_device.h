// tg::cuda::CudaDevice: the CUDA backend's entry point (see tg::Device in runtime.h).
#pragma once

#include <memory>
#include <string>

#include "cuda_allocator.h"
#include "cuda_context.h"
#include "runtime.h"
#include "staging_ring.h"

namespace tg::cuda {

class CudaDevice final : public Device {
 public:
  // Opens GPU `ordinal` through the current driver (driver.h): throws tg::RuntimeError naming libcuda.so.1 and the
  // dlerror() text when there is no driver, tg::UsageError when there is no such GPU.
  // `cache_freed`: see CudaAllocator.
  CudaDevice(int ordinal, StagingConfig staging, bool cache_freed = true);

  const std::string& name() const noexcept override { return ctx_->name(); }
  std::shared_ptr<Allocator> allocator() override { return allocator_; }
  // `image` is a CUBIN (or PTX) from NVRTC.
  std::shared_ptr<Program> load_program(const std::string& name, std::string_view image) override;
  Queue* queue() noexcept override { return &queue_; }
  std::unique_ptr<Graph> create_graph() override;

  const std::shared_ptr<Context>& context() const noexcept { return ctx_; }
  const std::shared_ptr<CudaAllocator>& cuda_allocator() const noexcept { return allocator_; }

 private:
  std::shared_ptr<Context> ctx_;
  std::shared_ptr<CudaAllocator> allocator_;
  CudaQueue queue_;
};

}  // namespace tg::cuda
