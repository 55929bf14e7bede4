// The tinygrad runtime contract: what every device backend (CPU, CUDA, AMD, Metal, ...) implements in C++.
//
// Python sees a backend only through its pybind11 module; every module binds the objects that implement the
// interfaces below through one template (csrc/pybind_runtime.h), so the Python layer can treat every device alike.
// This header is plain C++17 with no Python and no driver headers, so a backend can be written and unit-tested
// without either.
//
// Rules that apply to every slot unless its comment says otherwise:
//  * Errors: failures of the driver or OS throw tg::RuntimeError (tg::OutOfMemory for allocations), naming the
//    device, the failing call and the driver's own error name; caller mistakes throw tg::UsageError. Nothing returns
//    error codes. Destructors and free-like slots never throw.
//  * Threads: slots may be called without the Python GIL held, from any thread. tinygrad serialises calls per
//    device, so an implementation needs no locking of its own unless a comment asks for it.
//  * Optional slots are marked "(optional)". Each has a default that reports "unsupported" through its return value
//    (nullptr, false, std::nullopt) and never throws; callers must check and fall back (e.g. copy through the host).
//  * Sizes are in bytes. Pointers to host memory are plain `void*`; device memory is a DevicePtr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Bumped whenever the contract changes in a way the Python layer can observe: a documented behaviour of a slot, or
// the Python surface that csrc/pybind_runtime.h binds over it (removing or changing a method; adding one is
// compatible). Each backend module reports the version it was compiled against (abi_version()); the Python layer
// refuses a mismatch. Every backend is compiled in this tree against this header, so a C++-only change (a slot
// nothing binds) needs every backend updated, not a new version.
#define TG_RUNTIME_ABI_VERSION 1

namespace tg {

inline constexpr int kRuntimeAbiVersion = TG_RUNTIME_ABI_VERSION;

// A device allocation as the device sees it: a host address for CPU, a CUdeviceptr for CUDA, a GPU virtual address
// for AMD, an id<MTLBuffer> for Metal. 0 is never a valid allocation. Only the allocator that produced it (or a
// program of the same device) may interpret it.
using DevicePtr = std::uintptr_t;

// Hints for an allocation. Backends ignore the ones that mean nothing to them.
struct AllocOptions {
  bool host_visible = false;  // must be mappable by the CPU (as_host must then succeed)
  bool uncached = false;      // write-combined / uncached host mapping
};

// ----------------------------------------------------------------------------------------------------------------
// Allocator: device memory.
// ----------------------------------------------------------------------------------------------------------------
class Allocator {
 public:
  virtual ~Allocator() = default;

  // Name of the device this allocator serves ("CPU", "CUDA:0"). Used in error messages.
  virtual const std::string& device() const noexcept = 0;

  // Allocates `nbytes` (0 is valid and returns a unique, non-zero DevicePtr). The caller owns the result and must
  // give it back to free() with the same nbytes and options. Throws tg::OutOfMemory (naming the size) on failure.
  virtual DevicePtr alloc(size_t nbytes, const AllocOptions& options) = 0;

  // Releases an allocation from alloc(). Never throws. The memory must not be in use by queued work; tinygrad
  // synchronises before freeing.
  virtual void free(DevicePtr ptr, size_t nbytes, const AllocOptions& options) noexcept = 0;

  // Copies `nbytes` from host memory into the allocation. Blocks until `src` may be reused by the caller.
  // The caller guarantees nbytes fits both sides; backends do not re-check.
  virtual void copyin(DevicePtr dst, const void* src, size_t nbytes) = 0;

  // Copies `nbytes` from the allocation to host memory. Blocks until the data has arrived (waits for queued work
  // that writes `src`).
  virtual void copyout(void* dst, DevicePtr src, size_t nbytes) = 0;

  // (optional) A host pointer aliasing the allocation, valid until free(); nullptr if the memory is not
  // host-visible. Lets tinygrad read results zero-copy (the module's buffer class exports it as a Python buffer).
  virtual void* as_host(DevicePtr /*ptr*/) noexcept { return nullptr; }

  // (optional) Device-to-device copy into `dst` (this allocator) from `src`, owned by `src_allocator` (maybe another
  // device). Returns false, having done nothing, when there is no direct path; the caller then copies through the
  // host. Throws only when a direct copy was attempted and failed. Bound as the module's transfer().
  virtual bool transfer(DevicePtr /*dst*/, Allocator& /*src_allocator*/, DevicePtr /*src*/, size_t /*nbytes*/) {
    return false;
  }
};

// ----------------------------------------------------------------------------------------------------------------
// Program: one compiled kernel, ready to launch.
// ----------------------------------------------------------------------------------------------------------------

// One kernel argument, in the kernel's parameter order. The kind tells backends that pack arguments by type (CUDA
// packs a Pointer as 8 bytes and an Int as a 4-byte int) how to lay it out; the CPU passes both as one
// register-sized word.
struct KernelArg {
  enum class Kind : std::uint8_t { Pointer, Int };

  Kind kind = Kind::Int;
  std::uint64_t bits = 0;  // a DevicePtr for Pointer; the two's-complement int64 for Int

  static constexpr KernelArg pointer(DevicePtr p) { return {Kind::Pointer, static_cast<std::uint64_t>(p)}; }
  static constexpr KernelArg integer(std::int64_t v) { return {Kind::Int, static_cast<std::uint64_t>(v)}; }
  DevicePtr as_pointer() const { return static_cast<DevicePtr>(bits); }
  std::int64_t as_int() const { return static_cast<std::int64_t>(bits); }
};

// Grid and block sizes for devices that have them. Backends without a grid (CPU) ignore them: their kernels loop.
struct LaunchDims {
  std::uint32_t global[3] = {1, 1, 1};  // number of workgroups in each dimension
  std::uint32_t local[3] = {1, 1, 1};   // threads per workgroup in each dimension
};

class Program {
 public:
  virtual ~Program() = default;

  // The kernel's entry point name and its device, for error messages and profiling.
  virtual const std::string& name() const noexcept = 0;
  virtual const std::string& device() const noexcept = 0;

  // Launches the kernel with `nargs` arguments. `dims` may be nullptr (backend default; CPU ignores it).
  // Pointer arguments must stay valid until the launch has completed; the program does not take ownership.
  // May return before the kernel finishes on devices with a Queue; on the CPU the kernel has run when it returns.
  // The number and kinds of arguments must match the kernel; backends check only what they can (e.g. the CPU
  // rejects more arguments than it can pass, naming the count), so a mismatch is undefined behaviour.
  virtual void launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) = 0;

  // (optional) Like launch(), then waits for the kernel and returns the device's own measure of its run time in
  // seconds (GPU events), for DEBUG timings and the BEAM search. std::nullopt, having launched nothing, if the
  // device cannot time kernels: the caller then times launch() by the wall clock (on the CPU that is the kernel).
  virtual std::optional<double> launch_timed(const KernelArg* /*args*/, size_t /*nargs*/,
                                             const LaunchDims* /*dims*/) {
    return std::nullopt;
  }
};

// ----------------------------------------------------------------------------------------------------------------
// Queue (optional): the order of work on devices that run it asynchronously.
// ----------------------------------------------------------------------------------------------------------------
class Queue {
 public:
  virtual ~Queue() = default;

  // Blocks until everything submitted to this queue (launches, copies) has completed; rethrows asynchronous
  // failures as tg::RuntimeError. Bound as Device.synchronize().
  virtual void synchronize() = 0;
};

// ----------------------------------------------------------------------------------------------------------------
// Graph (optional): a captured list of launches replayed in one call (the JIT's fast path).
// ----------------------------------------------------------------------------------------------------------------
class Buffer;  // csrc/buffer.h

// One argument of a captured launch. Either a fixed value, or a Buffer that is resolved to its address at every
// replay (so freeing it between replays raises instead of running on freed memory).
struct BoundArg {
  KernelArg value;                          // used when `buffer` is null
  std::shared_ptr<Buffer> buffer;           // if set, passed as KernelArg::pointer(buffer->ptr()) at each replay
  std::shared_ptr<const void> keep_alive;   // opaque owner of the memory `value` points into (e.g. a held Python
                                            // buffer view); released when the argument is replaced or the graph dies
  bool is_pointer() const { return buffer != nullptr || value.kind == KernelArg::Kind::Pointer; }
};

// Implementations keep their launches in a tg::LaunchList (csrc/graph_launches.h), which provides the checks of
// set_arg, the busy guard that makes the graph non-reentrant, and the pinning of bound Buffers for run().
class Graph {
 public:
  virtual ~Graph() = default;

  // Appends a launch; returns its index (0, 1, ...). The graph shares ownership of the program and the buffers.
  // Throws tg::UsageError if the program belongs to another device, tg::RuntimeError if the launch cannot be
  // captured (e.g. too many arguments).
  virtual size_t add(std::shared_ptr<Program> program, std::vector<BoundArg> args, const LaunchDims* dims) = 0;

  // Replaces argument `arg` of launch `launch` for the following replays. Throws tg::UsageError if either index is
  // out of range, or if the kind changes (pointer <-> integer): backends that pack arguments by type captured the
  // layout at add().
  virtual void set_arg(size_t launch, size_t arg, BoundArg value) = 0;

  // (optional) Replaces the launch dimensions of one launch. Returns false if the graph cannot change them (then
  // Python's set_dims raises ValueError). A backend whose kernels take no dimensions (CPU) checks the index and
  // returns true.
  virtual bool set_dims(size_t /*launch*/, const LaunchDims& /*dims*/) { return false; }

  // Runs every launch in order, each seeing the results of the previous one. Throws tg::UsageError if a bound
  // Buffer was freed (before anything runs). Buffers cannot be freed while it runs (free() raises BufferInUse).
  // Not reentrant: add/set_arg/run while a run is in progress throw tg::UsageError.
  virtual void run() = 0;

  // Number of launches added.
  virtual size_t size() const noexcept = 0;
};

// ----------------------------------------------------------------------------------------------------------------
// Device: the entry point of a backend, tying the pieces together.
// ----------------------------------------------------------------------------------------------------------------
class Device {
 public:
  virtual ~Device() = default;

  virtual const std::string& name() const noexcept = 0;

  // The device's allocator; lives as long as any holder of the shared_ptr.
  virtual std::shared_ptr<Allocator> allocator() = 0;

  // Loads a compiled image (a shared object for CPU, a cubin for CUDA, a HSA code object for AMD, a metallib for
  // Metal) and finds entry point `name` in it. Throws tg::RuntimeError with the loader's message if the image is
  // invalid or the name is missing. The program keeps what it needs of the image; the caller may drop it.
  virtual std::shared_ptr<Program> load_program(const std::string& name, std::string_view image) = 0;

  // (optional) The queue launches and copies go to; nullptr means every operation completes before returning.
  // Device.synchronize() waits for it.
  virtual Queue* queue() noexcept { return nullptr; }

  // (optional) A new, empty graph; nullptr if the device cannot capture launches (the JIT then replays one launch
  // at a time).
  virtual std::unique_ptr<Graph> create_graph() { return nullptr; }
};

}  // namespace tg
