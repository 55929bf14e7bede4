// tg::cpu::CpuDevice: the CPU backend's entry point (see tg::Device in runtime.h).
#pragma once

#include <memory>
#include <string>

#include "runtime.h"

namespace tg::cpu {

// The device name in errors and in Program/Allocator::device().
inline constexpr char kDeviceName[] = "CPU";

class CpuDevice final : public Device {
 public:
  const std::string& name() const noexcept override;
  std::shared_ptr<Allocator> allocator() override;
  // `image` is a shared object from the system C compiler.
  std::shared_ptr<Program> load_program(const std::string& name, std::string_view image) override;
  std::unique_ptr<Graph> create_graph() override;
  // No queue: every CPU operation has completed when it returns.
};

// The process-wide CPU device (shared, so Python can hold it like any other device).
std::shared_ptr<CpuDevice> cpu_device();

}  // namespace tg::cpu
