// MSL built for the host: the kernels' signatures parsed, a C entry point generated for each (unpacking the bound
// buffers and values into the kernel's parameters), the whole compiled against msl_host.h and loaded.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "fake_metal_exec.h"

namespace tg::metal::fake {
namespace {

std::uint64_t fnv1a(const std::string& s, std::uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// MSL text as host C++: the metal_stdlib include goes (the shim is included instead), and each threadgroup array
// declaration becomes a static array shared by the threadgroup's fibers.
std::string host_source(const std::string& msl) {
  std::istringstream in(msl);
  std::string line, out;
  while (std::getline(in, line)) {
    size_t start = line.find_first_not_of(' ');
    if (line == "#include <metal_stdlib>") continue;
    if (start != std::string::npos && line.compare(start, 12, "threadgroup ") == 0)
      line = line.substr(0, start) + "static " + line.substr(start + 12);
    out += line + "\n";
  }
  return out;
}

struct Parsed {
  HostKernel kernel;
  std::string call;  // the kernel called with its parameters from the entry point's arguments
};

// The `kernel void` functions of the source, with their parameter lists.
std::vector<Parsed> parse_kernels(const std::string& msl) {
  std::vector<Parsed> out;
  const std::string marker = "kernel void ";
  for (size_t at = msl.find(marker); at != std::string::npos; at = msl.find(marker, at + 1)) {
    if (at > 0 && msl[at - 1] != '\n') continue;
    size_t open = msl.find('(', at);
    Parsed p;
    p.kernel.name = msl.substr(at + marker.size(), open - at - marker.size());
    int depth = 0;
    size_t close = open;
    for (; close < msl.size(); ++close) {
      if (msl[close] == '(') ++depth;
      if (msl[close] == ')' && --depth == 0) break;
    }
    std::string params = msl.substr(open + 1, close - open - 1), args;
    size_t pos = 0;
    while (pos <= params.size()) {
      size_t comma = params.find(',', pos);  // no parameter of an MSL kernel has a comma in its type
      std::string param = params.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? params.size() + 1 : comma + 1;
      size_t first = param.find_first_not_of(" \n\t"), last = param.find_last_not_of(" \n\t");
      if (first == std::string::npos) continue;
      param = param.substr(first, last - first + 1);
      std::string arg;
      size_t slot_at = param.find("[[buffer(");
      if (slot_at != std::string::npos) {
        int slot = std::stoi(param.substr(slot_at + 9));
        std::string decl = param.substr(0, param.rfind(' ', slot_at - 2));  // the type, then the name
        if (decl.compare(0, 9, "constant ") == 0) {
          std::string type = decl.substr(9, decl.find('&') - 9);
          arg = "*(" + type + "*)b[" + std::to_string(slot) + "]";
          p.kernel.bytes_slots.push_back(slot);
        } else {
          std::string type = decl;
          size_t d = type.find("device ");
          if (d != std::string::npos) type.erase(d, 7);
          arg = "(" + type + ")b[" + std::to_string(slot) + "]";
          p.kernel.buffer_slots.push_back(slot);
        }
      } else if (param.find("[[threadgroup_position_in_grid]]") != std::string::npos) {
        arg = "gid";
      } else if (param.find("[[thread_position_in_threadgroup]]") != std::string::npos) {
        arg = "lid";
      } else if (param.find("[[threads_per_threadgroup]]") != std::string::npos) {
        arg = "bdim";
      } else if (param.find("[[threadgroups_per_grid]]") != std::string::npos) {
        arg = "gdim";
      } else {
        arg = "/* unsupported parameter: " + param + " */";
      }
      args += (args.empty() ? "" : ", ") + arg;
    }
    p.call = p.kernel.name + "(" + args + ")";
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

HostLibrary::~HostLibrary() {
  if (handle != nullptr) dlclose(handle);
}

const HostKernel* HostLibrary::find(const std::string& name) const {
  for (const HostKernel& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

std::shared_ptr<HostLibrary> build_library(const Config& cfg, const std::string& msl, std::string* log) {
  std::vector<Parsed> parsed = parse_kernels(msl);
  bool fibers = msl.find("threadgroup_barrier") != std::string::npos || msl.find("simd_") != std::string::npos;
  std::string src = host_source(msl);
  for (size_t i = 0; i < parsed.size(); ++i) {
    src += "extern \"C\" bool tg_run_" + parsed[i].kernel.name +
           "(void** b, const unsigned* grid, const unsigned* block, int fibers) {\n"
           "  return tg_host::run_grid([](void** b, uint3 gid, uint3 lid, uint3 bdim, uint3 gdim) { " +
           parsed[i].call + "; }, b, grid, block, fibers != 0);\n}\n";
  }
  std::uint64_t h = fnv1a(src, fnv1a(read_file(cfg.shim), fnv1a(cfg.compiler)));
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(h));
  mkdir(cfg.cache_dir.c_str(), 0755);
  std::string base = cfg.cache_dir + "/" + name, so = base + ".so";
  if (access(so.c_str(), R_OK) != 0) {
    // per process: parallel test processes may build the same library at once
    std::string tag = "." + std::to_string(getpid()), cpp = base + tag + ".cpp", tmp = base + tag + ".tmp.so";
    std::ofstream(cpp) << src;
    std::string cmd = cfg.compiler + " -std=c++17 -O1 -w -shared -fPIC -include " + cfg.shim + " -x c++ " + cpp +
                      " -o " + tmp + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string output;
    char buf[4096];
    size_t n;
    while (pipe != nullptr && (n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
    int status = pipe != nullptr ? pclose(pipe) : -1;
    if (status != 0) {
      *log = output.empty() ? "the host compiler failed to run: " + cmd : output;
      unlink(tmp.c_str());
      unlink(cpp.c_str());
      return nullptr;
    }
    rename(tmp.c_str(), so.c_str());  // atomic: a parallel test process sees the whole library or none
    unlink(cpp.c_str());
  }
  auto lib = std::make_shared<HostLibrary>();
  lib->handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle == nullptr) {
    const char* e = dlerror();
    *log = e ? e : "dlopen failed";
    return nullptr;
  }
  for (Parsed& p : parsed) {
    p.kernel.fibers = fibers;
    p.kernel.run = reinterpret_cast<bool (*)(void**, const unsigned*, const unsigned*, int)>(
        dlsym(lib->handle, ("tg_run_" + p.kernel.name).c_str()));
    lib->kernels.push_back(std::move(p.kernel));
  }
  return lib;
}

}  // namespace tg::metal::fake
