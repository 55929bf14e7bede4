// tg::cuda::CudaGraph: captured launches replayed as one CUDA graph.
//
// The graph is built from explicit kernel nodes (cuGraphAddKernelNode, each depending on the one before, so they
// run in capture order) and instantiated once, at the first run. Later runs only patch the nodes whose arguments
// or dimensions changed (cuGraphExecKernelNodeSetParams, ~0.2 us a node) and launch the instantiated graph
// (cuGraphLaunch, ~1-2 us for the whole graph instead of ~2.4 us per kernel launched one by one).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda_context.h"
#include "cuda_program.h"
#include "graph_launches.h"
#include "runtime.h"

namespace tg::cuda {

class CudaGraph final : public Graph {
 public:
  explicit CudaGraph(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  // Waits for running replays, then destroys the graph. Never throws.
  ~CudaGraph() override;

  // `program` must be a CudaProgram of the same GPU and `args` must match it (tg::UsageError otherwise, as for a
  // launch); `dims` nullptr means one block of one thread. Adding after the first run rebuilds the graph at the
  // next run.
  size_t add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) override;
  void set_arg(size_t launch, size_t arg, BoundArg value) override;
  // Always supported: the node's dimensions are patched at the next run.
  bool set_dims(size_t launch, const LaunchDims& dims) override;
  // Resolves every bound Buffer (tg::UsageError for a freed one, before anything is queued), patches changed
  // nodes, and queues the graph on the stream. Returns without waiting for it, like a launch.
  void run() override;
  size_t size() const noexcept override { return launches_.size(); }

  // How often the graph was instantiated and how many node updates were sent, for tests and profiling.
  size_t instantiations() const noexcept { return instantiations_; }
  size_t node_updates() const noexcept { return node_updates_; }
  // Programmatic dependent launch: with it on (and a driver of CUDA 12.3 or later), a kernel whose program
  // waits_for_grid() follows the one before it through a programmatic edge, so it is launched while that one's
  // last blocks finish instead of after its completion is flushed (a microsecond or so a kernel). Only for GPUs
  // of compute capability 9.0 and later (the caller's to check); changing it rebuilds the graph at the next run.
  void set_programmatic(bool on);
  bool programmatic() const noexcept { return programmatic_; }
  // Edges of the instantiated graph that are programmatic, for tests.
  size_t programmatic_edges() const noexcept { return programmatic_edges_; }

 private:
  struct Launch {
    std::shared_ptr<CudaProgram> program;
    std::vector<BoundArg> args;
    std::vector<KernelArg> values;  // the argument values last packed
    LaunchDims dims;
    std::vector<std::uint8_t> packed;
    size_t packed_size = 0;
    void* extra[5] = {};  // points into this Launch: set by node_params (LaunchList keeps launches in place)
    CUgraphNode node = nullptr;
    bool dirty = true;  // values or dims differ from what the instantiated graph has
  };

  void pack(Launch& l);
  KernelNodeParams node_params(Launch& l) const;
  void build();
  void destroy() noexcept;

  std::shared_ptr<Context> ctx_;
  LaunchList<Launch> launches_{"CUDA graph"};
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  bool rebuild_ = false;
  bool programmatic_ = false;
  size_t instantiations_ = 0;
  size_t node_updates_ = 0;
  size_t programmatic_edges_ = 0;
};

}  // namespace tg::cuda
