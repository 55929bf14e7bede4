#include "metal_program.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "errors.h"

namespace tg::metal {

Owned new_library(MetalContext& ctx, std::string_view image) {
  const ObjcApi& a = ctx.api();
  AutoreleasePool pool(a);
  id err = nullptr;
  id lib = nullptr;
  const char* call;
  if (image.size() >= 4 && std::memcmp(image.data(), "MTLB", 4) == 0) {
    call = "newLibraryWithData:error:";
    // NULL destructor (DISPATCH_DATA_DESTRUCTOR_DEFAULT): the data is copied, the image may go
    Owned data(ctx.api_ptr(), a.dispatch_data_create(image.data(), image.size(), nullptr, nullptr));
    lib = send<id>(a, ctx.device(), a.sel.newLibraryWithData_error, data.get(), &err);
  } else {
    call = "newLibraryWithSource:options:error:";
    Owned options(ctx.api_ptr(), send<id>(a, send<id>(a, a.cls("MTLCompileOptions"), a.sel.alloc), a.sel.init));
    // exact IEEE semantics (NaN, inf, denormals), as the CPU backend that results are checked against
    send<void>(a, options.get(), a.sel.setFastMathEnabled, false);
    lib = send<id>(a, ctx.device(), a.sel.newLibraryWithSource_options_error, ns_string(a, std::string(image)),
                   options.get(), &err);
  }
  if (lib == nullptr) throw_ns_error(a, ctx.name(), call, err, "Metal could not build the kernel library");
  return Owned(ctx.api_ptr(), lib);
}

MetalProgram::MetalProgram(std::shared_ptr<MetalContext> ctx, std::string name, std::string_view image)
    : ctx_(std::move(ctx)), name_(std::move(name)) {
  const ObjcApi& a = ctx_->api();
  library_ = new_library(*ctx_, image);
  AutoreleasePool pool(a);
  id fn = send<id>(a, library_.get(), a.sel.newFunctionWithName, ns_string(a, name_));
  if (fn == nullptr)
    throw RuntimeError(ctx_->name(), "newFunctionWithName:", "MTLLibraryErrorFunctionNotFound",
                       "the kernel library has no function " + name_);
  function_ = Owned(ctx_->api_ptr(), fn);
  id err = nullptr;
  id p;
  const char* call;
  if (ctx_->supports_icb()) {
    // a pipeline goes into an indirect command buffer only if made able to, through a descriptor
    call = "newComputePipelineStateWithDescriptor:options:reflection:error:";
    Owned desc(ctx_->api_ptr(),
               send<id>(a, send<id>(a, a.cls("MTLComputePipelineDescriptor"), a.sel.alloc), a.sel.init));
    send<void>(a, desc.get(), a.sel.setComputeFunction, fn);
    send<void>(a, desc.get(), a.sel.setSupportIndirectCommandBuffers, true);
    p = send<id>(a, ctx_->device(), a.sel.newComputePipelineStateWithDescriptor_options_reflection_error, desc.get(),
                 NSUInteger{0}, static_cast<id*>(nullptr), &err);
  } else {
    call = "newComputePipelineStateWithFunction:error:";
    p = send<id>(a, ctx_->device(), a.sel.newComputePipelineStateWithFunction_error, fn, &err);
  }
  if (p == nullptr) throw_ns_error(a, ctx_->name(), call, err, "Metal could not make a pipeline of " + name_);
  pipeline_ = Owned(ctx_->api_ptr(), p);
  max_threads_ = send<NSUInteger>(a, p, a.sel.maxTotalThreadsPerThreadgroup);
  simd_width_ = send<NSUInteger>(a, p, a.sel.threadExecutionWidth);
}

void MetalProgram::check_dims(const LaunchDims* dims) const {
  if (dims == nullptr) throw UsageError(name_ + ": a Metal launch needs its grid and threadgroup sizes");
  std::uint64_t threads = std::uint64_t{dims->local[0]} * dims->local[1] * dims->local[2];
  if (threads > max_threads_)
    throw UsageError(name_ + ": " + std::to_string(threads) + " threads per threadgroup, but its pipeline allows " +
                     std::to_string(max_threads_));
  for (int i = 0; i < 3; ++i)
    if (dims->global[i] == 0 || dims->local[i] == 0) throw UsageError(name_ + ": a launch dimension is 0");
}

void MetalProgram::encode(id enc, const KernelArg* args, size_t nargs, const LaunchDims& dims) const {
  const ObjcApi& a = ctx_->api();
  send<void>(a, enc, a.sel.setComputePipelineState, pipeline_.get());
  for (size_t i = 0; i < nargs; ++i) {
    if (args[i].kind == KernelArg::Kind::Pointer) {
      send<void>(a, enc, a.sel.setBuffer_offset_atIndex, reinterpret_cast<id>(args[i].as_pointer()), NSUInteger{0},
                 NSUInteger(i));
    } else {
      // the kernel's `constant int&`: 4 bytes, copied into the command at encoding
      std::int32_t v = static_cast<std::int32_t>(args[i].as_int());
      send<void>(a, enc, a.sel.setBytes_length_atIndex, static_cast<const void*>(&v), NSUInteger{4}, NSUInteger(i));
    }
  }
  MTLSize grid{dims.global[0], dims.global[1], dims.global[2]};
  MTLSize block{dims.local[0], dims.local[1], dims.local[2]};
  send<void>(a, enc, a.sel.dispatchThreadgroups_threadsPerThreadgroup, grid, block);
}

id MetalProgram::commit_launch(const KernelArg* args, size_t nargs, const LaunchDims* dims, bool keep) {
  check_dims(dims);
  const ObjcApi& a = ctx_->api();
  AutoreleasePool pool(a);
  id cb = send<id>(a, ctx_->queue(), a.sel.commandBuffer);
  id enc = send<id>(a, cb, a.sel.computeCommandEncoder);
  encode(enc, args, nargs, *dims);
  send<void>(a, enc, a.sel.endEncoding);
  if (keep) send<id>(a, cb, a.sel.retain);  // outlives the pool: the caller reads its times, then releases it
  ctx_->commit(cb);
  return cb;
}

void MetalProgram::launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) {
  commit_launch(args, nargs, dims, false);
}

std::optional<double> MetalProgram::launch_timed(const KernelArg* args, size_t nargs, const LaunchDims* dims) {
  Owned cb(ctx_->api_ptr(), commit_launch(args, nargs, dims, true));
  ctx_->synchronize();
  const ObjcApi& a = ctx_->api();
  return send<double>(a, cb.get(), a.sel.GPUEndTime) - send<double>(a, cb.get(), a.sel.GPUStartTime);
}

}  // namespace tg::metal
