// Python bindings of the CUDA runtime: tinygrad.runtime._cuda. Bindings only: the surface every runtime shares comes
// from csrc/pybind_runtime.h, the logic from the plain C++ files next to this one. Importing the module never
// touches the driver: the first Device (or driver_version/device_count) loads libcuda.so.1, and NVRTC is loaded by
// nvrtc_load.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "buffer.h"
#include "cuda_device.h"
#include "cuda_graph.h"
#include "cuda_multi_graph.h"
#include "cuda_program.h"
#include "driver.h"
#include "nccl.h"
#include "nvrtc_compiler.h"
#include "pinned_host.h"
#include "pybind_runtime.h"

namespace py = pybind11;
using tg::cuda::CudaDevice;
using tg::cuda::CudaGraph;
using tg::cuda::CudaMultiGraph;
using tg::cuda::CudaProgram;
using tg::cuda::Communicator;
using tg::cuda::PinnedHostBuffer;

namespace {

// Pins every buffer of a collective while it is queued without the GIL.
std::vector<tg::BufferPin<>> pin_all(const std::vector<tg::Buffer*>& a, const std::vector<tg::Buffer*>& b) {
  std::vector<tg::BufferPin<>> pins;
  for (const auto* list : {&a, &b})
    for (tg::Buffer* buf : *list)
      if (buf != nullptr) pins.emplace_back(*buf);
  return pins;
}

// A tensor-map spec as Python passes it: (arg, offset, elem, dims, strides, box, swizzle).
using TensorMapTuple = std::tuple<size_t, std::uint64_t, std::uint32_t, std::vector<std::uint64_t>,
                                  std::vector<std::uint64_t>, std::vector<std::uint32_t>, std::uint32_t>;

struct CudaTraits {
  using Device = CudaDevice;
  using Program = CudaProgram;
  using Graph = CudaGraph;
  static constexpr const char* kBufferClass = "DeviceBuffer";
  static constexpr const char* kBufferDoc =
      "Device memory of one GPU. After free(), .ptr and launches raise ValueError.";
  // A GPU kernel cannot read host memory: numpy arrays and bytearrays are refused, not passed as host pointers.
  static constexpr tg::pyb::ArgPolicy kArgs{false, "a CUDA kernel takes DeviceBuffers and ints"};
};

}  // namespace

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "tinygrad's CUDA runtime: the driver API through dlopen, NVRTC, device memory, kernels and graphs.";
  auto c = tg::pyb::bind_runtime<CudaTraits>(m);

  m.def("driver_version", [] { return tg::cuda::driver()->version; },
        "The CUDA driver's version (12080 = 12.8); loads the driver (RuntimeError naming libcuda.so.1 if absent).");
  m.def("device_count", [] {
    auto api = tg::cuda::driver();
    int n = 0;
    tg::cuda::check(*api, "CUDA", "cuDeviceGetCount", api->cuDeviceGetCount(&n), "counting GPUs");
    return n;
  });
  m.def("use_driver_library", &tg::cuda::use_driver_library, py::arg("path"),
        "Load the driver from `path` instead of libcuda.so.1 (None: libcuda.so.1) for devices opened later.");

  c.device
      .def(py::init([](int ordinal, int staging_slots, size_t staging_slot_bytes, bool cache_freed) {
             return std::make_shared<CudaDevice>(ordinal, tg::cuda::StagingConfig{staging_slot_bytes, staging_slots},
                                                 cache_freed);
           }),
           py::arg("ordinal") = 0, py::arg("staging_slots") = 8, py::arg("staging_slot_bytes") = size_t{4} << 20,
           py::arg("cache_freed") = true,
           "Opens GPU `ordinal`. Freed DeviceBuffers are kept for reuse by size unless `cache_freed` is false.")
      .def_property_readonly("ordinal", [](const CudaDevice& d) { return d.context()->ordinal(); })
      .def_property_readonly("product_name", [](const CudaDevice& d) { return d.context()->product_name(); })
      .def_property_readonly("arch", [](const CudaDevice& d) { return d.context()->arch(); })
      .def_property_readonly("total_memory", [](const CudaDevice& d) { return d.context()->total_memory(); })
      .def_property_readonly("driver_version", [](const CudaDevice& d) { return d.context()->api().version; })
      .def_property_readonly("driver_source", [](const CudaDevice& d) { return d.context()->api().source; })
      .def_property_readonly(
          "stream", [](const CudaDevice& d) { return reinterpret_cast<uintptr_t>(d.context()->stream()); },
          "The CUstream all of the device's work is queued on, as an int (DLPack's stream handshake).")
      .def("attribute", [](const CudaDevice& d, int attr) { return d.context()->attribute(attr); }, py::arg("attr"),
           "A CU_DEVICE_ATTRIBUTE_* value read at open.")
      .def("free_cache", [](const CudaDevice& d) { return d.cuda_allocator()->free_cache(); },
           py::call_guard<py::gil_scoped_release>(), "Return cached freed allocations to the driver; bytes released.")
      .def_property_readonly("cached_bytes", [](const CudaDevice& d) { return d.cuda_allocator()->cached_bytes(); })
      .def_property_readonly("pinned_staging_slots",
                             [](const CudaDevice& d) { return d.cuda_allocator()->staging().pinned_slots(); });

  c.program
      .def(py::init([](CudaDevice& dev, const std::string& name, const py::bytes& image) {
             std::string_view bytes = image;
             py::gil_scoped_release nogil;
             return std::make_shared<CudaProgram>(dev.context(), name, bytes);
           }),
           py::arg("device"), py::arg("name"), py::arg("image"))
      .def_property_readonly("num_regs", &CudaProgram::num_regs)
      .def_property("dynamic_shared", &CudaProgram::dynamic_shared, &CudaProgram::set_dynamic_shared,
                    "Bytes of dynamic shared memory every launch gives the kernel (0: none; its `extern __shared__`"
                    " array). Setting it above 48 KB opts the kernel in; RuntimeError where the device has less.")
      .def_property("waits_for_grid", &CudaProgram::waits_for_grid, &CudaProgram::set_waits_for_grid,
                    "True where the kernel's first instruction is griddepcontrol.wait, so a graph may launch it "
                    "programmatically after the kernel before it (CudaGraph.programmatic). Set by the loader.")
      .def_property_readonly("max_threads_per_block", &CudaProgram::max_threads_per_block)
      .def(
          "set_tensor_maps",
          [](CudaProgram& p, const std::vector<TensorMapTuple>& specs) {
            std::vector<tg::cuda::TensorMapSpec> out;
            for (const auto& [arg, offset, elem, dims, strides, box, swizzle] : specs)
              out.push_back({arg, offset, elem, dims, strides, box, swizzle});
            p.set_tensor_maps(std::move(out));
          },
          py::arg("specs"),
          "Declare the kernel's trailing TMA tensor-map parameters: (arg, offset, elem, dims, strides, box, swizzle)"
          " each, as the kernel's ProgramSpec.tensor_maps gives them. Launches then take the ordinary arguments "
          "only; each map is encoded from buffer argument `arg`'s address + offset (ValueError for a spec that does "
          "not fit the kernel; RuntimeError where the driver has no cuTensorMapEncodeTiled).")
      .def_property_readonly(
          "tensor_maps",
          [](const CudaProgram& p) {
            py::list out;
            for (const auto& s : p.tensor_maps())
              out.append(py::make_tuple(s.arg, s.offset, s.elem, py::tuple(py::cast(s.dims)),
                                        py::tuple(py::cast(s.strides)), py::tuple(py::cast(s.box)), s.swizzle));
            return out;
          },
          "The tensor maps set_tensor_maps declared, as its tuples (sizes as tuples).")
      .def_property_readonly(
          "params",
          [](const CudaProgram& p) -> py::object {
            if (!p.layout_known()) return py::none();
            py::list out;
            for (const auto& s : p.params()) out.append(py::make_tuple(s.offset, s.size));
            return out;
          },
          "[(offset, size)] of each kernel parameter, or None when the driver cannot tell (before CUDA 12.4).");

  c.graph.def(py::init([](CudaDevice& dev) { return std::make_unique<CudaGraph>(dev.context()); }), py::arg("device"))
      .def_property_readonly("instantiations", &CudaGraph::instantiations)
      .def_property_readonly("node_updates", &CudaGraph::node_updates)
      .def_property("programmatic", &CudaGraph::programmatic, &CudaGraph::set_programmatic,
                    "Programmatic dependent launch (sm_90+, CUDA 12.3+): kernels whose program waits_for_grid follow"
                    " the kernel before them through programmatic edges. Off by default; a change rebuilds the graph.")
      .def_property_readonly("programmatic_edges", &CudaGraph::programmatic_edges);

  py::class_<PinnedHostBuffer, std::shared_ptr<PinnedHostBuffer>> host(
      m, "HostBuffer", py::module_local(), py::buffer_protocol(),
      "Page-locked host memory that the GPU copies to and from directly (copyin_pinned, copyout_pinned). "
      "memoryview() and numpy.frombuffer() view it in place, writable; free() raises BufferError while they do.");
  host.def(py::init([](CudaDevice& dev, size_t nbytes) {
             py::gil_scoped_release nogil;  // pinning costs milliseconds per hundred MiB
             return std::make_shared<PinnedHostBuffer>(dev.context(), nbytes);
           }),
           py::arg("device"), py::arg("nbytes"),
           "Pins `nbytes` of host memory, usable with every GPU (MemoryError or RuntimeError naming the driver error).")
      .def_property_readonly(
          "ptr", [](const PinnedHostBuffer& b) { return reinterpret_cast<std::uintptr_t>(b.host_ptr()); },
          "Host address (ValueError after free()).")
      .def_property_readonly("nbytes", &PinnedHostBuffer::nbytes)
      .def_property_readonly("freed", &PinnedHostBuffer::freed)
      .def_property_readonly("device", &PinnedHostBuffer::device, "The device whose context pinned the memory.")
      .def("free", &PinnedHostBuffer::free, "Unpin and release the memory now (idempotent).");
  tg::pyb::enable_buffer_protocol(host);

  m.def(
      "copyin_pinned",
      [](tg::Buffer& dst, PinnedHostBuffer& src, size_t nbytes) {
        tg::BufferPin pin_dst(dst);
        tg::BufferPin pin_src(src);
        py::gil_scoped_release nogil;
        tg::cuda::copy_pinned_to_device(dst, src, nbytes);
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"),
      "Copy the first `nbytes` of HostBuffer `src` to the start of DeviceBuffer `dst` in one DMA, after the work "
      "queued on dst's GPU; returns when the copy is done (ValueError naming both sizes if either is too small).");
  m.def(
      "copyout_pinned",
      [](PinnedHostBuffer& dst, tg::Buffer& src, size_t nbytes) {
        tg::BufferPin pin_dst(dst);
        tg::BufferPin pin_src(src);
        py::gil_scoped_release nogil;
        tg::cuda::copy_device_to_pinned(dst, src, nbytes);
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"),
      "Copy the first `nbytes` of DeviceBuffer `src` to the start of HostBuffer `dst` in one DMA, after the work "
      "queued on src's GPU; returns when the copy is done (ValueError naming both sizes if either is too small).");

  m.def(
      "nvrtc_load",
      [](const std::vector<std::string>& candidates) { return tg::cuda::load_nvrtc(candidates)->source; },
      py::arg("candidates"),
      "Load NVRTC from the first loadable candidate; returns the candidate that loaded (its name or path). Loaded "
      "once: later calls return the one loaded until nvrtc_unload().");
  m.def("nvrtc_unload", &tg::cuda::unload_nvrtc, "Forget the NVRTC loaded, so the next nvrtc_load loads again.");
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

  m.def(
      "nccl_load",
      [](const std::vector<std::string>& candidates) { return tg::cuda::load_nccl(candidates)->source; },
      py::arg("candidates"),
      "Load NCCL from the first loadable candidate (soname or path); returns the one that loaded. Loaded once: later "
      "calls return it until nccl_unload(). RuntimeError naming NCCL and every candidate when none loads.");
  m.def("nccl_unload", &tg::cuda::unload_nccl, "Forget the NCCL loaded, so the next nccl_load loads again.");
  m.def("nccl_version", [] { return tg::cuda::nccl()->version; },
        "ncclGetVersion of the loaded NCCL (22305 = 2.23.5).");

  py::class_<Communicator, std::shared_ptr<Communicator>>(
      m, "Communicator", py::module_local(),
      "NCCL communicators over distinct GPUs of this process, rank r on devices[r] (ncclCommInitAll). Collectives take "
      "one DeviceBuffer per rank, are queued on each device's stream inside one NCCL group, and return at once.")
      .def(py::init([](const std::vector<CudaDevice*>& devices) {
             std::vector<std::shared_ptr<tg::cuda::Context>> contexts;
             for (const CudaDevice* d : devices) contexts.push_back(d->context());
             auto api = tg::cuda::nccl();
             py::gil_scoped_release nogil;  // ncclCommInitAll takes hundreds of milliseconds
             return std::make_shared<Communicator>(api, contexts);
           }),
           py::arg("devices"))
      .def_property_readonly("size", &Communicator::size)
      .def(
          "all_reduce",
          [](const Communicator& c, const std::vector<tg::Buffer*>& send, const std::vector<tg::Buffer*>& recv,
             size_t count, const std::string& dtype, const std::string& op) {
            auto type = tg::cuda::nccl_dtype(dtype);
            auto red = tg::cuda::nccl_op(op);
            auto pins = pin_all(send, recv);
            py::gil_scoped_release nogil;
            c.all_reduce(send, recv, count, type, red);
          },
          py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum",
          "recv[r] = op over ranks of send (count elements); dtype 'float32', 'bfloat16', ...; op sum/prod/max/min.")
      .def(
          "all_gather",
          [](const Communicator& c, const std::vector<tg::Buffer*>& send, const std::vector<tg::Buffer*>& recv,
             size_t count, const std::string& dtype) {
            auto type = tg::cuda::nccl_dtype(dtype);
            auto pins = pin_all(send, recv);
            py::gil_scoped_release nogil;
            c.all_gather(send, recv, count, type);
          },
          py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"),
          "recv[r] = every rank's send (count elements each) in rank order.")
      .def(
          "reduce_scatter",
          [](const Communicator& c, const std::vector<tg::Buffer*>& send, const std::vector<tg::Buffer*>& recv,
             size_t count, const std::string& dtype, const std::string& op) {
            auto type = tg::cuda::nccl_dtype(dtype);
            auto red = tg::cuda::nccl_op(op);
            auto pins = pin_all(send, recv);
            py::gil_scoped_release nogil;
            c.reduce_scatter(send, recv, count, type, red);
          },
          py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum",
          "recv[r] = part r (count elements) of op over ranks of send (size * count elements each).");

  constexpr const tg::pyb::ArgPolicy& kArgs = CudaTraits::kArgs;
  py::class_<CudaMultiGraph>(
      m, "MultiGraph", py::module_local(),
      "A capture over several GPUs replayed as one CUDA graph: kernels as kernel nodes, NCCL collectives and copies "
      "as stream-captured child graphs, captured again when their buffers change (runtimes/cuda/cuda_multi_graph.h).")
      .def(py::init([](const std::vector<CudaDevice*>& devices) {
             std::vector<std::shared_ptr<tg::cuda::Context>> contexts;
             for (const CudaDevice* d : devices) contexts.push_back(d->context());
             return std::make_unique<CudaMultiGraph>(contexts);
           }),
           py::arg("devices"))
      .def(
          "add",
          [](CudaMultiGraph& g, std::shared_ptr<CudaProgram> program, const py::list& args, py::handle global,
             py::handle local) {
            tg::LaunchDims storage;
            const tg::LaunchDims* dims = tg::pyb::dims_from(global, local, &storage);
            return g.add(std::move(program), tg::pyb::to_bound_args(args, kArgs), dims);
          },
          py::arg("program"), py::arg("args"), py::arg("global_size") = py::none(),
          py::arg("local_size") = py::none(), "Append a kernel launch; returns its step index.")
      .def(
          "add_collective",
          [](CudaMultiGraph& g, std::shared_ptr<Communicator> comm, const std::string& kind, const py::list& bufs,
             size_t count, const std::string& dtype, const std::string& op) {
            tg::cuda::CollectiveSpec spec{tg::cuda::collective_kind(kind), count, tg::cuda::nccl_dtype(dtype),
                                          tg::cuda::nccl_op(op)};
            return g.add_collective(std::move(comm), spec, tg::pyb::to_bound_args(bufs, kArgs));
          },
          py::arg("comm"), py::arg("kind"), py::arg("bufs"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum",
          "Append an NCCL collective ('all_reduce', 'all_gather', 'reduce_scatter'); `bufs`: every rank's receive "
          "buffer, then every rank's send buffer. Returns its step index.")
      .def(
          "add_copy",
          [](CudaMultiGraph& g, const py::list& bufs, size_t nbytes) {
            return g.add_copy(tg::pyb::to_bound_args(bufs, kArgs), nbytes);
          },
          py::arg("bufs"), py::arg("nbytes"), "Append a copy of `nbytes` from bufs[1] to bufs[0]; its step index.")
      .def(
          "set_arg",
          [](CudaMultiGraph& g, size_t node, size_t arg, py::handle value) {
            g.set_arg(node, arg, tg::pyb::to_bound_arg(value, arg, kArgs));
          },
          py::arg("launch"), py::arg("arg"), py::arg("value"), "Replace one argument or buffer for later replays.")
      .def(
          "set_arg_many",
          [](CudaMultiGraph& g, const py::list& slots, py::handle value) {
            if (slots.size() % 2 != 0) throw tg::UsageError("set_arg_many takes a flat list of (launch, arg) pairs");
            for (size_t i = 0; i < slots.size(); i += 2) {
              size_t node = slots[i].cast<size_t>(), arg = slots[i + 1].cast<size_t>();
              g.set_arg(node, arg, tg::pyb::to_bound_arg(value, arg, kArgs));
            }
          },
          py::arg("slots"), py::arg("value"), "set_arg(launch, arg, value) for each (launch, arg) of `slots`.")
      .def(
          "set_dims",
          [](CudaMultiGraph& g, size_t node, py::handle global, py::handle local) {
            tg::LaunchDims dims;
            tg::pyb::dims_from(global, local, &dims);
            if (!g.set_dims(node, dims)) throw tg::UsageError("step " + std::to_string(node) + " is not a kernel");
          },
          py::arg("launch"), py::arg("global_size"), py::arg("local_size"), "Replace a kernel's launch dimensions.")
      .def("__call__", &CudaMultiGraph::run, py::call_guard<py::gil_scoped_release>(),
           "Replay every step; returns without waiting for the GPUs.")
      .def("__len__", &CudaMultiGraph::size)
      .def_property_readonly("instantiations", &CudaMultiGraph::instantiations)
      .def_property_readonly("node_updates", &CudaMultiGraph::node_updates)
      .def_property_readonly("recaptures", &CudaMultiGraph::recaptures);
}
