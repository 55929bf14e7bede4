// Python bindings of the Metal runtime: tinygrad.runtime._metal. Bindings only: the surface every runtime shares comes
// from csrc/pybind_runtime.h, the logic from the plain C++ files next to this one. Importing the module never loads
// anything: the first Device loads the Objective-C runtime and the Metal framework.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "buffer.h"
#include "metal_allocator.h"
#include "metal_device.h"
#include "objc_api.h"
#include "pybind_runtime.h"

namespace py = pybind11;
using tg::metal::MetalDevice;
using tg::metal::MetalGraph;
using tg::metal::MetalProgram;

namespace {

struct MetalTraits {
  using Device = MetalDevice;
  using Program = MetalProgram;
  using Graph = MetalGraph;
  static constexpr const char* kBufferClass = "DeviceBuffer";
  static constexpr const char* kBufferDoc =
      "A shared-storage MTLBuffer: the GPU's memory, also the host's (memoryview and numpy.frombuffer view it in "
      "place). After free(), .ptr and launches raise ValueError.";
  static constexpr tg::pyb::ArgPolicy kArgs{false, "a Metal kernel takes DeviceBuffers and ints"};
};

}  // namespace

PYBIND11_MODULE(_metal, m) {
  m.doc() = "tinygrad's Metal runtime: the Objective-C runtime and Metal through dlopen, shared buffers, pipelines.";
  auto c = tg::pyb::bind_runtime<MetalTraits>(m);

  m.def(
      "use_libraries",
      [](std::optional<std::string> objc, std::optional<std::string> metal, std::string coregraphics,
         std::string system) {
        if (!objc) return tg::metal::use_libraries(std::nullopt);
        tg::metal::use_libraries(tg::metal::LibraryPaths{*objc, metal.value_or(*objc), coregraphics, system});
      },
      py::arg("objc"), py::arg("metal") = py::none(), py::arg("coregraphics") = "", py::arg("system") = "",
      "Load the Objective-C runtime and Metal from these libraries (objc=None: Apple's) for devices opened later.");

  c.device.def(py::init<>(), py::call_guard<py::gil_scoped_release>(),
               "Opens the default GPU (RuntimeError naming the library where Metal is not available).")
      .def_property_readonly("gpu_name", [](const MetalDevice& d) { return d.context()->gpu_name(); })
      .def_property_readonly("supports_icb", [](const MetalDevice& d) { return d.context()->supports_icb(); },
                             "Whether graphs replay through indirect command buffers.")
      .def_property_readonly(
          "supports_simdgroup_matrix", [](const MetalDevice& d) { return d.context()->supports_simdgroup_matrix(); },
          "Whether kernels may use simdgroup_matrix (Apple7 family and later).")
      .def_property_readonly("max_threadgroup_memory",
                             [](const MetalDevice& d) { return d.context()->max_threadgroup_memory(); })
      .def(
          "check_source",
          [](MetalDevice& d, const std::string& source) {
            py::gil_scoped_release nogil;
            d.check_source(source);
          },
          py::arg("source"), "Compile MSL and drop the library: RuntimeError with the compiler's log on failure.");
  m.def(
      "wrap_host",
      [](MetalDevice& d, const py::buffer& memory) {
        auto view = std::make_unique<Py_buffer>();
        if (PyObject_GetBuffer(memory.ptr(), view.get(), PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0)
          throw py::error_already_set();
        void* host = view->buf;
        size_t nbytes = static_cast<size_t>(view->len);
        std::shared_ptr<const void> owner(view.release(), [](Py_buffer* v) {
          py::gil_scoped_acquire gil;  // the buffer may die in C++ without the GIL
          PyBuffer_Release(v);
          delete v;
        });
        auto alloc = std::make_shared<tg::metal::HostMemoryAllocator>(d.context(), host, nbytes, std::move(owner));
        return std::make_shared<tg::Buffer>(alloc, nbytes);
      },
      py::arg("device"), py::arg("memory"),
      "A DeviceBuffer over writable, page-aligned host memory (whole pages): the GPU uses it in place, and the "
      "memory's owner stays alive as long as the buffer (ValueError where it is not page-aligned).");

  c.program.def_property_readonly("max_threads", &MetalProgram::max_threads)
      .def_property_readonly("simd_width", &MetalProgram::simd_width);
  c.graph.def(py::init([](MetalDevice& d) { return std::make_unique<MetalGraph>(d.context()); }), py::arg("device"))
      .def_property_readonly("uses_icb", &MetalGraph::uses_icb);
}
