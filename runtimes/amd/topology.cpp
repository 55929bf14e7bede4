#include "topology.h"

#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "errors.h"

namespace tg::amd {
namespace {

// The whole small file at `path`; false if it does not exist.
bool read_file(const Os& os, const std::string& path, std::string* out) {
  int fd = os.open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw_errno("AMD", "open(" + path + ")", "cannot read the KFD topology");
  }
  out->clear();
  char buf[4096];
  for (;;) {
    long n = os.read(fd, buf, sizeof(buf));
    if (n < 0) {
      int err = errno;
      os.close(fd);
      errno = err;
      throw_errno("AMD", "read(" + path + ")", "cannot read the KFD topology");
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  os.close(fd);
  return true;
}

// The "name value" lines of a KFD properties file, parsed with strtoull rather than iostreams: no locale facet is
// involved (an extension built with one toolchain's headers and run against another's libstdc++ parsed every value of
// the stream as the same garbage on the GPU machine), and a line that is not "name number" is skipped.
void parse_properties(const std::string& text, std::map<std::string, std::uint64_t>* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string::npos) continue;
    const char* num = line.c_str() + sp + 1;
    char* stop = nullptr;
    errno = 0;
    std::uint64_t value = std::strtoull(num, &stop, 10);
    if (stop == num || errno != 0) continue;
    (*out)[line.substr(0, sp)] = value;
  }
}

std::uint64_t prop(const GpuNode& g, const char* key, std::uint64_t dflt) {
  auto it = g.properties.find(key);
  return it == g.properties.end() ? dflt : it->second;
}

}  // namespace

std::string gfx_name(std::uint32_t v) {
  const char* hex = "0123456789abcdef";
  std::uint32_t major = v / 10000, minor = (v / 100) % 100, stepping = v % 100;
  std::string s = "gfx" + std::to_string(major);
  s += hex[minor & 0xf];
  s += hex[stepping & 0xf];
  return s;
}

std::vector<GpuNode> discover_gpus(const Os& os, const std::string& root) {
  std::vector<GpuNode> gpus;
  std::string text;
  for (std::uint32_t node = 0;; ++node) {
    std::string dir = root + "/" + std::to_string(node);
    if (!read_file(os, dir + "/gpu_id", &text)) {
      if (node == 0)
        throw RuntimeError("AMD", "open(" + dir + "/gpu_id)", std::strerror(ENOENT),
                           "no KFD topology: the amdgpu kernel driver (KFD) is not loaded or exposes no nodes");
      break;
    }
    GpuNode g;
    g.node = node;
    g.gpu_id = static_cast<std::uint32_t>(std::strtoul(text.c_str(), nullptr, 10));
    if (g.gpu_id == 0) continue;  // a CPU node
    if (!read_file(os, dir + "/properties", &text))
      throw RuntimeError("AMD", "open(" + dir + "/properties)", std::strerror(ENOENT), "KFD node has no properties");
    parse_properties(text, &g.properties);
    g.gfx_target_version = static_cast<std::uint32_t>(prop(g, "gfx_target_version", 0));
    if (g.gfx_target_version == 0)
      throw RuntimeError("AMD", "read(" + dir + "/properties)", "", "KFD node has no gfx_target_version");
    g.gfx = gfx_name(g.gfx_target_version);
    g.render_minor = static_cast<std::uint32_t>(prop(g, "drm_render_minor", 0));
    g.simd_per_cu = static_cast<std::uint32_t>(prop(g, "simd_per_cu", 0));
    g.cu_count = g.simd_per_cu ? static_cast<std::uint32_t>(prop(g, "simd_count", 0)) / g.simd_per_cu : 0;
    g.max_waves_per_simd = static_cast<std::uint32_t>(prop(g, "max_waves_per_simd", 0));
    g.num_xcc = static_cast<std::uint32_t>(prop(g, "num_xcc", 1));
    g.lds_size_kb = static_cast<std::uint32_t>(prop(g, "lds_size_in_kb", 64));
    // what clang compiles for by default: wave32 on gfx10+, wave64 before (the property says what the GPU can do)
    g.wave_size = g.gfx_target_version >= 100000 ? 32 : 64;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace tg::amd
