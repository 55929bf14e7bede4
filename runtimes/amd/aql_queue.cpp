#include "aql_queue.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "errors.h"

namespace tg::amd {
namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

// NOTE: the layout of the CWSR area follows the description of kfd_queue.c (per XCC: a control stack of 12 bytes a
// wave on gfx10+, 8 before, after a 40-byte header, page aligned; then the VGPRs, SGPRs, LDS and hardware registers
// of every CU). Only a real KFD can say whether these sizes are accepted; the fake checks they are page multiples.
CwsrSizes cwsr_sizes(const GpuNode& gpu) {
  const std::uint32_t v = gpu.gfx_target_version;
  const std::uint32_t xcc = std::max<std::uint32_t>(gpu.num_xcc, 1);
  const std::uint32_t cus = std::max<std::uint32_t>(gpu.cu_count / xcc, 1);
  const std::uint32_t waves = cus * std::max<std::uint32_t>(gpu.max_waves_per_simd, 1) *
                              std::max<std::uint32_t>(gpu.simd_per_cu, 1);
  const std::uint64_t vgpr_per_cu = (v == 90010 || v / 100 == 904) ? 0x60000 : (v / 100 == 1100 || v / 100 == 1101)
                                                                                 ? 0x60000 : 0x40000;
  const std::uint64_t per_cu = vgpr_per_cu + 0x4000 /*SGPR*/ + 0x10000 /*LDS*/ + 0x1000 /*HWREG*/;
  std::uint64_t ctl = round_up(40 + std::uint64_t{waves} * (v >= 100000 ? 12 : 8) + 8, kfd::kPageSize);
  if (v / 10000 == 10) ctl = std::min<std::uint64_t>(ctl, 0x7000);
  const std::uint64_t wg = round_up(std::uint64_t{cus} * per_cu, kfd::kPageSize);
  const std::uint64_t debug = round_up(std::uint64_t{waves} * 32, 64);
  return {static_cast<std::uint32_t>(ctl), static_cast<std::uint32_t>((ctl + wg) * xcc),
          static_cast<std::uint32_t>(debug * xcc)};
}

AqlQueue::AqlQueue(std::shared_ptr<Kfd> kfd, const GpuNode& gpu, int drm_fd, const std::string& device,
                   std::uint32_t ring_packets, std::uint64_t kernarg_bytes)
    : kfd_(std::move(kfd)), device_(device), gpu_id_(gpu.gpu_id), ring_packets_(ring_packets) {
  if (ring_packets == 0 || (ring_packets & (ring_packets - 1)) != 0)
    throw UsageError("AQL ring size must be a power of two packets, not " + std::to_string(ring_packets));
  try {
    create(gpu, drm_fd, kernarg_bytes);
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void AqlQueue::create(const GpuNode& gpu, int drm_fd, std::uint64_t kernarg_bytes) {
  const std::string& device = device_;
  MemoryOptions host_uncached{MemoryKind::Gtt, true, true, false};
  ring_ = std::make_unique<GpuMemory>(kfd_, gpu_id_, drm_fd, std::uint64_t{ring_packets_} * 64, host_uncached, device);
  indices_ = std::make_unique<GpuMemory>(kfd_, gpu_id_, drm_fd, kfd::kPageSize, host_uncached, device);
  signal_page_ = std::make_unique<GpuMemory>(kfd_, gpu_id_, drm_fd, kfd::kPageSize, host_uncached, device);
  event_page_ = std::make_unique<GpuMemory>(kfd_, gpu_id_, drm_fd, kfd::kEventPageSize, host_uncached, device);
  eop_ = std::make_unique<GpuMemory>(kfd_, gpu_id_, drm_fd, 0x1000, MemoryOptions{MemoryKind::Vram, false, false,
                                                                                    false}, device);
  CwsrSizes cwsr = cwsr_sizes(gpu);
  ctx_save_ = std::make_unique<GpuMemory>(kfd_, gpu_id_, drm_fd, cwsr.ctx_save_restore_size + cwsr.debug_memory_size,
                                          MemoryOptions{MemoryKind::Gtt, true, false, false}, device);
  kernarg_ = std::make_unique<GpuMemory>(kfd_, gpu_id_, drm_fd, kernarg_bytes,
                                         MemoryOptions{MemoryKind::Gtt, true, false, false}, device);

  // the completion signal, with the event the CP's mailbox write wakes
  kfd::CreateEventArgs ev{};
  ev.event_page_offset = event_page_->handle();
  ev.event_type = kfd::kEventSignal;
  ev.auto_reset = 1;
  kfd_->ioctl(kfd::kCreateEvent, &ev, device_, "creating the queue's completion event");
  event_id_ = ev.event_id;
  event_created_ = true;
  auto* sig = signal();
  if (sig == nullptr || indices() == nullptr || ring_->cpu() == nullptr || kernarg_->cpu() == nullptr)
    throw RuntimeError(device_, "mmap", "", "queue memory is not mapped for the CPU");
  std::memset(static_cast<void*>(sig), 0, sizeof(*sig));
  sig->kind = 1;
  sig->value = 0;
  sig->event_mailbox_ptr = event_page_->va() + std::uint64_t{ev.event_slot_index} * 8;
  sig->event_id = ev.event_id;

  std::memset(indices_->cpu(), 0, sizeof(hsa::QueueIndices));
  // every slot starts INVALID: the CP stops at the first packet whose header is not yet written
  for (std::uint32_t i = 0; i < ring_packets_; ++i) {
    auto* p = static_cast<hsa::DispatchPacket*>(ring_->cpu()) + i;
    std::memset(static_cast<void*>(p), 0, sizeof(*p));
    p->header = hsa::kPacketInvalid;
  }
  kfd::CreateQueueArgs q{};
  q.ring_base_address = ring_->va();
  q.ring_size = ring_packets_ * 64;
  q.write_pointer_address = indices_->va() + offsetof(hsa::QueueIndices, write_index);
  q.read_pointer_address = indices_->va() + offsetof(hsa::QueueIndices, read_index);
  q.gpu_id = gpu_id_;
  q.queue_type = kfd::kQueueTypeComputeAql;
  q.queue_percentage = 100;
  q.queue_priority = 7;
  q.eop_buffer_address = eop_->va();
  q.eop_buffer_size = eop_->size();
  q.ctx_save_restore_address = ctx_save_->va();
  q.ctx_save_restore_size = cwsr.ctx_save_restore_size;
  q.ctl_stack_size = cwsr.ctl_stack_size;
  kfd_->ioctl(kfd::kCreateQueue, &q, device_, "creating the AQL compute queue");
  queue_id_ = q.queue_id;
  queue_created_ = true;

  // the doorbell: a 64-bit slot in this process's doorbell page of /dev/kfd
  const Os& os = kfd_->os();
  std::uint64_t base = q.doorbell_offset & ~(kfd::kDoorbellPageSize - 1);
  doorbell_map_ = os.mmap(nullptr, kfd::kDoorbellPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, kfd_->fd(),
                          static_cast<std::int64_t>(base));
  if (doorbell_map_ == MAP_FAILED) {
    doorbell_map_ = nullptr;
    throw_errno(device_, "mmap", "mapping the queue's doorbell page of /dev/kfd");
  }
  doorbell_ = reinterpret_cast<volatile std::uint64_t*>(static_cast<char*>(doorbell_map_) +
                                                         (q.doorbell_offset - base));
}

AqlQueue::~AqlQueue() { release(); }

void AqlQueue::release() noexcept {
  const Os& os = kfd_->os();
  if (doorbell_map_ != nullptr) {
    os.munmap(doorbell_map_, kfd::kDoorbellPageSize);
    doorbell_map_ = nullptr;
  }
  if (queue_created_) {
    kfd::DestroyQueueArgs d{queue_id_, 0};
    os.ioctl(kfd_->fd(), kfd::kDestroyQueue, &d);
    queue_created_ = false;
  }
  if (event_created_) {
    kfd::DestroyEventArgs d{event_id_, 0};
    os.ioctl(kfd_->fd(), kfd::kDestroyEvent, &d);
    event_created_ = false;
  }
  kernarg_.reset();
  ctx_save_.reset();
  eop_.reset();
  event_page_.reset();
  signal_page_.reset();
  indices_.reset();
  ring_.reset();
}

hsa::Signal* AqlQueue::signal() const noexcept { return static_cast<hsa::Signal*>(signal_page_->cpu()); }
hsa::QueueIndices* AqlQueue::indices() const noexcept { return static_cast<hsa::QueueIndices*>(indices_->cpu()); }
std::uint64_t AqlQueue::signal_address() const noexcept { return signal_page_->va(); }

void* AqlQueue::kernargs(std::uint64_t size, std::uint64_t align) {
  std::uint64_t at = round_up(kernarg_used_, align);
  if (at + size > kernarg_->size()) {
    if (size > kernarg_->size())
      throw UsageError("kernel arguments of " + std::to_string(size) + " bytes do not fit the kernarg arena");
    wait_idle();  // every earlier launch has read its arguments: start over
    at = 0;
  }
  kernarg_used_ = at + size;
  return static_cast<char*>(kernarg_->cpu()) + at;
}

void AqlQueue::write(const hsa::DispatchPacket& packet) {
  // a free slot: the ring is full only with ring_packets_ packets the CP has not read; then wait for all of them
  // (simplest, and a full ring is rare: the timeout applies)
  if (written_ - indices()->read_index >= ring_packets_) {
    ring(true);
    wait_signal();
  }
  auto* slot = static_cast<hsa::DispatchPacket*>(ring_->cpu()) + (written_ % ring_packets_);
  // everything but the header, then the header with release order: the CP must never see half a packet
  std::memcpy(reinterpret_cast<char*>(slot) + 2, reinterpret_cast<const char*>(&packet) + 2, sizeof(packet) - 2);
  __atomic_store_n(&slot->header, packet.header, __ATOMIC_RELEASE);
  __atomic_fetch_add(&signal()->value, 1, __ATOMIC_SEQ_CST);
  ++written_;
  indices()->write_index = written_;
}

void AqlQueue::ring(bool force) {
  if (written_ == 0 || (written_ == rung_ && !force)) return;  // nothing new: a doorbell costs the CP a look
  rung_ = written_;
  std::atomic_thread_fence(std::memory_order_release);
  kfd_->os().ring_doorbell(doorbell_, written_ - 1);  // HSA: the doorbell carries the last packet's index
}

void AqlQueue::wait_idle() {
  ring();
  wait_signal();
  kernarg_used_ = 0;
}

void AqlQueue::wait_signal() {
  auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    if (__atomic_load_n(&signal()->value, __ATOMIC_ACQUIRE) <= 0) return;
    auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= limit) {
      throw RuntimeError(device_, "AMDKFD_IOC_WAIT_EVENTS", "timeout",
                         "the compute queue is hung: " + std::to_string(signal()->value) +
                             " dispatches not done after " + std::to_string(timeout_ms_) + " ms (read index " +
                             std::to_string(indices()->read_index) + ", write index " + std::to_string(written_) +
                             ")");
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - waited).count();
    kfd::EventData data{};
    data.event_id = event_id_;
    kfd::WaitEventsArgs w{};
    w.events_ptr = reinterpret_cast<std::uint64_t>(&data);
    w.num_events = 1;
    w.wait_for_all = 1;
    w.timeout = static_cast<std::uint32_t>(std::clamp<long long>(left, 1, 100));
    kfd_->ioctl(kfd::kWaitEvents, &w, device_, "waiting for the compute queue");
  }
}

}  // namespace tg::amd
