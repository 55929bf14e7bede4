// The kernel and hardware interfaces the AMD runtime speaks, declared here as data: the KFD ioctls of
// linux/kfd_ioctl.h (API 1.11, the one Debian 12 ships; that header cannot be included there, as it needs libdrm's
// drm/drm.h), the HSA AQL dispatch packet and signal the command processor reads, and the kernel descriptor of
// LLVM's AMDGPU code objects (AMDGPUUsage). Shared with the fake KFD of the tests (test/native), so both sides agree
// on the layout; the sizes are checked against the kernel's below.
#pragma once

#include <cstdint>

namespace tg::amd::kfd {

// ---- ioctl request numbers: _IOC(dir, 'K', nr, sizeof(args)) ----
inline constexpr unsigned long kIocWrite = 1, kIocRead = 2;
constexpr unsigned long ioc(unsigned long dir, unsigned long nr, unsigned long size) {
  return (dir << 30) | (size << 16) | (static_cast<unsigned long>('K') << 8) | nr;
}
constexpr unsigned long ioc_nr(unsigned long request) { return request & 0xff; }
constexpr unsigned long ioc_size(unsigned long request) { return (request >> 16) & 0x3fff; }

struct GetVersionArgs {
  std::uint32_t major_version, minor_version;
};
struct CreateQueueArgs {
  std::uint64_t ring_base_address, write_pointer_address, read_pointer_address, doorbell_offset;
  std::uint32_t ring_size, gpu_id, queue_type, queue_percentage, queue_priority, queue_id;
  std::uint64_t eop_buffer_address, eop_buffer_size, ctx_save_restore_address;
  std::uint32_t ctx_save_restore_size, ctl_stack_size;
};
struct DestroyQueueArgs {
  std::uint32_t queue_id, pad;
};
struct CreateEventArgs {
  std::uint64_t event_page_offset;
  std::uint32_t event_trigger_data, event_type, auto_reset, node_id, event_id, event_slot_index;
};
struct DestroyEventArgs {
  std::uint32_t event_id, pad;
};
struct EventData {
  std::uint8_t exception_data[32];  // a union of memory/hw exception records, filled by KFD
  std::uint64_t kfd_event_data_ext;
  std::uint32_t event_id, pad;
};
struct WaitEventsArgs {
  std::uint64_t events_ptr;
  std::uint32_t num_events, wait_for_all, timeout, wait_result;
};
struct AcquireVmArgs {
  std::uint32_t drm_fd, gpu_id;
};
struct AllocMemoryArgs {
  std::uint64_t va_addr, size, handle, mmap_offset;
  std::uint32_t gpu_id, flags;
};
struct FreeMemoryArgs {
  std::uint64_t handle;
};
struct MapMemoryArgs {  // MAP_MEMORY_TO_GPU and UNMAP_MEMORY_FROM_GPU
  std::uint64_t handle, device_ids_array_ptr;
  std::uint32_t n_devices, n_success;
};

static_assert(sizeof(GetVersionArgs) == 8 && sizeof(CreateQueueArgs) == 88 && sizeof(DestroyQueueArgs) == 8);
static_assert(sizeof(CreateEventArgs) == 32 && sizeof(DestroyEventArgs) == 8 && sizeof(EventData) == 48);
static_assert(sizeof(WaitEventsArgs) == 24 && sizeof(AcquireVmArgs) == 8 && sizeof(AllocMemoryArgs) == 40);
static_assert(sizeof(FreeMemoryArgs) == 8 && sizeof(MapMemoryArgs) == 24);

inline constexpr unsigned long kGetVersion = ioc(kIocRead, 0x01, sizeof(GetVersionArgs));
inline constexpr unsigned long kCreateQueue = ioc(kIocRead | kIocWrite, 0x02, sizeof(CreateQueueArgs));
inline constexpr unsigned long kDestroyQueue = ioc(kIocRead | kIocWrite, 0x03, sizeof(DestroyQueueArgs));
inline constexpr unsigned long kCreateEvent = ioc(kIocRead | kIocWrite, 0x08, sizeof(CreateEventArgs));
inline constexpr unsigned long kDestroyEvent = ioc(kIocWrite, 0x09, sizeof(DestroyEventArgs));
inline constexpr unsigned long kWaitEvents = ioc(kIocRead | kIocWrite, 0x0C, sizeof(WaitEventsArgs));
inline constexpr unsigned long kAcquireVm = ioc(kIocWrite, 0x15, sizeof(AcquireVmArgs));
inline constexpr unsigned long kAllocMemory = ioc(kIocRead | kIocWrite, 0x16, sizeof(AllocMemoryArgs));
inline constexpr unsigned long kFreeMemory = ioc(kIocWrite, 0x17, sizeof(FreeMemoryArgs));
inline constexpr unsigned long kMapMemory = ioc(kIocRead | kIocWrite, 0x18, sizeof(MapMemoryArgs));
inline constexpr unsigned long kUnmapMemory = ioc(kIocRead | kIocWrite, 0x19, sizeof(MapMemoryArgs));

// The ioctl's name for error messages ("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"); "AMDKFD_IOC_<nr>" for others.
const char* ioctl_name(unsigned long request);

inline constexpr std::uint32_t kQueueTypeSdma = 0x1, kQueueTypeComputeAql = 0x2;
inline constexpr std::uint32_t kEventSignal = 0;
inline constexpr std::uint32_t kWaitComplete = 0, kWaitTimeout = 1;

// ALLOC_MEMORY_OF_GPU flags
inline constexpr std::uint32_t kMemVram = 1u << 0, kMemGtt = 1u << 1, kMemUserptr = 1u << 2;
inline constexpr std::uint32_t kMemWritable = 1u << 31, kMemExecutable = 1u << 30, kMemPublic = 1u << 29;
inline constexpr std::uint32_t kMemNoSubstitute = 1u << 28, kMemCoherent = 1u << 26, kMemUncached = 1u << 25;

inline constexpr std::uint64_t kPageSize = 4096;
inline constexpr std::uint64_t kDoorbellPageSize = 0x2000;  // the doorbell mapping of /dev/kfd, per process
inline constexpr std::uint64_t kEventPageSize = 0x8000;     // the event mailbox page (8 bytes a slot)

}  // namespace tg::amd::kfd

namespace tg::amd::hsa {

// hsa_kernel_dispatch_packet_t: 64 bytes in the AQL ring. The header is written last (16-bit release store): until
// then the command processor sees the slot as INVALID and waits.
struct DispatchPacket {
  std::uint16_t header, setup;
  std::uint16_t workgroup_size_x, workgroup_size_y, workgroup_size_z, reserved0;
  std::uint32_t grid_size_x, grid_size_y, grid_size_z;  // in work-items, not workgroups
  std::uint32_t private_segment_size, group_segment_size;
  std::uint64_t kernel_object;     // address of the 64-byte kernel descriptor
  std::uint64_t kernarg_address;
  std::uint64_t reserved2;
  std::uint64_t completion_signal;  // address of an amd_signal_t, or 0
};
static_assert(sizeof(DispatchPacket) == 64);

inline constexpr std::uint16_t kPacketInvalid = 1, kPacketKernelDispatch = 2;
inline constexpr int kHeaderBarrier = 8, kHeaderAcquireScope = 9, kHeaderReleaseScope = 11;
inline constexpr std::uint16_t kScopeSystem = 2;
inline constexpr int kSetupDimensions = 0;

// amd_signal_t: what the CP decrements on completion (value), then, if a mailbox is set, it writes event_id there
// and raises the interrupt that wakes AMDKFD_IOC_WAIT_EVENTS.
struct Signal {
  std::int64_t kind;  // 1: user signal
  volatile std::int64_t value;
  std::uint64_t event_mailbox_ptr;
  std::uint32_t event_id, reserved1;
  std::uint64_t start_ts, end_ts;
  std::uint64_t queue_ptr;
  std::uint32_t reserved3[2];
};
static_assert(sizeof(Signal) == 64);

// The read and write indices of an AQL queue, in packets, as the CP reads and writes them (ROCr keeps them in its
// amd_queue_t; this runtime keeps them in a page of their own, passed to CREATE_QUEUE).
struct QueueIndices {
  volatile std::uint64_t write_index;
  std::uint64_t pad0[7];
  volatile std::uint64_t read_index;
  std::uint64_t pad1[7];
};

}  // namespace tg::amd::hsa

namespace tg::amd::sdma {

// SDMA packets (SDMA 4 and later: gfx9, gfx10, gfx11): dword 0 is op | sub_op << 8. The ring's read and write
// pointers count bytes.
inline constexpr std::uint32_t kOpNop = 0, kOpCopy = 1, kOpFence = 5, kOpTrap = 6;
inline constexpr std::uint32_t kSubOpCopyLinear = 0;
// COPY_LINEAR: op, count - 1 (bytes; 22 bits on SDMA 4), parameters (0), src lo, src hi, dst lo, dst hi
inline constexpr std::uint32_t kCopyLinearDwords = 7;
inline constexpr std::uint64_t kMaxCopyBytes = std::uint64_t{1} << 22;
// FENCE: op, address lo, hi, 32-bit value (written when every earlier packet is done)
inline constexpr std::uint32_t kFenceDwords = 4;
// TRAP: op, interrupt context (raises an interrupt: the event of WAIT_EVENTS)
inline constexpr std::uint32_t kTrapDwords = 2;

}  // namespace tg::amd::sdma

namespace tg::amd::elf {

inline constexpr std::uint16_t kMachineAmdgpu = 224;  // EM_AMDGPU
inline constexpr std::uint8_t kOsAbiAmdgpuHsa = 64;   // ELFOSABI_AMDGPU_HSA

// llvm::amdhsa::kernel_descriptor_t, 64 bytes, 64-byte aligned in .rodata under the symbol "<kernel>.kd".
struct KernelDescriptor {
  std::uint32_t group_segment_fixed_size, private_segment_fixed_size, kernarg_size, reserved0;
  std::int64_t kernel_code_entry_byte_offset;  // from the descriptor's own address
  std::uint8_t reserved1[20];
  std::uint32_t compute_pgm_rsrc3, compute_pgm_rsrc1, compute_pgm_rsrc2;
  std::uint16_t kernel_code_properties, kernarg_preload;
  std::uint8_t reserved2[4];
};
static_assert(sizeof(KernelDescriptor) == 64);

inline constexpr std::uint16_t kPropDispatchPtr = 1u << 1, kPropKernargSegmentPtr = 1u << 3;
inline constexpr std::uint16_t kPropWave32 = 1u << 10;

}  // namespace tg::amd::elf
