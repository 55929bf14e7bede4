#include "fake_kfd.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <mutex>
#include <string>

#include "kfd_abi.h"

namespace tg::amd::fake {
namespace {

using namespace tg::amd::kfd;  // NOLINT: the ioctl table

constexpr char kRoot[] = "/sys/devices/virtual/kfd/kfd/topology/nodes/";
constexpr int kFirstFd = 1 << 20;  // far above any real descriptor: a stray one fails loudly in the real libc
constexpr std::uint64_t kDoorbellBase = std::uint64_t{3} << 60;
constexpr char kTwinMagic[8] = {'T', 'G', 'T', 'W', 'I', 'N', '0', '1'};
using TwinLaunch = void (*)(const void* packet, void* kernargs);

struct Gpu {
  GpuModel model;
  std::uint32_t gpu_id, render_minor;
  std::uint64_t vram_used = 0;
  int vm_fd = -1;  // the render fd whose VM was acquired
};
struct Memory {
  std::uint32_t gpu_id;
  std::uint64_t va, size, mmap_offset;
  std::uint32_t flags;
  int gpu_maps = 0;
  bool cpu_mapped = false;
};
struct Queue {
  std::uint32_t gpu_id;
  std::uint32_t type;
  std::uint64_t ring, ring_size, wptr, rptr;
  std::uint64_t doorbell_offset;
};
struct Event {
  bool signaled = false;
  std::uint64_t page;
};
struct Fd {
  enum Kind { Kfd, Render, File } kind;
  std::uint32_t gpu_index = 0;  // Render: which GPU
  std::string content;          // File
  size_t pos = 0;
};

struct State {
  std::recursive_mutex mu;
  bool installed = false;
  std::vector<Gpu> gpus;
  std::map<int, Fd> fds;
  int next_fd = kFirstFd;
  std::map<std::uint64_t, Memory> memory;  // by handle
  std::uint64_t next_handle = 1;
  std::map<std::uint32_t, Queue> queues;
  std::uint32_t next_queue = 1;
  std::map<std::uint32_t, Event> events;
  std::uint32_t next_event = 1;
  std::map<std::uint64_t, std::uint64_t> doorbell_pages;  // CPU address -> mmap offset
  std::map<std::uint64_t, std::uint64_t> cpu_views;  // va -> size of render-node mappings
  struct Fault {
    int err, count, skip;
  };
  std::map<unsigned, Fault> faults;  // by ioctl nr
  bool hung = false;
  std::uint64_t dispatches = 0, doorbells = 0, sdma_doorbells = 0;
  std::string last_error;
  std::map<std::string, TwinLaunch> twins;
  // Which install this is, and the table it handed out (whose `self` is this number): see install.
  std::uint64_t generation = 0;
  const tg_amd_os* table = nullptr;
};

State& st() {
  static State* s = new State();  // never destroyed: devices may close after static destructors run
  return *s;
}

int fail(int err) {
  errno = err;
  return -1;
}

// A call through the table of an earlier install: from a device of an earlier fake machine that is still alive.
bool stale(const State& s, void* self) { return reinterpret_cast<std::uint64_t>(self) != s.generation; }

Gpu* gpu_by_id(State& s, std::uint32_t id) {
  for (Gpu& g : s.gpus)
    if (g.gpu_id == id) return &g;
  return nullptr;
}

std::string properties(const Gpu& g) {
  const GpuModel& m = g.model;
  std::string p;
  auto add = [&p](const char* k, std::uint64_t v) { p += std::string(k) + " " + std::to_string(v) + "\n"; };
  add("cpu_cores_count", 0);
  add("simd_count", m.simd_count);
  add("max_waves_per_simd", m.max_waves_per_simd);
  add("lds_size_in_kb", m.lds_size_kb);
  add("wave_front_size", m.gfx_target_version >= 100000 ? 32 : 64);
  add("simd_per_cu", m.simd_per_cu);
  add("max_slots_scratch_cu", 32);
  add("gfx_target_version", m.gfx_target_version);
  add("vendor_id", 4098);
  add("drm_render_minor", g.render_minor);
  add("num_xcc", m.num_xcc);
  add("local_mem_size", m.vram_bytes);
  return p;
}

// The file at `path` of the fake sysfs, or false.
bool sysfs_file(State& s, const std::string& path, std::string* out) {
  if (path.rfind(kRoot, 0) != 0) return false;
  std::string rest = path.substr(std::strlen(kRoot));
  size_t slash = rest.find('/');
  if (slash == std::string::npos) return false;
  char* end = nullptr;
  unsigned long node = std::strtoul(rest.c_str(), &end, 10);
  if (end != rest.c_str() + slash || node > s.gpus.size()) return false;
  std::string file = rest.substr(slash + 1);
  if (node == 0) {  // the CPU
    if (file == "gpu_id") *out = "0\n";
    else if (file == "properties") *out = "cpu_cores_count 2\nsimd_count 0\n";
    else return false;
    return true;
  }
  const Gpu& g = s.gpus[node - 1];
  if (file == "gpu_id") *out = std::to_string(g.gpu_id) + "\n";
  else if (file == "properties") *out = properties(g);
  else return false;
  return true;
}

// The allocation holding [addr, addr + size), mapped to the GPU `gpu_id`, or nullptr.
Memory* gpu_memory_at(State& s, std::uint32_t gpu_id, std::uint64_t addr, std::uint64_t size) {
  for (auto& [h, m] : s.memory) {
    if (m.gpu_id == gpu_id && m.gpu_maps > 0 && addr >= m.va && addr - m.va <= m.size && m.size - (addr - m.va) >= size)
      return &m;
  }
  return nullptr;
}

// ---- the GPU: executing dispatch packets ----
TwinLaunch twin_at(State& s, const char* code, std::string* err) {
  if (std::memcmp(code, kTwinMagic, sizeof(kTwinMagic)) != 0) {
    *err = "the kernel's code is not a host twin (real AMDGPU machine code cannot run on the fake GPU)";
    return nullptr;
  }
  std::uint32_t len;
  std::memcpy(&len, code + 8, 4);
  if (len == 0 || len > 4096) {
    *err = "malformed host-twin token";
    return nullptr;
  }
  std::string path(code + 12, len);
  auto it = s.twins.find(path);
  if (it != s.twins.end()) return it->second;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *err = std::string("cannot load host twin: ") + dlerror();
    return nullptr;
  }
  auto fn = reinterpret_cast<TwinLaunch>(dlsym(lib, "tg_twin_launch"));
  if (fn == nullptr) {
    *err = "host twin " + path + " has no tg_twin_launch";
    return nullptr;
  }
  s.twins[path] = fn;
  return fn;
}

// Runs one packet; false (with last_error set) for a packet the fake GPU cannot run: the queue then stops there,
// as a real one would hang or fault.
bool execute(State& s, const Queue& q, hsa::DispatchPacket* p) {
  std::uint16_t type = p->header & 0xff;
  if (type != hsa::kPacketKernelDispatch) {
    s.last_error = "packet type " + std::to_string(type) + " is not a kernel dispatch";
    return false;
  }
  if ((p->setup & 3) == 0 || p->workgroup_size_x == 0 || p->workgroup_size_y == 0 || p->workgroup_size_z == 0 ||
      std::uint32_t{p->workgroup_size_x} * p->workgroup_size_y * p->workgroup_size_z > 1024) {
    s.last_error = "dispatch packet with invalid dimensions";
    return false;
  }
  Memory* code = gpu_memory_at(s, q.gpu_id, p->kernel_object, sizeof(elf::KernelDescriptor));
  if (code == nullptr || p->kernel_object % 64 != 0 || !(code->flags & kMemExecutable)) {
    s.last_error = "kernel_object is not a 64-byte aligned descriptor in executable GPU memory";
    return false;
  }
  elf::KernelDescriptor kd;
  std::memcpy(&kd, reinterpret_cast<const void*>(p->kernel_object), sizeof(kd));
  std::uint64_t entry = p->kernel_object + static_cast<std::uint64_t>(kd.kernel_code_entry_byte_offset);
  if (gpu_memory_at(s, q.gpu_id, entry, 16) != code) {
    s.last_error = "the kernel's entry lies outside its code object";
    return false;
  }
  if (kd.kernarg_size != 0 && gpu_memory_at(s, q.gpu_id, p->kernarg_address, kd.kernarg_size) == nullptr) {
    s.last_error = "kernarg_address is not GPU memory of the kernel's kernarg size";
    return false;
  }
  std::string err;
  TwinLaunch run = twin_at(s, reinterpret_cast<const char*>(entry), &err);
  if (run == nullptr) {
    s.last_error = err;
    return false;
  }
  run(p, reinterpret_cast<void*>(p->kernarg_address));
  ++s.dispatches;
  return true;
}

void complete(State& s, const Queue& q, const hsa::DispatchPacket& p) {
  if (p.completion_signal == 0) return;
  if (gpu_memory_at(s, q.gpu_id, p.completion_signal, sizeof(hsa::Signal)) == nullptr) {
    s.last_error = "completion_signal is not GPU memory";
    return;
  }
  auto* sig = reinterpret_cast<hsa::Signal*>(p.completion_signal);
  __atomic_fetch_sub(&sig->value, 1, __ATOMIC_SEQ_CST);
  if (sig->event_mailbox_ptr != 0) {
    *reinterpret_cast<volatile std::uint64_t*>(sig->event_mailbox_ptr) = sig->event_id;
    auto ev = s.events.find(sig->event_id);
    if (ev != s.events.end()) ev->second.signaled = true;
  }
}

// The SDMA engine: COPY_LINEAR, FENCE, TRAP and NOP packets between the read and write pointers (bytes).
void process_sdma(State& s, Queue& q) {
  auto* wptr = reinterpret_cast<volatile std::uint64_t*>(q.wptr);
  auto* rptr = reinterpret_cast<volatile std::uint64_t*>(q.rptr);
  const auto* ring = reinterpret_cast<const std::uint32_t*>(q.ring);
  auto dword = [&](std::uint64_t at) { return ring[(at % q.ring_size) / 4]; };
  while (*rptr < *wptr) {
    std::uint64_t at = *rptr;
    std::uint32_t op = dword(at) & 0xff, sub = (dword(at) >> 8) & 0xff;
    std::uint64_t size;
    if (op == sdma::kOpNop) {
      size = 4;
    } else if (op == sdma::kOpCopy && sub == sdma::kSubOpCopyLinear) {
      std::uint64_t n = (dword(at + 4) & 0x3fffff) + 1;
      std::uint64_t src = dword(at + 12) | (std::uint64_t{dword(at + 16)} << 32);
      std::uint64_t dst = dword(at + 20) | (std::uint64_t{dword(at + 24)} << 32);
      if (gpu_memory_at(s, q.gpu_id, src, n) == nullptr || gpu_memory_at(s, q.gpu_id, dst, n) == nullptr) {
        s.last_error = "SDMA COPY_LINEAR outside the GPU's mapped memory";
        return;
      }
      std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
      size = 4 * sdma::kCopyLinearDwords;
    } else if (op == sdma::kOpFence) {
      std::uint64_t addr = dword(at + 4) | (std::uint64_t{dword(at + 8)} << 32);
      if (gpu_memory_at(s, q.gpu_id, addr, 4) == nullptr || addr % 4 != 0) {
        s.last_error = "SDMA FENCE outside the GPU's mapped memory";
        return;
      }
      *reinterpret_cast<volatile std::uint32_t*>(addr) = dword(at + 12);
      size = 4 * sdma::kFenceDwords;
    } else if (op == sdma::kOpTrap) {
      size = 4 * sdma::kTrapDwords;
    } else {
      s.last_error = "SDMA packet op " + std::to_string(op) + " is not one the fake engine runs";
      return;
    }
    *rptr = at + size;
  }
}

void process(State& s, Queue& q) {
  if (q.type == kQueueTypeSdma) {
    process_sdma(s, q);
    return;
  }
  auto* idx_w = reinterpret_cast<volatile std::uint64_t*>(q.wptr);
  auto* idx_r = reinterpret_cast<volatile std::uint64_t*>(q.rptr);
  std::uint64_t packets = q.ring_size / 64;
  while (*idx_r < *idx_w) {
    auto* p = reinterpret_cast<hsa::DispatchPacket*>(q.ring) + (*idx_r % packets);
    if ((p->header & 0xff) == hsa::kPacketInvalid) break;  // not yet written: the CP waits
    if (!execute(s, q, p)) return;
    hsa::DispatchPacket done = *p;
    __atomic_store_n(&p->header, hsa::kPacketInvalid, __ATOMIC_RELEASE);
    *idx_r = *idx_r + 1;
    complete(s, q, done);
  }
}

// ---- the OS table ----
int f_open(void* self, const char* path, int) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (stale(s, self)) return fail(ENODEV);
  std::string p(path);
  Fd fd{Fd::File, 0, {}, 0};
  if (p == "/dev/kfd") {
    fd.kind = Fd::Kfd;
  } else if (p.rfind("/dev/dri/renderD", 0) == 0) {
    unsigned long minor = std::strtoul(p.c_str() + 16, nullptr, 10);
    bool found = false;
    for (std::uint32_t i = 0; i < s.gpus.size(); ++i) {
      if (s.gpus[i].render_minor == minor) {
        fd = Fd{Fd::Render, i, {}, 0};
        found = true;
      }
    }
    if (!found) return fail(ENOENT);
  } else if (!sysfs_file(s, p, &fd.content)) {
    return fail(ENOENT);
  }
  int n = s.next_fd++;
  s.fds[n] = fd;
  return n;
}

int f_close(void* self, int fd) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (stale(s, self)) return fail(EBADF);  // install forgot that machine's files
  if (s.fds.erase(fd) == 0) return fail(EBADF);
  for (Gpu& g : s.gpus)
    if (g.vm_fd == fd) g.vm_fd = -1;
  return 0;
}

long f_read(void* self, int fd, void* buf, size_t n) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (stale(s, self)) return fail(EBADF);
  auto it = s.fds.find(fd);
  if (it == s.fds.end() || it->second.kind != Fd::File) return fail(EBADF);
  Fd& f = it->second;
  size_t k = std::min(n, f.content.size() - f.pos);
  std::memcpy(buf, f.content.data() + f.pos, k);
  f.pos += k;
  return static_cast<long>(k);
}

int do_ioctl(State& s, unsigned long request, void* arg) {
  switch (request) {
    case kGetVersion: {
      auto* a = static_cast<GetVersionArgs*>(arg);
      a->major_version = 1;
      a->minor_version = 11;
      return 0;
    }
    case kAcquireVm: {
      auto* a = static_cast<AcquireVmArgs*>(arg);
      Gpu* g = gpu_by_id(s, a->gpu_id);
      if (g == nullptr) return fail(EINVAL);
      auto fd = s.fds.find(static_cast<int>(a->drm_fd));
      if (fd == s.fds.end() || fd->second.kind != Fd::Render || s.gpus[fd->second.gpu_index].gpu_id != a->gpu_id)
        return fail(EINVAL);
      if (g->vm_fd != -1 && g->vm_fd != static_cast<int>(a->drm_fd)) return fail(EBUSY);
      g->vm_fd = static_cast<int>(a->drm_fd);
      return 0;
    }
    case kAllocMemory: {
      auto* a = static_cast<AllocMemoryArgs*>(arg);
      Gpu* g = gpu_by_id(s, a->gpu_id);
      if (g == nullptr || g->vm_fd == -1) return fail(EINVAL);
      std::uint32_t kind = a->flags & (kMemVram | kMemGtt | kMemUserptr);
      if (kind != kMemVram && kind != kMemGtt && kind != kMemUserptr) return fail(EINVAL);
      if (a->size == 0 || a->size % kPageSize != 0 || a->va_addr % kPageSize != 0 || a->va_addr == 0)
        return fail(EINVAL);
      if ((a->flags & kMemPublic) && kind != kMemVram) return fail(EINVAL);
      if (kind == kMemUserptr && a->mmap_offset != a->va_addr) return fail(EINVAL);
      for (auto& [h, m] : s.memory)
        if (m.gpu_id == a->gpu_id && a->va_addr < m.va + m.size && m.va < a->va_addr + a->size) return fail(EINVAL);
      if (kind == kMemVram) {
        if (g->vram_used + a->size > g->model.vram_bytes) return fail(ENOMEM);
        g->vram_used += a->size;
      }
      std::uint64_t handle = (std::uint64_t{a->gpu_id} << 32) | s.next_handle++;
      a->handle = handle;
      if (kind != kMemUserptr) a->mmap_offset = (s.next_handle << 24);  // page-aligned, unique per allocation
      s.memory[handle] = Memory{a->gpu_id, a->va_addr, a->size, a->mmap_offset, a->flags};
      if (kind == kMemVram && !(a->flags & kMemPublic)) {
        // VRAM the CPU cannot map still has to be there for the fake GPU (the host twins): back it at the address
        void* p = ::mmap(reinterpret_cast<void*>(a->va_addr), a->size, PROT_READ | PROT_WRITE,
                         MAP_FIXED | MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
          s.memory.erase(handle);
          g->vram_used -= a->size;
          return fail(ENOMEM);
        }
      }
      return 0;
    }
    case kFreeMemory: {
      auto* a = static_cast<FreeMemoryArgs*>(arg);
      auto it = s.memory.find(a->handle);
      if (it == s.memory.end()) return fail(EINVAL);
      if (it->second.gpu_maps > 0) return fail(EBUSY);
      Gpu* g = gpu_by_id(s, it->second.gpu_id);
      if (g != nullptr && (it->second.flags & kMemVram)) g->vram_used -= it->second.size;
      s.memory.erase(it);
      return 0;
    }
    case kMapMemory:
    case kUnmapMemory: {
      auto* a = static_cast<MapMemoryArgs*>(arg);
      auto it = s.memory.find(a->handle);
      if (it == s.memory.end() || a->n_devices == 0 || a->device_ids_array_ptr == 0 || a->n_success > a->n_devices)
        return fail(EINVAL);
      const auto* ids = reinterpret_cast<const std::uint32_t*>(a->device_ids_array_ptr);
      for (std::uint32_t i = a->n_success; i < a->n_devices; ++i) {
        if (gpu_by_id(s, ids[i]) == nullptr) return fail(EINVAL);
        if (request == kMapMemory) {
          ++it->second.gpu_maps;
        } else {
          if (it->second.gpu_maps == 0) return fail(EINVAL);
          --it->second.gpu_maps;
        }
        a->n_success = i + 1;
      }
      return 0;
    }
    case kCreateQueue: {
      auto* a = static_cast<CreateQueueArgs*>(arg);
      Gpu* g = gpu_by_id(s, a->gpu_id);
      if (g == nullptr || g->vm_fd == -1) return fail(EINVAL);
      if (a->queue_type != kQueueTypeComputeAql && a->queue_type != kQueueTypeSdma) return fail(EINVAL);
      if (a->queue_percentage > 100 || a->queue_priority > 15) return fail(EINVAL);
      if (a->ring_size < 1024 || (a->ring_size & (a->ring_size - 1)) != 0) return fail(EINVAL);
      if (gpu_memory_at(s, a->gpu_id, a->ring_base_address, a->ring_size) == nullptr ||
          gpu_memory_at(s, a->gpu_id, a->write_pointer_address, 8) == nullptr ||
          gpu_memory_at(s, a->gpu_id, a->read_pointer_address, 8) == nullptr ||
          a->write_pointer_address % 8 != 0 || a->read_pointer_address % 8 != 0)
        return fail(EFAULT);
      // a compute queue needs its EOP buffer and context save area (SDMA queues have neither)
      bool compute = a->queue_type == kQueueTypeComputeAql;
      if (compute && (a->eop_buffer_size == 0 ||
                      gpu_memory_at(s, a->gpu_id, a->eop_buffer_address, a->eop_buffer_size) == nullptr))
        return fail(EINVAL);
      if (compute && (a->ctx_save_restore_size % kPageSize != 0 || a->ctl_stack_size % kPageSize != 0 ||
                      a->ctl_stack_size >= a->ctx_save_restore_size ||
                      gpu_memory_at(s, a->gpu_id, a->ctx_save_restore_address, a->ctx_save_restore_size) == nullptr))
        return fail(EINVAL);
      std::uint32_t id = s.next_queue++;
      a->queue_id = id;
      a->doorbell_offset = kDoorbellBase | (std::uint64_t{a->gpu_id} << 16) | (std::uint64_t{id % 1024} * 8);
      s.queues[id] = Queue{a->gpu_id, a->queue_type, a->ring_base_address, a->ring_size, a->write_pointer_address,
                           a->read_pointer_address, a->doorbell_offset};
      return 0;
    }
    case kDestroyQueue: {
      auto* a = static_cast<DestroyQueueArgs*>(arg);
      return s.queues.erase(a->queue_id) ? 0 : fail(EINVAL);
    }
    case kCreateEvent: {
      auto* a = static_cast<CreateEventArgs*>(arg);
      if (a->event_type != kEventSignal) return fail(EINVAL);
      bool page_ok = false;
      for (auto& [h, m] : s.memory) page_ok = page_ok || (h == a->event_page_offset && m.size >= kEventPageSize);
      if (!page_ok) return fail(EINVAL);
      std::uint32_t id = s.next_event++;
      a->event_id = id;
      a->event_slot_index = id;
      a->event_trigger_data = id;
      s.events[id] = Event{false, a->event_page_offset};
      return 0;
    }
    case kDestroyEvent: {
      auto* a = static_cast<DestroyEventArgs*>(arg);
      return s.events.erase(a->event_id) ? 0 : fail(EINVAL);
    }
    case kWaitEvents: {
      auto* a = static_cast<WaitEventsArgs*>(arg);
      if (a->num_events == 0 || a->events_ptr == 0) return fail(EINVAL);
      auto* data = reinterpret_cast<EventData*>(a->events_ptr);
      bool all = true, any = false;
      for (std::uint32_t i = 0; i < a->num_events; ++i) {
        auto ev = s.events.find(data[i].event_id);
        if (ev == s.events.end()) return fail(EINVAL);
        all = all && ev->second.signaled;
        any = any || ev->second.signaled;
      }
      bool done = a->wait_for_all ? all : any;
      if (done) {
        for (std::uint32_t i = 0; i < a->num_events; ++i) s.events[data[i].event_id].signaled = false;  // auto reset
        a->wait_result = kWaitComplete;
      } else {
        a->wait_result = kWaitTimeout;  // nothing runs behind the caller's back: no need to sleep `timeout` ms
      }
      return 0;
    }
    default:
      return fail(ENOTTY);
  }
}

// the argument size and direction each request must have (its number encodes them, as the kernel checks)
bool known_request(unsigned long request) {
  for (unsigned long r : {kGetVersion, kCreateQueue, kDestroyQueue, kCreateEvent, kDestroyEvent, kWaitEvents,
                          kAcquireVm, kAllocMemory, kFreeMemory, kMapMemory, kUnmapMemory})
    if (r == request) return true;
  return false;
}

int f_ioctl(void* self, int fd, unsigned long request, void* arg) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (stale(s, self)) return fail(EBADF);
  auto it = s.fds.find(fd);
  if (it == s.fds.end()) return fail(EBADF);
  if (it->second.kind != Fd::Kfd) return fail(ENOTTY);
  if (!known_request(request)) return fail(ENOTTY);
  if (arg == nullptr) return fail(EFAULT);
  auto fault = s.faults.find(static_cast<unsigned>(ioc_nr(request)));
  if (fault != s.faults.end()) {
    State::Fault& f = fault->second;
    if (f.skip > 0) {
      --f.skip;
    } else {
      int err = f.err;
      if (--f.count <= 0) s.faults.erase(fault);
      return fail(err);
    }
  }
  return do_ioctl(s, request, arg);
}

void* f_mmap(void* self, void* addr, size_t len, int prot, int flags, int fd, std::int64_t offset) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (fd == -1) return ::mmap(addr, len, prot, flags, -1, static_cast<off_t>(offset));  // address reservations
  if (stale(s, self)) {
    errno = EBADF;
    return MAP_FAILED;
  }
  auto it = s.fds.find(fd);
  if (it == s.fds.end()) {
    errno = EBADF;
    return MAP_FAILED;
  }
  if (it->second.kind == Fd::Render) {
    for (auto& [h, m] : s.memory) {
      if (m.mmap_offset != static_cast<std::uint64_t>(offset) || (m.flags & kMemUserptr)) continue;
      bool cpu_visible = (m.flags & kMemGtt) || (m.flags & kMemPublic);
      if (!cpu_visible || m.va != reinterpret_cast<std::uint64_t>(addr) || m.size != len || !(flags & MAP_FIXED) ||
          !(flags & MAP_SHARED) || m.cpu_mapped) {
        errno = EINVAL;
        return MAP_FAILED;
      }
      void* p = ::mmap(addr, len, prot, MAP_FIXED | MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return p;
      m.cpu_mapped = true;
      s.cpu_views[m.va] = len;
      return p;
    }
    errno = EINVAL;
    return MAP_FAILED;
  }
  if (it->second.kind == Fd::Kfd) {
    std::uint64_t off = static_cast<std::uint64_t>(offset);
    if ((off & kDoorbellBase) != kDoorbellBase || len != kDoorbellPageSize || off % kDoorbellPageSize != 0) {
      errno = EINVAL;
      return MAP_FAILED;
    }
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return p;
    s.doorbell_pages[reinterpret_cast<std::uint64_t>(p)] = off;  // a write there rings the queue of that offset
    return p;
  }
  errno = ENODEV;
  return MAP_FAILED;
}

int f_munmap(void* self, void* addr, size_t len) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (stale(s, self)) return ::munmap(addr, len);  // its own memory, still to be given back; nothing of this machine
  auto key = reinterpret_cast<std::uint64_t>(addr);
  if (s.cpu_views.erase(key)) {
    for (auto& [h, m] : s.memory)
      if (m.va == key) m.cpu_mapped = false;
  }
  s.doorbell_pages.erase(key);
  return ::munmap(addr, len);
}

void f_ring_doorbell(void* self, volatile std::uint64_t* addr, std::uint64_t value) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  *addr = value;
  if (stale(s, self)) return;  // a queue of an earlier machine: it never runs (its waits time out)
  auto at = reinterpret_cast<std::uint64_t>(addr);
  for (const auto& [base, offset] : s.doorbell_pages) {
    if (at < base || at - base >= kDoorbellPageSize) continue;
    for (auto& [id, q] : s.queues) {
      if (q.doorbell_offset != offset + (at - base)) continue;
      ++(q.type == kQueueTypeSdma ? s.sdma_doorbells : s.doorbells);
      if (!s.hung) process(s, q);
      return;
    }
  }
  s.last_error = "a doorbell write to no queue's doorbell";
}


}  // namespace

GpuModel model(const std::string& name) {
  // (name, gfx_target_version, SIMDs, SIMDs a CU, waves a SIMD, LDS KB, XCCs, VRAM)
  if (name == "gfx1100") return {name, 110000, 96 * 2, 2, 16, 64, 1, std::uint64_t{24} << 30};  // RX 7900 XTX
  if (name == "gfx90a") return {name, 90010, 110 * 4, 4, 8, 64, 1, std::uint64_t{64} << 30};    // MI210
  if (name == "gfx942") return {name, 90402, 304 * 4, 4, 8, 64, 8, std::uint64_t{192} << 30};   // MI300X
  throw std::invalid_argument("the fake KFD has no GPU model " + name + " (gfx1100, gfx90a, gfx942)");
}

const tg_amd_os* install(const std::vector<GpuModel>& gpus) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  s.gpus.clear();
  s.fds.clear();
  s.memory.clear();
  s.queues.clear();
  s.events.clear();
  s.doorbell_pages.clear();
  s.cpu_views.clear();
  s.faults.clear();
  s.hung = false;
  s.dispatches = s.doorbells = s.sdma_doorbells = 0;
  s.last_error.clear();
  std::uint32_t i = 0;
  for (const GpuModel& m : gpus) {
    s.gpus.push_back(Gpu{m, 0x1000 + 0x111 * (i + 1), 128 + i});
    ++i;
  }
  // NOTE: a fresh table each install. The runtime keys its open GPUs and its KFD by table (amd_os.h), so a device of
  // an earlier machine that a test kept alive is never handed out for this one, and its own calls, which carry the
  // old generation, fail (or, for its doorbells and unmaps, touch nothing here) instead of reaching this machine's
  // files, memory and queues through numbers that happen to match. Tables must outlive every device that holds one
  // (amd_os.h), so each is kept for the process's life: a few dozen bytes an install.
  ++s.generation;
  s.table = new tg_amd_os{reinterpret_cast<void*>(s.generation), &f_open, &f_close, &f_read, &f_ioctl, &f_mmap,
                          &f_munmap, &f_ring_doorbell};
  s.installed = true;
  return s.table;
}

const tg_amd_os* table() {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  return s.table;
}

void uninstall() {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  s.installed = false;
  s.gpus.clear();
}

void fail_next(unsigned nr, int err, int count, int skip) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  s.faults[nr] = State::Fault{err, count, skip};
}

void hang(bool on) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  s.hung = on;
}

Stats stats() {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  Stats out{};
  out.allocations = s.memory.size();
  for (auto& [h, m] : s.memory) out.gpu_mappings += static_cast<std::uint64_t>(m.gpu_maps);
  out.cpu_mappings = s.cpu_views.size();
  out.queues = s.queues.size();
  out.events = s.events.size();
  out.open_fds = s.fds.size();
  out.doorbell_pages = s.doorbell_pages.size();
  out.dispatches = s.dispatches;
  out.doorbells = s.doorbells;
  out.sdma_doorbells = s.sdma_doorbells;
  out.last_error = s.last_error;
  return out;
}

}  // namespace tg::amd::fake
