#include "cpu_graph.h"

#include <string>
#include <utility>

#include "buffer.h"
#include "errors.h"
#include "graph_guards.h"

namespace tg::cpu {
namespace {

// The word for an argument as far as it is known at capture time; Buffer slots get their address at each run.
Word capture_word(const BoundArg& arg) { return arg.buffer ? 0 : CpuProgram::to_word(arg.value); }

}  // namespace

size_t CpuGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* /*dims*/) {
  GraphBusyGuard busy(busy_, "CPU graph", "add");
  if (!program) throw UsageError("CPU graph: add() needs a program");
  auto cpu = std::dynamic_pointer_cast<CpuProgram>(program);
  if (!cpu) throw UsageError("CPU graph: program '" + program->name() + "' is for device " + program->device());
  check_call_arity(args.size());
  Launch launch{std::move(cpu), std::move(args), {}};
  launch.words.reserve(launch.args.size());
  for (const BoundArg& arg : launch.args) launch.words.push_back(capture_word(arg));
  launches_.push_back(std::move(launch));
  return launches_.size() - 1;
}

void CpuGraph::set_arg(size_t launch, size_t arg, BoundArg value) {
  GraphBusyGuard busy(busy_, "CPU graph", "set_arg");
  if (launch >= launches_.size())
    throw UsageError("CPU graph: launch index " + std::to_string(launch) + " out of range (graph has " +
                     std::to_string(launches_.size()) + " launches)");
  Launch& l = launches_[launch];
  if (arg >= l.args.size())
    throw UsageError("CPU graph: argument index " + std::to_string(arg) + " out of range (launch " +
                     std::to_string(launch) + " has " + std::to_string(l.args.size()) + " arguments)");
  if (l.args[arg].is_pointer() != value.is_pointer())
    throw UsageError("CPU graph: launch " + std::to_string(launch) + " argument " + std::to_string(arg) + " is " +
                     (l.args[arg].is_pointer() ? "a pointer" : "an integer") + "; set_arg cannot change its kind");
  l.words[arg] = capture_word(value);
  l.args[arg] = std::move(value);
}

void CpuGraph::run() {
  GraphBusyGuard busy(busy_, "CPU graph", "run");
  UnpinOnExit unpin{pinned_};
  // Pin before resolving, so nothing can free a buffer between the check and the call.
  for (Launch& l : launches_) {
    for (size_t i = 0; i < l.args.size(); ++i) {
      if (Buffer* b = l.args[i].buffer.get()) {
        pinned_.push_back(b);
        b->pin();
        l.words[i] = reinterpret_cast<Word>(b->host_ptr());
      }
    }
  }
  for (const Launch& l : launches_) l.program->call(l.words.data(), l.words.size());
}

}  // namespace tg::cpu
