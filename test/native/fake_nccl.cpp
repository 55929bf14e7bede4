// A fake libnccl.so.2 over the fake CUDA driver (fake_driver.h), for tests without GPUs. The test library exports
// NCCL's entry points under their own names, so the runtime loads it by path (_cuda.nccl_load) through the same
// dlopen/dlsym code as the real library. It simulates:
//  * communicators from ncclCommInitAll over the fake's devices (the NCCL_NVLS_ENABLE value seen at init is
//    recorded in the call's text);
//  * group semantics: in one process, a collective over several ranks is only legal inside ncclGroupStart/End, and
//    every rank must issue the same collectives (kind, count, dtype, op) in the same order; what a real NCCL would
//    hang on (a rank missing, a collective outside a group) fails here with ncclInvalidUsage;
//  * argument checks: dtype and op values, each rank's stream and buffers on its own device, in range;
//  * stream ordering: a collective is queued on every rank's stream and computes when the first of them runs it,
//    after running the work queued before it on all the others, so it reads what earlier kernels and copies wrote
//    and a reader that does not wait for its stream sees the old bytes;
//  * CUDA graph capture: a collective issued on streams being captured becomes nodes of the capture (all ranks'
//    streams must be in the same capture), and computes again at every replay of a graph made from it;
//  * failures on demand through fake::fail_next (status = an ncclResult_t value).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "fake_state.h"
#include "nccl_api.h"

namespace tg::cuda::fake {
namespace {

constexpr int kFakeNcclVersion = 22305;  // 2.23.5

struct Comm {
  std::weak_ptr<State> owner;  // the fake machine it was made on: stale after a reinstall
  int device, rank, nranks;
  std::uint64_t clique;  // the ncclCommInitAll call it came from
};

enum class Kind { kAllReduce, kAllGather, kReduceScatter };

struct Pending {
  Kind kind;
  Comm* comm;
  std::uint64_t send, recv, stream;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
};

std::mutex g_comms_mutex;
std::set<Comm*> g_comms;
std::uint64_t g_next_clique = 1;
thread_local int t_group_depth = 0;
thread_local std::vector<Pending> t_pending;

const char* kind_name(Kind k) {
  return k == Kind::kAllReduce ? "ncclAllReduce" : k == Kind::kAllGather ? "ncclAllGather" : "ncclReduceScatter";
}

size_t type_size(int t) {
  switch (t) {
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
    default:
      return 0;
  }
}

// IEEE half <-> float, enough for test values (normals, zeros, infinities; subnormals flushed).
float half_to_float(std::uint16_t h) {
  std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  std::uint32_t bits = sign << 31;
  if (exp == 0x1f) bits |= 0x7f800000u | (man << 13);
  else if (exp != 0) bits |= ((exp + 112) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
std::uint16_t float_to_half(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  int exp = static_cast<int>((bits >> 23) & 0xffu) - 112;
  std::uint32_t man = bits & 0x7fffffu;
  if (((bits >> 23) & 0xffu) == 0xffu) return sign | 0x7c00u | (man ? 0x200u : 0u);
  if (exp <= 0) return sign;
  if (exp >= 0x1f) return sign | 0x7c00u;
  std::uint32_t h = (static_cast<std::uint32_t>(exp) << 10) | (man >> 13);
  std::uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // round to nearest even
  return static_cast<std::uint16_t>(sign | h);
}
float bf16_to_float(std::uint16_t b) {
  std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

template <class T>
T combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return static_cast<T>(a + b);
    case ncclProd:
      return static_cast<T>(a * b);
    case ncclMax:
      return a > b ? a : b;
    default:
      return a < b ? a : b;
  }
}

template <class T>
void reduce_into(char* acc, const char* x, size_t n, ncclRedOp_t op) {
  for (size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, x + i * sizeof(T), sizeof(T));
    a = combine(a, b, op);
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

template <float (*To)(std::uint16_t), std::uint16_t (*From)(float)>
void reduce_into_16(char* acc, const char* x, size_t n, ncclRedOp_t op) {
  for (size_t i = 0; i < n; ++i) {
    std::uint16_t a, b;
    std::memcpy(&a, acc + 2 * i, 2);
    std::memcpy(&b, x + 2 * i, 2);
    a = From(combine(To(a), To(b), op));
    std::memcpy(acc + 2 * i, &a, 2);
  }
}

// acc[i] = op(acc[i], x[i]) for n elements of `type`.
void reduce_bytes(char* acc, const char* x, size_t n, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclInt8: return reduce_into<std::int8_t>(acc, x, n, op);
    case ncclUint8: return reduce_into<std::uint8_t>(acc, x, n, op);
    case ncclInt32: return reduce_into<std::int32_t>(acc, x, n, op);
    case ncclUint32: return reduce_into<std::uint32_t>(acc, x, n, op);
    case ncclInt64: return reduce_into<std::int64_t>(acc, x, n, op);
    case ncclUint64: return reduce_into<std::uint64_t>(acc, x, n, op);
    case ncclFloat32: return reduce_into<float>(acc, x, n, op);
    case ncclFloat64: return reduce_into<double>(acc, x, n, op);
    case ncclFloat16: return reduce_into_16<half_to_float, float_to_half>(acc, x, n, op);
    case ncclBfloat16: return reduce_into_16<bf16_to_float, float_to_bf16>(acc, x, n, op);
  }
}

// One collective of a clique, shared by the ops queued on every rank's stream: the first to run computes it.
struct Collective {
  std::vector<Pending> ranks;  // by rank
  std::vector<std::pair<std::uint64_t, std::uint64_t>> queued;  // (stream, seq) by rank
  // ops run so far: the first op of every round of ranks.size() computes. Eagerly each op runs once; a CUDA graph
  // captured from the streams runs all of them at every replay, each replay computing again.
  size_t runs = 0;
};

void compute(const std::vector<Pending>& ranks) {
  const Pending& p0 = ranks[0];
  size_t es = type_size(p0.type), n = ranks.size(), bytes = p0.count * es;
  std::vector<std::string> out(n);
  if (p0.kind == Kind::kAllReduce) {
    std::string acc(h<char>(ranks[0].send), bytes);
    for (size_t j = 1; j < n; ++j) reduce_bytes(acc.data(), h<char>(ranks[j].send), p0.count, p0.type, p0.op);
    for (auto& o : out) o = acc;
  } else if (p0.kind == Kind::kAllGather) {
    std::string all;
    for (const auto& p : ranks) all.append(h<char>(p.send), bytes);
    for (auto& o : out) o = all;
  } else {
    for (size_t r = 0; r < n; ++r) {
      std::string acc(h<char>(ranks[0].send) + r * bytes, bytes);
      for (size_t j = 1; j < n; ++j)
        reduce_bytes(acc.data(), h<char>(ranks[j].send) + r * bytes, p0.count, p0.type, p0.op);
      out[r] = acc;
    }
  }
  // written after everything is read: a rank's recv may be its own (or, in place, its send) buffer
  for (size_t r = 0; r < n; ++r) std::memcpy(h<char>(ranks[r].recv), out[r].data(), out[r].size());
}

// Queues a complete collective (one Pending per rank, by rank) on every rank's stream.
void enqueue_collective(State& s, std::vector<Pending> ranks) {
  auto c = std::make_shared<Collective>();
  c->ranks = std::move(ranks);
  State* sp = &s;
  for (size_t r = 0; r < c->ranks.size(); ++r) {
    std::uint64_t stream = c->ranks[r].stream;
    std::uint64_t seq = enqueue(s, stream, [sp, c] {
      if (c->runs++ % c->ranks.size() != 0) return;  // counted before running the others: theirs must skip
      for (const auto& [other, oseq] : c->queued) run_until(*sp, other, oseq - 1);
      compute(c->ranks);
    });
    c->queued.emplace_back(stream, seq);
  }
}

ncclResult_t check_call(State& s, const Pending& p) {
  if (type_size(p.type) == 0 || (p.kind != Kind::kAllGather && (p.op < ncclSum || p.op > ncclMin)))
    return ncclInvalidArgument;
  auto st = s.streams.find(p.stream);
  if (st == s.streams.end() || st->second.device != p.comm->device) return ncclInvalidArgument;
  size_t es = type_size(p.type), n = static_cast<size_t>(p.comm->nranks);
  size_t send = p.count * es * (p.kind == Kind::kReduceScatter ? n : 1);
  size_t recv = p.count * es * (p.kind == Kind::kAllGather ? n : 1);
  if (p.count == 0) return ncclSuccess;
  if (device_memory(s, p.send, send) != p.comm->device || device_memory(s, p.recv, recv) != p.comm->device)
    return ncclInvalidArgument;
  return ncclSuccess;
}

// Matches the pending calls into complete collectives and queues them; ncclInvalidUsage (nothing queued) when a
// clique's ranks did not all issue the same collectives.
ncclResult_t flush(State& s, std::vector<Pending> pending) {
  std::map<std::uint64_t, std::vector<std::vector<Pending>>> by_clique;  // clique -> rank -> calls in order
  for (const auto& p : pending) {
    auto& ranks = by_clique[p.comm->clique];
    ranks.resize(static_cast<size_t>(p.comm->nranks));
    ranks[static_cast<size_t>(p.comm->rank)].push_back(p);
  }
  std::vector<std::vector<Pending>> ready;
  for (auto& [clique, ranks] : by_clique) {
    for (const auto& calls : ranks)
      if (calls.size() != ranks[0].size()) return ncclInvalidUsage;
    for (size_t k = 0; k < ranks[0].size(); ++k) {
      std::vector<Pending> one;
      for (const auto& calls : ranks) {
        const Pending& a = calls[k];
        const Pending& b = ranks[0][k];
        if (a.kind != b.kind || a.count != b.count || a.type != b.type || a.op != b.op) return ncclInvalidUsage;
        one.push_back(a);
      }
      ready.push_back(std::move(one));
    }
  }
  // whether a collective is captured must be the same on every rank (NCCL's rule for CUDA graphs): a capture that
  // holds only some ranks' calls would hang the others at replay
  for (const auto& one : ready)
    for (const auto& p : one)
      if (s.streams[p.stream].capture != s.streams[one[0].stream].capture) return ncclInvalidUsage;
  for (auto& one : ready) enqueue_collective(s, std::move(one));
  return ncclSuccess;
}

// Locks the fake driver and records the call; NCCL's status for an injected failure or a missing fake.
#define NCCL_ENTER(...)                                               \
  Entry entry(__VA_ARGS__);                                           \
  if (!entry.st) return ncclInternalError;                            \
  if (entry.injected != 0) return static_cast<ncclResult_t>(entry.injected); \
  State& s = *entry.st

ncclResult_t issue(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                   ncclComm_t comm, CUstream stream) {
  NCCL_ENTER(kind_name(kind), {u(send), u(recv), count, static_cast<std::uint64_t>(type),
                               static_cast<std::uint64_t>(op), u(comm), u(stream)});
  Comm* c = reinterpret_cast<Comm*>(comm);
  {
    std::lock_guard<std::mutex> lock(g_comms_mutex);
    if (g_comms.count(c) == 0 || c->owner.lock() != entry.st) return ncclInvalidArgument;
  }
  Pending p{kind, c, u(send), u(recv), u(stream), count, type, op};
  if (ncclResult_t r = check_call(s, p); r != ncclSuccess) return r;
  if (t_group_depth > 0) {
    t_pending.push_back(p);
    return ncclSuccess;
  }
  // outside a group only a one-rank communicator can finish: a real NCCL would wait for the other ranks forever
  if (c->nranks != 1) return ncclInvalidUsage;
  return flush(s, {p});
}

}  // namespace
}  // namespace tg::cuda::fake

using namespace tg::cuda;        // NOLINT: the exported C API below is written in NCCL's own names
using namespace tg::cuda::fake;  // NOLINT

TG_FAKE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  NCCL_ENTER("ncclGetVersion", {});
  (void)s;
  *version = kFakeNcclVersion;
  return ncclSuccess;
}

TG_FAKE_EXPORT const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error (fake NCCL)";
    case ncclUnhandledCudaError: return "unhandled cuda error (fake NCCL)";
    case ncclSystemError: return "unhandled system error (fake NCCL)";
    case ncclInternalError: return "internal error (fake NCCL)";
    case ncclInvalidArgument: return "invalid argument (fake NCCL)";
    case ncclInvalidUsage: return "invalid usage (fake NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (fake NCCL)";
    case ncclInProgress: return "NCCL operation in progress (fake NCCL)";
  }
  return "unknown result code (fake NCCL)";
}

TG_FAKE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  NCCL_ENTER("ncclCommInitAll", {static_cast<std::uint64_t>(ndev)}, std::string("NCCL_NVLS_ENABLE=") +
                                                                        (nvls ? nvls : "(unset)"));
  if (ndev <= 0 || comms == nullptr || devlist == nullptr) return ncclInvalidArgument;
  std::set<int> seen;
  for (int i = 0; i < ndev; ++i)
    if (devlist[i] < 0 || devlist[i] >= s.cfg.device_count || !seen.insert(devlist[i]).second)
      return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  std::uint64_t clique = g_next_clique++;
  for (int i = 0; i < ndev; ++i) {
    auto* c = new Comm{entry.st, devlist[i], i, ndev, clique};
    g_comms.insert(c);
    comms[i] = reinterpret_cast<ncclComm_t>(c);
  }
  return ncclSuccess;
}

TG_FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  // NOTE: works without an installed fake too: a communicator may outlive the machine it was made on
  Entry entry("ncclCommDestroy", {u(comm)});
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  auto* c = reinterpret_cast<Comm*>(comm);
  if (g_comms.erase(c) == 0) return ncclInvalidArgument;
  delete c;
  return ncclSuccess;
}

TG_FAKE_EXPORT ncclResult_t ncclGroupStart() {
  NCCL_ENTER("ncclGroupStart", {});
  (void)s;
  ++t_group_depth;
  return ncclSuccess;
}

TG_FAKE_EXPORT ncclResult_t ncclGroupEnd() {
  Entry entry("ncclGroupEnd", {});
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  // the group is closed whatever happens: an injected failure drops its collectives, as a failed launch would
  std::vector<Pending> pending;
  pending.swap(t_pending);
  if (!entry.st) return ncclInternalError;
  if (entry.injected != 0) return static_cast<ncclResult_t>(entry.injected);
  return flush(*entry.st, std::move(pending));
}

TG_FAKE_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                          ncclRedOp_t op, ncclComm_t comm, CUstream stream) {
  return issue(Kind::kAllReduce, send, recv, count, type, op, comm, stream);
}

TG_FAKE_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                                          ncclComm_t comm, CUstream stream) {
  return issue(Kind::kAllGather, send, recv, count, type, ncclSum, comm, stream);
}

TG_FAKE_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                                              ncclRedOp_t op, ncclComm_t comm, CUstream stream) {
  return issue(Kind::kReduceScatter, send, recv, count, type, op, comm, stream);
}
