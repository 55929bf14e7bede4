// tg::metal::MetalGraph: a TinyJit capture replayed as one command buffer: every launch encoded, in order, into one
// compute encoder (its dispatches run one after another, each seeing the last's writes).
#pragma once

#include <memory>
#include <vector>

#include "graph_launches.h"
#include "metal_program.h"
#include "runtime.h"

namespace tg::metal {

class MetalGraph final : public Graph {
 public:
  explicit MetalGraph(std::shared_ptr<MetalContext> ctx) : ctx_(std::move(ctx)) {}
  // `program` must be a MetalProgram, `dims` within its pipeline's limit (or null until set_dims gives them).
  size_t add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) override;
  void set_arg(size_t launch, size_t arg, BoundArg value) override;
  bool set_dims(size_t launch, const LaunchDims& dims) override;
  // Encodes every launch into one command buffer and commits it (no wait; synchronize() waits).
  void run() override;
  size_t size() const noexcept override { return launches_.size(); }

 private:
  struct Launch {
    std::shared_ptr<MetalProgram> program;
    std::vector<BoundArg> args;
    std::vector<KernelArg> values;  // Buffer slots are refreshed at each run
    LaunchDims dims;
    bool has_dims = false;
  };

  std::shared_ptr<MetalContext> ctx_;
  LaunchList<Launch> launches_{"Metal graph"};
};

}  // namespace tg::metal
