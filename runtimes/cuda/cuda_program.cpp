#include "cuda_program.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "errors.h"

namespace tg::cuda {
namespace {

// No real kernel has this many parameters (the driver's limit is 32764 bytes of them); a bound on the query loop.
constexpr size_t kMaxParams = 8192;

std::string dims_text(const std::uint32_t d[3]) {
  return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + ")";
}

}  // namespace

CudaProgram::CudaProgram(std::shared_ptr<Context> ctx, std::string name, std::string_view image)
    : ctx_(std::move(ctx)), name_(std::move(name)) {
  const DriverApi& d = ctx_->api();
  ctx_->make_current();
  // PTX must be NUL-terminated; a cubin does not care. Copying also keeps the caller's bytes untouched.
  std::string bytes(image);
  CUresult r = d.cuModuleLoadData(&module_, bytes.c_str());
  if (r != CUDA_SUCCESS) ctx_->fail("cuModuleLoadData", r, "loading the module of kernel " + name_);
  r = d.cuModuleGetFunction(&function_, module_, name_.c_str());
  if (r != CUDA_SUCCESS) {
    d.cuModuleUnload(module_);
    ctx_->fail("cuModuleGetFunction", r, "the module has no kernel named '" + name_ + "'");
  }
  try {
    ctx_->check("cuFuncGetAttribute", d.cuFuncGetAttribute(&max_threads_, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                           function_), "reading the kernel's thread limit");
    ctx_->check("cuFuncGetAttribute", d.cuFuncGetAttribute(&num_regs_, CU_FUNC_ATTRIBUTE_NUM_REGS, function_),
                "reading the kernel's register count");
  } catch (...) {
    d.cuModuleUnload(module_);
    throw;
  }
  static constexpr int kGridAttr[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                       CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
  static constexpr int kBlockAttr[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
  for (int i = 0; i < 3; ++i) {
    max_grid_[i] = static_cast<std::uint32_t>(ctx_->attribute(kGridAttr[i]));
    max_block_[i] = static_cast<std::uint32_t>(ctx_->attribute(kBlockAttr[i]));
  }
  if (d.cuFuncGetParamInfo != nullptr) {
    // The driver answers CUDA_ERROR_INVALID_VALUE for the first index past the last parameter.
    layout_known_ = true;
    for (size_t i = 0; i < kMaxParams; ++i) {
      ParamSlot slot;
      r = d.cuFuncGetParamInfo(function_, i, &slot.offset, &slot.size);
      if (r == CUDA_ERROR_INVALID_VALUE) break;
      if (r != CUDA_SUCCESS) {  // cannot tell: fall back to the layout derived from the arguments
        params_.clear();
        layout_known_ = false;
        break;
      }
      params_.push_back(slot);
    }
  }
}

CudaProgram::~CudaProgram() {
  const DriverApi& d = ctx_->api();
  try {
    ctx_->synchronize();
  } catch (...) {
  }
  for (CUevent e : timing_)
    if (e != nullptr) d.cuEventDestroy(e);
  if (module_ != nullptr) d.cuModuleUnload(module_);
}

void CudaProgram::pack(const KernelArg* args, size_t nargs, std::vector<std::uint8_t>& out) const {
  if (layout_known_ && nargs != params_.size())
    throw UsageError("kernel " + name_ + " takes " + std::to_string(params_.size()) + " argument(s), got " +
                     std::to_string(nargs));
  size_t end = 0;
  // Each argument's place: the driver's layout, or else natural alignment in order (the C ABI of the parameter
  // list, which NVCC and NVRTC follow).
  auto place = [&](size_t i, size_t* offset, size_t* size) {
    if (layout_known_) {
      *offset = params_[i].offset;
      *size = params_[i].size;
    } else {
      *size = args[i].kind == KernelArg::Kind::Pointer ? 8 : 4;
      *offset = (end + *size - 1) / *size * *size;
    }
  };
  out.clear();
  for (size_t i = 0; i < nargs; ++i) {
    size_t offset = 0, size = 0;
    place(i, &offset, &size);
    const KernelArg& a = args[i];
    if (offset + size > out.size()) out.resize(offset + size, 0);
    std::uint8_t* dst = out.data() + offset;
    if (a.kind == KernelArg::Kind::Pointer) {
      if (size != 8)
        throw UsageError("kernel " + name_ + " argument " + std::to_string(i) + " is a " + std::to_string(size) +
                         "-byte value, not a pointer: got a buffer");
      std::uint64_t v = a.bits;
      std::memcpy(dst, &v, 8);
    } else if (size == 4) {
      std::int64_t v = a.as_int();
      if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
        throw UsageError("kernel " + name_ + " argument " + std::to_string(i) + " is a 32-bit int; " +
                         std::to_string(v) + " does not fit");
      std::int32_t v32 = static_cast<std::int32_t>(v);
      std::memcpy(dst, &v32, 4);
    } else if (size == 8) {
      std::int64_t v = a.as_int();
      std::memcpy(dst, &v, 8);
    } else {
      throw UsageError("kernel " + name_ + " argument " + std::to_string(i) + " has " + std::to_string(size) +
                       " bytes: only pointers and 32/64-bit ints can be passed");
    }
    end = std::max(end, offset + size);
  }
}

void CudaProgram::check_dims(const LaunchDims& dims) const {
  std::uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (dims.global[i] == 0 || dims.local[i] == 0)
      throw UsageError("kernel " + name_ + ": launch dimensions must be at least 1, got grid " +
                       dims_text(dims.global) + " block " + dims_text(dims.local));
    if (dims.global[i] > max_grid_[i] || dims.local[i] > max_block_[i])
      throw UsageError("kernel " + name_ + ": grid " + dims_text(dims.global) + " block " + dims_text(dims.local) +
                       " exceeds the limits of " + ctx_->name() + " in dimension " + std::to_string(i));
    threads *= dims.local[i];
  }
  if (threads > static_cast<std::uint64_t>(max_threads_))
    throw UsageError("kernel " + name_ + ": block " + dims_text(dims.local) + " has " + std::to_string(threads) +
                     " threads; this kernel allows at most " + std::to_string(max_threads_));
}

void CudaProgram::enqueue(const KernelArg* args, size_t nargs, const LaunchDims& dims) {
  check_dims(dims);
  pack(args, nargs, scratch_);
  size_t size = scratch_.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, scratch_.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ctx_->make_current();
  // The driver copies the packed arguments before returning, so scratch_ is free again afterwards.
  CUresult r = ctx_->api().cuLaunchKernel(function_, dims.global[0], dims.global[1], dims.global[2], dims.local[0],
                                          dims.local[1], dims.local[2], static_cast<unsigned>(dynamic_shared_),
                                          ctx_->stream(), nullptr,
                                          size != 0 ? extra : nullptr);
  if (r != CUDA_SUCCESS)
    ctx_->fail("cuLaunchKernel", r, "launching " + name_ + " with grid " + dims_text(dims.global) + " block " +
                                        dims_text(dims.local));
}

void CudaProgram::set_dynamic_shared(int bytes) {
  if (bytes < 0) throw UsageError("kernel " + name_ + ": dynamic shared memory must be at least 0 bytes");
  ctx_->make_current();
  CUresult r = ctx_->api().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  if (r != CUDA_SUCCESS)
    ctx_->fail("cuFuncSetAttribute", r,
               "giving kernel " + name_ + " " + std::to_string(bytes) + " bytes of dynamic shared memory");
  dynamic_shared_ = bytes;
}

void CudaProgram::launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) {
  enqueue(args, nargs, dims != nullptr ? *dims : LaunchDims{});
}

std::optional<double> CudaProgram::launch_timed(const KernelArg* args, size_t nargs, const LaunchDims* dims) {
  const DriverApi& d = ctx_->api();
  ctx_->make_current();
  for (CUevent& e : timing_)
    if (e == nullptr) ctx_->check("cuEventCreate", d.cuEventCreate(&e, CU_EVENT_DEFAULT), "creating a timing event");
  ctx_->check("cuEventRecord", d.cuEventRecord(timing_[0], ctx_->stream()), "recording the start of a kernel");
  enqueue(args, nargs, dims != nullptr ? *dims : LaunchDims{});
  ctx_->check("cuEventRecord", d.cuEventRecord(timing_[1], ctx_->stream()), "recording the end of a kernel");
  ctx_->check("cuEventSynchronize", d.cuEventSynchronize(timing_[1]), "waiting for a timed kernel");
  float ms = 0;
  ctx_->check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, timing_[0], timing_[1]), "timing the kernel");
  return ms * 1e-3;
}

}  // namespace tg::cuda
