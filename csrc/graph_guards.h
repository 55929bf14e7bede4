// Guards the launch graphs of every runtime share (runtimes/*/..._graph.cpp).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "buffer.h"
#include "errors.h"

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
struct UnpinOnExit {
  std::vector<Buffer*>& pinned;
  ~UnpinOnExit() {
    for (Buffer* b : pinned) b->unpin();
    pinned.clear();
  }
};

}  // namespace tg
