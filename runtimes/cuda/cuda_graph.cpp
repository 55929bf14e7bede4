#include "cuda_graph.h"

#include <string>
#include <utility>

#include "buffer.h"
#include "errors.h"
#include "kernel_node.h"

namespace tg::cuda {

CudaGraph::~CudaGraph() {
  try {
    ctx_->synchronize();
  } catch (...) {
  }
  destroy();
}

void CudaGraph::destroy() noexcept {
  const DriverApi& d = ctx_->api();
  if (exec_ != nullptr) d.cuGraphExecDestroy(exec_);
  if (graph_ != nullptr) d.cuGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void CudaGraph::pack(Launch& l) {
  l.program->pack(l.values.data(), l.values.size(), l.packed);
  l.packed_size = l.packed.size();
}

KernelNodeParams CudaGraph::node_params(Launch& l) const {
  return kernel_node_params(*l.program, l.dims, l.packed, l.packed_size, l.extra);
}

size_t CudaGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) {
  auto busy = launches_.busy("add");
  if (!program) throw UsageError("CUDA graph: add() needs a program");
  auto cuda = std::dynamic_pointer_cast<CudaProgram>(program);
  if (!cuda || cuda->context() != ctx_)
    throw UsageError("CUDA graph on " + ctx_->name() + ": program '" + program->name() + "' is for device " +
                     program->device());
  Launch l;
  l.program = std::move(cuda);
  l.dims = dims != nullptr ? *dims : LaunchDims{};
  l.program->check_dims(l.dims);
  l.values.reserve(args.size());
  for (const BoundArg& a : args) l.values.push_back(a.buffer ? KernelArg::pointer(a.buffer->ptr()) : a.value);
  l.args = std::move(args);
  pack(l);  // checks the arguments against the kernel now, not at the first replay
  launches_.push(std::move(l));
  if (exec_ != nullptr) rebuild_ = true;
  return launches_.size() - 1;
}

void CudaGraph::set_arg(size_t launch, size_t arg, BoundArg value) {
  auto busy = launches_.busy("set_arg");
  Launch& l = launches_.check_set_arg(launch, arg, value);
  if (!value.buffer && value.value.bits != l.values[arg].bits) {
    l.values[arg] = value.value;
    l.dirty = true;
  }
  l.args[arg] = std::move(value);  // a Buffer is resolved (and compared) at the next run
}

bool CudaGraph::set_dims(size_t launch, const LaunchDims& dims) {
  auto busy = launches_.busy("set_dims");
  Launch& l = launches_.at(launch, "set_dims");
  l.program->check_dims(dims);
  if (!same_dims(l.dims, dims)) {
    l.dims = dims;
    l.dirty = true;
  }
  return true;
}

void CudaGraph::set_programmatic(bool on) {
  auto busy = launches_.busy("set_programmatic");
  if (on == programmatic_) return;
  programmatic_ = on;
  if (exec_ != nullptr) rebuild_ = true;
}

void CudaGraph::build() {
  const DriverApi& d = ctx_->api();
  destroy();
  programmatic_edges_ = 0;
  ctx_->check("cuGraphCreate", d.cuGraphCreate(&graph_, 0), "creating a CUDA graph");
  const bool pdl = programmatic_ && d.cuGraphAddDependencies != nullptr;
  CUgraphNode prev = nullptr;
  for (Launch& l : launches_) {
    KernelNodeParams p = node_params(l);
    // A chain: each kernel after the previous one, as the launches were captured. A kernel that waits for the grid
    // ahead of it itself gets a programmatic edge, added on its own (cuGraphAddKernelNode takes plain edges only).
    const bool early = pdl && prev != nullptr && l.program->waits_for_grid();
    const bool chained = prev != nullptr && !early;
    CUresult r = d.cuGraphAddKernelNode(&l.node, graph_, chained ? &prev : nullptr, chained ? 1 : 0, &p);
    if (r != CUDA_SUCCESS) ctx_->fail("cuGraphAddKernelNode", r, "adding kernel " + l.program->name() + " to a graph");
    if (early) {
      GraphEdgeData edge{};
      edge.from_port = kGraphKernelNodePortProgrammatic;
      edge.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
      r = d.cuGraphAddDependencies(graph_, &prev, &l.node, &edge, 1);
      if (r != CUDA_SUCCESS)
        ctx_->fail("cuGraphAddDependencies", r, "adding a programmatic edge before kernel " + l.program->name());
      ++programmatic_edges_;
    }
    prev = l.node;
    l.dirty = false;
  }
  ctx_->check("cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlags(&exec_, graph_, 0),
              "instantiating a CUDA graph");
  rebuild_ = false;
  ++instantiations_;
}

void CudaGraph::run() {
  auto busy = launches_.busy("run");
  if (launches_.empty()) return;
  auto unpin = launches_.unpin_on_exit();
  launches_.pin_buffers([](Launch& l, size_t i, Buffer& b) {
    KernelArg v = KernelArg::pointer(b.ptr());
    if (v.bits != l.values[i].bits) {
      l.values[i] = v;
      l.dirty = true;
    }
  });
  for (Launch& l : launches_)
    if (l.dirty) pack(l);
  ctx_->make_current();
  const DriverApi& d = ctx_->api();
  if (exec_ == nullptr || rebuild_) {
    build();
  } else {
    for (Launch& l : launches_) {
      if (!l.dirty) continue;
      KernelNodeParams p = node_params(l);
      CUresult r = d.cuGraphExecKernelNodeSetParams(exec_, l.node, &p);
      if (r != CUDA_SUCCESS)
        ctx_->fail("cuGraphExecKernelNodeSetParams", r, "updating kernel " + l.program->name() + " in a graph");
      l.dirty = false;
      ++node_updates_;
    }
  }
  ctx_->check("cuGraphLaunch", d.cuGraphLaunch(exec_, ctx_->stream()), "launching a CUDA graph");
}

}  // namespace tg::cuda
