// A fake KFD for tests: an in-process stand-in for /dev/kfd, the render nodes and the KFD topology in sysfs, served
// through the AMD runtime's OS table (runtimes/amd/amd_os.h, installed with _amd.set_os). Test-only: never shipped.
//
// It answers every call the runtime makes and checks the arguments as the kernel does (ioctl sizes and directions,
// flags, page alignment, handles, that memory is mapped before a queue uses it). GPU memory is host memory at the
// address the runtime reserved (GPU VA = CPU VA). Writing a queue's doorbell executes its dispatch packets at once:
// the kernel object must be a host twin (a code object whose code is a token naming a shared library compiled for
// the host from the same HIP source, see test/amd_twin.py), run over the packet's grid with the packet's kernargs.
// Faults on request: failed ioctls (any errno), hung queues (doorbells ignored), and counts of live mappings for
// leak checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amd_os.h"

namespace tg::amd::fake {

struct GpuModel {
  std::string name;              // for the tests' messages
  std::uint32_t gfx_target_version;  // 110000, 90010, 90402
  std::uint32_t simd_count, simd_per_cu, max_waves_per_simd, lds_size_kb, num_xcc;
  std::uint64_t vram_bytes;
};

// The GPU models a machine may have, by name ("gfx1100", "gfx90a", "gfx942").
GpuModel model(const std::string& name);

// A fresh machine with these GPUs (node 0 is the CPU); returns the OS table to install, a new one each time: calls
// through an earlier install's table (devices of an earlier machine) fail with EBADF/ENODEV and touch nothing of
// this one. Forgets everything before.
const tg_amd_os* install(const std::vector<GpuModel>& gpus);
void uninstall();
// The OS table of the last install (what it returned; null before the first), for tests that call it directly.
const tg_amd_os* table();

// After `skip` more successful ones, the next `count` ioctls number `nr` (0x16: ALLOC_MEMORY_OF_GPU, 0x02:
// CREATE_QUEUE, ...) fail with `err`.
void fail_next(unsigned nr, int err, int count, int skip = 0);
// While `on`, doorbell writes are ignored: every queue hangs, its packets left in the ring (the first doorbell after
// the hang ends runs them).
void hang(bool on);

struct Stats {
  std::uint64_t allocations, gpu_mappings, cpu_mappings, queues, events, open_fds, doorbell_pages;
  std::uint64_t dispatches, doorbells, sdma_doorbells;  // doorbells: of the AQL queues
  std::string last_error;  // what the fake GPU could not execute, if anything
};
Stats stats();

}  // namespace tg::amd::fake
