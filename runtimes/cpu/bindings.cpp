// Python bindings of the CPU runtime: tinygrad.runtime._cpu. Bindings only; the logic lives in the plain C++ files
// next to this one and in csrc/pybind_helpers.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "buffer.h"
#include "cpu_allocator.h"
#include "cpu_graph.h"
#include "cpu_library.h"
#include "cpu_program.h"
#include "fault_host_os.h"
#include "pybind_helpers.h"
#include "runtime.h"

namespace py = pybind11;
using tg::Buffer;
using tg::cpu::CpuGraph;
using tg::cpu::CpuProgram;
using tg::cpu::Library;

PYBIND11_MODULE(_cpu, m) {
  m.doc() = "tinygrad's CPU runtime: host buffers, kernels loaded from C-compiled shared objects, launch graphs.";
  tg::pyb::register_exception_translators();

  m.def("abi_version", [] { return TG_RUNTIME_ABI_VERSION; }, "Version of csrc/runtime.h this module was built with.");

  auto host_buffer = py::class_<Buffer, std::shared_ptr<Buffer>>(
      m, "HostBuffer", py::buffer_protocol(),
      "64-byte aligned host memory. Exports a writable, format 'B' buffer (memoryview, numpy.frombuffer); free() "
      "raises BufferError while such a view is alive. After free(), .ptr, views and launches raise ValueError.");
  host_buffer
      .def(py::init([](size_t nbytes) { return std::make_shared<Buffer>(tg::cpu::cpu_allocator(), nbytes); }),
           py::arg("nbytes"))
      .def_property_readonly("ptr", &Buffer::ptr, "Address of the memory (ValueError after free()).")
      .def_property_readonly("nbytes", &Buffer::nbytes)
      .def_property_readonly("freed", &Buffer::freed)
      .def_property_readonly("pinned", &Buffer::pinned, "Whether a memoryview, numpy array or launch uses it now.")
      .def("free", &Buffer::free, "Release the memory now (idempotent).");
  tg::pyb::enable_buffer_protocol(host_buffer);

  m.def("copyin", &tg::pyb::copyin, py::arg("dst"), py::arg("src"),
        "Copy all of buffer `src` to the start of HostBuffer `dst`.");
  m.def("copyout", &tg::pyb::copyout, py::arg("dst"), py::arg("src"),
        "Fill writable buffer `dst` from the start of HostBuffer `src`.");

  py::class_<Library, std::shared_ptr<Library>>(m, "Library", "A shared object loaded from its bytes.")
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

  py::class_<CpuProgram, std::shared_ptr<CpuProgram>>(m, "Program", "A C function from a Library.")
      .def(py::init<std::shared_ptr<Library>, std::string>(), py::arg("lib"), py::arg("name"))
      .def("__call__", [](CpuProgram& p, const py::args& args) { tg::pyb::launch(p, args); },
           "Call with HostBuffers, buffer-protocol objects (pointers) and ints; releases the GIL.")
      .def_property_readonly("name", &CpuProgram::name)
      .def_property_readonly("address", &CpuProgram::address);

  py::class_<CpuGraph>(m, "Graph", "Launches replayed back to back in one call.")
      .def(py::init<>())
      .def(
          "add",
          [](CpuGraph& g, std::shared_ptr<CpuProgram> program, const py::list& args) {
            return g.add(std::move(program), tg::pyb::to_bound_args(args), nullptr);
          },
          py::arg("program"), py::arg("args"), "Append a launch; returns its index.")
      .def(
          "set_arg",
          [](CpuGraph& g, size_t launch, size_t arg, py::handle value) {
            g.set_arg(launch, arg, tg::pyb::to_bound_arg(value, arg));
          },
          py::arg("launch"), py::arg("arg"), py::arg("value"), "Replace one argument for later replays.")
      .def("__call__", &CpuGraph::run, py::call_guard<py::gil_scoped_release>())
      .def("__len__", &CpuGraph::size);

  // Test hooks: make the next host allocations or library loads fail, to test the error paths.
  auto testing = m.def_submodule("_testing", "Fault injection for tests (tg::cpu::testing).");
  testing.def("fail_next_alloc", &tg::cpu::testing::fail_next_alloc, py::arg("n") = 1);
  testing.def("fail_next_load", &tg::cpu::testing::fail_next_load, py::arg("n") = 1);
  testing.def("reset", &tg::cpu::testing::reset);
}
