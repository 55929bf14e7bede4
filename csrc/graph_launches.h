// The bookkeeping every launch graph shares (runtimes/*/..._graph.cpp): the list of captured launches with their
// bound arguments, the index and kind checks of set_arg, the busy guard, and pinning the bound Buffers for a replay.
// What differs between backends (how a launch is packed and replayed) stays in the backend's graph.
#pragma once

#include <atomic>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "buffer.h"
#include "errors.h"
#include "runtime.h"

namespace tg {

// Marks a graph busy for one method call: an overlapping call (another Python thread, while the GIL is released)
// throws UsageError naming `graph` and `what` instead of racing.
class GraphBusyGuard {
 public:
  GraphBusyGuard(std::atomic<bool>& busy, const char* graph, const char* what) : busy_(busy) {
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true))
      throw UsageError(std::string(graph) + ": " + what + " while another call is using the graph");
  }
  ~GraphBusyGuard() { busy_.store(false); }
  GraphBusyGuard(const GraphBusyGuard&) = delete;
  GraphBusyGuard& operator=(const GraphBusyGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

// Unpins every Buffer pinned for a run when the run ends, however it ends.
class UnpinOnExit {
 public:
  explicit UnpinOnExit(std::vector<Buffer*>& pinned) noexcept : pinned_(pinned) {}
  ~UnpinOnExit() {
    for (Buffer* b : pinned_) b->unpin();
    pinned_.clear();
  }
  UnpinOnExit(const UnpinOnExit&) = delete;
  UnpinOnExit& operator=(const UnpinOnExit&) = delete;

 private:
  std::vector<Buffer*>& pinned_;
};

// The captured launches of one graph. `Launch` is the backend's record of a launch; it must have a member
// `std::vector<BoundArg> args` (the arguments as bound, in the kernel's order) and may add whatever the backend
// replays from (packed words, driver nodes).
//
// NOTE: launches live in a deque, so a reference to one stays valid while more are added: a backend may hand the
// driver pointers into its own Launch records.
template <class Launch>
class LaunchList {
 public:
  // `graph` names the graph in error messages ("CPU graph").
  explicit LaunchList(const char* graph) noexcept : graph_(graph) {}

  // Marks the graph busy until the returned guard dies (see GraphBusyGuard). Every public method of a graph that
  // touches the launches takes it first.
  [[nodiscard]] GraphBusyGuard busy(const char* what) { return GraphBusyGuard(busy_, graph_, what); }

  size_t size() const noexcept { return launches_.size(); }
  bool empty() const noexcept { return launches_.empty(); }
  auto begin() noexcept { return launches_.begin(); }
  auto end() noexcept { return launches_.end(); }
  auto begin() const noexcept { return launches_.begin(); }
  auto end() const noexcept { return launches_.end(); }

  // Appends a launch; returns a reference to it, valid for the life of the list. Its index is size() - 1.
  Launch& push(Launch launch) {
    launches_.push_back(std::move(launch));
    return launches_.back();
  }

  // Launch `launch`, or tg::UsageError naming the index and the count (`what`: the method, for the message).
  Launch& at(size_t launch, const char* what) {
    if (launch >= launches_.size())
      throw UsageError(std::string(graph_) + ": " + what + ": launch index " + std::to_string(launch) +
                       " out of range (graph has " + std::to_string(launches_.size()) + " launches)");
    return launches_[launch];
  }

  // The checks of Graph::set_arg (runtime.h): both indices in range and the kind of the argument unchanged, since
  // backends that pack arguments by type fixed the layout at add(). Returns the launch.
  Launch& check_set_arg(size_t launch, size_t arg, const BoundArg& value) {
    Launch& l = at(launch, "set_arg");
    if (arg >= l.args.size())
      throw UsageError(std::string(graph_) + ": argument index " + std::to_string(arg) + " out of range (launch " +
                       std::to_string(launch) + " has " + std::to_string(l.args.size()) + " arguments)");
    if (l.args[arg].is_pointer() != value.is_pointer())
      throw UsageError(std::string(graph_) + ": launch " + std::to_string(launch) + " argument " +
                       std::to_string(arg) + " is " + (l.args[arg].is_pointer() ? "a pointer" : "an integer") +
                       "; set_arg cannot change its kind");
    return l;
  }

  // For a replay: the guard that unpins what pin_buffers() pinned when the replay ends. Create it first.
  [[nodiscard]] UnpinOnExit unpin_on_exit() noexcept { return UnpinOnExit(pinned_); }

  // Pins every bound Buffer of every launch, then calls resolve(launch, index, buffer) so the backend can read its
  // current address (Buffer::ptr() throws tg::UsageError for a freed one, before anything has run). Pinning first
  // means nothing can free a buffer between the check and the replay.
  template <class Resolve>
  void pin_buffers(Resolve&& resolve) {
    for (Launch& l : launches_) {
      for (size_t i = 0; i < l.args.size(); ++i) {
        if (Buffer* b = l.args[i].buffer.get()) {
          pinned_.push_back(b);
          b->pin();
          resolve(l, i, *b);
        }
      }
    }
  }

 private:
  const char* graph_;
  std::deque<Launch> launches_;
  std::vector<Buffer*> pinned_;  // scratch of one replay, kept to avoid reallocating per replay
  // Set while any method runs: a Python thread calling in while another replays (without the GIL) gets a
  // tg::UsageError instead of a data race.
  std::atomic<bool> busy_{false};
};

}  // namespace tg
