// The Objective-C runtime and the Metal framework, reached from C++ without Apple's headers: the libraries are
// dlopened at first use, five C entry points resolved by name, and every message sent through objc_msgSend cast to
// the method's exact prototype (send<>, the one place that casts it). Nothing here needs macOS to compile; on a
// machine without Metal, loading fails with a tg::RuntimeError that names the library and dlerror()'s text.
//
// The seam for tests: use_libraries() points the loader at any library exporting the same entry points (the fake
// Objective-C runtime of test/native), which then receives every message this runtime sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

namespace tg::metal {

// Objective-C's object, selector and class pointers, and Foundation's integer types (LP64).
using id = void*;
using SEL = void*;
using NSUInteger = unsigned long;
using NSInteger = long;

// MTLSize: passed by value (24 bytes, so on the stack under both the arm64 and the x86-64 conventions).
struct MTLSize {
  NSUInteger width, height, depth;
};

// Where the libraries are looked for. The Metal framework needs CoreGraphics loaded before
// MTLCreateSystemDefaultDevice finds a GPU; dispatch_data_create comes from libSystem. An empty path is skipped.
struct LibraryPaths {
  std::string objc = "/usr/lib/libobjc.A.dylib";
  std::string metal = "/System/Library/Frameworks/Metal.framework/Metal";
  std::string coregraphics = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics";
  std::string system = "/usr/lib/libSystem.B.dylib";
};

// The selectors this runtime sends, registered once at load (selectors are unique pointers).
struct Selectors {
  SEL alloc, init, retain, release, retainCount;
  SEL stringWithUTF8String, UTF8String, localizedDescription, domain, code;
  SEL name, newCommandQueueWithMaxCommandBufferCount, supportsFamily, maxThreadgroupMemoryLength;
  SEL newBufferWithLength_options, newBufferWithBytesNoCopy_length_options_deallocator, contents, length;
  SEL setFastMathEnabled, newLibraryWithSource_options_error, newLibraryWithData_error, newFunctionWithName;
  SEL newComputePipelineStateWithFunction_error, newComputePipelineStateWithDescriptor_options_reflection_error;
  SEL setComputeFunction, setSupportIndirectCommandBuffers;
  SEL maxTotalThreadsPerThreadgroup, threadExecutionWidth;
  SEL commandBuffer, computeCommandEncoder, setComputePipelineState, setBuffer_offset_atIndex, setBytes_length_atIndex;
  SEL dispatchThreadgroups_threadsPerThreadgroup, endEncoding, commit, waitUntilCompleted, status, error;
  SEL GPUStartTime, GPUEndTime;
  SEL setCommandTypes, setInheritBuffers, setInheritPipelineState, setMaxKernelBufferBindCount;
  SEL newIndirectCommandBufferWithDescriptor_maxCommandCount_options, indirectComputeCommandAtIndex;
  SEL setKernelBuffer_offset_atIndex, concurrentDispatchThreadgroups_threadsPerThreadgroup, setBarrier;
  SEL useResource_usage, executeCommandsInBuffer_withRange;
};

struct ObjcApi {
  std::string source;  // the libraries it came from, for messages
  id (*objc_getClass)(const char*) = nullptr;
  SEL (*sel_registerName)(const char*) = nullptr;
  void (*objc_msgSend)() = nullptr;  // untyped on purpose: only send<> calls it, cast to the method's prototype
  void* (*objc_autoreleasePoolPush)() = nullptr;
  void (*objc_autoreleasePoolPop)(void*) = nullptr;
  id (*MTLCreateSystemDefaultDevice)() = nullptr;
  id (*dispatch_data_create)(const void*, size_t, void*, void*) = nullptr;
  Selectors sel{};

  id cls(const char* name) const;  // objc_getClass, or tg::RuntimeError naming the missing class
};

// The API new devices use, loaded on the first call and kept (thread-safe). A failed load is remembered and
// re-thrown (the environment will not change) until use_libraries is called again.
std::shared_ptr<const ObjcApi> objc();

// Makes objc() load these libraries instead of Apple's (nullopt: Apple's again); devices already open keep theirs.
void use_libraries(const std::optional<LibraryPaths>& paths);

// Sends `sel` to `receiver` with `args`, objc_msgSend cast to R(id, SEL, Args...): the method's own prototype, which
// arm64 needs (its variadic convention differs) and which every call shape instantiates once. Returns of structs or
// long double would need objc_msgSend_stret/_fpret on x86-64 Macs; no message of this runtime has one.
template <class R, class... Args>
R send(const ObjcApi& api, id receiver, SEL sel, Args... args) {
  static_assert(!std::is_class_v<R> && !std::is_same_v<R, long double>, "needs objc_msgSend_stret or _fpret");
  using Fn = R (*)(id, SEL, Args...);
  return reinterpret_cast<Fn>(api.objc_msgSend)(receiver, sel, args...);
}

// An autorelease pool for the life of the scope: the per-launch objects Metal hands back autoreleased (command
// buffers, encoders, strings, errors) are released at its end, so a long process does not accumulate them.
class AutoreleasePool {
 public:
  explicit AutoreleasePool(const ObjcApi& api) : api_(api), token_(api.objc_autoreleasePoolPush()) {}
  ~AutoreleasePool() { api_.objc_autoreleasePoolPop(token_); }
  AutoreleasePool(const AutoreleasePool&) = delete;
  AutoreleasePool& operator=(const AutoreleasePool&) = delete;

 private:
  const ObjcApi& api_;
  void* token_;
};

// An owned (+1) object, released once when the owner dies.
class Owned {
 public:
  Owned() = default;
  Owned(std::shared_ptr<const ObjcApi> api, id obj) : api_(std::move(api)), obj_(obj) {}
  ~Owned() { reset(); }
  Owned(Owned&& o) noexcept : api_(std::move(o.api_)), obj_(o.obj_) { o.obj_ = nullptr; }
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = std::move(o.api_);
      obj_ = o.obj_;
      o.obj_ = nullptr;
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  id get() const noexcept { return obj_; }
  explicit operator bool() const noexcept { return obj_ != nullptr; }
  void reset() noexcept;

 private:
  std::shared_ptr<const ObjcApi> api_;
  id obj_ = nullptr;
};

// An autoreleased NSString of `text` (needs a pool).
id ns_string(const ObjcApi& api, const std::string& text);
// The UTF-8 text of an NSString ("" for nil).
std::string to_string(const ObjcApi& api, id ns_string);

// What an NSError says: its domain's name for the code ("MTLLibraryErrorCompileFailure", or "domain code N") and
// its localized description.
struct ErrorInfo {
  std::string name, description;
};
ErrorInfo error_info(const ObjcApi& api, id ns_error);

// Throws tg::RuntimeError (tg::OutOfMemory for an out-of-memory code) for an NSError from `call` on `device`.
[[noreturn]] void throw_ns_error(const ObjcApi& api, const std::string& device, const char* call, id ns_error,
                                 const std::string& what);

}  // namespace tg::metal
