// NCCL collectives between this process's GPUs: libnccl.so.2 loaded with dlopen (like the driver and NVRTC), and
// a Communicator over a group of opened devices that runs all-reduce, all-gather and reduce-scatter on each
// device's own stream, so a collective is ordered after the work already queued on every device and before the
// work queued after it, with no host synchronisation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "cuda_context.h"
#include "nccl_api.h"

namespace tg::cuda {

// The first of `candidates` (sonames or paths) that dlopen loads and that has every entry point of NcclApi.
// Loaded once: later calls return it whatever they ask for, until unload_nccl(). Throws tg::RuntimeError (device
// "NCCL", call "dlopen") naming every candidate tried and the loader's last error.
std::shared_ptr<const NcclApi> load_nccl(const std::vector<std::string>& candidates);
// Forgets the loaded NCCL, so the next load_nccl loads again (a test's fake in its place). The library stays mapped.
void unload_nccl();
// The loaded NCCL; throws tg::RuntimeError naming NCCL when none is loaded.
std::shared_ptr<const NcclApi> nccl();

// NCCL's type for a dtype name ("float32", "bfloat16", ...) and the op for "sum", "prod", "max", "min". Throw
// tg::UsageError naming what NCCL does support.
ncclDataType_t nccl_dtype(const std::string& name);
ncclRedOp_t nccl_op(const std::string& name);
size_t nccl_dtype_size(ncclDataType_t type);

// Which collective: "all_reduce", "all_gather", "reduce_scatter" (tg::UsageError naming them for anything else).
enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter };
CollectiveKind collective_kind(const std::string& name);

// One collective as the Communicator issues it: `count` as NCCL counts it (see all_reduce, all_gather and
// reduce_scatter below); `op` is unused by all-gather.
struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
};

// Throws tg::RuntimeError(device "NCCL", call, ncclGetErrorString's text) for a failed call.
void nccl_check(const NcclApi& api, const char* call, ncclResult_t result, const std::string& what);

// One NCCL communicator per device of a group of distinct GPUs of this process (ncclCommInitAll), rank r being
// contexts[r]. Every collective takes one buffer per rank in rank order, and issues the ranks' calls between
// ncclGroupStart and ncclGroupEnd (a single process drives all ranks: without the group the first call would wait
// for the others forever). Each rank's call goes to that device's stream with its context current.
class Communicator {
 public:
  // Sets NCCL_NVLS_ENABLE=0 unless the environment already says otherwise (NVLink multicast stays off: it reserves
  // memory and needs fabric setup this runtime does not do). Throws tg::UsageError for fewer than one context or a
  // device named twice, tg::RuntimeError naming ncclCommInitAll for NCCL's failures.
  Communicator(std::shared_ptr<const NcclApi> api, std::vector<std::shared_ptr<Context>> contexts);
  // Waits for every device's queued work (a collective may still be running), then ncclCommDestroy. Never throws.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  size_t size() const noexcept { return contexts_.size(); }
  const std::vector<std::shared_ptr<Context>>& contexts() const noexcept { return contexts_; }
  const NcclApi& api() const noexcept { return *api_; }

  // recv[r] = op over ranks of send[.] (count elements each). In place (send[r] == recv[r]) is allowed.
  void all_reduce(const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv, size_t count,
                  ncclDataType_t type, ncclRedOp_t op) const;
  // recv[r] = send[0] ++ send[1] ++ ... (count elements from each rank, size() * count in recv).
  void all_gather(const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv, size_t count,
                  ncclDataType_t type) const;
  // recv[r] = part r (count elements) of op over ranks of send[.] (size() * count elements each).
  void reduce_scatter(const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv, size_t count,
                      ncclDataType_t type, ncclRedOp_t op) const;

  // Checks `spec`'s buffers as run() does, without issuing anything: one send and one recv buffer per rank, on
  // that rank's device, large enough (tg::UsageError naming the rank and both sizes).
  void check(const CollectiveSpec& spec, const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv) const;
  // Checks, then issues `spec` in one NCCL group, rank r's call on streams[r] (a stream of rank r's device; empty:
  // each device's own stream). A stream being captured records the calls as graph nodes instead of running them.
  void run(const CollectiveSpec& spec, const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv,
           const std::vector<CUstream>& streams = {}) const;

 private:
  // Checks one send and one recv buffer per rank, on that rank's device, of at least the bytes given; throws
  // tg::UsageError naming the rank and both sizes.
  void check_buffers(const char* what, const std::vector<Buffer*>& send, const std::vector<Buffer*>& recv,
                     size_t send_bytes, size_t recv_bytes) const;
  // Runs call(rank) for every rank inside one NCCL group; the first failure is thrown after ncclGroupEnd (so NCCL's
  // group state is left clean).
  template <class Call>
  void grouped(const char* name, const Call& call) const;

  std::shared_ptr<const NcclApi> api_;
  std::vector<std::shared_ptr<Context>> contexts_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace tg::cuda
