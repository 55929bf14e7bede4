// tg::cuda::CudaMultiGraph: a capture that spans several GPUs (kernels on each, NCCL collectives between them,
// copies from one to another) replayed as one CUDA graph, launched with one cuGraphLaunch.
//
// Nodes of the graph, one per captured step, in capture order:
//  * a kernel is an explicit kernel node (as in CudaGraph), on the GPU its program was loaded on;
//  * a collective or a copy is a child graph node whose graph is made by stream capture: the NCCL group (each
//    rank's call on a capture stream of that rank's GPU, the streams forked from and joined back to the first
//    rank's) or the cuMemcpy*Async is issued on streams being captured, so the driver records it instead of
//    running it (NCCL >= 2.9 supports this).
// A node depends on the last earlier node of every GPU it touches, so each GPU's steps run in capture order, GPUs
// run side by side between collectives, and a collective or copy starts only once every GPU it reads or writes has
// finished the steps before it.
//
// One graph for all GPUs rather than one per GPU: NCCL warns that launching the graphs of several GPUs one after
// the other from one thread may deadlock (a launch can block until the peers' halves of a collective are launched).
//
// NOTE: a captured collective or copy has its buffer addresses baked in (nothing can patch them the way kernel
// arguments are patched). So every replay compares the address of every bound Buffer with the one the instantiated
// graph holds, and for a collective or copy whose addresses changed captures it again and swaps the new child
// graph in (cuGraphExecChildGraphNodeSetParams; where the driver refuses, the whole graph is built again). A replay
// never runs a node with an address it did not check that call.
//
// NOTE: the child graphs are destroyed right after they are added or swapped in. That is safe for what NCCL keeps
// alive through a capture (its per-capture resources are user objects retained by the captured graph): adding a
// child graph node clones the child with its references, and updating one replaces the node's references with
// clones of the new child's, the old ones released only after launches in flight have finished.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda_context.h"
#include "cuda_program.h"
#include "graph_launches.h"
#include "nccl.h"
#include "runtime.h"

namespace tg::cuda {

class CudaMultiGraph final : public Graph {
 public:
  // `contexts`: every GPU the capture uses, distinct; the graph is launched on the first one's stream, ordered after
  // the work queued on every GPU's stream before run() and before the work queued after it. Throws tg::UsageError
  // for none or a GPU named twice, tg::RuntimeError naming the driver call that failed.
  explicit CudaMultiGraph(std::vector<std::shared_ptr<Context>> contexts);
  // Waits for every GPU's queued work (a replay may be running), then destroys the graph. Never throws.
  ~CudaMultiGraph() override;
  CudaMultiGraph(const CudaMultiGraph&) = delete;
  CudaMultiGraph& operator=(const CudaMultiGraph&) = delete;

  // A kernel, as CudaGraph::add, on the GPU its program belongs to (which must be one of the graph's).
  size_t add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) override;
  // A collective over `comm`'s GPUs (all of them the graph's). `bufs`: every rank's receive buffer, then every
  // rank's send buffer (the order of a collective's schedule item: outputs, then inputs). Checked now as
  // Communicator::check does (tg::UsageError).
  size_t add_collective(std::shared_ptr<const Communicator> comm, const CollectiveSpec& spec,
                        std::vector<BoundArg> bufs);
  // A copy of `nbytes` from bufs[1] to bufs[0] (Buffers of the graph's GPUs, on one GPU or two).
  size_t add_copy(std::vector<BoundArg> bufs, size_t nbytes);
  // Replaces argument `arg` of step `node` (a kernel's argument, or a collective's or copy's buffer in the order
  // given at add) for the following replays; a collective's or copy's arguments must be Buffers.
  void set_arg(size_t node, size_t arg, BoundArg value) override;
  // A kernel's dimensions; false for a collective or copy.
  bool set_dims(size_t node, const LaunchDims& dims) override;
  // Resolves every bound Buffer (tg::UsageError for a freed one, before anything is queued), patches changed
  // kernels, captures again the collectives and copies whose addresses changed, and launches the graph. Returns
  // without waiting for it.
  void run() override;
  size_t size() const noexcept override { return nodes_.size(); }

  // For tests and profiling: how often the graph was instantiated, kernel nodes patched, and collectives or copies
  // captured again after a change of address.
  size_t instantiations() const noexcept { return instantiations_; }
  size_t node_updates() const noexcept { return node_updates_; }
  size_t recaptures() const noexcept { return recaptures_; }

 private:
  enum class Kind { kKernel, kCollective, kCopy };
  struct Node {
    Kind kind = Kind::kKernel;
    std::vector<BoundArg> args;
    std::vector<KernelArg> values;  // the arguments (addresses) the instantiated graph has
    std::vector<size_t> devices;    // indices into contexts_: the GPUs it runs on or touches; [0] issues it
    // a kernel
    std::shared_ptr<CudaProgram> program;
    LaunchDims dims;
    std::vector<std::uint8_t> packed;
    size_t packed_size = 0;
    void* extra[5] = {};  // points into this Node (LaunchList keeps nodes in place)
    // a collective
    std::shared_ptr<const Communicator> comm;
    CollectiveSpec spec;
    // a copy
    size_t nbytes = 0;
    CUgraphNode node = nullptr;
    bool dirty = true;  // differs from what the instantiated graph has
  };

  size_t device_index(const Context* ctx, const char* what) const;
  std::vector<Buffer*> buffers(const Node& n, size_t first, size_t count) const;
  KernelNodeParams node_params(Node& n) const;
  // The child graph of a collective or copy, captured with its current addresses; the caller destroys it.
  CUgraph capture(Node& n);
  void issue(Node& n, const std::vector<CUstream>& streams);
  void build();
  void launch();
  void destroy() noexcept;

  std::vector<std::shared_ptr<Context>> contexts_;
  std::vector<CUstream> capture_streams_;  // one per GPU, used only while capturing
  std::vector<CUevent> fork_, join_;       // capture fork/join events, one per GPU
  std::vector<CUevent> ready_;             // launch ordering: each GPU's queued work done
  CUevent done_ = nullptr;                 // launch ordering: the graph done
  LaunchList<Node> nodes_{"CUDA multi-GPU graph"};
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  bool rebuild_ = false;
  size_t instantiations_ = 0;
  size_t node_updates_ = 0;
  size_t recaptures_ = 0;
};

}  // namespace tg::cuda
