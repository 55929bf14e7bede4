// What tests ask of the fake driver: failure injection and the records and memory it keeps.
#include <cstring>
#include <stdexcept>

#include "fake_state.h"

namespace tg::cuda::fake {
namespace {

struct Locked {
  std::shared_ptr<State> st;
  std::unique_lock<std::mutex> lock;
  Locked() : st(state()) {
    if (!st) throw std::invalid_argument("no fake CUDA driver is installed");
    lock = std::unique_lock<std::mutex>(st->mu);
  }
};

// The live allocation holding [p, p + n) or an exception.
void check_range(State& s, std::uint64_t p, size_t n) {
  auto it = s.allocs.upper_bound(p);
  if (it == s.allocs.begin() || p < std::prev(it)->first || p + n > std::prev(it)->first + std::prev(it)->second.size)
    throw std::invalid_argument("fake driver: [" + std::to_string(p) + ", +" + std::to_string(n) +
                                ") is not inside a live device allocation");
}

}  // namespace

int status_from_name(const std::string& name) {
  const std::pair<const char*, int> known[] = {
      {"CUDA_ERROR_INVALID_VALUE", CUDA_ERROR_INVALID_VALUE},
      {"CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY},
      {"CUDA_ERROR_NOT_INITIALIZED", CUDA_ERROR_NOT_INITIALIZED},
      {"CUDA_ERROR_NO_DEVICE", CUDA_ERROR_NO_DEVICE},
      {"CUDA_ERROR_INVALID_DEVICE", CUDA_ERROR_INVALID_DEVICE},
      {"CUDA_ERROR_INVALID_IMAGE", CUDA_ERROR_INVALID_IMAGE},
      {"CUDA_ERROR_INVALID_CONTEXT", CUDA_ERROR_INVALID_CONTEXT},
      {"CUDA_ERROR_INVALID_HANDLE", CUDA_ERROR_INVALID_HANDLE},
      {"CUDA_ERROR_NOT_FOUND", CUDA_ERROR_NOT_FOUND},
      {"CUDA_ERROR_ILLEGAL_ADDRESS", CUDA_ERROR_ILLEGAL_ADDRESS},
      {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES},
      {"CUDA_ERROR_UNKNOWN", CUDA_ERROR_UNKNOWN},
      {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", CUDA_ERROR_STREAM_CAPTURE_INVALIDATED},
      {"NVRTC_ERROR_OUT_OF_MEMORY", 1},
      {"NVRTC_ERROR_COMPILATION", NVRTC_ERROR_COMPILATION},
  };
  for (const auto& [n, code] : known)
    if (name == n) return code;
  return -1;
}

void fail_next(const std::string& call, int status, int count) {
  Locked l;
  l.st->failures[call] = {status, count};
}

std::vector<Call> calls() {
  Locked l;
  return l.st->calls;
}

std::vector<Launch> launches() {
  Locked l;
  return l.st->launches;
}

void clear_records() {
  Locked l;
  l.st->calls.clear();
  l.st->launches.clear();
}

std::string read(std::uint64_t ptr, size_t nbytes) {
  Locked l;
  check_range(*l.st, ptr, nbytes);
  return std::string(reinterpret_cast<const char*>(ptr), nbytes);
}

void write(std::uint64_t ptr, const std::string& bytes) {
  Locked l;
  check_range(*l.st, ptr, bytes.size());
  std::memcpy(reinterpret_cast<void*>(ptr), bytes.data(), bytes.size());
}

size_t pending_ops() {
  Locked l;
  size_t n = 0;
  for (const auto& [handle, stream] : l.st->streams) n += stream.ops.size();
  return n;
}

std::pair<size_t, std::uint64_t> device_allocations() {
  Locked l;
  std::uint64_t bytes = 0;
  for (const auto& [p, a] : l.st->allocs) bytes += a.size;
  return {l.st->allocs.size(), bytes};
}

size_t pinned_allocations() {
  Locked l;
  return l.st->pinned.size();
}

}  // namespace tg::cuda::fake
