// The fake driver's execution entry points (see fake_driver.h): modules and kernel launches, streams and events,
// CUDA graphs. Work on a stream is queued and runs only when something waits for it.
#include <algorithm>
#include <cstring>
#include <iterator>

#include "fake_state.h"

namespace tg::cuda::fake {
namespace {

// The packed argument bytes of a launch, checked against the kernel's layout as a real driver checks them.
int gather_args(const KernelSignature& sig, void** params, void** extra, std::string* out) {
  out->assign(sig.params_size, '\0');
  if (extra != nullptr) {
    const void* buf = nullptr;
    const size_t* size = nullptr;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = static_cast<const size_t*>(extra[i + 1]);
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (buf == nullptr || size == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (*size > sig.params_size) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;  // what the real driver answers
    if (*size < sig.params_size) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(out->data(), buf, *size);
  } else if (params != nullptr) {
    for (size_t i = 0; i < sig.params.size(); ++i)
      std::memcpy(out->data() + sig.params[i].first, params[i], sig.params[i].second);
  } else if (sig.params_size != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

int node_from(State& s, const KernelNodeParams* p, State::Node* node) {
  auto f = s.functions.find(u(p->func));
  if (f == s.functions.end()) return CUDA_ERROR_INVALID_VALUE;
  node->func = u(p->func);
  unsigned dims[6] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ};
  for (int i = 0; i < 3; ++i) {
    node->grid[i] = dims[i];
    node->block[i] = dims[3 + i];
  }
  return gather_args(f->second.sig, p->kernelParams, p->extra, &node->args);
}

// Every kernel of a graph node (a child graph's, recursively) as a launch from a graph.
void record_launch(State& s, const State::Node& n, bool from_graph);
void record_launches(State& s, const State::Node& n) {
  if (n.func != 0) record_launch(s, n, true);
  for (const State::Node& c : n.child) record_launches(s, c);
}

// Runs the captured work of a graph node (kernels compute nothing).
void run_node(const State::Node& n) {
  if (n.op) n.op();
  for (const State::Node& c : n.child) run_node(c);
}

void record_launch(State& s, const State::Node& n, bool from_graph) {
  Launch l{s.functions[n.func].sig.name, {n.grid[0], n.grid[1], n.grid[2]}, {n.block[0], n.block[1], n.block[2]},
           n.args, from_graph};
  s.launches.push_back(std::move(l));
}

// ---- modules and launches ----
CUresult f_cuModuleLoadData(CUmodule* m, const void* image) {
  const char* text = static_cast<const char*>(image);
  FAKE_ENTER("cuModuleLoadData", {}, std::string(text, strnlen(text, 64)));
  int dev = current_device(s);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  size_t magic = std::strlen(kCubinMagic);
  if (std::strncmp(text, kCubinMagic, magic) != 0) return CUDA_ERROR_INVALID_IMAGE;
  std::uint64_t handle = s.handle();
  s.modules[handle] = {dev, parse_kernels(text + magic)};
  *m = h<CUmod_st>(handle);
  return CUDA_SUCCESS;
}
CUresult f_cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  FAKE_ENTER("cuModuleGetFunction", {u(m)}, name);
  auto it = s.modules.find(u(m));
  if (it == s.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (const KernelSignature& k : it->second.kernels) {
    if (k.name != name) continue;
    std::uint64_t handle = s.handle();
    s.functions[handle] = {u(m), k};
    *f = h<CUfunc_st>(handle);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}
CUresult f_cuModuleUnload(CUmodule m) {
  FAKE_ENTER("cuModuleUnload", {u(m)});
  if (s.modules.erase(u(m)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  for (auto it = s.functions.begin(); it != s.functions.end();)
    it = it->second.module == u(m) ? s.functions.erase(it) : std::next(it);
  return CUDA_SUCCESS;
}
CUresult f_cuFuncGetAttribute(int* v, int attr, CUfunction f) {
  FAKE_ENTER("cuFuncGetAttribute", {static_cast<std::uint64_t>(attr), u(f)});
  auto it = s.functions.find(u(f));
  if (it == s.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (attr == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) *v = it->second.sig.max_threads;
  else if (attr == CU_FUNC_ATTRIBUTE_NUM_REGS) *v = 16;
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
CUresult f_cuFuncSetAttribute(CUfunction f, int attr, int v) {
  FAKE_ENTER("cuFuncSetAttribute", {u(f), static_cast<std::uint64_t>(attr), static_cast<std::uint64_t>(v)});
  auto it = s.functions.find(u(f));
  if (it == s.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  // an H100's opt-in limit per block (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
  if (attr != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || v < 0 || v > 232448) return CUDA_ERROR_INVALID_VALUE;
  it->second.dynamic_shared_max = v;
  return CUDA_SUCCESS;
}
CUresult f_cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  FAKE_ENTER("cuFuncGetParamInfo", {u(f), index});
  auto it = s.functions.find(u(f));
  if (it == s.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= it->second.sig.params.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = it->second.sig.params[index].first;
  *size = it->second.sig.params[index].second;
  return CUDA_SUCCESS;
}
// Checks what the real cuTensorMapEncodeTiled checks (CUDA driver API reference) and answers
// CUDA_ERROR_INVALID_VALUE as it does; writes a FakeTensorMap a test can read back. Needs no context, as the real one.
CUresult f_cuTensorMapEncodeTiled(TensorMap* map, int data_type, std::uint32_t rank, void* address,
                                  const std::uint64_t* dims, const std::uint64_t* strides, const std::uint32_t* box,
                                  const std::uint32_t* element_strides, int interleave, int swizzle, int l2, int oob) {
  FAKE_ENTER("cuTensorMapEncodeTiled", {u(address), rank, static_cast<std::uint64_t>(data_type),
                                        static_cast<std::uint64_t>(swizzle)});
  (void)s;
  // bytes of an element of each CUtensorMapDataType (UINT8, UINT16, UINT32, INT32, UINT64, INT64, FLOAT16, FLOAT32,
  // FLOAT64, BFLOAT16, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ)
  static constexpr std::uint64_t kElemBytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  if (map == nullptr || u(map) % 64 != 0 || address == nullptr || u(address) % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (data_type < 0 || data_type >= static_cast<int>(std::size(kElemBytes)) || rank < 1 || rank > 5)
    return CUDA_ERROR_INVALID_VALUE;
  // only what tinygrad asks for: no interleave, a 0/32/64/128-byte swizzle, any L2 promotion, either OOB fill
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || swizzle < 0 || swizzle > 3 || l2 < 0 || l2 > 3 || oob < 0 ||
      oob > 1)
    return CUDA_ERROR_INVALID_VALUE;
  const std::uint64_t elem = kElemBytes[data_type];
  for (std::uint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (std::uint64_t{1} << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (box[i] == 0 || box[i] > 256 || element_strides[i] == 0 || element_strides[i] > 8)
      return CUDA_ERROR_INVALID_VALUE;
    if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (std::uint64_t{1} << 40)))
      return CUDA_ERROR_INVALID_VALUE;
  }
  const std::uint64_t inner = box[0] * elem;  // bytes of the box's innermost row
  if (inner % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && inner > (std::uint64_t{16} << swizzle)) return CUDA_ERROR_INVALID_VALUE;
  FakeTensorMap out{};
  out.address = u(address);
  out.rank = rank;
  out.data_type = static_cast<std::uint32_t>(data_type);
  for (std::uint32_t i = 0; i < rank; ++i) {
    out.dims[i] = dims[i];
    if (i + 1 < rank) out.strides[i] = strides[i];
    out.box[i] = box[i];
    out.element_strides[i] = static_cast<std::uint8_t>(element_strides[i]);
  }
  out.interleave = static_cast<std::uint8_t>(interleave);
  out.swizzle = static_cast<std::uint8_t>(swizzle);
  out.l2_promotion = static_cast<std::uint8_t>(l2);
  out.oob_fill = static_cast<std::uint8_t>(oob);
  std::memcpy(map, &out, sizeof(out));
  return CUDA_SUCCESS;
}
CUresult f_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned smem, CUstream stream, void** params, void** extra) {
  FAKE_ENTER("cuLaunchKernel", {u(f), gx, gy, gz, bx, by, bz, smem, u(stream)});
  if (int r = stream_check(s, stream)) return r;
  auto it = s.functions.find(u(f));
  if (it == s.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (std::uint64_t{bx} * by * bz > static_cast<std::uint64_t>(it->second.sig.max_threads))
    return CUDA_ERROR_INVALID_VALUE;
  if (smem > static_cast<unsigned>(it->second.dynamic_shared_max)) return CUDA_ERROR_INVALID_VALUE;
  State::Node n;
  n.func = u(f);
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  for (int i = 0; i < 3; ++i) n.grid[i] = dims[i], n.block[i] = dims[3 + i];
  if (int r = gather_args(it->second.sig, params, extra, &n.args)) return r;
  s.calls.back().data = n.args;
  auto cap = s.captures.find(s.streams[u(stream)].capture);
  if (cap != s.captures.end()) {  // captured: a kernel node, recorded as a launch when its graph runs
    n.what = "cuLaunchKernel";
    cap->second.nodes.push_back(std::move(n));
    return CUDA_SUCCESS;
  }
  record_launch(s, n, false);
  State* sp = &s;
  enqueue(s, u(stream), [sp] { sp->clock_ms += 0.002; });
  return CUDA_SUCCESS;
}

// ---- streams and events ----
CUresult f_cuStreamCreate(CUstream* stream, unsigned int flags) {
  FAKE_ENTER("cuStreamCreate", {flags});
  int dev = current_device(s);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  std::uint64_t handle = s.handle();
  s.streams[handle].device = dev;
  *stream = h<CUstream_st>(handle);
  return CUDA_SUCCESS;
}
CUresult f_cuStreamDestroy(CUstream stream) {
  FAKE_ENTER("cuStreamDestroy", {u(stream)});
  if (s.streams.count(u(stream)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  run_until(s, u(stream), s.seq);
  s.streams.erase(u(stream));
  return CUDA_SUCCESS;
}
CUresult f_cuStreamSynchronize(CUstream stream) {
  FAKE_ENTER("cuStreamSynchronize", {u(stream)});
  if (s.streams.count(u(stream)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (s.streams[u(stream)].capture != 0) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;  // not allowed in a capture
  run_until(s, u(stream), s.seq);
  return CUDA_SUCCESS;
}
CUresult f_cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  FAKE_ENTER("cuStreamWaitEvent", {u(stream), u(event), flags});
  auto ev = s.events.find(u(event));
  if (s.streams.count(u(stream)) == 0 || ev == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  State::Stream& waiter = s.streams[u(stream)];
  auto cap = s.captures.find(ev->second.capture);
  if (ev->second.recorded && cap != s.captures.end()) {
    // an event of a capture: the waiting stream joins it (a fork), or, inside it, waits for the event's stream
    // (a join, once the event is that stream's last captured work); nothing is queued
    State::Capture& c = cap->second;
    if (waiter.capture == 0) {
      waiter.capture = cap->first;
      c.unjoined.insert(u(stream));
    } else if (waiter.capture != cap->first) {
      return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    } else if (ev->second.stream != u(stream) && c.last_seq[ev->second.stream] == ev->second.seq) {
      c.unjoined.erase(ev->second.stream);
    }
    return CUDA_SUCCESS;
  }
  if (waiter.capture != 0) return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;  // a capture cannot wait on outside work
  if (ev->second.recorded) {
    std::uint64_t other = ev->second.stream, seq = ev->second.seq;
    State* sp = &s;
    enqueue(s, u(stream), [sp, other, seq] { run_until(*sp, other, seq); });
  }
  return CUDA_SUCCESS;
}
CUresult f_cuEventCreate(CUevent* event, unsigned int flags) {
  FAKE_ENTER("cuEventCreate", {flags});
  if (current_device(s) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  std::uint64_t handle = s.handle();
  s.events[handle] = State::Event{(flags & CU_EVENT_DISABLE_TIMING) == 0};
  s.events[handle].device = current_device(s);
  *event = h<CUevent_st>(handle);
  return CUDA_SUCCESS;
}
CUresult f_cuEventDestroy(CUevent event) {
  FAKE_ENTER("cuEventDestroy", {u(event)});
  return s.events.erase(u(event)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult f_cuEventRecord(CUevent event, CUstream stream) {
  FAKE_ENTER("cuEventRecord", {u(event), u(stream)});
  if (int r = stream_check(s, stream)) return r;
  auto it = s.events.find(u(event));
  if (it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  // as the driver: an event and the stream it is recorded on belong to one context
  if (it->second.device != s.streams[u(stream)].device) return CUDA_ERROR_INVALID_HANDLE;
  State* sp = &s;
  std::uint64_t handle = u(event);
  std::uint64_t seq = enqueue(s, u(stream), [sp, handle] {
    auto e = sp->events.find(handle);
    if (e != sp->events.end()) e->second.done = true, e->second.time_ms = sp->clock_ms;
  });
  it->second = State::Event{it->second.timing, true, false, u(stream), seq, 0, s.streams[u(stream)].capture,
                            it->second.device};
  return CUDA_SUCCESS;
}
CUresult f_cuEventQuery(CUevent event) {
  FAKE_ENTER("cuEventQuery", {u(event)});
  auto it = s.events.find(u(event));
  if (it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  return !it->second.recorded || it->second.done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult f_cuEventSynchronize(CUevent event) {
  FAKE_ENTER("cuEventSynchronize", {u(event)});
  auto it = s.events.find(u(event));
  if (it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second.recorded) run_until(s, it->second.stream, it->second.seq);
  return CUDA_SUCCESS;
}
CUresult f_cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  FAKE_ENTER("cuEventElapsedTime", {u(start), u(end)});
  auto a = s.events.find(u(start)), b = s.events.find(u(end));
  if (a == s.events.end() || b == s.events.end() || !a->second.timing || !b->second.timing)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!a->second.done || !b->second.done) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(b->second.time_ms - a->second.time_ms);
  return CUDA_SUCCESS;
}

// ---- graphs ----
CUresult f_cuGraphCreate(CUgraph* g, unsigned int flags) {
  FAKE_ENTER("cuGraphCreate", {flags});
  std::uint64_t handle = s.handle();
  s.graphs[handle];
  *g = h<CUgraph_st>(handle);
  return CUDA_SUCCESS;
}
CUresult f_cuGraphAddKernelNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t ndeps,
                                const KernelNodeParams* p) {
  std::vector<std::uint64_t> args = {u(g), ndeps};
  for (size_t i = 0; i < ndeps; ++i) args.push_back(u(deps[i]));
  FAKE_ENTER("cuGraphAddKernelNode", std::move(args));
  auto it = s.graphs.find(u(g));
  if (it == s.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < ndeps; ++i)
    if (std::find(it->second.begin(), it->second.end(), u(deps[i])) == it->second.end())
      return CUDA_ERROR_INVALID_VALUE;
  State::Node n;
  if (int r = node_from(s, p, &n)) return r;
  s.calls.back().data = n.args;
  std::uint64_t handle = s.handle();
  s.nodes[handle] = n;
  it->second.push_back(handle);
  *node = h<CUgraphNode_st>(handle);
  return CUDA_SUCCESS;
}
// Edges with data (CUDA 12.3): recorded as (graph, from, to, type, from_port) and checked as the driver does; the
// fake runs a graph's nodes in the order they were added either way.
CUresult f_cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                  const GraphEdgeData* edges, size_t count) {
  std::vector<std::uint64_t> args = {u(g), count};
  for (size_t i = 0; i < count; ++i) {
    args.insert(args.end(), {u(from[i]), u(to[i])});
    if (edges != nullptr) args.insert(args.end(), {edges[i].type, edges[i].from_port});
  }
  FAKE_ENTER("cuGraphAddDependencies", std::move(args));
  auto it = s.graphs.find(u(g));
  if (it == s.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < count; ++i) {
    auto& nodes = it->second;
    auto a = std::find(nodes.begin(), nodes.end(), u(from[i])), b = std::find(nodes.begin(), nodes.end(), u(to[i]));
    if (a == nodes.end() || b == nodes.end() || a >= b) return CUDA_ERROR_INVALID_VALUE;
    if (edges == nullptr) continue;
    const GraphEdgeData& e = edges[i];
    bool zero = e.to_port == 0 && std::all_of(std::begin(e.reserved), std::end(e.reserved), [](auto c) { return !c; });
    // a programmatic edge leaves a kernel node's programmatic (1) or launch-order (2) port, to a kernel node
    auto kernel = [&](CUgraphNode n) { auto k = s.nodes.find(u(n)); return k != s.nodes.end() && k->second.func; };
    bool kernels = kernel(from[i]) && kernel(to[i]);
    if (!zero || e.type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ||
        (e.type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC && (!kernels || e.from_port == 0 || e.from_port > 2)))
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult f_cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph g, unsigned long long flags) {
  FAKE_ENTER("cuGraphInstantiateWithFlags", {u(g), flags});
  auto it = s.graphs.find(u(g));
  if (it == s.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  State::Exec e;
  e.order = it->second;
  for (std::uint64_t n : e.order) e.nodes[n] = s.nodes[n];
  std::uint64_t handle = s.handle();
  s.execs[handle] = std::move(e);
  *exec = h<CUgraphExec_st>(handle);
  return CUDA_SUCCESS;
}
CUresult f_cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node, const KernelNodeParams* p) {
  FAKE_ENTER("cuGraphExecKernelNodeSetParams", {u(exec), u(node)});
  auto e = s.execs.find(u(exec));
  if (e == s.execs.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto n = e->second.nodes.find(u(node));
  if (n == e->second.nodes.end()) return CUDA_ERROR_INVALID_VALUE;
  State::Node updated;
  if (int r = node_from(s, p, &updated)) return r;
  if (updated.func != n->second.func) return CUDA_ERROR_INVALID_VALUE;  // the function cannot change
  s.calls.back().data = updated.args;
  n->second = updated;
  return CUDA_SUCCESS;
}
CUresult f_cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  FAKE_ENTER("cuGraphLaunch", {u(exec), u(stream)});
  if (int r = stream_check(s, stream)) return r;
  auto e = s.execs.find(u(exec));
  if (e == s.execs.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<State::Node> nodes;
  for (std::uint64_t n : e->second.order) nodes.push_back(e->second.nodes[n]);
  for (const State::Node& n : nodes) record_launches(s, n);
  State* sp = &s;
  double cost = 0.001 * static_cast<double>(nodes.size());
  // the captured work (copies, collectives) runs in node order when the stream reaches the graph
  enqueue(s, u(stream), [sp, cost, nodes] {
    for (const State::Node& n : nodes) run_node(n);
    sp->clock_ms += cost;
  });
  return CUDA_SUCCESS;
}

// ---- stream capture and child graphs ----
CUresult f_cuStreamBeginCapture(CUstream stream, int mode) {
  FAKE_ENTER("cuStreamBeginCapture", {u(stream), static_cast<std::uint64_t>(mode)});
  if (int r = stream_check(s, stream)) return r;
  if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  State::Stream& st = s.streams[u(stream)];
  if (st.capture != 0) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t id = s.handle();
  s.captures[id].origin = u(stream);
  st.capture = id;
  return CUDA_SUCCESS;
}
CUresult f_cuStreamEndCapture(CUstream stream, CUgraph* g) {
  FAKE_ENTER("cuStreamEndCapture", {u(stream)});
  auto st = s.streams.find(u(stream));
  if (st == s.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto cap = s.captures.find(st->second.capture);
  if (cap == s.captures.end() || cap->second.origin != u(stream)) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t id = cap->first;
  State::Capture c = std::move(cap->second);
  s.captures.erase(cap);
  for (auto& [handle, other] : s.streams)  // every stream of the capture leaves it, whatever the outcome
    if (other.capture == id) other.capture = 0;
  if (!c.unjoined.empty()) return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  std::uint64_t graph = s.handle();
  auto& order = s.graphs[graph];
  for (State::Node& n : c.nodes) {
    std::uint64_t handle = s.handle();
    s.nodes[handle] = std::move(n);
    order.push_back(handle);
  }
  *g = h<CUgraph_st>(graph);
  return CUDA_SUCCESS;
}
// The nodes of graph `child`, cloned (a child graph node keeps its own copy, as the driver's does).
std::vector<State::Node> clone_graph(State& s, std::uint64_t child) {
  std::vector<State::Node> out;
  for (std::uint64_t n : s.graphs[child]) out.push_back(s.nodes[n]);
  return out;
}
CUresult f_cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t ndeps,
                                    CUgraph child) {
  std::vector<std::uint64_t> args = {u(g), ndeps};
  for (size_t i = 0; i < ndeps; ++i) args.push_back(u(deps[i]));
  args.push_back(u(child));
  FAKE_ENTER("cuGraphAddChildGraphNode", std::move(args));
  auto it = s.graphs.find(u(g));
  if (it == s.graphs.end() || s.graphs.count(u(child)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < ndeps; ++i)
    if (std::find(it->second.begin(), it->second.end(), u(deps[i])) == it->second.end())
      return CUDA_ERROR_INVALID_VALUE;
  State::Node n;
  n.is_child = true;
  n.child = clone_graph(s, u(child));
  std::uint64_t handle = s.handle();
  s.nodes[handle] = std::move(n);
  s.graphs[u(g)].push_back(handle);
  *node = h<CUgraphNode_st>(handle);
  return CUDA_SUCCESS;
}
// Whether two node lists have the same shape: what cuGraphExecChildGraphNodeSetParams requires.
bool same_topology(const std::vector<State::Node>& a, const std::vector<State::Node>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].func != b[i].func || a[i].is_child != b[i].is_child || a[i].what != b[i].what ||
        !same_topology(a[i].child, b[i].child))
      return false;
  return true;
}
CUresult f_cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  FAKE_ENTER("cuGraphExecChildGraphNodeSetParams", {u(exec), u(node), u(child)});
  auto e = s.execs.find(u(exec));
  if (e == s.execs.end() || s.graphs.count(u(child)) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto n = e->second.nodes.find(u(node));
  if (n == e->second.nodes.end() || !n->second.is_child) return CUDA_ERROR_INVALID_VALUE;
  std::vector<State::Node> updated = clone_graph(s, u(child));
  if (!same_topology(n->second.child, updated)) return CUDA_ERROR_INVALID_VALUE;
  n->second.child = std::move(updated);
  return CUDA_SUCCESS;
}
CUresult f_cuGraphExecDestroy(CUgraphExec exec) {
  FAKE_ENTER("cuGraphExecDestroy", {u(exec)});
  return s.execs.erase(u(exec)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult f_cuGraphDestroy(CUgraph g) {
  FAKE_ENTER("cuGraphDestroy", {u(g)});
  auto it = s.graphs.find(u(g));
  if (it == s.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (std::uint64_t n : it->second) s.nodes.erase(n);
  s.graphs.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace

void add_exec_entry_points(std::map<std::string, void*>& table) {
  table["cuModuleLoadData"] = reinterpret_cast<void*>(&f_cuModuleLoadData);
  table["cuModuleGetFunction"] = reinterpret_cast<void*>(&f_cuModuleGetFunction);
  table["cuModuleUnload"] = reinterpret_cast<void*>(&f_cuModuleUnload);
  table["cuFuncGetAttribute"] = reinterpret_cast<void*>(&f_cuFuncGetAttribute);
  table["cuFuncSetAttribute"] = reinterpret_cast<void*>(&f_cuFuncSetAttribute);
  table["cuFuncGetParamInfo"] = reinterpret_cast<void*>(&f_cuFuncGetParamInfo);
  table["cuLaunchKernel"] = reinterpret_cast<void*>(&f_cuLaunchKernel);
  table["cuTensorMapEncodeTiled"] = reinterpret_cast<void*>(&f_cuTensorMapEncodeTiled);
  table["cuStreamCreate"] = reinterpret_cast<void*>(&f_cuStreamCreate);
  table["cuStreamDestroy"] = reinterpret_cast<void*>(&f_cuStreamDestroy);
  table["cuStreamSynchronize"] = reinterpret_cast<void*>(&f_cuStreamSynchronize);
  table["cuStreamWaitEvent"] = reinterpret_cast<void*>(&f_cuStreamWaitEvent);
  table["cuEventCreate"] = reinterpret_cast<void*>(&f_cuEventCreate);
  table["cuEventDestroy"] = reinterpret_cast<void*>(&f_cuEventDestroy);
  table["cuEventRecord"] = reinterpret_cast<void*>(&f_cuEventRecord);
  table["cuEventQuery"] = reinterpret_cast<void*>(&f_cuEventQuery);
  table["cuEventSynchronize"] = reinterpret_cast<void*>(&f_cuEventSynchronize);
  table["cuEventElapsedTime"] = reinterpret_cast<void*>(&f_cuEventElapsedTime);
  table["cuGraphCreate"] = reinterpret_cast<void*>(&f_cuGraphCreate);
  table["cuGraphAddKernelNode"] = reinterpret_cast<void*>(&f_cuGraphAddKernelNode);
  table["cuGraphInstantiateWithFlags"] = reinterpret_cast<void*>(&f_cuGraphInstantiateWithFlags);
  table["cuGraphAddDependencies"] = reinterpret_cast<void*>(&f_cuGraphAddDependencies);
  table["cuGraphExecKernelNodeSetParams"] = reinterpret_cast<void*>(&f_cuGraphExecKernelNodeSetParams);
  table["cuGraphLaunch"] = reinterpret_cast<void*>(&f_cuGraphLaunch);
  table["cuGraphExecDestroy"] = reinterpret_cast<void*>(&f_cuGraphExecDestroy);
  table["cuGraphDestroy"] = reinterpret_cast<void*>(&f_cuGraphDestroy);
  table["cuStreamBeginCapture"] = reinterpret_cast<void*>(&f_cuStreamBeginCapture);
  table["cuStreamEndCapture"] = reinterpret_cast<void*>(&f_cuStreamEndCapture);
  table["cuGraphAddChildGraphNode"] = reinterpret_cast<void*>(&f_cuGraphAddChildGraphNode);
  table["cuGraphExecChildGraphNodeSetParams"] = reinterpret_cast<void*>(&f_cuGraphExecChildGraphNodeSetParams);
}

}  // namespace tg::cuda::fake
