// Python bindings of the AMD runtime: tinygrad.runtime._amd. Bindings only: the surface every runtime shares comes
// from csrc/pybind_runtime.h, the logic from the plain C++ files next to this one. Importing the module touches no
// device: /dev/kfd is opened by the first Device.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "amd_device.h"
#include "amd_graph.h"
#include "amd_os.h"
#include "amd_program.h"
#include "code_object.h"
#include "pybind_runtime.h"
#include "topology.h"

namespace py = pybind11;
using tg::amd::AmdDevice;
using tg::amd::AmdGraph;
using tg::amd::AmdProgram;

namespace {

struct AmdTraits {
  using Device = AmdDevice;
  using Program = AmdProgram;
  using Graph = AmdGraph;
  static constexpr const char* kBufferClass = "DeviceBuffer";
  static constexpr const char* kBufferDoc =
      "Memory of one AMD GPU at the same address for CPU and GPU. After free(), .ptr and launches raise ValueError.";
  static constexpr tg::pyb::ArgPolicy kArgs{false, "an AMD kernel takes DeviceBuffers and ints"};
};

// One raw allocation, for tests and staging: the memory kinds KFD offers, freed by free() or the collector.
struct RawMemory {
  std::unique_ptr<tg::amd::GpuMemory> mem;
  tg::amd::GpuMemory& get() const {
    if (!mem) throw tg::UsageError("GpuMemory was freed");
    return *mem;
  }
};

py::dict descriptor_dict(const tg::amd::CodeObjectKernel& k) {
  const auto& d = k.descriptor;
  py::dict out;
  out["name"] = k.name;
  out["descriptor_offset"] = k.descriptor_offset;
  out["entry_offset"] = k.entry_offset();
  out["group_segment_fixed_size"] = d.group_segment_fixed_size;
  out["private_segment_fixed_size"] = d.private_segment_fixed_size;
  out["kernarg_size"] = d.kernarg_size;
  out["compute_pgm_rsrc1"] = d.compute_pgm_rsrc1;
  out["compute_pgm_rsrc2"] = d.compute_pgm_rsrc2;
  out["compute_pgm_rsrc3"] = d.compute_pgm_rsrc3;
  out["kernel_code_properties"] = d.kernel_code_properties;
  out["wave32"] = (d.kernel_code_properties & tg::amd::elf::kPropWave32) != 0;
  return out;
}

}  // namespace

PYBIND11_MODULE(_amd, m) {
  m.doc() = "tinygrad's AMD runtime: KFD ioctls, GPU memory, an AQL queue, code objects, launch graphs.";
  auto c = tg::pyb::bind_runtime<AmdTraits>(m);

  c.device
      .def(py::init([](int ordinal) {
             py::gil_scoped_release nogil;
             return std::make_shared<AmdDevice>(ordinal);
           }),
           py::arg("ordinal") = 0,
           "Opens AMD GPU `ordinal` through /dev/kfd (RuntimeError naming KFD where there is none).")
      .def_property_readonly("arch", [](const AmdDevice& d) { return d.gpu()->node().gfx; })
      .def_property_readonly("gfx_target_version", [](const AmdDevice& d) { return d.gpu()->node().gfx_target_version; })
      .def_property_readonly("gpu_id", [](const AmdDevice& d) { return d.gpu()->node().gpu_id; })
      .def_property_readonly("cu_count", [](const AmdDevice& d) { return d.gpu()->node().cu_count; })
      .def_property_readonly("lds_size_kb", [](const AmdDevice& d) { return d.gpu()->node().lds_size_kb; })
      .def_property_readonly("wave_size", [](const AmdDevice& d) { return d.gpu()->node().wave_size; })
      .def_property_readonly("render_minor", [](const AmdDevice& d) { return d.gpu()->node().render_minor; })
      .def_property_readonly("kfd_version", [](const AmdDevice& d) {
        return py::make_tuple(d.gpu()->kfd()->major(), d.gpu()->kfd()->minor());
      })
      .def_property_readonly("live_allocations", [](const AmdDevice& d) { return d.amd_allocator()->live_allocations(); })
      .def_property_readonly("submitted", [](const AmdDevice& d) { return d.gpu()->queue().submitted(); },
                             "Dispatch packets written to the queue so far.")
      .def_property("timeout_ms", [](const AmdDevice& d) { return d.gpu()->queue().timeout_ms(); },
                    [](AmdDevice& d, std::uint32_t ms) { d.gpu()->queue().set_timeout_ms(ms); },
                    "How long a wait for the queue lasts before it counts as hung (RuntimeError).");

  c.program.def_property_readonly("kernarg_size", &AmdProgram::kernarg_size)
      .def_property_readonly("descriptor_address", &AmdProgram::descriptor_address)
      .def_property_readonly("group_segment_size",
                             [](const AmdProgram& p) { return p.descriptor().group_segment_fixed_size; });

  c.graph.def(py::init([](AmdDevice& dev) { return std::make_unique<AmdGraph>(dev.gpu()); }), py::arg("device"))
      .def_property_readonly("replays", &AmdGraph::replays);

  py::class_<RawMemory>(m, "GpuMemory", py::module_local(),
                        "One allocation in a GPU's VM at the same address for CPU and GPU: VRAM (cpu_visible: PUBLIC "
                        "and mapped), GTT (system memory) or USERPTR (host memory pinned for the GPU).")
      .def(py::init([](AmdDevice& dev, std::uint64_t nbytes, const std::string& kind, bool cpu_visible,
                       bool uncached) {
             tg::amd::MemoryOptions o{tg::amd::MemoryKind::Vram, cpu_visible, uncached, false};
             if (kind == "gtt") o.kind = tg::amd::MemoryKind::Gtt;
             else if (kind == "userptr") o.kind = tg::amd::MemoryKind::Userptr;
             else if (kind != "vram") throw tg::UsageError("kind must be 'vram', 'gtt' or 'userptr', not '" + kind + "'");
             py::gil_scoped_release nogil;
             return RawMemory{dev.gpu()->allocate(nbytes, o)};
           }),
           py::arg("device"), py::arg("nbytes"), py::arg("kind") = "vram", py::arg("cpu_visible") = true,
           py::arg("uncached") = false)
      .def_property_readonly("va", [](const RawMemory& r) { return r.get().va(); })
      .def_property_readonly("size", [](const RawMemory& r) { return r.get().size(); })
      .def_property_readonly("handle", [](const RawMemory& r) { return r.get().handle(); })
      .def_property_readonly("cpu", [](const RawMemory& r) -> py::object {
        void* p = r.get().cpu();
        return p ? py::object(py::int_(reinterpret_cast<std::uintptr_t>(p))) : py::object(py::none());
      }, "The CPU address (the same as va), or None where the CPU has no view.")
      .def("free", [](RawMemory& r) { r.mem.reset(); }, "Unmap and release now (idempotent).");

  m.def(
      "parse_code_object",
      [](const py::bytes& image) {
        std::string_view bytes = image;
        tg::amd::CodeObject co = tg::amd::parse_code_object(bytes, "AMD");
        py::dict out;
        out["e_flags"] = co.e_flags;
        out["gfx"] = tg::amd::gfx_target_of_mach(co.e_flags);
        out["abi_version"] = co.abi_version;
        out["image_size"] = co.image.size();
        out["relocations"] = co.relative_relocs.size();
        py::list kernels;
        for (const auto& k : co.kernels) kernels.append(descriptor_dict(k));
        out["kernels"] = kernels;
        return out;
      },
      py::arg("image"),
      "An AMDGPU code object's target, image size and kernels with their descriptors (RuntimeError if invalid).");
  m.def("gfx_name", &tg::amd::gfx_name, py::arg("gfx_target_version"), "110000 -> 'gfx1100'.");
  m.def(
      "discover",
      [] {
        py::list out;
        for (const auto& g : tg::amd::discover_gpus(tg::amd::Os(tg::amd::os_table()))) {
          py::dict d;
          d["node"] = g.node;
          d["gpu_id"] = g.gpu_id;
          d["gfx"] = g.gfx;
          d["gfx_target_version"] = g.gfx_target_version;
          d["render_minor"] = g.render_minor;
          d["cu_count"] = g.cu_count;
          d["lds_size_kb"] = g.lds_size_kb;
          d["wave_size"] = g.wave_size;
          out.append(d);
        }
        return out;
      },
      "The GPU nodes of the KFD topology (RuntimeError naming KFD where there is none).");

  // The seam for tests (test/native's fake KFD): the OS calls as a C function table (amd_os.h).
  m.def(
      "real_os", [] { return reinterpret_cast<std::uintptr_t>(tg::amd::real_os_table()); },
      "Address of the real OS calls as a tg_amd_os table.");
  m.def(
      "set_os",
      [](std::uintptr_t table) { tg::amd::set_os_table(reinterpret_cast<const tg_amd_os*>(table)); },
      py::arg("table"),
      "Route the OS calls of devices opened later through the tg_amd_os table at this address (0: the real OS). "
      "The table must stay valid for the life of the process.");
}
