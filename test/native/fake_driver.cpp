// The fake driver's entry points (see fake_driver.h). Each records itself, honours injected failures, and checks
// what a real driver checks where a mistake of the runtime would otherwise go unnoticed: a current context, the
// stream's device, pointer ranges, the exact size of packed kernel arguments. The five bootstrap entry points are
// exported under the driver's own names at the end of this file; the rest are reached through cuGetProcAddress_v2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "fake_state.h"

namespace tg::cuda::fake {
namespace {

std::mutex g_mutex;
std::shared_ptr<State> g_state;
thread_local std::uint64_t t_context = 0;

const std::pair<int, const char*> kErrorNames[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
};

// ---- bootstrap ----
CUresult f_cuInit(unsigned int flags) {
  FAKE_ENTER("cuInit", {flags});
  (void)s;
  return CUDA_SUCCESS;
}
CUresult f_cuDriverGetVersion(int* v) {
  FAKE_ENTER("cuDriverGetVersion", {});
  *v = s.cfg.driver_version;
  return CUDA_SUCCESS;
}
CUresult f_cuGetErrorName(CUresult r, const char** name) {
  for (const auto& [code, n] : kErrorNames)
    if (code == r) return *name = n, CUDA_SUCCESS;
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult f_cuGetErrorString(CUresult r, const char** text) {
  for (const auto& [code, n] : kErrorNames)
    if (code == r) return *text = r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "fake driver error", CUDA_SUCCESS;
  return CUDA_ERROR_INVALID_VALUE;
}

// ---- devices and contexts ----
CUresult f_cuDeviceGetCount(int* n) {
  FAKE_ENTER("cuDeviceGetCount", {});
  *n = s.cfg.device_count;
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceGet(CUdevice* d, int ordinal) {
  FAKE_ENTER("cuDeviceGet", {static_cast<std::uint64_t>(ordinal)});
  if (ordinal < 0 || ordinal >= s.cfg.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceGetName(char* name, int len, CUdevice d) {
  FAKE_ENTER("cuDeviceGetName", {static_cast<std::uint64_t>(d)});
  (void)s;
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU %d", d);
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
  FAKE_ENTER("cuDeviceGetAttribute", {static_cast<std::uint64_t>(attr), static_cast<std::uint64_t>(d)});
  const std::map<int, int> values = {
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024}, {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647}, {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},              {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50 << 20},    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, s.cfg.cc_major},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, s.cfg.cc_minor},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448}};
  auto it = values.find(attr);
  if (it == values.end() || d < 0 || d >= s.cfg.device_count) return CUDA_ERROR_INVALID_VALUE;
  *v = it->second;
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceTotalMem(size_t* bytes, CUdevice d) {
  FAKE_ENTER("cuDeviceTotalMem", {static_cast<std::uint64_t>(d)});
  *bytes = s.cfg.memory_bytes;
  return CUDA_SUCCESS;
}
CUresult f_cuDeviceCanAccessPeer(int* can, CUdevice d, CUdevice peer) {
  FAKE_ENTER("cuDeviceCanAccessPeer", {static_cast<std::uint64_t>(d), static_cast<std::uint64_t>(peer)});
  (void)s;
  *can = d != peer;
  return CUDA_SUCCESS;
}
CUresult f_cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  FAKE_ENTER("cuDevicePrimaryCtxRetain", {static_cast<std::uint64_t>(d)});
  if (d < 0 || d >= s.cfg.device_count) return CUDA_ERROR_INVALID_DEVICE;
  s.context_refs[static_cast<size_t>(d)]++;
  *ctx = h<CUctx_st>(s.contexts[static_cast<size_t>(d)]);
  return CUDA_SUCCESS;
}
CUresult f_cuDevicePrimaryCtxRelease(CUdevice d) {
  FAKE_ENTER("cuDevicePrimaryCtxRelease", {static_cast<std::uint64_t>(d)});
  if (d < 0 || d >= s.cfg.device_count || s.context_refs[static_cast<size_t>(d)] == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  s.context_refs[static_cast<size_t>(d)]--;
  return CUDA_SUCCESS;
}
CUresult f_cuCtxGetCurrent(CUcontext* ctx) {
  FAKE_ENTER("cuCtxGetCurrent", {});
  (void)s;
  *ctx = h<CUctx_st>(t_context);
  return CUDA_SUCCESS;
}
CUresult f_cuCtxSetCurrent(CUcontext ctx) {
  FAKE_ENTER("cuCtxSetCurrent", {u(ctx)});
  if (ctx != nullptr && device_of_context(s, u(ctx)) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_context = u(ctx);
  return CUDA_SUCCESS;
}
CUresult f_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  FAKE_ENTER("cuCtxEnablePeerAccess", {u(peer), flags});
  int dev = current_device(s), other = device_of_context(s, u(peer));
  if (dev < 0 || other < 0) return CUDA_ERROR_INVALID_CONTEXT;
  bool& on = s.peer_enabled[{dev, other}];
  if (on) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  on = true;
  return CUDA_SUCCESS;
}

// ---- memory ----
CUresult f_cuMemGetInfo(size_t* free_bytes, size_t* total) {
  FAKE_ENTER("cuMemGetInfo", {});
  int dev = current_device(s);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *total = s.cfg.memory_bytes;
  *free_bytes = s.cfg.memory_bytes - s.used[static_cast<size_t>(dev)];
  return CUDA_SUCCESS;
}
CUresult f_cuMemAlloc(CUdeviceptr* p, size_t n) {
  FAKE_ENTER("cuMemAlloc", {n});
  int dev = current_device(s);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (s.used[static_cast<size_t>(dev)] + n > s.cfg.memory_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  void* mem = std::malloc(n);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(mem, 0xA5, n);  // garbage, as fresh device memory is
  *p = u(mem);
  s.allocs[*p] = {n, dev};
  s.used[static_cast<size_t>(dev)] += n;
  s.calls.back().args.push_back(*p);
  return CUDA_SUCCESS;
}
CUresult f_cuMemFree(CUdeviceptr p) {
  FAKE_ENTER("cuMemFree", {p});
  auto it = s.allocs.find(p);
  if (it == s.allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  run_all(s);  // like the real cuMemFree: queued work that may use the memory finishes first
  s.used[static_cast<size_t>(it->second.device)] -= it->second.size;
  s.allocs.erase(it);
  std::free(h<void>(p));
  return CUDA_SUCCESS;
}
CUresult f_cuMemHostAlloc(void** p, size_t n, unsigned int flags) {
  FAKE_ENTER("cuMemHostAlloc", {n, flags});
  if (current_device(s) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *p = std::malloc(n == 0 ? 1 : n);
  if (*p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  s.pinned[u(*p)] = n;
  return CUDA_SUCCESS;
}
CUresult f_cuMemFreeHost(void* p) {
  FAKE_ENTER("cuMemFreeHost", {u(p)});
  if (s.pinned.erase(u(p)) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  return CUDA_SUCCESS;
}
bool is_pinned(State& s, const void* p, size_t n) {
  auto it = s.pinned.upper_bound(u(p));
  if (it == s.pinned.begin()) return false;
  --it;
  return u(p) >= it->first && u(p) + n <= it->first + it->second;
}
CUresult f_cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream stream) {
  FAKE_ENTER("cuMemcpyHtoDAsync", {dst, u(src), n, u(stream)});
  if (int r = stream_check(s, stream)) return r;
  if (device_memory(s, dst, n) != current_device(s)) return CUDA_ERROR_INVALID_VALUE;
  s.calls.back().args.push_back(is_pinned(s, src, n));
  enqueue(s, u(stream), [dst, src, n] { std::memcpy(h<void>(dst), src, n); });
  return CUDA_SUCCESS;
}
CUresult f_cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream stream) {
  FAKE_ENTER("cuMemcpyDtoHAsync", {u(dst), src, n, u(stream)});
  if (int r = stream_check(s, stream)) return r;
  if (device_memory(s, src, n) != current_device(s)) return CUDA_ERROR_INVALID_VALUE;
  s.calls.back().args.push_back(is_pinned(s, dst, n));
  enqueue(s, u(stream), [dst, src, n] { std::memcpy(dst, h<void>(src), n); });
  return CUDA_SUCCESS;
}
CUresult f_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  FAKE_ENTER("cuMemcpyDtoDAsync", {dst, src, n, u(stream)});
  if (int r = stream_check(s, stream)) return r;
  if (device_memory(s, dst, n) < 0 || device_memory(s, src, n) < 0) return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, u(stream), [dst, src, n] { std::memmove(h<void>(dst), h<void>(src), n); });
  return CUDA_SUCCESS;
}
CUresult f_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                             CUstream stream) {
  FAKE_ENTER("cuMemcpyPeerAsync", {dst, u(dctx), src, u(sctx), n, u(stream)});
  if (int r = stream_check(s, stream)) return r;
  // as the driver: a peer copy cannot be captured (cuMemcpyDtoDAsync between unified addresses can)
  if (s.streams[u(stream)].capture != 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  int ddev = device_of_context(s, u(dctx)), sdev = device_of_context(s, u(sctx));
  if (ddev < 0 || sdev < 0 || device_memory(s, dst, n) != ddev || device_memory(s, src, n) != sdev)
    return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, u(stream), [dst, src, n] { std::memmove(h<void>(dst), h<void>(src), n); });
  return CUDA_SUCCESS;
}

// ---- cuGetProcAddress ----
const std::map<std::string, void*>& entry_points() {
  static const std::map<std::string, void*> table = [] {
    std::map<std::string, void*> t;
    t["cuDeviceGetCount"] = reinterpret_cast<void*>(&f_cuDeviceGetCount);
    t["cuDeviceGet"] = reinterpret_cast<void*>(&f_cuDeviceGet);
    t["cuDeviceGetName"] = reinterpret_cast<void*>(&f_cuDeviceGetName);
    t["cuDeviceGetAttribute"] = reinterpret_cast<void*>(&f_cuDeviceGetAttribute);
    t["cuDeviceTotalMem"] = reinterpret_cast<void*>(&f_cuDeviceTotalMem);
    t["cuDeviceCanAccessPeer"] = reinterpret_cast<void*>(&f_cuDeviceCanAccessPeer);
    t["cuDevicePrimaryCtxRetain"] = reinterpret_cast<void*>(&f_cuDevicePrimaryCtxRetain);
    t["cuDevicePrimaryCtxRelease"] = reinterpret_cast<void*>(&f_cuDevicePrimaryCtxRelease);
    t["cuCtxGetCurrent"] = reinterpret_cast<void*>(&f_cuCtxGetCurrent);
    t["cuCtxSetCurrent"] = reinterpret_cast<void*>(&f_cuCtxSetCurrent);
    t["cuCtxEnablePeerAccess"] = reinterpret_cast<void*>(&f_cuCtxEnablePeerAccess);
    t["cuMemGetInfo"] = reinterpret_cast<void*>(&f_cuMemGetInfo);
    t["cuMemAlloc"] = reinterpret_cast<void*>(&f_cuMemAlloc);
    t["cuMemFree"] = reinterpret_cast<void*>(&f_cuMemFree);
    t["cuMemHostAlloc"] = reinterpret_cast<void*>(&f_cuMemHostAlloc);
    t["cuMemFreeHost"] = reinterpret_cast<void*>(&f_cuMemFreeHost);
    t["cuMemcpyHtoDAsync"] = reinterpret_cast<void*>(&f_cuMemcpyHtoDAsync);
    t["cuMemcpyDtoHAsync"] = reinterpret_cast<void*>(&f_cuMemcpyDtoHAsync);
    t["cuMemcpyDtoDAsync"] = reinterpret_cast<void*>(&f_cuMemcpyDtoDAsync);
    t["cuMemcpyPeerAsync"] = reinterpret_cast<void*>(&f_cuMemcpyPeerAsync);
    add_exec_entry_points(t);
    return t;
  }();
  return table;
}

CUresult f_get_proc_address(const char* symbol, void** pfn, int version, std::uint64_t flags, int* status) {
  FAKE_ENTER("cuGetProcAddress", {static_cast<std::uint64_t>(version), flags}, symbol);
  *pfn = nullptr;
  if (version > s.cfg.driver_version) return CUDA_ERROR_INVALID_VALUE;  // what a real driver answers
  auto it = entry_points().find(symbol);
  if (it == entry_points().end()) {
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  if (std::string(symbol) == "cuFuncGetParamInfo" && (!s.cfg.param_info || version < kParamInfoCudaVersion)) {
    *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_SUCCESS;
  }
  if (std::string(symbol) == "cuTensorMapEncodeTiled" && !s.cfg.tensor_map) {  // as a driver that lacks it
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  *pfn = it->second;
  *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

int current_device(State& s) {
  for (size_t i = 0; i < s.contexts.size(); ++i)
    if (s.contexts[i] == t_context && s.context_refs[i] > 0) return static_cast<int>(i);
  return -1;
}

int device_of_context(State& s, std::uint64_t ctx) {
  for (size_t i = 0; i < s.contexts.size(); ++i)
    if (s.contexts[i] == ctx) return static_cast<int>(i);
  return -1;
}

// The device of the allocation holding [p, p + n), or -1.
int device_memory(State& s, std::uint64_t p, std::uint64_t n) {
  auto it = s.allocs.upper_bound(p);
  if (it == s.allocs.begin()) return -1;
  --it;
  return p >= it->first && p + n <= it->first + it->second.size ? it->second.device : -1;
}

void run_until(State& s, std::uint64_t stream, std::uint64_t seq) {
  auto it = s.streams.find(stream);
  if (it == s.streams.end()) return;
  auto& ops = it->second.ops;
  while (!ops.empty() && ops.front().first <= seq) {
    auto op = std::move(ops.front().second);
    ops.pop_front();
    op();
  }
}

void run_all(State& s) {
  for (auto& [handle, stream] : s.streams) run_until(s, handle, s.seq);
}

std::uint64_t enqueue(State& s, std::uint64_t stream, std::function<void()> op) {
  State::Stream& st = s.streams[stream];
  ++s.seq;
  auto c = s.captures.find(st.capture);
  if (st.capture == 0 || c == s.captures.end()) {
    st.ops.emplace_back(s.seq, std::move(op));
    return s.seq;
  }
  State::Node n;
  n.op = std::move(op);
  n.what = s.calls.empty() ? std::string() : s.calls.back().name;
  c->second.nodes.push_back(std::move(n));
  c->second.last_seq[stream] = s.seq;
  if (stream != c->second.origin) c->second.unjoined.insert(stream);  // new work: it must be joined (again)
  return s.seq;
}

// A stream of the current context's device, or an error.
int stream_check(State& s, CUstream stream) {
  int dev = current_device(s);
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  auto it = s.streams.find(u(stream));
  if (it == s.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  return it->second.device == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

State::~State() {
  for (auto& [p, a] : allocs) std::free(h<void>(p));
  for (auto& [p, n] : pinned) std::free(h<void>(p));
}

int State::enter(const char* name, std::vector<std::uint64_t> args, std::string text, std::string data) {
  calls.push_back({name, std::move(args), std::move(text), std::move(data)});
  auto it = failures.find(name);
  if (it == failures.end() || it->second.second <= 0) return 0;
  it->second.second--;
  return it->second.first;
}

std::shared_ptr<State> state() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_state;
}

void install(const Config& config) {
  if (config.device_count < 0) throw std::invalid_argument("device_count must be >= 0");
  auto st = std::make_shared<State>();
  st->cfg = config;
  st->used.assign(static_cast<size_t>(config.device_count), 0);
  st->context_refs.assign(static_cast<size_t>(config.device_count), 0);
  for (int i = 0; i < config.device_count; ++i) st->contexts.push_back(st->handle());
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_state = st;
  }
  t_context = 0;
}

void uninstall() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state.reset();
}

}  // namespace tg::cuda::fake

// The bootstrap entry points, exported as libcuda.so.1 exports them: the runtime dlopens this library
// (_cuda.use_driver_library) and finds them with dlsym, exactly as it finds the real driver's.
using namespace tg::cuda;
TG_FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, std::uint64_t flags,
                                            int* status) {
  return fake::f_get_proc_address(symbol, pfn, version, flags, status);
}
TG_FAKE_EXPORT CUresult cuInit(unsigned int flags) { return fake::f_cuInit(flags); }
TG_FAKE_EXPORT CUresult cuDriverGetVersion(int* version) { return fake::f_cuDriverGetVersion(version); }
TG_FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  return fake::f_cuGetErrorName(error, name);
}
TG_FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  return fake::f_cuGetErrorString(error, text);
}
