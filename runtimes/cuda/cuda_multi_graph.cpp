#include "cuda_multi_graph.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "buffer.h"
#include "cuda_allocator.h"
#include "errors.h"
#include "kernel_node.h"

namespace tg::cuda {
namespace {

const Context* context_of(const Buffer& b) {
  const auto* a = dynamic_cast<const CudaAllocator*>(b.allocator().get());
  return a != nullptr ? a->context().get() : nullptr;
}

}  // namespace

CudaMultiGraph::CudaMultiGraph(std::vector<std::shared_ptr<Context>> contexts) : contexts_(std::move(contexts)) {
  if (contexts_.empty()) throw UsageError("a CUDA multi-GPU graph needs at least one GPU");
  std::set<const Context*> seen;
  for (const auto& ctx : contexts_)
    if (!ctx || !seen.insert(ctx.get()).second)
      throw UsageError("a CUDA multi-GPU graph needs distinct GPUs" + (ctx ? "; " + ctx->name() + " is named twice"
                                                                           : std::string()));
  size_t n = contexts_.size();
  capture_streams_.assign(n, nullptr);
  fork_.assign(n, nullptr);
  join_.assign(n, nullptr);
  ready_.assign(n, nullptr);
  try {
    for (size_t i = 0; i < n; ++i) {
      const Context& c = *contexts_[i];
      const DriverApi& d = c.api();
      c.make_current();
      c.check("cuStreamCreate", d.cuStreamCreate(&capture_streams_[i], CU_STREAM_NON_BLOCKING),
              "creating a capture stream");
      for (auto* list : {&fork_, &join_, &ready_})
        c.check("cuEventCreate", d.cuEventCreate(&(*list)[i], CU_EVENT_DISABLE_TIMING), "creating an event");
    }
    // recorded on the first GPU's stream, so made in its context (an event recorded on another context's stream
    // is an invalid handle there)
    contexts_[0]->make_current();
    contexts_[0]->check("cuEventCreate", contexts_[0]->api().cuEventCreate(&done_, CU_EVENT_DISABLE_TIMING),
                        "creating an event");
  } catch (...) {
    destroy();
    throw;
  }
}

CudaMultiGraph::~CudaMultiGraph() {
  for (const auto& ctx : contexts_) {
    try {
      ctx->synchronize();
    } catch (...) {
    }
  }
  destroy();
}

void CudaMultiGraph::destroy() noexcept {
  const DriverApi& d = contexts_[0]->api();
  if (exec_ != nullptr) d.cuGraphExecDestroy(exec_);
  if (graph_ != nullptr) d.cuGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  for (size_t i = 0; i < capture_streams_.size(); ++i) {
    try {
      contexts_[i]->make_current();
    } catch (...) {
    }
    if (capture_streams_[i] != nullptr) d.cuStreamDestroy(capture_streams_[i]);
    for (CUevent e : {fork_[i], join_[i], ready_[i]})
      if (e != nullptr) d.cuEventDestroy(e);
  }
  capture_streams_.clear();
  fork_.clear();
  join_.clear();
  ready_.clear();
  if (done_ != nullptr) d.cuEventDestroy(done_);
  done_ = nullptr;
}

size_t CudaMultiGraph::device_index(const Context* ctx, const char* what) const {
  for (size_t i = 0; i < contexts_.size(); ++i)
    if (contexts_[i].get() == ctx) return i;
  std::string names;
  for (const auto& c : contexts_) names += (names.empty() ? "" : ", ") + c->name();
  throw UsageError(std::string("CUDA multi-GPU graph: ") + what + " is on " + (ctx ? ctx->name() : "another device") +
                   ", not on one of the graph's GPUs (" + names + ")");
}

size_t CudaMultiGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) {
  auto busy = nodes_.busy("add");
  if (!program) throw UsageError("CUDA multi-GPU graph: add() needs a program");
  auto cuda = std::dynamic_pointer_cast<CudaProgram>(program);
  if (!cuda) throw UsageError("CUDA multi-GPU graph: program '" + program->name() + "' is not a CUDA program");
  Node n;
  n.kind = Kind::kKernel;
  n.devices = {device_index(cuda->context().get(), ("program '" + cuda->name() + "'").c_str())};
  n.program = std::move(cuda);
  n.dims = dims != nullptr ? *dims : LaunchDims{};
  n.program->check_dims(n.dims);
  for (const BoundArg& a : args) n.values.push_back(a.buffer ? KernelArg::pointer(a.buffer->ptr()) : a.value);
  n.args = std::move(args);
  n.program->pack(n.values.data(), n.values.size(), n.packed);  // checks the arguments now, not at the first run
  n.packed_size = n.packed.size();
  nodes_.push(std::move(n));
  if (exec_ != nullptr) rebuild_ = true;
  return nodes_.size() - 1;
}

std::vector<Buffer*> CudaMultiGraph::buffers(const Node& n, size_t first, size_t count) const {
  std::vector<Buffer*> out;
  for (size_t i = first; i < first + count; ++i) out.push_back(n.args[i].buffer.get());
  return out;
}

size_t CudaMultiGraph::add_collective(std::shared_ptr<const Communicator> comm, const CollectiveSpec& spec,
                                      std::vector<BoundArg> bufs) {
  auto busy = nodes_.busy("add_collective");
  if (!comm) throw UsageError("CUDA multi-GPU graph: add_collective() needs a communicator");
  size_t ranks = comm->size();
  if (bufs.size() != 2 * ranks)
    throw UsageError("CUDA multi-GPU graph: a collective over " + std::to_string(ranks) + " GPUs takes " +
                     std::to_string(2 * ranks) + " buffers (every receive buffer, then every send buffer), got " +
                     std::to_string(bufs.size()));
  for (size_t i = 0; i < bufs.size(); ++i)
    if (!bufs[i].buffer)
      throw UsageError("CUDA multi-GPU graph: collective argument " + std::to_string(i) + " is not a buffer");
  Node n;
  n.kind = Kind::kCollective;
  for (const auto& ctx : comm->contexts()) n.devices.push_back(device_index(ctx.get(), "a communicator's GPU"));
  n.args = std::move(bufs);
  comm->check(spec, buffers(n, ranks, ranks), buffers(n, 0, ranks));
  for (const BoundArg& a : n.args) n.values.push_back(KernelArg::pointer(a.buffer->ptr()));
  n.comm = std::move(comm);
  n.spec = spec;
  nodes_.push(std::move(n));
  if (exec_ != nullptr) rebuild_ = true;
  return nodes_.size() - 1;
}

size_t CudaMultiGraph::add_copy(std::vector<BoundArg> bufs, size_t nbytes) {
  auto busy = nodes_.busy("add_copy");
  if (bufs.size() != 2 || !bufs[0].buffer || !bufs[1].buffer)
    throw UsageError("CUDA multi-GPU graph: a copy takes two buffers (destination, source)");
  for (const BoundArg& a : bufs)
    if (a.buffer->nbytes() < nbytes)
      throw UsageError("CUDA multi-GPU graph: a copy of " + std::to_string(nbytes) + " bytes with a buffer of " +
                       std::to_string(a.buffer->nbytes()) + " bytes on " + a.buffer->device());
  Node n;
  n.kind = Kind::kCopy;
  size_t dst = device_index(context_of(*bufs[0].buffer), "a copy's destination");
  size_t src = device_index(context_of(*bufs[1].buffer), "a copy's source");
  n.devices = dst == src ? std::vector<size_t>{dst} : std::vector<size_t>{dst, src};
  for (const BoundArg& a : bufs) n.values.push_back(KernelArg::pointer(a.buffer->ptr()));
  n.args = std::move(bufs);
  n.nbytes = nbytes;
  nodes_.push(std::move(n));
  if (exec_ != nullptr) rebuild_ = true;
  return nodes_.size() - 1;
}

void CudaMultiGraph::set_arg(size_t node, size_t arg, BoundArg value) {
  auto busy = nodes_.busy("set_arg");
  Node& n = nodes_.check_set_arg(node, arg, value);
  if (n.kind != Kind::kKernel && !value.buffer)
    throw UsageError("CUDA multi-GPU graph: step " + std::to_string(node) + " is a collective or copy; its argument " +
                     std::to_string(arg) + " must be a buffer");
  if (!value.buffer && value.value.bits != n.values[arg].bits) {
    n.values[arg] = value.value;
    n.dirty = true;
  }
  n.args[arg] = std::move(value);  // a Buffer is resolved (and compared) at the next run
}

bool CudaMultiGraph::set_dims(size_t node, const LaunchDims& dims) {
  auto busy = nodes_.busy("set_dims");
  Node& n = nodes_.at(node, "set_dims");
  if (n.kind != Kind::kKernel) return false;
  n.program->check_dims(dims);
  if (!same_dims(n.dims, dims)) {
    n.dims = dims;
    n.dirty = true;
  }
  return true;
}

KernelNodeParams CudaMultiGraph::node_params(Node& n) const {
  return kernel_node_params(*n.program, n.dims, n.packed, n.packed_size, n.extra);
}

void CudaMultiGraph::issue(Node& n, const std::vector<CUstream>& streams) {
  if (n.kind == Kind::kCollective) {
    size_t ranks = n.comm->size();
    n.comm->run(n.spec, buffers(n, ranks, ranks), buffers(n, 0, ranks), streams);
    return;
  }
  const Context& dst = *contexts_[n.devices[0]];
  const DriverApi& d = dst.api();
  CUdeviceptr to = n.values[0].as_pointer(), from = n.values[1].as_pointer();
  dst.make_current();
  // between GPUs as well: unified addressing names each side's device, and peer access is enabled before the
  // capture (cuMemcpyPeerAsync is refused while a stream captures: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
  dst.check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync(to, from, n.nbytes, streams[0]),
            n.devices.size() == 1 ? "capturing a device-to-device copy" : "capturing a copy between GPUs");
}

CUgraph CudaMultiGraph::capture(Node& n) {
  if (n.kind == Kind::kCopy && n.devices.size() == 2)
    contexts_[n.devices[0]]->enable_peer_access(*contexts_[n.devices[1]]);  // before the capture: not a stream call
  const Context& origin = *contexts_[n.devices[0]];
  const DriverApi& d = origin.api();
  std::vector<CUstream> streams;
  for (size_t dev : n.devices) streams.push_back(capture_streams_[dev]);
  // A copy is issued on its destination's stream only; a collective forks every rank's stream from the first's.
  size_t forked = n.kind == Kind::kCollective ? n.devices.size() : 1;
  origin.make_current();
  // RELAXED: NCCL's own calls (its proxy thread, lazy setup) must not be refused because a capture is going on
  origin.check("cuStreamBeginCapture_v2", d.cuStreamBeginCapture(streams[0], CU_STREAM_CAPTURE_MODE_RELAXED),
               "starting a stream capture");
  CUgraph child = nullptr;
  try {
    CUevent fork = fork_[n.devices[0]];
    if (forked > 1)
      origin.check("cuEventRecord", d.cuEventRecord(fork, streams[0]), "forking a capture to the other GPUs");
    for (size_t r = 1; r < forked; ++r) {
      const Context& c = *contexts_[n.devices[r]];
      c.make_current();
      c.check("cuStreamWaitEvent", d.cuStreamWaitEvent(streams[r], fork, 0), "joining a capture");
    }
    issue(n, streams);
    for (size_t r = 1; r < forked; ++r) {
      const Context& c = *contexts_[n.devices[r]];
      CUevent join = join_[n.devices[r]];
      c.make_current();
      c.check("cuEventRecord", d.cuEventRecord(join, streams[r]), "joining a GPU back into a capture");
      origin.make_current();
      origin.check("cuStreamWaitEvent", d.cuStreamWaitEvent(streams[0], join, 0), "joining a GPU back into a capture");
    }
  } catch (...) {
    origin.make_current();
    if (d.cuStreamEndCapture(streams[0], &child) == CUDA_SUCCESS && child != nullptr) d.cuGraphDestroy(child);
    throw;
  }
  origin.make_current();
  origin.check("cuStreamEndCapture", d.cuStreamEndCapture(streams[0], &child),
               n.kind == Kind::kCollective ? "capturing an NCCL collective" : "capturing a copy");
  return child;
}

void CudaMultiGraph::build() {
  const DriverApi& d = contexts_[0]->api();
  if (exec_ != nullptr) d.cuGraphExecDestroy(exec_);
  if (graph_ != nullptr) d.cuGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  contexts_[0]->make_current();
  contexts_[0]->check("cuGraphCreate", d.cuGraphCreate(&graph_, 0), "creating a CUDA graph");
  std::vector<CUgraphNode> last(contexts_.size(), nullptr), deps;
  for (Node& n : nodes_) {
    deps.clear();
    for (size_t dev : n.devices)
      if (last[dev] != nullptr && std::find(deps.begin(), deps.end(), last[dev]) == deps.end())
        deps.push_back(last[dev]);
    const Context& c = *contexts_[n.devices[0]];
    if (n.kind == Kind::kKernel) {
      KernelNodeParams p = node_params(n);
      c.make_current();
      CUresult r = d.cuGraphAddKernelNode(&n.node, graph_, deps.data(), deps.size(), &p);
      if (r != CUDA_SUCCESS) c.fail("cuGraphAddKernelNode", r, "adding kernel " + n.program->name() + " to a graph");
    } else {
      CUgraph child = capture(n);
      c.make_current();
      // the child graph is cloned into the node: ours is destroyed right away
      CUresult r = d.cuGraphAddChildGraphNode(&n.node, graph_, deps.data(), deps.size(), child);
      d.cuGraphDestroy(child);
      if (r != CUDA_SUCCESS) c.fail("cuGraphAddChildGraphNode", r, "adding a captured step to a graph");
    }
    for (size_t dev : n.devices) last[dev] = n.node;
    n.dirty = false;
  }
  contexts_[0]->make_current();
  contexts_[0]->check("cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlags(&exec_, graph_, 0),
                      "instantiating a CUDA graph over several GPUs");
  rebuild_ = false;
  ++instantiations_;
}

void CudaMultiGraph::launch() {
  const Context& first = *contexts_[0];
  const DriverApi& d = first.api();
  // The graph runs on the first GPU's stream: it must wait for what the other GPUs' streams hold, and their later
  // work must wait for it, as if each GPU's steps had been queued on its own stream.
  for (size_t i = 1; i < contexts_.size(); ++i) {
    const Context& c = *contexts_[i];
    c.make_current();
    c.check("cuEventRecord", d.cuEventRecord(ready_[i], c.stream()), "ordering a graph after a GPU's work");
    first.make_current();
    first.check("cuStreamWaitEvent", d.cuStreamWaitEvent(first.stream(), ready_[i], 0),
                "ordering a graph after a GPU's work");
  }
  first.make_current();
  first.check("cuGraphLaunch", d.cuGraphLaunch(exec_, first.stream()), "launching a CUDA graph over several GPUs");
  if (contexts_.size() == 1) return;
  first.check("cuEventRecord", d.cuEventRecord(done_, first.stream()), "ordering GPUs' later work after a graph");
  for (size_t i = 1; i < contexts_.size(); ++i) {
    const Context& c = *contexts_[i];
    c.make_current();
    c.check("cuStreamWaitEvent", d.cuStreamWaitEvent(c.stream(), done_, 0), "ordering later work after a graph");
  }
}

void CudaMultiGraph::run() {
  auto busy = nodes_.busy("run");
  if (nodes_.empty()) return;
  auto unpin = nodes_.unpin_on_exit();
  nodes_.pin_buffers([](Node& n, size_t i, Buffer& b) {
    KernelArg v = KernelArg::pointer(b.ptr());
    if (v.bits != n.values[i].bits) {
      n.values[i] = v;
      n.dirty = true;
    }
  });
  for (Node& n : nodes_) {
    if (n.kind == Kind::kKernel && n.dirty) {
      n.program->pack(n.values.data(), n.values.size(), n.packed);
      n.packed_size = n.packed.size();
    }
  }
  const DriverApi& d = contexts_[0]->api();
  if (exec_ == nullptr || rebuild_) {
    build();
  } else {
    for (Node& n : nodes_) {
      if (!n.dirty) continue;
      const Context& c = *contexts_[n.devices[0]];
      if (n.kind == Kind::kKernel) {
        KernelNodeParams p = node_params(n);
        c.make_current();
        CUresult r = d.cuGraphExecKernelNodeSetParams(exec_, n.node, &p);
        if (r != CUDA_SUCCESS)
          c.fail("cuGraphExecKernelNodeSetParams", r, "updating kernel " + n.program->name() + " in a graph");
        ++node_updates_;
      } else {
        CUgraph child = capture(n);
        ++recaptures_;
        contexts_[0]->make_current();
        CUresult r = d.cuGraphExecChildGraphNodeSetParams(exec_, n.node, child);
        d.cuGraphDestroy(child);
        if (r != CUDA_SUCCESS) {
          // the driver would not swap this capture in (its shape differs): capture and instantiate everything anew
          build();
          break;
        }
      }
      n.dirty = false;
    }
  }
  launch();
}

}  // namespace tg::cuda
