#include "staging_ring.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>

#include "cuda_context.h"
#include "errors.h"

namespace tg::cuda {

namespace {

// A chunk's host memcpy is what bounds a pageable copy (the DMA out of a pinned slot is several times faster than one
// core's memcpy), so a large chunk is copied by up to kCopyThreads threads, each a contiguous part. Below
// kParallelBytes a chunk is one memcpy: starting threads would cost more than they save.
constexpr size_t kParallelBytes = size_t{1} << 20;
constexpr unsigned kCopyThreads = 4;

void host_copy(void* dst, const void* src, size_t len) {
  unsigned n = std::min(kCopyThreads, std::max(1u, std::thread::hardware_concurrency()));
  if (len < kParallelBytes || n < 2) {
    std::memcpy(dst, src, len);
    return;
  }
  char* to = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  size_t part = (len / n + 63) & ~size_t{63};  // parts start on cache lines
  std::thread workers[kCopyThreads];
  unsigned started = 0;
  size_t done_by_workers = part;  // the caller copies [0, part); the workers the rest
  for (unsigned i = 1; i < n && done_by_workers < len; ++i) {
    size_t off = done_by_workers, sz = std::min(part, len - off);
    try {
      workers[started] = std::thread([=] { std::memcpy(to + off, from + off, sz); });
      ++started;
      done_by_workers += sz;
    } catch (const std::system_error&) {  // no thread to be had: the caller copies what is left itself
      break;
    }
  }
  std::memcpy(to, from, std::min(part, len));
  if (done_by_workers < len) std::memcpy(to + done_by_workers, from + done_by_workers, len - done_by_workers);
  for (unsigned i = 0; i < started; ++i) workers[i].join();
}

}  // namespace

StagingRing::StagingRing(const Context& ctx, StagingConfig config) : ctx_(ctx), config_(config) {
  if (config_.slots < 1 || config_.slot_bytes == 0)
    throw UsageError("staging ring needs at least one slot of at least one byte, got " +
                     std::to_string(config_.slots) + " slots of " + std::to_string(config_.slot_bytes) + " bytes");
  slots_.resize(static_cast<size_t>(config_.slots));
}

StagingRing::~StagingRing() {
  const DriverApi& d = ctx_.api();
  try {
    ctx_.make_current();
  } catch (...) {  // the context is going away too; freeing below is best effort
  }
  for (Slot& s : slots_) {
    if (s.done != nullptr) {
      if (s.in_flight) d.cuEventSynchronize(s.done);
      d.cuEventDestroy(s.done);
    }
    if (s.host != nullptr) d.cuMemFreeHost(s.host);
  }
}

int StagingRing::pinned_slots() const noexcept {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.host; }));
}

StagingRing::Slot& StagingRing::next_slot() {
  Slot& s = slots_[next_ % slots_.size()];
  ++next_;
  if (s.host == nullptr) {
    // PORTABLE: the buffer is pinned for every context, so it stays valid whichever context is current
    ctx_.check("cuMemHostAlloc", ctx_.api().cuMemHostAlloc(&s.host, config_.slot_bytes, CU_MEMHOSTALLOC_PORTABLE),
               "allocating a pinned staging buffer");
    CUresult r = ctx_.api().cuEventCreate(&s.done, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      ctx_.api().cuMemFreeHost(s.host);
      s.host = nullptr;
      ctx_.fail("cuEventCreate", r, "creating a staging event");
    }
  }
  if (s.in_flight) wait(s);
  return s;
}

void StagingRing::wait(Slot& slot) {
  ctx_.check("cuEventSynchronize", ctx_.api().cuEventSynchronize(slot.done), "waiting for a staged copy");
  slot.in_flight = false;
}

void StagingRing::copyin(CUdeviceptr dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  ctx_.make_current();
  const DriverApi& d = ctx_.api();
  const char* from = static_cast<const char*>(src);
  for (size_t off = 0; off < nbytes; off += config_.slot_bytes) {
    size_t len = std::min(config_.slot_bytes, nbytes - off);
    Slot& s = next_slot();
    host_copy(s.host, from + off, len);
    ctx_.check("cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync(dst + off, s.host, len, ctx_.stream()),
               "queueing a host-to-device copy");
    ctx_.check("cuEventRecord", d.cuEventRecord(s.done, ctx_.stream()), "recording a staging event");
    s.in_flight = true;
  }
}

void StagingRing::copyout(void* dst, CUdeviceptr src, size_t nbytes) {
  if (nbytes == 0) return;
  ctx_.make_current();
  const DriverApi& d = ctx_.api();
  char* to = static_cast<char*>(dst);
  struct Chunk {
    Slot* slot;
    size_t off, len;
  };
  // Chunks whose DMA is queued but not yet copied out, oldest first. In ring order the next slot to issue is the
  // oldest pending one once every slot is pending, so that one is drained first.
  std::vector<Chunk> pending;
  pending.reserve(slots_.size());
  size_t head = 0;
  auto drain_one = [&] {
    Chunk c = pending[head++];
    wait(*c.slot);
    host_copy(to + c.off, c.slot->host, c.len);
  };
  for (size_t off = 0; off < nbytes; off += config_.slot_bytes) {
    if (pending.size() - head == slots_.size()) drain_one();
    size_t len = std::min(config_.slot_bytes, nbytes - off);
    Slot& s = next_slot();
    ctx_.check("cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync(s.host, src + off, len, ctx_.stream()),
               "queueing a device-to-host copy");
    ctx_.check("cuEventRecord", d.cuEventRecord(s.done, ctx_.stream()), "recording a staging event");
    s.in_flight = true;
    pending.push_back({&s, off, len});
  }
  while (head < pending.size()) drain_one();
}

}  // namespace tg::cuda
