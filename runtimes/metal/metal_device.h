// tg::metal::MetalDevice: the runtime contract's Device (and Queue) over one Metal GPU.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "metal_allocator.h"
#include "metal_context.h"
#include "metal_graph.h"
#include "metal_program.h"
#include "runtime.h"

namespace tg::metal {

class MetalDevice final : public Device, public Queue {
 public:
  // Opens the default GPU through objc() (tg::RuntimeError naming the library where Metal is missing).
  MetalDevice();
  const std::string& name() const noexcept override { return ctx_->name(); }
  std::shared_ptr<Allocator> allocator() override { return allocator_; }
  std::shared_ptr<Program> load_program(const std::string& name, std::string_view image) override;
  Queue* queue() noexcept override { return this; }
  std::unique_ptr<Graph> create_graph() override { return std::make_unique<MetalGraph>(ctx_); }
  void synchronize() override { ctx_->synchronize(); }

  // Builds MSL source into a library and drops it: tg::RuntimeError with the compiler's log if it does not compile.
  void check_source(std::string_view source) { new_library(*ctx_, source); }
  const std::shared_ptr<MetalContext>& context() const noexcept { return ctx_; }
  const std::shared_ptr<MetalAllocator>& metal_allocator() const noexcept { return allocator_; }

 private:
  std::shared_ptr<MetalContext> ctx_;
  std::shared_ptr<MetalAllocator> allocator_;
};

}  // namespace tg::metal
