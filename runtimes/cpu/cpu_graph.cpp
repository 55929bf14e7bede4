#include "cpu_graph.h"

#include <string>
#include <utility>

#include "buffer.h"
#include "errors.h"

namespace tg::cpu {
namespace {

// The word for an argument as far as it is known at capture time; Buffer slots get their address at each run.
Word capture_word(const BoundArg& arg) { return arg.buffer ? 0 : CpuProgram::to_word(arg.value); }

}  // namespace

size_t CpuGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* /*dims*/) {
  auto busy = launches_.busy("add");
  if (!program) throw UsageError("CPU graph: add() needs a program");
  auto cpu = std::dynamic_pointer_cast<CpuProgram>(program);
  if (!cpu) throw UsageError("CPU graph: program '" + program->name() + "' is for device " + program->device());
  check_call_arity(args.size());
  Launch launch{std::move(cpu), std::move(args), {}};
  launch.words.reserve(launch.args.size());
  for (const BoundArg& arg : launch.args) launch.words.push_back(capture_word(arg));
  launches_.push(std::move(launch));
  return launches_.size() - 1;
}

void CpuGraph::set_arg(size_t launch, size_t arg, BoundArg value) {
  auto busy = launches_.busy("set_arg");
  Launch& l = launches_.check_set_arg(launch, arg, value);
  l.words[arg] = capture_word(value);
  l.args[arg] = std::move(value);
}

bool CpuGraph::set_dims(size_t launch, const LaunchDims& /*dims*/) {
  auto busy = launches_.busy("set_dims");
  launches_.at(launch, "set_dims");
  return true;
}

void CpuGraph::run() {
  auto busy = launches_.busy("run");
  auto unpin = launches_.unpin_on_exit();
  launches_.pin_buffers(
      [](Launch& l, size_t i, Buffer& b) { l.words[i] = reinterpret_cast<Word>(b.host_ptr()); });
  for (const Launch& l : launches_) l.program->call(l.words.data(), l.words.size());
}

}  // namespace tg::cpu
