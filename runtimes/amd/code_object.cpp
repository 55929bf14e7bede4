#include "code_object.h"

#include <algorithm>
#include <cstring>

#include "errors.h"

namespace tg::amd {
namespace {

// the ELF64 structures, as the ELF specification lays them out (little-endian only: AMDGPU is)
struct Ehdr {
  unsigned char ident[16];
  std::uint16_t type, machine;
  std::uint32_t version;
  std::uint64_t entry, phoff, shoff;
  std::uint32_t flags;
  std::uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};
struct Shdr {
  std::uint32_t name, type;
  std::uint64_t flags, addr, offset, size;
  std::uint32_t link, info;
  std::uint64_t addralign, entsize;
};
struct Sym {
  std::uint32_t name;
  unsigned char info, other;
  std::uint16_t shndx;
  std::uint64_t value, size;
};
struct Rela {
  std::uint64_t offset, info;
  std::int64_t addend;
};
static_assert(sizeof(Ehdr) == 64 && sizeof(Shdr) == 64 && sizeof(Sym) == 24 && sizeof(Rela) == 24);

constexpr std::uint32_t kShtProgbits = 1, kShtSymtab = 2, kShtRela = 4, kShtNobits = 8, kShtDynsym = 11;
constexpr std::uint64_t kShfAlloc = 2;
constexpr unsigned kSttObject = 1;
constexpr std::uint32_t kRAmdgpuRelative64 = 13;
constexpr std::uint64_t kMaxImage = std::uint64_t{1} << 30;

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& device) : b_(bytes), device_(device) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw RuntimeError(device_, "load_program", "", "invalid AMDGPU code object: " + what);
  }
  template <class T>
  T at(std::uint64_t offset, const char* what) const {
    if (offset > b_.size() || b_.size() - offset < sizeof(T)) fail(std::string(what) + " lies outside the file");
    T v;
    std::memcpy(&v, b_.data() + offset, sizeof(T));
    return v;
  }
  std::string_view range(std::uint64_t offset, std::uint64_t size, const char* what) const {
    if (offset > b_.size() || b_.size() - offset < size) fail(std::string(what) + " lies outside the file");
    return b_.substr(offset, size);
  }
  std::string cstr(std::string_view table, std::uint64_t offset) const {
    if (offset >= table.size()) fail("a symbol name lies outside its string table");
    size_t end = table.find('\0', offset);
    if (end == std::string_view::npos) fail("a symbol name is not terminated");
    return std::string(table.substr(offset, end - offset));
  }

 private:
  std::string_view b_;
  const std::string& device_;
};

}  // namespace

std::string gfx_target_of_mach(std::uint32_t mach) {
  // EF_AMDGPU_MACH_AMDGCN_* (the low byte of e_flags), as clang-19 writes them
  switch (mach & 0xff) {
    case 0x30: return "gfx908";
    case 0x3f: return "gfx90a";
    case 0x4c: return "gfx942";
    case 0x36: return "gfx1030";
    case 0x41: return "gfx1100";
    case 0x46: return "gfx1101";
    case 0x47: return "gfx1102";
    case 0x44: return "gfx1103";
    default: return "";
  }
}

const CodeObjectKernel& CodeObject::kernel(const std::string& name) const {
  for (const CodeObjectKernel& k : kernels)
    if (k.name == name) return k;
  std::string have;
  for (const CodeObjectKernel& k : kernels) have += (have.empty() ? "" : ", ") + k.name;
  throw RuntimeError("AMD", "load_program", "", "no kernel '" + name + "' in the code object (it has: " +
                                                    (have.empty() ? "none" : have) + ")");
}

CodeObject parse_code_object(std::string_view bytes, const std::string& device) {
  Reader r(bytes, device);
  auto eh = r.at<Ehdr>(0, "the ELF header");
  if (std::memcmp(eh.ident, "\x7f" "ELF", 4) != 0) r.fail("not an ELF file");
  if (eh.ident[4] != 2 || eh.ident[5] != 1) r.fail("not a little-endian ELF64 file");
  if (eh.machine != elf::kMachineAmdgpu)
    r.fail("e_machine is " + std::to_string(eh.machine) + ", not EM_AMDGPU (224)");
  if (eh.ident[7] != elf::kOsAbiAmdgpuHsa) r.fail("OS/ABI is " + std::to_string(eh.ident[7]) + ", not AMDGPU_HSA");
  if (eh.shentsize != sizeof(Shdr)) r.fail("unexpected section header size");

  CodeObject co;
  co.e_flags = eh.flags;
  co.abi_version = eh.ident[8];
  std::vector<Shdr> sections;
  for (std::uint16_t i = 0; i < eh.shnum; ++i)
    sections.push_back(r.at<Shdr>(eh.shoff + std::uint64_t{i} * sizeof(Shdr), "a section header"));

  std::uint64_t image_size = 0;
  for (const Shdr& s : sections) {
    if (!(s.flags & kShfAlloc)) continue;
    if (s.addr > kMaxImage || s.size > kMaxImage) r.fail("a section is larger than 1 GiB");
    image_size = std::max(image_size, s.addr + s.size);
  }
  co.image.assign(image_size, '\0');
  for (const Shdr& s : sections) {
    if ((s.flags & kShfAlloc) && s.type != kShtNobits && s.size != 0) {
      std::string_view data = r.range(s.offset, s.size, "a section's contents");
      std::memcpy(co.image.data() + s.addr, data.data(), data.size());
    }
  }

  bool have_symbols = false;
  for (const Shdr& s : sections) {
    if (s.type == kShtRela) {
      for (std::uint64_t off = 0; off + sizeof(Rela) <= s.size; off += sizeof(Rela)) {
        auto rel = r.at<Rela>(s.offset + off, "a relocation");
        std::uint32_t type = static_cast<std::uint32_t>(rel.info);
        if (type != kRAmdgpuRelative64) r.fail("relocation type " + std::to_string(type) + " is not supported");
        if (rel.offset > image_size || image_size - rel.offset < 8) r.fail("a relocation lies outside the image");
        co.relative_relocs.emplace_back(rel.offset, rel.addend);
      }
    }
    // the dynamic symbols suffice (lld puts every kernel there); a static table, if present, says the same
    if (s.type != kShtDynsym && !(s.type == kShtSymtab && !have_symbols)) continue;
    if (s.link >= sections.size()) r.fail("a symbol table links to a missing string table");
    const Shdr& strs = sections[s.link];
    std::string_view names = r.range(strs.offset, strs.size, "a string table");
    std::vector<CodeObjectKernel> found;
    for (std::uint64_t off = sizeof(Sym); off + sizeof(Sym) <= s.size; off += sizeof(Sym)) {
      auto sym = r.at<Sym>(s.offset + off, "a symbol");
      std::string name = r.cstr(names, sym.name);
      if ((sym.info & 0xf) != kSttObject || name.size() <= 3 || name.compare(name.size() - 3, 3, ".kd") != 0)
        continue;
      if (sym.size != sizeof(elf::KernelDescriptor)) r.fail("kernel descriptor " + name + " is not 64 bytes");
      if (sym.value % 64 != 0) r.fail("kernel descriptor " + name + " is not 64-byte aligned");
      if (sym.value > image_size || image_size - sym.value < sizeof(elf::KernelDescriptor))
        r.fail("kernel descriptor " + name + " lies outside the loaded sections");
      CodeObjectKernel k{name.substr(0, name.size() - 3), sym.value, {}};
      std::memcpy(&k.descriptor, co.image.data() + sym.value, sizeof(k.descriptor));
      std::uint64_t entry = k.entry_offset();
      if (entry >= image_size) r.fail("the code of kernel " + k.name + " lies outside the loaded sections");
      found.push_back(std::move(k));
    }
    if (s.type == kShtDynsym || co.kernels.empty()) co.kernels = std::move(found);
    have_symbols = have_symbols || s.type == kShtDynsym;
  }
  if (co.kernels.empty()) r.fail("no kernel descriptor (<name>.kd) symbols");
  return co;
}

}  // namespace tg::amd
