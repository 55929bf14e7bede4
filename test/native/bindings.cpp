// tinygrad_test_doubles: the test doubles of the C++ runtimes, for tests only (built by test/native_doubles.py,
// never shipped). Bindings only.
//
//   fake_cuda      inspect and configure the fake CUDA driver and NVRTC. This same library exports the driver's
//                  bootstrap entry points and NVRTC's functions, so _cuda loads it by path as it loads the real ones.
//   fake_metal     configure and inspect the fake Objective-C runtime and Metal (fake_objc.h); this library exports
//                  objc_msgSend and the other entry points, so _metal loads it in place of libobjc and Metal.
//   fault_host_os  a HostOS that fails on request, installed into _cpu through its host-OS table seam.
//   fake_kfd       a fake /dev/kfd, render nodes and KFD topology, installed into _amd through its OS table seam.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <utility>

#include "fake_driver.h"
#include "fake_kfd.h"
#include "fake_objc.h"
#include "fault_host_os.h"

namespace py = pybind11;
namespace fake = tg::cuda::fake;

namespace {

py::tuple call_tuple(const fake::Call& c) {
  return py::make_tuple(c.name, py::tuple(py::cast(c.args)), c.text, py::bytes(c.data));
}

}  // namespace

PYBIND11_MODULE(tinygrad_test_doubles, m) {
  m.doc() = "Test doubles of tinygrad's C++ runtimes (test/native). Never part of the package.";

  auto t = m.def_submodule("fake_cuda", "A fake CUDA driver and NVRTC for tests without a GPU (fake_driver.h).");
  t.def(
      "install",
      [](int device_count, int driver_version, std::uint64_t memory_bytes, std::pair<int, int> cc, bool param_info,
         bool tensor_map) {
        fake::install({device_count, driver_version, memory_bytes, cc.first, cc.second, param_info, tensor_map});
      },
      py::arg("device_count") = 1, py::arg("driver_version") = 12080, py::arg("memory_bytes") = std::uint64_t{1} << 30,
      py::arg("compute_capability") = std::make_pair(9, 0), py::arg("param_info") = true,
      py::arg("tensor_map") = true,
      "A fresh simulated machine; the runtime sees it once it loads this library as its driver.");
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
  t.def(
      "launches",
      [] {
        py::list out;
        for (const auto& l : fake::launches())
          out.append(py::make_tuple(l.kernel, py::make_tuple(l.grid[0], l.grid[1], l.grid[2]),
                                    py::make_tuple(l.block[0], l.block[1], l.block[2]), py::bytes(l.args),
                                    l.from_graph));
        return out;
      },
      "Kernel executions: (kernel, grid, block, packed args, from_graph).");
  t.def("clear_records", &fake::clear_records);
  t.def("read", [](std::uint64_t ptr, size_t n) { return py::bytes(fake::read(ptr, n)); });
  t.def("write", [](std::uint64_t ptr, const py::bytes& data) { fake::write(ptr, std::string(data)); });
  t.def("pending_ops", &fake::pending_ops);
  t.def("device_allocations", &fake::device_allocations);
  t.def("pinned_allocations", &fake::pinned_allocations);

  namespace fm = tg::metal::fake;
  auto mt = m.def_submodule("fake_metal", "A fake Objective-C runtime and Metal framework (fake_objc.h).");
  mt.def(
      "install",
      [](const std::string& compiler, const std::string& shim, const std::string& cache_dir, unsigned max_threads,
         std::uint64_t memory_bytes, bool icb) {
        fm::install({compiler, shim, cache_dir, max_threads, memory_bytes, icb});
      },
      py::arg("compiler"), py::arg("shim"), py::arg("cache_dir"), py::arg("max_threads") = 1024,
      py::arg("memory_bytes") = std::uint64_t{1} << 32, py::arg("icb") = true,
      "A fresh fake GPU: MSL is built for the host by `compiler` against the `shim` header, cached in `cache_dir`.");
  mt.def("uninstall", &fm::uninstall);
  mt.def("fail_next", &fm::fail_next, py::arg("what"), py::arg("code") = 0, py::arg("count") = 1,
         "'library', 'buffer' or 'command_buffer' (ending with MTLCommandBufferError `code`) fails next.");
  mt.def("live_objects", &fm::live_objects, "Class name -> objects alive.");
  mt.def("violations", &fm::violations, "Rules broken by the messages sent, in order.");
  mt.def(
      "dispatches",
      [] {
        py::list out;
        for (const auto& d : fm::dispatches())
          out.append(py::make_tuple(d.kernel, py::make_tuple(d.grid[0], d.grid[1], d.grid[2]),
                                    py::make_tuple(d.block[0], d.block[1], d.block[2]), d.command_buffer));
        return out;
      },
      "Kernel executions: (kernel, grid, block, command buffer id).");
  mt.def("messages", &fm::messages);
  mt.def("committed", &fm::committed);
  mt.def("clear_records", &fm::clear_records);

  auto f = m.def_submodule("fault_host_os", "A HostOS that fails on request (fault_host_os.h).");
  f.def(
      "table",
      [](std::uintptr_t inner) {
        return reinterpret_cast<std::uintptr_t>(tg::test::fault_host_os(reinterpret_cast<const tg_host_os*>(inner)));
      },
      py::arg("inner"), "Address of the fault injector's tg_host_os table, delegating to the table at `inner`.");
  f.def("fail_next_alloc", &tg::test::fail_next_allocs, py::arg("n") = 1);
  f.def("fail_next_load", &tg::test::fail_next_loads, py::arg("n") = 1);

  namespace kfd = tg::amd::fake;
  auto k = m.def_submodule("fake_kfd", "A fake KFD that runs dispatches through host twins (fake_kfd.h).");
  k.def(
      "install",
      [](const std::vector<std::string>& gpus) {
        std::vector<kfd::GpuModel> models;
        for (const auto& g : gpus) models.push_back(kfd::model(g));
        return reinterpret_cast<std::uintptr_t>(kfd::install(models));
      },
      py::arg("gpus"), "A fresh machine with these GPU models; returns the tg_amd_os table's address for _amd.set_os.");
  k.def("uninstall", &kfd::uninstall);
  k.def("table", [] { return reinterpret_cast<std::uintptr_t>(kfd::table()); }, "The tg_amd_os table's address.");
  k.def("fail_next", &kfd::fail_next, py::arg("nr"), py::arg("errno"), py::arg("count") = 1, py::arg("skip") = 0,
        "After `skip` more successful ones, the next `count` ioctls number `nr` fail with `errno`.");
  k.def("hang", &kfd::hang, py::arg("on") = true, "While on, doorbell writes are ignored: the queues hang.");
  k.def("stats", [] {
    kfd::Stats s = kfd::stats();
    py::dict d;
    d["allocations"] = s.allocations;
    d["gpu_mappings"] = s.gpu_mappings;
    d["cpu_mappings"] = s.cpu_mappings;
    d["queues"] = s.queues;
    d["events"] = s.events;
    d["open_fds"] = s.open_fds;
    d["doorbell_pages"] = s.doorbell_pages;
    d["dispatches"] = s.dispatches;
    d["doorbells"] = s.doorbells;
    d["sdma_doorbells"] = s.sdma_doorbells;
    d["last_error"] = s.last_error;
    return d;
  });
}
