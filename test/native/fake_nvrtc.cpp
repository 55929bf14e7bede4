// The fake NVRTC: "compiles" CUDA source into a fake CUBIN (the magic line followed by the source), which the fake
// driver loads by parsing the kernels' signatures back out of it. A source containing `#error` fails to compile
// with an NVRTC-style log; an option list without --gpu-architecture is rejected as NVRTC would reject nonsense.
#include <cctype>
#include <cstring>

#include "fake_state.h"

namespace tg::cuda::fake {
namespace {

constexpr nvrtcResult kInvalidInput = 3;
constexpr nvrtcResult kInvalidProgram = 4;
constexpr nvrtcResult kInvalidOption = 5;

const char* const kResultNames[] = {"NVRTC_SUCCESS",
                                    "NVRTC_ERROR_OUT_OF_MEMORY",
                                    "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
                                    "NVRTC_ERROR_INVALID_INPUT",
                                    "NVRTC_ERROR_INVALID_PROGRAM",
                                    "NVRTC_ERROR_INVALID_OPTION",
                                    "NVRTC_ERROR_COMPILATION",
                                    "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE"};

#define FAKE_NVRTC_ENTER(...)                   \
  Entry entry(__VA_ARGS__);                     \
  if (!entry.st) return kInvalidProgram;        \
  if (entry.injected != 0) return entry.injected; \
  State& s = *entry.st

State::Program* find(State& s, nvrtcProgram prog) {
  auto it = s.programs.find(u(prog));
  return it == s.programs.end() ? nullptr : &it->second;
}

const char* n_error_string(nvrtcResult r) {
  return r >= 0 && r < static_cast<int>(std::size(kResultNames)) ? kResultNames[r] : "NVRTC_ERROR unknown";
}
nvrtcResult n_version(int* major, int* minor) {
  FAKE_NVRTC_ENTER("nvrtcVersion", {});
  (void)s;
  *major = 13;
  *minor = 0;
  return NVRTC_SUCCESS;
}
const int kArchs[] = {75, 80, 86, 87, 89, 90, 100, 120};
nvrtcResult n_num_archs(int* n) {
  FAKE_NVRTC_ENTER("nvrtcGetNumSupportedArchs", {});
  (void)s;
  *n = static_cast<int>(std::size(kArchs));
  return NVRTC_SUCCESS;
}
nvrtcResult n_archs(int* out) {
  FAKE_NVRTC_ENTER("nvrtcGetSupportedArchs", {});
  (void)s;
  std::memcpy(out, kArchs, sizeof(kArchs));
  return NVRTC_SUCCESS;
}
nvrtcResult n_create(nvrtcProgram* prog, const char* src, const char* name, int nheaders, const char* const*,
                     const char* const*) {
  FAKE_NVRTC_ENTER("nvrtcCreateProgram", {static_cast<std::uint64_t>(nheaders)}, name ? name : "");
  if (src == nullptr) return kInvalidInput;
  std::uint64_t handle = s.handle();
  s.programs[handle] = State::Program{src, name ? name : "default_program", {}, {}, {}};
  *prog = reinterpret_cast<nvrtcProgram>(handle);
  return NVRTC_SUCCESS;
}
nvrtcResult n_destroy(nvrtcProgram* prog) {
  FAKE_NVRTC_ENTER("nvrtcDestroyProgram", {u(*prog)});
  if (s.programs.erase(u(*prog)) == 0) return kInvalidProgram;
  *prog = nullptr;
  return NVRTC_SUCCESS;
}
nvrtcResult n_compile(nvrtcProgram prog, int nopts, const char* const* opts) {
  std::string joined;
  for (int i = 0; i < nopts; ++i) joined += (i ? " " : "") + std::string(opts[i]);
  FAKE_NVRTC_ENTER("nvrtcCompileProgram", {u(prog)}, joined);
  State::Program* p = find(s, prog);
  if (p == nullptr) return kInvalidProgram;
  std::string arch;
  for (int i = 0; i < nopts; ++i)
    if (std::strncmp(opts[i], "--gpu-architecture=", 19) == 0) arch = opts[i] + 19;
  if (arch.empty()) return kInvalidOption;
  size_t at = p->source.find("#error");
  if (at != std::string::npos) {
    int line = 1;
    for (size_t i = 0; i < at; ++i) line += p->source[i] == '\n';
    size_t eol = p->source.find('\n', at);
    p->log = p->name + "(" + std::to_string(line) + "): error: " + p->source.substr(at + 7, eol - at - 7) +
             "\n\n1 error detected in the compilation of \"" + p->name + "\".\n";
    return NVRTC_ERROR_COMPILATION;
  }
  p->ptx = "// fake PTX for " + arch + "\n" + p->source;
  // a virtual architecture (compute_XX) gives PTX only, as with the real NVRTC
  p->cubin = arch.rfind("sm_", 0) == 0 ? kCubinMagic + p->source : std::string();
  return NVRTC_SUCCESS;
}
nvrtcResult n_log_size(nvrtcProgram prog, size_t* n) {
  FAKE_NVRTC_ENTER("nvrtcGetProgramLogSize", {u(prog)});
  State::Program* p = find(s, prog);
  if (p == nullptr) return kInvalidProgram;
  *n = p->log.size() + 1;
  return NVRTC_SUCCESS;
}
nvrtcResult n_log(nvrtcProgram prog, char* out) {
  FAKE_NVRTC_ENTER("nvrtcGetProgramLog", {u(prog)});
  State::Program* p = find(s, prog);
  if (p == nullptr) return kInvalidProgram;
  std::memcpy(out, p->log.c_str(), p->log.size() + 1);
  return NVRTC_SUCCESS;
}
nvrtcResult n_cubin_size(nvrtcProgram prog, size_t* n) {
  FAKE_NVRTC_ENTER("nvrtcGetCUBINSize", {u(prog)});
  State::Program* p = find(s, prog);
  if (p == nullptr) return kInvalidProgram;
  *n = p->cubin.size();
  return NVRTC_SUCCESS;
}
nvrtcResult n_cubin(nvrtcProgram prog, char* out) {
  FAKE_NVRTC_ENTER("nvrtcGetCUBIN", {u(prog)});
  State::Program* p = find(s, prog);
  if (p == nullptr) return kInvalidProgram;
  std::memcpy(out, p->cubin.data(), p->cubin.size());
  return NVRTC_SUCCESS;
}
nvrtcResult n_ptx_size(nvrtcProgram prog, size_t* n) {
  FAKE_NVRTC_ENTER("nvrtcGetPTXSize", {u(prog)});
  State::Program* p = find(s, prog);
  if (p == nullptr) return kInvalidProgram;
  *n = p->ptx.size() + 1;
  return NVRTC_SUCCESS;
}
nvrtcResult n_ptx(nvrtcProgram prog, char* out) {
  FAKE_NVRTC_ENTER("nvrtcGetPTX", {u(prog)});
  State::Program* p = find(s, prog);
  if (p == nullptr) return kInvalidProgram;
  std::memcpy(out, p->ptx.c_str(), p->ptx.size() + 1);
  return NVRTC_SUCCESS;
}

// Skips spaces and comments.
size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else if (s.compare(i, 2, "//") == 0) {
      i = s.find('\n', i);
      if (i == std::string::npos) return s.size();
    } else if (s.compare(i, 2, "/*") == 0) {
      i = s.find("*/", i);
      if (i == std::string::npos) return s.size();
      i += 2;
    } else {
      break;
    }
  }
  return i;
}

size_t matching_paren(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')' && --depth == 0) return i;
  }
  return std::string::npos;
}

}  // namespace

std::vector<KernelSignature> parse_kernels(const std::string& src) {
  std::vector<KernelSignature> out;
  for (size_t at = src.find("__global__"); at != std::string::npos; at = src.find("__global__", at + 1)) {
    KernelSignature k;
    size_t open = src.find('(', at);
    // __launch_bounds__(N) comes before the name: read it and move on to the parameter list
    size_t lb = src.find("__launch_bounds__", at);
    if (lb != std::string::npos && lb < open) {
      size_t close = matching_paren(src, open);
      if (close == std::string::npos) break;
      k.max_threads = std::atoi(src.c_str() + open + 1);
      open = src.find('(', close);
    }
    if (open == std::string::npos) break;
    size_t end = open;
    while (end > at && std::isspace(static_cast<unsigned char>(src[end - 1]))) --end;
    size_t begin = end;
    while (begin > at && (std::isalnum(static_cast<unsigned char>(src[begin - 1])) || src[begin - 1] == '_')) --begin;
    k.name = src.substr(begin, end - begin);
    size_t close = matching_paren(src, open);
    if (close == std::string::npos) break;
    std::string params = src.substr(open + 1, close - open - 1);
    size_t offset = 0;
    size_t start = skip_space(params, 0);
    while (start < params.size()) {
      size_t comma = params.find(',', start);
      std::string p = params.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (p.find_first_not_of(" \t\n") != std::string::npos && p != "void") {
        // a TMA descriptor (`const __grid_constant__ tg_tmap m`): 128 bytes, 64-byte aligned; else 8 or 4
        bool tmap = p.find("tg_tmap") != std::string::npos || p.find("CUtensorMap") != std::string::npos;
        size_t size = tmap ? 128 : p.find('*') != std::string::npos || p.find("long long") != std::string::npos ? 8 : 4;
        size_t align = tmap ? 64 : size;
        offset = (offset + align - 1) / align * align;
        k.params.emplace_back(offset, size);
        offset += size;
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    k.params_size = offset;
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace tg::cuda::fake

// NVRTC's entry points under their own names, found with dlsym as the runtime finds the real library's
// (_cuda.nvrtc_load with this library's path).
using namespace tg::cuda;
TG_FAKE_EXPORT const char* nvrtcGetErrorString(nvrtcResult r) { return fake::n_error_string(r); }
TG_FAKE_EXPORT nvrtcResult nvrtcVersion(int* major, int* minor) { return fake::n_version(major, minor); }
TG_FAKE_EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int* n) { return fake::n_num_archs(n); }
TG_FAKE_EXPORT nvrtcResult nvrtcGetSupportedArchs(int* archs) { return fake::n_archs(archs); }
TG_FAKE_EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int nheaders,
                                              const char* const* headers, const char* const* include_names) {
  return fake::n_create(prog, src, name, nheaders, headers, include_names);
}
TG_FAKE_EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) { return fake::n_destroy(prog); }
TG_FAKE_EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int nopts, const char* const* opts) {
  return fake::n_compile(prog, nopts, opts);
}
TG_FAKE_EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* n) { return fake::n_log_size(prog, n); }
TG_FAKE_EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) { return fake::n_log(prog, log); }
TG_FAKE_EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* n) { return fake::n_cubin_size(prog, n); }
TG_FAKE_EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) { return fake::n_cubin(prog, cubin); }
TG_FAKE_EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* n) { return fake::n_ptx_size(prog, n); }
TG_FAKE_EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* ptx) { return fake::n_ptx(prog, ptx); }
