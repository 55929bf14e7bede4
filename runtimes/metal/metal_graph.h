// tg::metal::MetalGraph: a TinyJit capture replayed in one command buffer. Where the GPU supports it, the launches
// are encoded once into an indirect command buffer (ICB), each replay re-encoding only the commands whose buffers,
// integers or sizes changed and running the whole ICB with one executeCommandsInBuffer; elsewhere every launch is
// encoded again into one compute encoder per replay. Either way the dispatches run in order, each seeing the last's
// writes (the ICB's commands carry barriers).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph_launches.h"
#include "metal_program.h"
#include "runtime.h"

namespace tg::metal {

class MetalGraph final : public Graph {
 public:
  explicit MetalGraph(std::shared_ptr<MetalContext> ctx) : ctx_(std::move(ctx)), use_icb_(ctx_->supports_icb()) {}
  // `program` must be a MetalProgram, `dims` within its pipeline's limit (or null until set_dims gives them).
  size_t add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) override;
  void set_arg(size_t launch, size_t arg, BoundArg value) override;
  bool set_dims(size_t launch, const LaunchDims& dims) override;
  // Commits one command buffer running every launch (no wait; synchronize() waits). Changing an ICB that a replay
  // still runs would race the GPU, so a replay that must re-encode commands first waits for the one before.
  void run() override;
  size_t size() const noexcept override { return launches_.size(); }
  bool uses_icb() const noexcept { return use_icb_; }

 private:
  struct Launch {
    std::shared_ptr<MetalProgram> program;
    std::vector<BoundArg> args;
    std::vector<KernelArg> values;  // Buffer slots are refreshed at each run
    LaunchDims dims;
    bool has_dims = false;
    std::vector<KernelArg> encoded;  // what its ICB command holds (empty: not encoded yet)
    LaunchDims encoded_dims;
    size_t first_int = 0;  // its integers' slots in ints_
  };

  void run_direct();
  void run_icb();
  void build_icb();
  void encode_command(size_t index, Launch& l);

  std::shared_ptr<MetalContext> ctx_;
  bool use_icb_;
  LaunchList<Launch> launches_{"Metal graph"};
  Owned icb_, ints_;  // the ICB and the buffer holding the launches' integer arguments (an ICB has no setBytes)
  size_t icb_size_ = 0, int_slots_ = 0;
  std::vector<id> resources_;  // every buffer the ICB's commands use (useResource: before running it)
};

}  // namespace tg::metal
