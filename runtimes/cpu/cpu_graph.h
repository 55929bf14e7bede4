// tg::cpu::CpuGraph: captured CPU launches replayed back to back in one C++ call.
#pragma once

#include <memory>
#include <vector>

#include "cpu_program.h"
#include "graph_launches.h"
#include "runtime.h"

namespace tg::cpu {

class CpuGraph final : public Graph {
 public:
  // `program` must be a CpuProgram (else tg::UsageError); `dims` is ignored. More than kMaxCallArgs arguments
  // throw tg::RuntimeError here rather than at replay.
  size_t add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) override;
  void set_arg(size_t launch, size_t arg, BoundArg value) override;
  // Checks the index and returns true: CPU kernels loop over their work and take no dimensions.
  bool set_dims(size_t launch, const LaunchDims& dims) override;
  // Pins every bound Buffer and resolves its address (raising tg::UsageError for a freed one before anything
  // runs), then calls the launches in order on this thread.
  void run() override;
  size_t size() const noexcept override { return launches_.size(); }

 private:
  struct Launch {
    std::shared_ptr<CpuProgram> program;
    std::vector<BoundArg> args;  // owns buffers and keep-alive tokens
    std::vector<Word> words;     // ready-to-pass values; Buffer slots are refreshed at each run
  };

  LaunchList<Launch> launches_{"CPU graph"};
};

}  // namespace tg::cpu
