#include "cpu_graph.h"

#include <string>
#include <utility>

#include "buffer.h"
#include "errors.h"

namespace tg::cpu {
namespace {

// The word for an argument as far as it is known at capture time; Buffer slots get their address at each run.
Word capture_word(const BoundArg& arg) { return arg.buffer ? 0 : CpuProgram::to_word(arg.value); }

// Marks the graph busy for one method call; a second, overlapping call throws instead of racing.
class BusyGuard {
 public:
  BusyGuard(std::atomic<bool>& busy, const char* what) : busy_(busy) {
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true))
      throw UsageError(std::string("CPU graph: ") + what + " while another call is using the graph");
  }
  ~BusyGuard() { busy_.store(false); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

// Unpins everything pinned so far when run() ends, however it ends.
struct UnpinOnExit {
  std::vector<Buffer*>& pinned;
  ~UnpinOnExit() {
    for (Buffer* b : pinned) b->unpin();
    pinned.clear();
  }
};

}  // namespace

size_t CpuGraph::add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* /*dims*/) {
  BusyGuard busy(busy_, "add");
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
  BusyGuard busy(busy_, "set_arg");
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
  BusyGuard busy(busy_, "run");
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
