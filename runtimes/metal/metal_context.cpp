#include "metal_context.h"

#include <exception>
#include <utility>
#include <vector>

#include "errors.h"

namespace tg::metal {
namespace {

constexpr NSUInteger kStatusError = 5;  // MTLCommandBufferStatusError

}  // namespace

MetalContext::MetalContext(std::shared_ptr<const ObjcApi> api) : api_(std::move(api)) {
  const ObjcApi& a = *api_;
  AutoreleasePool pool(a);
  id dev = a.MTLCreateSystemDefaultDevice();  // a Create function: the caller owns the result
  if (dev == nullptr)
    throw RuntimeError(name_, "MTLCreateSystemDefaultDevice", "no device",
                       "Metal found no GPU (" + a.source + " is loaded)");
  device_ = Owned(api_, dev);
  gpu_name_ = to_string(a, send<id>(a, dev, a.sel.name));
  id q = send<id>(a, dev, a.sel.newCommandQueueWithMaxCommandBufferCount, NSUInteger{1024});
  if (q == nullptr) throw RuntimeError(name_, "newCommandQueueWithMaxCommandBufferCount:", "nil", "no command queue");
  queue_ = Owned(api_, q);
  max_threadgroup_memory_ = send<NSUInteger>(a, dev, a.sel.maxThreadgroupMemoryLength);
  // compute commands in indirect command buffers: Apple GPUs from the A11 (MTLGPUFamilyApple4, 1004) and Macs of
  // MTLGPUFamilyMac2 (2002)
  supports_icb_ = send<bool>(a, dev, a.sel.supportsFamily, NSInteger{1004}) ||
                  send<bool>(a, dev, a.sel.supportsFamily, NSInteger{2002});
  // simdgroup_matrix multiply-accumulate (MSL 2.3): MTLGPUFamilyApple7 (A14, M1) and later
  supports_simdgroup_matrix_ = send<bool>(a, dev, a.sel.supportsFamily, NSInteger{1007});
}

MetalContext::~MetalContext() {
  try {
    synchronize();
  } catch (...) {
  }
  queue_.reset();
  device_.reset();
}

void MetalContext::commit(id command_buffer) {
  const ObjcApi& a = *api_;
  send<id>(a, command_buffer, a.sel.retain);
  Owned owned(api_, command_buffer);
  send<void>(a, command_buffer, a.sel.commit);
  Owned oldest;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.push_back(std::move(owned));
    if (in_flight_.size() <= kMaxInFlight) return;
    oldest = std::move(in_flight_.front());
    in_flight_.pop_front();
  }
  wait(oldest.get(), "a queued launch");
}

void MetalContext::wait(id command_buffer, const std::string& what) const {
  const ObjcApi& a = *api_;
  AutoreleasePool pool(a);  // the NSError read below is autoreleased
  send<void>(a, command_buffer, a.sel.waitUntilCompleted);
  if (send<NSUInteger>(a, command_buffer, a.sel.status) == kStatusError)
    throw_ns_error(a, name_, "waitUntilCompleted", send<id>(a, command_buffer, a.sel.error),
                   "the GPU failed running " + what);
}

void MetalContext::synchronize() {
  std::deque<Owned> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending.swap(in_flight_);
  }
  std::exception_ptr first;
  for (Owned& cb : pending) {
    try {
      wait(cb.get(), "a queued launch");
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    cb.reset();
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace tg::metal
