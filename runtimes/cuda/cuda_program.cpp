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

template <class T>
std::string join(const std::vector<T>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

std::string hex(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[v & 15]);
    v >>= 4;
  } while (v != 0);
  return "0x" + out;
}

// The CUtensorMapDataType of an element size: TMA copies bits, so an unsigned type of the same width fits any dtype.
int tensor_map_data_type(std::uint32_t elem) {
  switch (elem) {
    case 1:
      return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case 2:
      return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case 4:
      return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    default:
      return CU_TENSOR_MAP_DATA_TYPE_UINT64;
  }
}

int tensor_map_swizzle(std::uint32_t bytes) {
  switch (bytes) {
    case 32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

// Why a spec cannot be encoded on any GPU, or an empty string; what the driver checks of the address and the strides
// is left to it (its own error names the problem).
std::string spec_problem(const TensorMapSpec& s) {
  const size_t rank = s.dims.size();
  if (rank < 1 || rank > static_cast<size_t>(kTensorMapMaxRank)) return "a tensor map has 1 to 5 dimensions";
  if (s.strides.size() != rank - 1)
    return "rank " + std::to_string(rank) + " needs " + std::to_string(rank - 1) + " stride(s), got " +
           std::to_string(s.strides.size());
  if (s.box.size() != rank)
    return "rank " + std::to_string(rank) + " needs " + std::to_string(rank) + " box size(s), got " +
           std::to_string(s.box.size());
  for (std::uint64_t d : s.dims)
    if (d == 0 || d > (std::uint64_t{1} << 32)) return "each size must be 1 to 2^32 elements";
  for (std::uint32_t b : s.box)
    if (b == 0 || b > 256) return "each box size must be 1 to 256 elements";
  if (s.elem != 1 && s.elem != 2 && s.elem != 4 && s.elem != 8) return "the element size must be 1, 2, 4 or 8 bytes";
  if (s.swizzle != 0 && s.swizzle != 32 && s.swizzle != 64 && s.swizzle != 128)
    return "the swizzle must be 0, 32, 64 or 128 bytes";
  return {};
}

}  // namespace

std::string describe(const TensorMapSpec& s) {
  return "arg=" + std::to_string(s.arg) + " offset=" + std::to_string(s.offset) + " elem=" + std::to_string(s.elem) +
         " dims=" + join(s.dims) + " strides=" + join(s.strides) + " box=" + join(s.box) +
         " swizzle=" + std::to_string(s.swizzle);
}

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
  const size_t nmaps = map_specs_.size();  // set_tensor_maps saw to it that the kernel has that many parameters
  if (layout_known_ && nargs + nmaps != params_.size())
    throw UsageError("kernel " + name_ + " takes " + std::to_string(params_.size() - nmaps) + " argument(s), got " +
                     std::to_string(nargs) +
                     (nmaps ? " (its " + std::to_string(nmaps) + " tensor map(s) are encoded by the runtime)" : ""));
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
  // The tensor maps, after the ordinary arguments, where the driver's layout puts them (set_tensor_maps refuses
  // maps where the driver gives none)
  for (size_t i = 0; i < nmaps; ++i) {
    const TensorMapSpec& spec = map_specs_[i];
    if (spec.arg >= nargs || args[spec.arg].kind != KernelArg::Kind::Pointer)
      throw UsageError("kernel " + name_ + ": tensor map " + std::to_string(i) + " describes argument " +
                       std::to_string(spec.arg) + ", which is " +
                       (spec.arg >= nargs ? "not among the " + std::to_string(nargs) + " given" : "not a buffer"));
    const size_t offset = params_[nargs + i].offset;
    if (offset + sizeof(TensorMap) > out.size()) out.resize(offset + sizeof(TensorMap), 0);
    write_tensor_map(i, args[spec.arg].bits + spec.offset, out.data() + offset);
  }
}

void CudaProgram::write_tensor_map(size_t i, std::uint64_t address, std::uint8_t* dst) const {
  std::lock_guard<std::mutex> lock(map_mutex_);
  MapCache& cache = map_cache_[i];
  if (!cache.valid || cache.address != address) {
    cache.valid = false;
    const DriverApi& d = ctx_->api();
    if (d.cuTensorMapEncodeTiled == nullptr) no_tensor_maps();
    const TensorMapSpec& s = map_specs_[i];
    const auto rank = static_cast<std::uint32_t>(s.dims.size());
    std::uint64_t dims[kTensorMapMaxRank] = {}, strides[kTensorMapMaxRank] = {};
    std::uint32_t box[kTensorMapMaxRank] = {}, element_strides[kTensorMapMaxRank] = {1, 1, 1, 1, 1};
    std::copy(s.dims.begin(), s.dims.end(), dims);
    std::copy(s.strides.begin(), s.strides.end(), strides);
    std::copy(s.box.begin(), s.box.end(), box);
    CUresult r = d.cuTensorMapEncodeTiled(&cache.encoded, tensor_map_data_type(s.elem), rank,
                                          reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)), dims,
                                          strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          tensor_map_swizzle(s.swizzle), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      ctx_->fail("cuTensorMapEncodeTiled", r,
                 "encoding tensor map " + std::to_string(i) + " of kernel " + name_ + " for address " + hex(address) +
                     " (" + describe(s) + "); TMA needs a 16-byte-aligned address and strides that are multiples "
                     "of 16 bytes");
    cache.valid = true;
    cache.address = address;
  }
  std::memcpy(dst, &cache.encoded, sizeof(TensorMap));
}

void CudaProgram::no_tensor_maps() const {
  const DriverApi& d = ctx_->api();
  throw RuntimeError(ctx_->name(), "cuGetProcAddress_v2", "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND",
                     "kernel " + name_ + " takes TMA tensor maps, but the CUDA driver (" + d.source + ", CUDA " +
                         cuda_version_text(d.version) + ") has no cuTensorMapEncodeTiled: TMA kernels need CUDA 12.0+");
}

void CudaProgram::set_tensor_maps(std::vector<TensorMapSpec> specs) {
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string why = spec_problem(specs[i]);
    // the parameter layout: every map a trailing 128-byte parameter, its buffer an ordinary pointer parameter
    if (why.empty() && layout_known_) {
      const size_t ordinary = params_.size() - std::min(params_.size(), specs.size());
      const size_t param = ordinary + i;
      const size_t arg = specs[i].arg;
      if (specs.size() > params_.size())
        why = "the kernel has " + std::to_string(params_.size()) + " parameter(s), fewer than " +
              std::to_string(specs.size()) + " tensor maps";
      else if (params_[param].size != sizeof(TensorMap))
        // NOTE: its offset is the driver's: a 64-byte aligned parameter may lie at offset 48 of the buffer (the
        // parameter space itself starts at an address that is not a multiple of 64)
        why = "the kernel's parameter " + std::to_string(param) + " is " + std::to_string(params_[param].size) +
              " bytes at offset " + std::to_string(params_[param].offset) + ", not a 128-byte CUtensorMap";
      else if (arg >= ordinary)
        why = "argument " + std::to_string(arg) + " is not one of the kernel's " + std::to_string(ordinary) +
              " ordinary argument(s)";
      else if (params_[arg].size != 8)
        why = "argument " + std::to_string(arg) + " is a " + std::to_string(params_[arg].size) +
              "-byte value, not a pointer";
    }
    if (!why.empty()) throw UsageError("kernel " + name_ + ": tensor map " + std::to_string(i) + " (" +
                                       describe(specs[i]) + "): " + why);
  }
  if (!specs.empty() && ctx_->api().cuTensorMapEncodeTiled == nullptr) no_tensor_maps();
  // Where the maps go is the driver's to say: it places a 64-byte aligned parameter by the absolute address of the
  // parameter space, which the C ABI's offsets do not know (the H100 put one at offset 48 after three pointers)
  if (!specs.empty() && !layout_known_)
    throw UsageError("kernel " + name_ + " takes TMA tensor maps, but the CUDA driver (" +
                     cuda_version_text(ctx_->api().version) + ") does not report kernel parameter layouts "
                     "(cuFuncGetParamInfo, CUDA 12.4+), which say where they go");
  std::lock_guard<std::mutex> lock(map_mutex_);
  map_cache_.assign(specs.size(), MapCache{});
  map_specs_ = std::move(specs);
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
