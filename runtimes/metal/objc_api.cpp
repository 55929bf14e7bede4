#include "objc_api.h"

#include <dlfcn.h>

#include <exception>
#include <mutex>
#include <utility>

#include "errors.h"

namespace tg::metal {
namespace {

constexpr char kDevice[] = "METAL";

void* open_library(const std::string& path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    throw RuntimeError(kDevice, "dlopen", e ? e : "unknown dlopen error",
                       "Metal is not available: could not load " + path + " (Metal needs macOS on a Mac)");
  }
  return lib;  // NOTE: never dlclosed: the Objective-C runtime cannot be unloaded
}

template <class Fn>
void resolve(void* const* libs, size_t nlibs, const char* name, Fn* slot) {
  for (size_t i = 0; i < nlibs; ++i) {
    if (libs[i] == nullptr) continue;
    if (void* p = dlsym(libs[i], name)) {
      *slot = reinterpret_cast<Fn>(p);
      return;
    }
  }
  throw RuntimeError(kDevice, "dlsym", std::string(name) + " not found",
                     std::string("the Objective-C runtime or Metal framework loaded has no ") + name);
}

std::shared_ptr<const ObjcApi> load(const LibraryPaths& paths) {
  auto api = std::make_shared<ObjcApi>();
  api->source = paths.objc + (paths.metal == paths.objc ? "" : ", " + paths.metal);
  void* libs[4] = {open_library(paths.objc), open_library(paths.metal), nullptr, nullptr};
  if (!paths.coregraphics.empty() && paths.coregraphics != paths.metal)
    libs[2] = open_library(paths.coregraphics);
  if (!paths.system.empty() && paths.system != paths.objc) libs[3] = open_library(paths.system);
  resolve(libs, 4, "objc_getClass", &api->objc_getClass);
  resolve(libs, 4, "sel_registerName", &api->sel_registerName);
  resolve(libs, 4, "objc_msgSend", &api->objc_msgSend);
  resolve(libs, 4, "objc_autoreleasePoolPush", &api->objc_autoreleasePoolPush);
  resolve(libs, 4, "objc_autoreleasePoolPop", &api->objc_autoreleasePoolPop);
  resolve(libs, 4, "MTLCreateSystemDefaultDevice", &api->MTLCreateSystemDefaultDevice);
  resolve(libs, 4, "dispatch_data_create", &api->dispatch_data_create);

  Selectors& s = api->sel;
  auto reg = [&](const char* name) { return api->sel_registerName(name); };
  s.alloc = reg("alloc");
  s.init = reg("init");
  s.retain = reg("retain");
  s.release = reg("release");
  s.retainCount = reg("retainCount");
  s.stringWithUTF8String = reg("stringWithUTF8String:");
  s.UTF8String = reg("UTF8String");
  s.localizedDescription = reg("localizedDescription");
  s.domain = reg("domain");
  s.code = reg("code");
  s.name = reg("name");
  s.newCommandQueueWithMaxCommandBufferCount = reg("newCommandQueueWithMaxCommandBufferCount:");
  s.supportsFamily = reg("supportsFamily:");
  s.maxThreadgroupMemoryLength = reg("maxThreadgroupMemoryLength");
  s.newBufferWithLength_options = reg("newBufferWithLength:options:");
  s.newBufferWithBytesNoCopy_length_options_deallocator = reg("newBufferWithBytesNoCopy:length:options:deallocator:");
  s.contents = reg("contents");
  s.length = reg("length");
  s.setFastMathEnabled = reg("setFastMathEnabled:");
  s.newLibraryWithSource_options_error = reg("newLibraryWithSource:options:error:");
  s.newLibraryWithData_error = reg("newLibraryWithData:error:");
  s.newFunctionWithName = reg("newFunctionWithName:");
  s.newComputePipelineStateWithFunction_error = reg("newComputePipelineStateWithFunction:error:");
  s.newComputePipelineStateWithDescriptor_options_reflection_error =
      reg("newComputePipelineStateWithDescriptor:options:reflection:error:");
  s.setComputeFunction = reg("setComputeFunction:");
  s.setSupportIndirectCommandBuffers = reg("setSupportIndirectCommandBuffers:");
  s.maxTotalThreadsPerThreadgroup = reg("maxTotalThreadsPerThreadgroup");
  s.threadExecutionWidth = reg("threadExecutionWidth");
  s.commandBuffer = reg("commandBuffer");
  s.computeCommandEncoder = reg("computeCommandEncoder");
  s.setComputePipelineState = reg("setComputePipelineState:");
  s.setBuffer_offset_atIndex = reg("setBuffer:offset:atIndex:");
  s.setBytes_length_atIndex = reg("setBytes:length:atIndex:");
  s.dispatchThreadgroups_threadsPerThreadgroup = reg("dispatchThreadgroups:threadsPerThreadgroup:");
  s.endEncoding = reg("endEncoding");
  s.commit = reg("commit");
  s.waitUntilCompleted = reg("waitUntilCompleted");
  s.status = reg("status");
  s.error = reg("error");
  s.GPUStartTime = reg("GPUStartTime");
  s.GPUEndTime = reg("GPUEndTime");
  s.setCommandTypes = reg("setCommandTypes:");
  s.setInheritBuffers = reg("setInheritBuffers:");
  s.setInheritPipelineState = reg("setInheritPipelineState:");
  s.setMaxKernelBufferBindCount = reg("setMaxKernelBufferBindCount:");
  s.newIndirectCommandBufferWithDescriptor_maxCommandCount_options =
      reg("newIndirectCommandBufferWithDescriptor:maxCommandCount:options:");
  s.indirectComputeCommandAtIndex = reg("indirectComputeCommandAtIndex:");
  s.setKernelBuffer_offset_atIndex = reg("setKernelBuffer:offset:atIndex:");
  s.concurrentDispatchThreadgroups_threadsPerThreadgroup = reg("concurrentDispatchThreadgroups:threadsPerThreadgroup:");
  s.setBarrier = reg("setBarrier");
  s.useResource_usage = reg("useResource:usage:");
  s.executeCommandsInBuffer_withRange = reg("executeCommandsInBuffer:withRange:");
  return api;
}

std::mutex g_mutex;
LibraryPaths g_paths;
std::shared_ptr<const ObjcApi> g_api;
std::exception_ptr g_error;

// The names of the codes of Metal's error domains (MTLLibraryError, MTLCommandBufferError), as Apple's headers
// spell them.
std::string code_name(const std::string& domain, NSInteger code) {
  static const char* const kLibrary[] = {nullptr, "Unsupported", "Internal", "CompileFailure", "CompileWarning",
                                         "FunctionNotFound", "FileNotFound"};
  static const char* const kCommandBuffer[] = {"None", "Internal", "Timeout", "PageFault", "AccessRevoked", nullptr,
                                               nullptr, "NotPermitted", "OutOfMemory", "InvalidResource",
                                               "Memoryless", "DeviceRemoved", "StackOverflow"};
  const char* name = nullptr;
  if (domain == "MTLLibraryErrorDomain" && code >= 0 && code < 7) name = kLibrary[code];
  if (domain == "MTLCommandBufferErrorDomain" && code >= 0 && code < 13) name = kCommandBuffer[code];
  if (name != nullptr) {
    std::string prefix = domain.substr(0, domain.size() - 6);  // "MTLLibraryErrorDomain" -> "MTLLibraryError"
    return prefix + name;
  }
  return (domain.empty() ? std::string("NSError") : domain) + " code " + std::to_string(code);
}

}  // namespace

id ObjcApi::cls(const char* name) const {
  id c = objc_getClass(name);
  if (c == nullptr)
    throw RuntimeError(kDevice, "objc_getClass", std::string(name) + " not found",
                       std::string("the Objective-C runtime (") + source + ") has no class " + name);
  return c;
}

std::shared_ptr<const ObjcApi> objc() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_api) return g_api;
  if (g_error) std::rethrow_exception(g_error);
  try {
    g_api = load(g_paths);
  } catch (...) {
    g_error = std::current_exception();
    throw;
  }
  return g_api;
}

void use_libraries(const std::optional<LibraryPaths>& paths) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_paths = paths ? *paths : LibraryPaths{};
  g_api.reset();
  g_error = nullptr;
}

void Owned::reset() noexcept {
  if (obj_ != nullptr) send<void>(*api_, obj_, api_->sel.release);
  obj_ = nullptr;
}

id ns_string(const ObjcApi& api, const std::string& text) {
  return send<id>(api, api.cls("NSString"), api.sel.stringWithUTF8String, text.c_str());
}

std::string to_string(const ObjcApi& api, id s) {
  if (s == nullptr) return "";
  const char* text = send<const char*>(api, s, api.sel.UTF8String);
  return text ? text : "";
}

ErrorInfo error_info(const ObjcApi& api, id err) {
  if (err == nullptr) return {"unknown error", "no NSError was given"};
  std::string domain = to_string(api, send<id>(api, err, api.sel.domain));
  NSInteger code = send<NSInteger>(api, err, api.sel.code);
  return {code_name(domain, code), to_string(api, send<id>(api, err, api.sel.localizedDescription))};
}

void throw_ns_error(const ObjcApi& api, const std::string& device, const char* call, id err,
                    const std::string& what) {
  ErrorInfo info = error_info(api, err);
  std::string message = what + (info.description.empty() ? "" : ": " + info.description);
  if (info.name == "MTLCommandBufferErrorOutOfMemory")
    throw OutOfMemory(device, call, std::move(info.name), 0, std::move(message));
  throw RuntimeError(device, call, std::move(info.name), std::move(message));
}

}  // namespace tg::metal
