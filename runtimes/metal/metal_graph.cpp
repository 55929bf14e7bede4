#include "metal_graph.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "buffer.h"
#include "errors.h"

namespace tg::metal {
namespace {

constexpr NSUInteger kConcurrentDispatch = 1 << 5;  // MTLIndirectCommandTypeConcurrentDispatch
constexpr NSUInteger kUsageReadWrite = 1 | 2;        // MTLResourceUsageRead | MTLResourceUsageWrite
constexpr NSUInteger kMaxBindings = 31;

struct NSRange {
  NSUInteger location, length;
};

bool same(const std::vector<KernelArg>& a, const std::vector<KernelArg>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](const KernelArg& x, const KernelArg& y) {
           return x.kind == y.kind && x.bits == y.bits;
         });
}

bool same(const LaunchDims& a, const LaunchDims& b) {
  return std::equal(a.global, a.global + 3, b.global) && std::equal(a.local, a.local + 3, b.local);
}

}  // namespace

size_t MetalGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) {
  auto busy = launches_.busy("add");
  auto metal = std::dynamic_pointer_cast<MetalProgram>(program);
  if (!metal) throw UsageError("Metal graph: program '" + (program ? program->name() : "") + "' is not a Metal one");
  if (args.size() > kMaxBindings)
    throw RuntimeError(ctx_->name(), "Metal graph", "too many arguments",
                       metal->name() + " has " + std::to_string(args.size()) + " arguments; Metal binds 31");
  // no dims: symbolic launch sizes, which set_dims gives before the first replay
  if (dims != nullptr) metal->check_dims(dims);
  Launch l{std::move(metal), std::move(args), {}, dims ? *dims : LaunchDims{}, dims != nullptr, {}, {}, 0};
  for (const BoundArg& a : l.args) l.values.push_back(a.buffer ? KernelArg::pointer(0) : a.value);
  launches_.push(std::move(l));
  return launches_.size() - 1;
}

void MetalGraph::set_arg(size_t launch, size_t arg, BoundArg value) {
  auto busy = launches_.busy("set_arg");
  Launch& l = launches_.check_set_arg(launch, arg, value);
  l.values[arg] = value.buffer ? KernelArg::pointer(0) : value.value;
  l.args[arg] = std::move(value);
}

bool MetalGraph::set_dims(size_t launch, const LaunchDims& dims) {
  auto busy = launches_.busy("set_dims");
  Launch& l = launches_.at(launch, "set_dims");
  l.program->check_dims(&dims);
  l.dims = dims;
  l.has_dims = true;
  return true;
}

void MetalGraph::run() {
  auto busy = launches_.busy("run");
  auto unpin = launches_.unpin_on_exit();
  launches_.pin_buffers([](Launch& l, size_t i, Buffer& b) { l.values[i] = KernelArg::pointer(b.ptr()); });
  if (launches_.empty()) return;
  for (const Launch& l : launches_)
    if (!l.has_dims) throw UsageError("Metal graph: launch of " + l.program->name() + " has no dimensions (set_dims)");
  if (use_icb_) run_icb();
  else run_direct();
}

void MetalGraph::run_direct() {
  const ObjcApi& a = ctx_->api();
  AutoreleasePool pool(a);
  id cb = send<id>(a, ctx_->queue(), a.sel.commandBuffer);
  id enc = send<id>(a, cb, a.sel.computeCommandEncoder);
  for (const Launch& l : launches_) l.program->encode(enc, l.values.data(), l.values.size(), l.dims);
  send<void>(a, enc, a.sel.endEncoding);
  ctx_->commit(cb);
}

void MetalGraph::build_icb() {
  const ObjcApi& a = ctx_->api();
  icb_.reset();
  ints_.reset();
  int_slots_ = 0;
  for (Launch& l : launches_) {
    l.first_int = int_slots_;
    for (const KernelArg& v : l.values) int_slots_ += v.kind == KernelArg::Kind::Int;
    l.encoded.clear();
  }
  Owned desc(ctx_->api_ptr(),
             send<id>(a, send<id>(a, a.cls("MTLIndirectCommandBufferDescriptor"), a.sel.alloc), a.sel.init));
  send<void>(a, desc.get(), a.sel.setCommandTypes, kConcurrentDispatch);
  send<void>(a, desc.get(), a.sel.setInheritBuffers, false);
  send<void>(a, desc.get(), a.sel.setInheritPipelineState, false);
  send<void>(a, desc.get(), a.sel.setMaxKernelBufferBindCount, kMaxBindings);
  id icb = send<id>(a, ctx_->device(), a.sel.newIndirectCommandBufferWithDescriptor_maxCommandCount_options,
                    desc.get(), NSUInteger(launches_.size()), NSUInteger{0});
  if (icb == nullptr)
    throw RuntimeError(ctx_->name(), "newIndirectCommandBufferWithDescriptor:maxCommandCount:options:", "nil",
                       "no indirect command buffer of " + std::to_string(launches_.size()) + " commands");
  icb_ = Owned(ctx_->api_ptr(), icb);
  NSUInteger int_bytes = 4 * std::max<size_t>(1, int_slots_);
  id ints = send<id>(a, ctx_->device(), a.sel.newBufferWithLength_options, int_bytes, NSUInteger{0});
  if (ints == nullptr) throw OutOfMemory(ctx_->name(), "newBufferWithLength:options:", "nil", 4 * int_slots_);
  ints_ = Owned(ctx_->api_ptr(), ints);
  icb_size_ = launches_.size();
}

void MetalGraph::encode_command(size_t index, Launch& l) {
  const ObjcApi& a = ctx_->api();
  id cmd = send<id>(a, icb_.get(), a.sel.indirectComputeCommandAtIndex, NSUInteger(index));
  send<void>(a, cmd, a.sel.setComputePipelineState, l.program->pipeline());
  auto* ints = static_cast<std::int32_t*>(send<void*>(a, ints_.get(), a.sel.contents));
  size_t slot = l.first_int;
  for (size_t i = 0; i < l.values.size(); ++i) {
    if (l.values[i].kind == KernelArg::Kind::Pointer) {
      send<void>(a, cmd, a.sel.setKernelBuffer_offset_atIndex, reinterpret_cast<id>(l.values[i].as_pointer()),
                 NSUInteger{0}, NSUInteger(i));
    } else {
      ints[slot] = static_cast<std::int32_t>(l.values[i].as_int());
      send<void>(a, cmd, a.sel.setKernelBuffer_offset_atIndex, ints_.get(), NSUInteger(4 * slot), NSUInteger(i));
      ++slot;
    }
  }
  MTLSize grid{l.dims.global[0], l.dims.global[1], l.dims.global[2]};
  MTLSize block{l.dims.local[0], l.dims.local[1], l.dims.local[2]};
  send<void>(a, cmd, a.sel.concurrentDispatchThreadgroups_threadsPerThreadgroup, grid, block);
  send<void>(a, cmd, a.sel.setBarrier);  // in order: each command sees the writes of the one before
  l.encoded = l.values;
  l.encoded_dims = l.dims;
}

void MetalGraph::run_icb() {
  const ObjcApi& a = ctx_->api();
  AutoreleasePool pool(a);
  bool rebuilt = !icb_ || icb_size_ != launches_.size();
  if (rebuilt) {
    ctx_->synchronize();
    build_icb();
  }
  bool waited = rebuilt;
  size_t index = 0;
  for (Launch& l : launches_) {
    if (!same(l.encoded, l.values) || !same(l.encoded_dims, l.dims)) {
      if (!waited) {
        ctx_->synchronize();  // the last replay may still be running these commands
        waited = true;
      }
      encode_command(index, l);
    }
    ++index;
  }
  if (waited) {
    resources_.assign(1, ints_.get());
    for (const Launch& l : launches_)
      for (const KernelArg& v : l.values)
        if (v.kind == KernelArg::Kind::Pointer) resources_.push_back(reinterpret_cast<id>(v.as_pointer()));
    std::sort(resources_.begin(), resources_.end());
    resources_.erase(std::unique(resources_.begin(), resources_.end()), resources_.end());
  }
  id cb = send<id>(a, ctx_->queue(), a.sel.commandBuffer);
  id enc = send<id>(a, cb, a.sel.computeCommandEncoder);
  // the ICB's commands reach their buffers only if the encoder was told it uses them
  for (id r : resources_) send<void>(a, enc, a.sel.useResource_usage, r, kUsageReadWrite);
  send<void>(a, enc, a.sel.executeCommandsInBuffer_withRange, icb_.get(), NSRange{0, launches_.size()});
  send<void>(a, enc, a.sel.endEncoding);
  ctx_->commit(cb);
}

}  // namespace tg::metal
