#include "nvrtc_compiler.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>
#include <utility>

#include "errors.h"

namespace tg::cuda {
namespace {

constexpr char kDevice[] = "CUDA";

std::mutex g_mutex;
std::shared_ptr<const NvrtcApi> g_loaded;

std::string result_name(const NvrtcApi& api, nvrtcResult r) {
  const char* s = api.nvrtcGetErrorString != nullptr ? api.nvrtcGetErrorString(r) : nullptr;
  return s != nullptr ? s : "NVRTC error " + std::to_string(r);
}

void check(const NvrtcApi& api, const char* call, nvrtcResult r, const std::string& what) {
  if (r != NVRTC_SUCCESS) throw RuntimeError(kDevice, call, result_name(api, r), what);
}

// Destroys the NVRTC program however compilation ends.
struct ProgramGuard {
  const NvrtcApi& api;
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog != nullptr) api.nvrtcDestroyProgram(&prog);
  }
};

std::shared_ptr<const NvrtcApi> open_nvrtc(const std::string& path, std::string* error) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    *error = e ? e : "unknown dlopen error";
    return nullptr;
  }
  auto api = std::make_shared<NvrtcApi>();
  api->source = path;
  bool ok = true;
  auto sym = [&](const char* name, auto* slot) {
    void* p = dlsym(lib, name);
    if (p == nullptr) {
      *error = path + " has no " + name;
      ok = false;
    }
    *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(p);
  };
  sym("nvrtcGetErrorString", &api->nvrtcGetErrorString);
  sym("nvrtcVersion", &api->nvrtcVersion);
  sym("nvrtcGetNumSupportedArchs", &api->nvrtcGetNumSupportedArchs);
  sym("nvrtcGetSupportedArchs", &api->nvrtcGetSupportedArchs);
  sym("nvrtcCreateProgram", &api->nvrtcCreateProgram);
  sym("nvrtcDestroyProgram", &api->nvrtcDestroyProgram);
  sym("nvrtcCompileProgram", &api->nvrtcCompileProgram);
  sym("nvrtcGetProgramLogSize", &api->nvrtcGetProgramLogSize);
  sym("nvrtcGetProgramLog", &api->nvrtcGetProgramLog);
  sym("nvrtcGetCUBINSize", &api->nvrtcGetCUBINSize);
  sym("nvrtcGetCUBIN", &api->nvrtcGetCUBIN);
  sym("nvrtcGetPTXSize", &api->nvrtcGetPTXSize);
  sym("nvrtcGetPTX", &api->nvrtcGetPTX);
  if (!ok) {
    dlclose(lib);
    return nullptr;
  }
  return api;  // NOTE: never dlclosed once in use, like the driver
}

}  // namespace

std::shared_ptr<const NvrtcApi> load_nvrtc(const std::vector<std::string>& candidates) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_loaded;
  std::string tried, error;
  for (const std::string& path : candidates) {
    if (auto api = open_nvrtc(path, &error)) {
      g_loaded = std::move(api);
      return g_loaded;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  throw RuntimeError(kDevice, "dlopen", error.empty() ? "no candidates" : error,
                     "could not load NVRTC (tried " + (tried.empty() ? std::string("nothing") : tried) +
                         "): install the CUDA toolkit or the nvidia-cuda-nvrtc wheel, or set NVRTC_PATH");
}

std::shared_ptr<const NvrtcApi> nvrtc() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_loaded;
  throw RuntimeError(kDevice, "nvrtc", "not loaded", "NVRTC has not been loaded (call nvrtc_load first)");
}

void unload_nvrtc() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_loaded.reset();
}

std::pair<int, int> nvrtc_version(const NvrtcApi& api) {
  int major = 0, minor = 0;
  check(api, "nvrtcVersion", api.nvrtcVersion(&major, &minor), "reading NVRTC's version");
  return {major, minor};
}

std::vector<int> nvrtc_supported_archs(const NvrtcApi& api) {
  int n = 0;
  check(api, "nvrtcGetNumSupportedArchs", api.nvrtcGetNumSupportedArchs(&n), "counting NVRTC's architectures");
  std::vector<int> archs(static_cast<size_t>(n > 0 ? n : 0));
  if (n > 0) check(api, "nvrtcGetSupportedArchs", api.nvrtcGetSupportedArchs(archs.data()), "listing architectures");
  return archs;
}

CompileOutput nvrtc_compile(const NvrtcApi& api, const std::string& source, const std::string& name,
                            const std::vector<std::string>& options, bool ptx) {
  ProgramGuard guard{api};
  const std::string file = name + ".cu";
  check(api, "nvrtcCreateProgram",
        api.nvrtcCreateProgram(&guard.prog, source.c_str(), file.c_str(), 0, nullptr, nullptr),
        "creating an NVRTC program for " + file);
  std::vector<const char*> opts;
  opts.reserve(options.size());
  for (const std::string& o : options) opts.push_back(o.c_str());
  nvrtcResult compiled = api.nvrtcCompileProgram(guard.prog, static_cast<int>(opts.size()), opts.data());

  CompileOutput out;
  size_t log_size = 0;
  if (api.nvrtcGetProgramLogSize(guard.prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    if (api.nvrtcGetProgramLog(guard.prog, out.log.data()) != NVRTC_SUCCESS) out.log.clear();
    while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  }
  if (compiled != NVRTC_SUCCESS)
    throw RuntimeError(kDevice, "nvrtcCompileProgram", result_name(api, compiled),
                       "NVRTC could not compile " + file + ":\n" + (out.log.empty() ? "(no log)" : out.log));

  size_t size = 0;
  if (ptx) {
    check(api, "nvrtcGetPTXSize", api.nvrtcGetPTXSize(guard.prog, &size), "reading the PTX size");
    out.binary.resize(size);
    check(api, "nvrtcGetPTX", api.nvrtcGetPTX(guard.prog, out.binary.data()), "reading the PTX");
    while (!out.binary.empty() && out.binary.back() == '\0') out.binary.pop_back();
  } else {
    check(api, "nvrtcGetCUBINSize", api.nvrtcGetCUBINSize(guard.prog, &size), "reading the CUBIN size");
    // A virtual architecture (compute_XX) yields PTX only: an empty CUBIN would fail much later, at load
    if (size == 0)
      throw RuntimeError(kDevice, "nvrtcGetCUBINSize", "empty CUBIN",
                         "NVRTC made no CUBIN for " + file + ": pass a real --gpu-architecture=sm_XX");
    out.binary.resize(size);
    check(api, "nvrtcGetCUBIN", api.nvrtcGetCUBIN(guard.prog, out.binary.data()), "reading the CUBIN");
  }
  return out;
}

}  // namespace tg::cuda
