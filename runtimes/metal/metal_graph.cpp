#include "metal_graph.h"

#include <string>
#include <utility>

#include "buffer.h"
#include "errors.h"

namespace tg::metal {

size_t MetalGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) {
  auto busy = launches_.busy("add");
  auto metal = std::dynamic_pointer_cast<MetalProgram>(program);
  if (!metal) throw UsageError("Metal graph: program '" + (program ? program->name() : "") + "' is not a Metal one");
  // no dims: symbolic launch sizes, which set_dims gives before the first replay
  if (dims != nullptr) metal->check_dims(dims);
  Launch l{std::move(metal), std::move(args), {}, dims ? *dims : LaunchDims{}, dims != nullptr};
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
  const ObjcApi& a = ctx_->api();
  AutoreleasePool pool(a);
  id cb = send<id>(a, ctx_->queue(), a.sel.commandBuffer);
  id enc = send<id>(a, cb, a.sel.computeCommandEncoder);
  for (const Launch& l : launches_) l.program->encode(enc, l.values.data(), l.values.size(), l.dims);
  send<void>(a, enc, a.sel.endEncoding);
  ctx_->commit(cb);
}

}  // namespace tg::metal
