#include "sdma_queue.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "errors.h"
#include "kfd_abi.h"

namespace tg::amd {

SdmaQueue::SdmaQueue(std::shared_ptr<Kfd> kfd, const GpuNode& gpu, int drm_fd, const std::string& device,
                     std::uint32_t ring_bytes)
    : kfd_(std::move(kfd)), device_(device) {
  try {
    create(gpu, drm_fd, ring_bytes);
  } catch (...) {
    release();
    throw;
  }
}

SdmaQueue::~SdmaQueue() { release(); }

void SdmaQueue::create(const GpuNode& gpu, int drm_fd, std::uint32_t ring_bytes) {
  MemoryOptions host_uncached{MemoryKind::Gtt, true, true, false};
  ring_ = std::make_unique<GpuMemory>(kfd_, gpu.gpu_id, drm_fd, ring_bytes, host_uncached, device_);
  pointers_ = std::make_unique<GpuMemory>(kfd_, gpu.gpu_id, drm_fd, kfd::kPageSize, host_uncached, device_);
  fence_ = std::make_unique<GpuMemory>(kfd_, gpu.gpu_id, drm_fd, kfd::kPageSize, host_uncached, device_);
  if (ring_->cpu() == nullptr || pointers_->cpu() == nullptr || fence_->cpu() == nullptr)
    throw RuntimeError(device_, "mmap", "", "SDMA queue memory is not mapped for the CPU");
  std::memset(pointers_->cpu(), 0, kfd::kPageSize);
  std::memset(fence_->cpu(), 0, kfd::kPageSize);
  std::memset(ring_->cpu(), 0, ring_->size());
  kfd::CreateQueueArgs q{};
  q.ring_base_address = ring_->va();
  q.ring_size = static_cast<std::uint32_t>(ring_->size());
  q.write_pointer_address = pointers_->va();
  q.read_pointer_address = pointers_->va() + 64;
  q.gpu_id = gpu.gpu_id;
  q.queue_type = kfd::kQueueTypeSdma;
  q.queue_percentage = 100;
  q.queue_priority = 15;
  kfd_->ioctl(kfd::kCreateQueue, &q, device_, "creating the SDMA queue for copies");
  queue_id_ = q.queue_id;
  queue_created_ = true;
  std::uint64_t base = q.doorbell_offset & ~(kfd::kDoorbellPageSize - 1);
  doorbell_map_ = kfd_->os().mmap(nullptr, kfd::kDoorbellPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, kfd_->fd(),
                                  static_cast<std::int64_t>(base));
  if (doorbell_map_ == MAP_FAILED) {
    doorbell_map_ = nullptr;
    throw_errno(device_, "mmap", "mapping the SDMA queue's doorbell page of /dev/kfd");
  }
  doorbell_ = reinterpret_cast<volatile std::uint64_t*>(static_cast<char*>(doorbell_map_) +
                                                         (q.doorbell_offset - base));
}

void SdmaQueue::release() noexcept {
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
  fence_.reset();
  pointers_.reset();
  ring_.reset();
}

void SdmaQueue::emit(const std::uint32_t* dwords, std::uint32_t n) {
  const std::uint64_t size = ring_->size();
  auto* ring = static_cast<std::uint32_t*>(ring_->cpu());
  // a packet never wraps: NOPs fill the ring's end first
  if (wptr_ % size + n * 4 > size) {
    while (wptr_ % size != 0) {
      ring[(wptr_ % size) / 4] = sdma::kOpNop;
      wptr_ += 4;
    }
  }
  std::memcpy(ring + (wptr_ % size) / 4, dwords, n * 4);
  wptr_ += n * 4;
}

void SdmaQueue::copy(std::uint64_t dst, std::uint64_t src, std::uint64_t nbytes, std::uint32_t timeout_ms) {
  auto* rptr = reinterpret_cast<volatile std::uint64_t*>(static_cast<char*>(pointers_->cpu()) + 64);
  auto* wptr = reinterpret_cast<volatile std::uint64_t*>(pointers_->cpu());
  auto* fence = static_cast<volatile std::uint32_t*>(fence_->cpu());
  // NOTE: each copy() waits for its fence, so the ring is empty here; a copy's packets must fit it
  for (std::uint64_t done = 0; done < nbytes;) {
    std::uint64_t n = std::min<std::uint64_t>(nbytes - done, sdma::kMaxCopyBytes);
    std::uint64_t s = src + done, d = dst + done;
    const std::uint32_t p[sdma::kCopyLinearDwords] = {
        sdma::kOpCopy | (sdma::kSubOpCopyLinear << 8), static_cast<std::uint32_t>(n - 1), 0,
        static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s >> 32),
        static_cast<std::uint32_t>(d), static_cast<std::uint32_t>(d >> 32)};
    if (wptr_ - *rptr + sizeof(p) + 64 > ring_->size()) {  // full: let the engine catch up first
      *wptr = wptr_;
      kfd_->os().ring_doorbell(doorbell_, wptr_);
      auto start = std::chrono::steady_clock::now();
      while (wptr_ - *rptr + sizeof(p) + 64 > ring_->size()) {
        if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms))
          throw RuntimeError(device_, "SDMA", "timeout", "the SDMA queue is hung (its ring stays full)");
        std::this_thread::yield();
      }
    }
    emit(p, sdma::kCopyLinearDwords);
    done += n;
  }
  const std::uint32_t value = ++fence_value_;
  const std::uint32_t f[sdma::kFenceDwords] = {sdma::kOpFence, static_cast<std::uint32_t>(fence_->va()),
                                               static_cast<std::uint32_t>(fence_->va() >> 32), value};
  emit(f, sdma::kFenceDwords);
  const std::uint32_t t[sdma::kTrapDwords] = {sdma::kOpTrap, 0};
  emit(t, sdma::kTrapDwords);
  std::atomic_thread_fence(std::memory_order_release);
  *wptr = wptr_;
  kfd_->os().ring_doorbell(doorbell_, wptr_);
  auto start = std::chrono::steady_clock::now();
  while (*fence != value) {
    if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms))
      throw RuntimeError(device_, "SDMA", "timeout", "the SDMA queue is hung: a copy of " + std::to_string(nbytes) +
                                                         " bytes not done after " + std::to_string(timeout_ms) +
                                                         " ms");
    std::this_thread::yield();
  }
}

}  // namespace tg::amd
