// Python bindings of the CUDA runtime: tinygrad.runtime._cuda. Bindings only; the logic lives in the plain C++
// files next to this one and in csrc/pybind_helpers.h. Importing the module never touches the driver: the first
// Device (or driver_version/device_count) loads libcuda.so.1, and NVRTC is loaded by nvrtc_load.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "buffer.h"
#include "cuda_device.h"
#include "cuda_graph.h"
#include "cuda_program.h"
#include "driver.h"
#include "fake_driver.h"
#include "nvrtc_compiler.h"
#include "pybind_helpers.h"
#include "runtime.h"

namespace py = pybind11;
using tg::Buffer;
using tg::KernelArg;
using tg::LaunchDims;
using tg::cuda::CudaDevice;
using tg::cuda::CudaGraph;
using tg::cuda::CudaProgram;

namespace {

std::string arg_name(size_t i) { return "args[" + std::to_string(i) + "]"; }

std::int64_t to_int(py::handle obj, size_t i) {
  py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!number) throw py::error_already_set();
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow != 0) throw py::value_error(arg_name(i) + ": integer does not fit in 64 bits");
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

// Kernel arguments from Python: DeviceBuffers (pinned until the launch is queued) and ints. Host memory is refused:
// a GPU kernel cannot read it.
class LaunchArgs {
 public:
  LaunchArgs(const py::args& args) {
    values_.reserve(args.size());
    try {
      for (size_t i = 0; i < args.size(); ++i) add(args[i], i);
    } catch (...) {
      release();
      throw;
    }
  }
  ~LaunchArgs() { release(); }
  LaunchArgs(const LaunchArgs&) = delete;
  LaunchArgs& operator=(const LaunchArgs&) = delete;
  const KernelArg* data() const { return values_.data(); }
  size_t size() const { return values_.size(); }

 private:
  void add(py::handle obj, size_t i) {
    if (py::isinstance<Buffer>(obj)) {
      Buffer& b = obj.cast<Buffer&>();
      b.pin();
      pinned_.push_back(&b);
      values_.push_back(KernelArg::pointer(b.ptr()));  // after pinning: throws (ValueError) if already freed
    } else if (PyIndex_Check(obj.ptr()) && !PyObject_CheckBuffer(obj.ptr())) {
      values_.push_back(KernelArg::integer(to_int(obj, i)));
    } else {
      throw py::type_error(arg_name(i) + ": a CUDA kernel takes DeviceBuffers and ints, got " +
                           std::string(Py_TYPE(obj.ptr())->tp_name));
    }
  }
  void release() noexcept {
    for (Buffer* b : pinned_) b->unpin();
    pinned_.clear();
  }
  std::vector<KernelArg> values_;
  std::vector<Buffer*> pinned_;
};

tg::BoundArg bound_arg(py::handle obj, size_t i) {
  tg::BoundArg arg;
  if (py::isinstance<Buffer>(obj)) {
    arg.buffer = obj.cast<std::shared_ptr<Buffer>>();
    arg.value = KernelArg::pointer(arg.buffer->ptr());
  } else if (PyIndex_Check(obj.ptr()) && !PyObject_CheckBuffer(obj.ptr())) {
    arg.value = KernelArg::integer(to_int(obj, i));
  } else {
    throw py::type_error(arg_name(i) + ": a CUDA graph launch takes DeviceBuffers and ints, got " +
                         std::string(Py_TYPE(obj.ptr())->tp_name));
  }
  return arg;
}

// (x, y, z) from None (all 1) or a sequence of at most three positive ints.
void read_dims(py::handle seq, std::uint32_t out[3], const char* what) {
  out[0] = out[1] = out[2] = 1;
  if (seq.is_none()) return;
  py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
  if (s.size() > 3) throw py::value_error(std::string(what) + " has more than 3 dimensions");
  for (size_t i = 0; i < s.size(); ++i) {
    long long v = s[i].cast<long long>();
    if (v < 1 || v > 0xFFFFFFFFLL)
      throw py::value_error(std::string(what) + " dimensions must be between 1 and 2**32-1, got " +
                            std::to_string(v));
    out[i] = static_cast<std::uint32_t>(v);
  }
}

LaunchDims dims_from(py::handle grid, py::handle block) {
  LaunchDims d;
  read_dims(grid, d.global, "global_size");
  read_dims(block, d.local, "local_size");
  return d;
}

py::tuple call_tuple(const tg::cuda::fake::Call& c) {
  return py::make_tuple(c.name, py::tuple(py::cast(c.args)), c.text, py::bytes(c.data));
}

}  // namespace

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "tinygrad's CUDA runtime: the driver API through dlopen, NVRTC, device memory, kernels and graphs.";
  tg::pyb::register_exception_translators();

  m.def("abi_version", [] { return TG_RUNTIME_ABI_VERSION; }, "Version of csrc/runtime.h this module was built with.");
  m.def("driver_version", [] { return tg::cuda::driver()->version; },
        "The CUDA driver's version (12080 = 12.8); loads the driver (RuntimeError naming libcuda.so.1 if absent).");
  m.def("device_count", [] {
    auto api = tg::cuda::driver();
    int n = 0;
    tg::cuda::check(*api, "CUDA", "cuDeviceGetCount", api->cuDeviceGetCount(&n), "counting GPUs");
    return n;
  });

  py::class_<CudaDevice, std::shared_ptr<CudaDevice>>(m, "Device", "One GPU: its context, stream and memory.")
      .def(py::init([](int ordinal, int staging_slots, size_t staging_slot_bytes, bool cache_freed) {
             return std::make_shared<CudaDevice>(ordinal, tg::cuda::StagingConfig{staging_slot_bytes, staging_slots},
                                                 cache_freed);
           }),
           py::arg("ordinal") = 0, py::arg("staging_slots") = 8, py::arg("staging_slot_bytes") = size_t{4} << 20,
           py::arg("cache_freed") = true,
           "Opens GPU `ordinal`. Freed DeviceBuffers are kept for reuse by size unless `cache_freed` is false.")
      .def_property_readonly("name", &CudaDevice::name)
      .def_property_readonly("ordinal", [](const CudaDevice& d) { return d.context()->ordinal(); })
      .def_property_readonly("product_name", [](const CudaDevice& d) { return d.context()->product_name(); })
      .def_property_readonly("arch", [](const CudaDevice& d) { return d.context()->arch(); })
      .def_property_readonly("total_memory", [](const CudaDevice& d) { return d.context()->total_memory(); })
      .def_property_readonly("driver_version", [](const CudaDevice& d) { return d.context()->api().version; })
      .def_property_readonly("driver_source", [](const CudaDevice& d) { return d.context()->api().source; })
      .def("attribute", [](const CudaDevice& d, int attr) { return d.context()->attribute(attr); }, py::arg("attr"),
           "A CU_DEVICE_ATTRIBUTE_* value read at open.")
      .def("synchronize", [](const CudaDevice& d) { d.context()->synchronize(); },
           py::call_guard<py::gil_scoped_release>(), "Wait for all queued work on this GPU.")
      .def("free_cache", [](const CudaDevice& d) { return d.cuda_allocator()->free_cache(); },
           py::call_guard<py::gil_scoped_release>(), "Return cached freed allocations to the driver; bytes released.")
      .def_property_readonly("cached_bytes", [](const CudaDevice& d) { return d.cuda_allocator()->cached_bytes(); })
      .def_property_readonly("pinned_staging_slots",
                             [](const CudaDevice& d) { return d.cuda_allocator()->staging().pinned_slots(); });

  py::class_<Buffer, std::shared_ptr<Buffer>>(
      m, "DeviceBuffer", py::module_local(),
      "Device memory of one GPU. After free(), .ptr and launches raise ValueError.")
      .def(py::init([](CudaDevice& dev, size_t nbytes) { return std::make_shared<Buffer>(dev.allocator(), nbytes); }),
           py::arg("device"), py::arg("nbytes"))
      .def_property_readonly("ptr", &Buffer::ptr, "Device address (ValueError after free()).")
      .def_property_readonly("nbytes", &Buffer::nbytes)
      .def_property_readonly("freed", &Buffer::freed)
      .def_property_readonly("device", &Buffer::device)
      .def("free", &Buffer::free, "Release the memory now (idempotent).");

  m.def("copyin", &tg::pyb::copyin, py::arg("dst"), py::arg("src"),
        "Copy all of buffer `src` (host memory) to the start of DeviceBuffer `dst`.");
  m.def("copyout", &tg::pyb::copyout, py::arg("dst"), py::arg("src"),
        "Fill writable host buffer `dst` from the start of DeviceBuffer `src`.");
  m.def(
      "transfer",
      [](Buffer& dst, Buffer& src, size_t nbytes) {
        if (nbytes > dst.nbytes() || nbytes > src.nbytes())
          throw tg::UsageError("transfer of " + std::to_string(nbytes) + " bytes does not fit buffers of " +
                               std::to_string(src.nbytes()) + " -> " + std::to_string(dst.nbytes()) + " bytes");
        tg::BufferPin pin_dst(dst), pin_src(src);
        py::gil_scoped_release nogil;
        if (!dst.allocator()->transfer(dst.ptr(), *src.allocator(), src.ptr(), nbytes))
          throw tg::UsageError("no direct copy path from " + src.device() + " to " + dst.device());
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"),
      "Device-to-device copy (same GPU or between GPUs), queued in order with both GPUs' work.");

  py::class_<CudaProgram, std::shared_ptr<CudaProgram>>(m, "Program", "A kernel of a loaded CUBIN or PTX image.")
      .def(py::init([](CudaDevice& dev, const std::string& name, const py::bytes& image) {
             std::string_view bytes = image;
             py::gil_scoped_release nogil;
             return std::make_shared<CudaProgram>(dev.context(), name, bytes);
           }),
           py::arg("device"), py::arg("name"), py::arg("image"))
      .def(
          "launch",
          [](CudaProgram& p, py::handle grid, py::handle block, bool wait, const py::args& args) -> py::object {
            LaunchDims dims = dims_from(grid, block);
            LaunchArgs converted(args);
            double seconds = 0;
            {
              py::gil_scoped_release nogil;
              if (wait) seconds = p.launch_timed(converted.data(), converted.size(), &dims);
              else p.launch(converted.data(), converted.size(), &dims);
            }
            return wait ? py::object(py::float_(seconds)) : py::object(py::none());
          },
          "launch(global_size, local_size, wait, *args): queue the kernel (grid of global_size blocks of local_size "
          "threads); with wait, block until it ends and return its GPU seconds.")
      .def_property_readonly("name", &CudaProgram::name)
      .def_property_readonly("num_regs", &CudaProgram::num_regs)
      .def_property_readonly("max_threads_per_block", &CudaProgram::max_threads_per_block)
      .def_property_readonly("params", [](const CudaProgram& p) -> py::object {
        if (!p.layout_known()) return py::none();
        py::list out;
        for (const auto& s : p.params()) out.append(py::make_tuple(s.offset, s.size));
        return out;
      }, "[(offset, size)] of each kernel parameter, or None when the driver cannot tell (before CUDA 12.4).");

  py::class_<CudaGraph>(m, "Graph", "Launches replayed as one CUDA graph, patched in place between replays.")
      .def(py::init([](CudaDevice& dev) { return std::make_unique<CudaGraph>(dev.context()); }), py::arg("device"))
      .def(
          "add",
          [](CudaGraph& g, std::shared_ptr<CudaProgram> program, const py::list& args, py::handle grid,
             py::handle block) {
            std::vector<tg::BoundArg> bound;
            for (size_t i = 0; i < args.size(); ++i) bound.push_back(bound_arg(args[i], i));
            LaunchDims dims = dims_from(grid, block);
            return g.add(std::move(program), std::move(bound), &dims);
          },
          py::arg("program"), py::arg("args"), py::arg("global_size") = py::none(),
          py::arg("local_size") = py::none(), "Append a launch; returns its index.")
      .def(
          "set_arg", [](CudaGraph& g, size_t launch, size_t arg, py::handle v) { g.set_arg(launch, arg, bound_arg(v, arg)); },
          py::arg("launch"), py::arg("arg"), py::arg("value"), "Replace one argument for later replays.")
      .def(
          "set_dims", [](CudaGraph& g, size_t launch, py::handle grid, py::handle block) {
            g.set_dims(launch, dims_from(grid, block));
          },
          py::arg("launch"), py::arg("global_size"), py::arg("local_size"))
      .def("__call__", &CudaGraph::run, py::call_guard<py::gil_scoped_release>(), "Queue one replay.")
      .def("__len__", &CudaGraph::size)
      .def_property_readonly("instantiations", &CudaGraph::instantiations)
      .def_property_readonly("node_updates", &CudaGraph::node_updates);

  m.def("nvrtc_load", [](const std::vector<std::string>& candidates) { return tg::cuda::load_nvrtc(candidates)->source; },
        py::arg("candidates"), "Load NVRTC from the first loadable candidate (once per process); returns its path.");
  m.def("nvrtc_version", [] { return tg::cuda::nvrtc_version(*tg::cuda::nvrtc()); });
  m.def("nvrtc_supported_archs", [] { return tg::cuda::nvrtc_supported_archs(*tg::cuda::nvrtc()); });
  m.def(
      "nvrtc_compile",
      [](const std::string& source, const std::string& name, const std::vector<std::string>& options, bool ptx) {
        tg::cuda::CompileOutput out;
        {
          py::gil_scoped_release nogil;
          out = tg::cuda::nvrtc_compile(*tg::cuda::nvrtc(), source, name, options, ptx);
        }
        return py::make_tuple(py::bytes(out.binary), out.log);
      },
      py::arg("source"), py::arg("name"), py::arg("options"), py::arg("ptx") = false,
      "Compile CUDA C with NVRTC: (CUBIN or PTX bytes, log). RuntimeError with NVRTC's log if it does not compile.");

  // Test hooks: a fake driver and NVRTC (runtimes/cuda/fake_driver.h).
  namespace fake = tg::cuda::fake;
  auto t = m.def_submodule("_testing", "A fake CUDA driver and NVRTC for tests without a GPU.");
  t.def(
      "install_fake",
      [](int device_count, int driver_version, std::uint64_t memory_bytes, std::pair<int, int> cc, bool param_info) {
        fake::install({device_count, driver_version, memory_bytes, cc.first, cc.second, param_info});
      },
      py::arg("device_count") = 1, py::arg("driver_version") = 12080, py::arg("memory_bytes") = std::uint64_t{1} << 30,
      py::arg("compute_capability") = std::make_pair(9, 0), py::arg("param_info") = true);
  t.def("uninstall", &fake::uninstall);
  t.def(
      "fail_next",
      [](const std::string& call, py::handle status, int count) {
        int code = py::isinstance<py::str>(status) ? fake::status_from_name(status.cast<std::string>())
                                                   : status.cast<int>();
        if (code < 0) throw py::value_error("unknown status " + py::str(status).cast<std::string>());
        fake::fail_next(call, code, count);
      },
      py::arg("call"), py::arg("status"), py::arg("count") = 1,
      "The next `count` calls of `call` (e.g. 'cuMemAlloc') return `status` (a name or a number).");
  t.def(
      "calls",
      [](const std::string& prefix) {
        py::list out;
        for (const auto& c : fake::calls())
          if (c.name.rfind(prefix, 0) == 0) out.append(call_tuple(c));
        return out;
      },
      py::arg("prefix") = "", "Recorded calls whose name starts with `prefix`: (name, args, text, data).");
  t.def("launches", [] {
    py::list out;
    for (const auto& l : fake::launches())
      out.append(py::make_tuple(l.kernel, py::make_tuple(l.grid[0], l.grid[1], l.grid[2]),
                                py::make_tuple(l.block[0], l.block[1], l.block[2]), py::bytes(l.args), l.from_graph));
    return out;
  }, "Kernel executions: (kernel, grid, block, packed args, from_graph).");
  t.def("clear_records", &fake::clear_records);
  t.def("read", [](std::uint64_t ptr, size_t n) { return py::bytes(fake::read(ptr, n)); });
  t.def("write", [](std::uint64_t ptr, const py::bytes& data) { fake::write(ptr, std::string(data)); });
  t.def("pending_ops", &fake::pending_ops);
  t.def("device_allocations", &fake::device_allocations);
  t.def("pinned_allocations", &fake::pinned_allocations);
  t.def("load_driver_library", [](const std::string& path) { tg::cuda::load_driver_library(path); },
        py::arg("path"), "Load a driver library the way libcuda.so.1 is loaded (to test the error for a missing one).");
}
