// Python bindings of the CPU runtime: tinygrad.runtime._cpu. Bindings only: the surface every runtime shares comes
// from csrc/pybind_runtime.h, the logic from the plain C++ files next to this one.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "buffer.h"
#include "cpu_allocator.h"
#include "cpu_device.h"
#include "cpu_graph.h"
#include "cpu_library.h"
#include "cpu_program.h"
#include "host_os.h"
#include "pybind_runtime.h"

namespace py = pybind11;
using tg::Buffer;
using tg::cpu::CpuGraph;
using tg::cpu::CpuProgram;
using tg::cpu::Library;

namespace {

struct CpuTraits {
  using Device = tg::cpu::CpuDevice;
  using Program = CpuProgram;
  using Graph = CpuGraph;
  static constexpr const char* kBufferClass = "HostBuffer";
  static constexpr const char* kBufferDoc =
      "64-byte aligned host memory. Exports a writable, format 'B' buffer (memoryview, numpy.frombuffer); free() "
      "raises BufferError while such a view is alive. After free(), .ptr, views and launches raise ValueError.";
  // CPU kernels read host memory: numpy arrays, bytearrays and memoryviews pass as pointers.
  static constexpr tg::pyb::ArgPolicy kArgs{
      true, "expected a HostBuffer, an int, or a contiguous buffer (numpy array, bytearray, memoryview)"};
};

}  // namespace

PYBIND11_MODULE(_cpu, m) {
  m.doc() = "tinygrad's CPU runtime: host buffers, kernels loaded from C-compiled shared objects, launch graphs.";
  auto c = tg::pyb::bind_runtime<CpuTraits>(m);

  c.device.def(py::init(&tg::cpu::cpu_device), "The process-wide CPU device.");
  c.buffer.def(py::init([](size_t nbytes) { return std::make_shared<Buffer>(tg::cpu::cpu_allocator(), nbytes); }),
               py::arg("nbytes"));
  c.program.def(py::init<std::shared_ptr<Library>, std::string>(), py::arg("lib"), py::arg("name"))
      .def_property_readonly("address", &CpuProgram::address);
  c.graph.def(py::init<>());

  py::class_<Library, std::shared_ptr<Library>>(m, "Library", py::module_local(), "A shared object loaded from bytes.")
      .def(py::init([](const py::bytes& image) {
             std::string_view bytes = image;  // bytes are immutable: safe to read without the GIL
             py::gil_scoped_release nogil;
             return std::make_shared<Library>(bytes);
           }),
           py::arg("image"))
      .def(
          "symbol",
          [](const Library& lib, const std::string& name) {
            return reinterpret_cast<std::uintptr_t>(lib.symbol(name));
          },
          py::arg("name"), "Address of a symbol (RuntimeError if missing).");

  // The seam for tests (test/native): the operating-system calls as a C function table (host_os.h).
  m.def(
      "real_host_os",
      [] { return reinterpret_cast<std::uintptr_t>(tg::cpu::real_host_os_table()); },
      "Address of the real OS calls as a tg_host_os table, for a replacement to delegate to.");
  m.def(
      "set_host_os",
      [](std::uintptr_t table) { tg::cpu::set_host_os_table(reinterpret_cast<const tg_host_os*>(table)); },
      py::arg("table"),
      "Route later allocations and library loads through the tg_host_os table at this address (0: the real OS). "
      "The table must stay valid for the life of the process.");
}
