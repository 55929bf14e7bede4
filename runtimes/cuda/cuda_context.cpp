#include "cuda_context.h"

#include <utility>

#include "errors.h"

namespace tg::cuda {
namespace {

// What is read once at open: the limits the code generator and the launcher need, and facts for reports.
constexpr int kAttributes[] = {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
};

}  // namespace

std::string device_name(int ordinal) { return ordinal == 0 ? "CUDA" : "CUDA:" + std::to_string(ordinal); }

Context::Context(std::shared_ptr<const DriverApi> api, int ordinal)
    : api_(std::move(api)), ordinal_(ordinal), name_(device_name(ordinal)) {
  const DriverApi& d = *api_;
  int count = 0;
  check("cuDeviceGetCount", d.cuDeviceGetCount(&count), "counting GPUs");
  if (ordinal < 0 || ordinal >= count)
    throw UsageError("no GPU " + name_ + ": the CUDA driver (" + d.source + ") reports " + std::to_string(count) +
                     " GPU(s), numbered from 0");
  check("cuDeviceGet", d.cuDeviceGet(&device_, ordinal), "opening the GPU");
  char product[256] = {};
  check("cuDeviceGetName", d.cuDeviceGetName(product, sizeof(product) - 1, device_), "reading the GPU's name");
  product_name_ = product;
  check("cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&total_memory_, device_), "reading the GPU's memory size");
  for (int attr : kAttributes) {
    int value = 0;
    check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&value, attr, device_), "reading a device attribute");
    attributes_[attr] = value;
  }
  check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&ctx_, device_), "retaining the primary context");
  try {
    make_current();
    // NON_BLOCKING: our work never serialises with the legacy default stream other libraries may use
    check("cuStreamCreate", d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "creating the stream");
  } catch (...) {
    d.cuDevicePrimaryCtxRelease(device_);
    throw;
  }
}

Context::~Context() {
  const DriverApi& d = *api_;
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != ctx_) d.cuCtxSetCurrent(ctx_);
  if (stream_ != nullptr) {
    d.cuStreamSynchronize(stream_);
    d.cuStreamDestroy(stream_);
  }
  d.cuDevicePrimaryCtxRelease(device_);
}

void Context::make_current() const {
  CUcontext current = nullptr;
  check("cuCtxGetCurrent", api_->cuCtxGetCurrent(&current), "reading the current context");
  if (current != ctx_) check("cuCtxSetCurrent", api_->cuCtxSetCurrent(ctx_), "making the GPU's context current");
}

void Context::synchronize() const {
  make_current();
  check("cuStreamSynchronize", api_->cuStreamSynchronize(stream_), "waiting for queued GPU work");
}

int Context::attribute(int attr) const {
  auto it = attributes_.find(attr);
  if (it == attributes_.end()) throw UsageError("device attribute " + std::to_string(attr) + " was not read at open");
  return it->second;
}

std::string Context::arch() const {
  return "sm_" + std::to_string(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)) +
         std::to_string(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
}

bool Context::enable_peer_access(const Context& peer) {
  auto it = peers_.find(peer.ordinal());
  if (it != peers_.end()) return it->second;
  int can = 0;
  check("cuDeviceCanAccessPeer", api_->cuDeviceCanAccessPeer(&can, device_, peer.device()), "checking peer access");
  bool enabled = false;
  if (can) {
    make_current();
    CUresult r = api_->cuCtxEnablePeerAccess(peer.context(), 0);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
      fail("cuCtxEnablePeerAccess", r, "enabling access to " + peer.name());
    enabled = true;
  }
  peers_[peer.ordinal()] = enabled;
  return enabled;
}

CudaEvent::CudaEvent(std::shared_ptr<Context> ctx, bool timing) : ctx_(std::move(ctx)) {
  ctx_->make_current();
  ctx_->check("cuEventCreate", ctx_->api().cuEventCreate(&event_, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING),
              "creating an event");
  CUresult r = ctx_->api().cuEventRecord(event_, ctx_->stream());
  if (r != CUDA_SUCCESS) {
    ctx_->api().cuEventDestroy(event_);
    ctx_->fail("cuEventRecord", r, "recording an event");
  }
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) ctx_->api().cuEventDestroy(event_);
}

}  // namespace tg::cuda
