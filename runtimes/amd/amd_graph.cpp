#include "amd_graph.h"

#include <cstring>
#include <utility>

#include "buffer.h"
#include "errors.h"

namespace tg::amd {

void AmdGraph::pack(Launch& l) {
  std::vector<KernelArg> values;
  for (const BoundArg& a : l.args) values.push_back(a.buffer ? KernelArg::pointer(0) : a.value);
  l.kernargs = l.program->pack_args(values.data(), values.size());
  l.offsets = AmdProgram::arg_offsets(values.data(), values.size());
}

size_t AmdGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) {
  auto busy = launches_.busy("add");
  auto amd = std::dynamic_pointer_cast<AmdProgram>(program);
  if (!amd || amd->gpu() != gpu_)
    throw UsageError("AMD graph: program '" + (program ? program->name() : std::string("null")) +
                     "' is not a program of " + gpu_->name());
  Launch l{std::move(amd), std::move(args), {}, {}, {}};
  l.packet = l.program->packet(dims);
  pack(l);
  launches_.push(std::move(l));
  return launches_.size() - 1;
}

void AmdGraph::set_arg(size_t launch, size_t arg, BoundArg value) {
  auto busy = launches_.busy("set_arg");
  Launch& l = launches_.check_set_arg(launch, arg, std::move(value));
  l.args[arg] = std::move(value);
  pack(l);
}

bool AmdGraph::set_dims(size_t launch, const LaunchDims& dims) {
  auto busy = launches_.busy("set_dims");
  Launch& l = launches_.at(launch, "set_dims");
  l.packet = l.program->packet(&dims);
  return true;
}

void AmdGraph::run() {
  auto busy = launches_.busy("run");
  auto unpin = launches_.unpin_on_exit();
  launches_.pin_buffers([](Launch& l, size_t i, Buffer& b) {
    std::uint64_t p = b.ptr();
    std::memcpy(l.kernargs.data() + l.offsets[i], &p, 8);
  });
  AqlQueue& q = gpu_->queue();
  for (Launch& l : launches_) {
    void* kernargs = q.kernargs(l.kernargs.size(), 16);
    std::memcpy(kernargs, l.kernargs.data(), l.kernargs.size());
    hsa::DispatchPacket p = l.packet;
    p.kernarg_address = reinterpret_cast<std::uint64_t>(kernargs);
    q.write(p);
  }
  q.ring();
  ++replays_;
}

}  // namespace tg::amd
