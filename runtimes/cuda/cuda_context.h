// tg::cuda::Context: one opened GPU (primary context, the stream all work goes to, its limits), shared by every
// object that uses the device so the context outlives all of them.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "cuda_api.h"
#include "driver.h"
#include "runtime.h"

namespace tg::cuda {

// The device name as tinygrad spells it: "CUDA" for ordinal 0, "CUDA:1" for ordinal 1.
std::string device_name(int ordinal);

class Context {
 public:
  // Opens GPU `ordinal` with `api`: cuDeviceGet, the device's primary context (shared with any other CUDA user in
  // the process, e.g. PyTorch), one non-blocking stream, and the attributes below. Throws tg::UsageError for an
  // ordinal out of range and tg::RuntimeError naming the call for driver failures.
  Context(std::shared_ptr<const DriverApi> api, int ordinal);
  // Waits for queued work, then destroys the stream and releases the primary context. Never throws.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DriverApi& api() const noexcept { return *api_; }
  const std::string& name() const noexcept { return name_; }
  int ordinal() const noexcept { return ordinal_; }
  CUdevice device() const noexcept { return device_; }
  CUcontext context() const noexcept { return ctx_; }
  CUstream stream() const noexcept { return stream_; }
  const std::string& product_name() const noexcept { return product_name_; }
  size_t total_memory() const noexcept { return total_memory_; }

  // Makes the primary context current on the calling thread if it is not (cheap when it is). Every entry point
  // that talks to the driver calls it first: tinygrad may use several GPUs, and other libraries switch contexts.
  void make_current() const;

  // Blocks until everything queued on the stream has finished; rethrows asynchronous failures (a kernel's illegal
  // address) as tg::RuntimeError.
  void synchronize() const;

  // A device attribute read at open (CU_DEVICE_ATTRIBUTE_*); throws tg::UsageError for one not read.
  int attribute(int attr) const;
  const std::map<int, int>& attributes() const noexcept { return attributes_; }
  // "sm_90" for compute capability 9.0.
  std::string arch() const;

  // Throws for a failed call, naming this device.
  void check(const char* call, CUresult status, const char* what) const {
    if (status != CUDA_SUCCESS) throw_status(*api_, name_, call, status, what);
  }
  [[noreturn]] void fail(const char* call, CUresult status, const std::string& what) const {
    throw_status(*api_, name_, call, status, what);
  }

  // Enables direct access from this context to `peer`'s memory once, if the hardware allows it. Returns whether
  // peer access is on (cuMemcpyPeerAsync works either way; it is just slower without).
  bool enable_peer_access(const Context& peer);

 private:
  std::shared_ptr<const DriverApi> api_;
  int ordinal_;
  std::string name_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::string product_name_;
  size_t total_memory_ = 0;
  std::map<int, int> attributes_;
  std::map<int, bool> peers_;  // peer ordinal -> access enabled
};

// An event recorded on the context's stream, for ordering work across GPUs (cuStreamWaitEvent on its handle).
class CudaEvent {
 public:
  // Creates an event (with timing unless `timing` is false) and records it on the context's stream.
  CudaEvent(std::shared_ptr<Context> ctx, bool timing);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CUevent handle() const noexcept { return event_; }

 private:
  std::shared_ptr<Context> ctx_;
  CUevent event_ = nullptr;
};

// tg::Queue over the context's stream.
class CudaQueue final : public Queue {
 public:
  explicit CudaQueue(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  void synchronize() override { ctx_->synchronize(); }

 private:
  std::shared_ptr<Context> ctx_;
};

}  // namespace tg::cuda
