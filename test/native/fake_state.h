// Internal to the fake driver (fake_driver.cpp, fake_exec.cpp, fake_nvrtc.cpp, fake_records.cpp): the simulated GPU
// state they share.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_api.h"
#include "fake_driver.h"

// The entry points a real libcuda.so.1 / libnvrtc.so export by name, exported the same way from the test library.
#define TG_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace tg::cuda::fake {

struct KernelSignature {
  std::string name;
  std::vector<std::pair<size_t, size_t>> params;  // (offset, size)
  size_t params_size = 0;                         // end of the last parameter: the exact packed size
  int max_threads = 1024;                         // from __launch_bounds__, else the hardware limit
};

// The kernels declared in CUDA source: every `__global__` function, its parameters laid out as the C ABI does
// (pointers and 64-bit ints 8 bytes, tensor maps (tg_tmap, CUtensorMap) 128 bytes 64-byte aligned, everything else
// 4), and its __launch_bounds__.
std::vector<KernelSignature> parse_kernels(const std::string& source);

inline constexpr char kCubinMagic[] = "FAKECUBIN\n";

struct State {
  Config cfg;
  std::mutex mu;
  std::uint64_t next_handle = 0x1000;
  std::uint64_t seq = 0;
  double clock_ms = 0;

  struct Alloc {
    std::uint64_t size;
    int device;
  };
  struct Stream {
    int device;
    std::deque<std::pair<std::uint64_t, std::function<void()>>> ops;
    std::uint64_t capture = 0;  // the capture it belongs to (cuStreamBeginCapture, or joined by a wait), or 0
  };
  struct Event {
    bool timing;
    bool recorded = false;
    bool done = false;
    std::uint64_t stream = 0, seq = 0;
    double time_ms = 0;
    std::uint64_t capture = 0;  // recorded on a stream being captured: waiting on it joins that capture
    int device = -1;            // of the context it was made in: it can be recorded on that context's streams only
  };
  struct Function {
    std::uint64_t module;
    KernelSignature sig;
    int dynamic_shared_max = 48 * 1024;  // cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
  };
  // A graph node: a kernel (func set; recorded as a launch when its graph is launched, computes nothing), an
  // operation captured from a stream (op: a copy, an NCCL collective, an event record; run when the graph runs), or
  // a child graph (its nodes, cloned, in order).
  struct Node {
    std::uint64_t func = 0;
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    std::string args;
    std::function<void()> op;
    std::string what;  // the entry point that issued a captured op
    bool is_child = false;
    std::vector<Node> child;
  };
  // A stream capture in progress: the nodes recorded so far, in the order issued (a valid order to run them: each
  // stream's work in its order, a join after what it joins), and the streams forked into it whose last work no
  // stream of the capture has waited for yet (cuStreamEndCapture fails while there are any).
  struct Capture {
    std::uint64_t origin = 0;
    std::vector<Node> nodes;
    std::set<std::uint64_t> unjoined;
    std::map<std::uint64_t, std::uint64_t> last_seq;  // stream -> sequence number of its last captured work
  };
  struct Exec {
    std::map<std::uint64_t, Node> nodes;  // by node handle
    std::vector<std::uint64_t> order;
  };
  struct Program {
    std::string source, name, log, cubin, ptx;
  };
  struct Module {
    int device;
    std::vector<KernelSignature> kernels;
  };

  std::map<std::uint64_t, Alloc> allocs;  // device memory by address (malloc'd host memory)
  std::vector<std::uint64_t> used;        // bytes allocated per device
  std::map<std::uint64_t, std::uint64_t> pinned;
  std::vector<std::uint64_t> contexts;  // the primary context handle of each device
  std::vector<int> context_refs;
  std::map<std::uint64_t, Stream> streams;
  std::map<std::uint64_t, Event> events;
  std::map<std::uint64_t, Module> modules;
  std::map<std::uint64_t, Function> functions;
  std::map<std::uint64_t, std::vector<std::uint64_t>> graphs;  // -> node handles in order
  std::map<std::uint64_t, Node> nodes;
  std::map<std::uint64_t, Exec> execs;
  std::map<std::uint64_t, Capture> captures;
  std::map<std::uint64_t, Program> programs;
  std::map<std::string, std::pair<int, int>> failures;  // call -> (status, remaining)
  std::map<std::pair<int, int>, bool> peer_enabled;
  std::vector<Call> calls;
  std::vector<Launch> launches;

  ~State();
  std::uint64_t handle() { return next_handle += 0x10; }
  // Records the call; returns the injected failure for it, or 0.
  int enter(const char* name, std::vector<std::uint64_t> args, std::string text = {}, std::string data = {});
};

// The current fake's state and its lock; nullptr when no fake is installed.
std::shared_ptr<State> state();

// ---- shared by the fake's source files ----

template <class T>
std::uint64_t u(T* p) {
  return reinterpret_cast<std::uint64_t>(p);
}
template <class T>
T* h(std::uint64_t v) {
  return reinterpret_cast<T*>(v);
}

// Locks the fake for one entry point, records the call and looks up an injected failure for it.
struct Entry {
  std::shared_ptr<State> st;
  std::unique_lock<std::mutex> lock;
  int injected = 0;
  Entry(const char* name, std::vector<std::uint64_t> args, std::string text = {}, std::string data = {})
      : st(state()) {
    if (!st) return;
    lock = std::unique_lock<std::mutex>(st->mu);
    injected = st->enter(name, std::move(args), std::move(text), std::move(data));
  }
};
// The start of every fake driver entry point: `s` is the locked state afterwards.
#define FAKE_ENTER(...)                           \
  Entry entry(__VA_ARGS__);                       \
  if (!entry.st) return CUDA_ERROR_DEINITIALIZED; \
  if (entry.injected != 0) return entry.injected; \
  State& s = *entry.st

// The device of the calling thread's current context, or -1 (fake_driver.cpp).
int current_device(State& s);
int device_of_context(State& s, std::uint64_t ctx);
// The device of the allocation holding [p, p + n), or -1.
int device_memory(State& s, std::uint64_t p, std::uint64_t n);
// Runs the operations queued on `stream` up to sequence number `seq`; run_all runs every stream dry.
void run_until(State& s, std::uint64_t stream, std::uint64_t seq);
void run_all(State& s);
// Queues `op` on `stream`; returns its sequence number. On a stream being captured, `op` becomes a node of the
// capture instead (named after the entry point being called), run only when a graph made from it runs.
std::uint64_t enqueue(State& s, std::uint64_t stream, std::function<void()> op);
// CUDA_SUCCESS for a stream of the current context's device, else the error a driver gives.
int stream_check(State& s, CUstream stream);

// The entry points of fake_exec.cpp (modules, launches, streams, events, graphs), by base name.
void add_exec_entry_points(std::map<std::string, void*>& table);

}  // namespace tg::cuda::fake
