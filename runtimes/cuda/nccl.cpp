#include "nccl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include "cuda_allocator.h"
#include "errors.h"

namespace tg::cuda {
namespace {

constexpr char kDevice[] = "NCCL";

std::mutex g_mutex;
std::shared_ptr<const NcclApi> g_loaded;

const std::pair<const char*, ncclDataType_t> kTypes[] = {
    {"int8", ncclInt8},       {"uint8", ncclUint8},     {"int32", ncclInt32},     {"uint32", ncclUint32},
    {"int64", ncclInt64},     {"uint64", ncclUint64},   {"float16", ncclFloat16}, {"float32", ncclFloat32},
    {"float64", ncclFloat64}, {"bfloat16", ncclBfloat16},
};
const std::pair<const char*, ncclRedOp_t> kOps[] = {
    {"sum", ncclSum}, {"prod", ncclProd}, {"max", ncclMax}, {"min", ncclMin}};

std::string version_text(int v) {
  // NCCL >= 2.9 encodes X.Y.Z as X*10000 + Y*100 + Z; older ones as X*1000 + Y*100 + Z
  if (v >= 10000)
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string(v / 100 % 10) + "." + std::to_string(v % 100);
}

std::shared_ptr<NcclApi> open_nccl(const std::string& path, std::string* error) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    *error = e ? e : "unknown dlopen error";
    return nullptr;
  }
  auto api = std::make_shared<NcclApi>();
  api->source = path;
  bool ok = true;
  auto sym = [&](const char* name, auto* slot) {
    void* p = dlsym(lib, name);
    if (p == nullptr && ok) {
      *error = path + " has no " + name;
      ok = false;
    }
    *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(p);
  };
  sym("ncclGetVersion", &api->ncclGetVersion);
  sym("ncclGetErrorString", &api->ncclGetErrorString);
  sym("ncclCommInitAll", &api->ncclCommInitAll);
  sym("ncclCommDestroy", &api->ncclCommDestroy);
  sym("ncclGroupStart", &api->ncclGroupStart);
  sym("ncclGroupEnd", &api->ncclGroupEnd);
  sym("ncclAllReduce", &api->ncclAllReduce);
  sym("ncclAllGather", &api->ncclAllGather);
  sym("ncclReduceScatter", &api->ncclReduceScatter);
  if (!ok) {
    dlclose(lib);
    return nullptr;
  }
  // NOTE: never dlclosed once loaded: communicators and their proxy threads live inside it
  return api;
}

const CudaAllocator* cuda_allocator_of(const Buffer& b) {
  return dynamic_cast<const CudaAllocator*>(b.allocator().get());
}

}  // namespace

std::shared_ptr<const NcclApi> load_nccl(const std::vector<std::string>& candidates) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_loaded;
  std::string tried, error;
  for (const auto& path : candidates) {
    std::shared_ptr<NcclApi> api = open_nccl(path, &error);
    tried += (tried.empty() ? "" : ", ") + path;
    if (!api) continue;
    nccl_check(*api, "ncclGetVersion", api->ncclGetVersion(&api->version), "asking " + path + " for its version");
    g_loaded = std::move(api);
    return g_loaded;
  }
  throw RuntimeError(kDevice, "dlopen", error.empty() ? "no candidates" : error,
                     "could not load NCCL (tried " + (tried.empty() ? std::string("nothing") : tried) +
                         "): install it (the nvidia-nccl-cu12/cu13 wheel, or libnccl2) or set NCCL_LIBRARY");
}

void unload_nccl() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_loaded.reset();
}

std::shared_ptr<const NcclApi> nccl() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_loaded) throw RuntimeError(kDevice, "nccl", "not loaded", "NCCL is not loaded (call nccl_load first)");
  return g_loaded;
}

ncclDataType_t nccl_dtype(const std::string& name) {
  for (const auto& [n, t] : kTypes)
    if (name == n) return t;
  std::string known;
  for (const auto& [n, t] : kTypes) known += (known.empty() ? "" : ", ") + std::string(n);
  throw UsageError("NCCL has no dtype " + name + " (it reduces " + known + ")");
}

ncclRedOp_t nccl_op(const std::string& name) {
  for (const auto& [n, o] : kOps)
    if (name == n) return o;
  throw UsageError("NCCL has no reduction " + name + " (it has sum, prod, max, min)");
}

size_t nccl_dtype_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  throw UsageError("unknown NCCL dtype " + std::to_string(static_cast<int>(type)));
}

CollectiveKind collective_kind(const std::string& name) {
  if (name == "all_reduce") return CollectiveKind::kAllReduce;
  if (name == "all_gather") return CollectiveKind::kAllGather;
  if (name == "reduce_scatter") return CollectiveKind::kReduceScatter;
  throw UsageError("no collective " + name + " (there are all_reduce, all_gather, reduce_scatter)");
}

void nccl_check(const NcclApi& api, const char* call, ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return;
  const char* text = api.ncclGetErrorString != nullptr ? api.ncclGetErrorString(result) : nullptr;
  throw RuntimeError(kDevice, call, text != nullptr ? text : "NCCL error " + std::to_string(result),
                     what + " (NCCL " + version_text(api.version) + ")");
}

Communicator::Communicator(std::shared_ptr<const NcclApi> api, std::vector<std::shared_ptr<Context>> contexts)
    : api_(std::move(api)), contexts_(std::move(contexts)) {
  if (contexts_.empty()) throw UsageError("an NCCL communicator needs at least one device");
  std::vector<int> devlist;
  std::set<int> seen;
  for (const auto& ctx : contexts_) {
    if (!seen.insert(ctx->ordinal()).second)
      throw UsageError("an NCCL communicator needs distinct devices; " + ctx->name() + " is named twice");
    devlist.push_back(ctx->ordinal());
  }
  // NOTE: overwrite = 0: a user who turned multicast on explicitly keeps it
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  comms_.assign(contexts_.size(), nullptr);
  contexts_[0]->make_current();
  nccl_check(*api_, "ncclCommInitAll",
             api_->ncclCommInitAll(comms_.data(), static_cast<int>(devlist.size()), devlist.data()),
             "creating a communicator over " + std::to_string(devlist.size()) + " GPUs");
}

Communicator::~Communicator() {
  for (size_t r = 0; r < comms_.size(); ++r) {
    if (comms_[r] == nullptr) continue;
    try {
      contexts_[r]->synchronize();
    } catch (...) {
      // a failed device: destroy the communicator anyway
    }
    api_->ncclCommDestroy(comms_[r]);
  }
}

void Communicator::check_buffers(const char* what, const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv,
                                 size_t send_bytes, size_t recv_bytes) const {
  if (send.size() != size() || recv.size() != size())
    throw UsageError(std::string(what) + " over " + std::to_string(size()) + " GPUs needs one send and one receive "
                     "buffer per GPU, got " + std::to_string(send.size()) + " and " + std::to_string(recv.size()));
  for (size_t r = 0; r < size(); ++r) {
    for (auto [b, need, role] : {std::make_tuple(send[r], send_bytes, "send"),
                                 std::make_tuple(recv[r], recv_bytes, "receive")}) {
      if (b == nullptr) throw UsageError(std::string(what) + ": rank " + std::to_string(r) + " has no " + role +
                                         " buffer");
      const CudaAllocator* a = cuda_allocator_of(*b);
      if (a == nullptr || a->context().get() != contexts_[r].get())
        throw UsageError(std::string(what) + ": rank " + std::to_string(r) + "'s " + role + " buffer is on " +
                         b->device() + ", not on " + contexts_[r]->name());
      if (b->nbytes() < need)
        throw UsageError(std::string(what) + ": rank " + std::to_string(r) + "'s " + role + " buffer has " +
                         std::to_string(b->nbytes()) + " bytes, the collective needs " + std::to_string(need));
      b->ptr();  // throws for a freed buffer before anything is queued
    }
  }
}

template <class Call>
void Communicator::grouped(const char* name, const Call& call) const {
  nccl_check(*api_, "ncclGroupStart", api_->ncclGroupStart(), std::string("starting ") + name);
  ncclResult_t first = ncclSuccess;
  size_t failed_rank = 0;
  for (size_t r = 0; r < size() && first == ncclSuccess; ++r) {
    contexts_[r]->make_current();
    first = call(r);
    failed_rank = r;
  }
  ncclResult_t end = api_->ncclGroupEnd();
  nccl_check(*api_, name, first, std::string("queueing ") + name + " on " + contexts_[failed_rank]->name());
  nccl_check(*api_, "ncclGroupEnd", end, std::string("running ") + name + " over " + std::to_string(size()) + " GPUs");
}

void Communicator::all_reduce(const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv, size_t count,
                              ncclDataType_t type, ncclRedOp_t op) const {
  run({CollectiveKind::kAllReduce, count, type, op}, send, recv);
}

void Communicator::all_gather(const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv, size_t count,
                              ncclDataType_t type) const {
  run({CollectiveKind::kAllGather, count, type, ncclSum}, send, recv);
}

void Communicator::reduce_scatter(const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv, size_t count,
                                  ncclDataType_t type, ncclRedOp_t op) const {
  run({CollectiveKind::kReduceScatter, count, type, op}, send, recv);
}

void Communicator::check(const CollectiveSpec& spec, const std::vector<Buffer*>& send,
                         const std::vector<Buffer*>& recv) const {
  size_t bytes = spec.count * nccl_dtype_size(spec.type);
  switch (spec.kind) {
    case CollectiveKind::kAllReduce:
      return check_buffers("ncclAllReduce", send, recv, bytes, bytes);
    case CollectiveKind::kAllGather:
      return check_buffers("ncclAllGather", send, recv, bytes, bytes * size());
    case CollectiveKind::kReduceScatter:
      return check_buffers("ncclReduceScatter", send, recv, bytes * size(), bytes);
  }
}

void Communicator::run(const CollectiveSpec& spec, const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv,
                       const std::vector<CUstream>& streams) const {
  check(spec, send, recv);
  if (!streams.empty() && streams.size() != size())
    throw UsageError("a collective over " + std::to_string(size()) + " GPUs needs one stream per GPU, got " +
                     std::to_string(streams.size()));
  auto stream = [&](size_t r) { return streams.empty() ? contexts_[r]->stream() : streams[r]; };
  auto in = [&](size_t r) { return reinterpret_cast<const void*>(send[r]->ptr()); };
  auto out = [&](size_t r) { return reinterpret_cast<void*>(recv[r]->ptr()); };
  switch (spec.kind) {
    case CollectiveKind::kAllReduce:
      return grouped("ncclAllReduce", [&](size_t r) {
        return api_->ncclAllReduce(in(r), out(r), spec.count, spec.type, spec.op, comms_[r], stream(r));
      });
    case CollectiveKind::kAllGather:
      return grouped("ncclAllGather", [&](size_t r) {
        return api_->ncclAllGather(in(r), out(r), spec.count, spec.type, comms_[r], stream(r));
      });
    case CollectiveKind::kReduceScatter:
      return grouped("ncclReduceScatter", [&](size_t r) {
        return api_->ncclReduceScatter(in(r), out(r), spec.count, spec.type, spec.op, comms_[r], stream(r));
      });
  }
}

}  // namespace tg::cuda
