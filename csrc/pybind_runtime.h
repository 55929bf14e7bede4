// The Python surface every runtime module offers (tinygrad.runtime._cpu, _cuda, and later _amd, _metal), bound once
// over the contract of runtime.h. A backend's bindings.cpp describes itself in a traits struct, calls
// bind_runtime<Traits>(module) and adds its few extras (constructors, device attributes, compilers) to the classes it
// gets back.
//
//   abi_version()                              TG_RUNTIME_ABI_VERSION
//   Device                                     .name, .load_program(name, image) -> Program,
//                                              .create_graph() -> Graph or None, .synchronize()
//   <buffer class> (HostBuffer, DeviceBuffer)  (device, nbytes); .ptr, .nbytes, .freed, .pinned, .device, .free()
//   Program                                    .name, .device, .launch(global_size, local_size, wait, *args),
//                                              __call__(*args)
//   Graph                                      .add(program, args, global_size=None, local_size=None) -> index,
//                                              .set_arg(launch, arg, value), .set_arg_many(slots, value),
//                                              .set_dims(launch, global, local),
//                                              __call__() (and .run()), __len__()
//   copyin(dst, src), copyout(dst, src), transfer(dst, src, nbytes)
//
// Kernel arguments are converted as pybind_helpers.h describes, under the backend's ArgPolicy.
//
// Performance: Program.__call__ and Graph.__call__ are the eager engine's and the JIT's fast paths. They take no
// keyword arguments, convert arguments into inline storage (no allocation for up to 16) and release the GIL around
// the launch; keep them that way.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "buffer.h"
#include "errors.h"
#include "pybind_helpers.h"
#include "runtime.h"

namespace tg::pyb {

// What bind_runtime needs to know about a backend:
//
//   struct Traits {
//     using Device = ...;                         // the backend's tg::Device
//     using Program = ...;                        // the tg::Program its load_program makes
//     using Graph = ...;                          // the tg::Graph its create_graph makes
//     static constexpr const char* kBufferClass;  // the Python name of tg::Buffer: "HostBuffer", "DeviceBuffer"
//     static constexpr const char* kBufferDoc;
//     static constexpr ArgPolicy kArgs;           // which Python objects kernel arguments may be
//   };
//
// and what it gives back, for the backend to add its extras to.
template <class Traits>
struct RuntimeClasses {
  py::class_<typename Traits::Device, std::shared_ptr<typename Traits::Device>> device;
  py::class_<Buffer, std::shared_ptr<Buffer>> buffer;
  py::class_<typename Traits::Program, std::shared_ptr<typename Traits::Program>> program;
  py::class_<typename Traits::Graph> graph;
};

namespace detail {

// Launch and, with `wait`, return the kernel's time in seconds: the device's own measure where it has one (GPU
// events), else the wall-clock time of the launch, which on a device without a queue is the kernel itself.
inline std::optional<double> run_launch(Program& program, const LaunchArgs& args, const LaunchDims* dims,
                                        bool wait) {
  if (!wait) {
    program.launch(args.data(), args.size(), dims);
    return std::nullopt;
  }
  if (auto seconds = program.launch_timed(args.data(), args.size(), dims)) return seconds;
  auto start = std::chrono::steady_clock::now();
  program.launch(args.data(), args.size(), dims);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The backend's program type for a program its device loaded (a device only makes its own kind).
template <class P>
std::shared_ptr<P> own_program(std::shared_ptr<Program> program) {
  auto p = std::dynamic_pointer_cast<P>(std::move(program));
  if (!p) throw std::logic_error("load_program returned a program of another backend");
  return p;
}

}  // namespace detail

template <class Traits>
RuntimeClasses<Traits> bind_runtime(py::module_& m) {
  using Dev = typename Traits::Device;
  using Prog = typename Traits::Program;
  using Grph = typename Traits::Graph;
  static constexpr const ArgPolicy& kArgs = Traits::kArgs;

  register_exception_translators();
  m.def("abi_version", [] { return TG_RUNTIME_ABI_VERSION; }, "Version of csrc/runtime.h this module was built with.");

  // NOTE: module_local everywhere: every runtime module has its own copy of the header-only tg:: types, so two
  // modules registering tg::Buffer globally would collide.
  RuntimeClasses<Traits> c{
      py::class_<Dev, std::shared_ptr<Dev>>(m, "Device", py::module_local(), "A device of this backend."),
      py::class_<Buffer, std::shared_ptr<Buffer>>(m, Traits::kBufferClass, py::module_local(), py::buffer_protocol(),
                                                  Traits::kBufferDoc),
      py::class_<Prog, std::shared_ptr<Prog>>(m, "Program", py::module_local(), "One loaded kernel."),
      py::class_<Grph>(m, "Graph", py::module_local(), "Launches captured once and replayed in one call."),
  };

  c.device.def_property_readonly("name", &Dev::name)
      .def(
          "load_program",
          [](Dev& d, const std::string& name, const py::bytes& image) {
            std::string_view bytes = image;  // bytes are immutable: safe to read without the GIL
            py::gil_scoped_release nogil;
            return detail::own_program<Prog>(d.load_program(name, bytes));
          },
          py::arg("name"), py::arg("image"), "Load kernel `name` from a compiled image (RuntimeError if invalid).")
      .def(
          "create_graph",
          [](Dev& d) -> std::unique_ptr<Grph> {
            std::unique_ptr<Graph> g = d.create_graph();
            return std::unique_ptr<Grph>(static_cast<Grph*>(g.release()));  // the device makes its own graphs
          },
          "A new, empty launch graph; None if the device cannot capture launches.")
      .def(
          "synchronize",
          [](Dev& d) {
            if (Queue* q = d.queue()) q->synchronize();
          },
          py::call_guard<py::gil_scoped_release>(), "Wait for all queued work (nothing to wait for without a queue).");

  c.buffer
      .def(py::init([](Dev& d, size_t nbytes) { return std::make_shared<Buffer>(d.allocator(), nbytes); }),
           py::arg("device"), py::arg("nbytes"))
      .def_property_readonly("ptr", &Buffer::ptr, "Device address (ValueError after free()).")
      .def_property_readonly("nbytes", &Buffer::nbytes)
      .def_property_readonly("freed", &Buffer::freed)
      .def_property_readonly("pinned", &Buffer::pinned, "Whether a memoryview, numpy array or launch uses it now.")
      .def_property_readonly("device", &Buffer::device)
      .def("free", &Buffer::free, "Release the memory now (idempotent).");
  enable_buffer_protocol(c.buffer);  // host-visible buffers export their memory; others raise ValueError

  m.def("copyin", &copyin, py::arg("dst"), py::arg("src"), "Copy all of host buffer `src` to the start of `dst`.");
  m.def("copyout", &copyout, py::arg("dst"), py::arg("src"),
        "Fill writable host buffer `dst` from the start of `src`.");
  m.def(
      "transfer",
      [](Buffer& dst, Buffer& src, size_t nbytes) {
        if (nbytes > dst.nbytes() || nbytes > src.nbytes())
          throw UsageError("transfer of " + std::to_string(nbytes) + " bytes does not fit buffers of " +
                           std::to_string(src.nbytes()) + " -> " + std::to_string(dst.nbytes()) + " bytes");
        BufferPin pin_dst(dst), pin_src(src);
        py::gil_scoped_release nogil;
        if (!dst.allocator()->transfer(dst.ptr(), *src.allocator(), src.ptr(), nbytes))
          throw UsageError("no direct copy path from " + src.device() + " to " + dst.device());
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"),
      "Device-to-device copy of `nbytes`, ordered with the queued work of both devices (ValueError without a path).");

  c.program.def_property_readonly("name", &Prog::name)
      .def_property_readonly("device", &Prog::device)
      .def(
          "launch",
          [](Prog& p, py::handle global, py::handle local, bool wait, const py::args& args) -> py::object {
            LaunchDims storage;
            const LaunchDims* dims = dims_from(global, local, &storage);
            LaunchArgs converted(args, kArgs);
            std::optional<double> seconds;
            {
              py::gil_scoped_release nogil;  // after `converted`: the GIL is back before the views are released
              seconds = detail::run_launch(p, converted, dims, wait);
            }
            return seconds ? py::object(py::float_(*seconds)) : py::object(py::none());
          },
          "launch(global_size, local_size, wait, *args): launch with these dimensions (None: the default); with "
          "wait, block until the kernel ends and return its seconds (device time where the device can measure it, "
          "else wall time), else return None.")
      .def(
          "__call__",
          [](Prog& p, const py::args& args) {
            LaunchArgs converted(args, kArgs);
            py::gil_scoped_release nogil;
            p.launch(converted.data(), converted.size(), nullptr);
          },
          "Launch with the default dimensions and no wait: the fast path.");

  auto run = [](Grph& g) { g.run(); };
  c.graph
      .def(
          "add",
          [](Grph& g, std::shared_ptr<Prog> program, const py::list& args, py::handle global, py::handle local) {
            LaunchDims storage;
            const LaunchDims* dims = dims_from(global, local, &storage);
            return g.add(std::move(program), to_bound_args(args, kArgs), dims);
          },
          py::arg("program"), py::arg("args"), py::arg("global_size") = py::none(),
          py::arg("local_size") = py::none(), "Append a launch; returns its index.")
      .def(
          "set_arg",
          [](Grph& g, size_t launch, size_t arg, py::handle value) {
            g.set_arg(launch, arg, to_bound_arg(value, arg, kArgs));
          },
          py::arg("launch"), py::arg("arg"), py::arg("value"), "Replace one argument for later replays.")
      .def(
          "set_arg_many",
          [](Grph& g, const py::list& slots, py::handle value) {
            // one call for a variable that many launches take (a decode step's position): the JIT's replay would
            // otherwise cross into C++ once a launch
            if (slots.size() % 2 != 0) throw UsageError("set_arg_many takes a flat list of (launch, arg) pairs");
            for (size_t i = 0; i < slots.size(); i += 2) {
              size_t launch = slots[i].cast<size_t>(), arg = slots[i + 1].cast<size_t>();
              g.set_arg(launch, arg, to_bound_arg(value, arg, kArgs));
            }
          },
          py::arg("slots"), py::arg("value"),
          "set_arg(launch, arg, value) for each (launch, arg) of the flat list `slots`.")
      .def(
          "set_dims",
          [](Grph& g, size_t launch, py::handle global, py::handle local) {
            LaunchDims dims;
            dims_from(global, local, &dims);
            if (!g.set_dims(launch, dims)) throw UsageError("this graph cannot change launch dimensions");
          },
          py::arg("launch"), py::arg("global_size"), py::arg("local_size"),
          "Replace one launch's dimensions for later replays.")
      .def("__call__", run, py::call_guard<py::gil_scoped_release>(), "Replay every launch in order.")
      .def("run", run, py::call_guard<py::gil_scoped_release>(), "Same as calling the graph.")
      .def("__len__", &Grph::size);
  return c;
}

}  // namespace tg::pyb
