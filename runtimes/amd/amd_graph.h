// tg::amd::AmdGraph: captured launches whose dispatch packets and kernarg bytes are built once, at add(); a replay
// copies them into the kernarg arena and the AQL ring, patches in the current addresses of bound Buffers and rings
// the doorbell once for the whole stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amd_program.h"
#include "graph_launches.h"
#include "runtime.h"

namespace tg::amd {

class AmdGraph final : public Graph {
 public:
  explicit AmdGraph(std::shared_ptr<AmdGpu> gpu) : gpu_(std::move(gpu)) {}
  size_t add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) override;
  void set_arg(size_t launch, size_t arg, BoundArg value) override;
  bool set_dims(size_t launch, const LaunchDims& dims) override;
  void run() override;
  size_t size() const noexcept override { return launches_.size(); }
  // Doorbell rings of all replays so far (one per replay).
  size_t replays() const noexcept { return replays_; }

 private:
  struct Launch {
    std::shared_ptr<AmdProgram> program;
    std::vector<BoundArg> args;
    hsa::DispatchPacket packet;   // complete but for kernarg_address
    std::string kernargs;         // packed; Buffer slots are written at each replay
    std::vector<size_t> offsets;  // of each argument in `kernargs`
  };
  void pack(Launch& l);

  std::shared_ptr<AmdGpu> gpu_;
  LaunchList<Launch> launches_{"AMD graph"};
  size_t replays_ = 0;
};

}  // namespace tg::amd
